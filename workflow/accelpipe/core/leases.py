"""Accelerator leasing: give each job its own devices from the host's pool.

Snakemake counts ``resources: accel=N`` but never says *which* devices a job may use.
A job therefore leases N device ids from the pool with one lock file per device,
exports the vendor's visibility variable (:func:`visibility_env`) for its child
processes, and gives the devices back when it ends.

The lock is ``fcntl.flock`` on ``<lock_dir>/<device>.lock``: the kernel drops it when the
holder's last file descriptor closes, so a failing, crashing or SIGKILLed job never
leaves a device leased. The file's content (holder pid, host, job, time) names the holder
in the error of a job that waited too long (``wait_s``, config ``accelerators.wait_s``) and
for ``cat``; a stale content after a crash means nothing.

Lock directory (:func:`default_lock_dir`): ``$ACCELPIPE_LOCK_DIR`` if set, else
``/tmp/accelpipe-leases-<uid>``, created mode 0700 and refused when it is a symbolic link,
another user's, or writable by others (accelpipe.core.locks: how the directory and the lock
files are kept from being used against their user). The default only coordinates jobs of
one user. On a shared multi-user node the admin should point ``ACCELPIPE_LOCK_DIR`` at one
root-owned sticky directory (mode 1777) on a node-local file system: flock over NFS is
unreliable, and the lock directory must be per node anyway, as the devices are.

Device pool (:func:`resolve_pool`): config ``accelerators.pool`` if given, else
:func:`detect_devices` asks the vendor tool:

- cuda: ``nvidia-smi --query-gpu=index --format=csv,noheader`` (one index a line);
- rocm: ``rocm-smi --showid`` (ids from the ``GPU[N]`` line prefixes), or, where
  rocm-smi is absent (newer ROCm), ``amd-smi list`` (``GPU: N`` lines). Both number
  devices in the order HIP enumerates them by default, which is what
  ``HIP_VISIBLE_DEVICES`` takes;
- gaudi: ``hl-smi -Q module_id -f csv,noheader``. Module ids are stable across
  reboots, indices are not, hence ``HABANA_VISIBLE_MODULES``.

Fairness: a waiting job polls (``poll_s``, jittered) and holds nothing while it
waits (logging the holders when it starts and every ``LOG_EVERY_S``), so two jobs can
never deadlock each holding half of what both need. The price:
there is no queue, so a job asking many devices can wait long behind a stream of
small ones. Under one Snakemake with ``--resources accel=<pool size>`` jobs never wait.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from urllib.parse import quote

from accelpipe.core import locks
from accelpipe.core.errors import BackendUnavailableError, ConfigError
from accelpipe.core.locks import LOCK_DIR_ENV, LockTimeoutError

log = logging.getLogger(__name__)

VISIBILITY_ENV = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "rocm": "HIP_VISIBLE_DEVICES",
    "gaudi": "HABANA_VISIBLE_MODULES",
}
BACKENDS = ("cpu", *VISIBILITY_ENV)
TOOL_TIMEOUT_S = 60.0
LOG_EVERY_S = 600.0  # a waiting job says again whom it waits for

Runner = Callable[[Sequence[str]], str]

# Per backend, the queries to try in order: (argv, regex whose group 1 is a device id).
# The regexes are anchored per line, so banners, blank lines and headers are skipped.
_QUERIES: dict[str, list[tuple[list[str], re.Pattern[str]]]] = {
    "cuda": [
        (["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], re.compile(r"^(\d+)$")),
    ],
    "rocm": [
        (["rocm-smi", "--showid"], re.compile(r"^GPU\[(\d+)\]")),
        (["amd-smi", "list"], re.compile(r"^GPU:\s*(\d+)$")),
    ],
    "gaudi": [
        (["hl-smi", "-Q", "module_id", "-f", "csv,noheader"], re.compile(r"^(\d+)$")),
    ],
}


def run_tool(argv: Sequence[str]) -> str:
    """Run a vendor tool and return its stdout; FileNotFoundError when it is not installed.

    Module-level so tests (and callers) can replace it, e.g. with ``monkeypatch``.
    """
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise BackendUnavailableError(
            f"`{' '.join(argv)}` did not answer within {TOOL_TIMEOUT_S:.0f} s; "
            "list the devices in config `accelerators.pool` instead"
        ) from err
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise BackendUnavailableError(
            f"`{' '.join(argv)}` failed with exit status {done.returncode}"
            f"{': ' + detail[-1] if detail else ''}; is the driver loaded? "
            "Or list the devices in config `accelerators.pool`"
        )
    return done.stdout


def detect_devices(backend: str, *, runner: Runner | None = None) -> list[str]:
    """The device ids the backend's vendor tool reports ("0", "1", ...); cpu has none."""
    _check_backend(backend)
    if backend == "cpu":
        return []
    run = runner or run_tool  # looked up per call so that replacing run_tool works
    missing = []
    for argv, pattern in _QUERIES[backend]:
        try:
            output = run(argv)
        except FileNotFoundError:
            missing.append(argv[0])
            continue
        except OSError as err:
            raise BackendUnavailableError(
                f"cannot run `{argv[0]}` to list {backend} devices: {err}; "
                "list the devices in config `accelerators.pool` instead"
            ) from err
        return _parse_ids(output, pattern)
    raise BackendUnavailableError(
        f"cannot list {backend} devices: {' / '.join(f'`{tool}`' for tool in missing)} "
        "not found on PATH; install it or list the devices in config `accelerators.pool`"
    )


