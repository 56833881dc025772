"""Hand-made published run folders (results/<workload>/<run>/) for the compare tests: the
files publish writes, with the keys results/compare reads (performance.json: the SPEC's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accelpipe.config import registry

# section name -> mean ms of the hand-made trace summary (forward .. inside `step`)
SECTIONS_MS = {
    "loader_next": 2.0,
    "step": 15.0,
    "forward": 4.0,
    "loss": 1.0,
    "backward": 6.0,
    "optimizer_step": 3.0,
    "loader_first": 9.0,
}
STEP_MS = 20.0  # the mean profiler step: loader_next + step + 3 ms of other


def _stats(mean: float) -> dict[str, float]:
    return {"min": mean, "mean": mean, "median": mean, "max": mean, "total": 2 * mean}


def trace_summary(step_ms: float | None = STEP_MS, sections: dict | None = None) -> dict:
    """A summary as traces.summarize_traces writes it: two complete steps of `step_ms`."""
    sections = SECTIONS_MS if sections is None else sections
    return {
        "device": "cpu",
        "steps": {"count": 2, "ms": _stats(step_ms), "incomplete_left_out": 0}
        if step_ms is not None
        else None,
        "sections": {
            name: {"count": 2, "cpu_ms": _stats(ms), "kernel_ms": None, "kernel_span_ms": None}
            for name, ms in sections.items()
        },
    }


def reference(ratio: float | None = 0.25, comparable: bool = False) -> dict[str, Any]:
    """performance.json's `reference` as accelpipe.performance.figures.reference writes it: the
    figure, its conditions, whether the ratio is comparable and each difference."""
    differences = [] if comparable else ["the figure's input pipeline is DALI, ours tf.data"]
    return {
        "samples_per_s": 400.0,
        "precision": "fp32",
        "device": "A100",
        "batch": 8,
        "cards": 2,
        "data": "real",
        "loader": "tf.data" if comparable else "DALI",
        "computed": "samples_over_time",
        "software": "a container",
        "source": "README",
        "note": "",
        "comparable": comparable,
        "differences": differences,
        "ratio": ratio,
    }


def _reference_note(reference: dict[str, Any] | None) -> str:
    if reference is None:
        return "no published figure"
    if "comparable" not in reference:  # as written before figures kept their conditions
        return "ratio per card: ..."
    verdict = "comparable: the figure's conditions match this run's"
    if not reference["comparable"]:
        verdict = "indicative, not like for like: " + "; ".join(reference["differences"])
    return f"ratio per card: ...; {verdict}"


NO_RAPL = (
    "no power source: no RAPL package domain under /sys/class/powercap (no powercap RAPL "
    "driver on this host, or not visible in this container)"
)


def energy(
    joules_per_1000_samples: float | None = None, process_joules: float | None = None
) -> dict[str, Any]:
    """performance.json's `energy` as accelpipe.performance.energy.energy writes it: measured by a
    stand-in NVML counter where `joules_per_1000_samples` is given, else no power source."""
    if joules_per_1000_samples is None:
        keys = ("joules", "joules_per_1000_samples", "mean_watts", "process_joules")
        return dict.fromkeys(keys) | {
            "process_seconds": None,
            "source": None,
            "method": None,
            "devices": None,
            "not_measured": NO_RAPL,
        }
    joules = joules_per_1000_samples * 80 / 1000  # the measured steps' 80 samples
    return {
        "joules": joules,
        "joules_per_1000_samples": joules_per_1000_samples,
        "mean_watts": 150.0,
        "process_joules": process_joules,
        "process_seconds": 60.0,
        "source": "nvml total energy counter",
        "method": "energy counter",
        "devices": ["0", "1"],
        "not_measured": None,
    }


def performance(
    workload: str,
    run: str,
    samples_per_s: tuple[float, float, float] | None,
    seconds: float,
    backend: str = "cpu",
    reference: dict[str, Any] | None = None,
    energy_block: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """performance.json as accelpipe.performance.report.run_performance writes it; `samples_per_s`:
    (the throughput, the per-step p10, p90), None: no step measured; `energy_block`: its
    `energy` (default: no power source)."""
    rate, p10, p90 = samples_per_s or (None, None, None)
    measured = samples_per_s is not None
    return {
        "workload": workload,
        "run": run,
        "backend": backend,
        "device": f"{backend} device",
        "precision": "fp32",
        "world_size": 2,
        "global_batch": 16,
        "steps": {"total": 10, "logged": 10, "warmup": 2, "profiled_excluded": 3, "measured": 5},
        "throughput": {
            "samples_per_s": rate,
            "samples": 80 if measured else 0,
            "seconds": 80 / rate if rate else 0.0,
            "not_measured": None if measured else "the warm-up is as long as the run",
        },
        "stage_throughput": {"samples_per_s": 160 / seconds, "samples": 160, "seconds": seconds},
        "per_step": {
            "samples_per_s": {"median": rate, "p10": p10, "p90": p90} if measured else None,
            "step_ms": {"median": 10.0, "p10": 9.0, "p90": 12.0} if measured else None,
        },
        "data_wait_share": 0.1 if measured else None,
        "profiled_step": {
            "trace_median_ms": 10.5 if measured else None,
            "measured_median_ms": 10.0 if measured else None,
            "ratio": 1.05 if measured else None,
            "agrees": True if measured else None,
            "note": "the profiled step (10.500 ms) agrees" if measured else "not compared",
        },
        "energy": energy_block if energy_block is not None else energy(),
        "time_to_train_s": seconds,
        "peak_device_memory_bytes": None,
        "device_memory_source": None,
        "peak_host_rss_bytes": 1000,
        "reference": reference,
        "reference_note": _reference_note(reference),
    }


def compute(flops_per_sample: float) -> dict[str, Any]:
    """performance.json's `compute` of a cpu run whose FLOPs were counted."""
    return {
        "flops_per_sample": flops_per_sample,
        "flops_counted_by": "torch.utils.flop_counter.FlopCounterMode",
        "model_tflops": None,
        "peak_tflops_per_device": None,
        "peak_note": "cpu: no published dense peak",
        "mfu": None,
        "gemm_tflops_per_device": None,
        "gemm": None,
        "gemm_fraction": None,
        "not_measured": None,
    }


