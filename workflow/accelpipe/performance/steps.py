"""Step statistics over a run's train_log.csv: the measured steps' throughput (the headline,
DEFINITIONS["throughput"]), their per-step spread and data wait, the train stage's throughput
over every attempt, and whether the trace's profiled step agrees with the measured one."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from accelpipe.core.io import read_json
from accelpipe.engines.train_log import read_log

_COLUMNS = ("samples_per_s", "data_wait_ms", "step_ms", "profiled", "samples", "wall_ms")


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default method)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        name: round(_percentile(ordered, q), 3)
        for name, q in (("median", 0.5), ("p10", 0.1), ("p90", 0.9))
    }


def _after_warmup(rows: list[dict[str, str]], warmup_steps: int) -> list[dict[str, str]]:
    """The rows past the first `warmup_steps` of their attempt."""
    seen: dict[str, int] = {}
    kept = []
    for row in rows:
        attempt = row.get("attempt") or "0"
        seen[attempt] = seen.get(attempt, 0) + 1
        if seen[attempt] > warmup_steps:
            kept.append(row)
    return kept


def measured_rows(rows: list[dict[str, str]], warmup_steps: int) -> list[dict[str, str]]:
    """The measured steps of a log's rows: after the first `warmup_steps` of their attempt,
    left alone by the profiler (the rows every figure of step_statistics is made of)."""
    return [r for r in _after_warmup(rows, warmup_steps) if r["profiled"] != "1"]


def measured_steps(train_log: Path, warmup_steps: int) -> list[dict[str, str]]:
    """train_log.csv's measured steps (`measured_rows`): the per-step samples of a run."""
    return measured_rows(read_log(train_log, _COLUMNS), warmup_steps)


def throughput(samples: float, seconds: float) -> float | None:
    """The one definition of a throughput: samples over the wall time they took (None
    where nothing was timed)."""
    # 6 significant digits: a 3D run's 0.0968 samples/s keeps its digits
    return float(f"{samples / seconds:.6g}") if samples > 0 and seconds > 0 else None


def _not_measured(steps: dict[str, int], warmup_steps: int) -> str | None:
    """Why no step was measured; None where some were."""
    if steps["measured"]:
        return None
    if not steps["logged"]:
        return "no step was logged (train.log_every longer than the run?)"
    if steps["profiled_excluded"]:
        return "every step after the warm-up was profiled (profile.schedule covers the run)"
    return (
        f"the warm-up (performance.warmup_steps: {warmup_steps} per attempt) is at least as "
        f"long as the run ({steps['logged']} logged steps)"
    )


def step_statistics(train_log: Path, warmup_steps: int) -> dict[str, Any]:
    """The measured steps' throughput (samples over their wall time) and the per-step
    distribution (median, p10, p90 of samples/s and step time), and the share of step time
    spent waiting for data, over the logged steps after the first `warmup_steps` of each
    attempt (the first start, then every resume) that the profiler left alone; `steps` counts
    the logged, warm-up, profiled (left out) and measured rows. A warm-up row is counted as
    warm-up even where the profiler ran too. No measured step: the throughput is None and
    `not_measured` says why."""
    rows = read_log(train_log, _COLUMNS)
    after_warmup = _after_warmup(rows, warmup_steps)
    measured = measured_rows(rows, warmup_steps)
    step_ms = [float(r["step_ms"]) for r in measured]
    waited = sum(float(r["data_wait_ms"]) for r in measured)
    # energy_j: empty where nothing was measured, absent from a log older than the column
    energies = [float(r["energy_j"]) for r in measured if r.get("energy_j")]
    samples = sum(float(r["samples"]) for r in measured)
    seconds = sum(float(r["wall_ms"]) for r in measured) / 1e3
    steps = {
        "logged": len(rows),
        "warmup": len(rows) - len(after_warmup),
        "profiled_excluded": len(after_warmup) - len(measured),
        "measured": len(measured),
    }
    return {
        "steps": steps,
        "throughput": {
            "samples_per_s": throughput(samples, seconds),
            "samples": int(samples),
            "seconds": round(seconds, 6),
            "not_measured": _not_measured(steps, warmup_steps),
        },
        "per_step": {
            "samples_per_s": _spread([float(r["samples_per_s"]) for r in measured]),
            "step_ms": _spread(step_ms),
        },
        "data_wait_share": round(waited / sum(step_ms), 4) if sum(step_ms) > 0 else None,
        # the measured steps' joules (None unless every one of them has its energy_j)
        "energy_j": sum(energies) if measured and len(energies) == len(measured) else None,
    }


def attempts(train: dict[str, Any]) -> list[dict[str, Any]]:
    """Each start of the train stage (stage.json's `attempts`); a stage.json from before
    they were recorded: its one attempt, as its seconds say."""
    recorded = train.get("attempts")
    if recorded:
        return list(recorded)
    return [
        {
            "attempt": 1,
            "started": None,
            "seconds": train["seconds"],
            "resumed_from_step": train.get("resumed_from_step"),
            "status": "finished",
        }
    ]


def stage_throughput(train: dict[str, Any]) -> dict[str, Any]:
    """The run's samples (its steps at the global batch) over the train stage's wall time,
    every attempt together (stage.json's seconds: their sum). A stage.json from before
    attempts were recorded timed its last attempt only: the steps that one trained."""
    unrecorded = 0 if train.get("attempts") else train.get("resumed_from_step") or 0
    samples = (train["steps"] - unrecorded) * train["global_batch"]
    return {
        "samples_per_s": throughput(samples, train["seconds"]),
        "samples": samples,
        "seconds": train["seconds"],
    }


PROFILED_STEP_TOLERANCE = 0.2  # the profiled step may differ this much from the measured one
TRACE_SUMMARY = "summary.json"  # the trace stage's, traces.summary.write_summary


def profiled_step(trace_dir: Path | None, step_ms: dict[str, float] | None) -> dict[str, Any]:
    """Whether the trace's median profiled step agrees with the measured (unprofiled) median
    step within PROFILED_STEP_TOLERANCE: a profiled step far slower means the trace's section
    times are not the steps the throughput measured (profiler overhead, or steps still warming
    up), and the page flags it with both numbers."""
    summary = trace_dir / TRACE_SUMMARY if trace_dir is not None else None
    steps = read_json(summary).get("steps") if summary and summary.exists() else None
    traced = steps["ms"]["median"] if steps else None
    measured = step_ms["median"] if step_ms else None
    facts: dict[str, Any] = {"trace_median_ms": traced, "measured_median_ms": measured}
    if traced is None or not measured:
        missing = "no profiled step in the trace" if traced is None else "no measured step"
        return facts | {"ratio": None, "agrees": None, "note": f"not compared: {missing}"}
    ratio = traced / measured
    agrees = abs(ratio - 1) <= PROFILED_STEP_TOLERANCE
    note = (
        f"the profiled step ({traced:.3f} ms, trace median) "
        f"{'agrees with' if agrees else 'DISAGREES with'} the measured median step "
        f"({measured:.3f} ms): ratio {ratio:.3f}, tolerance {PROFILED_STEP_TOLERANCE:.0%}"
    )
    return facts | {"ratio": round(ratio, 4), "agrees": agrees, "note": note}
