"""Resumable, verified, watched downloads, shared by every dataset and the starting weights.

`download` streams into `<dest>.part` and only renames it onto `dest` once it is
complete and the checksum (md5, sha1 or sha256, if given) of the file on disk matches, so an
existing `dest` is always a finished file. A run that dies keeps its `.part`; the next attempt
(or the next pipeline run) asks the server for the rest with an HTTP Range request.

Two processes sharing a data_root (two checkouts, two users' jobs) never write one `.part`
together: `<dest>.lock` lets one download while the other waits, bounded and naming the
holder, and then finds `dest` made. A server that trickles (a byte now and then never trips
a read timeout) is abandoned once the rate stays below a floor for a window, and progress
is logged on an interval. The settings are the config's `downloads` block. URLs in messages
and logs are redacted (accelpipe.core.redact): a signed URL's credentials stay out of them.

Archives are unpacked by `accelpipe.datasets.archives`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import requests
import urllib3
from tqdm import tqdm

from accelpipe.config.schema import validate
from accelpipe.config.settings import view
from accelpipe.core import locks
from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.io import disk_full_names, write_json
from accelpipe.core.redact import redact

if TYPE_CHECKING:
    from _hashlib import HASH  # what hashlib.new returns; hashlib itself names it only privately

# Errors that mean "the transfer broke, try again": requests wraps most of urllib3's,
# but reading resp.raw directly surfaces urllib3's own and bare socket errors.
_NETWORK_ERRORS = (
    requests.RequestException,
    urllib3.exceptions.HTTPError,
    ConnectionError,
    TimeoutError,
)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_MAX_BACKOFF_S = 60.0
_LOCK_POLL_S = 1.0  # how often a waiting process tries the lock of a download again
# A malformed URL will not get better by retrying.
_BAD_URL_ERRORS = (
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidSchema,
    requests.exceptions.InvalidURL,
)


log = logging.getLogger(__name__)


class _Retryable(Exception):
    """A transient failure: the attempt may be repeated, resuming from the .part file."""


def md5sum(path: str | os.PathLike[str], chunk_bytes: int = 1 << 20) -> str:
    """Hex md5 of a file, read in chunks so large archives never sit in memory."""
    return file_digest(path, "md5", chunk_bytes)


def file_digest(path: str | os.PathLike[str], algorithm: str, chunk_bytes: int = 1 << 20) -> str:
    """Hex digest of a file with a hashlib `algorithm` ("md5", "sha1", ...), read in chunks."""
    return _hash_file(Path(path), algorithm, chunk_bytes).hexdigest()


def _new_hash(algorithm: str) -> HASH:
    # Checksums, not security: FIPS builds refuse md5 and sha1 without this flag.
    return hashlib.new(algorithm, usedforsecurity=False)


def _hash_file(path: Path, algorithm: str, chunk_bytes: int = 1 << 20) -> HASH:
    digest = _new_hash(algorithm)
    with path.open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
    return digest


def _expected(md5: str | None, sha1: str | None, sha256: str | None) -> tuple[str, str] | None:
    """(algorithm, lower-case hex) of the one checksum given, or None."""
    named = (("md5", md5), ("sha1", sha1), ("sha256", sha256))
    given = [(name, value.lower()) for name, value in named if value is not None]
    if len(given) > 1:
        raise ValueError("download: give one of md5, sha1 and sha256, not several")
    return given[0] if given else None


def part_path(dest: str | os.PathLike[str]) -> Path:
    """Where `download` keeps the unfinished bytes of `dest`."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".part")


