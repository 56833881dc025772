"""One way to spread per-case preparation work over processes.

`map_tasks` maps over a list of tasks known up front. `map_batches` takes tasks in batches
that are computed while the pool works (a converter parsing the next split's index while the
previous split's files are converted), on one pool for the whole run.
"""

from __future__ import annotations

import multiprocessing
import queue
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import TypeVar

Task = TypeVar("Task")
Result = TypeVar("Result")


def _context() -> BaseContext:
    """Fork where the platform has it, so workers inherit imported modules instead of
    re-importing them."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else None)


def map_tasks(
    fn: Callable[[Task], Result],
    tasks: list[Task],
    workers: int,
    *,
    ordered: bool = False,
    chunksize: int = 1,
) -> Iterator[Result]:
    """`fn` over `tasks`: in this process for one worker or task, else on a process pool.

    Unordered results let a slow case not hold back the rest; ask for `ordered` where the
    output must be deterministic in order (e.g. an index file).
    """
    if workers <= 1 or len(tasks) <= 1:
        yield from map(fn, tasks)
        return
    with _context().Pool(min(workers, len(tasks))) as pool:
        mapper: Callable[..., Iterable[Result]] = pool.imap if ordered else pool.imap_unordered
        yield from mapper(fn, tasks, chunksize=chunksize)


@dataclass(frozen=True)
class _Failure:
    error: BaseException


def _raise_failure(results: queue.SimpleQueue, kept: list) -> None:
    """Move the results that have arrived into `kept`; raise the first task failure among them."""
    while True:
        try:
            result = results.get_nowait()
        except queue.Empty:
            return
        if isinstance(result, _Failure):
            raise result.error
        kept.append(result)


def map_batches(
    fn: Callable[[Task], Result], batches: Iterable[Sequence[Task]], workers: int
) -> list[Result]:
    """`fn` over every task of `batches`; the results in the order they completed.

    `batches` is iterated lazily: the next batch is taken once the tasks of the ones before are
    queued, so whatever computes it runs while the pool works. The pool is started before the
    first batch, while this process is small (forking a process that holds a big parsed index
    is slow, and its copy-on-write faults slow this process down). The first task to raise,
    or `batches` raising, stops the pool and raises here. One worker: everything in this
    process, batch after batch.
    """
    if workers <= 1:
        return [fn(task) for batch in batches for task in batch]
    results: queue.SimpleQueue = queue.SimpleQueue()
    kept: list[Result] = []
    submitted, failed = 0, _failed(results)
    with _context().Pool(workers) as pool:  # leaving terminates it, also on an error
        for batch in batches:
            _raise_failure(results, kept)  # a failed task stops the run before the next batch
            for task in batch:
                pool.apply_async(fn, (task,), callback=results.put, error_callback=failed)
            submitted += len(batch)
        while len(kept) < submitted:
            result = results.get()
            if isinstance(result, _Failure):
                raise result.error
            kept.append(result)
    return kept


def _failed(results: queue.SimpleQueue) -> Callable[[BaseException], None]:
    """The pool's error callback: the exception goes into `results`, marked as one."""

    def put(error: BaseException) -> None:
        results.put(_Failure(error))

    return put
