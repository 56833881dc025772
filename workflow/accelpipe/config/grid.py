"""A hyperparameter grid as named runs: `<workload>.grid` maps `model.<key>` / `train.<key>`
to a list of values, and every combination becomes an ordinary run of the workload.

Run names are built from the values alone (`decoder-mask_encoder-B_16_pretrained-none`), so
they are stable: adding a value adds runs, changing one value replaces only the runs that
had it, and Snakemake re-runs nothing else. This module imports no framework: Snakemake
reads it while planning.
"""

from __future__ import annotations

import itertools
import re
from pathlib import PurePath
from typing import Any

from accelpipe.core.errors import ConfigError

SECTIONS = ("model", "train")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def split_key(key: str) -> tuple[str, str]:
    """`model.encoder` -> ("model", "encoder")."""
    section, _, name = key.partition(".")
    return section, name


def value_slug(value: Any) -> str:
    """A value as it appears in a run name: readable and file-name safe."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value).replace(".", "p").replace("-", "m")
    text = str(value)
    if text.startswith("path:"):  # a pretrained file: its name says what it is
        text = PurePath(text.removeprefix("path:")).stem
    return _UNSAFE.sub("-", text).strip("-") or "empty"


def expand(block: dict[str, Any], workload: str) -> dict[str, dict[str, dict[str, Any]]]:
    """The grid's runs: name -> {"model": overrides, "train": overrides}, in a stable order.

    Two values that give the same name (e.g. two npz files with one file name) are refused.
    """
    grid = block.get("grid") or {}
    if not grid:  # the product of no lists is one empty run: there are none
        return {}
    keys = sorted(grid)
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    origin: dict[str, tuple[Any, ...]] = {}
    for values in itertools.product(*(grid[k] for k in keys)):
        name = "_".join(
            f"{split_key(k)[1]}-{value_slug(v)}" for k, v in zip(keys, values, strict=True)
        )
        if name in runs:
            raise ConfigError(
                f"'{workload}.grid': values {origin[name]} and {values} of {keys} "
                f"both give the run name {name!r}; make them differ in their names"
            )
        overrides: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
        for key, value in zip(keys, values, strict=True):
            section, name_in_section = split_key(key)
            overrides[section][name_in_section] = value
        runs[name], origin[name] = overrides, values
    return runs
