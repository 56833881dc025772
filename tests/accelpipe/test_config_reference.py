"""docs/configuration.md is generated from the config schema (accelpipe.config.schema_docs) and
checked in: it must be exactly what the schema gives today, every key must have a description, and
every default it shows must be the one config.validate fills in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelpipe.config import schema_docs
from accelpipe.config.schema import validate
from tests.helpers.schema_checks import undescribed

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "configuration.md"
REGENERATE = (
    "make docs (or: .venv/bin/python -m accelpipe.config.schema_docs docs/configuration.md)"
)


def _rows(page: str) -> dict[str, list[str]]:
    """`key: [type, default, allowed, description]` of every table row of the page."""
    rows = {}
    for line in page.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").replace("\\|", "\x00").split("|")]
            cells = [c.replace("\x00", "|") for c in cells]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_the_checked_in_page_is_what_the_schema_gives() -> None:
    expected = schema_docs.render(schema_docs.load_schema())
    current = PAGE.read_text() if PAGE.exists() else ""
    assert current == expected, (
        f"{PAGE.relative_to(REPO)} is out of date with {schema_docs.SCHEMA_NAME}: "
        f"regenerate it with `{REGENERATE}` and commit it"
    )


def test_every_key_of_the_schema_has_a_description() -> None:
    missing = undescribed(schema_docs.load_schema())
    assert not missing, (
        f"keys without a description in {schema_docs.SCHEMA_NAME} (add one: it is their "
        f"documentation in docs/configuration.md): {', '.join(missing)}"
    )


def _leaves(value: Any, node: dict[str, Any], path: str, ref: schema_docs.Reference):
    """(dotted path, value) of every key config.validate filled in, down to the schema's
    leaves (a map of names, as runs, is one leaf)."""
    node = ref.resolve(node)
    props = node.get("properties")
    if not props or not isinstance(value, dict):
        yield path, value
        return
    for key, sub in value.items():
        yield from _leaves(sub, props[key], f"{path}.{key}" if path else key, ref)


def test_every_default_on_the_page_is_the_one_validate_fills_in() -> None:
    schema = schema_docs.load_schema()
    rows = _rows(schema_docs.render(schema))
    filled = dict(_leaves(validate({}), schema, "", schema_docs.Reference(schema)))
    assert len(filled) > 150
    for key, value in filled.items():
        assert key in rows, f"{key} is a config key but has no row"
        assert rows[key][1] == schema_docs._code(value), key
    # and the other way: every row with a default is a key validate fills in
    for key, (_, default, _, _) in rows.items():
        if default != "—" and "<name>" not in key and rows[key][0] != "object":
            assert key in filled, key


def test_the_page_lists_every_workload_block_and_the_keys_the_old_readme_table_lacked() -> None:
    rows = _rows(PAGE.read_text())
    for key in (
        "segmenter.model.encoder",
        "segmenter.grid.<name>",
        "datasets.ade20k.source",
        "cost.per_hour.cuda",
        "performance.warmup_steps",
        "ssd.benchmark.batch_sizes",
        "resnet50.runs.<name>",
        "unet2d.profile.schedule.wait",
    ):
        assert key in rows, key
    assert rows["segmenter.model.encoder"][2].startswith("`B_16`, `B_32`")
    assert "matches `^(train\\|model)" not in rows["segmenter.grid.<name>"][2]  # unescaped
    assert rows["resnet50.runs.<name>"][3].startswith("any keys of `resnet50.train`")


TOY = {
    "description": "toy <config>",
    "type": "object",
    "definitions": {
        "level": {"type": "string", "enum": ["low", "high"], "default": "low"},
        "block": {
            "type": "object",
            "description": "a shared block",
            "default": {},
            "properties": {
                "rate": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "default": 0.5,
                    "description": "r",
                },
                "level": {"$ref": "#/definitions/level", "description": "how | much"},
            },
        },
        "pair": {
            "type": "object",
            "description": "a pair",
            "properties": {"a": {"type": "integer", "description": "first"}},
        },
    },
    "properties": {
        "size": {
            "type": ["integer", "null"],
            "minimum": 1,
            "maximum": 8,
            "multipleOf": 2,
            "default": None,
            "description": "a size",
        },
        "shape": {
            "type": "array",
            "items": {"type": "integer", "minimum": 16},
            "minItems": 3,
            "maxItems": 3,
            "default": [64, 64, 32],
            "description": "x, y, z",
        },
        "either": {
            "oneOf": [{"type": "integer"}, {"type": "string", "pattern": "^p:"}],
            "description": "one of two",
        },
        "work": {
            "type": "object",
            "description": "a workload",
            "properties": {
                "train": {"$ref": "#/definitions/block"},
                "runs": {
                    "type": "object",
                    "default": {"x": {}},
                    "propertyNames": {"pattern": "^[a-z]+$"},
                    "additionalProperties": {"$ref": "#/definitions/block"},
                    "description": "runs -> <name>",
                },
                "pairs": {
                    "type": "object",
                    "additionalProperties": {"$ref": "#/definitions/pair"},
                    "description": "pairs by name",
                },
            },
        },
    },
}


def test_the_generator_follows_refs_maps_and_alternatives() -> None:
    page = schema_docs.render(TOY)
    rows = _rows(page)
    assert page == schema_docs.render(TOY)  # deterministic
    assert rows["size"] == ["integer or null", "`null`", ">= 1; <= 8; multiple of 2", "a size"]
    assert rows["shape"][:3] == ["array of integer", "`[64, 64, 32]`", "3 items; each: >= 16"]
    assert rows["either"][:3] == [
        "integer or string",
        "—",
        "one of: integer; string (matches `^p:`)",
    ]
    # a $ref'd block under its user's path, the description beside the $ref winning
    assert rows["work.train.rate"] == ["number", "`0.5`", "> 0", "r"]
    assert rows["work.train.level"] == ["string", "`low`", "`low`, `high`", "how | much"]
    assert "how \\| much" in page  # a | inside a cell is escaped
    # a map whose values are a block listed above: one row pointing at it
    assert rows["work.runs.<name>"][2].startswith("`<name>` matches `^[a-z]+$`")
    assert rows["work.runs.<name>"][3].startswith("any keys of `work.train`")
    assert "work.runs.<name>.rate" not in rows
    # a map whose values are a block not listed before: its keys under `<name>`
    assert rows["work.pairs.<name>.a"] == ["integer", "—", "", "first"]
    assert "toy \\<config>" in page and "runs -> \\<name>" in page  # no HTML tags


def test_keys_without_a_description_are_named() -> None:
    schema = {
        "type": "object",
        "definitions": {"d": {"type": "object", "properties": {"k": {"type": "string"}}}},
        "properties": {
            "a": {"type": "object", "description": "a", "properties": {"b": {"type": "integer"}}},
            "c": {"$ref": "#/definitions/d"},
            "m": {"type": "object", "description": "m", "additionalProperties": {"type": "array"}},
        },
    }
    assert undescribed(schema) == ["a.b", "c", "m.<name>", "#/definitions/d.k"]


def test_check_mode_says_when_the_page_is_stale(tmp_path: Path, capsys) -> None:
    page = tmp_path / "docs" / "configuration.md"
    assert schema_docs.main([str(page)]) == 0
    assert schema_docs.main(["--check", str(page)]) == 0
    page.write_text(page.read_text() + "edited by hand\n")
    assert schema_docs.main(["--check", str(page)]) == 1
    assert "make docs" in capsys.readouterr().err


def test_the_generator_imports_no_framework() -> None:
    code = (
        "import sys, accelpipe.config.schema_docs as s; s.render(s.load_schema()); "
        "print(sorted({'torch', 'tensorflow', 'keras', 'monai'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO / "workflow"), "PATH": ""},
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["precision", "profile", "benchmark"])
def test_shared_definitions_are_listed_under_each_workload(name: str) -> None:
    rows = _rows(PAGE.read_text())
    workloads = ("unet2d", "swinunetr", "resnet50", "ssd", "segmenter")
    key = "train.precision" if name == "precision" else f"{name}"
    assert all(f"{w}.{key}" in rows for w in workloads), name
