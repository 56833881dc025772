"""Tests for accelpipe.datasets.archives: safe extraction of tar and zip archives."""

from __future__ import annotations

import io
import os
import re
import tarfile
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets.archives import safe_extract
from tests.helpers.archives import schema_limits

LIMITS = schema_limits()


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
    out = safe_extract(archive, tmp_path / "out", limits=LIMITS)
    assert (out / "top" / "ok.txt").read_text() == "hello"
    assert (out / "top" / "sub" / "b.txt").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar.gz", "out"]  # no temp left


def test_extract_replaces_existing_dest(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "a.tar", [])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.txt").write_text("old")
    safe_extract(archive, tmp_path / "out", limits=LIMITS)
    assert sorted(os.listdir(tmp_path / "out")) == ["top"]


def test_extract_zip(tmp_path: Path) -> None:
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("top/ok.txt", "hello")
        zf.writestr("top/sub/", "")
    out = safe_extract(archive, tmp_path / "out", limits=LIMITS)
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
        safe_extract(archive, tmp_path / "out", limits=LIMITS)
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
        safe_extract(archive, tmp_path / "out", limits=LIMITS)
    assert not (tmp_path / "out").exists()


def test_tar_symlink_inside_is_allowed(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "a.tar", [("top/alias", {"type": tarfile.SYMTYPE, "linkname": "ok.txt"})]
    )
    out = safe_extract(archive, tmp_path / "out", limits=LIMITS)
    assert (out / "top" / "alias").read_text() == "hello"


@pytest.mark.parametrize("name", ["../evil", "/abs/evil", "top/../../evil"])
def test_zip_member_escaping_is_refused(tmp_path: Path, name: str) -> None:
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("top/ok.txt", "hello")
        zf.writestr(zipfile.ZipInfo(name), "evil")
    with pytest.raises(DataError) as err:
        safe_extract(archive, tmp_path / "out", limits=LIMITS)
    assert str(archive) in str(err.value) and repr(name) in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["bad.zip"]


def test_zip_symlink_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("top/link")
        info.external_attr = (0o120777) << 16  # S_IFLNK
        zf.writestr(info, "../../etc/passwd")
    with pytest.raises(DataError, match="'top/link': symlink"):
        safe_extract(archive, tmp_path / "out", limits=LIMITS)
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
        safe_extract(archive, tmp_path / "out", limits=LIMITS)
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
            safe_extract(archive, tmp_path / "out", limits=LIMITS)
    assert not (tmp_path / "out").exists()


