"""The summary as a whole (accelpipe.traces.summary, stats, markdown, plot): its outputs,
non-finite times, and one trace given twice."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.traces import plot_step_breakdown, render_markdown, summarize_traces, write_summary
from accelpipe.traces import summary as summary_module
from tests.accelpipe.traces.test_traces_join import cuda_events
from tests.helpers.chrome_traces import (
    CPU,
    GPU,
    assert_close,
    gzipped,
    section,
    stats,
    step_stats,
    write_trace,
    zipped,
)
from tests.helpers.chrome_traces import x_event as _x

NAN, INF = float("nan"), float("inf")


def test_write_summary_writes_json_markdown_and_png(tmp_path: Path) -> None:
    src = write_trace(tmp_path / "cuda.json", cuda_events())
    out = tmp_path / "out"
    summary = write_summary([src], out)
    assert sorted(p.name for p in out.iterdir()) == [
        "step_breakdown.png",
        "summary.json",
        "summary.md",
    ]
    assert json.loads((out / "summary.json").read_text()) == summary
    png = (out / "step_breakdown.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    markdown = (out / "summary.md").read_text()
    # busy 0.25 (mean), 0.5 (total), span 0.25, kernels (1.040 + 0.005) / 2
    assert "| forward | 2 | 0.250 | 0.500 | 0.250 | 0.522 |" in markdown
    assert 'odd {"} name }{' in markdown


# --------------------------------------------------------------------------- NaN


def _nan_events() -> list[dict]:
    return [
        _x("user_annotation", "ProfilerStep#1", 0, 100, CPU),
        _x("user_annotation", "ProfilerStep#2", 100, NAN, CPU),  # skipped
        _x("user_annotation", "ProfilerStep#3", 200, 80, CPU),
        _x("user_annotation", "forward", 10, 70, CPU),
        _x("user_annotation", "forward", 110, NAN, CPU),  # skipped
        _x("user_annotation", "forward", 210, 40, CPU),
        _x("cuda_runtime", "cudaLaunchKernel", 20, 4, CPU, correlation=1),
        _x("kernel", "k1", 60, 10, GPU, correlation=1),
        _x("cuda_runtime", "cudaLaunchKernel", NAN, 4, CPU, correlation=2),  # skipped
        _x("kernel", "k2", 300, 5, GPU, correlation=2),  # so it has no launch
        _x("cuda_runtime", "cudaLaunchKernel", 220, 4, CPU, correlation=3),
        _x("kernel", "k3", 230, INF, GPU, correlation=3),  # skipped
        _x("gpu_memcpy", "Memcpy", -INF, 3, GPU),  # skipped
    ]


def test_non_finite_times_are_skipped_and_counted(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "nan.json", _nan_events(), "compact")
    assert b"NaN" in path.read_bytes() and b"Infinity" in path.read_bytes()
    out = tmp_path / "out"
    summary = write_summary([path], out)
    assert summary["skipped_events"] == {"non_finite_time": 5}
    assert_close(summary["steps"], step_stats([0.1, 0.08]))
    assert_close(
        summary["sections"],
        {"forward": section(2, [0.07, 0.04], kern=[0.01, 0.0], span=[0.01, 0.0], busy=[0.01, 0])},
    )
    activity = summary["device_activity"]
    assert activity["kernel"] == {"count": 2, "total_ms": 0.015}
    assert activity["gpu_memcpy"]["count"] == 0
    assert activity["kernels_without_launch"] == 1  # k2: its launch was skipped

    def refuse(token: str) -> float:
        raise AssertionError(f"summary.json holds {token}")

    text = (out / "summary.json").read_text()
    assert json.loads(text, parse_constant=refuse) == summary
    assert "Events skipped for a NaN or infinite ts/dur: 5" in (out / "summary.md").read_text()


def test_summary_json_is_never_written_with_nan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should a NaN slip through, writing fails rather than emitting non-JSON."""
    path = write_trace(tmp_path / "t.json", cuda_events())
    real = summary_module.summarize_traces
    monkeypatch.setattr(
        summary_module,
        "summarize_traces",
        lambda p, *args: real(p, *args) | {"bytes": float("nan")},
    )
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_summary([path], tmp_path / "out")
    assert not (tmp_path / "out" / "summary.json").exists()


