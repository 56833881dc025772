"""training_curves.png: a run's loss and learning rate per logged step and its evaluations.

The publish step draws it into `results/<workload>/<run>/` from the run's train_log.csv
(`epoch, step, loss, lr, ...` per logged step, both engines), its eval_log.csv where it
evaluated inside training, else its metrics.json, and the compare page shows it small.
`read_curves` gathers the numbers (no matplotlib), `plot_curves` draws them: loss on the left
with the quality metric at each evaluated step on a second axis (and the target the run was
judged against, where it had one), learning rate on the right. Evaluations are (step, value)
pairs: every row of eval_log.csv (`read_evaluations`), else the one final evaluation at the
last logged step (`final_evaluation`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelpipe.core.errors import DataError
from accelpipe.core.io import read_json
from accelpipe.engines.train_log import read_log

CURVES_FILE = "training_curves.png"
SIZE_PX = (600, 250)  # small: the compare page inlines one per run
DPI = 80
_COLUMNS = ("step", "loss", "lr")
_EVAL_COLUMNS = ("step", "metric", "value", "target")  # of engines.evaluations.EVAL_FIELDS


@dataclass(frozen=True)
class Curves:
    """Per logged step (ascending) its loss and learning rate (NaN where the log has no
    number), and the evaluations of `metric` as (step, value)."""

    title: str
    steps: list[int]
    loss: list[float]
    lr: list[float]
    metric: str
    evaluations: list[tuple[int, float]]
    target: float | None = None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def read_steps(train_log: Path) -> tuple[list[int], list[float], list[float]]:
    """train_log.csv's steps, loss and lr, by step; a step logged twice (an attempt that
    logged past the checkpoint its successor resumed from): the later row."""
    rows = read_log(train_log, _COLUMNS)
    try:
        by_step = {int(row["step"]): (row["loss"], row["lr"]) for row in rows}
    except ValueError as err:  # a step that is not an integer
        raise DataError(f"{train_log}: {err}") from None
    steps = sorted(by_step)
    return (
        steps,
        [_number(by_step[s][0]) for s in steps],
        [_number(by_step[s][1]) for s in steps],
    )


def final_evaluation(
    metrics: dict[str, Any], metric: str, last_step: int | None
) -> list[tuple[int, float]]:
    """metrics.json's `metric` as the evaluation at the last logged step; none where the run
    logged no step or the metric is missing, null or not a finite number."""
    value = metrics.get(metric)
    if last_step is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return []
    return [(last_step, float(value))] if math.isfinite(value) else []


def read_evaluations(eval_log: Path, metric: str) -> tuple[list[tuple[int, float]], float | None]:
    """eval_log.csv's evaluations of `metric` as (step, value), each that had a value (an
    undecidable one has none), and the target they were judged against (None: none)."""
    try:
        with eval_log.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in _EVAL_COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise DataError(f"{eval_log}: no column {', '.join(missing)}")
            rows = [r for r in reader if r["metric"] == metric]
        evaluations = [(int(r["step"]), float(r["value"])) for r in rows if r["value"]]
        targets = {float(r["target"]) for r in rows if r["target"]}
    except FileNotFoundError:
        raise DataError(f"{eval_log}: file not found") from None
    except ValueError as err:  # a step or value that is not a number
        raise DataError(f"{eval_log}: {err}") from None
    return evaluations, targets.pop() if len(targets) == 1 else None


def read_curves(
    train_log: Path,
    metric: str,
    evaluations: Sequence[tuple[int, float]] | None = None,
    metrics: dict[str, Any] | None = None,
    title: str = "",
    target: float | None = None,
) -> Curves:
    """The curves of a run: its log's steps, and `evaluations` if given, else metrics.json's
    final value (`metrics`) at the last step."""
    steps, loss, lr = read_steps(train_log)
    if evaluations is None:
        evaluations = final_evaluation(metrics or {}, metric, steps[-1] if steps else None)
    return Curves(title, steps, loss, lr, metric, sorted(evaluations), target)


def plot_curves(curves: Curves, path: Path) -> Any:
    """Draw `curves` into the PNG `path` (SIZE_PX at DPI); return the matplotlib Figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(SIZE_PX[0] / DPI, SIZE_PX[1] / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    style = {"marker": ".", "markersize": 4} if len(curves.steps) <= 50 else {}
    left.plot(curves.steps, curves.loss, color="tab:blue", linewidth=1, label="loss", **style)
    left.set_ylabel("loss", color="tab:blue")
    positive = [v for v in curves.loss if v > 0]  # NaN compares False
    if positive and len(positive) == len(curves.loss) and max(positive) > 50 * min(positive):
        left.set_yscale("log")
    if curves.evaluations:
        metric_axis = left.twinx()
        at = [step for step, _ in curves.evaluations]
        values = [value for _, value in curves.evaluations]
        metric_axis.plot(at, values, color="tab:red", marker="o", linestyle="-", linewidth=1)
        metric_axis.set_ylabel(curves.metric, color="tab:red")
        if curves.target is not None:
            metric_axis.axhline(curves.target, color="tab:red", linestyle=":", linewidth=1)
        if all(0 <= v <= 1 for v in [*values, curves.target or 0]):  # a fraction: in 0..1
            metric_axis.set_ylim(-0.05, 1.05)
        metric_axis.annotate(
            f"{values[-1]:.3f}",
            (at[-1], values[-1]),
            textcoords="offset points",
            xytext=(-4, 6),
            ha="right",
            color="tab:red",
            fontsize="small",
        )
    right.plot(curves.steps, curves.lr, color="tab:green", linewidth=1, **style)
    right.set_ylabel("learning rate")
    right.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in (left, right):
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize="small")
        if not curves.steps:
            ax.text(0.5, 0.5, "no logged step", ha="center", va="center", transform=ax.transAxes)
    if curves.title:
        fig.suptitle(curves.title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=DPI)
    return fig


def write_curves(
    train_log: Path,
    metrics_json: Path,
    metric: str,
    path: Path,
    title: str = "",
    eval_log: Path | None = None,
) -> Curves:
    """training_curves.png of a run from its train_log.csv and, where the run evaluated
    inside training (`eval_log` exists), every evaluation of its eval_log.csv, else the final
    value in metrics.json."""
    if eval_log is not None and eval_log.exists():
        evaluations, target = read_evaluations(eval_log, metric)
        curves = read_curves(train_log, metric, evaluations, title=title, target=target)
    else:
        curves = read_curves(train_log, metric, metrics=read_json(metrics_json), title=title)
    plot_curves(curves, path)
    return curves