def _parse_ids(output: str, pattern: re.Pattern[str]) -> list[str]:
    """Distinct ids matched line by line, in numeric order (tools may list them unordered)."""
    ids = {m.group(1) for line in output.splitlines() if (m := pattern.match(line.strip()))}
    return [str(i) for i in sorted({int(i) for i in ids})]


def resolve_pool(backend: str, pool: list[str] | None) -> list[str]:
    """The devices jobs may lease: config ``accelerators.pool`` if given, else detected."""
    if pool is None:
        return detect_devices(backend)
    _check_backend(backend)
    if not isinstance(pool, list):
        raise ConfigError(f"accelerators.pool must be a list of device ids, got {pool!r}")
    ids = [_pool_id(item) for item in pool]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ConfigError(f"accelerators.pool lists {', '.join(duplicates)} more than once")
    return ids


def _pool_id(item: object) -> str:
    # YAML reads `pool: [0, 1]` as ints: accept them, since that is what people write.
    if isinstance(item, int) and not isinstance(item, bool):
        item = str(item)
    if not isinstance(item, str) or not item.strip() or "," in item:
        raise ConfigError(
            f"accelerators.pool: {item!r} is not a device id (a non-empty string without commas)"
        )
    return item.strip()


def visibility_env(backend: str, devices: Sequence[str]) -> dict[str, str]:
    """The environment that restricts a job to ``devices``, e.g. CUDA_VISIBLE_DEVICES=0,1.

    cpu needs none. rocm sets only HIP_VISIBLE_DEVICES: also setting
    ROCR_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES makes the variables conflict.
    An empty ``devices`` yields an empty value, which hides every GPU from CUDA;
    note that some ROCm releases ignore an empty HIP_VISIBLE_DEVICES (ROCm/hip#3001).
    """
    _check_backend(backend)
    if backend == "cpu":
        return {}
    return {VISIBILITY_ENV[backend]: ",".join(devices)}


def default_lock_dir() -> Path:
    """``$ACCELPIPE_LOCK_DIR``, else ``/tmp/accelpipe-leases-<uid>``.

    Deliberately /tmp and not tempfile.gettempdir(): batch systems set a per-job
    TMPDIR, and jobs with different lock dirs would not see each other's leases.
    """
    configured = os.environ.get(LOCK_DIR_ENV, "").strip()
    if configured:
        return Path(configured)
    return Path("/tmp") / f"accelpipe-leases-{os.getuid()}"


def lock_path(lock_dir: str | Path, device: str) -> Path:
    """The lock file of one device; ids are percent-encoded ("a/b" -> "a%2Fb.lock").

    Percent-encoding is injective, so two distinct ids never share a lock.
    """
    return Path(lock_dir) / f"{quote(device, safe='')}.lock"


