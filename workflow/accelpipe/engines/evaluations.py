"""Evaluation inside training (`train.eval_every`), the same for both engines: when to evaluate,
eval_log.csv, the run's clock and whether to stop at the quality target.

The workload hands the engine an `InTrainingEval` (made by `in_training_eval`): its score
function (the one its evaluate stage runs, given the model as it is now) and the run's
quality target. After every
`eval_every`-th epoch, and after the last, the engine's process that writes the log scores
the model; `Evaluations.add` logs the row and says whether the run may stop there
(`train.stop_at_target`).

Time to target is measured as MLPerf measures time to train: from the run's start (model,
data pipelines and the matmul probe ready: initialisation excluded) to the end of the first
evaluation that reaches the target (evaluation included). `RunClock` keeps that time across
a resume: the seconds up to the last checkpoint travel in it, the time an interrupted
attempt spent past its checkpoint is lost with the steps it redoes.

A resumed run keeps the rows up to its checkpoint's step and drops those after it, as
train_log.csv does: an evaluation runs before its epoch's checkpoint is written, so a run
killed between the two evaluates that epoch again. No evaluation is lost or logged twice.
"""

from __future__ import annotations

import csv
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from accelpipe.config import quality
from accelpipe.config.quality import QualityTarget, verdict
from accelpipe.config.settings import TrainSettings, view
from accelpipe.core import mllog
from accelpipe.core.io import write_csv
from accelpipe.engines.run_log import RunLog, mlperf_facts

log = logging.getLogger(__name__)

EVAL_LOG = "eval_log.csv"
# one row per evaluation: the epoch (from 1, as train_log.csv and mllog.txt count) and step it
# followed, the samples trained by then, the metric's value against the target (`reached`
# "1"/"0", "" where undecided), the evaluation's own seconds and the run's seconds at its end
# (RunClock)
EVAL_FIELDS = (
    "epoch",
    "step",
    "samples",
    "metric",
    "value",
    "target",
    "reached",
    "eval_s",
    "run_s",
)


@dataclass(frozen=True)
class InTrainingEval:
    """What a workload gives the engine to evaluate during training."""

    # the metrics of the engine's model as it is now (the bare model, in inference mode)
    score: Callable[[Any], Mapping[str, Any]]
    target: QualityTarget
    # the sizes of the training set and of the set `score` evaluates (MLPerf's train_samples
    # and eval_samples: images, or volumes for the 3D datasets)
    train_samples: int
    eval_samples: int


Evaluate = TypeVar("Evaluate")  # a workload's evaluate settings class


def in_training_eval(
    workload: str,
    cfg: Mapping[str, Any],
    train: TrainSettings,
    evaluate: type[Evaluate],
    score: Callable[[Any, Evaluate], Mapping[str, Any]],
    samples: Callable[[], tuple[int, int]],
) -> InTrainingEval | None:
    """A workload's evaluations inside training, scored as its evaluate stage scores: None
    without train.eval_every. `score(model, settings)` gets the model as it is and the
    train slice's evaluate block as `evaluate`; `samples()`, read only where the run
    evaluates, gives the sizes of the training set and of the set scored; the quality target
    is the slice's `target` block's for `workload`."""
    if not train.eval_every:
        return None
    settings = view(evaluate, cfg["evaluate"], where=f"{workload}.evaluate")
    train_samples, eval_samples = samples()
    return InTrainingEval(
        lambda model: score(model, settings),
        quality.target_for(workload, cfg["target"]),
        train_samples=train_samples,
        eval_samples=eval_samples,
    )


