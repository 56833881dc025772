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
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from accelpipe.core.errors import AccelpipeError, ConfigError
from accelpipe.launch import lifeline

log = logging.getLogger(__name__)
_workers_log = logging.getLogger("accelpipe.workers")  # the ranks' own lines


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
# One launch's id, in the environment of every process it starts (`reap` finds them by it).
LAUNCH_ID_ENV = "ACCELPIPE_LAUNCH_ID"


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


class Watch(Protocol):
    """What a launch's watch (launch.slurm.StepWatch) sees and says: every output line of the
    launcher, and, asked every WATCH_S, why the launch must stop (None: it goes on)."""

    def saw(self, line: str) -> None: ...

    def lost(self) -> str | None: ...


WATCH_S = 10.0  # how often a watched launch asks its watch
STOP_GRACE_S = 15.0  # a launcher told to stop (SIGTERM) is killed after this
REAP_S = 30.0  # this node's launched processes are killed if still there after this
KILLED_S = 10.0  # and then waited for this long to have exited


class LaunchStopped(AccelpipeError):
    """The watch stopped the launch; the message is its reason."""


def run_workers(cmd: list[str], env: dict[str, str], watch: Watch | None = None) -> int:
    """Run the launcher, relaying every rank's output to our log; return its exit status.
    Killed outright, we take it with us (launch.lifeline). With a `watch`, a launch it says
    must stop is stopped: LaunchStopped, with its reason. Either way this returns only once
    the processes the launch started on this node are gone (`reap`), so whatever the caller
    holds for them (the lease of their devices) outlives them."""
    tail: collections.deque[str] = collections.deque(maxlen=30)
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lifeline.die_with_parent(),  # SIGTERM if we are killed outright
    )
    relay = threading.Thread(target=_relay, args=(proc, tail, watch), daemon=True)
    relay.start()
    stopped = None
    try:
        with _sigterm_exits():
            while (code := _wait(proc, WATCH_S if watch else None)) is None:
                if watch and (stopped := watch.lost()):  # the caller's error says it
                    code = _stop(proc)
    finally:
        if proc.poll() is None:  # interrupted: torchrun and srun pass SIGTERM on to the ranks
            _stop(proc)
        relay.join(timeout=STOP_GRACE_S)  # the pipe closes with the launcher's last process
        reap(env.get(LAUNCH_ID_ENV, ""))
    if stopped:
        raise LaunchStopped(stopped)
    if code:
        log.error("training processes failed (status %d); last output:\n%s", code, "\n".join(tail))
    return code


def _relay(proc: subprocess.Popen[str], tail: collections.deque[str], watch: Watch | None) -> None:
    assert proc.stdout is not None  # stdout=PIPE
    for line in proc.stdout:
        tail.append(line.rstrip())
        _workers_log.info("%s", tail[-1])
        if watch:
            watch.saw(tail[-1])


def _wait(proc: subprocess.Popen[str], timeout: float | None) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def _stop(proc: subprocess.Popen[str]) -> int:
    """SIGTERM the launcher (srun and torchrun pass it on to the ranks), SIGKILL it after
    STOP_GRACE_S: srun waits for a lost node's tasks until Slurm declares the node down."""
    proc.terminate()
    if (code := _wait(proc, STOP_GRACE_S)) is None:
        proc.kill()
        code = proc.wait()
    return code


def reap(launch_id: str) -> list[int]:
    """Wait until no process of this node carries `launch_id` (LAUNCH_ID_ENV in its
    environment: the launch's ranks, whoever started them), SIGKILL those left after
    REAP_S; their pids. Only this user's processes can be read, and only they are ours."""
    deadline = time.monotonic() + REAP_S
    while (left := _launched(launch_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILLED_S  # SIGKILL is sent at once, but takes a moment
    while not all(map(_ended, left)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        log.warning(
            "killed %d training process(es) still running %.0f s after their launch ended: %s",
            len(left),
            REAP_S,
            ", ".join(map(str, left)),
        )
    return left


def _ended(pid: int) -> bool:
    """Exited: gone, or a zombie its parent has not waited for (it holds nothing)."""
    fields = lifeline.proc_stat(pid)
    return fields is None or fields[0] in "ZX"


def _launched(launch_id: str) -> list[int]:
    """The pids of this node's processes whose environment holds `launch_id`."""
    if not launch_id:
        return []
    marker = f"{LAUNCH_ID_ENV}={launch_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return pids


def launched_env(under_slurm: bool) -> dict[str, str]:
    """What a launch adds to its processes' environment: when it started (`stage_started`),
    an id that finds them on this node (`reap`) and, on this node, who launched them, so that
    they die with us (launch.lifeline; a Slurm step's tasks are Slurm's, which ends a step
    whose srun is gone)."""
    env = {_LAUNCHED_AT: repr(time.time()), LAUNCH_ID_ENV: uuid.uuid4().hex}
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
