"""Evaluation inside training, engine-free: the schedule, eval_log.csv rows, the run clock."""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from accelpipe.config import quality
from accelpipe.config.quality import QualityTarget, verdict
from accelpipe.core import mllog
from accelpipe.core.errors import ConfigError
from accelpipe.engines.evaluations import (
    EVAL_FIELDS,
    EVAL_LOG,
    Evaluations,
    InTraining,
    InTrainingEval,
    RunClock,
    due,
    in_training_eval,
    reaches,
)
from accelpipe.engines.run_log import RunLog
from tests.helpers.evaluation_checks import mlperf_verdict
from tests.helpers.settings import tf_train

TARGET = QualityTarget("resnet50", "top1", 0.5, "a test", "top-1 of the test")


def _rows(work: Path) -> list[dict[str, str]]:
    with (work / EVAL_LOG).open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    ("every", "epochs", "expected"),
    [(1, 3, [1, 2, 3]), (2, 5, [2, 4, 5]), (4, 4, [4]), (3, 2, [2]), (0, 3, [])],
)
def test_due_every_nth_epoch_and_the_last(every: int, epochs: int, expected: list[int]) -> None:
    assert [e for e in range(1, epochs + 1) if due(e, epochs, every)] == expected


def test_each_evaluation_is_a_row_judged_against_the_target(tmp_path: Path) -> None:
    evaluations = Evaluations(tmp_path, writes=True)
    evaluations.resume(0)
    assert _rows(tmp_path) == []  # a fresh start: no stale log survives
    common = {"eval_s": 0.25, "run_s": 10.0}
    assert not evaluations.add({"top1": 0.25}, TARGET, epoch=1, step=4, samples=32, **common)
    assert evaluations.add({"top1": 0.5}, TARGET, epoch=2, step=8, samples=64, **common)
    rows = _rows(tmp_path)
    assert list(rows[0]) == list(EVAL_FIELDS)
    assert [(r["epoch"], r["value"], r["target"], r["reached"]) for r in rows] == [
        ("1", "0.25", "0.5", "0"),
        ("2", "0.5", "0.5", "1"),
    ]
    assert evaluations.reached


def test_without_a_target_or_a_value_nothing_is_reached(tmp_path: Path) -> None:
    evaluations = Evaluations(tmp_path, writes=True)
    unpublished = QualityTarget("swinunetr", "mean_dice", None, "none", "mean Dice")
    assert not evaluations.add(
        {"mean_dice": 0.9}, unpublished, epoch=1, step=1, samples=1, eval_s=0.0, run_s=1.0
    )
    assert not evaluations.add({}, TARGET, epoch=2, step=2, samples=2, eval_s=0.0, run_s=2.0)
    assert [(r["target"], r["value"], r["reached"]) for r in _rows(tmp_path)] == [
        ("", "0.9", ""),
        ("0.5", "", ""),
    ]
    assert not evaluations.reached


def test_a_resumed_run_keeps_the_rows_up_to_its_checkpoints_step(tmp_path: Path) -> None:
    first = Evaluations(tmp_path, writes=True)
    first.add({"top1": 0.1}, TARGET, epoch=1, step=4, samples=32, eval_s=0.1, run_s=5.0)
    # evaluated after epoch 2, killed before its checkpoint (step 4) was replaced
    first.add({"top1": 0.2}, TARGET, epoch=2, step=8, samples=64, eval_s=0.1, run_s=9.0)
    resumed = Evaluations(tmp_path, writes=True)
    resumed.resume(4)
    assert [r["epoch"] for r in _rows(tmp_path)] == ["1"] and not resumed.reached
    resumed.add({"top1": 0.6}, TARGET, epoch=2, step=8, samples=64, eval_s=0.1, run_s=8.0)
    assert [(r["epoch"], r["value"]) for r in _rows(tmp_path)] == [("1", "0.1"), ("2", "0.6")]
    # a process that does not write reads the same rows
    other = Evaluations(tmp_path, writes=False)
    other.resume(8)
    assert other.reached and len(other.rows) == 2


