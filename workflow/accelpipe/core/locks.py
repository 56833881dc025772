"""Lock files that another user of the host cannot turn against the process that locks.

The accelerator leases (accelpipe.core.leases) and the image builds (accelpipe.core.containers) lock
with ``fcntl.flock`` on files of one lock directory, by default ``/tmp/accelpipe-leases-<uid>``.
/tmp is shared: another user could create that name first, or plant a symbolic link where a
lock file goes, so that the locking process writes through it into a file of its own. Hence:

- the directory is created mode 0700 in one ``mkdir`` call, and used only when it is a real
  directory (not a symbolic link) that is the user's own and writable by no one else, or a
  sticky one of root's (a lock directory an admin shares between all users of a node, like
  /tmp itself: there no user can remove or rename another's files);
- it is opened once and its lock files are opened relative to that descriptor, so renaming or
  replacing a parent afterwards changes nothing;
- lock files are opened with O_NOFOLLOW (a planted link is refused, never followed),
  O_NONBLOCK (a planted FIFO cannot hang the open) and O_CLOEXEC, never with O_TRUNC; they are
  written only when they are a regular file with a single name, and only while locked;
- a wait for a held lock is bounded; the error names the holder from the record it wrote
  (pid, host, job, since).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import random
import socket
import stat
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from accelpipe.core.errors import AccelpipeError

log = logging.getLogger(__name__)

LOCK_DIR_ENV = "ACCELPIPE_LOCK_DIR"
# Flags of every lock file open: never follow a link, never block on a FIFO, never leak into
# a child process (a child holding the descriptor would hold the lock past its parent).
_SAFE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_RECORD_BYTES = 300  # a holder record is one short line; read no more of a planted file


class UnsafeLockError(AccelpipeError):
    """The lock directory or a lock file could be used against the user: refused, untouched."""


class LockTimeoutError(AccelpipeError):
    """A lock stayed held by another process longer than the wait allowed."""


def open_dir(directory: Path) -> int:
    """A descriptor of `directory` (created 0700 when missing) once it is checked to be safe."""
    _create_private(directory)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            what = "a symbolic link" if os.path.islink(directory) else "not a directory"
            raise UnsafeLockError(
                f"the lock directory {directory} is {what}: another user may have planted it; "
                f"remove it, or point {LOCK_DIR_ENV} at a directory of your own"
            ) from None
        raise AccelpipeError(
            f"cannot open the lock directory {directory}: {err.strerror}; "
            f"point {LOCK_DIR_ENV} at a node-local directory of your own"
        ) from None
    try:
        _check_dir(directory, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _create_private(directory: Path) -> None:
    """mkdir with mode 0700 in one call: no moment where others could write into it."""
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass  # whoever made it, open_dir checks it
    except OSError as err:
        raise AccelpipeError(
            f"cannot create the lock directory {directory}: {err.strerror}; "
            f"point {LOCK_DIR_ENV} at a writable node-local directory"
        ) from None


def _check_dir(directory: Path, st: os.stat_result) -> None:
    me, sticky = os.geteuid(), bool(st.st_mode & stat.S_ISVTX)
    if st.st_uid != me and not (sticky and st.st_uid == 0):
        raise UnsafeLockError(
            f"the lock directory {directory} belongs to uid {st.st_uid}, not to you "
            f"(uid {me}): its owner could swap its lock files; remove it, or point "
            f"{LOCK_DIR_ENV} at a directory of your own"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
        raise UnsafeLockError(
            f"the lock directory {directory} is writable by others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}): any of them could plant its lock files; "
            f"`chmod go-w {directory}` (or, for one lock directory shared by every user of "
            "the node, a root-owned `chmod 1777` one)"
        )


def try_lock(dir_fd: int, path: Path) -> int | None:
    """A descriptor holding the exclusive flock on `path` (in the directory `dir_fd`), or
    None when another process holds it."""
    fd = _open_lock_file(dir_fd, path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as err:
        os.close(fd)
        raise AccelpipeError(
            f"cannot lock {path}: {err.strerror}; point {LOCK_DIR_ENV} at a node-local "
            "directory (flock over NFS is unreliable)"
        ) from None
    return fd


def _open_lock_file(dir_fd: int, path: Path) -> int:
    # In a shared directory the file may belong to another user: reading is enough to flock
    # it (only the holder record needs writing). O_CREAT on someone else's file in a sticky
    # directory fails under fs.protected_regular, hence the retry without it. Lock files are
    # never deleted: unlinking one that another process has open would let two processes
    # lock two different inodes.
    errors: list[OSError] = []
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDWR, os.O_RDONLY):
        try:
            fd = os.open(path.name, flags | _SAFE_FLAGS, 0o644, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise UnsafeLockError(
                    f"the lock file {path} is a symbolic link, which accelpipe never makes: "
                    "someone planted it (it was not followed); remove it"
                ) from None
            errors.append(err)
            continue
        try:
            _check_file(path, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return fd
    raise AccelpipeError(
        f"cannot open the lock file {path}: {errors[0].strerror}; "
        f"point {LOCK_DIR_ENV} at a directory every job can write"
    ) from None


def _check_file(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeLockError(
            f"the lock file {path} is not a regular file, which accelpipe never makes: "
            "someone planted it; remove it"
        )
    if st.st_nlink != 1:
        raise UnsafeLockError(
            f"the lock file {path} has {st.st_nlink} names (hard links), which accelpipe never "
            "makes: another name may be a file of yours; it was not written; remove it"
        )


def holder_record(job: str) -> bytes:
    """The line a holder writes into its lock files: who holds them, since when."""
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    job = "".join(c if c.isprintable() and not c.isspace() else "_" for c in job) or "-"
    return f"pid={os.getpid()} host={socket.gethostname()} job={job} since={since}\n".encode()


def stamp(fd: int, record: bytes) -> None:
    """Write `record` over a locked file's content: no O_TRUNC at open, the file cut to the
    record only now, while it is checked (_check_file) and locked."""
    with contextlib.suppress(OSError):  # read-only descriptor (another user's file): no record
        os.pwrite(fd, record, 0)
        os.ftruncate(fd, len(record))


def release(fd: int) -> None:
    """Empty a locked file (it then reads as free) and close it, which drops the flock."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)


