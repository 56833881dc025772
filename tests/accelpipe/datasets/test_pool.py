"""The process pool helpers: map_tasks and map_batches (lazy batches, one pool, first
failure stops the run, and neither a failure nor a dead worker hangs it: issue 22)."""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import multiprocessing
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator

import psutil
import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets.pool import map_batches, map_tasks

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


class _Marked:
    """A reference cycle (so only the garbage collector frees it) whose freeing writes the pid
    of the process that freed it."""

    def __init__(self, marks: str) -> None:
        self.marks, self.me = marks, self

    def __del__(self) -> None:
        with open(self.marks, "a") as out:
            out.write(f"{os.getpid()}\n")


def _collect(_: int) -> int:
    gc.collect()
    return os.getpid()


def test_workers_never_collect_the_garbage_they_inherit(tmp_path) -> None:
    """A forked worker that collected inherited garbage ran its destructors without this
    process's threads: a TensorFlow iterator's waited forever (test_ade20k_tfrecord hung)."""
    marks = tmp_path / "freed-by"
    gc.disable()  # the cycle stays uncollected until the workers have been forked
    try:
        _Marked(str(marks))
        workers = set(map_tasks(_collect, [0, 1, 2, 3], 2))
    finally:
        gc.enable()
    gc.collect()
    assert workers and os.getpid() not in workers
    assert marks.read_text().split() == [str(os.getpid())]


@pytest.mark.tensorflow
def test_a_tensorflow_iterator_left_as_garbage_does_not_hang_the_workers() -> None:
    """The case itself: a prefetching tf.data iterator in a reference cycle. Before gc.freeze,
    a worker that collected it waited forever for the iterator's threads."""
    tf = pytest.importorskip("tensorflow")

    class Holder:
        def __init__(self) -> None:
            dataset = tf.data.Dataset.range(10**6).map(lambda x: x * 2, num_parallel_calls=2)
            self.iterator = iter(dataset.prefetch(4))
            next(self.iterator)
            self.me = self

    gc.disable()
    try:
        Holder()
        workers = set(map_tasks(_collect, [0, 1, 2, 3], 2))
    finally:
        gc.enable()
    assert workers and os.getpid() not in workers


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


# --- a failure never hangs the pool (issue 22) ----------------------------------------------
#
# A hang cannot be caught by an assertion: each check runs in a forked child whose faulthandler
# dumps its threads' stacks and ends it when a run outlives its bound.


def _bounded(check: Callable[[], None], timeout: float) -> None:
    """Run `check` in a forked child; fail with its error, or with its stacks if it hangs."""
    with tempfile.TemporaryFile() as log:
        child = multiprocessing.get_context("fork").Process(
            target=_in_child, args=(check, log.fileno(), timeout)
        )
        child.start()
        # Not join(): its sentinel stays open while workers it forked live on.
        deadline = time.monotonic() + timeout + 60  # a backstop: its own watchdog ends it first
        while child.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.05)
        hung = child.exitcode is None
        with contextlib.suppress(ProcessLookupError):  # its group: workers a hang left behind
            os.killpg(child.pid, signal.SIGKILL)
        child.join()
        log.seek(0)
        text = log.read().decode(errors="replace")
    if hung or "Timeout (" in text:
        pytest.fail(f"the pool hung; the stacks of its threads:\n{text}", pytrace=False)
    if child.exitcode != 0:
        pytest.fail(f"exit code {child.exitcode}:\n{text}", pytrace=False)


def _in_child(check: Callable[[], None], log: int, timeout: float) -> None:
    os.setpgid(0, 0)
    os.dup2(log, 2)
    _watchdog(timeout)
    try:
        check()
    except BaseException:
        os.write(2, traceback.format_exc().encode())
        os._exit(1)
    os._exit(0)


def _watchdog(timeout: float) -> None:
    """From now, `timeout` seconds until this process dumps its stacks and exits."""
    faulthandler.dump_traceback_later(timeout, exit=True, file=2)


