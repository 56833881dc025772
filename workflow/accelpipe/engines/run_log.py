"""mllog.txt: a run's MLPerf training log (accelpipe.mllog's format), the same for both engines.

Written for runs that evaluate inside training (`train.eval_every`): MLPerf's log is a time
to train, which needs evaluations (`eval_accuracy`) and a target. The engines call it where
MLPerf's reference implementations log: `RunLog` is made when the train process starts
(`init_start`); `begin` after the model, the data, the resume and the matmul probe
(`init_stop`, `run_start`); `epoch_start`/`epoch_stop` around each epoch (epoch_num 1-based:
the epoch being trained); `eval_start`/`eval_stop` around each evaluation, with
`eval_accuracy` (epoch_num: the epochs done); `end` (`run_stop`: `success` where an evaluation
reached the target, else `aborted`, as MLPerf's status says whether a run converged).

A resumed run keeps one log: `begin` cuts what the killed attempt logged after the epoch of
its checkpoint (mllog.cut) and appends, without a second init or run_start, so the log's one
run_start to its one run_stop spans the attempts. Only the process that writes the logs
writes it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from accelpipe import mllog

log = logging.getLogger(__name__)
DIVISION = mllog.OPEN  # not MLPerf's closed division: our models and data pipelines are our own
STATUS = "research"  # MLPerf's submission_status for a system not offered on-premise or cloud
ORG = "accelpipe"


def mlperf_facts(
    benchmark: str, platform: str, global_batch: int, base_lr: float, seed: int
) -> dict[str, object]:
    """The submission and hyperparameter facts MLPerf requires in every log."""
    return {
        mllog.SUBMISSION_BENCHMARK: benchmark,
        mllog.SUBMISSION_DIVISION: DIVISION,
        mllog.SUBMISSION_ORG: ORG,
        mllog.SUBMISSION_PLATFORM: platform,
        mllog.SUBMISSION_STATUS: STATUS,
        mllog.GLOBAL_BATCH_SIZE: global_batch,
        mllog.OPT_BASE_LR: base_lr,
        mllog.SEED: seed,
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

    def begin(self, resumed_epoch: int, run_facts: Mapping[str, object]) -> None:
        """Initialisation is done: a fresh run (`resumed_epoch` 0) starts the log; a resumed
        one cuts it after the checkpoint's epoch and goes on."""
        if not self.writes:
            return
        if resumed_epoch == 0:
            self.path.unlink(missing_ok=True)
        elif self.path.exists():
            try:
                mllog.cut(self.path, after_epoch=resumed_epoch)
            except mllog.MLLogError as err:  # the run goes on; its log will not check
                log.warning("mllog.txt not cut at epoch %d: %s", resumed_epoch, err)
        self._log = mllog.MLLog(self.path, clock=self._clock)
        if resumed_epoch == 0:
            self._at = self._init_ms
            self._log.start(mllog.INIT_START)
            self._at = None
            for key, value in run_facts.items():
                self._log.event(key, value)
            self._log.end(mllog.INIT_STOP)
            self._log.start(mllog.RUN_START)

    def epoch_start(self, epoch: int) -> None:
        if self._log is not None:
            self._log.start(mllog.EPOCH_START, metadata={mllog.EPOCH_NUM: epoch})

    def epoch_stop(self, epoch: int) -> None:
        if self._log is not None:
            self._log.end(mllog.EPOCH_STOP, metadata={mllog.EPOCH_NUM: epoch})

    def eval_start(self, epoch: int) -> None:
        if self._log is not None:
            self._log.start(mllog.EVAL_START, metadata={mllog.EPOCH_NUM: epoch})

    def eval_stop(self, epoch: int, accuracy: float | None) -> None:
        """The evaluation's end; its accuracy where the metrics had a value of the metric."""
        if self._log is None:
            return
        if accuracy is not None:
            self._log.event(mllog.EVAL_ACCURACY, accuracy, {mllog.EPOCH_NUM: epoch})
        self._log.end(mllog.EVAL_STOP, metadata={mllog.EPOCH_NUM: epoch})

    def end(self, reached: bool) -> None:
        """run_stop: success where an evaluation reached the target, else aborted."""
        if self._log is None:
            return
        status = mllog.SUCCESS if reached else mllog.ABORTED
        self._log.end(mllog.RUN_STOP, metadata={mllog.STATUS: status})
        self.close()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