@contextlib.contextmanager
def lease(
    n: int,
    pool: Sequence[str],
    lock_dir: str | Path,
    *,
    poll_s: float = 0.2,
    on_wait: Callable[[], None] | None = None,
    wait_s: float | None = None,
    job: str = "",
) -> Iterator[list[str]]:
    """Hold ``n`` devices of ``pool`` for the ``with`` block; yields their ids.

    Waits at most ``wait_s`` seconds (None: as long as needed), holding nothing while it
    waits, then fails with LeaseTimeoutError naming the holders. ``on_wait`` is called
    before every pause (about every ``poll_s``), e.g. to give up by raising. ``job`` names
    the holder in its lock files. Everything is released on exit, on an exception too.
    """
    devices = list(pool)
    _check_request(n, devices, poll_s)
    if n == 0:
        yield []
        return
    directory = Path(lock_dir)
    dir_fd = locks.open_dir(directory)
    try:
        wait = _Wait(n, devices, directory, dir_fd, wait_s)
        held = _acquire(wait, poll_s, on_wait, locks.holder_record(job))
    finally:
        os.close(dir_fd)  # the locked files stay open: the leases hold
    try:
        yield list(held)
    finally:
        _release(held.values())


class LeaseTimeoutError(LockTimeoutError):
    """The devices stayed leased by others longer than ``accelerators.wait_s``."""


class _Wait:
    """One lease's wait: what it asks for, where, and until when."""

    def __init__(
        self, n: int, devices: list[str], directory: Path, dir_fd: int, wait_s: float | None
    ) -> None:
        self.n, self.devices, self.directory, self.dir_fd = n, devices, directory, dir_fd
        self.wait_s, self.deadline = wait_s, locks.deadline_after(wait_s)
        self.logged_at: float | None = None

    def holders(self) -> str:
        """'<device> by <holder record>' for every device of the pool held now."""
        busy = []
        for device in self.devices:
            path = lock_path(self.directory, device)
            fd = locks.try_lock(self.dir_fd, path)
            if fd is None:
                busy.append(f"{device} by {locks.holder(self.dir_fd, path)}")
            else:
                os.close(fd)
        return "; ".join(busy) or "none now"

    def log_now(self) -> None:
        """Name the holders when the wait starts and every LOG_EVERY_S after."""
        now = time.monotonic()
        if self.logged_at is None or now - self.logged_at >= LOG_EVERY_S:
            self.logged_at = now
            bound = "as long as it takes" if self.wait_s is None else f"up to {self.wait_s:g} s"
            log.info(
                "waiting (%s) for %d of the accelerators %s, held: %s",
                bound,
                self.n,
                ",".join(self.devices),
                self.holders(),
            )

    def timed_out(self) -> LeaseTimeoutError:
        return LeaseTimeoutError(
            f"{self.n} of the accelerators {','.join(self.devices)} (lock directory "
            f"{self.directory}) stayed leased for {self.wait_s:g} s (accelerators.wait_s): "
            f"{self.holders()}; wait for those jobs to end, stop them, or raise "
            "accelerators.wait_s"
        )


def _check_request(n: int, devices: list[str], poll_s: float) -> None:
    if n < 0:
        raise ConfigError(f"a job cannot ask for a negative number of accelerators ({n})")
    if n > len(devices):
        raise ConfigError(
            f"the job asks for {n} accelerators (resources accel={n}) but the pool has only "
            f"{len(devices)} ({', '.join(devices) or 'none'}); lower accel or extend "
            "accelerators.pool"
        )
    if len(set(devices)) != len(devices):
        raise ConfigError(f"the accelerator pool lists a device twice: {devices}")
    if poll_s < 0:
        raise ValueError(f"poll_s must be >= 0, got {poll_s}")


def _acquire(
    wait: _Wait, poll_s: float, on_wait: Callable[[], None] | None, record: bytes
) -> dict[str, int]:
    while True:
        held = _try_take(wait.n, wait.devices, wait.directory, wait.dir_fd)
        if held is not None:
            for fd in held.values():
                locks.stamp(fd, record)
            return held
        if locks.passed(wait.deadline):
            raise wait.timed_out()
        wait.log_now()
        if on_wait is not None:
            on_wait()
        locks.pause(poll_s, wait.deadline)


def _try_take(n: int, devices: list[str], directory: Path, dir_fd: int) -> dict[str, int] | None:
    """All ``n`` devices (id -> locked fd), or None after releasing any partial take."""
    held: dict[str, int] = {}
    try:
        for device in devices:
            fd = locks.try_lock(dir_fd, lock_path(directory, device))
            if fd is not None:
                held[device] = fd
                if len(held) == n:
                    return held
    except BaseException:
        _release(held.values())
        raise
    _release(held.values())
    return None


def _release(fds: Iterable[int]) -> None:
    for fd in list(fds):
        locks.release(fd)


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
