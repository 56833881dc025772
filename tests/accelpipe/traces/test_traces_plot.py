"""The stacked step breakdown (accelpipe.traces.plot): a step's parts, from the summary's
step_breakdown, add up to the step; a summary written before it is split by section means."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from accelpipe.traces.plot import (
    PART_NAMES,
    PARTS,
    draw_step_bars,
    kernel_parts,
    plot_step_breakdown,
    step_parts,
)
from tests.helpers.chrome_traces import section, step_stats
from tests.helpers.run_folders import SECTIONS_MS, STEP_MS, trace_summary


def _with_breakdown(shares: dict[str, float], no_section: float = 0.5) -> dict:
    """A summary whose step_breakdown has ``shares`` (ms per step) and ``no_section``."""
    step = sum(shares.values()) + no_section
    breakdown = {"steps": 2, "step_ms": step, "sections_ms": shares, "no_section_ms": no_section}
    return trace_summary(step_ms=step) | {"step_breakdown": breakdown}


SHARES = {"loader_first": 1.0, "loader_next": 2.0, "forward": 4.0, "loss": 1.0}
SHARES |= {"backward": 6.0, "optimizer_step": 3.0, "step": 2.0, "Optimizer.zero_grad": 0.5}


def test_the_parts_are_the_step_breakdown_and_add_up_to_the_step() -> None:
    parts = step_parts(_with_breakdown(SHARES))
    assert parts.step_ms == 20.0
    assert parts.parts == {
        "data_wait": 3.0,  # loader_first + loader_next
        "forward": 4.0,
        "loss": 1.0,
        "backward": 6.0,
        "optimizer_step": 3.0,
        "other": 3.0,  # step 2.0 + Optimizer.zero_grad 0.5 + no section 0.5
    }
    assert sum(parts.parts.values()) == parts.step_ms
    assert list(parts.parts) == list(PART_NAMES)
    assert "2 complete profiler steps" in parts.note


def test_a_trace_split_by_its_structure_fills_the_same_bars() -> None:
    shares = {"data": 2.0, "forward pass": 5.0, "backward pass": 6.0, "optimizer": 3.0}
    summary = _with_breakdown(shares | {"collectives": 1.0})
    summary["step_breakdown"]["basis"] = "structure"
    parts = step_parts(summary)
    assert parts.parts == {
        "data_wait": 2.0,
        "forward": 5.0,
        "loss": 0.0,  # in the forward pass
        "backward": 6.0,
        "optimizer_step": 3.0,
        "other": 1.5,  # collectives 1.0 + no section 0.5
    }
    assert "structure of a PyTorch step" in parts.note


def test_a_part_the_steps_lack_counts_as_zero_and_the_note_names_it() -> None:
    parts = step_parts(_with_breakdown({k: v for k, v in SHARES.items() if k != "loss"}))
    assert parts.parts["loss"] == 0.0
    assert sum(parts.parts.values()) == pytest.approx(parts.step_ms)
    assert "no loss time" in parts.note


def test_without_a_complete_step_there_are_no_parts() -> None:
    assert step_parts(trace_summary(step_ms=None) | {"step_breakdown": None}) is None


# A summary written before the step breakdown (no step_breakdown key): section means.


def test_a_summary_without_a_breakdown_is_split_by_its_section_means() -> None:
    parts = step_parts(trace_summary())
    assert parts.step_ms == STEP_MS
    for part, name in PARTS[1:]:
        assert parts.parts[part] == SECTIONS_MS[name]
    children = sum(SECTIONS_MS[name] for _, name in PARTS[1:])
    assert parts.parts["other"] == pytest.approx(STEP_MS - children)
    assert sum(parts.parts.values()) == pytest.approx(parts.step_ms)
    assert list(parts.parts) == list(PART_NAMES)
    assert "from section means" in parts.note


def test_without_a_breakdown_or_a_profiler_step_the_step_is_loader_next_plus_step() -> None:
    parts = step_parts(trace_summary(step_ms=None))
    assert parts.step_ms == SECTIONS_MS["loader_next"] + SECTIONS_MS["step"]
    assert sum(parts.parts.values()) == pytest.approx(parts.step_ms)
    assert "no complete profiler step" in parts.note


def test_section_means_longer_than_the_step_leave_other_at_zero_and_say_so() -> None:
    parts = step_parts(trace_summary(step_ms=5.0))
    assert parts.parts["other"] == 0.0
    assert parts.step_ms == pytest.approx(sum(parts.parts.values()))
    assert "more than the step" in parts.note


def test_no_breakdown_no_step_and_no_step_section_has_no_parts() -> None:
    assert step_parts(trace_summary(step_ms=None, sections={"forward": 1.0})) is None


def test_each_bar_is_its_parts_stacked_end_to_end() -> None:
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    runs = [step_parts(_with_breakdown(SHARES)), None, step_parts(trace_summary(step_ms=30.0))]
    draw_step_bars(ax, ["a", "b", "c"], runs)
    for row, run in enumerate(runs):
        bars = sorted(
            (p for p in ax.patches if abs(p.get_y() + p.get_height() / 2 - row) < 1e-9),
            key=lambda p: p.get_x(),
        )
        assert len(bars) == len(PART_NAMES)
        widths = [bar.get_width() for bar in bars]
        if run is None:
            assert sum(widths) == 0
            continue
        assert widths == pytest.approx([run.parts[p] for p in PART_NAMES])
        for left, right in itertools.pairwise(bars):
            assert right.get_x() == pytest.approx(left.get_x() + left.get_width())
        assert bars[-1].get_x() + bars[-1].get_width() == pytest.approx(run.step_ms)


def test_the_chart_adds_a_bar_of_the_parts_device_kernel_time(tmp_path: Path) -> None:
    summary = {
        "device": "cuda",
        "steps": step_stats([10.0, 10.0]),
        "sections": {
            "loader_next": section(2, [1.0, 1.0]),
            "step": section(2, [8.0, 8.0]),
            "forward": section(2, [3.0, 3.0], kern=[2.0, 2.0]),
            "backward": section(2, [4.0, 4.0], kern=[3.0, 3.0]),
            "aten::mm": section(4, [1.0] * 4, kern=[0.5] * 4),
        },
    }
    kernels = kernel_parts(summary)
    assert kernels.parts == {p: 0.0 for p in PART_NAMES} | {"forward": 2.0, "backward": 3.0}
    assert kernels.step_ms == 5.0
    assert kernel_parts(trace_summary()) is None  # a CPU trace: no kernels, no second bar
    png = tmp_path / "step_breakdown.png"
    plot_step_breakdown(summary, png)
    assert png.read_bytes().startswith(b"\x89PNG")
