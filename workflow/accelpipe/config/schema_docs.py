"""docs/configuration.md, written from the config schema (schemas/config.schema.yaml), the one
source of keys and defaults: every key as a dotted path with its type, default, allowed values
and description.

    python -m accelpipe.config.schema_docs docs/configuration.md     # `make docs`
    python -m accelpipe.config.schema_docs --check docs/configuration.md

The walk follows `$ref`s into `definitions` (a workload's `train`, `profile` and `benchmark`
blocks are listed under each workload that has them), maps whose keys are names
(`additionalProperties` with a schema, e.g. `runs` and `grid`: one `<name>` row for the
values), and `oneOf` / `anyOf` (each alternative's type and allowed values). The output is a
function of the schema alone: same schema, same bytes. Imports no framework.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelpipe.config import registry
from accelpipe.config.schema import load as load_config_schema

SCHEMA_PATH = Path(__file__).parents[1] / "schemas" / "config.schema.yaml"
SCHEMA_NAME = "workflow/accelpipe/schemas/config.schema.yaml"
REGENERATE = "make docs"

INTRO = """\
The config is validated against the schema,
[`{schema}`](../{schema}), when Snakemake starts; its
defaults are the reference recipe, and `config.yaml` only shrinks that recipe to minutes on
a CPU (`.test/config.yaml`, the tests' tiny config, to seconds). An unknown or mistyped key
stops the run before anything executes, with a message naming it, e.g. `invalid config:
unknown config key '{workload}.train.lrr'`. Any key can be overridden with `--config`, e.g.
`--config backend=cuda` or `--config '{workload}={{"train":{{"lr":0.0005}}}}'`; values given
there as strings are converted to the schema's types.

Each stage receives only its own slice of the config, so changing a key re-runs only the
stages that read it ([stages.md](stages.md)). A `runs` entry overrides keys of its
workload's `train` block for that run; the keys it leaves out keep the `train` block's
values.

Columns: the key as a dotted path (`<name>`: a name you choose), its JSON type, the
schema's default (`—`: none, the key is optional), what the schema allows, and what the key
does."""


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    allowed: str
    description: str


class Reference:
    """Turns schema nodes into rows, resolving `#/definitions/<name>` references."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.definitions: dict[str, Any] = schema.get("definitions", {})
        self.listed: dict[str, str] = {}  # definition name -> the first dotted path listing it

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        """The node with its `$ref` followed; keys beside the `$ref` win (a description)."""
        seen: set[str] = set()
        while "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("#/definitions/") or ref in seen:
                raise ValueError(f"unsupported or cyclic $ref {ref!r}")
            seen.add(ref)
            target = self.definitions[ref.removeprefix("#/definitions/")]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return node

    # -- the columns ---------------------------------------------------------------------

    def type_of(self, node: dict[str, Any]) -> str:
        node = self.resolve(node)
        for word in ("oneOf", "anyOf"):
            if word in node:
                return " or ".join(dict.fromkeys(self.type_of(alt) for alt in node[word]))
        types = node.get("type")
        if types is None:
            if "enum" in node:
                types = sorted({_json_type(v) for v in node["enum"]})
            elif "const" in node:
                types = [_json_type(node["const"])]
            else:
                return "any"
        types = [types] if isinstance(types, str) else list(types)
        words = []
        for t in types:
            if t == "array" and isinstance(node.get("items"), dict):
                words.append(f"array of {self.type_of(node['items'])}")
            else:
                words.append(t)
        return " or ".join(words)

    def allowed_of(self, node: dict[str, Any]) -> str:
        node = self.resolve(node)
        parts: list[str] = []
        for word, joiner in (("oneOf", "one of: "), ("anyOf", "any of: ")):
            if word in node:
                alts = [
                    f"{self.type_of(alt)}" + (f" ({a})" if (a := self.allowed_of(alt)) else "")
                    for alt in node[word]
                ]
                parts.append(joiner + "; ".join(alts))
        if "enum" in node:
            parts.append(", ".join(_code(v) for v in node["enum"]))
        if "const" in node:
            parts.append(f"only {_code(node['const'])}")
        parts += _bounds(node)
        if "multipleOf" in node:
            parts.append(f"multiple of {_number(node['multipleOf'])}")
        if "pattern" in node:
            parts.append(f"matches `{node['pattern']}`")
        if "minLength" in node:
            parts.append(f"at least {node['minLength']} characters")
        low, high = node.get("minItems"), node.get("maxItems")
        if low is not None and low == high:
            parts.append(f"{low} items")
        else:
            if low is not None:
                parts.append(f"at least {low} item{'s' if low != 1 else ''}")
            if high is not None:
                parts.append(f"at most {high} items")
        if node.get("uniqueItems"):
            parts.append("no repeats")
        if isinstance(node.get("items"), dict) and (each := self.allowed_of(node["items"])):
            parts.append(f"each: {each}")
        return "; ".join(parts)

    def default_of(self, node: dict[str, Any]) -> str:
        node = self.resolve(node)
        if "default" not in node:
            return "—"
        return _code(node["default"])

    def description_of(self, node: dict[str, Any]) -> str:
        return " ".join(str(self.resolve(node).get("description", "")).split())

    # -- the walk ------------------------------------------------------------------------

    def rows(self, node: dict[str, Any], path: str) -> Iterator[Row]:
        """The row of `node` at `path`, then those of every key under it."""
        ref = node.get("$ref")
        resolved = self.resolve(node)
        yield Row(
            path,
            self.type_of(node),
            self.default_of(node),
            self.allowed_of(node),
            self.description_of(node),
        )
        if ref is not None:
            self.listed.setdefault(ref.removeprefix("#/definitions/"), path)
        yield from self.children(resolved, path)

    def children(self, node: dict[str, Any], path: str) -> Iterator[Row]:
        for key, sub in node.get("properties", {}).items():
            yield from self.rows(sub, f"{path}.{key}" if path else key)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            yield from self._named(node, extra, path)
        for word in ("oneOf", "anyOf"):
            for i, alt in enumerate(node.get(word, ()), start=1):
                alt = self.resolve(alt)
                if alt.get("properties") or isinstance(alt.get("additionalProperties"), dict):
                    label = alt.get("title", f"form {i}")
                    for row in self.children(alt, path):
                        yield _note(row, f"({word} {label}) ")

    def _named(self, node: dict[str, Any], value: dict[str, Any], path: str) -> Iterator[Row]:
        """The `<name>` row of a map whose keys the user chooses (runs, grid)."""
        names = self.resolve(node.get("propertyNames", {}))
        key = f"{path}.<name>"
        allowed = self.allowed_of(value)
        if names_allowed := self.allowed_of(names):
            allowed = "; ".join(filter(None, (f"`<name>` {names_allowed}", allowed)))
        ref = value.get("$ref")
        listed = self.listed.get(ref.removeprefix("#/definitions/")) if ref else None
        if listed is not None:
            # the values are a block listed above (a run's overrides of `train`): not again
            description = f"any keys of `{listed}` (listed above), each overriding its value"
            yield Row(key, self.type_of(value), "—", allowed, description)
            return
        yield Row(key, self.type_of(value), "—", allowed, self.description_of(value))
        if ref is not None:
            self.listed.setdefault(ref.removeprefix("#/definitions/"), key)
        yield from self.children(self.resolve(value), key)


def _note(row: Row, prefix: str) -> Row:
    return Row(row.key, row.type, row.default, row.allowed, prefix + row.description)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _number(value: Any) -> str:
    return json.dumps(value)


def _code(value: Any) -> str:
    """A value as the YAML a user writes: bare strings, JSON for the rest."""
    text = value if isinstance(value, str) and value else json.dumps(value, separators=(", ", ": "))
    return f"`{text}`"


def _bounds(node: dict[str, Any]) -> list[str]:
    out = []
    for word, sign in (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
    ):
        if word in node and not isinstance(node[word], bool):
            out.append(f"{sign} {_number(node[word])}")
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _prose(text: str) -> str:
    """Schema text as Markdown text: a `<name>` outside code spans is no HTML tag."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("<", "\\<") for i, p in enumerate(parts))


def _table(rows: list[Row]) -> list[str]:
    lines = ["| key | type | default | allowed | description |", "|---|---|---|---|---|"]
    for r in rows:
        cells = (f"`{r.key}`", r.type, r.default, r.allowed, _prose(r.description))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def render(schema: dict[str, Any]) -> str:
    """The whole page: an intro, then a section per top-level key (a sub-section per child of
    a key whose children are all blocks, as `datasets`), each a table of dotted keys."""
    ref = Reference(schema)
    out = [
        "<!-- Generated from the config schema by `python -m accelpipe.config.schema_docs "
        f"docs/configuration.md` ({REGENERATE}): edit {SCHEMA_NAME} or a "
        "workload's workloads/<name>/schema.yaml, not this file. -->",
        "",
        "# Configuration reference",
        "",
    ]
    if description := " ".join(str(schema.get("description", "")).split()):
        out += [_prose(description), ""]
    out += [INTRO.format(schema=SCHEMA_NAME, workload=next(iter(registry.WORKLOADS))), ""]
    top = schema.get("properties", {})
    scalars = [k for k, v in top.items() if not _is_block(ref.resolve(v))]
    if scalars:
        out += ["## Top-level keys", ""]
        out += _table([row for k in scalars for row in ref.rows(top[k], k)])
        out.append("")
    for key, node in top.items():
        resolved = ref.resolve(node)
        if not _is_block(resolved):
            continue
        out += [f"## `{key}`", ""]
        if description := ref.description_of(node):
            out += [_prose(description), ""]
        children = resolved.get("properties", {})
        if children and all(_is_block(ref.resolve(v)) for v in children.values()):
            for child, sub in children.items():
                out += [f"### `{key}.{child}`", ""]
                if description := ref.description_of(sub):
                    out += [_prose(description), ""]
                out += _table(list(ref.rows(sub, f"{key}.{child}"))[1:])
                out.append("")
        else:
            out += _table(list(ref.rows(node, key))[1:])
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _is_block(node: dict[str, Any]) -> bool:
    return bool(node.get("properties"))


def load_schema(path: Path = SCHEMA_PATH) -> dict[str, Any]:
    """The schema the config is validated against: `path` with each workload's block."""
    return load_config_schema(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m accelpipe.config.schema_docs", description=__doc__
    )
    parser.add_argument("output", type=Path, help="the page to write, e.g. docs/configuration.md")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the page differs"
    )
    args = parser.parse_args(argv)
    text = render(load_schema())
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
