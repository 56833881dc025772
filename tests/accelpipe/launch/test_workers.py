"""The launcher run (launch.workers.run_workers): a launch its watch says must stop is
stopped with the watch's reason, and it returns only once the processes the launch started
on this node are gone, whoever started them and whatever signals they ignore."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from accelpipe.launch import lifeline, workers
from accelpipe.launch.workers import LAUNCH_ID_ENV, LaunchStopped, reap, run_workers

# A process that outlives SIGTERM, as a rank blocked in a collective or a srun waiting for a
# lost node may; it writes its pid to the file named by its argument.
STUBBORN = textwrap.dedent(
    """
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(3600)
    """
)


@pytest.fixture(autouse=True)
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "WATCH_S", 0.2)
    monkeypatch.setattr(workers, "STOP_GRACE_S", 0.5)
    monkeypatch.setattr(workers, "REAP_S", 0.5)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    fields = lifeline.proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def _launch_env() -> dict[str, str]:
    return {**os.environ, LAUNCH_ID_ENV: uuid.uuid4().hex}


class FailingStep:
    """A watch whose step fails on node n2: it asks to stop once the launcher reported it."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def saw(self, line: str) -> None:
        self.lines.append(line)

    def lost(self) -> str | None:
        return "node n2 lost" if any("task 1: Killed" in line for line in self.lines) else None


def test_a_launch_the_watch_stops_ends_with_its_reason_and_no_rank_left(tmp_path: Path) -> None:
    """The launcher reports a failed task and then hangs, ignoring SIGTERM, with a rank of its
    own (started in a session of its own, so no signal to the launcher reaches it) that
    ignores SIGTERM too: the launch stops with the watch's reason, both are killed, and the
    call returns only once they are gone."""
    rank_pid, launcher_pid = tmp_path / "rank.pid", tmp_path / "launcher.pid"
    launcher = textwrap.dedent(
        f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {STUBBORN!r}, {str(rank_pid)!r}],
                         start_new_session=True)
        while True:
            try:
                open({str(rank_pid)!r}).read() or 1 / 0
                break
            except (OSError, ZeroDivisionError):
                time.sleep(0.05)
        print("srun: error: n2: task 1: Killed", flush=True)
        sys.argv[1:] = [{str(launcher_pid)!r}]
        exec({STUBBORN!r})
        """
    )
    with pytest.raises(LaunchStopped, match=r"^node n2 lost$"):
        run_workers([sys.executable, "-c", launcher], _launch_env(), FailingStep())
    assert not _alive(int(rank_pid.read_text()))
    assert not _alive(int(launcher_pid.read_text()))


def test_a_healthy_launch_returns_its_status_and_the_watch_saw_its_output() -> None:
    watch = FailingStep()
    script = "print('rank 0 done'); raise SystemExit(3)"
    assert run_workers([sys.executable, "-c", script], _launch_env(), watch) == 3
    assert watch.lines == ["rank 0 done"]


def test_reap_kills_only_the_processes_of_its_launch(tmp_path: Path) -> None:
    ours, other = _launch_env(), _launch_env()
    procs = {
        name: subprocess.Popen([sys.executable, "-c", STUBBORN, str(tmp_path / name)], env=env)
        for name, env in (("ours", ours), ("other", other))
    }
    try:
        while not all((tmp_path / name).exists() for name in procs):
            time.sleep(0.05)
        assert reap(ours[LAUNCH_ID_ENV]) == [procs["ours"].pid]
        assert procs["ours"].wait() == -9
        assert procs["other"].poll() is None
        assert reap(uuid.uuid4().hex) == []  # a launch with nothing left: nothing to wait for
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
