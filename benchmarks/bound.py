"""What bounds a timed pass: the CPU time it used against its wall time and the cores it had.

A pass that kept every core it could use busy is bound by compute: only less work per item,
or more cores, makes it faster. A pass that left cores idle waited on something else: the
disk, a serial part (a pool's start-up, one parse in the parent) or a lock. Shared by the
preparation benchmarks (bench_prepare.py, bench_tfrecord.py), whose floors and preparations
run on the same pools, so their verdicts say where a ratio below the goal comes from.

CPU time is this process's and its children's, and a child counts once it has been waited
for: the passes measured here end by joining their pools.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# Average busy cores, as a share of the usable ones, from which a pass counts as compute-bound.
BUSY_SHARE = 0.9


@dataclass
class Pass:
    """A timed pass: its wall seconds, the CPU seconds it used, and of those the ones this
    process used itself (the parent of the pool: its serial part, filled when it ends)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    parent_cpu_s: float = 0.0


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def timed() -> Iterator[Pass]:
    """Times the block's wall and CPU seconds into the Pass it yields."""
    measured, start = Pass(), time.perf_counter()
    own0, children0 = _cpu_s(resource.RUSAGE_SELF), _cpu_s(resource.RUSAGE_CHILDREN)
    yield measured
    measured.wall_s = time.perf_counter() - start
    measured.parent_cpu_s = _cpu_s(resource.RUSAGE_SELF) - own0
    measured.cpu_s = measured.parent_cpu_s + _cpu_s(resource.RUSAGE_CHILDREN) - children0


def verdict(measured: Pass, workers: int) -> dict[str, float | int | str]:
    """The pass's CPU seconds, its average busy cores, the cores it could use (its workers,
    at most the cores this process may run on) and its bound: `cpu` when it kept them busy,
    `waits` when it did not. `parent_busy`: the share of the wall this process itself
    computed (parsing, planning, feeding the pool); where the pass waits, a large one names
    the serial part, a small one the disk or the pool's start-up."""
    usable = max(1, min(workers, len(os.sched_getaffinity(0))))
    wall = measured.wall_s if measured.wall_s > 0 else float("inf")
    busy = measured.cpu_s / wall
    return {
        "cpu_s": round(measured.cpu_s, 3),
        "cores_busy": round(busy, 2),
        "cores_usable": usable,
        "parent_busy": round(measured.parent_cpu_s / wall, 2),
        "bound": "cpu" if busy >= BUSY_SHARE * usable else "waits",
    }
