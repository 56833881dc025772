"""mllog.txt: a run's MLPerf training log (accelpipe.core.mllog's format), the same for both
engines.

Written for runs that evaluate inside training (`train.eval_every`): MLPerf's log is a time
to train, which needs evaluations (`eval_accuracy`) and a target. The engines call it where
MLPerf's reference implementations log: `RunLog` is made when the train process starts
(`cache_clear` and `init_start` carry that time); `begin` after the model, the data, the
resume and the matmul probe (the submission facts, `train_samples`/`eval_samples`,
`init_stop`, `run_start`); `epoch_start`/`epoch_stop` around each epoch (epoch_num 1-based:
the epoch being trained); `eval_start`/`eval_stop` around each evaluation, with
`eval_accuracy` (epoch_num: the epochs done); `end` (`run_stop`).

`run_stop` ends MLPerf's run where its time to train ends, before any checkpoint or profiler
export: right after the first evaluation that reaches the target (`success`), or after the
last epoch's evaluation where none did (`aborted`). A run that trains on past its target
(`train.stop_at_target` false) logs nothing more: MLPerf's run is over, and its time to train
(run_start to run_stop) is performance.json's `time_to_target_s`.

A resumed run keeps one log: `begin` cuts what the killed attempt logged after the epoch of
its checkpoint (mllog.cut) and appends, without a second init or run_start, so the log's one
run_start to its one run_stop spans the attempts; a log whose run_stop (success) came at or
before the checkpoint's epoch is finished and stays as it is. Only the process that writes the
logs writes it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from accelpipe.config import registry
from accelpipe.core import mllog

log = logging.getLogger(__name__)
DIVISION = mllog.OPEN  # not MLPerf's closed division: our models and data pipelines are our own
STATUS = "research"  # MLPerf's submission_status for a system not offered on-premise or cloud
ORG = "accelpipe"
# MLPerf's cache_clear says whether the OS caches were dropped before the run: accelpipe does not
# drop them (that needs root), so the log says so
CACHE_CLEARED = False


def benchmark_name(workload: str) -> str:
    """submission_benchmark of a workload's log: MLPerf's name where it is an MLPerf benchmark
    (its declaration's `mlperf_benchmark`: MLPerf's checker, result summarizer and RCP checker
    look the name up), else the workload's own name."""
    return registry.workload(workload).mlperf_benchmark or workload


def mlperf_facts(
    workload: str,
    platform: str,
    global_batch: int,
    base_lr: float,
    seed: int,
    *,
    train_samples: int,
    eval_samples: int,
) -> dict[str, object]:
    """The submission and hyperparameter facts MLPerf requires in every log; `train_samples`
    and `eval_samples`: the sizes of the training and the evaluation set."""
    return {
        mllog.SUBMISSION_BENCHMARK: benchmark_name(workload),
        mllog.SUBMISSION_DIVISION: DIVISION,
        mllog.SUBMISSION_ORG: ORG,
        mllog.SUBMISSION_PLATFORM: platform,
        mllog.SUBMISSION_STATUS: STATUS,
        mllog.GLOBAL_BATCH_SIZE: global_batch,
        mllog.OPT_BASE_LR: base_lr,
        mllog.SEED: seed,
        mllog.TRAIN_SAMPLES: train_samples,
        mllog.EVAL_SAMPLES: eval_samples,
    }


class RunLog:
    """mllog.txt in `work_dir` (`writes`: this process writes the logs; else every call does
    nothing). Made when initialisation starts."""

    def __init__(self, work_dir: Path, writes: bool) -> None:
        self.path = work_dir / mllog.FILENAME
        self.writes = writes
        self._init_ms = mllog.wall_clock_ms()
        self._at: int | None = None  # a time for the next line instead of the clock's
        self._log: mllog.MLLog | None = None

    def _clock(self) -> int:
        return self._at if self._at is not None else mllog.wall_clock_ms()

    def begin(self, resumed_epoch: int, run_facts: Mapping[str, object]) -> int | None:
        """Initialisation is done: a fresh run (`resumed_epoch` 0) starts the log; a resumed
        one cuts it after the checkpoint's epoch and goes on. Returns run_start's log time
        where this call wrote it (the run's clock starts there), else None."""
        if not self.writes:
            return None
        if resumed_epoch == 0:
            self.path.unlink(missing_ok=True)
        elif self.path.exists():
            converged = mllog.converged_epoch(self.path)
            if converged is not None and converged <= resumed_epoch:
                return None  # MLPerf's run converged before the checkpoint: the log is whole
            try:
                mllog.cut(self.path, after_epoch=resumed_epoch)
            except mllog.MLLogError as err:  # the run goes on; its log will not check
                log.warning("mllog.txt not cut at epoch %d: %s", resumed_epoch, err)
        self._log = mllog.MLLog(self.path, clock=self._clock)
        if resumed_epoch == 0:
            self._at = self._init_ms
            self._log.event(mllog.CACHE_CLEAR, CACHE_CLEARED)
            self._log.start(mllog.INIT_START)
            self._at = None
            for key, value in run_facts.items():
                self._log.event(key, value)
            self._log.end(mllog.INIT_STOP)
            self._log.start(mllog.RUN_START)
            return self._log.last_ms
        return None

    def epoch_start(self, epoch: int) -> None:
        if self._log is not None:
            self._log.start(mllog.EPOCH_START, metadata={mllog.EPOCH_NUM: epoch})

    def epoch_stop(self, epoch: int) -> None:
        if self._log is not None:
            self._log.end(mllog.EPOCH_STOP, metadata={mllog.EPOCH_NUM: epoch})

    def eval_start(self, epoch: int) -> None:
        if self._log is not None:
            self._log.start(mllog.EVAL_START, metadata={mllog.EPOCH_NUM: epoch})

    def eval_stop(self, epoch: int, accuracy: float | None, at_ms: int | None = None) -> None:
        """The evaluation's end (at `at_ms`, else now); its accuracy where the metrics had a
        value of the metric."""
        if self._log is None:
            return
        self._at = at_ms
        if accuracy is not None:
            self._log.event(mllog.EVAL_ACCURACY, accuracy, {mllog.EPOCH_NUM: epoch})
        self._log.end(mllog.EVAL_STOP, metadata={mllog.EPOCH_NUM: epoch})
        self._at = None

    def end(self, reached: bool, at_ms: int | None = None) -> None:
        """run_stop (at `at_ms`, else now; success where an evaluation reached the target,
        else aborted), unless logged already; the log is closed: nothing after run_stop is
        MLPerf's run."""
        if self._log is None:
            return
        status = mllog.SUCCESS if reached else mllog.ABORTED
        self._at = at_ms
        self._log.end(mllog.RUN_STOP, metadata={mllog.STATUS: status})
        self._at = None
        self.close()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
