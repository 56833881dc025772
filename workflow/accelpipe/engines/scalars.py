"""TensorBoard scalars, so `tensorboard --logdir work` shows every run of both frameworks.

Written by the train log of both engines (`train_log.open_log`: loss, lr and samples/s per
logged step, on rank 0 / the chief) and by the evaluate stage (the metrics at the run's last
step), as TensorBoard event files made of TensorBoard's own pieces: its Event and scalar
protos (`scalar_pb`, what `tensorboard.summary.Writer` emits) framed by its RecordWriter.
Not `tensorboard.summary.Writer` itself: its EventFileWriter resolves TensorBoard's `tf`
compat module, which imports TensorFlow wherever it is installed (seconds, and TensorFlow's
thread pools inside a torch run), and it cannot write the restart marker below.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.scalar.summary_v2 import scalar_pb
from tensorboard.summary.writer.record_writer import RecordWriter

TENSORBOARD_DIR = "tensorboard"  # in the train and the eval output
_FILE_NUMBERS = itertools.count()  # two writers of one process in one second: two files


class ScalarWriter:
    """Scalars into a new event file in `logdir`, each point at its training step.

    The first point also writes TensorBoard's restart marker (SessionLog START) at its step:
    a run resumed from a checkpoint logs again the steps a killed attempt logged after that
    checkpoint, and TensorBoard then drops the killed attempt's points from that step on.
    """

    def __init__(self, logdir: Path) -> None:
        logdir.mkdir(parents=True, exist_ok=True)
        # TensorBoard's own file name: it reads a run's event files in name order, oldest first.
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(_FILE_NUMBERS)}"
        )
        self._records = RecordWriter((logdir / name).open("wb"))
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        self._started = False

    def _write(self, event: event_pb2.Event) -> None:
        self._records.write(event.SerializeToString())

    def add(self, step: int, values: Mapping[str, float]) -> None:
        """One point per tag at `step`, flushed (TensorBoard shows a run while it trains)."""
        wall_time = time.time()
        if not self._started:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._write(event_pb2.Event(wall_time=wall_time, step=step, session_log=start))
            self._started = True
        for tag, value in values.items():
            summary = scalar_pb(tag, value)
            self._write(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))
        self._records.flush()

    def close(self) -> None:
        self._records.close()


@contextlib.contextmanager
def open_writer(logdir: Path) -> Iterator[ScalarWriter]:
    writer = ScalarWriter(logdir)
    try:
        yield writer
    finally:
        writer.close()


def numeric(values: Mapping[str, object]) -> dict[str, float]:
    """The numbers among `values` (booleans, strings and nested tables left out)."""
    return {
        key: float(value)
        for key, value in values.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def write_metrics(logdir: Path, step: int, metrics: Mapping[str, object], prefix: str) -> None:
    """Every numeric top-level metric as `<prefix>/<name>` at `step` (one point each)."""
    with open_writer(logdir) as writer:
        writer.add(step, {f"{prefix}/{k}": v for k, v in numeric(metrics).items()})
