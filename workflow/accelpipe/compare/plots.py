"""The figures of results/compare: quality metric, throughput and the stacked step breakdown,
one bar per run and one panel per workload (their metrics and samples differ, so their scales
do too). A marked run (fastest, most accurate) is drawn in a stronger colour."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelpipe.compare.page import show
from accelpipe.traces.plot import PART_NAMES, StepParts, draw_step_bars

Row = dict[str, Any]
QUALITY, THROUGHPUT, STEPS = "quality.png", "throughput.png", "step_breakdown.png"
PLOTS = (QUALITY, THROUGHPUT, STEPS)


def _by_workload(rows: list[Row]) -> dict[str, list[Row]]:
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row["workload"], []).append(row)
    return groups


def _figure(
    rows: list[Row],
    title: str,
    draw: Callable[[Any, list[Row]], None],
    path: Path,
    legend: bool = False,
) -> None:
    """One panel per workload, stacked, each as tall as its runs need; `legend`: the first
    panel's legend below them all."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups = _by_workload(rows)
    heights = [1.0 + 0.45 * len(runs) for runs in groups.values()]
    fig = Figure(figsize=(10, 1.2 + sum(heights) + (0.8 if legend else 0)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(groups), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)
    for (workload, runs), (ax,) in zip(groups.items(), axes, strict=True):
        draw(ax, runs)
        ax.set_title(workload, loc="left", fontsize="medium")
    fig.suptitle(title)
    if legend:
        fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=3)
        fig.tight_layout(rect=(0, 0.8 / fig.get_figheight(), 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)


def _names(runs: list[Row]) -> list[str]:
    return [run["run"] for run in runs]


def _bars(
    ax: Any,
    runs: list[Row],
    column: str,
    kind: str,
    mark: str,
    missing: str,
    ends: list[float] | None = None,
) -> list[float]:
    """Horizontal bars of `column` (first run on top), labelled past `ends` (default: the
    bars' ends) with the value rounded as the page shows a number of `kind`; a run without
    the value says `missing`."""
    values = [run[column] for run in runs]
    ends = ends or [v or 0.0 for v in values]
    colors = ["tab:blue" if run[mark] else "lightsteelblue" for run in runs]
    y = list(range(len(runs)))
    ax.barh(y, [v or 0.0 for v in values], height=0.6, color=colors)
    for i, value in enumerate(values):
        marked = f"  ({mark.replace('_', ' ')})" if runs[i][mark] else ""
        text = f" {missing}" if value is None else f" {show(value, kind)}{marked}"
        ax.text(ends[i], i, text, va="center")
    ax.set_yticks(y, _names(runs))
    ax.set_ylim(len(runs) - 0.5, -0.5)
    ax.set_xlim(0, max([e for e in ends if e] or [1.0]) * 1.4)
    return values


def _quality(ax: Any, runs: list[Row]) -> None:
    _bars(ax, runs, "metric_value", "metric", "most_accurate", "no value")
    ax.set_xlabel(runs[0]["metric"])


def _throughput(ax: Any, runs: list[Row]) -> None:
    ends = [
        max(run["samples_per_s"] or 0.0, run["per_step_samples_per_s_p90"] or 0.0) for run in runs
    ]
    rates = _bars(ax, runs, "samples_per_s", "rate", "fastest", "not measured", ends)
    for i, (run, rate) in enumerate(zip(runs, rates, strict=True)):
        low, high = run["per_step_samples_per_s_p10"], run["per_step_samples_per_s_p90"]
        if rate is not None and low is not None and high is not None:
            ax.plot([low, high], [i, i], color="black")  # the per-step spread, not a range
    ax.set_xlabel("samples/s over the measured steps' wall time; line: per-step p10 to p90")


def _steps(ax: Any, runs: list[Row]) -> None:
    parts = [
        StepParts(
            run["profiled_step_ms"], {p: run[f"{p}_ms"] for p in PART_NAMES}, run["step_note"]
        )
        if run["profiled_step_ms"] is not None
        else None
        for run in runs
    ]
    draw_step_bars(ax, _names(runs), parts)


def write_plots(rows: list[Row], out: Path) -> None:
    """quality.png, throughput.png and step_breakdown.png into `out`."""
    _figure(rows, "Quality metric per run (higher is better)", _quality, out / QUALITY)
    _figure(rows, "Training throughput per run", _throughput, out / THROUGHPUT)
    _figure(rows, "Mean training step and its parts", _steps, out / STEPS, legend=True)
