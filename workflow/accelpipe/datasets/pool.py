"""One way to spread per-case preparation work over processes.

`map_tasks` maps over a list of tasks known up front. `map_batches` takes tasks in batches
that are computed while the pool works (a converter parsing the next split's index while the
previous split's files are converted), on one pool for the whole run.

Both run on a `concurrent.futures.ProcessPoolExecutor`, which notices a worker that died
(BrokenProcessPool) where `multiprocessing.Pool` waits for its task forever, and whose workers
share no lock with this process: terminating a `multiprocessing.Pool` after a failure could
deadlock on a queue lock that a terminated worker held (issue 22). The pool is stopped without
waiting on anything for more than a few seconds.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Literal, TypeVar, overload

from accelpipe.core.errors import DataError

Task = TypeVar("Task")
Result = TypeVar("Result")

_GRACE_S = 5.0  # how long stopped workers get to exit before they are killed
_TICK_S = 1.0  # how often a wait for results checks that every worker is still alive


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
    output must be deterministic in order (e.g. an index file). The first task to raise stops
    the pool and raises here; so does leaving the iteration early.
    """
    if workers <= 1 or len(tasks) <= 1:
        yield from map(fn, tasks)
        return
    chunks = [tasks[i : i + chunksize] for i in range(0, len(tasks), chunksize)]
    with _Pool(min(workers, len(chunks))) as pool:
        turns = {pool.submit(_run_chunk, fn, chunk): i for i, chunk in enumerate(chunks)}
        early: dict[int, list[Result]] = {}  # ordered: chunks done before their turn
        turn = 0
        for _ in chunks:
            future = pool.next_done()
            done_turn = turns.pop(future)  # no result is kept once yielded
            results = future.result()  # raises the first failure, in whichever chunk
            if not ordered:
                yield from results
                continue
            early[done_turn] = results
            while turn in early:
                yield from early.pop(turn)
                turn += 1


def _run_chunk(fn: Callable[[Task], Result], chunk: list[Task]) -> list[Result]:
    return [fn(task) for task in chunk]


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
    results: list[Result] = []
    submitted = 0
    with _Pool(workers) as pool:
        for batch in batches:
            # A failed task stops the run before the next batch.
            while (future := pool.next_done(block=False)) is not None:
                results.append(future.result())
            for task in batch:
                pool.submit(fn, task)
            submitted += len(batch)
        while len(results) < submitted:
            results.append(pool.next_done().result())
    return results


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """Forks inside this block give workers whose garbage collector never touches what this
    process held (gc.freeze, as the gc docs advise before fork). A forked worker's collection
    could otherwise destroy an inherited object whose destructor needs this process's
    threads, which the worker lacks: a TensorFlow iterator's waited forever for its thread
    pool (test_ade20k_tfrecord hung so), and another such death was a segfault."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()  # the workers keep their frozen copy; here collection goes on


class _Pool:
    """A ProcessPoolExecutor whose workers are forked on creation, whose futures come out of
    `next_done` as they complete, and which leaving the `with` block stops, however it is left.
    A worker that died is a DataError with its exit code, not the bare BrokenProcessPool."""

    def __init__(self, workers: int) -> None:
        context = _context()
        self.executor = ProcessPoolExecutor(workers, mp_context=context)
        self.completed: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()
        # A private attribute: no public handle on the workers before Python 3.14.
        self.processes: Mapping[int, BaseProcess] = self.executor._processes
        try:
            with _frozen_heap():
                self.executor.submit(int)  # with fork, the first submit starts every worker: now
        except BaseException:  # forking failed partway
            self.stop(now=True)
            raise
        if context.get_start_method() == "fork":
            # Only workers write results. Without this process's copy of the pipe's write end,
            # the executor's reader gets EOF once they are gone, instead of waiting forever for
            # the rest of a result that a worker was writing when it was ended.
            # (typeshed's multiprocessing SimpleQueue omits the private _writer it has)
            self.executor._result_queue._writer.close()  # type: ignore[attr-defined]

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        # Any error: a task's, `batches` raising, GeneratorExit, Ctrl-C, a dead worker.
        codes = self.stop(now=error is not None)
        died = [code for code in codes if code not in (None, 0, -signal.SIGTERM)]
        if isinstance(error, BrokenProcessPool) and died:
            raise DataError(f"a preparation worker died ({_exit_status(died[0])})") from error

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future = self.executor.submit(fn, *args)
        future.add_done_callback(self.completed.put)
        return future

    @overload
    def next_done(self, block: Literal[True] = ...) -> Future[Any]: ...
    @overload
    def next_done(self, block: bool) -> Future[Any] | None: ...
    def next_done(self, block: bool = True) -> Future[Any] | None:
        """The next submitted future to complete (None if none has, without `block`).

        Raises BrokenProcessPool once a worker has died, also where the executor did not
        notice: one killed while writing its result leaves the executor reading the rest of it
        until the other workers are gone too.
        """
        while True:
            try:
                return self.completed.get(block, _TICK_S)
            except queue.Empty:
                sentinels = [worker.sentinel for worker in self.processes.values()]
                if multiprocessing.connection.wait(sentinels, 0):
                    raise BrokenProcessPool("a worker died") from None
                if not block:
                    return None

    def stop(self, *, now: bool) -> list[int | None]:
        """Stop the workers, waiting on nothing for long; their exit codes.

        `now`: terminate running tasks; else the workers end once idle, as shutdown asks. A
        terminated or dead worker may leave the executor's thread or queues stuck: that thread
        is given a few seconds, then left behind.
        """
        workers = list(self.processes.values())  # shutdown lets the executor forget them
        # typeshed declares this private attribute a _ThreadWakeup; it is the manager Thread
        manager: threading.Thread | None = self.executor._executor_manager_thread  # type: ignore[assignment]
        self.executor.shutdown(wait=False, cancel_futures=True)
        if now:
            for worker in workers:
                worker.terminate()
        deadline = time.monotonic() + _GRACE_S
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        if manager is not None:  # it reaps workers too: exit codes are known once it ends
            manager.join(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker.exitcode is None:  # stuck, or deaf to SIGTERM
                worker.kill()
                worker.join(_GRACE_S)
        return [worker.exitcode for worker in workers]


def _exit_status(code: int) -> str:
    if code == -signal.SIGKILL:
        return f"exit code {code}: killed by SIGKILL, e.g. out of memory; try fewer workers"
    return f"exit code {code}" + (f": killed by signal {-code}" if code < 0 else "")