def test_a_process_that_does_not_write_leaves_the_file_alone(tmp_path: Path) -> None:
    evaluations = Evaluations(tmp_path, writes=False)
    evaluations.add({"top1": 0.9}, TARGET, epoch=1, step=1, samples=1, eval_s=0.0, run_s=1.0)
    assert not (tmp_path / EVAL_LOG).exists() and evaluations.reached


def test_the_run_clock_adds_this_attempts_time_to_what_the_checkpoint_carried() -> None:
    clock = RunClock(carried_s=100.0)
    assert clock.seconds() == 100.0  # not started: initialisation is not counted
    clock.start()
    time.sleep(0.01)
    assert clock.seconds() >= 100.01


@pytest.mark.parametrize(
    ("value", "bar"),
    [(0.5, 0.4), (0.4, 0.4), (0.3, 0.4), (None, 0.4), (float("nan"), 0.4), (0.9, None)],
)
def test_reaches_judges_as_the_verdict_does(value: float | None, bar: float | None) -> None:
    """MLPerf's run_stop is decided by `reaches` before eval_log.csv's verdict is taken."""
    target = QualityTarget("unet2d", "mean_dice", bar, "the test", "mean Dice")
    judged = verdict({"mean_dice": value}, target)["reached"]
    assert reaches(value, target) is (judged is True)


@dataclass(frozen=True)
class _Evaluate:
    """A workload's evaluate settings class, as the builder views the slice's block."""

    batch_size: int


def _unread() -> NoReturn:
    raise AssertionError("the sample counts were read")


def test_an_in_training_evaluation_scores_by_the_evaluate_block_against_the_target() -> None:
    cfg = {"evaluate": {"batch_size": 4}, "target": 0.7}
    evaluation = in_training_eval(
        "ssd",
        cfg,
        tf_train(eval_every=2),
        _Evaluate,
        lambda model, ev: {"AP": model * ev.batch_size},
        lambda: (100, 10),
    )
    assert evaluation is not None
    assert evaluation.score(0.125) == {"AP": 0.5}  # the model, scored with batch_size 4
    assert evaluation.target == quality.target_for("ssd", 0.7)
    assert (evaluation.train_samples, evaluation.eval_samples) == (100, 10)


def test_without_eval_every_there_is_no_evaluation_and_nothing_is_read() -> None:
    evaluation = in_training_eval(
        "ssd", {}, tf_train(eval_every=0), _Evaluate, lambda model, ev: {}, _unread
    )
    assert evaluation is None


def test_an_evaluate_key_the_settings_lack_is_one_error_naming_it() -> None:
    cfg = {"evaluate": {"batch_size": 4, "stride": 2}, "target": None}
    with pytest.raises(ConfigError, match=r"'ssd\.evaluate\.stride'"):
        in_training_eval(
            "ssd", cfg, tf_train(eval_every=1), _Evaluate, lambda model, ev: {}, _unread
        )


def test_mlperfs_time_to_train_is_the_run_clocks_even_when_log_writes_are_slow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_start and run_stop carry the run clock's readings: writing the log's lines (slow
    on a busy machine) adds nothing to MLPerf's time to train, which is eval_log's run_s."""
    write = mllog.MLLog._write

    def slow_write(self: mllog.MLLog, text: str) -> None:
        time.sleep(0.03)
        write(self, text)

    monkeypatch.setattr(mllog.MLLog, "_write", slow_write)
    target = quality.target_for("resnet50", 0.5)
    evaluation = InTrainingEval(lambda model: {"top1": 0.75}, target, 64, 16)
    run_log = RunLog(tmp_path, writes=True)
    in_training = InTraining(
        tmp_path, tf_train(eval_every=1, epochs=2), evaluation, writes=True, run_log=run_log
    )
    in_training.start(0, "cpu", 16)
    in_training.epoch_start(1)
    time.sleep(0.05)
    in_training.epoch_stop(1)
    in_training.after_epoch(1, 4, 64, lambda: evaluation.score(None), lambda reached: reached)
    run_s = float(_rows(tmp_path)[0]["run_s"])
    verdict = mlperf_verdict(run_log.path)
    assert verdict.status == mllog.SUCCESS and verdict.problems == []
    assert verdict.time_to_train_s is not None
    assert abs(verdict.time_to_train_s - run_s) <= 0.002  # the log's and run_s's rounding
