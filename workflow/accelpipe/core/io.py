"""Atomic file and directory output.

Declared outputs are written to a temporary sibling and renamed into place, so a
killed job never leaves a file or folder that looks complete.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import glob
import gzip
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from accelpipe.core.errors import AccelpipeError, DataError
from accelpipe.core.resources import free_disk, gb


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `final`; rename it onto `final` on success.

    The temporary is `.<name>.<host>-<pid>.<random>.tmp`: one a killed process left is
    removed by the next atomic_path of the same `final` (remove_stale_temporaries).
    Works for files and directories. On error the temporary is removed and
    `final` (if it existed) is left untouched; a full disk or quota is a DataError naming
    `final`.
    """
    final = Path(final)
    with disk_full_names(final):
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(final)
        prefix = f".{final.name}.{_owner()}."
        tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=final.parent))
    target = tmp / final.name
    try:
        with disk_full_names(final):
            yield target
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)
        os.replace(target, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _owner() -> str:
    """Who makes a temporary: `<host>-<pid>`, so a later run can tell a dead one's."""
    return f"{socket.gethostname()}-{os.getpid()}"


def remove_stale_temporaries(final: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries `atomic_path(final)` left behind when its process was killed:
    those made on this host by a process that no longer runs. Another host's, a live
    process's and any whose maker cannot be told are kept. Returns what it removed."""
    final = Path(final)
    here = socket.gethostname()
    removed = []
    for tmp in final.parent.glob(f".{glob.escape(final.name)}.*.tmp"):
        owner = tmp.name[len(final.name) + 2 :].rsplit(".", 2)[0]  # <host>-<pid>
        host, _, pid = owner.rpartition("-")
        if host == here and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


# A full disk and a full quota: the user frees space and reruns.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# numpy's tofile (np.save) reports a short write without the errno
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")


def no_space_error(err: BaseException, path: str | os.PathLike[str]) -> DataError | None:
    """`err` as a one-line DataError naming `path` (what was being written) and the space
    left there, if it says the disk or the quota is full; else None."""
    if not isinstance(err, OSError) or not _disk_full(err, path):
        return None
    reason = err.strerror or os.strerror(errno.ENOSPC)
    return DataError(f"{path}: {reason} ({free_space(path)}); free some space and rerun")


def _disk_full(err: OSError, path: str | os.PathLike[str]) -> bool:
    if err.errno in _NO_SPACE:
        return True
    short = _SHORT_WRITE.search(str(err)) if err.errno is None else None
    # a short write is a full disk where what was left to write does not fit
    return short is not None and free_disk(path) < int(short[1]) - int(short[2])


def free_space(path: str | os.PathLike[str]) -> str:
    """The space left on the file system holding `path` (or its nearest existing parent),
    e.g. "1.5 MB free"."""
    try:
        return f"{gb(free_disk(path))} free"
    except OSError:
        return "free space unknown"


@contextlib.contextmanager
def disk_full_names(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn a full disk or quota met inside the block into a DataError naming `path`; also
    where a library wrapped the OSError in its own error (torch.save: "unexpected pos")."""
    try:
        yield
    except AccelpipeError:
        raise  # already one line
    except Exception as err:
        full = _full_disk_behind(err, path)
        if full is None:
            raise
        raise full from None


def _full_disk_behind(err: BaseException, path: str | os.PathLike[str]) -> DataError | None:
    """The full-disk DataError of `err` or of the errors it was raised from, if any."""
    seen: BaseException | None = err
    while seen is not None:
        full = no_space_error(seen, path)
        if full is not None:
            return full
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return None


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


# zlib's default level: a profiler trace in about a third of level 9's time, a few % larger
GZIP_LEVEL = 6


def write_gzip_text(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` gzipped to `path` atomically."""
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", compresslevel=GZIP_LEVEL) as f:
        f.write(text)


def gzip_file(source: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Write `source` gzipped to `path` atomically, in large blocks."""
    with (
        atomic_path(path) as tmp,
        open(source, "rb") as fin,
        gzip.open(tmp, "wb", compresslevel=GZIP_LEVEL) as fout,
    ):
        shutil.copyfileobj(fin, fout, 1 << 20)


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write `data` as indented JSON to `path` atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_csv(
    path: str | os.PathLike[str], rows: Iterable[dict[str, Any]], columns: Sequence[str]
) -> None:
    """Write dict rows under a header of `columns` to `path` atomically."""
    with atomic_path(path) as tmp, tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read JSON, naming the file in the error if it is missing or malformed."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON ({err})") from None


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """A YAML file of the package (schemas, published figures, recipes, image specs), read with
    the safe loader: libyaml's where PyYAML has it, ~10x the Python one's speed on the files
    every planning run reads."""
    text = Path(path).read_text()
    if yaml.__with_libyaml__:
        return yaml.load(text, Loader=yaml.CSafeLoader)
    return yaml.safe_load(text)
