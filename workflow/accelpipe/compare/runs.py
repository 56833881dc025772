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


def finished_runs(results: Path) -> list[Path]:
    """Every `results/<workload>/<run>/` with provenance.json, in registry order, then by
    run name."""
    order = list(registry.WORKLOADS)
    runs = [
        path.parent
        for path in results.glob(f"*/*/{PROVENANCE}")
        if path.parent.parent.name in registry.WORKLOADS
        and _RUN_NAME.fullmatch(path.parent.name)
        and path.parent.name not in AGGREGATES
    ]
    return sorted(runs, key=lambda run: (order.index(run.parent.name), run.name))


def run_files(run_dir: Path) -> list[Path]:
    """The files of a run that the page is made of, those it has (a run published before
    performance.json existed has none)."""
    return [run_dir / name for name in READS if (run_dir / name).exists()]
