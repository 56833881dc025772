"""Framework training and evaluation loops, and the contract both engines honour.

Both engines write the same train_log.csv columns, keep epoch checkpoints in the run's
work directory (outside the declared output, so a killed job resumes), take the same
profiler schedule keys, mark the reference's sections and leave a Chrome-trace JSON for
the one summarizer. What differs between them, and what the stages and the publish step
need to know without importing a framework, is here as data.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelpipe import registry


@dataclass(frozen=True)
class Engine:
    framework: str
    module: str  # the engine's code: run_training, load_for_eval, limit_threads, launch
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
