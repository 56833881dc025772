"""Evaluation inside PyTorch training: evaluations after due epochs, stopping at the quality
target, and a resume that keeps every evaluation exactly once."""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from accelpipe.config.quality import QualityTarget
from accelpipe.config.settings import ProfileSchedule, ProfileSettings
from accelpipe.core import mllog
from accelpipe.devices.torch_device import resolve
from accelpipe.engines.evaluations import EVAL_LOG, InTrainingEval
from accelpipe.engines.run_log import RunLog
from accelpipe.engines.torch_trainer import CHECKPOINT, Trainer, TrainJob, seed_everything
from tests.helpers.evaluation_checks import check_epoch_numbers, check_mlperf_log, mlperf_verdict
from tests.helpers.settings import torch_train

pytestmark = pytest.mark.torch

STEPS = 4
_VAL = torch.Generator().manual_seed(7)
VAL_X = torch.randn(64, 3, generator=_VAL)
VAL_Y = (VAL_X[:, 0] > 0).long()  # learnable: the sign of the first feature


def _batches(epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1000 + epoch)
    batches = []
    for _ in range(STEPS):
        x = torch.randn(16, 3, generator=g)
        batches.append((x, (x[:, 0] > 0).long()))
    return batches


def _accuracy(model: torch.nn.Module) -> Mapping[str, Any]:
    """A real score: the share of the validation points the model classifies right."""
    assert not model.training and not torch.is_grad_enabled()  # the engine's inference mode
    hits = (model(VAL_X).argmax(dim=1) == VAL_Y).float().mean().item()
    return {"top1": round(hits, 6)}


def _trainer(
    work: Path,
    epochs: int,
    target: float | None,
    score: Callable[[torch.nn.Module], Mapping[str, Any]] | None = None,
    **train: Any,
) -> Trainer:
    seed_everything(0)
    # dropout: training draws from torch's random stream
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(8, 2)
    )
    goal = QualityTarget("resnet50", "top1", target, "the test", "validation accuracy")
    job = TrainJob(
        model,
        torch.nn.functional.cross_entropy,
        _batches,
        STEPS,
        evaluation=InTrainingEval(
            score or _accuracy, goal, train_samples=STEPS * 16, eval_samples=len(VAL_Y)
        ),
    )
    cfg = torch_train(epochs=epochs, lr=0.05, batch_size=16, **train)
    profile = ProfileSettings(False, ProfileSchedule(wait=1, warmup=1, active=1, repeat=1))
    return Trainer(job, resolve("cpu"), cfg, profile, work, run_log=RunLog(work, writes=True))


def _evaluations(work: Path) -> list[dict[str, str]]:
    with (work / EVAL_LOG).open(newline="") as f:
        return list(csv.DictReader(f))


def _mllog(work: Path) -> list[mllog.Entry]:
    """mllog.txt's events, after MLCommons' compliance checker found nothing wrong with it."""
    path = work / mllog.FILENAME
    assert mlperf_verdict(path).problems == []
    return [mllog.parse(line) for line in path.read_text().splitlines()]


def _time_to_target(work: Path) -> float | None:
    """The run time of the first evaluation that reached the target (None: none did)."""
    reached = [float(r["run_s"]) for r in _evaluations(work) if r["reached"] == "1"]
    return reached[0] if reached else None


def _epochs(entries: list[mllog.Entry], key: str) -> list[int]:
    return [int(e.metadata["epoch_num"]) for e in entries if e.key == key]


