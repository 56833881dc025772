"""One way to spread per-case preparation work over processes."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

Task = TypeVar("Task")
Result = TypeVar("Result")


def map_tasks(
    fn: Callable[[Task], Result],
    tasks: list[Task],
    workers: int,
    *,
    ordered: bool = False,
    chunksize: int = 1,
) -> Iterator[Result]:
    """`fn` over `tasks`: in this process for one worker or task, else on a process pool.

    Fork where the platform has it, so workers inherit imported modules instead of
    re-importing them. Unordered results let a slow case not hold back the rest; ask for
    `ordered` where the output must be deterministic in order (e.g. an index file).
    """
    if workers <= 1 or len(tasks) <= 1:
        yield from map(fn, tasks)
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ctx.Pool(min(workers, len(tasks))) as pool:
        mapper: Callable[..., Iterable[Result]] = pool.imap if ordered else pool.imap_unordered
        yield from mapper(fn, tasks, chunksize=chunksize)
