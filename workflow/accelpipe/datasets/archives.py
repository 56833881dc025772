"""Safe archive extraction, shared by every dataset.

`safe_extract` unpacks tar (any compression) and zip archives into a temporary
folder beside the destination and renames it into place, refusing members that
would land outside the destination and archives that expand absurdly (`ArchiveLimits`,
the `archive` block of a dataset's download settings): a zip or tar bomb is refused from
its headers, before a byte of it is written or held in memory.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from accelpipe.core.errors import DataError, clip
from accelpipe.core.io import atomic_path, no_space_error

# tarfile's extraction filters arrived in 3.12 and were backported to 3.10.12 / 3.11.4.
_TAR_FILTER_ERROR = getattr(tarfile, "FilterError", ())
# Linux's PATH_MAX: no link target is longer, so more bytes are never read from a link member.
PATH_MAX = 4096
_GIB = 1 << 30


@dataclass(frozen=True)
class ArchiveLimits:
    """How far an archive may expand; `key` is where the config sets it, for messages."""

    max_ratio: float  # extracted bytes (tar: the whole tar stream) per byte of the archive
    max_member_gib: float
    max_total_gib: float
    key: str

    @classmethod
    def from_config(cls, block: dict[str, Any], key: str) -> ArchiveLimits:
        """From a validated `archive` block (definitions.archive_limits) found at `key`."""
        return cls(block["max_ratio"], block["max_member_gib"], block["max_total_gib"], key)


# For archives this process wrote itself (the synthetic sources): nothing to defend against.
OWN_ARCHIVE = ArchiveLimits(float("inf"), float("inf"), float("inf"), "(own archive)")


class _Budget:
    """Refuses an archive whose declared sizes exceed its limits, member by member."""

    def __init__(self, archive: Path, limits: ArchiveLimits) -> None:
        self.archive, self.limits = archive, limits
        self.archive_bytes = max(archive.stat().st_size, 1)

    def check(self, name: str, size: int, extracted: int) -> None:
        """`size`: the member's bytes; `extracted`: the bytes unpacked up to its end."""
        limits, archive = self.limits, self.archive
        if size > limits.max_member_gib * _GIB:
            raise DataError(
                f"{archive}: refusing member {clip(name)!r}: {_gib(size)} GiB, over "
                f"{limits.key}.max_member_gib ({limits.max_member_gib:g})"
            )
        if extracted > limits.max_ratio * self.archive_bytes:
            raise DataError(
                f"{archive}: refusing the archive: it expands to over {limits.max_ratio:g} times "
                f"its size ({limits.key}.max_ratio), an archive bomb or corrupt sizes"
            )
        if extracted > limits.max_total_gib * _GIB:
            raise DataError(
                f"{archive}: refusing the archive: it expands to over {limits.max_total_gib:g} "
                f"GiB ({limits.key}.max_total_gib)"
            )


def _gib(size: int) -> str:
    return f"{size / _GIB:.3g}"


def safe_extract(
    archive: str | os.PathLike[str], dest_dir: str | os.PathLike[str], *, limits: ArchiveLimits
) -> Path:
    """Extract a tar (any compression) or zip into `dest_dir`, which it replaces.

    Every member is checked first; absolute paths, `..` escapes, links pointing
    outside, paths through links, device files, and sizes over `limits` raise DataError
    naming the archive and member (names cut to a readable length). Extraction happens in a
    temporary sibling folder that is renamed onto `dest_dir` only when complete, so a failure
    (a full disk included) leaves nothing behind.
    """
    archive, dest_dir = Path(archive), Path(dest_dir)
    if not archive.is_file():
        raise DataError(f"{archive}: archive not found")
    is_zip = _starts_like_zip(archive)
    with atomic_path(dest_dir) as tmp:
        tmp.mkdir()
        try:
            (_extract_zip if is_zip else _extract_tar)(archive, tmp, _Budget(archive, limits))
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error) as err:
            raise DataError(f"{archive}: truncated or corrupt archive ({one_line(err)})") from None
        except NotImplementedError as err:  # e.g. a zip compression method Python lacks
            raise DataError(f"{archive}: unsupported archive feature ({one_line(err)})") from None
        except OSError as err:
            raise _write_error(archive, tmp, dest_dir, err) from None
    return dest_dir


