"""The reference recipe each workload's schema defaults follow, written down as data
(workloads/<workload>/recipe.yaml, checked against schemas/recipe.schema.yaml): every
hyperparameter as its source states it, the file and commit it is read from, the config key it
maps to and our default, and for each difference the reason.

`recipe_id` names the recipe (its release or commit): a quality target or throughput figure
belongs to the recipe we run only where its `recipe` is this id (accelpipe.config.quality,
accelpipe.performance). `default_mismatches` holds the table to the schema's defaults (the
test runs it), and `python -m accelpipe.config.recipes docs` writes each table into
docs/<workload>.md between its markers. No framework: Snakemake may read it while planning.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from accelpipe import REPO
from accelpipe.config import registry
from accelpipe.core.errors import ConfigError
from accelpipe.core.io import read_yaml

RECIPES_DIR = Path(__file__).parents[1] / "workloads"
SCHEMA = Path(__file__).parents[1] / "schemas" / "recipe.schema.yaml"
BEGIN = (
    "<!-- recipe table: generated from workflow/accelpipe/workloads/{workload}/recipe.yaml by "
    "`python -m accelpipe.config.recipes docs`; edit the yaml, not this table -->"
)
END = "<!-- end of recipe table -->"
DOCS_ANCHOR = "## Published figures"  # the table goes before this heading where a page has it


@dataclass(frozen=True)
class Setting:
    setting: str
    reference: Any  # in the terms of `key` where it has one
    source: str  # <source name>:<file>
    key: str | None  # our config key under the workload
    ours: Any  # our schema default, or what the code does
    stated: str | None = None
    equivalent: str | None = None
    deviation: str | None = None

    @property
    def differs(self) -> bool:
        return not same_value(self.reference, self.ours)


@dataclass(frozen=True)
class Recipe:
    workload: str
    id: str
    name: str
    sources: Mapping[str, Mapping[str, str]]
    settings: tuple[Setting, ...]


def recipe_path(workload: str) -> Path:
    return RECIPES_DIR / registry.workload(workload).name / "recipe.yaml"


def same_value(a: Any, b: Any) -> bool:
    """Equal values, numbers within float rounding (1e-4 and 0.0001 are one value)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _check(path: Path, data: dict[str, Any], workload: str) -> None:
    """Beyond the schema: the file is the workload's, each source is named, and a difference
    has its reason (or its equivalence), a match has none."""
    if data["workload"] != workload:
        raise ConfigError(f"{path}: workload is {data['workload']!r}, not {workload!r}")
    for i, row in enumerate(data["settings"]):
        where = f"{path}: settings.{i} ({row['setting']})"
        if row["source"].split(":", 1)[0] not in data["sources"]:
            raise ConfigError(f"{where}: source {row['source']!r} names no entry of sources")
        reasons = [k for k in ("deviation", "equivalent") if k in row]
        if same_value(row["reference"], row["ours"]) and reasons:
            raise ConfigError(f"{where}: reference and ours are equal, yet it has a {reasons[0]}")
        if not same_value(row["reference"], row["ours"]) and len(reasons) != 1:
            raise ConfigError(
                f"{where}: reference {row['reference']!r} differs from ours {row['ours']!r}: "
                "give exactly one of deviation (why ours differs) or equivalent (why it does not)"
            )


@cache
def load(workload: str) -> Recipe:
    """The workload's recipe table; a file that breaks its schema, or whose rows do not say why
    they differ, names itself and the row."""
    path = recipe_path(workload)
    try:
        data = read_yaml(path)
    except (OSError, yaml.YAMLError) as err:
        reason = " ".join(str(err).split())
        raise ConfigError(f"{path}: cannot read the recipe ({reason})") from None
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft7Validator(read_yaml(SCHEMA)).iter_errors(data)
    )
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "top level"
        raise ConfigError(f"{path}: {where}: {error.message}")
    _check(path, data, registry.workload(workload).name)
    return Recipe(
        workload=data["workload"],
        id=data["recipe"]["id"],
        name=data["recipe"]["name"],
        sources=data["sources"],
        settings=tuple(Setting(**row) for row in data["settings"]),
    )


