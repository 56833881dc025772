"""Datasets: one module per dataset (raw sources and preparation) plus shared download code.

A dataset module exposes `make_raw(cfg, out, downloads)` and
`prepare_variant(variant, raw, out, cfg, workers)`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from accelpipe import registry
from accelpipe.errors import DataError


def get(name: str) -> ModuleType:
    return importlib.import_module(f"accelpipe.datasets.{registry.dataset(name).name}")


def existing_copy(location: str, folder: str, dataset: str) -> Path:
    """A `path:` source: the dataset's `folder` itself, or a folder that contains it."""
    path = Path(location).expanduser()
    if not path.is_dir():
        raise DataError(f"{path}: dataset path given by datasets.{dataset}.source does not exist")
    return path / folder if (path / folder).is_dir() else path
