"""Import of the official ILSVRC2012 archives into the raw ImageFolder layout.

ImageNet has no public download: `source: import` lays out the tars the user supplies (and
`source: synthetic` the ones `accelpipe.datasets.imagenet_synthetic` writes). Both layouts,
the archives read and the raw folder written, are described in
`accelpipe.datasets.imagenet_layout`.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import scipy.io

from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.io import write_json
from accelpipe.datasets.archives import (
    ArchiveLimits,
    EndCheckingTarInfo,
    one_line,
    safe_extract,
    tar_member_problem,
)
from accelpipe.datasets.download import md5sum
from accelpipe.datasets.imagenet_layout import GROUND_TRUTH, KEY, ROOT, known_words, val_name
from accelpipe.datasets.pool import map_tasks

_WNID = re.compile(r"n\d{8}")
_COPY_BYTES = 1 << 20


@contextlib.contextmanager
def _open_stream(source: Path | IO[bytes], label: str) -> Iterator[tarfile.TarFile]:
    """A tar opened for one sequential pass (works on a member of another streamed tar).

    Tar errors raised while the caller reads become one DataError naming `label`.
    """
    where = {"name": source} if isinstance(source, Path) else {"fileobj": source}
    try:
        with tarfile.open(mode="r|*", tarinfo=EndCheckingTarInfo, **where) as tf:
            yield tf
    except (tarfile.TarError, EOFError, zlib.error) as err:
        raise DataError(f"{label}: truncated or corrupt tar ({one_line(err)})") from None


def _files(tf: tarfile.TarFile, label: str) -> Iterator[tarfile.TarInfo]:
    """The regular-file members of a flat streamed tar, one at a time.

    Folders are skipped; escapes, links, devices and nested paths raise DataError. tarfile
    keeps every TarInfo it has read; clearing the list keeps memory flat over 1.28M members.
    """
    while (member := tf.next()) is not None:
        tf.members.clear()  # type: ignore[attr-defined]  # typeshed omits TarFile.members
        problem = tar_member_problem(member, set())
        name = posixpath.normpath(member.name)
        if problem is None and not (member.isfile() or member.isdir()):
            problem = "only regular files are allowed"
        if problem is None and member.isfile() and "/" in name:
            problem = "expected a flat archive (no folders)"
        if problem:
            raise DataError(f"{label}: refusing member {member.name!r}: {problem}")
        if member.isfile():
            member.name = name
            yield member
    # After the first member tarfile takes a missing or garbled header for the end.
    end = getattr(tf, "accelpipe_end", None)
    if not isinstance(end, tarfile.EOFHeaderError):  # type: ignore[attr-defined]  # not in typeshed
        raise DataError(f"{label}: truncated tar (no end-of-archive marker)")


def _write_member(tf: tarfile.TarFile, member: tarfile.TarInfo, path: Path, label: str) -> None:
    src = tf.extractfile(member)
    assert src is not None  # _files yields regular files only
    try:
        with src, path.open("xb") as fh:
            shutil.copyfileobj(src, fh, _COPY_BYTES)
    except FileExistsError:
        raise DataError(f"{label}: member {member.name!r} appears twice") from None


@contextlib.contextmanager
def _open_seekable(path: Path) -> Iterator[tarfile.TarFile | None]:
    """`path` opened as a plain (uncompressed, seekable) tar, or None if it is not one.

    Tar errors raised while the caller reads become one DataError naming `path`.
    """
    try:
        tf = tarfile.open(path, mode="r:", tarinfo=EndCheckingTarInfo)  # noqa: SIM115  # closed below
    except (tarfile.TarError, EOFError):
        yield None  # compressed, or no tar at all: the streaming pass says which
        return
    try:
        with tf:
            yield tf
    except (tarfile.TarError, EOFError) as err:
        raise DataError(f"{path}: truncated or corrupt tar ({one_line(err)})") from None


class _Slice(io.RawIOBase):
    """Bytes [offset, offset + size) of a file: one member of a plain tar, read on its own."""

    def __init__(self, path: Path, offset: int, size: int) -> None:
        super().__init__()
        self._file = path.open("rb")
        self._file.seek(offset)
        self._left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")[: self._left]
        read = self._file.readinto(view)
        self._left -= read
        return read

    def close(self) -> None:
        self._file.close()
        super().close()


@dataclass(frozen=True)
class _ClassTar:
    """One class tar inside the (plain) train tar: where it is and where it goes."""

    train_tar: Path
    offset: int
    size: int
    dest: Path
    label: str


def _extract_class(task: _ClassTar) -> None:
    """One class tar -> its folder (a pool task: a class tar is ~140 MB of ~1300 JPEGs)."""
    member = _Slice(task.train_tar, task.offset, task.size)
    with io.BufferedReader(member, _COPY_BYTES) as src, _open_stream(src, task.label) as inner:
        for image in _files(inner, task.label):
            _write_member(inner, image, task.dest / image.name, task.label)


def _class_wnid(train_tar: Path, member: tarfile.TarInfo, wnids: Sequence[str]) -> str:
    wnid = member.name.removesuffix(".tar")
    if not member.name.endswith(".tar") or not wnid or wnid.startswith("."):
        raise DataError(
            f"{train_tar}: unexpected member {member.name!r} (expected one <wnid>.tar per class)"
        )
    if wnid in wnids:
        raise DataError(f"{train_tar}: class tar {member.name!r} appears twice")
    return wnid


def _extract_train(train_tar: Path, dest: Path, workers: int = 1) -> list[str]:
    """train tar of per-class tars -> dest/<wnid>/*.JPEG; return the sorted wnids.

    A plain tar (the official one) is listed first, each class tar then extracted by one of
    `workers` processes straight from its offset (the extraction is per-file Python work:
    ~30 minutes in one process for the 1.28M images); a compressed one is streamed in this
    process."""
    dest.mkdir()
    wnids: list[str] = []
    with _open_seekable(train_tar) as outer:
        if outer is not None:
            tasks = []
            for member in _files(outer, str(train_tar)):
                wnid = _class_wnid(train_tar, member, wnids)
                (dest / wnid).mkdir()
                label = f"{train_tar}: {member.name}"
                tasks.append(
                    _ClassTar(train_tar, member.offset_data, member.size, dest / wnid, label)
                )
                wnids.append(wnid)
    if outer is not None:
        for _ in map_tasks(_extract_class, tasks, workers):
            pass
        if not wnids:
            raise DataError(f"{train_tar}: no class tars (<wnid>.tar) in the archive")
        return sorted(wnids)
    with _open_stream(train_tar, str(train_tar)) as outer:
        for member in _files(outer, str(train_tar)):
            wnid = _class_wnid(train_tar, member, wnids)
            (dest / wnid).mkdir()
            label = f"{train_tar}: {member.name}"
            class_tar = outer.extractfile(member)
            assert class_tar is not None  # _files yields regular files only
            with _open_stream(class_tar, label) as inner:
                for image in _files(inner, label):
                    _write_member(inner, image, dest / wnid / image.name, label)
            wnids.append(wnid)
    if not wnids:
        raise DataError(f"{train_tar}: no class tars (<wnid>.tar) in the archive")
    return sorted(wnids)


def _extract_val(
    val_tar: Path, dest: Path, labels: dict[str, str], wnids: Sequence[str], source: Path
) -> None:
    """Flat val tar -> dest/<wnid>/<name> by `labels` (read from `source`)."""
    unknown = sorted(set(labels.values()) - set(wnids))
    if unknown:
        raise DataError(
            f"{source}: {len(unknown)} val class(es) have no class tar in the train archive, "
            f"e.g. {unknown[0]}"
        )
    dest.mkdir()
    for folder in wnids:  # every class gets a val folder, as ImageFolder expects
        (dest / folder).mkdir()
    seen: set[str] = set()
    with _open_stream(val_tar, str(val_tar)) as tf:
        for member in _files(tf, str(val_tar)):
            wnid = labels.get(member.name)
            if wnid is None:
                raise DataError(f"{val_tar}: val image {member.name} has no label in {source}")
            _write_member(tf, member, dest / wnid / member.name, str(val_tar))
            seen.add(member.name)
    missing = sorted(set(labels) - seen)
    if missing:
        raise DataError(
            f"{source}: labels {len(missing)} image(s) that are not in {val_tar}, e.g. {missing[0]}"
        )


def _read_meta(path: Path, label: str) -> tuple[dict[int, str], dict[str, str]]:
    """meta.mat -> ({ILSVRC2012_ID: wnid} of the leaf synsets, {wnid: words})."""
    try:
        synsets = scipy.io.loadmat(path, squeeze_me=True).get("synsets")
    except (ValueError, TypeError, OSError, scipy.io.matlab.MatReadError) as err:
        raise DataError(f"{label}: not a readable MAT-file ({one_line(err)})") from None
    fields = set(getattr(getattr(synsets, "dtype", None), "names", None) or ())
    if not {"ILSVRC2012_ID", "WNID"} <= fields:
        raise DataError(f"{label}: no `synsets` struct with ILSVRC2012_ID and WNID fields")
    ids: dict[int, str] = {}
    words: dict[str, str] = {}
    for row in np.atleast_1d(synsets):
        if "num_children" in fields and int(row["num_children"]) != 0:
            continue  # inner WordNet nodes: not classes
        wnid = str(row["WNID"])
        ids[int(row["ILSVRC2012_ID"])] = wnid
        if "words" in fields:
            words[wnid] = str(row["words"])
    return ids, words


def _read_ground_truth(path: Path, ids: dict[int, str], label: str) -> dict[str, str]:
    """One ILSVRC2012_ID per line; line i labels ILSVRC2012_val_<i>.JPEG."""
    labels = {}
    lines = path.read_text().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    for i, line in enumerate(lines, 1):
        wnid = ids.get(int(line)) if line.strip().isdigit() else None
        if wnid is None:
            raise DataError(
                f"{label} line {i}: {line.strip()!r} is not the ILSVRC2012_ID of a class "
                "in meta.mat"
            )
        labels[val_name(i)] = wnid
    return labels


def _find(root: Path, name: str, devkit: Path) -> Path:
    found = sorted(p for p in root.rglob(name) if p.parent.name == "data")
    if len(found) != 1:
        raise DataError(f"{devkit}: expected one data/{name} in the devkit, found {len(found)}")
    return found[0]


def read_devkit(devkit: str | Path, limits: ArchiveLimits) -> tuple[dict[str, str], dict[str, str]]:
    """The devkit's val labels {ILSVRC2012_val_*.JPEG: wnid} and class words {wnid: words}."""
    devkit = Path(devkit)
    with tempfile.TemporaryDirectory(prefix="imagenet-devkit-") as tmp:
        staging = safe_extract(devkit, Path(tmp) / "devkit", limits=limits)
        meta, truth = _find(staging, "meta.mat", devkit), _find(staging, GROUND_TRUTH, devkit)
        ids, words = _read_meta(meta, f"{devkit}: {meta.relative_to(staging)}")
        labels = _read_ground_truth(truth, ids, f"{devkit}: {truth.relative_to(staging)}")
    return labels, words


def read_val_labels(path: str | Path) -> dict[str, str]:
    """{val file name: wnid} from `name wnid` lines or a two-column CSV (a header is skipped).

    Names without an extension get `.JPEG` (Kaggle's LOC_val_solution.csv works too: its
    second column starts with the wnid).
    """
    path = Path(path)
    labels: dict[str, str] = {}
    for i, line in enumerate(path.read_text().splitlines(), 1):
        fields = [f for f in re.split(r"[,;\s]+", line.strip()) if f]
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) < 2:
            raise DataError(f"{path} line {i}: expected `<file name> <wnid>`, got {line!r}")
        name, wnid = fields[0], fields[1]
        if not labels and not _WNID.fullmatch(wnid) and "." not in name:
            continue  # header line
        name = name if "." in name else f"{name}.JPEG"
        if labels.setdefault(name, wnid) != wnid:
            raise DataError(f"{path} line {i}: {name} is labelled twice, differently")
    if not labels:
        raise DataError(f"{path}: no val labels in the file")
    return labels


def _check_md5(path: Path, expected: str | None, key: str) -> None:
    if expected is None:
        return
    actual = md5sum(path)
    if actual != expected.lower():
        raise DataError(
            f"{path}: md5 mismatch for {KEY}.import.{key}: expected {expected}, got {actual}"
        )


def import_tars(
    out: str | Path,
    *,
    train_tar: str | Path,
    val_tar: str | Path,
    devkit: str | Path | None = None,
    val_labels: str | Path | None = None,
    md5: dict[str, str | None] | None = None,
    limits: ArchiveLimits,
    workers: int | None = None,
) -> Path:
    """Lay the official archives out as an ImageFolder at `<out>/ILSVRC2012`; return it.

    Val labels come from `val_labels` if given, else from the devkit (which also gives the
    class words). Checksums in `md5` ({key: hex or None}) are checked first; `limits` bound
    the devkit's extraction. Archives are read in one pass each, the train tar's classes on
    `workers` processes (default: the CPUs this process may use); `out` must not hold an
    ILSVRC2012 folder yet.
    """
    given = {"train_tar": train_tar, "val_tar": val_tar, "devkit": devkit, "val_labels": val_labels}
    paths = {key: Path(p).expanduser() for key, p in given.items() if p is not None}
    for key, path in paths.items():
        if not path.is_file():
            raise DataError(f"{path}: file given by {KEY}.import.{key} not found")
    if "devkit" not in paths and "val_labels" not in paths:
        raise ConfigError(f"{KEY}.import: set devkit or val_labels (the val images' classes)")
    for key in ("train_tar", "val_tar", "devkit"):
        if key in paths:
            _check_md5(paths[key], (md5 or {}).get(key), key)
    labels, words = read_devkit(paths["devkit"], limits) if "devkit" in paths else ({}, {})
    source = paths.get("val_labels", paths.get("devkit"))
    if "val_labels" in paths:
        labels = read_val_labels(paths["val_labels"])
    root = Path(out) / ROOT
    root.mkdir(parents=True)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    wnids = _extract_train(paths["train_tar"], root / "train", workers)
    _extract_val(paths["val_tar"], root / "val", labels, wnids, source)  # type: ignore[arg-type]
    write_json(root / "classes.json", {"wnids": wnids, "words": known_words(words, wnids)})
    return root
