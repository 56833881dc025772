"""The summarizer reads TensorFlow trace viewer JSON (accelpipe.traces.tf_sections): real
traces written by the TF engine (ops and XLA) and by a loop outside the pipeline (steps
marked by `Trace("step", step_num=i)`, given as TF's own XSpace) checked against a plain
reading of their events, hand-built traces (GPU rows; ops whose busy time, span and step
breakdown are known exactly), and the summarize-trace stage end to end.

No torch here: `make test-tf215` runs this module under TensorFlow 2.15 too."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from accelpipe.cli import main
from accelpipe.core.keras2 import keras
from accelpipe.core.xspace import xspace_to_trace_json
from accelpipe.traces import render_markdown, summarize_traces, write_summary
from tests.helpers import tf_toy
from tests.helpers.chrome_traces import plain_breakdown, union_us
from tests.helpers.settings import tf_run

pytestmark = pytest.mark.tensorflow

SCOPE = {"forward": "forward", "loss": "loss", "backward": "backward"}
SCOPE |= {"gradient_tape": "backward", "optimizer_step": "optimizer_step"}


def _run(work: Path, compile_: bool) -> Path:
    schedule = {"wait": 1, "warmup": 0, "active": 2, "repeat": 1}
    cfg = {
        "backend": "cpu",
        "train": {"epochs": 1, "lr": 0.05, "seed": 3, "batch_size": 4, "compile": compile_},
        "profile": {"enabled": True, "schedule": schedule},
    }
    try:
        tf_run(cfg, work, tf_toy.make_job)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return work / "traces"


@pytest.fixture(scope="module")
def eager_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("tf_eager"), compile_=False)


@pytest.fixture(scope="module")
def xla_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("tf_xla"), compile_=True)


def _load(path: Path) -> list[dict]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        return json.load(f)["traceEvents"]


def _plain(events: list[dict]) -> dict:
    """An independent reading: json.load and loops (all events here are on the host).
    Steps: events with args.step_num. Per section, per instance (Trace events: one each;
    op scopes: one per group_id) the host busy time (union of its intervals) and span; and
    per step, its breakdown (``plain_breakdown``) among all section intervals."""
    steps, intervals, groups = [], [], defaultdict(lambda: defaultdict(list))
    markers = sorted(  # step markers: (start, end, step group: its group_id, else its own)
        (ev["ts"], ev["ts"] + ev["dur"], ev["args"].get("group_id", ("marker", i)))
        for i, ev in enumerate(events)
        if ev.get("ph") == "X" and "step_num" in (ev.get("args") or {})
    )
    for ev in events:
        if ev.get("ph") != "X":
            continue
        args, end = ev.get("args") or {}, ev["ts"] + ev["dur"]
        if "step_num" in args:
            steps.append((ev["ts"], end))
        elif ev["name"] in ("loader_first", "loader_next", "step"):
            groups[ev["name"]][id(ev)].append((ev["ts"], end))
            intervals.append((ev["name"], ev["ts"], end))
        elif "/" in args.get("long_name", ""):
            sec = SCOPE.get(args["long_name"].split("/")[0])
            if sec is not None:
                group = args.get("group_id", _containing_step(markers, ev["ts"]))
                groups[sec][group].append((ev["ts"], end))
                intervals.append((sec, ev["ts"], end))
    sections = {
        name: [
            (union_us(ivs), max(e for _, e in ivs) - min(s for s, _ in ivs)) for ivs in g.values()
        ]
        for name, g in groups.items()
    }
    breakdown = [plain_breakdown(lo, hi, intervals) for lo, hi in steps]
    return {"steps": [hi - lo for lo, hi in steps], "sections": sections, "breakdown": breakdown}


def _containing_step(markers: list[tuple], ts: float) -> object:
    """The step group of an op without a group_id (TF leaves some ops ungrouped, by timing):
    that of the last step marker starting at or before it, if it ends at or after it; else
    one group for all such ops."""
    before = [m for m in markers if m[0] <= ts]
    return before[-1][2] if before and ts <= before[-1][1] else "ungrouped"


def _check_against_plain(summary: dict, plain: dict) -> None:
    assert summary["steps"]["count"] == len(plain["steps"]) and summary["steps"]["ms"]
    assert summary["steps"]["incomplete_left_out"] == 0
    assert summary["steps"]["ms"]["total"] == pytest.approx(sum(plain["steps"]) / 1e3, abs=1e-6)
    assert set(summary["sections"]) == set(plain["sections"])
    for name, values in plain["sections"].items():
        sec = summary["sections"][name]
        busy, span = [b for b, _ in values], [s for _, s in values]
        assert sec["count"] == len(values), name
        assert sec["host_busy_ms"]["total"] == pytest.approx(sum(busy) / 1e3, abs=1e-6), name
        assert sec["host_busy_ms"]["max"] == pytest.approx(max(busy) / 1e3, abs=1e-6), name
        assert sec["host_span_ms"]["total"] == pytest.approx(sum(span) / 1e3, abs=1e-6), name
        assert sec["host_span_ms"]["max"] == pytest.approx(max(span) / 1e3, abs=1e-6), name
        assert sec["kernel_ms"] is None and sec["device_busy_ms"] is None
    # The breakdown: the plain one's mean per step, and its parts add up to the step.
    n, breakdown = len(plain["breakdown"]), summary["step_breakdown"]
    want = defaultdict(float)
    for step in plain["breakdown"]:
        for name, us in step.items():
            want[name] += us / n / 1e3
    assert breakdown["steps"] == n
    # no_section_ms takes up the others' rounding to 1 ns, so that they add up exactly.
    assert breakdown["no_section_ms"] == pytest.approx(want.pop(None, 0.0), abs=5e-6)
    assert set(breakdown["sections_ms"]) == set(want)
    for name, ms in want.items():
        assert breakdown["sections_ms"][name] == pytest.approx(ms, abs=1e-6), name
    parts = sum(breakdown["sections_ms"].values()) + breakdown["no_section_ms"]
    assert parts == pytest.approx(summary["steps"]["ms"]["mean"], abs=1e-9)
    assert breakdown["step_ms"] == summary["steps"]["ms"]["mean"]


def test_a_real_tf_trace_with_ops_gives_every_section(eager_traces: Path) -> None:
    (path,) = sorted(eager_traces.glob("*.json.gz"))
    summary = summarize_traces([path])
    assert summary["format"] == "tf-trace-viewer" and summary["device"] == "cpu"
    plain = _plain(_load(path))
    assert {"loader_next", "step", "forward", "loss", "backward", "optimizer_step"} <= set(
        plain["sections"]
    )
    _check_against_plain(summary, plain)
    assert summary["device_activity"]["kernel"]["count"] == 0
    assert len(summary["notes"]) == 1  # the rule, no XLA note


def test_a_real_xla_tf_trace_reports_only_host_sections_and_says_why(xla_traces: Path) -> None:
    (path,) = sorted(xla_traces.glob("*.json.gz"))
    summary = summarize_traces([path])
    plain = _plain(_load(path))
    assert set(plain["sections"]) == {"loader_next", "step"}
    _check_against_plain(summary, plain)
    assert any("XLA" in note for note in summary["notes"])


def test_the_stage_writes_summary_json_md_and_png_for_a_tf_run(
    eager_traces: Path, tmp_path: Path
) -> None:
    out = tmp_path / "trace"
    assert main(["summarize-trace", "--traces", str(eager_traces), "--out", str(out)]) == 0
    text = (out / "summary.json").read_text()
    summary = json.loads(text, parse_constant=pytest.fail)  # strict JSON: no NaN
    assert summary["format"] == "tf-trace-viewer" and "forward" in summary["sections"]
    md = (out / "summary.md").read_text()
    assert "| forward |" in md and "| backward |" in md and "Note: TensorFlow trace" in md
    assert (out / "step_breakdown.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- a loop outside the pipeline: TF's XSpace, steps marked by Trace("step", step_num=i) --


@pytest.fixture(scope="module")
def custom_loop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The profiler's log folder; its XSpace is at plugins/profile/<run>/<host>.xplane.pb."""
    logdir = tmp_path_factory.mktemp("tf_custom") / "logs"
    tf_toy.profile_custom_loop(logdir, steps=4)
    return logdir


