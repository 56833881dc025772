"""Evaluation inside training (`train.eval_every`), the same for both engines: when to evaluate,
eval_log.csv, the run's clock and whether to stop at the quality target.

The workload hands the engine an `InTrainingEval`: its score function (the one its evaluate
stage runs, given the model as it is now) and the run's quality target. After every
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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelpipe.io import write_csv
from accelpipe.quality import QualityTarget, verdict

EVAL_LOG = "eval_log.csv"
# one row per evaluation: the epoch and step it followed, the samples trained by then, the
# metric's value against the target (`reached` "1"/"0", "" where undecided), the evaluation's
# own seconds and the run's seconds at its end (RunClock)
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


class RunClock:
    """Seconds of the run: this attempt's since `start()`, plus those its checkpoint carried."""

    def __init__(self, carried_s: float = 0.0) -> None:
        self.carried_s = carried_s
        self._started: float | None = None

    def start(self) -> None:
        self._started = time.perf_counter()

    def seconds(self) -> float:
        if self._started is None:
            return self.carried_s
        return self.carried_s + time.perf_counter() - self._started


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
