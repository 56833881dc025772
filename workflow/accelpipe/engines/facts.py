"""The facts both engines report of a finished training, for the train stage.json."""

from __future__ import annotations

from typing import Any

from accelpipe.devices import memory_facts


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
    need from the device: the FLOPs of one counted train step (`flops`: accelpipe.core.flops's
    FlopCount fields, or a `reason` there is none) and the measured matmul ceiling (`gemm`);
    and the train process's energy (`power`: engines.energy.power_facts), and the host's load
    over the training loop (`host`: devices.host.HostWindow)."""
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
