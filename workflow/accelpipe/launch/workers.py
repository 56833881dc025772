"""What a launched training stage shares with its workers, whatever the framework: the
global batch split over them, the launcher run with every worker's output relayed (and
taken down with us), the environment a launch hands its workers, and the stage's clock,
which starts at the launch.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from accelpipe.core.errors import ConfigError
from accelpipe.launch import lifeline

log = logging.getLogger(__name__)


def check_global_batch(batch_size: int, world_size: int, key: str = "train.batch_size") -> int:
    """The per-rank batch for a GLOBAL `batch_size`; ConfigError if it does not divide evenly."""
    if batch_size % world_size:
        raise ConfigError(
            f"config key '{key}': the global batch {batch_size} does not split evenly over "
            f"devices * nodes = {world_size} processes"
        )
    return batch_size // world_size


# Wall-clock start of a launched stage, so its workers count the stage's seconds from there.
_LAUNCHED_AT = "ACCELPIPE_LAUNCHED_AT"


@contextlib.contextmanager
def _sigterm_exits() -> Iterator[None]:
    """Turn SIGTERM (a cancelled job) into SystemExit, so `finally` blocks stop our children."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_workers(cmd: list[str], env: dict[str, str]) -> int:
    """Run the launcher, relaying every rank's output to our log; return its exit status.
    Killed outright, we take it with us (launch.lifeline)."""
    workers_log = logging.getLogger("accelpipe.workers")
    tail: collections.deque[str] = collections.deque(maxlen=30)
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lifeline.die_with_parent(),  # SIGTERM if we are killed outright
    )
    assert proc.stdout is not None  # stdout=PIPE
    try:
        with _sigterm_exits():
            for line in proc.stdout:
                tail.append(line.rstrip())
                workers_log.info("%s", tail[-1])
            code = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted: torchrun and srun pass SIGTERM on to the ranks
            proc.terminate()
            proc.wait()
    if code:
        log.error("training processes failed (status %d); last output:\n%s", code, "\n".join(tail))
    return code


def launched_env(under_slurm: bool) -> dict[str, str]:
    """What a launch adds to its processes' environment: when it started (`stage_started`)
    and, on this node, who launched them, so that they die with us (launch.lifeline; a Slurm
    step's tasks are Slurm's, which ends a step whose srun is gone)."""
    env = {_LAUNCHED_AT: repr(time.time())}
    return env if under_slurm else env | lifeline.launcher_env()


# time.time() at the origin of the stage running in this process (`stage_clock`)
_origin: dict[str, float] = {}


def stage_started() -> float:
    """perf_counter() origin of the stage: the launch, for a launched worker."""
    launched = os.environ.get(_LAUNCHED_AT)
    elapsed = max(time.time() - float(launched), 0.0) if launched else 0.0
    return time.perf_counter() - elapsed


@contextlib.contextmanager
def stage_clock() -> Iterator[float]:
    """The stage's perf_counter() origin (`stage_started`); while the stage runs,
    `stage_started_at` gives its wall-clock time (an attempt's record starts there)."""
    started = stage_started()
    _origin["at"] = time.time() - (time.perf_counter() - started)
    try:
        yield started
    finally:
        _origin.clear()


def stage_started_at() -> float:
    """time.time() at the origin of the stage running here; now outside one (a loop run
    without the train stage, as tests do)."""
    return _origin.get("at", time.time())
