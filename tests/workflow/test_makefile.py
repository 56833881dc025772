"""`make run`: Snakemake on the cores this machine gives the process, unless CORES says."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.workflow.project import REPO


def _cores(*args: str, env: dict[str, str] | None = None) -> int:
    """The --cores of the snakemake command `make run` would run (make -n runs nothing)."""
    proc = subprocess.run(
        ["make", "-n", "run", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.findall(r"snakemake --cores (\S+) ", proc.stdout)
    assert len(found) == 1, proc.stdout
    return int(found[0])


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_make_run_uses_the_cores_the_process_may_run_on() -> None:
    # OMP_NUM_THREADS limits one process's threads, not the workflow's jobs
    assert _cores(env={"OMP_NUM_THREADS": "1"}) == len(os.sched_getaffinity(0))


def test_cores_on_the_command_line_or_in_the_environment_wins() -> None:
    assert _cores("CORES=3") == 3
    assert _cores(env={"CORES": "5"}) == 5