@pytest.fixture
def busy_cores() -> Iterator[None]:
    """Every core (up to 4) kept busy: the issue-22 hang showed under load."""
    spin = [sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin) for _ in range(min(max(os.cpu_count() or 2, 2), 4))]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


STRESS_RUNS = 48
RUN_TIMEOUT_S = 30  # a run takes well under a second even under load


def _fails_at(task: tuple[int, int]) -> bytes:
    case, bad = task
    if case == bad:
        raise DataError(f"case {case}: bad")
    # A big result keeps workers writing to the result queue, where terminating one used to
    # leave its lock held (the issue-22 deadlock).
    return bytes(256 * 1024)


@pytest.mark.usefixtures("busy_cores")
def test_a_failing_task_at_any_position_never_hangs_the_pool() -> None:
    seed = random.randrange(2**32)

    def check() -> None:
        rng = random.Random(seed)
        for run in range(STRESS_RUNS):
            bad = rng.randrange(32)
            tasks = [(case, bad) for case in range(32)]
            os.write(2, f"run {run} (seed {seed}): case {bad} fails\n".encode())
            _watchdog(RUN_TIMEOUT_S)
            with pytest.raises(DataError, match=rf"^case {bad}: bad$"):
                if run % 3 == 0:
                    list(map_tasks(_fails_at, tasks, 2))
                elif run % 3 == 1:
                    list(map_tasks(_fails_at, tasks, 2, ordered=True, chunksize=2))
                else:
                    map_batches(_fails_at, (tasks[i : i + 8] for i in range(0, 32, 8)), 2)
            assert not multiprocessing.active_children(), f"run {run}: workers left running"
            # A thread left stuck (the executor's) would hang this interpreter's exit.
            assert threading.active_count() == 1, f"run {run}: {threading.enumerate()}"

    _bounded(check, STRESS_RUNS * RUN_TIMEOUT_S)


def _dies_on_three(task: tuple[int, str]) -> int:
    case, how = task
    if case == 3:
        if how == "exit":
            os._exit(7)
        if how == "torn":
            _exit_while_writing_a_result()
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.01)
    return case


def _exit_while_writing_a_result() -> None:
    """End this worker as if killed while it sent a big result: holding the result queue's
    lock, the message begun. The pool's own reader then waits for the rest while another
    worker is alive."""
    frame = sys._getframe()
    while "result_queue" not in frame.f_locals:  # concurrent.futures.process._process_worker
        frame = frame.f_back
    results = frame.f_locals["result_queue"]
    results._wlock.acquire()
    os.write(results._writer.fileno(), struct.pack("!i", 1 << 20) + b"\x80")
    os._exit(9)


@pytest.mark.parametrize(
    ("how", "status"),
    [
        ("exit", "exit code 7"),
        ("kill", "exit code -9: killed by SIGKILL"),
        ("torn", "exit code 9"),
    ],
)
def test_a_worker_that_dies_is_an_error_not_a_hang(how: str, status: str) -> None:
    def check() -> None:
        tasks = [(case, how) for case in range(8)]
        message = rf"^a preparation worker died \({status}"
        with pytest.raises(DataError, match=message):
            list(map_tasks(_dies_on_three, tasks, 2))
        with pytest.raises(DataError, match=message):
            map_batches(_dies_on_three, [tasks[:4], tasks[4:]], 2)
        assert not multiprocessing.active_children()

    _bounded(check, 60)


def _slow_square(x: int) -> int:
    time.sleep(0.05)
    return x * x


def test_leaving_map_tasks_early_leaves_no_worker() -> None:
    def check() -> None:
        results = map_tasks(_slow_square, list(range(40)), 2)
        next(results)
        results.close()  # what leaving a for loop over it early does
        assert not multiprocessing.active_children()
        assert not psutil.Process().children(recursive=True)

    _bounded(check, 60)
