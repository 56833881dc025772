"""Dataset config blocks as the data stages receive them: checked against the config schema
with its defaults filled in (what the CLI does with a rule's --config-json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelpipe import datasets
from accelpipe.config.schema import slice_schema, validate_slice
from accelpipe.datasets.sources import make_raw


def raw_config(dataset: str, block: dict[str, Any]) -> dict[str, Any]:
    """`block` as the `datasets.<dataset>` config the raw stage gets."""
    return validate_slice(block, slice_schema("raw", dataset=dataset), "raw")


def prepare_config(dataset: str, variant: str, options: dict[str, Any]) -> dict[str, Any]:
    """The prepare stage's slice with `options` as its `prepare` section."""
    node = slice_schema("prepare", dataset=dataset, variant=variant)
    return validate_slice({"prepare": options}, node, "prepare")


def run_raw(dataset: str, block: dict[str, Any], out: Path, downloads: Path) -> dict[str, Any]:
    """The raw stage of `dataset` with the config block `block`: its facts."""
    return make_raw(datasets.get(dataset).SOURCES, raw_config(dataset, block), out, downloads)
