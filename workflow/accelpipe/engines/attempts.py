"""attempts.json: every start of a run's train stage, with its wall time, so that a run
killed and resumed (by hand, or retried by Snakemake or Slurm) is timed and billed for all
of them.

An entry per attempt: `attempt` (1, 2, ...), `started` (UTC, ISO), `seconds` (from the
stage's start: the launch, for launched processes), `resumed_from_step` (None: a fresh start)
and `status` (`running`; `interrupted` once a later attempt found it so; `finished`, set by
the train stage when it publishes). The process that writes the run's logs keeps the file in
the work directory, beside the checkpoints: it adds its entry when it resumes or starts
over, and refreshes its seconds every HEARTBEAT_S and before each checkpoint is written, so
an attempt killed outright keeps the seconds up to its last sign of life, and never fewer
than the run clock its checkpoint carries on (time to train >= time to target). The train
stage moves the list into its stage.json (`finish`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from accelpipe.core.errors import DataError
from accelpipe.core.io import read_json, write_json
from accelpipe.launch.workers import stage_started_at

log = logging.getLogger(__name__)
ATTEMPTS_FILE = "attempts.json"
HEARTBEAT_S = 1.0


def read(work_dir: Path) -> list[dict[str, Any]]:
    """The attempts recorded in `work_dir` (none: an empty list); a damaged file is a
    DataError naming it."""
    path = work_dir / ATTEMPTS_FILE
    if not path.exists():
        return []
    try:
        entries = read_json(path)["attempts"]
    except (ValueError, KeyError, TypeError):
        raise DataError(
            f"{path}: not an attempts record; delete it to start the count over"
        ) from None
    return list(entries)


def _write(work_dir: Path, entries: list[dict[str, Any]]) -> None:
    write_json(work_dir / ATTEMPTS_FILE, {"attempts": entries})  # atomic: temp, then rename


class Attempts:
    """This process's attempt in `work_dir`'s record (`writes`: this process writes the logs;
    else every call does nothing). `begin` once the resume is decided; `close` at the end."""

    def __init__(self, work_dir: Path, writes: bool, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.work_dir = work_dir
        self.writes = writes
        self.heartbeat_s = heartbeat_s
        self.started_at = stage_started_at()  # time.time() at the stage's start
        self._entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None

    @property
    def number(self) -> int:
        """This attempt's number (1: the first); 0 before `begin`."""
        return len(self._entries)

    def begin(self, resumed_from_step: int | None) -> None:
        """Add this attempt (`resumed_from_step`: the checkpoint's step; None: a fresh start),
        mark earlier ones still `running` as interrupted, say so in the log, and keep its
        seconds fresh from now on."""
        if not self.writes:
            return
        self._entries = read(self.work_dir)
        for entry in self._entries:
            if entry.get("status") == "running":
                entry["status"] = "interrupted"
        started = datetime.fromtimestamp(self.started_at, timezone.utc)
        self._entries.append(
            {
                "attempt": len(self._entries) + 1,
                "started": started.isoformat(timespec="seconds"),
                "seconds": 0.0,
                "resumed_from_step": resumed_from_step,
                "status": "running",
            }
        )
        self.beat()
        if resumed_from_step is not None:
            log.info("resuming from step %d, attempt %d", resumed_from_step, self.number)
        elif self.number > 1:
            log.info("starting over (no checkpoint to resume from), attempt %d", self.number)
        self._heart = threading.Thread(target=self._beating, name="attempt-heartbeat", daemon=True)
        self._heart.start()

    def beat(self) -> None:
        """Write this attempt's seconds so far."""
        if not self._entries:
            return
        with self._lock:
            self._entries[-1]["seconds"] = round(time.time() - self.started_at, 3)
            _write(self.work_dir, self._entries)

    def _beating(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with contextlib.suppress(OSError):  # a full disk must not stop training here
                self.beat()

    def close(self) -> None:
        """Stop the heartbeat and write the seconds once more; may be called again."""
        if self._heart is None:
            return
        self._stop.set()
        self._heart.join()
        self._heart = None
        self.beat()


def finish(work_dir: Path, seconds: float) -> list[dict[str, Any]]:
    """The record of a run whose last attempt ends now, `seconds` after its stage started
    (the train stage's own measure, from launch to publish): that attempt marked finished
    with those seconds; an empty list where nothing was recorded."""
    entries = read(work_dir)
    if entries:
        entries[-1]["seconds"] = round(max(seconds, entries[-1]["seconds"]), 3)
        entries[-1]["status"] = "finished"
    return entries


def total_seconds(entries: list[dict[str, Any]]) -> float:
    """The wall time of every attempt together."""
    return round(sum(entry["seconds"] for entry in entries), 3)
