"""Datasets, prepared offline: one module per dataset (its raw sources and its preparation),
its layout in a small module of its own, and the shared download, worker and writer code.

A dataset module exposes `SOURCES` (its `sources.RawSources`, which `sources.make_raw` runs)
and `prepare_variant(variant, raw, out, cfg, workers)`. Nothing here imports a framework or
a model: what feeds prepared data to training is `accelpipe.inputs`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from accelpipe.config import registry

if TYPE_CHECKING:
    from accelpipe.datasets.sources import RawSources


@runtime_checkable
class Dataset(Protocol):
    """What the raw and prepare stages use of a dataset's module."""

    SOURCES: RawSources

    def prepare_variant(
        self, variant: str, raw: Path, out: Path, cfg: dict[str, Any], workers: int
    ) -> Path:
        """Prepare `raw` as `variant` into `out` (atomic) with the owning workload's `prepare`
        slice; the prepared folder."""
        ...


def get(name: str) -> Dataset:
    """The module of a registered dataset (tests/accelpipe/datasets checks each is one)."""
    module = importlib.import_module(f"accelpipe.datasets.{registry.dataset(name).name}")
    return cast(Dataset, module)
