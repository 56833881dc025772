"""results/<workload>/grid: the finished runs of a hyperparameter grid ranked by the
workload's quality metric, with their settings, throughput and time to train.

Everything comes from the published run folders (metrics.json, performance.json,
provenance.json), so the table always agrees with the runs it ranks: throughput and time to
train are performance.json's (the measured steps' samples over their wall time, warm-up and
profiled steps left out), the same numbers the run's report, the benchmark table and `compare`
show.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from accelpipe.compare.runs import run_of
from accelpipe.errors import DataError
from accelpipe.grid import split_key
from accelpipe.io import atomic_path, read_json, write_csv, write_json
from accelpipe.performance import PERFORMANCE_FILE


def _row(run_dir: Path, workload: str, metric: str, keys: list[str]) -> dict[str, Any]:
    metrics = read_json(run_dir / "metrics.json")
    if metric not in metrics:
        raise DataError(f"{run_dir / 'metrics.json'}: no {metric!r}")
    provenance = read_json(run_dir / "provenance.json")
    performance = read_json(run_dir / PERFORMANCE_FILE)
    block = provenance["config"][workload]
    settings = {}
    for key in keys:
        section, name = split_key(key)
        settings[key] = block[section].get(name)
    return {
        "run": run_of(run_dir)[1].removesuffix("/fold0"),  # a cross-validated run's fold 0
        metric: metrics[metric],
        **settings,
        "samples_per_s": performance["throughput"]["samples_per_s"],
        "train_seconds": performance["time_to_train_s"],
    }


def _undefined(value: Any) -> bool:
    """A metric that is null (nothing it could score, e.g. no class present) or NaN: such a
    run ranks last, and its bar is empty."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def rank_runs(
    run_dirs: list[Path], workload: str, metric: str, keys: list[str], out: Path
) -> list[dict[str, Any]]:
    """Write grid.csv, grid.json and grid.png into `out` (atomic); return the ranked rows
    (best first; ties keep run-name order)."""
    rows = sorted(
        (_row(d, workload, metric, keys) for d in sorted(run_dirs)),
        key=lambda r: math.inf if _undefined(r[metric]) else -r[metric],
    )
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    columns = ["rank", "run", metric, *keys, "samples_per_s", "train_seconds"]
    with atomic_path(out) as tmp:
        tmp.mkdir()
        write_csv(tmp / "grid.csv", rows, columns)
        write_json(tmp / "grid.json", {"metric": metric, "keys": keys, "runs": rows})
        _plot(rows, metric, tmp / "grid.png")
    return rows


def _plot(rows: list[dict[str, Any]], metric: str, path: Path) -> None:
    """Metric per run (best at the top) beside its throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["run"] for r in rows][::-1]
    height = 1.2 + 0.35 * len(rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, height), sharey=True)
    left.barh(names, [0 if _undefined(r[metric]) else r[metric] for r in rows][::-1])
    left.set_xlabel(metric)
    right.barh(names, [r["samples_per_s"] or 0 for r in rows][::-1], color="tab:gray")
    right.set_xlabel("samples/s (measured steps)")
    fig.suptitle(f"grid: {len(rows)} runs ranked by {metric}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
