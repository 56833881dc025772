"""`summarize-trace`: one summary of a run's profiler traces."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from accelpipe import provenance, traces
from accelpipe.errors import AccelpipeError
from accelpipe.io import atomic_path

TRACE_SUFFIXES = (".json", ".json.gz", ".zip")


def run_summarize_trace(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    paths = sorted(p for p in Path(args.traces).iterdir() if p.name.endswith(TRACE_SUFFIXES))
    if not paths:
        raise AccelpipeError(f"{args.traces}: no trace files (*.json, *.json.gz, *.zip)")
    with atomic_path(args.out) as tmp:
        traces.write_summary(paths, tmp)
        provenance.write_stage(tmp, "trace", started, traces=[p.name for p in paths])
