"""training_curves.png (accelpipe.results.curves): the numbers read from train_log.csv and
metrics.json, then the figure drawn from them."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.results.curves import (
    CURVES_FILE,
    SIZE_PX,
    Curves,
    final_evaluation,
    plot_curves,
    read_curves,
    read_evaluations,
    read_steps,
    write_curves,
)

PNG = b"\x89PNG\r\n\x1a\n"
# both engines' columns (engines.train_log.LOG_FIELDS); the curves read step, loss and lr
HEADER = "epoch,step,loss,lr,samples_per_s,data_wait_ms,step_ms,profiled,samples,wall_ms,attempt"


def _log(path: Path, rows: list[tuple[int, int, str, str, int]]) -> Path:
    """train_log.csv with rows of (epoch, step, loss, lr, attempt)."""
    lines = [HEADER] + [f"{e},{s},{loss},{lr},10,1,5,0,4,5,{a}" for e, s, loss, lr, a in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG
    return struct.unpack(">II", data[16:24])  # IHDR: width, height


def test_the_log_gives_one_point_per_logged_step_in_step_order(tmp_path: Path) -> None:
    log = _log(
        tmp_path / "train_log.csv",
        [
            (0, 1, "2.5", "0.1", 0),
            (0, 2, "2.0", "0.1", 0),
            (1, 3, "nan", "0.05", 0),  # a diverged step: no number, a gap in the line
            (1, 4, "1.0", "0.05", 0),
            (1, 4, "1.2", "0.05", 1),  # logged again by the attempt that resumed: it wins
            (1, 5, "0.9", "", 1),
        ],
    )
    steps, loss, lr = read_steps(log)
    assert steps == [1, 2, 3, 4, 5]
    assert loss[:2] == [2.5, 2.0] and math.isnan(loss[2]) and loss[3:] == [1.2, 0.9]
    assert lr[:4] == [0.1, 0.1, 0.05, 0.05] and math.isnan(lr[4])


def test_a_log_without_its_columns_or_missing_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "train_log.csv"
    bad.write_text("epoch,step,samples_per_s\n0,1,3\n")
    with pytest.raises(DataError, match=r"train_log\.csv: no column loss, lr"):
        read_steps(bad)
    with pytest.raises(DataError, match=r"missing\.csv: file not found"):
        read_steps(tmp_path / "missing.csv")


@pytest.mark.parametrize(
    ("metrics", "last_step", "evaluations"),
    [
        ({"top1": 0.25}, 6, [(6, 0.25)]),  # the one final evaluation, at the last step
        ({"top1": 0}, 6, [(6, 0.0)]),
        ({"top1": None, "note": "undefined"}, 6, []),
        ({"top5": 0.5}, 6, []),  # no such metric
        ({"top1": float("nan")}, 6, []),
        ({"top1": True}, 6, []),
        ({"top1": 0.25}, None, []),  # no logged step to put it at
    ],
)
def test_the_final_evaluation_is_the_metric_at_the_last_step(
    metrics: dict, last_step: int | None, evaluations: list
) -> None:
    assert final_evaluation(metrics, "top1", last_step) == evaluations


def test_curves_take_evaluations_during_training_as_step_value_pairs(tmp_path: Path) -> None:
    rows = [(0, s, str(3.0 / s), "0.1", 0) for s in range(1, 21)]
    log = _log(tmp_path / "train_log.csv", rows)
    final = read_curves(log, "mIoU", metrics={"mIoU": 0.4})
    assert final.evaluations == [(20, 0.4)] and len(final.steps) == 20
    during = read_curves(log, "mIoU", evaluations=[(20, 0.4), (10, 0.2)])
    assert during.evaluations == [(10, 0.2), (20, 0.4)]  # in step order


def test_the_png_is_small_and_plots_each_step_and_evaluation(tmp_path: Path) -> None:
    curves = Curves(
        "resnet50/fp32",
        steps=[1, 2, 3, 4, 5, 6],
        loss=[2.0, 1.8, 1.5, math.nan, 1.2, 1.1],
        lr=[0.1, 0.2, 0.3, 0.3, 0.2, 0.1],
        metric="top1",
        evaluations=[(3, 0.1), (6, 0.25)],
    )
    fig = plot_curves(curves, tmp_path / CURVES_FILE)
    assert _png_size(tmp_path / CURVES_FILE) == SIZE_PX
    assert (tmp_path / CURVES_FILE).stat().st_size < 60_000  # inlined once per run
    loss_axes, lr_axes, metric_axes = fig.axes  # twinx() adds the metric's axes last
    ((loss,),) = [loss_axes.get_lines()]
    assert list(loss.get_xdata()) == curves.steps and len(loss.get_ydata()) == 6
    assert list(lr_axes.get_lines()[0].get_ydata()) == curves.lr
    assert list(metric_axes.get_lines()[0].get_xdata()) == [3, 6]
    assert metric_axes.get_ylabel() == "top1"


def test_a_run_without_logged_steps_or_evaluation_still_gets_its_png(tmp_path: Path) -> None:
    log = _log(tmp_path / "train_log.csv", [])
    (tmp_path / "metrics.json").write_text('{"AP": null}')
    curves = write_curves(log, tmp_path / "metrics.json", "AP", tmp_path / CURVES_FILE)
    assert curves.steps == [] and curves.evaluations == []
    assert _png_size(tmp_path / CURVES_FILE) == SIZE_PX


EVAL_HEADER = "epoch,step,samples,metric,value,target,reached,eval_s,run_s"  # EVAL_FIELDS


def _eval_log(path: Path, rows: list[tuple[int, int, str, str]]) -> Path:
    """eval_log.csv with rows of (epoch, step, value, target) of mean_dice."""
    lines = [EVAL_HEADER] + [f"{e},{s},{s * 4},mean_dice,{v},{t},,1.0,{s}.0" for e, s, v, t in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_evaluation_of_the_eval_log_is_marked(tmp_path: Path) -> None:
    """A run that evaluated inside training: each eval_log.csv row is a point at its step,
    with the target it was judged against; metrics.json's final value is not added."""
    log = _log(
        tmp_path / "train_log.csv",
        [(e, s, "1.0", "0.1", 0) for e, s in ((1, 1), (1, 2), (2, 3), (2, 4), (3, 5), (3, 6))],
    )
    evals = _eval_log(
        tmp_path / "eval_log.csv",
        [(1, 2, "0.2", "0.85"), (2, 4, "", "0.85"), (3, 6, "0.9", "0.85")],
    )
    (tmp_path / "metrics.json").write_text('{"mean_dice": 0.9}')
    png = tmp_path / CURVES_FILE
    curves = write_curves(log, tmp_path / "metrics.json", "mean_dice", png, eval_log=evals)
    assert curves.evaluations == [(2, 0.2), (6, 0.9)]  # the undecidable one has no value
    assert curves.target == 0.85
    fig = plot_curves(curves, png)
    metric_axes = fig.axes[-1]
    marked, target = metric_axes.get_lines()
    assert list(marked.get_xdata()) == [2, 6] and list(marked.get_ydata()) == [0.2, 0.9]
    assert set(target.get_ydata()) == {0.85}
    assert _png_size(png) == SIZE_PX


def test_without_an_eval_log_the_final_metric_is_the_one_point(tmp_path: Path) -> None:
    log = _log(tmp_path / "train_log.csv", [(1, 1, "1.0", "0.1", 0), (1, 2, "0.5", "0.1", 0)])
    (tmp_path / "metrics.json").write_text('{"mean_dice": 0.4}')
    curves = write_curves(
        log,
        tmp_path / "metrics.json",
        "mean_dice",
        tmp_path / CURVES_FILE,
        eval_log=tmp_path / "eval_log.csv",  # absent: the run did not evaluate in training
    )
    assert (curves.evaluations, curves.target) == ([(2, 0.4)], None)


def test_a_bad_eval_log_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "eval_log.csv"
    bad.write_text("epoch,step,value\n1,2,0.5\n")
    with pytest.raises(DataError, match=r"eval_log\.csv: no column metric, target"):
        read_evaluations(bad, "mean_dice")
    _eval_log(bad, [(1, 2, "high", "0.85")])
    with pytest.raises(DataError, match=r"eval_log\.csv: could not convert"):
        read_evaluations(bad, "mean_dice")
