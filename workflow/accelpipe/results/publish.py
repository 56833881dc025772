"""Publish a run's user-facing folder and aggregate cross-validation folds."""

from __future__ import annotations

import csv
import shutil
import statistics
from pathlib import Path
from typing import Any

from accelpipe.config import registry
from accelpipe.core import mllog, provenance
from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path, read_json, write_json
from accelpipe.engines import MEMORY_SNAPSHOT, PROFILER_TABLES
from accelpipe.engines.evaluations import EVAL_LOG
from accelpipe.engines.train_log import LOG_FILE
from accelpipe.performance import PERFORMANCE_FILE
from accelpipe.performance.report import run_performance
from accelpipe.results import curves

# (stage, file inside that stage's output dir, name in the result folder); the trained
# weights are added per engine (model.pt, ...).
RUN_FILES = (
    ("train", LOG_FILE, LOG_FILE),
    ("evaluate", "metrics.json", "metrics.json"),
    ("trace", "summary.json", "trace_summary.json"),
    ("trace", "summary.md", "trace_summary.md"),
    ("trace", "step_breakdown.png", "step_breakdown.png"),
)

# The train stage's files of a run that evaluated inside training: its evaluations and its
# MLPerf log.
EVALUATED_RUN_FILES = (EVAL_LOG, mllog.FILENAME)


def _evaluation_tables(eval_dir: Path) -> list[Path]:
    """The workload's per-item tables, records and figures (per_case_dice.csv,
    per_category_ap.csv, detections.json, prediction_*.png, ...): the evaluate stage's
    top-level CSV, JSON and PNG files."""
    skipped = {"stage.json", "metrics.json"}  # the stage's own record; metrics: RUN_FILES
    return sorted(
        p
        for p in eval_dir.iterdir()
        if p.suffix in (".csv", ".json", ".png") and p.name not in skipped
    )


def _copy_profiler_outputs(trace_dir: Path, out: Path) -> None:
    """The per-cycle profiler tables (a folder) and the memory snapshot, where the run has
    them: the trace stage gathered them from the train stage's traces."""
    if (trace_dir / PROFILER_TABLES).is_dir():
        shutil.copytree(trace_dir / PROFILER_TABLES, out / PROFILER_TABLES)
    if (trace_dir / MEMORY_SNAPSHOT).exists():
        shutil.copy2(trace_dir / MEMORY_SNAPSHOT, out / MEMORY_SNAPSHOT)


def publish_run(
    stage_dirs: dict[str, Path],
    config_slice: dict[str, Any],
    out: Path,
    weights: str,
    preflight: Path | None = None,
) -> None:
    """Copy the run's artifacts (`weights`: the engine's model file) into `out` and write
    provenance.json (with what the preflight of the run's image saw, where there was one),
    performance.json and training_curves.png (loss and learning rate per logged step, the
    quality metric where evaluated), atomically."""
    with atomic_path(out) as tmp:
        tmp.mkdir()
        for stage, name, target in (("train", weights, weights), *RUN_FILES):
            source = stage_dirs[stage] / name
            if not source.exists():
                raise DataError(f"{source}: missing output of stage '{stage}'")
            shutil.copy2(source, tmp / target)
        for name in EVALUATED_RUN_FILES:  # a run that evaluated inside training
            if (stage_dirs["train"] / name).exists():
                shutil.copy2(stage_dirs["train"] / name, tmp / name)
        for table in _evaluation_tables(stage_dirs["evaluate"]):
            shutil.copy2(table, tmp / table.name)
        _copy_profiler_outputs(stage_dirs["trace"], tmp)
        write_json(tmp / "provenance.json", provenance.build(stage_dirs, config_slice, preflight))
        train = read_json(stage_dirs["train"] / provenance.STAGE_FILE)
        metric = registry.workload(train["workload"]).metric
        curves.write_curves(
            tmp / LOG_FILE,
            tmp / "metrics.json",
            metric,
            tmp / curves.CURVES_FILE,
            title=f"{train['workload']}/{train['run']}",
            eval_log=tmp / EVAL_LOG,
        )
        facts = run_performance(stage_dirs, config_slice, train["workload"], train["run"])
        write_json(tmp / PERFORMANCE_FILE, facts)


def aggregate_folds(run_dirs: list[Path], out: Path) -> dict[str, Any]:
    """results/<workload>/cv: per-fold and mean Dice over the folds' metrics.json."""
    per_fold = {d.name: read_json(d / "metrics.json") for d in sorted(run_dirs)}
    labels = list(next(iter(per_fold.values()))["dice"])
    summary = {
        "folds": {
            run: {"dice": m["dice"], "mean_dice": m["mean_dice"]} for run, m in per_fold.items()
        },
        "mean": {
            "dice": {
                lab: round(statistics.fmean(m["dice"][lab] for m in per_fold.values()), 6)
                for lab in labels
            },
            "mean_dice": round(statistics.fmean(m["mean_dice"] for m in per_fold.values()), 6),
        },
        "std_mean_dice": round(statistics.pstdev(m["mean_dice"] for m in per_fold.values()), 6),
        "n_folds": len(per_fold),
    }
    with atomic_path(out) as tmp:
        tmp.mkdir()
        write_json(tmp / "cv_metrics.json", summary)
        with (tmp / "cv_dice.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["fold", *(f"dice_{lab}" for lab in labels), "mean_dice"])
            for run, m in summary["folds"].items():
                writer.writerow([run, *(m["dice"][lab] for lab in labels), m["mean_dice"]])
            mean = summary["mean"]
            writer.writerow(["mean", *(mean["dice"][lab] for lab in labels), mean["mean_dice"]])
    return summary
