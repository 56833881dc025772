"""Busy time, span and the step breakdown (accelpipe.traces.intervals) on hand-made
intervals whose answers are known exactly, and through the summarizer on hand-built
TensorFlow and kineto traces (no TensorFlow or torch needed)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from accelpipe.traces import render_markdown, summarize_traces
from accelpipe.traces.intervals import busy_and_span, covered, step_breakdown, union_length
from accelpipe.traces.plot import step_parts
from tests.helpers.chrome_traces import CPU, plain_breakdown, write_trace
from tests.helpers.chrome_traces import x_event as _x


def _a(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


@pytest.mark.parametrize(
    ("pairs", "want"),
    [
        ([(0, 10), (5, 15)], 15),  # overlapping
        ([(0, 10), (2, 3)], 10),  # nested
        ([(0, 5), (5, 8)], 8),  # touching
        ([(3, 4), (0, 1)], 2),  # disjoint, unsorted
        ([(0, 10), (2, 3), (9, 12), (20, 21)], 13),
        ([(5, 2)], 0),  # an end before its start: empty
        ([], 0),
    ],
)
def test_busy_time_is_the_length_of_the_union(pairs: list, want: float) -> None:
    start, end = _a(*(s for s, _ in pairs)), _a(*(e for _, e in pairs))
    assert union_length(start, end) == want


def test_covered_counts_the_union_inside_each_window() -> None:
    got = covered(_a(0, 20, 5), _a(10, 30, 8), _a(5, 10, -5, 25), _a(25, 20, 40, 25))
    assert got.tolist() == [10.0, 0.0, 20.0, 0.0]


def test_busy_and_span_per_instance() -> None:
    key = np.array([2, 1, 1, 2, 1])
    start, end = _a(5, 0, 2, 5, 10), _a(6, 4, 6, 6, 12)
    groups = busy_and_span(key, start, end)
    assert groups.key.tolist() == [1, 2]
    assert (groups.last - groups.first).tolist() == [12.0, 1.0]  # span: 0..12, 5..6
    assert groups.busy.tolist() == [8.0, 1.0]  # [0, 6] + [10, 12]; the same op twice: once
    assert groups.total.tolist() == [10.0, 2.0]
    assert groups.head.tolist() == [1, 0]  # each instance's first-starting interval


NAMES = ["loader_next", "step", "forward", "backward", "optimizer_step", "zero_grad", "outer"]
# One step [0, 100] in process 1: (name, start, end). Forward's ops overlap (two threads),
# an optimizer op runs inside forward, zero_grad sits inside step, one op starts before the
# step, and process 2's intervals are not this step's.
STEP_ONE = [
    ("loader_next", -3, 4),  # 3 µs before the step: not in it
    ("step", 5, 95),
    ("forward", 10, 30),
    ("forward", 20, 40),
    ("optimizer_step", 15, 25),  # inside forward: forward's instant
    ("backward", 40, 55),
    ("optimizer_step", 60, 70),
    ("zero_grad", 72, 80),
]
WANT_ONE = {
    "loader_next": 4.0,
    "forward": 30.0,  # [10, 40]
    "backward": 15.0,
    "optimizer_step": 10.0,  # [60, 70]; [15, 25] is forward's
    "zero_grad": 8.0,  # innermost
    "step": 27.0,  # [5, 10] + [55, 60] + [70, 72] + [80, 95]
}  # no section: [4, 5] + [95, 100] = 6


def _breakdown(steps: list[tuple[int, float, float]], ivs: list[tuple[int, str, float, float]]):
    return step_breakdown(
        np.array([p for p, _, _ in steps]),
        _a(*(lo for _, lo, _ in steps)),
        _a(*(hi for _, _, hi in steps)),
        np.array([NAMES.index(n) for _, n, _, _ in ivs]),
        np.array([p for p, _, _, _ in ivs]),
        _a(*(s for _, _, s, _ in ivs)),
        _a(*(e for _, _, _, e in ivs)),
        NAMES,
    )


def test_the_breakdown_gives_each_instant_to_one_section() -> None:
    ivs = [(1, n, s, e) for n, s, e in STEP_ONE] + [(2, "forward", 0, 100)]
    (parts,), no_section = _breakdown([(1, 0, 100)], ivs)
    assert parts == WANT_ONE
    assert no_section.tolist() == [6.0]
    assert sum(parts.values()) + no_section[0] == 100.0
    assert parts == {k: v for k, v in plain_breakdown(0, 100, STEP_ONE).items() if k}


def test_the_innermost_other_section_takes_the_rest_and_steps_are_split_apart() -> None:
    ivs = [(1, "outer", 0, 50), (1, "step", 10, 20), (1, "outer", 60, 80), (1, "step", 65, 70)]
    ivs += [(1, "forward", 12, 14)]
    parts, no_section = _breakdown([(1, 0, 40), (1, 40, 100), (2, 0, 100)], ivs)
    assert parts[0] == {"outer": 30.0, "step": 8.0, "forward": 2.0}
    assert parts[1] == {"outer": 25.0, "step": 5.0}  # [40, 50] + [60, 65] + [70, 80]
    assert parts[2] == {}  # process 2 has no sections
    assert no_section.tolist() == [0.0, 30.0, 100.0]


# -- a hand-built TensorFlow trace: ops on two executor threads ----------------------------


def _tf_trace(step_name: str) -> dict:
    """Two steps (TraceMe ``step_name`` with step_num, as xprof writes it: "<name> <n>",
    args as strings) shaped like STEP_ONE, 1000 µs apart: the ``step`` Trace on the python
    thread, ops on two executor threads with long_name and group_id."""
    pid, py, ex1, ex2 = 701, 1, 2, 3
    events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "/host:CPU"}}]
    for tid, name in ((py, "python"), (ex1, "tf_Compute/1"), (ex2, "tf_Compute/2")):
        meta = {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid}
        events.append(meta | {"args": {"name": name}})
    ops = {"forward": "forward/dense/MatMul", "backward": "gradient_tape/forward/dense/MatMul"}
    ops |= {"optimizer_step": "optimizer_step/Adam/ReadVariableOp"}
    for i in (1, 2):
        base, g = 1000.0 * i, str(i - 1)

        def x(name: str, start: float, end: float, tid: int, **args: str) -> dict:
            ts, args = base + start, {"group_id": g, **args}  # noqa: B023 (used at once)
            ev = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": end - start}
            return ev | {"args": args}

        marker = f"{step_name} {i}"
        events.append(x(marker, 0, 100, py, step_num=str(i), step_name=marker))
        for k, (name, s, e) in enumerate(STEP_ONE):
            if name in ("loader_next", "step"):
                events.append(x(name, max(s, 0), e, py))  # loader_next from 0 here
            elif name in ops:
                events.append(x("Op", s, e, (ex1, ex2)[k % 2], long_name=f"{ops[name]}:Op"))
        events.append(x("ExecutorState::Process", 6, 94, ex1))  # no scope: no section
    return {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": events}


@pytest.mark.parametrize("step_name", ["step", "train", "my loop"])
def test_a_tf_trace_reports_busy_time_span_and_a_breakdown_that_sums(
    tmp_path: Path, step_name: str
) -> None:
    path = tmp_path / "tf.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_tf_trace(step_name)).encode()))
    summary = summarize_traces([path])
    assert summary["format"] == "tf-trace-viewer"
    assert summary["steps"]["count"] == 2 and summary["steps"]["ms"]["mean"] == 0.1
    secs = summary["sections"]
    # forward: [10, 30] + [20, 40] on two threads: busy 30, span 30, not the 40 they sum to.
    assert secs["forward"]["host_busy_ms"]["mean"] == pytest.approx(0.030)
    assert secs["forward"]["host_span_ms"]["mean"] == pytest.approx(0.030)
    # optimizer_step: [15, 25] inside forward and [60, 70]: busy 20, span 15..70.
    assert secs["optimizer_step"]["host_busy_ms"]["mean"] == pytest.approx(0.020)
    assert secs["optimizer_step"]["host_span_ms"]["mean"] == pytest.approx(0.055)
    assert secs["step"]["host_busy_ms"]["mean"] == secs["step"]["host_span_ms"]["mean"] == 0.09
    breakdown = summary["step_breakdown"]
    want = {k: v / 1e3 for k, v in WANT_ONE.items() if k != "zero_grad"}
    want["loader_next"], want["step"] = 0.004, 0.035  # zero_grad's 8 µs are step's here
    assert list(breakdown["sections_ms"]) == [  # the fixed precedence first, then the rest
        "loader_next", "forward", "backward", "optimizer_step", "step"
    ]  # fmt: skip
    assert breakdown["sections_ms"] == pytest.approx(want, abs=1e-9)
    assert breakdown["no_section_ms"] == pytest.approx(0.006, abs=1e-9)
    total = sum(breakdown["sections_ms"].values()) + breakdown["no_section_ms"]
    assert total == pytest.approx(breakdown["step_ms"], abs=1e-12) and breakdown["step_ms"] == 0.1
    parts = step_parts(summary)
    assert parts.parts["data_wait"] == pytest.approx(0.004)
    assert parts.parts["other"] == pytest.approx(0.041)  # step 0.035 + no section 0.006
    md = render_markdown(summary)
    assert "## Step breakdown (mean of 2 complete steps: 0.100 ms)" in md
    assert "| forward | 0.030 | 30.0 |" in md and "| (no section) | 0.006 | 6.0 |" in md
    assert "| optimizer_step | 2 | 0.020 | 0.040 | 0.055 |" in md


def test_nested_step_markers_count_one_step(tmp_path: Path) -> None:
    """Keras' `train` marker inside a user's own: the outer one is the step."""
    doc = _tf_trace("step")
    inner = []
    for ev in doc["traceEvents"]:
        if ev["name"].startswith("step ") and ev["ph"] == "X":
            inner.append(ev | {"name": "train 9", "ts": ev["ts"] + 1, "dur": 98})
    doc["traceEvents"] += inner
    path = tmp_path / "tf.json"
    path.write_text(json.dumps(doc))
    summary = summarize_traces([path])
    assert summary["steps"]["count"] == 2 and summary["steps"]["ms"]["mean"] == 0.1


# -- a hand-built kineto trace: nested record_functions --------------------------------------


def test_a_kineto_trace_breakdown_takes_the_engine_sections_over_nested_ones(
    tmp_path: Path,
) -> None:
    ann = "user_annotation"
    events = []
    for base in (0.0, 1000.0):
        events += [
            _x(ann, f"ProfilerStep#{int(base) // 1000 + 1}", base, 100, CPU),
            _x(ann, "loader_next", base, 4, CPU),
            _x(ann, "step", base + 5, 90, CPU),
            _x(ann, "forward", base + 10, 30, CPU),
            _x(ann, "loss", base + 40, 5, CPU),
            _x(ann, "backward", base + 45, 15, CPU),
            _x(ann, "## nested ##", base + 50, 5, CPU),  # inside backward: backward's time
            _x(ann, "optimizer_step", base + 60, 10, CPU),
            _x(ann, "Optimizer.step#SGD.step", base + 61, 8, CPU),  # optimizer_step's
            _x(ann, "Optimizer.zero_grad#SGD.zero_grad", base + 72, 8, CPU),
        ]
    summary = summarize_traces([write_trace(tmp_path / "k.json", events)])
    breakdown = summary["step_breakdown"]
    assert breakdown["sections_ms"] == pytest.approx(
        {
            "loader_next": 0.004,
            "forward": 0.030,
            "loss": 0.005,
            "backward": 0.015,
            "optimizer_step": 0.010,
            "step": 0.022,  # 90 - 30 - 5 - 15 - 10 - 8
            "Optimizer.zero_grad#SGD.zero_grad": 0.008,
        },
        abs=1e-9,
    )
    assert breakdown["no_section_ms"] == pytest.approx(0.006, abs=1e-9)
    # A record_function is one interval: its busy time and span are its duration.
    sec = summary["sections"]["backward"]
    assert sec["host_busy_ms"]["mean"] == sec["host_span_ms"]["mean"] == 0.015
    parts = step_parts(summary)
    assert parts.step_ms == 0.1 and sum(parts.parts.values()) == pytest.approx(0.1, abs=1e-12)
    assert parts.parts["other"] == pytest.approx(0.036)  # step + zero_grad + no section