def test_missing_archive(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.tar: archive not found"):
        safe_extract(tmp_path / "nope.tar", tmp_path / "out", limits=LIMITS)


def test_tar_ending_with_a_zip_member_is_a_tar(tmp_path: Path) -> None:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("inner.txt", "zip inside")
    archive = _tar(tmp_path / "a.tar", [("top/z.zip", {"data": inner.getvalue()})])
    out = safe_extract(archive, tmp_path / "out", limits=LIMITS)
    assert (out / "top" / "z.zip").read_bytes() == inner.getvalue()


def test_not_an_archive(tmp_path: Path) -> None:
    archive = tmp_path / "page.tar"
    archive.write_text("<html>Access denied</html>")
    with pytest.raises(DataError, match=r"page\.tar: not a readable tar or zip archive"):
        safe_extract(archive, tmp_path / "out", limits=LIMITS)


# ------------------------------------------------------------------- bombs and limits
MIB = 1 << 20


def _zeros_zip(path: Path, name: str, size: int, *, mode: int = 0o100644) -> Path:
    """A zip whose one member `name` inflates to `size` zero bytes (about size / 1000 on disk),
    written in chunks so the test itself never holds it."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = mode << 16
    with zipfile.ZipFile(path, "w") as zf, zf.open(info, "w") as fh:
        for _ in range(size // MIB):
            fh.write(bytes(MIB))
    return path


def _peak_bytes(fn: Callable[[], object]) -> int:
    """The most memory Python allocated while `fn` ran."""
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def _refusal(archive: Path, out: Path, limits: object) -> tuple[str, int]:
    """(the DataError's text, peak memory) of extracting `archive`, which must fail."""
    caught: list[DataError] = []

    def extract() -> None:
        with pytest.raises(DataError) as err:
            safe_extract(archive, out, limits=limits)  # type: ignore[arg-type]
        caught.append(err.value)

    peak = _peak_bytes(extract)
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.*"))  # nothing left
    return str(caught[0]), peak


def test_zip_symlink_bomb_reads_no_more_than_a_path(tmp_path: Path) -> None:
    """The probe's bomb: a "symlink" member inflating to far more than any path. The old code
    read it whole into the message (here 64 MiB; 1 GiB took 16.8 GB of memory)."""
    archive = _zeros_zip(tmp_path / "bomb.zip", "top/link", 64 * MIB, mode=0o120777)
    assert archive.stat().st_size < 200_000
    # A ratio limit out of the way, so the link check itself is what refuses it.
    message, peak = _refusal(archive, tmp_path / "out", schema_limits(max_ratio=1e6))
    assert "'top/link': symlink whose target is longer than 4096 bytes" in message
    assert "\n" not in message and len(message) < 300
    assert peak < 4 * MIB


def test_zip_symlink_target_is_read_at_most_path_max(tmp_path: Path) -> None:
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo("top/link")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "x" * 4000)  # a legal length: quoted, cut to a readable length
    message, _ = _refusal(archive, tmp_path / "out", LIMITS)
    assert "symlink to 'xxx" in message and "…" in message and len(message) < 400


@pytest.mark.parametrize(
    ("limit", "key"),
    [
        ({"max_member_gib": 1 / 1024, "max_ratio": 1e6}, "max_member_gib"),  # 1 MiB
        ({"max_total_gib": 4 / 1024, "max_ratio": 1e6}, "max_total_gib"),  # 4 MiB
        ({"max_ratio": 100}, "max_ratio"),
    ],
)
def test_zip_bomb_is_refused_from_its_header(tmp_path: Path, limit: dict, key: str) -> None:
    archive = _zeros_zip(tmp_path / "bomb.zip", "top/zeros.bin", 8 * MIB)
    message, peak = _refusal(archive, tmp_path / "out", schema_limits(**limit))
    assert message.startswith(f"{archive}: refusing ")
    assert f"datasets.test.archive.{key}" in message and "\n" not in message
    assert peak < 2 * MIB  # refused before a byte was inflated


def test_default_ratio_refuses_a_deflate_bomb(tmp_path: Path) -> None:
    """Zeros are deflate's best case (about 1030:1): over the default max_ratio 1000."""
    archive = _zeros_zip(tmp_path / "bomb.zip", "top/zeros.bin", 16 * MIB)
    message, _ = _refusal(archive, tmp_path / "out", LIMITS)
    assert "1000 times its size (datasets.test.archive.max_ratio)" in message


def test_tar_gz_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        info = tarfile.TarInfo("top/zeros.bin")
        info.size = 64 * MIB
        tf.addfile(info, io.BytesIO(bytes(info.size)))
    message, peak = _refusal(archive, tmp_path / "out", LIMITS)
    assert "times its size (datasets.test.archive.max_ratio)" in message
    assert peak < 4 * MIB


def test_ordinary_archives_pass_the_default_limits(tmp_path: Path) -> None:
    """Real datasets compress images and volumes that barely shrink: far under the limits."""
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("top/noise.bin", os.urandom(MIB))
        zf.writestr("top/text.json", '{"k": 1}\n' * 5000)  # text squeezes well, still fine
    assert (safe_extract(archive, tmp_path / "out", limits=LIMITS) / "top" / "noise.bin").is_file()


def test_huge_member_names_are_cut_in_messages(tmp_path: Path) -> None:
    name = "../" + "n" * 60_000
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(zipfile.ZipInfo(name), "evil")
    message, _ = _refusal(archive, tmp_path / "out", LIMITS)
    assert "path escapes the destination" in message
    assert "nnn…'" in message and len(message) < 400


def test_tar_link_target_longer_than_path_max_is_refused(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "bad.tar", [("top/l", {"type": tarfile.SYMTYPE, "linkname": "a/" * 3000})]
    )
    message, _ = _refusal(archive, tmp_path / "out", LIMITS)
    assert "'top/l': link target longer than 4096 characters" in message


# ------------------------------------------------------------- a file that is a folder too


def _zip_of(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name in names:
            zf.writestr(name, "" if name.endswith("/") else "x")
    return path


@pytest.mark.parametrize(
    ("kind", "members", "clash"),
    [
        ("tar", [("top/a", {}), ("top/a/x", {})], "top/a/x"),
        ("tar", [("top/a", {"type": tarfile.DIRTYPE}), ("top/a/x", {}), ("top/a", {})], "top/a"),
        ("zip", ["top/a", "top/a/x"], "top/a/x"),
        ("zip", ["top/a/", "top/a"], "top/a"),
        ("zip", ["top/a/x", "top/a"], "top/a"),
    ],
)
def test_file_replaced_by_a_folder_names_archive_and_member(
    tmp_path: Path, kind: str, members: list, clash: str
) -> None:
    if kind == "tar":
        archive = _tar(tmp_path / "clash.tar", members)
    else:
        archive = _zip_of(tmp_path / "clash.zip", members)
    message, _ = _refusal(archive, tmp_path / "out", LIMITS)
    assert message.startswith(f"{archive}: cannot extract member {clash!r}: ")
    assert "both as a file and as a folder" in message
