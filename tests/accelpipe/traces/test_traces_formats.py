"""Telling PyTorch profiler traces from other profilers' chrome-trace JSON
(accelpipe.traces.formats): the others are refused with a message saying what they are."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.traces import detect_format, reader, summarize_traces
from accelpipe.traces.collect import FileEvents
from tests.accelpipe.traces.test_traces_join import cuda_events
from tests.helpers.chrome_traces import CPU, write_trace
from tests.helpers.chrome_traces import x_event as _x


def _detect(path: Path) -> str:
    fe = FileEvents()
    reader.read_trace(path, fe)
    return detect_format(fe.evidence)


def _tf_trace_viewer(gpu: bool) -> dict:
    """What xprof's trace_viewer tool writes: process/thread metadata named after devices,
    X events without a category, times in µs with displayTimeUnit ns."""
    procs = [(701, "/host:CPU")] + ([(1, "/device:GPU:0 (NVIDIA H100)")] if gpu else [])
    events: list[dict] = []
    for pid, name in procs:
        events.append({"args": {"name": name}, "name": "process_name", "ph": "M", "pid": pid})
        events.append({"args": {"sort_index": pid}, "name": "process_sort_index", "ph": "M"})
    events.append({"args": {"name": "python"}, "name": "thread_name", "ph": "M", "pid": 701})
    for step in range(3):
        base = 1000.0 * step
        events.append({"dur": 900, "name": "train", "ph": "X", "pid": 701, "tid": 9, "ts": base})
        events.append(
            {"dur": 40, "name": "forward/MatMul", "ph": "X", "pid": 701, "tid": 9, "ts": base + 5}
        )
        if gpu:
            ev = {"dur": 30, "name": "volta_sgemm", "ph": "X", "pid": 1, "tid": 2, "ts": base + 9}
            events.append(ev | {"args": {"correlation_id": step}})
    return {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": events}


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu-rows", "cpu-only"])
def test_tensorflow_trace_viewer_json_is_accepted(tmp_path: Path, gpu: bool) -> None:
    """TF's trace viewer JSON is read (accelpipe.traces.tf_sections), no longer refused."""
    path = tmp_path / "trace_step000004.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_tf_trace_viewer(gpu)).encode()))
    assert _detect(path) == "tf-trace-viewer"
    summary = summarize_traces([path])
    assert summary["format"] == "tf-trace-viewer"
    # No thread names for the GPU row, so it is no "Stream #" line: no kernels, cpu.
    assert summary["device"] == "cpu"
    assert summary["steps"] is None  # "train" without a step number is no step marker


def test_perfetto_json_is_refused(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "chrome"}},
            {
                "ph": "X",
                "cat": "toplevel",
                "name": "RunTask",
                "pid": 1,
                "tid": 2,
                "ts": 0,
                "dur": 5,
            },
        ],
        "displayTimeUnit": "ns",
        "systemTraceEvents": "# tracer: nop\n",
    }
    path = tmp_path / "perfetto.json"
    path.write_text(json.dumps(doc))
    assert _detect(path) == "perfetto"
    with pytest.raises(DataError, match=r"perfetto\.json: looks like a Perfetto JSON export"):
        summarize_traces([path])


def test_a_chrome_trace_from_another_producer_is_refused(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "v8", "name": "Compile", "pid": 1, "tid": 1, "ts": 0, "dur": 9}]
    path = tmp_path / "chrome.json"
    path.write_text(json.dumps(events))
    assert _detect(path) == "chrome"
    with pytest.raises(DataError, match=r"chrome.json: .*without any kineto event category.*v8"):
        summarize_traces([path])


@pytest.mark.parametrize(
    "events",
    [
        cuda_events(),
        [_x("user_annotation", "load", 0, 10, CPU)],  # CPU-only, annotations only
        [_x("cpu_op", "aten::mm", 0, 10, CPU)],  # bulk events only
    ],
    ids=["cuda", "cpu-annotation", "cpu-ops"],
)
def test_kineto_traces_are_recognised(tmp_path: Path, events: list[dict]) -> None:
    path = write_trace(tmp_path / "t.json", events)
    assert _detect(path) == "kineto"
    assert summarize_traces([path])["format"] == "kineto"


def test_kineto_is_recognised_when_its_categories_come_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metadata and instant events first, the first kineto category blocks later."""
    meta = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": i} for i in range(200)]
    events = [*meta, _x("cpu_op", "aten::mm", 0, 10, CPU)]
    path = write_trace(tmp_path / "late.json", events, "compact")
    monkeypatch.setattr(reader, "CHUNK_BYTES", 256)
    assert _detect(path) == "kineto"


@pytest.mark.tensorflow
def test_a_real_xprof_trace_is_accepted(tmp_path: Path) -> None:
    """The JSON our TF engine writes (XSpace converted by xprof), from a real TF profile."""
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("xprof")
    from accelpipe.core.xspace import xspace_to_trace_json

    logdir = tmp_path / "log"
    tf.profiler.experimental.start(str(logdir))
    x = tf.random.normal((32, 32))
    for step in range(2):
        with tf.profiler.experimental.Trace("train", step_num=step + 1, _r=1):
            tf.reduce_sum(tf.matmul(x, x))
    tf.profiler.experimental.stop()
    (xplane,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    path = tmp_path / "trace_step000002.json.gz"
    path.write_bytes(gzip.compress(xspace_to_trace_json(xplane).encode()))
    assert _detect(path) == "tf-trace-viewer"
    summary = summarize_traces([path])
    assert summary["format"] == "tf-trace-viewer" and summary["device"] == "cpu"
    assert summary["steps"]["count"] + summary["steps"]["incomplete_left_out"] == 2
