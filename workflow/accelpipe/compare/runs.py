"""Which run folders results/compare shows, and which of their files it reads.

Snakemake calls these while planning: the files are the compare rule's inputs because they
exist, never because a rule makes them, so comparing runs never schedules training.
"""

from __future__ import annotations

import re
from pathlib import Path

from accelpipe import registry
from accelpipe.curves import CURVES_FILE

PROVENANCE = "provenance.json"  # publish writes it: a folder with one is a finished run
METRICS = "metrics.json"
PERFORMANCE = "performance.json"
TRACE_SUMMARY = "trace_summary.json"
READS = (PROVENANCE, METRICS, PERFORMANCE, TRACE_SUMMARY, CURVES_FILE)  # the page inlines curves
# results/<workload>/<name> folders that are not runs (the rules' `run` constraint agrees)
AGGREGATES = ("cv", "grid", "benchmark", "compare")
_RUN_NAME = re.compile(r"[A-Za-z0-9_-]+")


def run_folders(results: Path) -> list[Path]:
    """Every `results/<workload>/<run>/` folder, finished or not (`accelpipe runs` lists the
    unfinished ones too), in registry order, then by run name."""
    order = list(registry.WORKLOADS)
    runs = [
        path
        for path in results.glob("*/*")
        if path.parent.name in registry.WORKLOADS
        and _RUN_NAME.fullmatch(path.name)
        and path.name not in AGGREGATES
        and path.is_dir()
    ]
    return sorted(runs, key=lambda run: (order.index(run.parent.name), run.name))


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
