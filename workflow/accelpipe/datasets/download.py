"""Resumable, verified downloads, shared by every dataset.

`download` streams into `<dest>.part` and only renames it onto `dest` once it is
complete and its checksum (md5 or sha1, if given) matches, so an existing `dest` is always a
finished file. A run that dies keeps its `.part`; the next attempt (or the next pipeline run)
asks the server for the rest with an HTTP Range request.

Archives are unpacked by `accelpipe.datasets.archives`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import requests
import urllib3
from tqdm import tqdm

from accelpipe.errors import DataError
from accelpipe.io import disk_full_names

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


def _expected(md5: str | None, sha1: str | None) -> tuple[str, str] | None:
    """(algorithm, lower-case hex) of the one checksum given, or None."""
    if md5 is not None and sha1 is not None:
        raise ValueError("download: give md5 or sha1, not both")
    if md5 is not None:
        return "md5", md5.lower()
    return ("sha1", sha1.lower()) if sha1 is not None else None


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
    retries: int = 5,
    backoff_s: float = 1.0,
    timeout_s: float = 60.0,
    chunk_bytes: int = 1 << 20,
    progress: bool = True,
) -> Path:
    """Download `url` to `dest`, resuming a previous `.part` and verifying its checksum.

    At most one of `md5` and `sha1` is given (the one the publisher lists); both go through
    the same hashing path, and errors name the algorithm. An existing `dest` is a cache hit
    (no request) when it matches the checksum or none is given. An existing `dest` that does
    not match raises DataError and is left alone: it may be a file the user placed by hand,
    so deleting it is their call.

    Connection errors, timeouts, truncated bodies, 429 and 5xx are retried `retries`
    times with exponential backoff; other 4xx fail at once. When retries run out
    the `.part` is kept so a later call resumes. A checksum mismatch deletes the `.part`
    (its bytes are unusable) and raises DataError.
    """
    dest = Path(dest)
    expected = _expected(md5, sha1)
    if dest.exists():
        _check_existing(url, dest, expected)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = part_path(dest)
    log.info("downloading %s -> %s", url, dest)
    # A full disk keeps the .part (a rerun resumes it) and names it.
    with requests.Session() as session, disk_full_names(part):
        actual = _download_with_retries(
            session,
            url,
            part,
            algorithm=expected[0] if expected else None,
            retries=retries,
            backoff_s=backoff_s,
            timeout_s=timeout_s,
            chunk_bytes=chunk_bytes,
            progress=progress,
        )
    if expected is not None and actual != expected[1]:
        part.unlink(missing_ok=True)
        algorithm, want = expected
        raise DataError(
            f"{dest}: {algorithm} mismatch for download from {url}: expected {want}, got "
            f"{actual} (partial file removed; rerun to download again)"
        )
    os.replace(part, dest)
    log.info("downloaded %s (%d bytes)", dest, dest.stat().st_size)
    return dest


def _check_existing(url: str, dest: Path, expected: tuple[str, str] | None) -> None:
    if expected is None:
        return  # dest only ever appears complete (renamed from .part), so trust it
    algorithm, want = expected
    actual = file_digest(dest, algorithm)
    if actual != want:
        raise DataError(
            f"{dest}: existing file has {algorithm} {actual}, expected {want}; "
            f"delete it to download again from {url}"
        )


def _download_with_retries(
    session: requests.Session,
    url: str,
    part: Path,
    *,
    algorithm: str | None,
    retries: int,
    backoff_s: float,
    timeout_s: float,
    chunk_bytes: int,
    progress: bool,
) -> str | None:
    """Run attempts until one completes; return the `algorithm` hex digest of the finished
    .part (None without an algorithm)."""
    retries = max(retries, 0)
    for attempt in range(retries + 1):
        try:
            return _attempt(session, url, part, algorithm, timeout_s, chunk_bytes, progress)
        except _Retryable as err:
            if attempt == retries:
                kept = f"; {part} kept for resuming" if part.exists() else ""
                raise DataError(
                    f"{url}: download failed after {retries + 1} attempts ({err}){kept}"
                ) from None
            delay = min(backoff_s * 2**attempt, _MAX_BACKOFF_S)
            log.warning("%s: %s; retry %d/%d in %.0fs", url, err, attempt + 1, retries, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def _attempt(
    session: requests.Session,
    url: str,
    part: Path,
    algorithm: str | None,
    timeout_s: float,
    chunk_bytes: int,
    progress: bool,
) -> str | None:
    """One GET, resuming from the current .part size. Raises _Retryable on transient errors."""
    offset = part.stat().st_size if part.exists() else 0
    # identity: Range offsets and Content-Length must count the bytes we store.
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        resp = session.get(url, headers=headers, stream=True, timeout=timeout_s)
    except _BAD_URL_ERRORS as err:
        raise DataError(f"{url}: invalid URL ({err})") from None
    except _NETWORK_ERRORS as err:
        raise _Retryable(f"{type(err).__name__}: {err}") from err
    with resp:
        if resp.status_code == 416 and offset:
            return _finish_416(resp, part, offset, algorithm)
        _check_status(url, resp)
        offset, total = _resume_point(resp, part, offset)
        return _stream(resp, part, offset, total, algorithm, chunk_bytes, progress)


def _check_status(url: str, resp: requests.Response) -> None:
    code = resp.status_code
    if code in (200, 206):
        return
    if code == 429 or code >= 500:
        raise _Retryable(f"HTTP {code} {resp.reason}")
    raise DataError(f"{url}: HTTP {code} {resp.reason}")


def _finish_416(
    resp: requests.Response, part: Path, offset: int, algorithm: str | None
) -> str | None:
    """416 to a resume request: the .part is complete if the server's size matches it."""
    match = re.fullmatch(r"bytes \*/(\d+)", resp.headers.get("Content-Range", "").strip())
    if match and int(match.group(1)) == offset:
        return _hash_file(part, algorithm).hexdigest() if algorithm else None
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
    algorithm: str | None,
    chunk_bytes: int,
    progress: bool,
) -> str | None:
    """Append (206) or rewrite (200) the body into .part; check the final size."""
    digest = None
    if algorithm:  # seed with the bytes already on disk so the digest covers the whole file
        digest = _hash_file(part, algorithm) if offset else _new_hash(algorithm)
    bar = tqdm(
        total=total,
        initial=offset,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=part.name.removesuffix(".part"),
        file=sys.stderr,
        leave=False,
        disable=None if progress else True,  # None: tqdm hides itself when not a TTY
    )
    size = offset
    with bar, part.open("ab" if offset else "wb") as fh:
        try:
            # decode_content=False: store the bytes exactly as served.
            for chunk in resp.raw.stream(chunk_bytes, decode_content=False):
                fh.write(chunk)
                size += len(chunk)
                bar.update(len(chunk))
                if digest is not None:
                    digest.update(chunk)
        except _NETWORK_ERRORS as err:
            raise _Retryable(f"connection broken at byte {size}: {type(err).__name__}") from err
    if total is not None and size != total:
        if size > total:
            part.unlink()  # more bytes than announced: the .part is garbage
        raise _Retryable(f"got {size} of {total} bytes")
    return digest.hexdigest() if digest is not None else None