def test_stats_are_finite_for_every_summary_number(tmp_path: Path) -> None:
    summary = summarize_traces([write_trace(tmp_path / "nan.json", _nan_events())])

    def numbers(value: object) -> list[float]:
        if isinstance(value, dict):
            return [x for v in value.values() for x in numbers(v)]
        return [value] if isinstance(value, float) else []

    assert numbers(summary) and all(math.isfinite(x) for x in numbers(summary))


# --------------------------------------------------------------------------- one trace twice


@pytest.mark.parametrize("form", ["gz", "zip"])
def test_the_same_trace_in_two_forms_is_refused(tmp_path: Path, form: str) -> None:
    src = write_trace(tmp_path / "x.json", cuda_events())
    other = gzipped(src) if form == "gz" else zipped(src)
    with pytest.raises(DataError, match=rf"x\.json and .*{other.name}: the same trace twice") as e:
        summarize_traces(sorted([src, other]))
    assert "\n" not in str(e.value)


def test_a_path_listed_twice_is_refused(tmp_path: Path) -> None:
    src = write_trace(tmp_path / "x.json", cuda_events())
    with pytest.raises(DataError, match="listed twice"):
        summarize_traces([src, tmp_path / "." / "x.json"])


def test_same_names_in_different_folders_are_different_traces(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_trace(tmp_path / "a" / "x.json", cuda_events())
    b = gzipped(write_trace(tmp_path / "b" / "x.json", cuda_events()))
    (tmp_path / "b" / "x.json").unlink()
    assert summarize_traces([a, b])["sections"]["forward"]["count"] == 4


# --------------------------------------------------------------------------- markdown, plot


def test_markdown_escapes_table_cells_and_handles_no_sections() -> None:
    base = {"traces": ["t.json"], "bytes": 10, "events": 1, "device": "cpu", "steps": None}
    one = stats([1.0])
    sections = {"a|b": section(1, [1.0])}
    text = render_markdown(base | {"sections": sections})
    assert "| a\\|b | 1 | 1.000 | 1.000 | 1.000 | – | – | – |\n" in text
    assert "No `record_function` sections" in render_markdown(base | {"sections": {}})
    steps = {"count": 2, "ms": one, "incomplete_left_out": 1}
    text = render_markdown(base | {"steps": steps, "sections": {}})
    assert "- Steps: 2 (1 incomplete last step left out), mean 1.000 ms" in text


def test_plot_without_steps_or_sections_is_still_a_png(tmp_path: Path) -> None:
    summary = {"traces": [], "bytes": 0, "events": 0, "device": "cpu", "steps": None}
    png = tmp_path / "empty.png"
    plot_step_breakdown(summary | {"sections": {}}, png)
    assert png.read_bytes().startswith(b"\x89PNG")


def test_plot_takes_dollar_signs_in_names_literally(tmp_path: Path) -> None:
    """A name like `cost $x_$` is a mathtext parse error unless the dollars are escaped."""
    one = stats([1.0])
    sec = {"count": 1, "host_busy_ms": one, "host_span_ms": one, "kernel_ms": one}
    sec |= {"kernel_span_ms": one}
    summary = {"traces": [], "bytes": 0, "events": 1, "device": "cuda"}
    summary |= {"steps": {"count": 1, "ms": one}, "sections": {"cost $x_$": sec}}
    png = tmp_path / "dollar.png"
    plot_step_breakdown(summary, png)
    assert png.read_bytes().startswith(b"\x89PNG")