class RunClock:
    """Seconds of the run: this attempt's since `start()`, plus those its checkpoint carried.
    `wall_ms` turns a reading into MLPerf's log time, so that the log's run_start to run_stop
    is the run's seconds, not a second reading of another clock."""

    def __init__(self, carried_s: float = 0.0) -> None:
        self.carried_s = carried_s
        self._started: float | None = None
        self._anchor_ms = 0

    def start(self, anchor_ms: int | None = None) -> None:
        """`anchor_ms`: the log time this attempt's clock starts at (run_start's), else now."""
        self._started = time.perf_counter()
        self._anchor_ms = mllog.wall_clock_ms() if anchor_ms is None else anchor_ms

    def wall_ms(self, run_s: float) -> int:
        """The log time of the reading `run_s` (one `seconds()` gave)."""
        return self._anchor_ms + round((run_s - self.carried_s) * 1000)

    def seconds(self) -> float:
        if self._started is None:
            return self.carried_s
        return self.carried_s + time.perf_counter() - self._started


def reaches(value: Any, target: QualityTarget) -> bool:
    """Whether a metric's value reaches the target, as quality.verdict judges it (value >=
    target); decided here without the verdict's recipe comparison, so that MLPerf's log
    stops the run's time where run_s is read."""
    if target.value is None or value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return bool(value >= target.value)


def due(epoch: int, epochs: int, every: int) -> bool:
    """Whether the run evaluates after `epoch` (1-based) of `epochs`: every `every`-th epoch
    and the last; never with `every` 0."""
    return every > 0 and (epoch % every == 0 or epoch == epochs)


class Evaluations:
    """The run's evaluations, one row each in eval_log.csv in `work_dir`; the process that
    writes the logs (`writes`) rewrites the file at each change, the others keep the rows in
    memory alone (every process reads the file on resume)."""

    def __init__(self, work_dir: Path, writes: bool) -> None:
        self.path = work_dir / EVAL_LOG
        self.rows: list[dict[str, str]] = []
        self.writes = writes

    def resume(self, last_step: int) -> None:
        """Keep the logged rows up to `last_step`, the step of the checkpoint the run resumes
        from (0: none, a fresh start)."""
        self.rows = []
        if self.path.exists() and last_step > 0:
            with self.path.open(newline="") as f:
                self.rows = [r for r in csv.DictReader(f) if int(r["step"]) <= last_step]
        if self.writes:
            self._write()

    @property
    def reached(self) -> bool:
        return any(row["reached"] == "1" for row in self.rows)

    def add(
        self,
        metrics: Mapping[str, Any],
        target: QualityTarget,
        *,
        epoch: int,
        step: int,
        samples: int,
        eval_s: float,
        run_s: float,
    ) -> bool:
        """Log one evaluation; whether it reached the target."""
        judged = verdict(metrics, target)
        row = {
            "epoch": str(epoch),
            "step": str(step),
            "samples": str(samples),
            "metric": target.metric,
            "value": "" if judged["value"] is None else f"{judged['value']:.6g}",
            "target": "" if target.value is None else f"{target.value:.6g}",
            "reached": {True: "1", False: "0", None: ""}[judged["reached"]],
            "eval_s": f"{eval_s:.3f}",
            "run_s": f"{run_s:.3f}",
        }
        self.rows.append(row)
        if self.writes:
            self._write()
        return judged["reached"] is True

    def _write(self) -> None:
        write_csv(self.path, self.rows, EVAL_FIELDS)


