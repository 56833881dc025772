"""Datasets: one module per dataset (raw sources and preparation) plus shared download code.

A dataset module exposes `make_raw(cfg, out, downloads)` and
`prepare_variant(variant, raw, out, cfg, workers)`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from accelpipe.errors import ConfigError

DATASETS = ("brats", "imagenet", "nsclc")


def get(name: str) -> ModuleType:
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    return importlib.import_module(f"accelpipe.datasets.{name}")