def download(
    url: str,
    dest: str | os.PathLike[str],
    *,
    md5: str | None = None,
    sha1: str | None = None,
    sha256: str | None = None,
    retries: int = 5,
    backoff_s: float = 1.0,
    timeout_s: float = 60.0,
    chunk_bytes: int = 1 << 20,
    progress: bool = True,
    watch: DownloadWatch | None = None,
) -> Path:
    """Download `url` to `dest`, resuming a previous `.part` and verifying its checksum.

    At most one of `md5`, `sha1` and `sha256` is given (the one the publisher lists); all go
    through the same hashing path, and errors name the algorithm. An existing `dest` is a cache hit
    (no request) when it matches the checksum or none is given. An existing `dest` that does
    not match raises DataError and is left alone: it may be a file the user placed by hand,
    so deleting it is their call.

    One process at a time downloads `dest` (`<dest>.lock`); another one waits, at most
    `watch.lock_wait_s`, and then finds the file made. The checksum is taken of the file on
    disk once it is complete, not of the bytes as they arrived. Connection errors, timeouts,
    truncated bodies, 429 and 5xx are retried `retries` times with exponential backoff; other
    4xx fail at once, and so does a transfer slower than `watch.min_rate_bytes_s` over a
    `watch.stall_window_s` window. The `.part` is kept for resuming, except after a checksum
    mismatch (its bytes are unusable: it is deleted). `watch` defaults to the workflow's
    `downloads` settings (`configured_watch`). Messages and logs show the URL redacted.
    """
    dest = Path(dest)
    expected = _expected(md5, sha1, sha256)
    watch = watch or configured_watch()
    shown = redact(url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(dest, wait_s=watch.lock_wait_s, job=f"download:{dest.name}"):
        if dest.exists():  # made before, or by the process this one waited for
            _check_existing(shown, dest, expected)
            _record_verified(dest, expected)
            return dest
        part = part_path(dest)
        log.info("downloading %s -> %s", shown, dest)
        options = _Options(retries, backoff_s, timeout_s, chunk_bytes, progress, watch)
        # A full disk keeps the .part (a rerun resumes it) and names it.
        with requests.Session() as session, disk_full_names(part):
            _download_with_retries(session, url, part, options)
        _verify_on_disk(part, dest, expected, shown)
        os.replace(part, dest)
        _record_verified(dest, expected)
    log.info("downloaded %s (%d bytes)", dest, dest.stat().st_size)
    return dest


# Beside a download whose checksum matched: `<dest>.verified.json`, {algorithm, digest, bytes}.
VERIFIED_SUFFIX = ".verified.json"


def _record_verified(dest: Path, expected: tuple[str, str] | None) -> None:
    """Say, beside `dest`, that its checksum matched the publisher's (the raw stage keeps the
    record with what it extracted; `accelpipe drop-archives` drops only such an archive)."""
    if expected is None:
        return
    algorithm, digest = expected
    record = {"algorithm": algorithm, "digest": digest, "bytes": dest.stat().st_size}
    write_json(dest.with_name(dest.name + VERIFIED_SUFFIX), record)


def verified_downloads(downloads: Path) -> dict[str, dict[str, object]]:
    """The archives in `downloads` whose checksum matched when downloaded, still the size
    they were then: file name -> its record."""
    found = {}
    for record_file in sorted(downloads.glob(f"*{VERIFIED_SUFFIX}")):
        archive = record_file.with_name(record_file.name.removesuffix(VERIFIED_SUFFIX))
        record = json.loads(record_file.read_text())
        if archive.is_file() and archive.stat().st_size == record.get("bytes"):
            found[archive.name] = record
    return found


def _check_existing(shown: str, dest: Path, expected: tuple[str, str] | None) -> None:
    if expected is None:
        return  # dest only ever appears complete (renamed from .part), so trust it
    algorithm, want = expected
    actual = file_digest(dest, algorithm)
    if actual != want:
        raise DataError(
            f"{dest}: existing file has {algorithm} {actual}, expected {want}; "
            f"delete it to download again from {shown}"
        )


def _verify_on_disk(part: Path, dest: Path, expected: tuple[str, str] | None, shown: str) -> None:
    """Check the finished .part as it lies on disk (flushed), before it becomes `dest`."""
    if expected is None:
        return
    algorithm, want = expected
    actual = file_digest(part, algorithm)
    if actual != want:
        part.unlink(missing_ok=True)
        raise DataError(
            f"{dest}: {algorithm} mismatch for download from {shown}: expected {want}, got "
            f"{actual} (partial file removed; rerun to download again)"
        )


@dataclass(frozen=True)
class _Options:
    retries: int
    backoff_s: float
    timeout_s: float
    chunk_bytes: int
    progress: bool
    watch: DownloadWatch


def _download_with_retries(
    session: requests.Session, url: str, part: Path, options: _Options
) -> None:
    """Run attempts until one completes the .part."""
    retries = max(options.retries, 0)
    shown = redact(url)
    for attempt in range(retries + 1):
        try:
            return _attempt(session, url, part, options)
        except _Retryable as err:
            reason = redact(str(err))
            if attempt == retries:
                kept = f"; {part} kept for resuming" if part.exists() else ""
                raise DataError(
                    f"{shown}: download failed after {retries + 1} attempts ({reason}){kept}"
                ) from None
            delay = min(options.backoff_s * 2**attempt, _MAX_BACKOFF_S)
            log.warning("%s: %s; retry %d/%d in %.0fs", shown, reason, attempt + 1, retries, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def _attempt(session: requests.Session, url: str, part: Path, options: _Options) -> None:
    """One GET, resuming from the current .part size. Raises _Retryable on transient errors."""
    offset = part.stat().st_size if part.exists() else 0
    # identity: Range offsets and Content-Length must count the bytes we store.
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        resp = session.get(url, headers=headers, stream=True, timeout=options.timeout_s)
    except _BAD_URL_ERRORS as err:
        raise DataError(f"{redact(url)}: invalid URL ({redact(str(err))})") from None
    except _NETWORK_ERRORS as err:
        raise _Retryable(f"{type(err).__name__}: {err}") from err
    with resp:
        if resp.status_code == 416 and offset:
            return _finish_416(resp, part, offset)
        _check_status(url, resp)
        offset, total = _resume_point(resp, part, offset)
        _stream(resp, part, offset, total, redact(url), options)


def _check_status(url: str, resp: requests.Response) -> None:
    code = resp.status_code
    if code in (200, 206):
        return
    if code == 429 or code >= 500:
        raise _Retryable(f"HTTP {code} {resp.reason}")
    raise DataError(f"{redact(url)}: HTTP {code} {resp.reason}")


def _finish_416(resp: requests.Response, part: Path, offset: int) -> None:
    """416 to a resume request: the .part is complete if the server's size matches it."""
    match = re.fullmatch(r"bytes \*/(\d+)", resp.headers.get("Content-Range", "").strip())
    if match and int(match.group(1)) == offset:
        return
    # Bigger than the remote file, or size unknown: the .part cannot be trusted.
    part.unlink()
    raise _Retryable(f"HTTP 416 for a resume at byte {offset}; restarting from zero")


def _resume_point(resp: requests.Response, part: Path, offset: int) -> tuple[int, int | None]:
    """Return (offset the body starts at, total size or None) for a 200/206 response."""
    if resp.status_code == 200:
        length = resp.headers.get("Content-Length")
        return 0, int(length) if length and length.isdigit() else None
    match = _CONTENT_RANGE.fullmatch(resp.headers.get("Content-Range", "").strip())
    if not match or int(match.group(1)) != offset:
        part.unlink(missing_ok=True)
        raise _Retryable(f"unusable Content-Range {resp.headers.get('Content-Range')!r}")
    total = match.group(3)
    return offset, int(total) if total != "*" else None


def _stream(
    resp: requests.Response,
    part: Path,
    offset: int,
    total: int | None,
    shown: str,
    options: _Options,
) -> None:
    """Append (206) or rewrite (200) the body into .part, watching its pace; check the
    final size."""
    bar = tqdm(
        total=total,
        initial=offset,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=part.name.removesuffix(".part"),
        file=sys.stderr,
        leave=False,
        disable=None if options.progress else True,  # None: tqdm hides itself when not a TTY
    )
    pace = _Pace(shown, part, offset, total, options.watch)
    size = offset
    with bar, part.open("ab" if offset else "wb") as fh:
        try:
            for chunk in _chunks(resp, options.chunk_bytes):
                fh.write(chunk)
                size += len(chunk)
                bar.update(len(chunk))
                pace.update(size)
        except _NETWORK_ERRORS as err:
            raise _Retryable(f"connection broken at byte {size}: {type(err).__name__}") from err
        fh.flush()
        os.fsync(fh.fileno())  # the checksum is taken of what reached the disk
    if total is not None and size != total:
        if size > total:
            part.unlink()  # more bytes than announced: the .part is garbage
        raise _Retryable(f"got {size} of {total} bytes")


def _chunks(resp: requests.Response, chunk_bytes: int) -> Iterator[bytes]:
    """The body as it arrives: each read returns what one receive got (read1), so a server
    that trickles cannot keep the loop, and with it the pace check, waiting for a full chunk.
    decode_content=False: the bytes are stored exactly as served."""
    raw = resp.raw
    if hasattr(raw, "read1"):  # urllib3 >= 2
        while chunk := raw.read1(chunk_bytes, decode_content=False):
            yield chunk
    else:  # urllib3 1.x: http.client's response under it has read1
        while chunk := raw._fp.read1(chunk_bytes):
            yield chunk


class _Pace:
    """Progress lines every `watch.progress_every_s` seconds, and the abort of a transfer
    whose rate stays below `watch.min_rate_bytes_s` for a `watch.stall_window_s` window: a
    server that sends a byte now and then never trips a read timeout."""

    def __init__(
        self, shown: str, part: Path, offset: int, total: int | None, watch: DownloadWatch
    ) -> None:
        self.shown, self.part, self.total, self.watch = shown, part, total, watch
        now = time.monotonic()
        self.window = (now, offset)  # start of the current rate window: (time, bytes)
        self.logged = (now, offset)  # the last progress line

    def update(self, size: int) -> None:
        now = time.monotonic()
        if now - self.logged[0] >= self.watch.progress_every_s:
            self._log_progress(now, size)
        started, at_start = self.window
        elapsed = now - started
        if elapsed < self.watch.stall_window_s:
            return
        rate = (size - at_start) / elapsed
        if rate < self.watch.min_rate_bytes_s:
            raise DataError(
                f"{self.shown}: download stalled: {rate:.1f} bytes/s over the last "
                f"{elapsed:.0f} s, below downloads.min_rate_bytes_s "
                f"({self.watch.min_rate_bytes_s:g} over downloads.stall_window_s "
                f"{self.watch.stall_window_s:g} s); {self.part} kept ({size} bytes): rerun to "
                "resume"
            )
        self.window = (now, size)

    def _log_progress(self, now: float, size: int) -> None:
        since, at = self.logged
        rate = (size - at) / max(now - since, 1e-9)
        of = f" of {_bytes(self.total)} ({100 * size / self.total:.0f}%)" if self.total else ""
        log.info(
            "%s: %s%s at %s/s", self.part.name.removesuffix(".part"), _bytes(size), of, _bytes(rate)
        )
        self.logged = (now, size)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- settings, lock


@dataclass(frozen=True)
class DownloadWatch:
    """The config's `downloads` block (schema: the defaults and what each key means)."""

    min_rate_bytes_s: float
    stall_window_s: float
    progress_every_s: float
    lock_wait_s: float | None


# The workflow's `downloads` block as JSON (rules/common.smk). Not a rule param: how a download
# is watched cannot change what it makes, so changing it re-runs nothing.
DOWNLOADS_ENV = "ACCELPIPE_DOWNLOADS"


def configured_watch() -> DownloadWatch:
    """The `downloads` settings from $ACCELPIPE_DOWNLOADS, else (a stage run by hand) the
    schema's defaults; a bad value is one ConfigError naming the variable and the key."""
    return _watch(os.environ.get(DOWNLOADS_ENV, "").strip())


@cache
def _watch(text: str) -> DownloadWatch:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError as err:
        raise ConfigError(f"${DOWNLOADS_ENV} is not JSON ({err.msg})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"${DOWNLOADS_ENV} must be a JSON object")
    try:
        checked = validate({"downloads": value})["downloads"]
    except ConfigError as err:
        raise ConfigError(f"${DOWNLOADS_ENV}: {err}") from None
    return view(DownloadWatch, checked, where="downloads")


@contextlib.contextmanager
def exclusive(target: Path, *, wait_s: float | None, job: str) -> Iterator[None]:
    """Hold `<target>.lock` for the `with` block: fcntl.flock on a file made 0600, opened
    without following links and never truncated at open (accelpipe.core.locks). Another holder is
    waited for, at most `wait_s` seconds (None: no limit), with a log line naming it.

    The file lives only while held, so a downloads folder does not fill with one per file:
    the holder removes it before letting go, and a process that opened it meanwhile finds,
    once it holds it, that the name no longer leads to it and starts over."""
    lock = target.with_name(target.name + ".lock")
    dir_fd = os.open(lock.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _acquire(dir_fd, lock, target, wait_s)
        try:
            locks.stamp(fd, locks.holder_record(job))
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock.name, dir_fd=dir_fd)
            locks.release(fd)
    finally:
        os.close(dir_fd)


def _acquire(dir_fd: int, lock: Path, target: Path, wait_s: float | None) -> int:
    deadline = locks.deadline_after(wait_s)
    told = None
    while True:
        _create_private(dir_fd, lock.name)
        fd = locks.try_lock(dir_fd, lock)
        if fd is not None:
            if _is_current(dir_fd, lock.name, fd):
                return fd
            os.close(fd)  # its holder removed it while this process waited: lock the new one
            continue
        holder = locks.holder(dir_fd, lock)
        if locks.passed(deadline):
            raise DataError(
                f"{target}: still being made by another process ({holder}) after {wait_s:g} s; "
                "wait for it to finish, stop it, or raise downloads.lock_wait_s"
            )
        if holder != told:
            log.info("%s: waiting for %s, which is making it", target, holder)
            told = holder
        locks.pause(_LOCK_POLL_S, deadline)


def _create_private(dir_fd: int, name: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileExistsError):  # an existing one is checked by try_lock
        os.close(os.open(name, flags, 0o600, dir_fd=dir_fd))


def _is_current(dir_fd: int, name: str, fd: int) -> bool:
    """True if the lock's name still leads to the file `fd` holds."""
    try:
        named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