def test_due_epochs_are_evaluated_and_logged_with_the_runs_time(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, epochs=5, target=1.5, eval_every=2)
    trainer.fit()
    rows = _evaluations(tmp_path)
    assert [(r["epoch"], r["step"], r["samples"]) for r in rows] == [
        ("2", "8", "128"),
        ("4", "16", "256"),
        ("5", "20", "320"),
    ]
    assert all(r["metric"] == "top1" and r["reached"] == "0" for r in rows)  # 1.5: unreachable
    run_s = [float(r["run_s"]) for r in rows]
    assert run_s == sorted(run_s) and all(
        float(r["eval_s"]) <= s for r, s in zip(rows, run_s, strict=True)
    )
    assert trainer.epoch == 5 and trainer.in_training.facts() == {
        "evaluations": 3,
        "stopped_at_target": False,
    }
    entries = _mllog(tmp_path)
    assert _epochs(entries, "epoch_start") == [1, 2, 3, 4, 5]
    accuracy = [(e.metadata["epoch_num"], e.value) for e in entries if e.key == "eval_accuracy"]
    assert accuracy == [(int(r["epoch"]), float(r["value"])) for r in rows]
    assert entries[-1].key == "run_stop" and entries[-1].metadata["status"] == "aborted"
    check_epoch_numbers(tmp_path)  # train_log.csv counts epochs from 1 too


def test_stop_at_target_ends_training_at_the_first_evaluation_that_reaches_it(
    tmp_path: Path,
) -> None:
    straight = _trainer(tmp_path / "straight", epochs=6, target=None, eval_every=1)
    straight.fit()
    values = [float(r["value"]) for r in _evaluations(tmp_path / "straight")]
    target = max(values[:3])  # reached by epoch 3 at the latest, and later too
    first = next(i for i, v in enumerate(values, 1) if v >= target)
    assert first <= 3 < len(values)

    stopping = _trainer(
        tmp_path / "stop", epochs=6, target=target, eval_every=1, stop_at_target=True
    )
    stopping.fit()
    rows = _evaluations(tmp_path / "stop")
    assert [float(r["value"]) for r in rows] == values[:first]  # the same run, cut short
    assert rows[-1]["reached"] == "1" and {r["reached"] for r in rows[:-1]} <= {"0"}
    assert stopping.epoch == first and stopping.step == first * STEPS
    assert stopping.in_training.facts() == {"evaluations": first, "stopped_at_target": True}
    entries = _mllog(tmp_path / "stop")
    assert _epochs(entries, "eval_accuracy") == list(range(1, first + 1))
    assert entries[-1].key == "run_stop" and entries[-1].metadata["status"] == "success"
    check_mlperf_log(tmp_path / "stop" / mllog.FILENAME, _time_to_target(tmp_path / "stop"))
    # without stop_at_target the run reaches it and trains on; MLPerf's run ends at the target
    going_on = _trainer(tmp_path / "on", epochs=6, target=target, eval_every=1)
    going_on.fit()
    assert going_on.epoch == 6 and _evaluations(tmp_path / "on")[first - 1]["reached"] == "1"
    entries = _mllog(tmp_path / "on")
    assert _epochs(entries, "epoch_start") == _epochs(entries, "eval_accuracy")
    assert _epochs(entries, "eval_accuracy") == list(range(1, first + 1))
    assert entries[-1].key == "run_stop" and entries[-1].metadata["status"] == "success"
    check_mlperf_log(tmp_path / "on" / mllog.FILENAME, _time_to_target(tmp_path / "on"))
    check_epoch_numbers(tmp_path / "on")


def _noisy_accuracy(model: torch.nn.Module) -> Mapping[str, Any]:
    """A score that draws from every random stream, as a loader or a transform may."""
    import random

    import numpy as np

    random.random(), np.random.rand(), torch.rand(1)
    return _accuracy(model)


def test_evaluating_inside_training_leaves_the_training_as_it_was(tmp_path: Path) -> None:
    plain = _trainer(tmp_path / "plain", epochs=3, target=None)
    plain.fit()
    evaluated = _trainer(tmp_path / "evaluated", 3, None, _noisy_accuracy, eval_every=1)
    evaluated.fit()
    assert len(_evaluations(tmp_path / "evaluated")) == 3
    assert _losses(tmp_path / "evaluated") == _losses(tmp_path / "plain")


def _losses(work: Path) -> list[str]:
    with (work / "train_log.csv").open(newline="") as f:
        return [r["loss"] for r in csv.DictReader(f)]


class _Killed(Exception):
    pass


