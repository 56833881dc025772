"""results/<workload>/ttt: the time to target of a run trained with several seeds, combined as
MLPerf combines its runs (ttt.json, ttt.csv).

Each seed run's time is its performance.json's `time_to_target_s`. MLPerf's score of a set of
runs is their olympic mean: sorted by time, the fastest and the slowest dropped, the mean of
the rest; a run that never reached the target counts as the slowest, so one such run is
dropped and two leave no score. Beside it: each seed's time, how many reached, the fastest
and slowest time and their ratio (time to train varies a lot by seed: MLPerf UNet3D v1.0 saw
4,441 s and 1,843 s on one system).
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from typing import Any

from accelpipe.compare.runs import run_of
from accelpipe.core.io import atomic_path, read_json, write_json
from accelpipe.performance import PERFORMANCE_FILE

TTT_FILE = "ttt.json"
TABLE_FILE = "ttt.csv"
MIN_SEEDS = 3  # an olympic mean drops two
DEFINITION = (
    "the olympic mean of the seed runs' time_to_target_s (MLPerf's score over runs): the "
    "fastest and the slowest dropped, a run that never reached the target counted as the "
    "slowest; null where fewer than 3 runs, or more than one never reached the target"
)


def olympic_mean(times: list[float | None]) -> tuple[float | None, str | None]:
    """The olympic mean of `times` (None: never reached the target) and, where there is
    none, why."""
    if len(times) < MIN_SEEDS:
        return None, f"{len(times)} seed runs: the olympic mean needs at least {MIN_SEEDS}"
    ranked = sorted(math.inf if t is None else t for t in times)[1:-1]
    if math.inf in ranked:
        missed = sum(t is None for t in times)
        return None, f"{missed} of {len(times)} seed runs never reached the target: one may"
    return round(statistics.fmean(ranked), 3), None


def _seed_row(run_dir: Path, workload: str) -> dict[str, Any]:
    performance = read_json(run_dir / PERFORMANCE_FILE)
    config = read_json(run_dir / "provenance.json")["config"][workload]
    return {
        "run": run_of(run_dir)[1],
        "seed": config["train"]["seed"],
        "time_to_target_s": performance["time_to_target_s"],
        "detail": performance["time_to_target"],
        "time_to_train_s": performance["time_to_train_s"],
    }


def combine(run_dirs: list[Path], workload: str) -> dict[str, Any]:
    """ttt.json's content: each seed run and the combined score."""
    seeds = [_seed_row(d, workload) for d in run_dirs]
    times = [s["time_to_target_s"] for s in seeds]
    score, reason = olympic_mean(times)
    reached = sorted(t for t in times if t is not None)
    return {
        "workload": workload,
        "seeds": seeds,
        "reached": len(reached),
        "olympic_mean_s": score,
        "not_scored": reason,
        "fastest_s": reached[0] if reached else None,
        "slowest_s": reached[-1] if reached else None,
        "slowest_over_fastest": round(reached[-1] / reached[0], 3) if reached else None,
        "definition": DEFINITION,
    }


def write(run_dirs: list[Path], workload: str, out: Path) -> dict[str, Any]:
    """Write ttt.json and ttt.csv (a row per seed run) into `out`, atomically."""
    summary = combine(run_dirs, workload)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        write_json(tmp / TTT_FILE, summary)
        with (tmp / TABLE_FILE).open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["run", "seed", "time_to_target_s", "time_to_train_s"])
            for s in summary["seeds"]:
                ttt = "" if s["time_to_target_s"] is None else s["time_to_target_s"]
                writer.writerow([s["run"], s["seed"], ttt, s["time_to_train_s"]])
            score = summary["olympic_mean_s"]
            writer.writerow(["olympic_mean", "", "" if score is None else score, ""])
    return summary