def test_steps_are_the_trace_mes_with_a_step_num(custom_loop: Path) -> None:
    (xplane,) = custom_loop.glob("plugins/profile/*/*.xplane.pb")
    summary = summarize_traces([xplane])  # converted by the TF engine's xprof conversion
    assert summary["traces"] == [str(xplane)] and summary["format"] == "tf-trace-viewer"
    assert summary["steps"]["count"] == 4
    events = json.loads(xspace_to_trace_json(xplane))["traceEvents"]
    names = {e["name"] for e in events if "step_num" in (e.get("args") or {})}
    assert names == {f"step {i}" for i in range(1, 5)}  # no `train <n>` anywhere
    _check_against_plain(summary, _plain(events))
    secs = summary["sections"]
    assert {"forward", "loss", "backward", "optimizer_step"} == set(secs)
    for sec in secs.values():
        assert sec["host_busy_ms"]["total"] <= sec["host_span_ms"]["total"] + 1e-9
    # Adam reads its variables while forward runs: the span holds far more than its ops.
    opt = secs["optimizer_step"]
    assert opt["host_busy_ms"]["total"] < opt["host_span_ms"]["total"]
    md = render_markdown(summary)
    assert "- Steps: 4, mean" in md and "| (no section) |" in md


def test_the_stage_converts_a_folder_of_xplane_files(custom_loop: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace"
    assert main(["summarize-trace", "--traces", str(custom_loop), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text(), parse_constant=pytest.fail)
    (xplane,) = custom_loop.glob("plugins/profile/*/*.xplane.pb")
    assert summary["traces"] == [str(xplane)] and summary["steps"]["count"] == 4
    breakdown = summary["step_breakdown"]
    parts = sum(breakdown["sections_ms"].values()) + breakdown["no_section_ms"]
    assert parts == pytest.approx(summary["steps"]["ms"]["mean"], abs=1e-9)
    stage = json.loads((out / "stage.json").read_text())
    assert stage["traces"] == [str(xplane.relative_to(custom_loop))]
    assert "## Step breakdown" in (out / "summary.md").read_text()
    assert not list(xplane.parent.glob("*.json*"))  # xprof wrote no cache files beside it


def test_an_unreadable_xplane_is_one_error_naming_it(tmp_path: Path) -> None:
    from accelpipe.core.errors import DataError

    bad = tmp_path / "plugins" / "profile" / "run" / "host.xplane.pb"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not a protobuf \x00\x01\x02")
    with pytest.raises(DataError, match=r"host\.xplane\.pb: xprof could not read"):
        summarize_traces([bad])
    out = tmp_path / "out"
    assert main(["summarize-trace", "--traces", str(tmp_path), "--out", str(out)]) != 0
    assert not out.exists()


# -- a hand-built trace with GPU rows -------------------------------------------------------
#
# Assumed shape (after xprof's trace viewer output for a GPU host; no GPU to record one
# here): process metadata "/host:CPU" (pid 701) and "/device:GPU:0" (pid 1); GPU lines named
# "Stream #N(...)" carrying kernels with string args correlation_id, group_id, tf_op and
# long_name ("<scope path>/<op>:<OpType>"); derived lines on the same process
# ("TensorFlow Name Scope", "TensorFlow Ops", "XLA Ops") repeating the kernels' time;
# host ops on an executor thread with long_name; Trace events and "train <n>" markers on
# the python thread. Times in µs, args values as strings (as xprof writes them).

HOST, GPU = 701, 1
PY, EXEC, STREAM, SCOPES, OPS = 10, 11, 20, 21, 22


def _x(name: str, ts: float, dur: float, pid: int, tid: int, **args: str) -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _gpu_trace() -> dict:
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": HOST, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": GPU, "args": {"name": "/device:GPU:0"}},
    ]
    for tid, name, pid in (
        (PY, "python", HOST),
        (EXEC, "tf_Compute/1", HOST),
        (STREAM, "Stream #7(Kernel)", GPU),
        (SCOPES, "TensorFlow Name Scope", GPU),
        (OPS, "TensorFlow Ops", GPU),
    ):
        meta = {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid}
        events.append(meta | {"args": {"name": name}})
    for step in (1, 2):
        g, t = str(step), 1000.0 * step
        events.append(_x(f"train {step}", t, 900, HOST, PY, group_id=g, step_num=g))
        events.append(_x("loader_next", t + 1, 100, HOST, PY, group_id=g))
        events.append(_x("step", t + 110, 700, HOST, PY, group_id=g))
        for i, (scope, op) in enumerate(
            [("forward/dense", "MatMul"), ("loss/mean", "Mean"),
             ("gradient_tape/forward/dense", "MatMul"), ("optimizer_step/sgd", "Update")]
        ):  # fmt: skip
            long_name = f"{scope}/{op}:{op}"
            h = t + 120 + 20 * i
            events.append(_x(op, h, 10, HOST, EXEC, group_id=g, long_name=long_name))
            k = t + 300 + 50 * i
            kargs = {"group_id": g, "tf_op": long_name, "correlation_id": str(10 * step + i)}
            events.append(_x(f"kernel_{i}", k, 30, GPU, STREAM, **kargs))
            events.append(_x(f"kernel_{i}b", k + 20, 20, GPU, STREAM, **kargs))  # overlaps
            # Derived lines: the same time again; must not count.
            events.append(_x(scope.split("/")[0], k, 40, GPU, SCOPES, group_id=g))
            events.append(_x(long_name, k, 40, GPU, OPS, group_id=g, tf_op=long_name))
        copy = {"group_id": g, "correlation_id": str(99 + step)}
        events.append(_x("MemcpyH2D", t + 200, 5, GPU, STREAM, **copy))
    return {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": events}


def test_a_tf_trace_with_gpu_rows_gives_kernel_time_per_section(tmp_path: Path) -> None:
    path = tmp_path / "trace_step000002.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_gpu_trace()).encode()))
    summary = write_summary([path], tmp_path / "out")
    assert summary["device"] == "gpu" and summary["steps"]["count"] == 2
    secs = summary["sections"]
    assert set(secs) == {"loader_next", "step", "forward", "loss", "backward", "optimizer_step"}
    for name in ("forward", "loss", "backward", "optimizer_step"):
        sec = secs[name]
        assert sec["count"] == 2
        assert sec["host_busy_ms"]["total"] == pytest.approx(0.020)  # one 10 µs op per step
        assert sec["host_span_ms"]["total"] == pytest.approx(0.020)
        assert sec["kernel_ms"]["total"] == pytest.approx(0.100)  # (30 + 20) µs per step
        assert sec["kernel_span_ms"]["mean"] == pytest.approx(0.040)  # k .. k + 40
        assert sec["device_busy_ms"]["mean"] == pytest.approx(0.040)  # union, not the sum
    # "step" holds all kernels of its step (time inside the event covered by any kernel).
    assert secs["step"]["kernel_ms"] is None
    assert secs["step"]["device_busy_ms"]["mean"] == pytest.approx(0.160)  # 4 x 40 µs
    activity = summary["device_activity"]
    assert activity["kernel"] == {"count": 16, "total_ms": pytest.approx(0.4)}
    assert activity["gpu_memcpy"] == {"count": 2, "total_ms": pytest.approx(0.01)}
    assert (tmp_path / "out" / "summary.md").exists()


def test_perfetto_and_non_trace_json_are_still_refused(tmp_path: Path) -> None:
    from accelpipe.core.errors import DataError

    perfetto = {"traceEvents": [_x("RunTask", 0, 1, 1, 2)], "systemTraceEvents": ""}
    for name, doc in (("p.json", perfetto), ("n.json", {"traceEvents": [{"a": 1}]})):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        with pytest.raises(DataError):
            summarize_traces([path])
