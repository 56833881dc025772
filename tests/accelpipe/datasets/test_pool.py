"""The process pool helpers: map_tasks and map_batches (lazy batches, one pool, first
failure stops the run)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator

import pytest

from accelpipe.datasets.pool import map_batches, map_tasks
from accelpipe.errors import DataError

STARTED = multiprocessing.get_context("fork").Event()  # inherited by the forked workers


def _square(x: int) -> int:
    return x * x


def _pid_square(x: int) -> tuple[int, int]:
    STARTED.set()
    return os.getpid(), x * x


def _fails_on_three(x: int) -> int:
    if x == 3:
        raise DataError("case 3: bad")
    return x


def test_map_tasks_in_order_when_asked() -> None:
    assert list(map_tasks(_square, list(range(6)), 2, ordered=True)) == [0, 1, 4, 9, 16, 25]
    assert sorted(map_tasks(_square, list(range(6)), 2)) == [0, 1, 4, 9, 16, 25]


def test_map_batches_runs_a_batch_before_the_next_is_made() -> None:
    """The next batch is computed while the pool works: here it waits for a task of the first
    batch to have run, which deadlocks (and fails) if batches were all taken up front."""
    STARTED.clear()
    made: list[int] = []

    def batches() -> Iterator[list[int]]:
        made.append(1)
        yield [1, 2]
        assert STARTED.wait(timeout=120), "no task of the first batch ran"
        made.append(2)
        yield [3, 4, 5]

    results = map_batches(_pid_square, batches(), workers=2)
    assert made == [1, 2]
    assert sorted(square for _pid, square in results) == [1, 4, 9, 16, 25]
    assert os.getpid() not in {pid for pid, _square in results}  # ran on the pool


def test_map_batches_with_one_worker_runs_here_in_order() -> None:
    results = map_batches(_pid_square, iter([[1, 2], [], [3]]), workers=1)
    assert results == [(os.getpid(), 1), (os.getpid(), 4), (os.getpid(), 9)]


@pytest.mark.parametrize("workers", [1, 2])
def test_map_batches_raises_the_first_failure(workers: int) -> None:
    with pytest.raises(DataError, match=r"^case 3: bad$"):
        map_batches(_fails_on_three, iter([[1, 2], [3, 4], [5]]), workers)


def test_map_batches_raises_what_the_batches_raise() -> None:
    def batches() -> Iterator[list[int]]:
        yield [1, 2]
        raise DataError("instances.json: bad")

    with pytest.raises(DataError, match=r"^instances\.json: bad$"):
        map_batches(_square, batches(), workers=2)
