"""Processes a launch starts die with a launcher killed outright (SIGKILL runs no cleanup).

Real processes: a stand-in launcher starts its children as the train stage's launches do
(`die_with_parent`, `launcher_env`), the test SIGKILLs it and waits, with a generous deadline
and no claim on speed, for the children to be gone. The whole train stage is killed the same
way in test_torch_launch.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from accelpipe.launch import lifeline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's prctl")

REPO = Path(__file__).resolve().parents[3]
DEADLINE_S = 120.0  # generous: the machine may be busy; nothing here is about speed


def _alive(pid: int) -> bool:
    """Running: it exists and is not a zombie (a reparented child whose reaper never reaps)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S:.0f} s: {what}")
        time.sleep(0.05)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


# A stand-in launcher: starts `child` (argv in sys.argv[1:]) the way the train stage's
# launches do, and waits on it.
LAUNCHER = """
    import os, subprocess, sys
    from accelpipe.launch import lifeline
    env = {**os.environ, **lifeline.launcher_env()}
    subprocess.Popen(sys.argv[1:], env=env, preexec_fn=lifeline.die_with_parent()).wait()
"""
# Writes its pid to the file sys.argv[1] (a checkpoint would be written the same way), then
# sleeps as a rank in a collective would.
SLEEPER = """
    import os, sys, time
    from accelpipe.launch import lifeline
    lifeline.watch_launcher()
    open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
"""
# torchrun killed outright, or one that passes nothing on: ignores the death signal and
# starts the rank, which must then notice the launcher's end by itself.
DEAF_MIDDLE = """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen(sys.argv[1:]).wait()
    time.sleep(600)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != lifeline.LAUNCHER_PID_ENV}
    return env | {"PYTHONPATH": str(REPO / "workflow")}


def _start(argv: list[str], pid_file: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start `argv` and wait for its sleeper to write its pid."""
    proc = subprocess.Popen(argv, env=_env())
    _wait_until(lambda: pid_file.exists() or proc.poll() is not None, "the sleeper's pid file")
    assert proc.poll() is None, "the launcher ended before its child started"
    return proc, int(pid_file.read_text())


def test_a_child_of_a_launcher_killed_outright_is_ended(tmp_path: Path) -> None:
    """The TensorFlow launch: the workers are the launcher's children."""
    pid_file = tmp_path / "worker.pid"
    launcher, worker = _start([*_python(LAUNCHER), *_python(SLEEPER), str(pid_file)], pid_file)
    launcher.kill()
    launcher.wait()
    _wait_until(lambda: not _alive(worker), f"worker {worker} ended")


def test_a_rank_under_a_middleman_that_survives_the_launcher_ends_itself(tmp_path: Path) -> None:
    """The torchrun launch: the ranks are grandchildren; their watch of the launcher ends
    them even where torchrun (here: a middleman deaf to the death signal) passes nothing on."""
    pid_file = tmp_path / "rank.pid"
    argv = [*_python(LAUNCHER), *_python(DEAF_MIDDLE), *_python(SLEEPER), str(pid_file)]
    launcher, rank = _start(argv, pid_file)
    middle = lifeline.ancestors(rank)[0]
    try:
        launcher.kill()
        launcher.wait()
        _wait_until(lambda: not _alive(rank), f"rank {rank} ended")
        assert _alive(middle)  # it was the rank's own watch, not the middleman, that ended it
    finally:
        os.kill(middle, signal.SIGKILL)


def test_a_process_whose_launcher_is_not_its_ancestor_ends_at_once(tmp_path: Path) -> None:
    """A launcher gone before its worker started watching (its pid maybe someone else's now):
    the worker never trains."""
    stranger = subprocess.Popen(["sleep", "600"])
    try:
        env = _env() | lifeline.launcher_env(stranger.pid)
        # the sleeper without its sleep: it ends by itself where the watch lets it start
        once = SLEEPER.replace("time.sleep(600)", "")
        worker = subprocess.run(
            [*_python(once), str(tmp_path / "never.pid")], env=env, capture_output=True
        )
    finally:
        stranger.kill()
        stranger.wait()
    assert worker.returncode == -signal.SIGKILL
    assert f"launcher {stranger.pid} is gone" in worker.stderr.decode()
    assert not (tmp_path / "never.pid").exists()


def test_without_a_launcher_variable_nothing_is_watched() -> None:
    before = threading.enumerate()
    lifeline.watch_launcher({})
    assert threading.enumerate() == before


def test_the_ancestors_of_a_child_start_with_its_parent() -> None:
    child = subprocess.Popen(["sleep", "600"])
    try:
        assert lifeline.ancestors(child.pid)[:2] == [os.getpid(), os.getppid()]
    finally:
        child.kill()
        child.wait()
