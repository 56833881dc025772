"""A training process's energy accounting: the power meter it runs under (on the process
that writes train_log.csv) and stage.json's `power`, with whether the metered devices are the
run's own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from accelpipe.devices.power import NoPower, PowerMeter, open_meter


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
