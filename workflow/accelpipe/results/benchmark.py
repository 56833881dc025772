"""results/<workload>/benchmark: one row per batch size x precision of train-only steps.

Each row is a train job of its own (work/<workload>/benchmark/<precision>-b<batch>): its
train_log.csv gives the steady-state step statistics (the same as performance.json's, after
the warm-up steps) and its stage.json the device, world size and peak memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelpipe.core.io import atomic_path, read_json, write_csv, write_json
from accelpipe.engines.train_log import LOG_FILE
from accelpipe.performance.compute import COMPUTE_COLUMNS, compute
from accelpipe.performance.energy import energy
from accelpipe.performance.steps import step_statistics

COLUMNS = (
    "row",
    "precision",
    "global_batch",
    "world_size",
    "device",
    "samples_per_s",
    "not_measured",
    "per_step_samples_per_s_p10",
    "per_step_samples_per_s_median",
    "per_step_samples_per_s_p90",
    "step_ms_median",
    "flops_per_sample",
    "model_tflops",
    "mfu",
    "gemm_fraction",
    "joules_per_1000_samples",
    "data_wait_share",
    "steps_measured",
    "peak_device_memory_bytes",
    "peak_host_rss_bytes",
)


def row(train_dir: Path, warmup_steps: int) -> dict[str, Any]:
    """One table row from a benchmark row's train output: its throughput (performance's one
    definition) and the per-step spread beside it, and the energy per 1,000 samples of its
    measured steps (None where no power source measured it)."""
    stage = read_json(train_dir / "stage.json")
    stats = step_statistics(train_dir / LOG_FILE, warmup_steps)
    rate = stats["per_step"]["samples_per_s"] or {}
    figures = compute(stage, stats["throughput"]["samples_per_s"])
    step = stats["per_step"]["step_ms"] or {}
    return {
        "row": train_dir.name,
        "precision": stage["precision"],
        "global_batch": stage["global_batch"],
        "world_size": stage["world_size"],
        "device": stage["device"],
        "samples_per_s": stats["throughput"]["samples_per_s"],
        "not_measured": stats["throughput"]["not_measured"],
        **{f"per_step_samples_per_s_{q}": rate.get(q) for q in ("p10", "median", "p90")},
        "step_ms_median": step.get("median"),
        **{k: figures[k] for k in COMPUTE_COLUMNS},
        "joules_per_1000_samples": energy(stage, stats)["joules_per_1000_samples"],
        "data_wait_share": stats["data_wait_share"],
        "steps_measured": stats["steps"]["measured"],
        "peak_device_memory_bytes": stage.get("peak_device_memory_bytes"),
        "peak_host_rss_bytes": stage.get("peak_host_rss_bytes"),
    }


def write_table(
    train_dirs: list[Path], workload: str, warmup_steps: int, out: Path
) -> list[dict[str, Any]]:
    """benchmark.csv, benchmark.json and benchmark.png into `out` (atomic); the rows, by
    precision then batch size."""
    rows = sorted(
        (row(d, warmup_steps) for d in train_dirs),
        key=lambda r: (r["precision"], r["global_batch"]),
    )
    with atomic_path(out) as tmp:
        tmp.mkdir()
        write_csv(tmp / "benchmark.csv", rows, COLUMNS)
        write_json(
            tmp / "benchmark.json",
            {"workload": workload, "warmup_steps": warmup_steps, "rows": rows},
        )
        _plot(rows, workload, tmp / "benchmark.png")
    return rows


def _plot(rows: list[dict[str, Any]], workload: str, path: Path) -> None:
    """Throughput and the median step time per batch size, a series per precision; the
    per-step p10-p90 of samples/s as a shaded band (a spread, not the throughput)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate_ax, step_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for precision in sorted({r["precision"] for r in rows}):
        series = [r for r in rows if r["precision"] == precision and r["samples_per_s"]]
        batches = [r["global_batch"] for r in series]
        line = rate_ax.plot(
            batches, [r["samples_per_s"] for r in series], marker="o", label=precision
        )[0]
        rate_ax.fill_between(
            batches,
            [r["per_step_samples_per_s_p10"] for r in series],
            [r["per_step_samples_per_s_p90"] for r in series],
            color=line.get_color(),
            alpha=0.15,
        )
        step_ax.plot(batches, [r["step_ms_median"] for r in series], marker="o", label=precision)
    rate_ax.set(xlabel="global batch", ylabel="samples/s (measured steps; band: per-step p10-p90)")
    step_ax.set(xlabel="global batch", ylabel="step time, ms (per-step median)")
    for ax in (rate_ax, step_ax):
        ax.set_xscale("log", base=2)
        ax.legend(title="precision")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{workload}: train-step benchmark")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
