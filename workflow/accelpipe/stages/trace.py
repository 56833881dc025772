"""`summarize-trace`: one summary of a run's profiler traces, with the profiler's own tables
and memory snapshot that the train stage left beside them."""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from accelpipe import provenance, traces
from accelpipe.engines import ENGINES, MEMORY_SNAPSHOT, PROFILER_TABLES
from accelpipe.errors import AccelpipeError
from accelpipe.io import atomic_path

TRACE_SUFFIXES = (".json", ".json.gz", ".zip")


def run_summarize_trace(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    folder = Path(args.traces)
    paths = sorted(p for p in folder.iterdir() if p.name.endswith(TRACE_SUFFIXES))
    if not paths:
        raise AccelpipeError(f"{args.traces}: no trace files (*.json, *.json.gz, *.zip)")
    with atomic_path(args.out) as tmp:
        traces.write_summary(paths, tmp)
        copied = copy_profiler_outputs(folder, tmp)
        provenance.write_stage(
            tmp, "trace", started, traces=[p.name for p in paths], profiler_outputs=copied
        )


def copy_profiler_outputs(folder: Path, out: Path) -> list[str]:
    """Each cycle's profiler table (the engines' `profiler_table` files) into
    `out/PROFILER_TABLES/`, and the memory snapshot into `out`; their new relative paths."""
    suffixes = tuple(engine.profiler_table for engine in ENGINES.values())
    tables = sorted(p for p in folder.iterdir() if p.name.endswith(suffixes))
    snapshot = folder / MEMORY_SNAPSHOT
    targets = [(t, Path(PROFILER_TABLES, t.name)) for t in tables]
    targets += [(snapshot, Path(MEMORY_SNAPSHOT))] if snapshot.exists() else []
    for source, target in targets:
        (out / target).parent.mkdir(exist_ok=True)
        shutil.copy2(source, out / target)
    return [str(target) for _, target in targets]
