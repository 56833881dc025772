"""Framework training and evaluation loops, and the contract both engines honour.

Both engines write the same train_log.csv columns, keep epoch checkpoints in the run's
work directory (outside the declared output, so a killed job resumes), take the same
profiler schedule keys, mark the reference's sections and leave a Chrome-trace JSON for
the one summarizer. What differs between them, and what the stages and the publish step
need to know without importing a framework, is here as data; what the stages call on an
engine's module is `EngineHooks`, and the training sequence both follow is run_sequence's
(its `EngineRun` the steps each engine gives it).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from accelpipe.config import registry

if TYPE_CHECKING:
    from accelpipe.config.settings import TrainSettings


@dataclass(frozen=True)
class Engine:
    framework: str
    # the engine's code: EngineHooks, run_training (run_sequence), load_for_eval
    module: str
    weights: str  # the trained model, in the train output and the result folder
    checkpoints: tuple[str, ...]  # resume state in the work directory, dropped once trained
    packages: tuple[str, ...]  # versions provenance.json records besides the common ones
    # The profiler's own table of each cycle, beside its trace: trace_step<n><profiler_table>.
    profiler_table: str


# The trace stage gathers the engines' tables into PROFILER_TABLES/ and takes the allocator's
# memory snapshot (CUDA and ROCm torch runs: the first cycle's) beside them; publish copies both.
PROFILER_TABLES = "profiler_tables"
MEMORY_SNAPSHOT = "memory_snapshot.pickle"

ENGINES = {
    e.framework: e
    for e in (
        Engine(
            "pytorch",
            "accelpipe.engines.torch_trainer",
            "model.pt",
            ("checkpoint.pt",),
            ("torch", "monai"),
            ".key_averages.txt",
        ),
        Engine(
            "tensorflow",
            "accelpipe.engines.tf_trainer",
            "model.weights.h5",
            ("checkpoints",),  # a tf.train.CheckpointManager directory
            ("tensorflow", "tensorflow-cpu", "tf-keras", "xprof"),
            ".framework_op_stats.csv",  # xprof's framework_op_stats tool
        ),
    )
}


def for_workload(workload: str) -> Engine:
    """The engine that trains and evaluates `workload` (its registry framework)."""
    return ENGINES[registry.workload(workload).framework]


class EngineHooks(Protocol):
    """What the train and evaluate stages call on an engine's module, in their own process."""

    def limit_threads(self, threads: int) -> None:
        """Caps the framework's CPU thread pools at `threads`."""

    def launch_training(self, cfg: TrainSettings, stage_argv: list[str], threads: int) -> None:
        """Starts one worker per device (srun under Slurm), each rerunning the stage with
        `stage_argv`, and returns once all have succeeded."""

    def in_worker(self) -> bool:
        """Whether this process is a worker such a launch started."""


def hooks(engine: Engine) -> EngineHooks:
    """`engine`'s module, imported now (its framework with it), as the stages see it."""
    module: EngineHooks = importlib.import_module(engine.module)
    return module


if TYPE_CHECKING:  # mypy holds each engine's module to the hooks; never imported at run time
    from accelpipe.engines import tf_trainer, torch_trainer

    _TORCH_HOOKS: EngineHooks = torch_trainer
    _TF_HOOKS: EngineHooks = tf_trainer
