"""Accelerator leasing: give each job its own devices from the host's pool.

Snakemake counts ``resources: accel=N`` but never says *which* devices a job may use.
A job therefore leases N device ids from the pool with one lock file per device,
exports the vendor's visibility variable (:func:`visibility_env`) for its child
processes, and gives the devices back when it ends.

The lock is ``fcntl.flock`` on ``<lock_dir>/<device>.lock``: the kernel drops it when the
holder's last file descriptor closes, so a failing, crashing or SIGKILLed job never
leaves a device leased. The file's content (holder pid, host, time) is only a
diagnostic for ``cat``; a stale content after a crash means nothing.

Lock directory (:func:`default_lock_dir`): ``$ACCELPIPE_LOCK_DIR`` if set, else
``/tmp/accelpipe-leases-<uid>``. The default only coordinates jobs of one user. On a
shared multi-user node the admin should point ``ACCELPIPE_LOCK_DIR`` at one shared,
writable (e.g. mode 1777) directory on a node-local file system: flock over NFS is
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
waits, so two jobs can never deadlock each holding half of what both need. The price:
there is no queue, so a job asking many devices can wait long behind a stream of
small ones. Under one Snakemake with ``--resources accel=<pool size>`` jobs never wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from accelpipe.errors import AccelpipeError, BackendUnavailableError, ConfigError

VISIBILITY_ENV = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "rocm": "HIP_VISIBLE_DEVICES",
    "gaudi": "HABANA_VISIBLE_MODULES",
}
BACKENDS = ("cpu", *VISIBILITY_ENV)
LOCK_DIR_ENV = "ACCELPIPE_LOCK_DIR"
TOOL_TIMEOUT_S = 60.0

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
) -> Iterator[list[str]]:
    """Hold ``n`` devices of ``pool`` for the ``with`` block; yields their ids.

    Waits as long as needed, holding nothing while it waits. ``on_wait`` is called
    before every pause (about every ``poll_s``), e.g. to log once or to give up by raising.
    Everything is released on exit, on an exception too.
    """
    devices = list(pool)
    _check_request(n, devices, poll_s)
    if n == 0:
        yield []
        return
    directory = _make_lock_dir(Path(lock_dir))
    held = _acquire(n, devices, directory, poll_s, on_wait)
    try:
        yield list(held)
    finally:
        _release(held.values())


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


def _make_lock_dir(directory: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AccelpipeError(
            f"cannot create the accelerator lock directory {directory}: {err}; "
            f"point {LOCK_DIR_ENV} at a writable node-local directory"
        ) from err
    return directory


def _acquire(
    n: int,
    devices: list[str],
    directory: Path,
    poll_s: float,
    on_wait: Callable[[], None] | None,
) -> dict[str, int]:
    while True:
        held = _try_take(n, devices, directory)
        if held is not None:
            _stamp(held.values())
            return held
        if on_wait is not None:
            on_wait()
        # Jitter keeps two waiting jobs from retrying in lockstep and colliding forever.
        time.sleep(poll_s * random.uniform(0.5, 1.5))


def _try_take(n: int, devices: list[str], directory: Path) -> dict[str, int] | None:
    """All ``n`` devices (id -> locked fd), or None after releasing any partial take."""
    held: dict[str, int] = {}
    try:
        for device in devices:
            fd = _try_lock(lock_path(directory, device))
            if fd is not None:
                held[device] = fd
                if len(held) == n:
                    return held
    except BaseException:
        _release(held.values())
        raise
    _release(held.values())
    return None


def _try_lock(path: Path) -> int | None:
    """A descriptor holding the exclusive flock on ``path``, or None when it is taken."""
    fd = _open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as err:
        os.close(fd)
        raise AccelpipeError(
            f"cannot lock {path}: {err}; point {LOCK_DIR_ENV} at a node-local directory "
            "(flock over NFS is unreliable)"
        ) from err
    return fd


def _open_lock_file(path: Path) -> int:
    # In a shared directory the file may belong to another user: reading is enough
    # to flock it (only the diagnostic stamp needs writing). O_CREAT on someone
    # else's file in a sticky directory fails under fs.protected_regular, hence the
    # retry without it. Lock files are never deleted: unlinking one that another
    # process has open would let two processes lock two different inodes.
    errors: list[OSError] = []
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDWR, os.O_RDONLY):
        try:
            return os.open(path, flags, 0o666)
        except OSError as err:
            errors.append(err)
    raise AccelpipeError(
        f"cannot open the accelerator lock file {path}: {errors[0]}; "
        f"point {LOCK_DIR_ENV} at a directory every job can write"
    ) from errors[0]


def _stamp(fds: Iterable[int]) -> None:
    """Write holder pid, host and time into the lock files, for whoever wonders who holds them."""
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    line = f"pid={os.getpid()} host={socket.gethostname()} since={since}\n".encode()
    for fd in fds:
        with contextlib.suppress(OSError):  # read-only descriptor: no stamp, the lock holds
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)


def _release(fds: Iterable[int]) -> None:
    for fd in list(fds):
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # the file now reads as free
        os.close(fd)  # closing the only descriptor drops the flock


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
