"""Workloads: each wires a dataset, a model, a loss and a metric to an engine.

A workload module exposes `train(...)` and `evaluate(...)`; which dataset and prepared
variant it reads is in accelpipe.targets.WORKLOAD_DATA.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from accelpipe.errors import ConfigError

WORKLOADS = ("unet2d", "swinunetr", "resnet50")


def get(name: str) -> ModuleType:
    if name not in WORKLOADS:
        raise ConfigError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")
    return importlib.import_module(f"accelpipe.workloads.{name}")
