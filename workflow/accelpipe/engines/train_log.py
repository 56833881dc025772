"""train_log.csv, its one owner: the file's name and columns, the writer both engines log
their steps with (and its TensorBoard scalars), and the reader the figures and the curves
read it with; and the profiler's section names.

Cheap to import: the figures, the publish step and Snakemake's planning (through the curves)
read the log without TensorBoard, which only the writer loads (`open_log`).
"""

from __future__ import annotations

import contextlib
import csv
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from accelpipe.core.errors import DataError
from accelpipe.core.io import write_csv

if TYPE_CHECKING:
    from accelpipe.engines.scalars import ScalarWriter

LOG_FILE = "train_log.csv"
# `epoch`: the epoch the step trained in, counted from 1 as eval_log.csv (the epoch an
# evaluation followed) and mllog.txt (MLPerf's epoch_num) count them: one convention.
# `profiled`: "1" where the profiler's schedule had it warming up or recording that step
# (slower steps that steady-state statistics leave out), else "0".
# `samples` and `wall_ms`: the samples trained and the wall time since the previous logged
# step of the epoch (or the epoch's start), so that data wait, logging and unlogged steps are
# in the throughput (performance.steps.step_statistics); `samples_per_s` and `step_ms` are the
# logged step's own (its data wait included), for the per-step distribution.
# `energy_j`: the joules the run's devices used over the same wall time (the train process's
# power meter, accelpipe.devices.power), empty where there is no power source.
# `attempt`: 0 for the rows of the job's first start, n for those its n-th resume logged.
# A resumed process traces, compiles and fills its caches again, so the statistics leave out
# the warm-up steps of every attempt (performance.steps.step_statistics).
LOG_FIELDS = (
    "epoch",
    "step",
    "loss",
    "lr",
    "samples_per_s",
    "data_wait_ms",
    "step_ms",
    "profiled",
    "samples",
    "wall_ms",
    "energy_j",
    "attempt",
)
# The columns TensorBoard shows too, as train/<column>.
SCALARS = ("loss", "lr", "samples_per_s")
# The reference's section names, recorded around the loop's phases; the trace summarizer
# reports each. `forward`, `loss`, `backward` and `optimizer_step` nest in `step`;
# `loader_first` is an epoch's first batch (worker start-up, cache fill).
SECTIONS = ("loader_first", "loader_next", "step", "forward", "loss", "backward", "optimizer_step")


class LogWriter:
    """Writes each train_log.csv row, stamped with this process's attempt, and its SCALARS
    to TensorBoard at the row's step."""

    def __init__(self, rows: csv.DictWriter, tensorboard: ScalarWriter, attempt: int) -> None:
        self.rows, self.tensorboard, self.attempt = rows, tensorboard, str(attempt)

    def writerow(self, row: dict[str, str]) -> None:
        self.rows.writerow(row | {"attempt": self.attempt})
        self.tensorboard.add(int(row["step"]), {f"train/{k}": float(row[k]) for k in SCALARS})


def read_log(path: Path, columns: Sequence[str] = LOG_FIELDS) -> list[dict[str, str]]:
    """train_log.csv's rows as written; one DataError naming the file where it is missing or
    lacks one of `columns` (the ones the reader needs: a log older than a column lacks it)."""
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or ())]
            if missing:
                raise DataError(f"{path}: no column {', '.join(missing)}")
            return list(reader)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None


def _read_rows(path: Path) -> tuple[list[dict[str, str]], bool]:
    """The log's rows, each with every LOG_FIELDS key (an older log's rows: attempt 0), and
    whether its header is the current one."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = [{k: r.get(k, "") for k in LOG_FIELDS} for r in reader]
        current = tuple(reader.fieldnames or ()) == LOG_FIELDS
    for row in rows:
        row["attempt"] = row["attempt"] or "0"
    return rows, current


def _next_attempt(path: Path) -> int:
    """0 for a new log, else one more than the last attempt logged; a log with an older
    header is rewritten with the current one first, so appended rows line up."""
    if not path.exists():
        return 0
    rows, current = _read_rows(path)
    if not current:
        write_csv(path, rows, LOG_FIELDS)
    return 1 + max((int(r["attempt"]) for r in rows), default=-1)


@contextlib.contextmanager
def open_log(work_dir: Path) -> Iterator[tuple[TextIO, LogWriter]]:
    """train_log.csv for appending (a header if new), and a writer of LOG_FIELDS rows that
    also writes their scalars into a new event file in work_dir/tensorboard/."""
    # here, not at the top: TensorBoard takes a second to import, and only the writer needs it
    from accelpipe.engines import scalars

    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / LOG_FILE
    attempt = _next_attempt(path)
    new_log = not path.exists()
    with (
        path.open("a", newline="") as log_file,
        scalars.open_writer(work_dir / scalars.TENSORBOARD_DIR) as tensorboard,
    ):
        rows = csv.DictWriter(log_file, fieldnames=LOG_FIELDS)
        if new_log:
            rows.writeheader()
        yield log_file, LogWriter(rows, tensorboard, attempt)


def log_row(
    epoch: int,
    step: int,
    loss: float,
    lr: float,
    batch: int,
    waited: float,
    elapsed: float,
    *,
    interval: Interval,
    profiled: bool,
) -> dict[str, str]:
    """One train_log.csv row of `step` in `epoch` (from 1): the step's own `batch` samples,
    data wait and time, and the samples, wall time and energy since the previous logged step
    (`interval`); times in seconds, written in ms; energy in joules, empty where none is
    measured."""
    samples, wall, energy = interval.take()
    return {
        "epoch": str(epoch),
        "step": str(step),
        "loss": f"{loss:.6f}",
        "lr": f"{lr:.6g}",
        "samples_per_s": f"{batch / elapsed:.2f}",
        "data_wait_ms": f"{waited * 1e3:.3f}",
        "step_ms": f"{elapsed * 1e3:.3f}",
        "profiled": "1" if profiled else "0",
        "samples": str(samples),
        "wall_ms": f"{wall * 1e3:.3f}",
        "energy_j": "" if energy is None else f"{energy:.6f}",
    }


class Interval:
    """Samples, wall time and energy since the previous logged step of an epoch (or its
    start): what a row's `samples`, `wall_ms` and `energy_j` count. Start one when the
    epoch's loop starts. `joules`: the power meter's joules so far (PowerMeter.joules: a
    running total, None where nothing is measured); without one, no energy."""

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        joules: Callable[[], float | None] | None = None,
    ) -> None:
        self.clock = clock
        self.joules = joules
        self.started = clock()
        self.joules_at = joules() if joules is not None else None
        self.samples = 0

    def add(self, samples: int) -> None:
        self.samples += samples

    def take(self) -> tuple[int, float, float | None]:
        """The samples, seconds and joules (None: not measured) since the last take, and a
        new interval from now."""
        now = self.clock()
        joules = self.joules() if self.joules is not None else None
        before = self.joules_at
        energy = joules - before if joules is not None and before is not None else None
        taken = self.samples, now - self.started, energy
        self.started, self.samples, self.joules_at = now, 0, joules
        return taken


def truncate_log(work_dir: Path, last_step: int) -> None:
    """Drop log rows written after the checkpoint a run resumes from."""
    path = work_dir / LOG_FILE
    if not path.exists():
        return
    rows = [r for r in _read_rows(path)[0] if int(r["step"]) <= last_step]
    write_csv(path, rows, LOG_FIELDS)
