"""What a workload declares about itself: the record its folder's declaration module
(`accelpipe.workloads.<name>.declaration`, `WORKLOAD`) fills in and the registry
(accelpipe.config.registry) collects.

No framework: Snakemake imports every declaration to plan. The facts a workload keeps as data
beside its declaration (its config-schema block, quality target, published figures and recipe)
are read by their own loaders from the workload's folder (`registry.folder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accelpipe.config.settings import TrainSettings


@dataclass(frozen=True)
class Pretrained:
    """The pretrained network a workload's model starts from (accelpipe.plan.pretrained)."""

    family: str  # its key under `weights:` and the start of its folder names
    official: str  # the official source's name, a key under `weights.<family>`
    picked_by: str | None = None  # the model key that picks the official file (one per value)
    # what the official files must be to fit the model (model key -> value), else ConfigError
    needs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Examples:
    """What the stage help's examples show of this workload (accelpipe.stages.examples): the
    first workload with a `run` stands for the train, evaluate, publish, seeds, benchmark and
    compare examples, the first with a grid for the grid's."""

    runs: tuple[str, ...] = ()  # named runs of the config: the first is the example run
    grid_keys: tuple[str, ...] = ()  # the grid's keys ('model.<key>', 'train.<key>')
    grid_runs: tuple[str, ...] = ()  # two of the runs the grid names


@dataclass(frozen=True)
class VolumeCache:
    """An in-memory cache of whole training volumes on real data (accelpipe.inputs.volume_cache
    bounds it; accelpipe.plan.capacity counts it): the full dataset's figures."""

    volume_bytes: int  # one volume as cached, after the transforms that precede caching
    train_volumes: int  # the full training split
    build_transient: int  # a builder thread's peak, in volumes of the one it builds
    default_share: float  # the default budget's share of the memory the process may use


@dataclass(frozen=True)
class Memory:
    """What one training process holds at the reference's sizes, as the train stage's memory
    check counts it (accelpipe.plan.capacity); 0 where unknown (counted as nothing)."""

    params: int = 0  # parameters of the reference model
    item_values: int = 0  # values of one training item as the model takes it
    volume_cache: VolumeCache | None = None


@dataclass(frozen=True)
class Workload:
    name: str
    dataset: str
    variant: str  # data/prepared/<dataset>/<variant>
    framework: str  # the engine that trains and evaluates it, and the image it runs in
    # Files of the prepared folder that define the run's split: a changed split must not
    # resume a run trained on the old one (they key the resume directory).
    split_files: tuple[str, ...]
    # The metrics.json key of the quality metric (a number, higher is better): results/compare
    # shows it per run and marks the best; results/<workload>/grid ranks its runs by it.
    metric: str
    # Its typed views (accelpipe.config.settings.view) of the config blocks `<name>.train`
    # (the engines' keys and its own), `<name>.model` and `<name>.evaluate`.
    train: type[TrainSettings]
    model: type
    evaluate: type
    # What precision "auto" means on a backend where the workload departs from the backend's
    # default (devices.AUTO_PRECISION); devices.resolve_precision reads it for the trainer,
    # the preflight and the benchmarks alike. Only a PyTorch engine takes one.
    auto_precision: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    pretrained: Pretrained | None = None  # None: it always starts from random init
    # MLPerf's name of the benchmark it is (the MLPerf log's submission_benchmark, which
    # MLCommons' checkers look up); None: none, the log names the workload
    mlperf_benchmark: str | None = None
    examples: Examples = Examples()
    memory: Memory = Memory()
