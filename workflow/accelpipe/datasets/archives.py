"""Safe archive extraction, shared by every dataset.

`safe_extract` unpacks tar (any compression) and zip archives into a temporary
folder beside the destination and renames it into place, refusing members that
would land outside the destination.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import TypeVar

from accelpipe.errors import DataError
from accelpipe.io import atomic_path

# tarfile's extraction filters arrived in 3.12 and were backported to 3.10.12 / 3.11.4.
_TAR_FILTER_ERROR = getattr(tarfile, "FilterError", ())


def safe_extract(archive: str | os.PathLike[str], dest_dir: str | os.PathLike[str]) -> Path:
    """Extract a tar (any compression) or zip into `dest_dir`, which it replaces.

    Every member is checked first; absolute paths, `..` escapes, links pointing
    outside, paths through links, and device files raise DataError naming the
    archive and member. Extraction happens in a temporary sibling folder that is
    renamed onto `dest_dir` only when complete, so a failure leaves nothing behind.
    """
    archive, dest_dir = Path(archive), Path(dest_dir)
    if not archive.is_file():
        raise DataError(f"{archive}: archive not found")
    is_zip = _starts_like_zip(archive)
    with atomic_path(dest_dir) as tmp:
        tmp.mkdir()
        try:
            (_extract_zip if is_zip else _extract_tar)(archive, tmp)
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error) as err:
            raise DataError(f"{archive}: truncated or corrupt archive ({one_line(err)})") from None
        except NotImplementedError as err:  # e.g. a zip compression method Python lacks
            raise DataError(f"{archive}: unsupported archive feature ({one_line(err)})") from None
    return dest_dir


def _starts_like_zip(archive: Path) -> bool:
    # By magic number: zipfile.is_zipfile scans the tail and also says yes for a tar
    # whose last member is a zip; a truncated zip still starts like one.
    with archive.open("rb") as fh:
        return fh.read(4) in (b"PK\x03\x04", b"PK\x05\x06")


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def _escapes(path: str) -> bool:
    """True if a relative archive path is absolute or climbs above the archive root."""
    if path.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", path):
        return True
    norm = posixpath.normpath(path.replace("\\", "/"))
    return norm == ".." or norm.startswith("../")


def _through_link(name: str, links: set[str]) -> bool:
    """True if some parent folder of `name` is a link member (its target is not checked)."""
    parts = posixpath.normpath(name).split("/")
    return any("/".join(parts[:i]) in links for i in range(1, len(parts)))


def tar_member_problem(member: tarfile.TarInfo, links: set[str]) -> str | None:
    """Why `member` may not be extracted (a path or a link leading outside the destination,
    a device), or None; `links` are the link members seen before it."""
    name = member.name
    if _escapes(name):
        return "path escapes the destination"
    if _through_link(name, links):
        return "path goes through a link member"
    if member.issym():
        target = posixpath.join(posixpath.dirname(name), member.linkname)
        if member.linkname.startswith("/") or _escapes(target):
            return f"symlink to {member.linkname!r} points outside the destination"
    if member.islnk() and (_escapes(member.linkname) or _through_link(member.linkname, links)):
        return f"hard link to {member.linkname!r} points outside the destination"
    if member.isdev():
        return "device or fifo members are not allowed"
    return None


_Info = TypeVar("_Info", bound="EndCheckingTarInfo")


class EndCheckingTarInfo(tarfile.TarInfo):
    """Records why tarfile stopped reading headers.

    After the first member, tarfile treats a missing, truncated or garbled header as
    the end of the archive, so a tar cut at a member boundary would extract "fine".
    Only a zero block is a real end-of-archive marker.
    """

    @classmethod
    def fromtarfile(cls: type[_Info], tarfile_: tarfile.TarFile) -> _Info:
        try:
            return super().fromtarfile(tarfile_)
        except tarfile.HeaderError as err:
            tarfile_.accelpipe_end = err  # type: ignore[attr-defined]
            raise


def _open_tar(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive, "r:*", tarinfo=EndCheckingTarInfo)
    except tarfile.ReadError:  # its message lists every compression it tried: too noisy
        raise DataError(
            f"{archive}: not a readable tar or zip archive (truncated or corrupt)"
        ) from None


def _extract_tar(archive: Path, dest: Path) -> None:
    with _open_tar(archive) as tf:
        members = tf.getmembers()
        end = getattr(tf, "accelpipe_end", None)
        if not isinstance(end, tarfile.EOFHeaderError):  # type: ignore[attr-defined]  # not in typeshed
            raise DataError(f"{archive}: truncated tar (no end-of-archive marker)")
        links: set[str] = set()
        for member in members:
            problem = tar_member_problem(member, links)
            if problem:
                raise DataError(f"{archive}: refusing member {member.name!r}: {problem}")
            if member.issym() or member.islnk():
                links.add(posixpath.normpath(member.name))
        try:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                # Defence in depth: also checks the real filesystem while extracting.
                tf.extractall(dest, members=members, filter="data")
            else:
                tf.extractall(dest, members=members)
        except _TAR_FILTER_ERROR as err:
            raise DataError(f"{archive}: refusing member {err.tarinfo.name!r}: {err}") from None


def _zip_member_problem(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> str | None:
    # Any ".." is refused: zipfile would silently drop it and write somewhere else.
    if _escapes(info.filename) or ".." in info.filename.replace("\\", "/").split("/"):
        return "path escapes the destination"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        # zipfile would write the link target as a plain file: refuse rather than mislead.
        target = zf.read(info).decode(errors="replace")
        return f"symlink to {target!r} (links in zip archives are not supported)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode):
        return "device or fifo members are not allowed"
    return None


def _extract_zip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:
            problem = _zip_member_problem(zf, info)
            if problem:
                raise DataError(f"{archive}: refusing member {info.filename!r}: {problem}")
        zf.extractall(dest, members=infos)  # CRC of every member is checked while reading
