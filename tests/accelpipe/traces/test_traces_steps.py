"""Incomplete last steps (accelpipe.traces.steps) are left out of step statistics."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from accelpipe.traces import render_markdown, summarize_traces
from tests.helpers.chrome_traces import CPU, assert_close, step_stats, write_trace
from tests.helpers.chrome_traces import x_event as _x

ANN = "user_annotation"


def _loop(n_steps: int, trailing: float | None, base: float = 0.0) -> list[dict]:
    """``n_steps`` steps of 100 µs holding loader + step; then, if ``trailing``, the step
    torch closes at profiler exit, holding no loop work (``trailing`` µs long)."""
    events = []
    for i in range(n_steps):
        t = base + 100 * i
        events += [
            _x(ANN, f"ProfilerStep#{i + 3}", t, 100, CPU),
            _x(ANN, "loader_first" if i == 0 else "loader_next", t + 1, 9, CPU),
            _x(ANN, "step", t + 10, 85, CPU),
        ]
    if trailing is not None:
        events.append(_x(ANN, f"ProfilerStep#{n_steps + 3}", base + 100 * n_steps, trailing, CPU))
    return events


@pytest.mark.parametrize("trailing", [2.0, 5000.0], ids=["short", "long-checkpoint-save"])
def test_an_empty_last_step_is_left_out(tmp_path: Path, trailing: float) -> None:
    summary = summarize_traces([write_trace(tmp_path / "t.json", _loop(3, trailing))])
    assert_close(summary["steps"], step_stats([0.1, 0.1, 0.1], left_out=1))
    assert "(1 incomplete last step left out)" in render_markdown(summary)


def test_a_complete_last_step_is_kept_even_when_short(tmp_path: Path) -> None:
    events = _loop(3, None)
    events += [_x(ANN, "ProfilerStep#6", 300, 20, CPU), _x(ANN, "step", 301, 15, CPU)]
    summary = summarize_traces([write_trace(tmp_path / "t.json", events)])
    assert_close(summary["steps"], step_stats([0.1, 0.1, 0.1, 0.02]))


def test_only_the_last_step_of_each_file_is_judged(tmp_path: Path) -> None:
    """An empty step in the middle is real (it ended at prof.step()); each file of a run
    (one per profiler cycle) may end with its own incomplete step; and a file holding only
    the trailing step is judged against the other files' steps."""
    middle = [*_loop(2, None), _x(ANN, "ProfilerStep#9", 200, 50, CPU), *_loop(1, None, 250)]
    a = write_trace(tmp_path / "a.json", middle)
    b = write_trace(tmp_path / "b.json", _loop(2, 3.0))
    c = write_trace(tmp_path / "c.json", _loop(0, 3.0))
    summary = summarize_traces([a, b, c])
    assert_close(summary["steps"], step_stats([0.1, 0.1, 0.05, 0.1, 0.1, 0.1], left_out=2))


def test_without_sections_a_much_shorter_last_step_is_left_out(tmp_path: Path) -> None:
    events = [_x(ANN, f"ProfilerStep#{i}", 100 * i, 100, CPU) for i in range(3)]
    kept = summarize_traces([write_trace(tmp_path / "a.json", events)])
    assert kept["steps"]["incomplete_left_out"] == 0
    events.append(_x(ANN, "ProfilerStep#3", 300, 5, CPU))
    summary = summarize_traces([write_trace(tmp_path / "b.json", events)])
    assert_close(summary["steps"], step_stats([0.1, 0.1, 0.1], left_out=1))


def test_a_torch_loop_that_ends_mid_cycle(tmp_path: Path) -> None:
    """A real profile: 5 iterations, active 5 after wait 1 and warmup 1, so the loop ends
    inside the cycle and torch closes ProfilerStep#5 at exit, after a 'checkpoint save'
    that makes it the longest step. It is left out; the three real steps are kept."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    model = torch.nn.Linear(8, 8)
    trace_dir = tmp_path / "tb"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=5, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(trace_dir)),
    ) as prof:
        for _ in range(5):
            with record_function("step"):
                model(torch.randn(4, 8)).sum().backward()
            prof.step()
        time.sleep(0.05)  # what our trainer does here: save the epoch's checkpoint
    (path,) = trace_dir.glob("*.json")
    # Read independently: the ProfilerSteps in the file and the step sections inside them.
    events = json.loads(path.read_text())["traceEvents"]
    annotations = [e for e in events if e.get("cat") == ANN and e.get("ph") == "X"]
    steps = sorted(
        (e for e in annotations if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"]
    )
    inside = [
        any(s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for e in annotations if e["name"] == "step")
        for s in steps
    ]
    assert len(steps) == 4 and inside == [True, True, True, False]
    assert steps[-1]["dur"] > max(s["dur"] for s in steps[:-1])
    summary = summarize_traces([path])
    want = [s["dur"] / 1000 for s in steps[:-1]]
    assert_close(summary["steps"], step_stats(want, left_out=1))
