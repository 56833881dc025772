"""Tests for accelpipe.datasets.archives: safe extraction of tar and zip archives."""

from __future__ import annotations

import io
import os
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from accelpipe.datasets.archives import safe_extract
from accelpipe.errors import DataError


def _add(tf: tarfile.TarFile, name: str, data: bytes = b"x", **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data) if attrs.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for key, value in attrs.items():
        setattr(info, key, value)
    tf.addfile(info, io.BytesIO(data) if info.size else None)


def _tar(path: Path, members: list[tuple[str, dict[str, object]]], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:
        _add(tf, "top/ok.txt", b"hello")
        for name, attrs in members:
            _add(tf, name, **attrs)
    return path


def test_extract_tar_gz(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "a.tar.gz", [("top/sub/b.txt", {})], mode="w:gz")
    out = safe_extract(archive, tmp_path / "out")
    assert (out / "top" / "ok.txt").read_text() == "hello"
    assert (out / "top" / "sub" / "b.txt").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar.gz", "out"]  # no temp left


def test_extract_replaces_existing_dest(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "a.tar", [])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.txt").write_text("old")
    safe_extract(archive, tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == ["top"]


def test_extract_zip(tmp_path: Path) -> None:
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("top/ok.txt", "hello")
        zf.writestr("top/sub/", "")
    out = safe_extract(archive, tmp_path / "out")
    assert (out / "top" / "ok.txt").read_text() == "hello"
    assert (out / "top" / "sub").is_dir()


@pytest.mark.parametrize(
    ("name", "attrs"),
    [
        ("../evil", {}),
        ("top/../../evil", {}),
        ("/tmp/evil", {}),
        ("top/link", {"type": tarfile.SYMTYPE, "linkname": "../../etc"}),
        ("top/abs", {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}),
        ("top/hard", {"type": tarfile.LNKTYPE, "linkname": "../outside"}),
        ("top/dev", {"type": tarfile.CHRTYPE}),
    ],
)
def test_tar_member_escaping_is_refused(tmp_path: Path, name: str, attrs: dict) -> None:
    archive = _tar(tmp_path / "bad.tar", [(name, attrs)])
    with pytest.raises(DataError) as err:
        safe_extract(archive, tmp_path / "out")
    assert str(archive) in str(err.value) and repr(name) in str(err.value)
    assert not (tmp_path / "out").exists()
    assert sorted(os.listdir(tmp_path)) == ["bad.tar"]


def test_tar_path_through_symlink_is_refused(tmp_path: Path) -> None:
    # "top/up" -> ".." stays inside lexically, but "top/up/x" -> "../y" would then land
    # beside the destination; refusing paths through links closes that gap.
    archive = _tar(
        tmp_path / "bad.tar",
        [
            ("top/up", {"type": tarfile.SYMTYPE, "linkname": ".."}),
            ("top/up/x", {"type": tarfile.SYMTYPE, "linkname": "../y"}),
        ],
    )
    with pytest.raises(DataError, match=r"'top/up/x'.*through a link"):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_tar_symlink_inside_is_allowed(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "a.tar", [("top/alias", {"type": tarfile.SYMTYPE, "linkname": "ok.txt"})]
    )
    out = safe_extract(archive, tmp_path / "out")
    assert (out / "top" / "alias").read_text() == "hello"


@pytest.mark.parametrize("name", ["../evil", "/abs/evil", "top/../../evil"])
def test_zip_member_escaping_is_refused(tmp_path: Path, name: str) -> None:
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("top/ok.txt", "hello")
        zf.writestr(zipfile.ZipInfo(name), "evil")
    with pytest.raises(DataError) as err:
        safe_extract(archive, tmp_path / "out")
    assert str(archive) in str(err.value) and repr(name) in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["bad.zip"]


def test_zip_symlink_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("top/link")
        info.external_attr = (0o120777) << 16  # S_IFLNK
        zf.writestr(info, "../../etc/passwd")
    with pytest.raises(DataError, match="'top/link': symlink"):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["mid-data", "mid-header", "at-boundary"])
def test_truncated_tar_is_refused(tmp_path: Path, where: str) -> None:
    members = [(f"top/f{i}.bin", {"data": os.urandom(3000)}) for i in range(3)]
    full = _tar(tmp_path / "full.tar", members)
    with tarfile.open(full) as tf:
        last = tf.getmembers()[-1]
    # tarfile alone reads a tar cut in or before a header as a valid, shorter archive.
    cut = {
        "mid-data": last.offset_data + 100,
        "mid-header": last.offset + 100,
        "at-boundary": last.offset,
    }[where]
    archive = tmp_path / "cut.tar"
    archive.write_bytes(full.read_bytes()[:cut])
    with pytest.raises(DataError) as err:
        safe_extract(archive, tmp_path / "out")
    assert str(err.value).startswith(f"{archive}: truncated")
    assert not (tmp_path / "out").exists()


def test_truncated_tar_gz_and_zip_are_refused(tmp_path: Path) -> None:
    members = [(f"top/f{i}.bin", {"data": os.urandom(3000)}) for i in range(4)]
    gz = _tar(tmp_path / "full.tar.gz", members, mode="w:gz")
    zp = tmp_path / "full.zip"
    with zipfile.ZipFile(zp, "w") as zf:
        zf.writestr("top/a.bin", os.urandom(3000))
    for full in (gz, zp):
        archive = tmp_path / f"cut{''.join(full.suffixes)}"
        archive.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
        with pytest.raises(DataError, match=f"^{re.escape(str(archive))}: "):
            safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_archive(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.tar: archive not found"):
        safe_extract(tmp_path / "nope.tar", tmp_path / "out")


def test_tar_ending_with_a_zip_member_is_a_tar(tmp_path: Path) -> None:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("inner.txt", "zip inside")
    archive = _tar(tmp_path / "a.tar", [("top/z.zip", {"data": inner.getvalue()})])
    out = safe_extract(archive, tmp_path / "out")
    assert (out / "top" / "z.zip").read_bytes() == inner.getvalue()


def test_not_an_archive(tmp_path: Path) -> None:
    archive = tmp_path / "page.tar"
    archive.write_text("<html>Access denied</html>")
    with pytest.raises(DataError, match=r"page\.tar: not a readable tar or zip archive"):
        safe_extract(archive, tmp_path / "out")