def _write_error(archive: Path, tmp: Path, dest_dir: Path, err: OSError) -> DataError:
    """A full disk names the destination; anything else (a member that is a file in one
    place and a folder in another, a name the file system refuses) names the member."""
    full = no_space_error(err, dest_dir)
    if full is not None:
        return full
    where = Path(err.filename) if err.filename else tmp
    member = where.relative_to(tmp).as_posix() if where.is_relative_to(tmp) else str(where)
    clash = err.errno in (errno.EISDIR, errno.ENOTDIR, errno.EEXIST)
    hint = " (the archive has it both as a file and as a folder)" if clash else ""
    return DataError(
        f"{archive}: cannot extract member {clip(member)!r}: {err.strerror or one_line(err)}{hint}"
    )


def _starts_like_zip(archive: Path) -> bool:
    # By magic number: zipfile.is_zipfile scans the tail and also says yes for a tar
    # whose last member is a zip; a truncated zip still starts like one.
    with archive.open("rb") as fh:
        return fh.read(4) in (b"PK\x03\x04", b"PK\x05\x06")


def one_line(err: BaseException) -> str:
    """An error's text on one line, cut to a readable length (it may quote archive names)."""
    return clip(" ".join(str(err).split()))


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
    if (member.issym() or member.islnk()) and len(member.linkname) > PATH_MAX:
        return f"link target longer than {PATH_MAX} characters"
    if member.issym():
        target = posixpath.join(posixpath.dirname(name), member.linkname)
        if member.linkname.startswith("/") or _escapes(target):
            return f"symlink to {clip(member.linkname)!r} points outside the destination"
    if member.islnk() and (_escapes(member.linkname) or _through_link(member.linkname, links)):
        return f"hard link to {clip(member.linkname)!r} points outside the destination"
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


def _tar_members(tf: tarfile.TarFile, budget: _Budget) -> list[tarfile.TarInfo]:
    """Every header, each checked against the budget before the stream is unpacked past
    its data: a compressed bomb is refused after at most its allowance is decompressed."""
    members = []
    while (member := tf.next()) is not None:
        budget.check(member.name, member.size, member.offset_data + member.size)
        members.append(member)
    return members


def _extract_tar(archive: Path, dest: Path, budget: _Budget) -> None:
    with _open_tar(archive) as tf:
        members = _tar_members(tf, budget)
        end = getattr(tf, "accelpipe_end", None)
        if not isinstance(end, tarfile.EOFHeaderError):  # type: ignore[attr-defined]  # not in typeshed
            raise DataError(f"{archive}: truncated tar (no end-of-archive marker)")
        links: set[str] = set()
        for member in members:
            problem = tar_member_problem(member, links)
            if problem:
                raise DataError(f"{archive}: refusing member {clip(member.name)!r}: {problem}")
            if member.issym() or member.islnk():
                links.add(posixpath.normpath(member.name))
        try:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                # Defence in depth: also checks the real filesystem while extracting.
                tf.extractall(dest, members=members, filter="data")
            else:
                tf.extractall(dest, members=members)
        except _TAR_FILTER_ERROR as err:
            raise DataError(
                f"{archive}: refusing member {clip(err.tarinfo.name)!r}: {one_line(err)}"
            ) from None


def _zip_member_problem(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> str | None:
    # Any ".." is refused: zipfile would silently drop it and write somewhere else.
    if _escapes(info.filename) or ".." in info.filename.replace("\\", "/").split("/"):
        return "path escapes the destination"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        # zipfile would write the link target as a plain file: refuse rather than mislead.
        if info.file_size > PATH_MAX:
            return f"symlink whose target is longer than {PATH_MAX} bytes"
        with zf.open(info) as fh:  # the declared size may lie: read no more than a path
            target = fh.read(PATH_MAX).decode(errors="replace")
        return f"symlink to {clip(target)!r} (links in zip archives are not supported)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode):
        return "device or fifo members are not allowed"
    return None


def _extract_zip(archive: Path, dest: Path, budget: _Budget) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        extracted = 0
        for info in infos:  # zipfile never unpacks more than a member's declared size
            extracted += info.file_size
            budget.check(info.filename, info.file_size, extracted)
        for info in infos:
            problem = _zip_member_problem(zf, info)
            if problem:
                raise DataError(f"{archive}: refusing member {clip(info.filename)!r}: {problem}")
        zf.extractall(dest, members=infos)  # CRC of every member is checked while reading
