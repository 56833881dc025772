"""Training processes die with the `accelpipe train` that launched them.

A launcher killed outright (SIGKILL: the OOM killer, a node's job cleanup, `kill -9`) runs no
`finally`, so nothing of its own can stop its children: torchrun, srun or the TensorFlow
workers, and the ranks under torchrun, would train on and hold the devices after the lease
(the launcher's flock) dropped. Two safeguards, both Linux's:

* `die_with_parent`: each process the launcher starts asks the kernel for SIGTERM when the
  launcher goes (prctl PR_SET_PDEATHSIG, set in the child between fork and exec); torchrun
  and srun pass SIGTERM on to the ranks and the step's tasks.
* `watch_launcher`: a process started by a local launch (LAUNCHER_PID_ENV names the
  launcher) kills itself once the launcher is gone, whoever stands between them (a torchrun
  killed outright passes nothing on). It holds a pidfd of the launcher (Linux 5.3+; else it
  polls) after checking that the launcher is one of its ancestors, so a reused pid is never
  mistaken for it. Slurm launches do not set the variable: a task's ancestors are Slurm's,
  and Slurm ends a step whose srun is gone.

The work itself is safe either way: a launched rank never moves the work directory onto the
output; the launcher does, once every rank has succeeded (stages.train).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

# Set by a local launch in its workers' environment: the launcher's pid.
LAUNCHER_PID_ENV = "ACCELPIPE_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_POLL_S = 0.5  # where there is no pidfd


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen: the child gets `sig` when this process (the thread
    that starts it: start children from the main thread) ends; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the launcher died before the request took
            os._exit(128 + sig)

    return set_death_signal


def launcher_env(pid: int | None = None) -> dict[str, str]:
    """The variable that makes a launched process watch this one (`pid`: default, us)."""
    return {LAUNCHER_PID_ENV: str(os.getpid() if pid is None else pid)}


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...); None when
    the process is gone. The name may hold spaces and parentheses: split at its last ')'."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def ancestors(pid: int | None = None) -> list[int]:
    """The pids above `pid` (default: this process), its parent first, up to the root."""
    chain: list[int] = []
    current = os.getpid() if pid is None else pid
    while current > 1 and (fields := proc_stat(current)) is not None:
        current = int(fields[1])
        chain.append(current)
    return chain


def watch_launcher(environ: Mapping[str, str] = os.environ) -> None:
    """In a launched process: end it (SIGKILL) as soon as the launcher named by
    LAUNCHER_PID_ENV is gone, now or later; nothing where the variable is not set."""
    raw = environ.get(LAUNCHER_PID_ENV)
    if not raw or not sys.platform.startswith("linux"):
        return
    launcher = int(raw)
    pidfd = _pidfd(launcher)  # opened before the check: it then refers to the checked process
    if launcher not in ancestors():
        _die(launcher)
    threading.Thread(
        target=_wait_then_die, args=(launcher, pidfd), name="launcher-watch", daemon=True
    ).start()


def _pidfd(pid: int) -> int | None:
    with contextlib.suppress(AttributeError, OSError):  # Python < 3.9, Linux < 5.3, gone
        return os.pidfd_open(pid)
    return None


def _wait_then_die(launcher: int, pidfd: int | None) -> None:
    if pidfd is not None:
        select.select([pidfd], [], [])  # readable once the process has ended
    else:
        while launcher in ancestors():
            time.sleep(_POLL_S)
    _die(launcher)


def _die(launcher: int) -> None:
    """SIGKILL this process: its work is resume state, written atomically, and a launcher
    that is gone will neither wait for it nor publish it."""
    message = f"accelpipe: launcher {launcher} is gone; this training process stops\n"
    with contextlib.suppress(OSError):
        os.write(2, message.encode())
    os.kill(os.getpid(), signal.SIGKILL)
