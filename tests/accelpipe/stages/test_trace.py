"""The summarize-trace stage: the summary, and the profiler's tables and memory snapshot
gathered from beside the traces."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from accelpipe.engines import ENGINES, MEMORY_SNAPSHOT, PROFILER_TABLES
from accelpipe.stages.trace import run_summarize_trace
from tests.accelpipe.traces.test_traces_join import cuda_events
from tests.helpers.chrome_traces import write_trace


def test_tables_and_snapshot_travel_with_the_summary(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    write_trace(traces / "trace_step000004.json", cuda_events())
    tables = [f"trace_step000004{e.profiler_table}" for e in ENGINES.values()]
    for name in tables:
        (traces / name).write_text(name)
    (traces / MEMORY_SNAPSHOT).write_bytes(b"snapshot")
    (traces / "notes.txt").write_text("not the profiler's")
    out = tmp_path / "trace"
    run_summarize_trace(argparse.Namespace(traces=str(traces), out=str(out)))
    assert sorted(p.name for p in (out / PROFILER_TABLES).iterdir()) == sorted(tables)
    assert (out / PROFILER_TABLES / tables[0]).read_text() == tables[0]
    assert (out / MEMORY_SNAPSHOT).read_bytes() == b"snapshot"
    stage = json.loads((out / "stage.json").read_text())
    assert stage["traces"] == ["trace_step000004.json"]
    assert stage["profiler_outputs"] == [
        *(f"{PROFILER_TABLES}/{name}" for name in sorted(tables)),
        MEMORY_SNAPSHOT,
    ]


def test_without_tables_the_output_is_the_summary_alone(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    write_trace(traces / "trace_step000004.json", cuda_events())
    out = tmp_path / "trace"
    run_summarize_trace(argparse.Namespace(traces=str(traces), out=str(out)))
    assert sorted(p.name for p in out.iterdir()) == [
        "stage.json",
        "step_breakdown.png",
        "summary.json",
        "summary.md",
    ]
    assert json.loads((out / "stage.json").read_text())["profiler_outputs"] == []