def write_run(
    results: Path,
    workload: str,
    run: str,
    metric_value: float | None = 0.5,
    samples_per_s: tuple[float, float, float] | None = (100.0, 90.0, 110.0),
    seconds: float = 60.0,
    backend: str = "cpu",
    nodes: int = 1,
    with_performance: bool = True,
    reference: dict[str, Any] | None = None,
    summary: dict | None = None,
    energy_block: dict[str, Any] | None = None,
    system: dict[str, Any] | None = None,
    config_hash: str | None = None,
    flops_per_sample: float | None = None,
    host: dict[str, Any] | None = None,
) -> Path:
    """A finished run folder; `with_performance=False`: one published before performance.json;
    `system`: provenance.json's preflight facts (none: a cpu run's null); `config_hash`:
    provenance.json's (none: published before it was recorded); `flops_per_sample`: a
    `compute` block in performance.json with that count; `host`: its `host` block."""
    folder = results / workload / run
    folder.mkdir(parents=True)
    metric = registry.workload(workload).metric
    metrics = {"workload": workload, "run": run} | (
        {metric: metric_value} if metric_value is not None else {}
    )
    provenance = {
        "config": {workload: {"train": {"nodes": nodes, "devices": 2}}},
        "backend": backend,
        "device": f"{backend} device",
        "precision": "fp32",
        "stages": {"train": {"seconds": seconds}},
        "system": system,
    } | ({"config_hash": config_hash} if config_hash else {})
    files = {
        "metrics.json": metrics,
        "provenance.json": provenance,
        "trace_summary.json": summary if summary is not None else trace_summary(),
    }
    if with_performance:
        perf = performance(workload, run, samples_per_s, seconds, backend, reference, energy_block)
        if flops_per_sample is not None:
            perf["compute"] = compute(flops_per_sample)
        if host is not None:
            perf["host"] = host
        files["performance.json"] = perf
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content))
    return folder
