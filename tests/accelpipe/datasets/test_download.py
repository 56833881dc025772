"""Tests for accelpipe.datasets.download against a local faulty HTTP server."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from accelpipe.core.errors import AccelpipeError, DataError
from accelpipe.datasets.download import (
    DOWNLOADS_ENV,
    DownloadWatch,
    download,
    exclusive,
    file_digest,
    md5sum,
    part_path,
)
from tests.helpers.http_server import Faults, FileServer, Handler
from tests.helpers.overlap import await_state, gated_route, start_python

SIZE = 300_000
CUT = 100_000


@pytest.fixture
def payload() -> bytes:
    # Deterministic, incompressible-looking bytes: any misplaced byte changes the md5.
    return b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(SIZE // 32))


@pytest.fixture
def server(tmp_path: Path, payload: bytes) -> Iterator[FileServer]:
    www = tmp_path / "www"
    www.mkdir()
    (www / "data.bin").write_bytes(payload)
    with FileServer(www) as srv:
        yield srv


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def _get(server: FileServer, dest: Path, **kwargs: object) -> Path:
    kwargs = {"backoff_s": 0.0, "chunk_bytes": 16 * 1024, "progress": False, **kwargs}
    return download(server.url("data.bin"), dest, **kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- download


def test_plain_download_with_md5(server: FileServer, payload: bytes, tmp_path: Path) -> None:
    dest = tmp_path / "out" / "data.bin"
    assert _get(server, dest, md5=_md5(payload), progress=True) == dest
    assert dest.read_bytes() == payload
    assert not part_path(dest).exists()
    assert [r.status for r in server.log] == [200]


def test_resume_after_cut_connection(server: FileServer, payload: bytes, tmp_path: Path) -> None:
    server.faults = Faults(cut_after_bytes=CUT, cut_first=1)
    dest = tmp_path / "data.bin"
    _get(server, dest, md5=_md5(payload))
    assert md5sum(dest) == _md5(payload)
    first, second = server.log
    assert (first.range, first.body_bytes) == (None, CUT)
    assert (second.range, second.status) == (f"bytes={CUT}-", 206)
    assert server.bytes_sent < 2 * SIZE


def test_later_call_resumes_kept_part(server: FileServer, payload: bytes, tmp_path: Path) -> None:
    """Retries exhausted (a killed job): the .part stays and the next call resumes it."""
    server.faults = Faults(cut_after_bytes=CUT, cut_first=2)
    dest = tmp_path / "data.bin"
    with pytest.raises(DataError, match=r"data\.bin: download failed after 2 attempts") as err:
        _get(server, dest, md5=_md5(payload), retries=1)
    assert server.url("data.bin") in str(err.value)
    assert not dest.exists()
    assert part_path(dest).stat().st_size == 2 * CUT  # second attempt resumed the first

    server.faults = Faults()
    _get(server, dest, md5=_md5(payload))
    assert dest.read_bytes() == payload
    assert server.log[-1].range == f"bytes={2 * CUT}-"


def test_server_ignoring_range_restarts_from_zero(
    server: FileServer, payload: bytes, tmp_path: Path
) -> None:
    server.faults = Faults(ignore_range=True)
    dest = tmp_path / "data.bin"
    part_path(dest).write_bytes(b"garbage that must not be kept")
    _get(server, dest)  # no md5: the content check below is the only guard
    assert dest.read_bytes() == payload
    assert server.log[0].range == "bytes=29-"
    assert server.log[0].status == 200


def test_cut_then_range_ignored(server: FileServer, payload: bytes, tmp_path: Path) -> None:
    server.faults = Faults(cut_after_bytes=CUT, cut_first=1, ignore_range=True)
    dest = tmp_path / "data.bin"
    _get(server, dest, md5=_md5(payload))
    assert dest.read_bytes() == payload
    assert [(r.range, r.status) for r in server.log] == [(None, 200), (f"bytes={CUT}-", 200)]


def test_server_errors_then_success(server: FileServer, payload: bytes, tmp_path: Path) -> None:
    server.faults = Faults(error_status=503, error_first=2)
    dest = tmp_path / "data.bin"
    _get(server, dest, md5=_md5(payload))
    assert dest.read_bytes() == payload
    assert [r.status for r in server.log] == [503, 503, 200]


def test_server_errors_exhaust_retries(server: FileServer, tmp_path: Path) -> None:
    server.faults = Faults(error_status=500, error_first=10)
    dest = tmp_path / "data.bin"
    with pytest.raises(DataError, match=r"failed after 3 attempts.*HTTP 500"):
        _get(server, dest, retries=2)
    assert len(server.log) == 3
    assert not dest.exists()


def test_404_fails_at_once_naming_url(server: FileServer, tmp_path: Path) -> None:
    url = server.url("missing.tar")
    with pytest.raises(DataError) as err:
        download(url, tmp_path / "missing.tar", backoff_s=0.0, progress=False)
    assert str(err.value).startswith(f"{url}: HTTP 404")
    assert len(server.log) == 1
    assert not (tmp_path / "missing.tar").exists()


def test_wrong_md5_removes_part(server: FileServer, payload: bytes, tmp_path: Path) -> None:
    dest = tmp_path / "data.bin"
    wrong = "0" * 32
    with pytest.raises(DataError) as err:
        _get(server, dest, md5=wrong)
    message = str(err.value)
    assert str(dest) in message and wrong in message and _md5(payload) in message
    assert not dest.exists()
    assert not part_path(dest).exists()


def test_416_on_complete_part_is_verified(
    server: FileServer, payload: bytes, tmp_path: Path
) -> None:
    dest = tmp_path / "data.bin"
    part_path(dest).write_bytes(payload)  # killed after the last byte, before the rename
    _get(server, dest, md5=_md5(payload))
    assert dest.read_bytes() == payload
    assert [(r.range, r.status) for r in server.log] == [(f"bytes={SIZE}-", 416)]


def test_cache_hit_makes_no_request(server: FileServer, payload: bytes, tmp_path: Path) -> None:
    dest = tmp_path / "data.bin"
    dest.write_bytes(payload)
    assert _get(server, dest, md5=_md5(payload)) == dest
    assert server.log == []


def test_existing_dest_with_wrong_md5_is_kept(server: FileServer, tmp_path: Path) -> None:
    dest = tmp_path / "data.bin"
    dest.write_bytes(b"user's own file")
    with pytest.raises(DataError, match=r"data\.bin: existing file has md5"):
        _get(server, dest, md5="0" * 32)
    assert dest.read_bytes() == b"user's own file"
    assert server.log == []


def test_sha1_after_a_resume_covers_the_whole_file(
    server: FileServer, payload: bytes, tmp_path: Path
) -> None:
    server.faults = Faults(cut_after_bytes=CUT, cut_first=1)
    dest = tmp_path / "data.bin"
    _get(server, dest, sha1=_sha1(payload).upper())  # hex case does not matter
    assert file_digest(dest, "sha1") == _sha1(payload)
    assert [(r.range, r.status) for r in server.log] == [(None, 200), (f"bytes={CUT}-", 206)]


def test_wrong_sha1_names_sha1_and_removes_part(
    server: FileServer, payload: bytes, tmp_path: Path
) -> None:
    dest = tmp_path / "data.bin"
    wrong = "0" * 40
    with pytest.raises(DataError) as err:
        _get(server, dest, sha1=wrong)
    assert str(err.value) == (
        f"{dest}: sha1 mismatch for download from {server.url('data.bin')}: expected {wrong}, "
        f"got {_sha1(payload)} (partial file removed; rerun to download again)"
    )
    assert not dest.exists()
    assert not part_path(dest).exists()


def test_sha256_is_checked_on_disk_and_a_mismatch_names_it(
    server: FileServer, payload: bytes, tmp_path: Path
) -> None:
    """Starting weights publish sha256 where they publish anything (accelpipe.weights)."""
    digest = hashlib.sha256(payload).hexdigest()
    good = _get(server, tmp_path / "good.bin", sha256=digest.upper())  # hex case does not matter
    assert file_digest(good, "sha256") == digest
    wrong = "0" * 64
    with pytest.raises(DataError, match=f"sha256 mismatch .* expected {wrong}, got {digest}"):
        _get(server, tmp_path / "bad.bin", sha256=wrong)
    assert not part_path(tmp_path / "bad.bin").exists()
    with pytest.raises(ValueError, match="not several"):
        _get(server, tmp_path / "both.bin", md5=_md5(payload), sha256=digest)


def test_sha1_cache_hit_makes_no_request(
    server: FileServer, payload: bytes, tmp_path: Path
) -> None:
    dest = tmp_path / "data.bin"
    dest.write_bytes(payload)
    assert _get(server, dest, sha1=_sha1(payload)) == dest
    assert server.log == []
    with pytest.raises(DataError, match=rf"data\.bin: existing file has sha1 {_sha1(payload)}, "):
        _get(server, dest, sha1="1" * 40)
    assert dest.read_bytes() == payload and server.log == []


def test_two_checksums_together_are_refused(server: FileServer, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one of md5, sha1 and sha256, not several"):
        _get(server, tmp_path / "data.bin", md5="0" * 32, sha1="0" * 40)
    assert server.log == []


def test_invalid_url_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^localhost/data\.bin: invalid URL"):
        download("localhost/data.bin", tmp_path / "x", backoff_s=60.0, progress=False)


# ------------------------------------------------------------- credentials (issue 30, item 4)

SECRET_QUERY = "X-Amz-Credential=AKIASECRETID&X-Amz-Signature=5ecre75ig&token=T0KEN"


def _signed(server: FileServer, path: str) -> str:
    """The server's URL for `path` with a user:password and a signed query string (the
    server ignores both)."""
    return server.url(path).replace("http://", "http://alice:pa55word@") + "?" + SECRET_QUERY


def _secrets_in(text: str) -> list[str]:
    return [s for s in ("pa55word", "AKIASECRETID", "5ecre75ig", "T0KEN") if s in text]


def test_credentials_stay_out_of_messages_and_logs(
    server: FileServer, payload: bytes, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="accelpipe")
    download(_signed(server, "data.bin"), tmp_path / "ok.bin", md5=_md5(payload))  # logs it
    server.faults = Faults(error_status=503, error_first=3)  # the next two requests
    with pytest.raises(DataError) as failed:  # retried, then failed: a warning and an error
        download(_signed(server, "data.bin"), tmp_path / "x.bin", retries=1, backoff_s=0.0)
    with pytest.raises(DataError) as missing:
        download(_signed(server, "missing.bin"), tmp_path / "y.bin", backoff_s=0.0)
    with pytest.raises(DataError) as wrong:
        download(_signed(server, "data.bin"), tmp_path / "z.bin", md5="0" * 32, backoff_s=0.0)
    messages = [str(e.value) for e in (failed, missing, wrong)]
    assert "http://***@127.0.0.1" in caplog.text and "X-Amz-Signature=***" in caplog.text
    assert all("X-Amz-Signature=***" in m for m in messages), messages
    assert _secrets_in(caplog.text + "\n".join(messages)) == []


def test_an_unreachable_host_is_named_without_its_credentials(tmp_path: Path) -> None:
    with FileServer(tmp_path) as server:  # a port that then has no server
        url = _signed(server, "data.bin")
    with pytest.raises(DataError, match="download failed after 1 attempts") as err:
        download(url, tmp_path / "x.bin", retries=0, progress=False)
    assert "ConnectionError" in str(err.value)
    assert _secrets_in(str(err.value)) == []


# ------------------------------------------------- a trickling server (issue 30, item 7)


def _trickle_route(stop: threading.Event, length: int) -> Callable[[Handler], None]:
    """Announce `length` bytes and send one now and then (20 ms apart) until `stop` or the
    client hangs up: never silent long enough for a read timeout."""

    def route(handler: Handler) -> None:
        handler.record.status = 200
        handler.send_response(200)
        handler.send_header("Content-Length", str(length))
        handler.end_headers()
        for _ in range(length):
            if stop.wait(0.02):
                return
            try:
                handler.wfile.write(b"x")
                handler.wfile.flush()
            except OSError:
                return  # the client gave up

    return route


def test_a_trickling_server_fails_naming_the_url_and_keeps_the_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the config's downloads block, as the workflow hands it to the raw jobs
    settings = {"min_rate_bytes_s": 1_000_000, "stall_window_s": 0.3, "progress_every_s": 30}
    monkeypatch.setenv(DOWNLOADS_ENV, json.dumps(settings))
    stop = threading.Event()
    dest = tmp_path / "slow.bin"
    with FileServer(tmp_path) as server:
        server.routes["/slow.bin"] = _trickle_route(stop, length=200)
        url = server.url("slow.bin") + "?sig=5ecre75ig"
        try:
            with pytest.raises(DataError) as err:
                download(url, dest, retries=3, backoff_s=0.0, progress=False)
        finally:
            stop.set()
    message = str(err.value)
    assert message.startswith(f"{server.url('slow.bin')}?sig=***: download stalled: ")
    assert "downloads.min_rate_bytes_s" in message and "5ecre75ig" not in message
    assert f"{part_path(dest)} kept" in message
    assert part_path(dest).stat().st_size > 0 and not dest.exists()
    assert len(server.log) == 1  # a stall is not retried


def test_progress_lines_name_bytes_percent_and_rate(
    server: FileServer, payload: bytes, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="accelpipe")
    watch = DownloadWatch(
        min_rate_bytes_s=0, stall_window_s=60, progress_every_s=1e-9, lock_wait_s=0
    )
    _get(server, tmp_path / "data.bin", md5=_md5(payload), watch=watch)
    lines = re.findall(r"data\.bin: .* of 293\.0 KiB \(\d+%\) at .*/s", caplog.text)
    assert lines, caplog.text


# ------------------------------------------ two processes, one download (issue 30, item 6)

# A process that downloads as a raw job would, logging to stderr.
DOWNLOADER = """
import logging, sys
from accelpipe.datasets.download import download
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
download(sys.argv[1], sys.argv[2], md5=sys.argv[3], progress=False)
"""


def test_two_processes_one_download_the_second_waits_and_reuses(
    tmp_path: Path, payload: bytes
) -> None:
    gate = threading.Event()
    dest = tmp_path / "shared" / "data.bin"
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    with FileServer(tmp_path) as server:
        server.routes["/data.bin"] = gated_route(payload, gate)
        args = (server.url("data.bin"), str(dest), _md5(payload))
        try:
            first = start_python(["-c", DOWNLOADER, *args], log=logs[0])
            await_state(lambda: len(server.log) == 1, first)  # the first is mid-transfer
            second = start_python(["-c", DOWNLOADER, *args], log=logs[1])
            # The second waits on the first (without the lock it would send a request too).
            await_state(lambda: "waiting for" in logs[1].read_text() or len(server.log) > 1, second)
            assert len(server.log) == 1, "the second process downloaded at the same time"
        finally:
            gate.set()
        assert first.wait() == 0, logs[0].read_text()
        assert second.wait() == 0, logs[1].read_text()
    assert len(server.log) == 1  # one download: the second reused the first's file
    assert md5sum(dest) == _md5(payload)
    assert f"pid={first.pid}" in logs[1].read_text()  # the wait names its holder
    assert not part_path(dest).exists()


def test_the_checksum_is_of_the_file_on_disk(tmp_path: Path, payload: bytes) -> None:
    """Another writer spoils the .part while the bytes stream in: the bytes streamed match
    the md5, the file does not, and the download must say so."""
    dest = tmp_path / "data.bin"
    half = len(payload) // 2

    def spoiling_route(handler: Handler) -> None:
        handler.record.status = 200
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload[:half])
        handler.wfile.flush()
        part = part_path(dest)
        while not part.exists() or part.stat().st_size < 1000:  # the bytes spoiled below
            time.sleep(0.01)
        with part.open("r+b") as fh:  # a second writer, as two jobs in one folder were
            fh.write(b"\0" * 1000)
        handler.wfile.write(payload[half:])

    with FileServer(tmp_path) as server:
        server.routes["/data.bin"] = spoiling_route
        with pytest.raises(DataError, match=r"data\.bin: md5 mismatch for download from"):
            _get(server, dest, md5=_md5(payload))
    assert not dest.exists() and not part_path(dest).exists()


def test_a_planted_link_as_the_lock_file_is_refused(
    server: FileServer, payload: bytes, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    dest = tmp_path / "data.bin"
    dest.with_name("data.bin.lock").symlink_to(victim)
    with pytest.raises(AccelpipeError, match=r"data\.bin\.lock is a symbolic link"):
        _get(server, dest, md5=_md5(payload))
    assert victim.read_text() == "precious" and server.log == []


def test_the_lock_file_is_private_and_lives_only_while_held(tmp_path: Path) -> None:
    dest = tmp_path / "data.bin"
    lock = tmp_path / "data.bin.lock"
    with exclusive(dest, wait_s=0, job="test"):
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
        assert f"pid={os.getpid()} " in lock.read_text()
    assert not lock.exists()  # no lock file left per downloaded file


def test_a_held_lock_fails_after_the_wait_naming_its_holder(tmp_path: Path) -> None:
    dest = tmp_path / "data.bin"
    holder = start_python(["-c", HOLDER, str(dest)], log=tmp_path / "holder.log")
    try:
        await_state(lambda: "held" in (tmp_path / "holder.log").read_text(), holder)
        with pytest.raises(DataError) as err, exclusive(dest, wait_s=0, job="test"):
            pass
    finally:
        holder.kill()
        holder.wait()
    assert str(err.value).startswith(f"{dest}: still being made by another process (pid=")
    assert f"pid={holder.pid} " in str(err.value) and "downloads.lock_wait_s" in str(err.value)


# A process that holds the lock of a download until it is killed.
HOLDER = """
import sys, time
from pathlib import Path
from accelpipe.datasets.download import exclusive
with exclusive(Path(sys.argv[1]), wait_s=0, job="holder"):
    print("held", file=sys.stderr, flush=True)
    time.sleep(3600)
"""
