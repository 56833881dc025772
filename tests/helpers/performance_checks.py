"""The headline of a published run, recomputed from its own train_log.csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest


def measured_rows(run: Path, warmup_steps: int) -> list[dict[str, str]]:
    """train_log.csv's rows past each attempt's warm-up that the profiler left alone."""
    with (run / "train_log.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    seen: dict[str, int] = {}
    kept = []
    for row in rows:
        seen[row["attempt"]] = seen.get(row["attempt"], 0) + 1
        if seen[row["attempt"]] > warmup_steps and row["profiled"] == "0":
            kept.append(row)
    return kept


def check_headline(run: Path, warmup_steps: int) -> dict:
    """performance.json's throughput is the measured steps' samples over their wall time
    (within 5%, the issue's bound; it is the same sum), and the stage's samples over its
    seconds sits beside it; returns performance.json."""
    performance = json.loads((run / "performance.json").read_text())
    measured = measured_rows(run, warmup_steps)
    assert measured, f"{run}: no measured step on the tiny config"
    samples = sum(float(r["samples"]) for r in measured)
    seconds = sum(float(r["wall_ms"]) for r in measured) / 1e3
    throughput = performance["throughput"]
    assert throughput["not_measured"] is None
    assert throughput["samples_per_s"] == pytest.approx(samples / seconds, rel=0.05)
    assert throughput["samples"] == samples
    stage = performance["stage_throughput"]
    assert stage["samples_per_s"] == pytest.approx(stage["samples"] / stage["seconds"], rel=1e-3)
    # the whole stage holds the measured steps: their samples and their wall time
    assert stage["samples"] >= throughput["samples"]
    assert stage["seconds"] >= throughput["seconds"]
    # FLOPs counted by the framework, the rate they give, the measured ceiling and its
    # fraction on every run; MFU has no peak on the cpu and says so
    compute = performance["compute"]
    assert compute["flops_per_sample"] > 0 and compute["flops_counted_by"]
    assert compute["model_tflops"] == pytest.approx(
        compute["flops_per_sample"] * throughput["samples_per_s"] / 1e12, rel=1e-3
    )
    assert compute["gemm_tflops_per_device"] > 0 and compute["gemm_fraction"] > 0
    assert compute["mfu"] is None and compute["peak_note"] == "cpu: no published dense peak"
    return performance
