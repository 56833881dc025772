"""results/<workload>/grid: the finished runs of a hyperparameter grid ranked by the
workload's quality metric, with their settings, throughput and time to train.

Everything comes from the published run folders (metrics.json, performance.json,
provenance.json), so the table always agrees with the runs it ranks: throughput and time to
train are performance.json's (the measured steps' samples over their wall time, warm-up and
profiled steps left out), the same numbers the run's report, the benchmark table and `compare`
show. Runs with equal metrics share a rank and are marked tied (`tied`; `1=` in the plot).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from accelpipe.compare.runs import run_of
from accelpipe.config.grid import split_key
from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path, read_json, write_csv, write_json
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


def _mark_ranks(rows: list[dict[str, Any]], metric: str) -> None:
    """Rank sorted `rows` as competitions do: runs with equal metrics share a rank and are
    marked `tied`, the next rank counts them all (1, 1, 3); runs without a metric share
    the last rank."""

    def place(row: dict[str, Any]) -> float:
        return math.inf if _undefined(row[metric]) else -row[metric]

    counts = Counter(place(row) for row in rows)
    rank = 1
    for i, row in enumerate(rows):
        if i and place(row) != place(rows[i - 1]):
            rank = i + 1
        row["rank"], row["tied"] = rank, counts[place(row)] > 1


def rank_runs(
    run_dirs: list[Path], workload: str, metric: str, keys: list[str], out: Path
) -> list[dict[str, Any]]:
    """Write grid.csv, grid.json and grid.png into `out` (atomic); return the ranked rows
    (best first; tied runs share a rank, in run-name order)."""
    rows = sorted(
        (_row(d, workload, metric, keys) for d in sorted(run_dirs)),
        key=lambda r: math.inf if _undefined(r[metric]) else -r[metric],
    )
    _mark_ranks(rows, metric)
    columns = ["rank", "tied", "run", metric, *keys, "samples_per_s", "train_seconds"]
    table = [row | {"tied": "1" if row["tied"] else "0"} for row in rows]  # as eval_log's flags
    with atomic_path(out) as tmp:
        tmp.mkdir()
        write_csv(tmp / "grid.csv", table, columns)
        write_json(tmp / "grid.json", {"metric": metric, "keys": keys, "runs": rows})
        _plot(rows, metric, tmp / "grid.png")
    return rows


def _plot(rows: list[dict[str, Any]], metric: str, path: Path) -> None:
    """Metric per run (best at the top) beside its throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r['rank']}{'=' if r['tied'] else ''} {r['run']}" for r in rows][::-1]
    height = 1.2 + 0.35 * len(rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, height), sharey=True)
    left.barh(names, [0 if _undefined(r[metric]) else r[metric] for r in rows][::-1])
    left.set_xlabel(metric)
    right.barh(names, [r["samples_per_s"] or 0 for r in rows][::-1], color="tab:gray")
    right.set_xlabel("samples/s (measured steps)")
    ties = " (1=: tied, the same rank)" if any(r["tied"] for r in rows) else ""
    fig.suptitle(f"grid: {len(rows)} runs ranked by {metric}{ties}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
