"""Framework training and evaluation loops, and the contract both engines honour.

Both engines write the same train_log.csv columns, keep epoch checkpoints in the run's
work directory (outside the declared output, so a killed job resumes), take the same
profiler schedule keys, mark the reference's sections and leave a Chrome-trace JSON for
the one summarizer. What differs between them, and what the stages and the publish step
need to know without importing a framework, is here as data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from accelpipe import registry
from accelpipe.devices import memory_facts
from accelpipe.devices.power import NoPower, PowerMeter, open_meter


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


def run_facts(
    device: Any,
    *,
    compiled: bool,
    steps: int,
    resumed_from: int | None,
    world_size: int,
    global_batch: int,
    job_facts: dict[str, Any],
    flops: dict[str, Any] | None = None,
    gemm: dict[str, Any] | None = None,
    power: dict[str, Any] | None = None,
    host: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The facts both engines report of a finished training for the train stage.json: the
    resolved device (name, backend, precision, peak memory: a TorchDevice or TFDevice), whether
    the step was compiled, the steps taken, the step it resumed from (None: a fresh start),
    world size, global batch, the workload's own facts, and what the performance figures
    need from the device: the FLOPs of one counted train step (`flops`: accelpipe.flops's
    FlopCount fields, or a `reason` there is none) and the measured matmul ceiling (`gemm`);
    and the train process's energy (`power`: `power_facts`), and the host's load over the
    training loop (`host`: devices.host.HostWindow)."""
    return {
        "device": device.name,
        "backend": device.backend,
        "precision": device.precision,
        "compiled": compiled,
        "steps": steps,
        "resumed_from_step": resumed_from,
        "world_size": world_size,
        "global_batch": global_batch,
        **memory_facts(device.peak_memory()),
        "flops": flops,
        "gemm": gemm,
        "power": power,
        "host": host,
        **job_facts,
    }


@contextlib.contextmanager
def power_meter(backend: str, *, writes_log: bool) -> Iterator[PowerMeter | NoPower]:
    """The train process's power meter, started: over the backend's devices this process
    sees (the leased ones: the visibility variable, or the container's devices; RAPL's
    packages on cpu), in the process that writes train_log.csv (`writes_log`); the others
    get a NoPower. Closed on leaving, on an error too. Never raises."""
    meter = (
        open_meter(backend)
        if writes_log
        else NoPower("not the process writing train_log.csv, which meters the run")
    )
    try:
        meter.start()
        yield meter
    finally:
        meter.close()


def power_facts(
    meter: PowerMeter | NoPower, *, backend: str, world_size: int, nodes: int
) -> dict[str, Any]:
    """stage.json's `power`: the meter's window, stopped now (power.Energy's fields: the
    joules from the engine's start to the end of training, or the `reason` there are none),
    the devices it read, and `incomplete`: why those are not the run's devices (None where
    they are). On cpu RAPL reads this node's packages, every process on them included; on
    an accelerator the meter must read one device per process of the run."""
    energy = meter.stop()
    devices = list(meter.devices) if meter.available else []
    return {
        **energy.as_dict(),
        "devices": devices,
        "incomplete": _incomplete(devices, backend, world_size, nodes) if meter.available else None,
    }


def _incomplete(devices: list[str], backend: str, world_size: int, nodes: int) -> str | None:
    """Why the metered `devices` are not the run's; None where they are."""
    read = ", ".join(devices)
    if backend == "cpu":
        if nodes > 1:
            return f"RAPL read on one node of the run's {nodes}; the others are not metered"
        return None
    if len(devices) < world_size:
        return (
            f"the meter read {len(devices)} of the run's {world_size} devices ({read}): it "
            "reads neither other nodes' devices nor other workers' (a TensorFlow worker sees "
            "only its own)"
        )
    if len(devices) > world_size:
        return (
            f"the meter read {len(devices)} devices ({read}) for a run on {world_size}: "
            "devices the run does not use are in it (no lease narrowed the visible devices)"
        )
    return None
