"""Each workload's typed views of its config blocks, derived from the registry: the classes
its declaration names (accelpipe.config.declare.Workload.train, .model, .evaluate)."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from accelpipe.config import registry
from accelpipe.config.settings import ProfileSettings, TrainSettings, TrainSlice, view

TRAIN_VIEWS: dict[str, type[TrainSettings]] = {n: w.train for n, w in registry.WORKLOADS.items()}
MODEL_VIEWS: dict[str, type] = {n: w.model for n, w in registry.WORKLOADS.items()}
EVALUATE_VIEWS: dict[str, type] = {n: w.evaluate for n, w in registry.WORKLOADS.items()}


def train_view(workload: str, data: Mapping[str, Any]) -> TrainSettings:
    """The workload's train block as its own class (an unknown workload is refused)."""
    name = registry.workload(workload).name
    return view(TRAIN_VIEWS[name], data, where=f"{name}.train")


def train_slice(workload: str, data: Mapping[str, Any]) -> TrainSlice:
    """The validated train slice `data` of `workload`, viewed once (`TrainSlice`)."""
    name = registry.workload(workload).name
    return TrainSlice(
        workload=name,
        backend=data["backend"],
        train=train_view(name, data["train"]),
        profile=view(ProfileSettings, data["profile"], where=f"{name}.profile"),
        sections=types.MappingProxyType(dict(data)),
    )
