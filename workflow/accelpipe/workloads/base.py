"""What the stages call on a workload: its framework module `workloads.<name>.workload` is a
`Workload` (`train(...)`, `evaluate(...)`) that wires a dataset, a model, a loss and a metric to
an engine; which dataset and prepared variant it reads, and its framework, are its declaration
(`workloads.<name>.declaration`, collected by accelpipe.config.registry).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

from accelpipe.config import registry
from accelpipe.config.settings import TrainSlice
from accelpipe.core.errors import ConfigError


@runtime_checkable
class Workload(Protocol):
    """What the train and evaluate stages call on a workload's module. Both get the stage's
    validated config slice (accelpipe.plan.stage_config), which the workload reads through its
    typed views (accelpipe.config.settings); train gets it as the train stage read it, once
    (`TrainSlice`: its train block already the workload's own class)."""

    def train(
        self,
        prepared: Path,
        run: str,
        cfg: TrainSlice,
        work_dir: Path,
        weights: Path | None = None,
    ) -> dict[str, Any] | None:
        """Train `run` on the prepared data into `work_dir`; the run's facts on the process
        that writes them, None on the others. `weights`: the weights stage's folder the model
        starts from, given only where the run names a pretrained source (workloads of
        a `pretrained` family in their declaration; the others never get it)."""
        ...

    def evaluate(
        self, prepared: Path, run: str, cfg: dict[str, Any], model_dir: Path, out_dir: Path
    ) -> dict[str, Any]:
        """The metrics of the model in `model_dir` on the run's validation data, with its
        tables and pictures written into `out_dir`."""
        ...


def module_name(name: str) -> str:
    """The framework module of a registered workload."""
    return f"accelpipe.workloads.{registry.workload(name).name}.workload"


def get(name: str) -> Workload:
    """The module of a registered workload (tests/accelpipe/workloads checks each is one)."""
    module = importlib.import_module(module_name(name))
    return cast(Workload, module)


def no_starting_weights(workload: str, weights: Path | None) -> None:
    """A workload that always starts from random init refuses a weights folder (the rules
    never pass one: its declaration names no `pretrained` family)."""
    if weights is not None:
        raise ConfigError(f"{workload} starts from random init: it takes no --weights ({weights})")
