"""Test-wide hooks.

`make test` runs pytest-xdist with `--dist loadfile`: a test file at a time per pytest
process, so a module's expensive fixtures are built once. Files whose tests share one thing
that two processes cannot use at once run as one unit on one process: the single-node Slurm
is such a thing (two files' jobs on two processes wait on each other's allocations).

Units are handed out longest first (the longest-processing-time rule), by the seconds each
took in a full run (tests/durations.json, `python scripts/test_durations.py`): a long unit
started last would keep one process busy while the others idle. A unit the table does not
know yet is taken as the longest, so a new file never ends up alone at the tail.

The suite oversubscribes the CPU by design (three pytest processes on two cores, each running
jobs with their own threads), so OpenMP's threads sleep at a barrier instead of spinning for a
core another process is waiting for: with the default policy, a 2-thread torch training step
here took 4-7x the CPU time (and longer, not shorter, than one thread) while other processes
ran. Every process the tests start inherits it; a value already set is kept.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# work unit -> seconds it took in the last full run (scripts/test_durations.py writes it)
DURATIONS = Path(__file__).with_name("durations.json")

# test file -> the unit it runs in, where that is not the file alone
SHARED_UNITS = {
    "tests/integration/test_slurm.py": "slurm",
    "tests/integration/test_tf_slurm.py": "slurm",
}


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under `--dist loadfile`: its file or a shared unit."""
    path = nodeid.split("::", 1)[0]
    return SHARED_UNITS.get(path, path)


def longest(pending: Iterable[str], seconds: Mapping[str, float]) -> str:
    """The unit to start next: the longest by `seconds`, an unknown one before any known."""
    return max(pending, key=lambda unit: seconds.get(unit, math.inf))


# xdist 3.8's `loadgroup` marks do not take effect under pytest 9 (it rewrites a node id
# attribute pytest no longer reads), so the grouping is done in the scheduler instead.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}

    class FileOrSharedUnitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # xdist hands out the queue's first unit
            self.workqueue.move_to_end(longest(self.workqueue, seconds), last=False)
            super()._assign_work_unit(node)

    return FileOrSharedUnitScheduling(config, log)