def recipe_id(workload: str) -> str:
    """The id of the recipe the workload's defaults follow."""
    return load(workload).id


def _lookup(block: Mapping[str, Any], key: str) -> Any:
    value: Any = block
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(key)
        value = value[part]
    return value


def default_mismatches(workload: str, defaults: Mapping[str, Any]) -> list[str]:
    """Rows whose `ours` is not the schema's default of their key (`defaults`: the validated
    empty config's block of the workload), or whose key the schema lacks."""
    found = []
    for row in load(workload).settings:
        if row.key is None:
            continue
        try:
            default = _lookup(defaults, row.key)
        except KeyError:
            found.append(f"{workload}.{row.key}: no such key in the config schema")
            continue
        if not same_value(default, row.ours):
            found.append(
                f"{workload}.{row.key} ({row.setting}): the table says ours is {row.ours!r}, "
                f"the schema's default is {default!r}"
            )
    return found


# -- the docs table ---------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, str):
        text = value
    else:
        text = f"`{value}`"
    return " ".join(text.split()).replace("|", "\\|")


def _source(recipe: Recipe, source: str) -> str:
    name, file = source.split(":", 1)
    return f"{name}: `{file}`"


def _note(row: Setting) -> str:
    if row.deviation:
        return f"**differs**: {_cell(row.deviation)}"
    if row.equivalent:
        return f"same: {_cell(row.equivalent)}"
    return "same"


def render(workload: str) -> str:
    """The markdown section of docs/<workload>.md, markers included."""
    recipe = load(workload)
    lines = [BEGIN.format(workload=recipe.workload), "## The reference recipe", ""]
    lines.append(f"Recipe `{recipe.id}`: {_cell(recipe.name)}. Read from:")
    lines.append("")
    for name, src in recipe.sources.items():
        release = f" (release {src['release']})" if src.get("release") else ""
        note = f"; {_cell(src['note'])}" if src.get("note") else ""
        lines.append(
            f"- `{name}`: {src['repo']} `{src['root']}` at commit `{src['commit']}`{release}{note}"
        )
    lines += [
        "",
        "| setting | reference | source | our key | our default | |",
        "|---|---|---|---|---|---|",
    ]
    for row in recipe.settings:
        reference = _cell(row.reference)
        if row.stated:
            reference += f" ({_cell(row.stated)})"
        key = f"`{recipe.workload}.{row.key}`" if row.key else "–"
        cells = [row.setting, reference, _source(recipe, row.source), key, _cell(row.ours)]
        lines.append("| " + " | ".join([*map(_cell, cells[:1]), *cells[1:], _note(row)]) + " |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def with_table(page: str, workload: str) -> str:
    """`page` with its recipe section replaced by today's (or inserted before its published
    figures heading, else at its end)."""
    section = render(workload)
    begin = BEGIN.format(workload=workload)
    if begin in page and END in page:
        head, rest = page.split(begin, 1)
        return head + section + rest.split(END, 1)[1].removeprefix("\n")
    if DOCS_ANCHOR in page:
        head, rest = page.split(DOCS_ANCHOR, 1)
        return head + section + "\n" + DOCS_ANCHOR + rest
    return page.rstrip("\n") + "\n\n" + section


def main(argv: list[str] | None = None) -> int:
    """`python -m accelpipe.config.recipes docs [<docs dir>]`: write every workload's table into
    docs/<workload>.md."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "docs":
        print("usage: python -m accelpipe.config.recipes docs [<docs dir>]", file=sys.stderr)
        return 2
    docs = Path(args[1]) if len(args) > 1 else REPO / "docs"
    for workload in registry.WORKLOADS:
        page = docs / f"{workload}.md"
        page.write_text(with_table(page.read_text(), workload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