def holder(dir_fd: int, path: Path) -> str:
    """Who holds `path`, from its holder record, as one printable line."""
    try:
        fd = os.open(path.name, os.O_RDONLY | _SAFE_FLAGS, dir_fd=dir_fd)
    except OSError as err:
        return f"unknown ({err.strerror})"
    try:
        st = os.fstat(fd)
        text = os.read(fd, _RECORD_BYTES).decode(errors="replace") if st.st_size else ""
    except OSError as err:
        return f"unknown ({err.strerror})"
    finally:
        os.close(fd)
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line or f"a process that left no record (the file belongs to uid {st.st_uid})"


def pause(poll_s: float, deadline: float | None) -> None:
    """Sleep about `poll_s`, never past `deadline`. Jitter keeps two waiting processes from
    retrying in lockstep and colliding forever."""
    delay = poll_s * random.uniform(0.5, 1.5)
    if deadline is not None:
        delay = min(delay, max(0.0, deadline - time.monotonic()))
    time.sleep(delay)


def deadline_after(wait_s: float | None) -> float | None:
    if wait_s is not None and not wait_s >= 0:  # NaN fails every comparison
        raise ValueError(f"wait_s must be a number >= 0 or None, got {wait_s}")
    return None if wait_s is None else time.monotonic() + wait_s


def passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


@contextlib.contextmanager
def held(
    directory: Path,
    name: str,
    *,
    wait_s: float | None,
    job: str,
    poll_s: float = 1.0,
    on_wait: Callable[[str], None] | None = None,
    setting: str = "accelerators.wait_s",
) -> Iterator[None]:
    """Hold the lock file `name` of `directory` for the `with` block, waiting at most `wait_s`
    seconds (None: as long as it takes) for another holder; `on_wait(holder)` before a pause.
    `setting` is the config key of `wait_s`, for the error."""
    deadline = deadline_after(wait_s)
    dir_fd = open_dir(directory)
    path = directory / name
    try:
        while (fd := try_lock(dir_fd, path)) is None:
            if passed(deadline):
                raise LockTimeoutError(
                    f"{path} stayed locked for {wait_s:g} s ({setting}) by "
                    f"{holder(dir_fd, path)}; wait for it to finish, stop it, or raise {setting}"
                )
            if on_wait is not None:
                on_wait(holder(dir_fd, path))
            pause(poll_s, deadline)
    finally:
        os.close(dir_fd)
    try:
        stamp(fd, holder_record(job))
        yield
    finally:
        release(fd)
