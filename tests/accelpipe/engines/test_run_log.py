"""mllog.txt as the engines write it (accelpipe.engines.run_log), judged by MLCommons' own
compliance checker and result summarizer (tests/helpers/evaluation_checks.mlperf_verdict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelpipe.core import mllog
from accelpipe.engines.run_log import RunLog, benchmark_name, mlperf_facts
from tests.helpers.evaluation_checks import MLPERF_RULESETS, mlperf_verdict

WORKLOADS = ("resnet50", "ssd", "unet2d", "swinunetr", "segmenter")


def _run(work: Path, workload: str, accuracies: list[float], reached_at: int | None) -> RunLog:
    """A fresh run's log: an evaluation after each epoch, the target reached after epoch
    `reached_at` (None: never); what the engines call, in their order."""
    run_log = RunLog(work, writes=True)
    facts = mlperf_facts(workload, "cpu", 16, 0.1, 3, train_samples=96, eval_samples=24)
    run_log.begin(0, facts)
    for epoch, accuracy in enumerate(accuracies, 1):
        run_log.epoch_start(epoch)
        run_log.epoch_stop(epoch)
        run_log.eval_start(epoch)
        run_log.eval_stop(epoch, accuracy)
        if epoch == reached_at or epoch == len(accuracies):
            run_log.end(epoch == reached_at)
    run_log.end(reached_at is not None)  # training over: run_stop already logged
    return run_log


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workloads_log_passes_mlcommons_checker(tmp_path: Path, workload: str) -> None:
    run_log = _run(tmp_path, workload, [0.2, 0.5], reached_at=2)
    verdict = mlperf_verdict(run_log.path)
    assert verdict.problems == []
    assert verdict.benchmark == benchmark_name(workload)
    assert verdict.status == mllog.SUCCESS
    entries = [mllog.parse(line) for line in run_log.path.read_text().splitlines()]
    facts = {e.key: e.value for e in entries if e.event_type == mllog.POINT_IN_TIME}
    assert (facts[mllog.TRAIN_SAMPLES], facts[mllog.EVAL_SAMPLES]) == (96, 24)
    assert facts[mllog.CACHE_CLEAR] is False  # accelpipe does not drop the OS caches
    assert entries[0].key == mllog.CACHE_CLEAR and entries[1].key == mllog.INIT_START


def test_mlperf_benchmarks_log_mlperfs_names() -> None:
    assert benchmark_name("resnet50") == "resnet"  # what MLPerf's tools look up
    assert benchmark_name("ssd") == "ssd"
    assert {benchmark_name(w) for w in WORKLOADS} & set(MLPERF_RULESETS) == {"resnet", "ssd"}
    assert benchmark_name("unet2d") == "unet2d"


def test_run_stop_follows_the_evaluation_that_reached_the_target(tmp_path: Path) -> None:
    """A run that trains on past its target: MLPerf's run ends at the target, nothing after."""
    run_log = _run(tmp_path, "unet2d", [0.2, 0.5, 0.6, 0.7], reached_at=2)
    run_log.epoch_start(5)  # the engine trains on: not MLPerf's run any more
    keys = [mllog.parse(line).key for line in run_log.path.read_text().splitlines()]
    assert keys[-3:] == [mllog.EVAL_ACCURACY, mllog.EVAL_STOP, mllog.RUN_STOP]
    assert keys.count(mllog.EPOCH_START) == 2 and keys.count(mllog.RUN_STOP) == 1
    assert mllog.converged_epoch(run_log.path) == 2


def test_a_run_that_never_reaches_its_target_is_aborted_after_its_last_evaluation(
    tmp_path: Path,
) -> None:
    run_log = _run(tmp_path, "ssd", [0.1, 0.2], reached_at=None)
    verdict = mlperf_verdict(run_log.path)
    assert (verdict.problems, verdict.status) == ([], mllog.ABORTED)
    assert mllog.converged_epoch(run_log.path) is None


def test_a_resume_past_the_target_leaves_the_finished_log_alone(tmp_path: Path) -> None:
    _run(tmp_path, "unet2d", [0.2, 0.5, 0.6], reached_at=1)
    logged = (tmp_path / mllog.FILENAME).read_text()
    resumed = RunLog(tmp_path, writes=True)
    resumed.begin(2, {})  # the checkpoint of epoch 2, after the target
    resumed.epoch_start(3)
    resumed.epoch_stop(3)
    resumed.end(True)
    assert (tmp_path / mllog.FILENAME).read_text() == logged


def test_a_resume_before_the_target_cuts_and_goes_on(tmp_path: Path) -> None:
    _run(tmp_path, "unet2d", [0.2, 0.5, 0.6], reached_at=3)
    resumed = RunLog(tmp_path, writes=True)
    resumed.begin(1, {})  # the checkpoint of epoch 1: epochs 2 and 3 and run_stop go
    for epoch in (2, 3):
        resumed.epoch_start(epoch)
        resumed.epoch_stop(epoch)
        resumed.eval_start(epoch)
        resumed.eval_stop(epoch, 0.9)
    resumed.end(True)
    verdict = mlperf_verdict(tmp_path / mllog.FILENAME)
    assert (verdict.problems, verdict.status) == ([], mllog.SUCCESS)
    keys = [mllog.parse(line).key for line in (tmp_path / mllog.FILENAME).read_text().splitlines()]
    assert keys.count(mllog.EPOCH_START) == 3 and keys.count(mllog.RUN_START) == 1
