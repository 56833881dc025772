"""The summarize-trace stage: the summary, and the profiler's tables and memory snapshot
gathered from beside the traces; which files of the folder it reads (a folder of TF XSpace
files end to end: tests/accelpipe/traces/test_traces_tensorflow.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from accelpipe.core.errors import AccelpipeError
from accelpipe.engines import ENGINES, MEMORY_SNAPSHOT, PROFILER_TABLES
from accelpipe.stages.trace import run_summarize_trace, trace_files
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


def test_a_folder_with_chrome_traces_and_xspace_files_is_refused(tmp_path: Path) -> None:
    """The same profile in two forms would count every event twice."""
    traces = tmp_path / "traces"
    xplane = traces / "plugins" / "profile" / "2026_01_01_00_00_00" / "host.xplane.pb"
    xplane.parent.mkdir(parents=True)
    xplane.write_bytes(b"")
    write_trace(traces / "trace_step000004.json", cuda_events())
    out = tmp_path / "trace"
    with pytest.raises(AccelpipeError, match=r"Chrome traces .* and TensorFlow XSpace"):
        run_summarize_trace(argparse.Namespace(traces=str(traces), out=str(out)))
    assert not out.exists()


def test_a_folder_without_traces_names_what_it_looks_for(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("no trace")
    with pytest.raises(AccelpipeError, match=r"no trace files .*xplane\.pb"):
        run_summarize_trace(argparse.Namespace(traces=str(tmp_path), out=str(tmp_path / "o")))


def test_xspace_files_are_found_anywhere_under_the_folder(tmp_path: Path) -> None:
    found = [
        tmp_path / "plugins" / "profile" / "run2" / "b.xplane.pb",
        tmp_path / "plugins" / "profile" / "run1" / "a.xplane.pb",
        tmp_path / "c.xplane.pb",
    ]
    for path in found:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    assert trace_files(tmp_path) == sorted(found)
