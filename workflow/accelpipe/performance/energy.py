"""Energy figures: the measured steps' joules (train_log.csv's energy_j over the throughput's
rows), per 1,000 samples and as mean watts, beside the whole train process's joules
(stage.json's `power`)."""

from __future__ import annotations

from typing import Any

from accelpipe.devices.power import Energy, joules_per_1000_samples
from accelpipe.engines.train_log import LOG_FILE
from accelpipe.performance import rounded


def energy(train: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """The measured steps' joules (the sum of their energy_j), per 1,000 samples and as
    mean watts over their wall time (the throughput's rows, samples and seconds), and the
    whole train process's joules (stage.json's `power`), with the source and method; each
    None, and `not_measured` saying why, where there is no power source, the meter missed
    some of the run's devices, or no measured step has its energy."""
    facts = train.get("power")
    power = facts or {}
    process = power.get("joules")
    reason = (
        "not recorded: the train stage predates energy measurement"
        if facts is None
        else power.get("reason") or power.get("incomplete")
    )
    joules = stats.get("energy_j")
    if reason is not None:
        joules = process = None
    elif joules is None:
        why = (
            stats["throughput"]["not_measured"] or f"a measured step of {LOG_FILE} has no energy_j"
        )
        reason = f"no energy over the measured steps: {why}"
    elif joules == 0:
        # A powered device never draws 0 J: the steps fell between two updates of its reading
        # (an H200's few-millisecond tiny runs read 0 through NVML, 2026-11-28).
        joules = None
        reason = (
            "no energy over the measured steps: the meter read 0 J in their "
            f"{stats['throughput']['seconds']:.3g} s, shorter than its readings change; "
            "measure more steps"
        )
    samples, seconds = stats["throughput"]["samples"], stats["throughput"]["seconds"]
    window = Energy(joules, seconds, None, power.get("source"), power.get("method"), 0, None)
    return {
        "joules": round(joules, 6) if joules is not None else None,
        "joules_per_1000_samples": rounded(joules_per_1000_samples(window, samples)),
        "mean_watts": rounded(joules / seconds) if joules is not None and seconds else None,
        "process_joules": round(process, 6) if process is not None else None,
        "process_seconds": round(power["seconds"], 3) if process is not None else None,
        "source": power.get("source"),
        "method": power.get("method"),
        "devices": power.get("devices"),
        "not_measured": reason,
    }
