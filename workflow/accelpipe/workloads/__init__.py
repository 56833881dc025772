"""Workloads: each wires a dataset, a model, a loss and a metric to an engine.

A workload module exposes `train(...)` and `evaluate(...)`; which dataset and prepared
variant it reads, and its framework, are in accelpipe.registry.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from accelpipe import registry


def get(name: str) -> ModuleType:
    return importlib.import_module(f"accelpipe.workloads.{registry.workload(name).name}")