class InTraining:
    """A run's evaluations inside training as both engines drive them: `resume` from the
    checkpoint, `start` when initialisation is done, `epoch_start`/`epoch_stop` around each
    epoch, `after_epoch` (an evaluation where one is due), `end`; `stopped` says whether the
    run may stop. What differs by engine comes in as functions: `score` runs the workload's
    scoring on the engine's model (None: this process waits for the one that scores), `share`
    gives every process the verdict of the process that writes the logs (a collective).

    Without `train.eval_every` every call does nothing (no eval_log.csv, no mllog.txt).
    """

    def __init__(
        self,
        work_dir: Path,
        train: TrainSettings,
        evaluation: InTrainingEval | None,
        *,
        writes: bool,
        run_log: RunLog | None = None,
    ) -> None:
        self.train = train
        self.clock = RunClock()
        self.target_reached = False  # an evaluation reached the quality target
        self.evaluations: Evaluations | None = None
        self.run_log: RunLog | None = None
        self.evaluation = evaluation
        if train.eval_every:
            if evaluation is None:
                raise ValueError("train.eval_every is set, but the workload gave no evaluation")
            self.evaluations = Evaluations(work_dir, writes)
            self.run_log = run_log  # MLPerf's log is a time to a target: runs that evaluate

    def resume(self, step: int, run_s: float, share: Callable[[bool], bool]) -> None:
        """From the checkpoint at `step` (0: none) whose run clock read `run_s`."""
        self.clock = RunClock(run_s)
        if self.evaluations is not None:
            self.evaluations.resume(step)
            self.target_reached = share(self.evaluations.reached)

    @property
    def stopped(self) -> bool:
        """train.stop_at_target, and an evaluation reached the target."""
        return self.train.stop_at_target and self.target_reached

    def start(self, epoch: int, platform: str, global_batch: int) -> None:
        """Initialisation is done (`epoch`: the epochs the checkpoint had): the run log
        begins or goes on, and the run's clock starts."""
        if self.run_log is not None and self.evaluation is not None:
            facts = mlperf_facts(
                self.evaluation.target.workload,
                platform,
                global_batch,
                self.train.lr,
                self.train.seed,
                train_samples=self.evaluation.train_samples,
                eval_samples=self.evaluation.eval_samples,
            )
            self.clock.start(self.run_log.begin(epoch, facts))
            return
        self.clock.start()

    def epoch_start(self, epoch: int) -> None:
        """`epoch`: 1-based, the one about to train."""
        if self.run_log is not None:
            self.run_log.epoch_start(epoch)

    def epoch_stop(self, epoch: int) -> None:
        if self.run_log is not None:
            self.run_log.epoch_stop(epoch)

    def after_epoch(
        self,
        epoch: int,
        step: int,
        samples: int,
        score: Callable[[], Mapping[str, Any]] | None,
        share: Callable[[bool], bool],
    ) -> None:
        """After `epoch` epochs (`step` steps, `samples` trained), where an evaluation is due:
        score, log the row and the run log's lines, and share whether it reached the target.
        MLPerf's run stops here (run_stop) at the first evaluation that reaches the target,
        or at the last epoch's: its time to train ends with the evaluation, before the
        checkpoint."""
        evaluations, evaluation = self.evaluations, self.evaluation
        if evaluations is None or evaluation is None:
            return
        if not due(epoch, self.train.epochs, self.train.eval_every):
            return
        reached = False
        if score is not None:
            started = time.perf_counter()
            if self.run_log is not None:
                self.run_log.eval_start(epoch)
            metrics = score()
            run_s, eval_s = self.clock.seconds(), time.perf_counter() - started
            value = metrics.get(evaluation.target.metric)
            reached = reaches(value, evaluation.target)
            if self.run_log is not None:  # MLPerf's times end where run_s is read
                at_ms = self.clock.wall_ms(run_s)
                self.run_log.eval_stop(epoch, value, at_ms)
                if reached or epoch == self.train.epochs:
                    self.run_log.end(reached or self.target_reached, at_ms)
            evaluations.add(
                metrics,
                evaluation.target,
                epoch=epoch,
                step=step,
                samples=samples,
                eval_s=eval_s,
                run_s=run_s,
            )
            if evaluations.writes:
                log.info("evaluation after epoch %d: %s", epoch, evaluations.rows[-1])
        if share(reached):
            self.target_reached = True

    def end(self) -> None:
        """Training is over: run_stop, success where an evaluation reached the target, unless
        an evaluation logged it already."""
        if self.run_log is not None:
            self.run_log.end(self.target_reached)

    def facts(self) -> dict[str, Any]:
        """stage.json's account of the evaluations inside training (none without)."""
        if self.evaluations is None:
            return {}
        return {"evaluations": len(self.evaluations.rows), "stopped_at_target": self.stopped}
