"""Test-wide hooks.

`make test` runs pytest-xdist with `--dist loadfile`: a test file at a time per pytest
process, so a module's expensive fixtures are built once. Files whose tests share one thing
that two processes cannot use at once run as one unit on one process: the single-node Slurm
is such a thing (two files' jobs on two processes wait on each other's allocations).
"""

from __future__ import annotations

from typing import Any

import pytest

# test file -> the unit it runs in, where that is not the file alone
SHARED_UNITS = {
    "tests/integration/test_slurm.py": "slurm",
    "tests/integration/test_tf_slurm.py": "slurm",
}


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under `--dist loadfile`: its file or a shared unit."""
    path = nodeid.split("::", 1)[0]
    return SHARED_UNITS.get(path, path)


# xdist 3.8's `loadgroup` marks do not take effect under pytest 9 (it rewrites a node id
# attribute pytest no longer reads), so the grouping is done in the scheduler instead.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrSharedUnitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return FileOrSharedUnitScheduling(config, log)