def _kill_after(epoch: int) -> Any:
    def hook(done: int) -> None:
        if done == epoch:
            raise _Killed

    return hook


def test_a_resumed_run_keeps_every_evaluation_exactly_once(tmp_path: Path) -> None:
    straight = _trainer(tmp_path / "straight", epochs=4, target=None, eval_every=1)
    straight.fit()
    expected = [r["value"] for r in _evaluations(tmp_path / "straight")]

    first = _trainer(tmp_path / "resumed", epochs=4, target=None, eval_every=1)
    with pytest.raises(_Killed):
        first.fit(on_epoch_end=_kill_after(2))
    carried = float(_evaluations(tmp_path / "resumed")[-1]["run_s"])
    # killed in epoch 3 after its evaluation was logged, before its checkpoint was written
    with (tmp_path / "resumed" / EVAL_LOG).open("a") as f:
        f.write("3,12,192,top1,0.5,,0,0.1,99.0\n")
    with mllog.MLLog(tmp_path / "resumed" / mllog.FILENAME) as killed:
        killed.start("epoch_start", metadata={"epoch_num": 3})
        killed.start("eval_start", metadata={"epoch_num": 3})
    second = _trainer(tmp_path / "resumed", epochs=4, target=None, eval_every=1)
    assert second.resume() and second.epoch == 2
    assert (tmp_path / "resumed" / CHECKPOINT).exists()
    second.fit()
    rows = _evaluations(tmp_path / "resumed")
    assert [r["epoch"] for r in rows] == ["1", "2", "3", "4"]
    assert [r["value"] for r in rows] == expected  # the resumed run scores as the straight one
    run_s = [float(r["run_s"]) for r in rows]
    assert run_s == sorted(run_s) and run_s[2] > carried  # the clock went on from the checkpoint
    # one log over both attempts: one run_start, each epoch and evaluation once
    entries = _mllog(tmp_path / "resumed")
    assert [e.key for e in entries].count("run_start") == 1
    assert _epochs(entries, "epoch_start") == _epochs(entries, "eval_start") == [1, 2, 3, 4]


def test_a_run_that_reached_its_target_and_stopped_does_not_train_on_when_resumed(
    tmp_path: Path,
) -> None:
    first = _trainer(tmp_path, epochs=4, target=0.0, eval_every=1, stop_at_target=True)
    first.fit()
    assert first.epoch == 1  # any accuracy reaches 0.0
    again = _trainer(tmp_path, epochs=4, target=0.0, eval_every=1, stop_at_target=True)
    assert again.resume()
    again.fit()
    assert again.epoch == 1 and len(_evaluations(tmp_path)) == 1
    keys = [e.key for e in _mllog(tmp_path)]
    assert keys.count("run_start") == keys.count("run_stop") == 1


def test_a_resumed_run_that_trains_past_its_target_keeps_the_log_that_ended_there(
    tmp_path: Path,
) -> None:
    first = _trainer(tmp_path, epochs=2, target=0.0, eval_every=1)
    first.fit()  # reached after epoch 1, trained on to 2; then resumed to train on to 4
    logged = (tmp_path / mllog.FILENAME).read_text()
    again = _trainer(tmp_path, epochs=4, target=0.0, eval_every=1)
    assert again.resume() and again.epoch == 2
    again.fit()
    assert again.epoch == 4 and len(_evaluations(tmp_path)) == 4
    assert (tmp_path / mllog.FILENAME).read_text() == logged  # MLPerf's run ended at epoch 1
    assert _epochs(_mllog(tmp_path), "epoch_start") == [1]


def test_eval_every_without_an_evaluation_from_the_workload_is_refused(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    job = TrainJob(model, torch.nn.functional.cross_entropy, _batches, STEPS)
    profile = ProfileSettings(False, ProfileSchedule(wait=1, warmup=1, active=1, repeat=1))
    with pytest.raises(ValueError, match="eval_every"):
        Trainer(job, resolve("cpu"), torch_train(epochs=1, eval_every=1), profile, tmp_path)
