"""Which run folders results/compare shows, and which of their files it reads.

Snakemake calls these while planning: the files are the compare rule's inputs because they
exist, never because a rule makes them, so comparing runs never schedules training.
"""

from __future__ import annotations

import re
from pathlib import Path

from accelpipe.config import registry
from accelpipe.results.curves import CURVES_FILE

PROVENANCE = "provenance.json"  # publish writes it: a folder with one is a finished run
METRICS = "metrics.json"
PERFORMANCE = "performance.json"
TRACE_SUMMARY = "trace_summary.json"
READS = (PROVENANCE, METRICS, PERFORMANCE, TRACE_SUMMARY, CURVES_FILE)  # the page inlines curves
# results/<workload>/<name> folders that are not runs (the rules' `run` constraint agrees)
AGGREGATES = ("cv", "grid", "ttt", "benchmark", "compare", "diff")
_RUN_NAME = re.compile(r"[A-Za-z0-9_-]+")
_FOLD = re.compile(r"fold[0-9]+")


def run_of(run_dir: Path) -> tuple[str, str]:
    """(workload, run) of a run folder: results/<workload>/<run>, or a named run's fold
    results/<workload>/<name>/fold<k> (run `<name>/fold<k>`)."""
    if _FOLD.fullmatch(run_dir.name) and run_dir.parent.parent.name in registry.WORKLOADS:
        return run_dir.parent.parent.name, f"{run_dir.parent.name}/{run_dir.name}"
    return run_dir.parent.name, run_dir.name


def _is_run(path: Path) -> bool:
    workload, run = run_of(path)
    name, _, fold = run.rpartition("/")
    return (
        workload in registry.WORKLOADS
        and (not name or (_RUN_NAME.fullmatch(name) and _FOLD.fullmatch(fold)) is not None)
        and _RUN_NAME.fullmatch(fold) is not None
        and fold not in AGGREGATES
        and path.is_dir()
        and not any(path.glob("fold*/"))  # a named run's folder of folds is not itself one
    )


def run_folders(results: Path) -> list[Path]:
    """Every run folder under `results` (results/<workload>/<run>/, and a cross-validated
    named run's results/<workload>/<name>/fold<k>/), finished or not (`accelpipe runs` lists
    the unfinished ones too), in registry order, then by run."""
    order = list(registry.WORKLOADS)
    candidates = [*results.glob("*/*"), *results.glob("*/*/fold*")]
    runs = [path for path in candidates if _is_run(path)]
    return sorted(runs, key=lambda path: (order.index(run_of(path)[0]), run_of(path)[1]))


def is_finished(run_dir: Path) -> bool:
    return (run_dir / PROVENANCE).exists()


def finished_runs(results: Path) -> list[Path]:
    """Every `results/<workload>/<run>/` with provenance.json, in registry order, then by
    run name."""
    return [run for run in run_folders(results) if is_finished(run)]


def run_files(run_dir: Path) -> list[Path]:
    """The files of a run that the page is made of, those it has (a run published before
    performance.json existed has none)."""
    return [run_dir / name for name in READS if (run_dir / name).exists()]
