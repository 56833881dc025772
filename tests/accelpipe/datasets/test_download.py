"""Tests for accelpipe.datasets.download against a local faulty HTTP server."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelpipe.datasets.download import download, file_digest, md5sum, part_path
from accelpipe.errors import DataError
from tests.helpers.http_server import Faults, FileServer

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


def test_md5_and_sha1_together_are_refused(server: FileServer, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="md5 or sha1, not both"):
        _get(server, tmp_path / "data.bin", md5="0" * 32, sha1="0" * 40)
    assert server.log == []


def test_invalid_url_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^localhost/data\.bin: invalid URL"):
        download("localhost/data.bin", tmp_path / "x", backoff_s=60.0, progress=False)
