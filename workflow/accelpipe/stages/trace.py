"""`summarize-trace`: one summary of a run's profiler traces, with the profiler's own tables
and memory snapshot that the train stage left beside them.

The folder holds Chrome traces (`*.json`, `*.json.gz`, `*.zip`: kineto, or TF trace viewer
JSON) or, from TensorFlow's profiler outside the pipeline, XSpace files anywhere under it
(`plugins/profile/<run>/<host>.xplane.pb`), which the summarizer converts with xprof. A
folder with both kinds is refused: they may be one profile in its two forms (the TF engine
writes both), which would count every event twice.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from accelpipe import traces
from accelpipe.core import provenance
from accelpipe.core.errors import AccelpipeError
from accelpipe.core.io import atomic_path
from accelpipe.engines import ENGINES, MEMORY_SNAPSHOT, PROFILER_TABLES
from accelpipe.traces.summary import XPLANE_SUFFIX

TRACE_SUFFIXES = (".json", ".json.gz", ".zip")


def run_summarize_trace(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    folder = Path(args.traces)
    paths = trace_files(folder)
    with atomic_path(args.out) as tmp:
        traces.write_summary(paths, tmp, getattr(args, "short_kernel_us", None))
        copied = copy_profiler_outputs(folder, tmp)
        names = [str(p.relative_to(folder)) for p in paths]
        provenance.write_stage(tmp, "trace", started, traces=names, profiler_outputs=copied)


def trace_files(folder: Path) -> list[Path]:
    """The Chrome traces in `folder`, else the XSpace files under it (module docstring)."""
    chrome = sorted(p for p in folder.iterdir() if p.name.endswith(TRACE_SUFFIXES))
    xspace = sorted(folder.rglob(f"*{XPLANE_SUFFIX}"))
    if chrome and xspace:
        raise AccelpipeError(
            f"{folder}: holds Chrome traces ({chrome[0].name}, ...) and TensorFlow XSpace "
            f"files ({xspace[0].relative_to(folder)}, ...); give a folder with one kind, or "
            "every event is counted twice"
        )
    if not chrome and not xspace:
        raise AccelpipeError(
            f"{folder}: no trace files (*.json, *.json.gz, *.zip, or TensorFlow's "
            f"plugins/profile/<run>/<host>{XPLANE_SUFFIX})"
        )
    return chrome or xspace


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
