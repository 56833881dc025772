"""benchmarks/bound.py: the verdict on what bounds a pass, from its CPU and wall seconds."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from benchmarks import bound


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bound.os, "sched_getaffinity", lambda _pid: {0, 1})


@pytest.mark.usefixtures("two_cores")
@pytest.mark.parametrize(
    ("cpu_s", "workers", "busy", "usable", "verdict"),
    [
        (1.9, 2, 1.9, 2, "cpu"),  # both cores kept busy
        (1.2, 2, 1.2, 2, "waits"),  # one core idle 40% of the time: the disk or a serial part
        (0.95, 1, 0.95, 1, "cpu"),  # one worker can keep only one core busy
        (1.9, 8, 1.9, 2, "cpu"),  # more workers than cores: the cores bound it
    ],
)
def test_busy_cores_against_usable_ones(
    cpu_s: float, workers: int, busy: float, usable: int, verdict: str
) -> None:
    result = bound.verdict(bound.Pass(wall_s=1.0, cpu_s=cpu_s, parent_cpu_s=0.3), workers)
    assert result == {
        "cpu_s": cpu_s, "cores_busy": busy, "cores_usable": usable, "parent_busy": 0.3,
        "bound": verdict,
    }  # fmt: skip


def test_a_pass_that_sleeps_waits() -> None:
    with bound.timed() as measured:
        time.sleep(0.2)
    assert measured.wall_s >= 0.2 and measured.cpu_s < measured.wall_s / 2
    assert bound.verdict(measured, 1)["bound"] == "waits"


def test_the_parent_share_counts_this_process_alone() -> None:
    """A pass whose parent computes while its child sleeps: the parent's share is its own
    CPU seconds over the wall, and it is part of the pass's CPU seconds."""
    with bound.timed() as measured:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.4)"])
        deadline = time.process_time() + 0.2
        while time.process_time() < deadline:  # the parent's serial part
            pass
        child.wait()
    result = bound.verdict(measured, 2)
    assert 0.2 <= measured.parent_cpu_s <= measured.cpu_s
    assert result["parent_busy"] == round(measured.parent_cpu_s / measured.wall_s, 2)
    assert result["bound"] == "waits"
