"""Datasets, prepared offline: one module per dataset (its raw sources and its preparation),
its layout in a small module of its own, and the shared download, worker and writer code.

A dataset module exposes `SOURCES` (its `sources.RawSources`, which `sources.make_raw` runs)
and `prepare_variant(variant, raw, out, cfg, workers)`. Nothing here imports a framework or
a model: what feeds prepared data to training is `accelpipe.inputs`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from accelpipe import registry


def get(name: str) -> ModuleType:
    return importlib.import_module(f"accelpipe.datasets.{registry.dataset(name).name}")
