"""Generic TFRecord writing shared by the TensorFlow datasets (COCO, ADE20K), and the check of
written shards.

`write_splits` spreads each split's records over `<prefix>-%05d-of-%05d.tfrecord` files the
way the tensorflow/tpu converters do (record i goes to shard i % num_shards), writes one shard
per task on one process pool for all splits and checks that every expected record was
written. Callers write into a folder that `accelpipe.core.io.atomic_path` renames into place, so a
failure leaves nothing. `damage` walks a shard's record frames to say whether and where it is
cut short or corrupted, which TensorFlow's reader does not (its DataLossError names an offset
but no file): the input pipelines (`accelpipe.inputs`, which read the shards with tf.data:
`inputs.shards`) run `check_shards` before reading and `find_damaged` after a DataLossError,
over the shards their process reads (`reading`).

No TensorFlow: a TFRecord is a little-endian uint64 length, the masked CRC-32C of those 8
bytes, the record and the masked CRC-32C of the record (tensorflow/core/lib/io/
record_writer.cc); google-crc32c computes the checksums. Importing TensorFlow in every pool
worker cost seconds per worker, more than converting a small dataset.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import google_crc32c

from accelpipe.core.errors import DataError
from accelpipe.core.io import write_json
from accelpipe.datasets.pool import map_batches
from accelpipe.datasets.readahead import ahead

SHARD_NAME = "{prefix}-{index:05d}-of-{count:05d}.tfrecord"


# Examples are encoded by hand in the protobuf wire format (tensorflow/core/example/
# example.proto, feature.proto): building tf.train.Feature objects copies every JPEG twice and
# cost ~300 us an image, 5x the rest of the conversion. tf.train.Example parses the result.


_ONE_BYTE = tuple(bytes((i,)) for i in range(128))  # most varints: tags, short lengths


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _ONE_BYTE[value]
    if 0 < value < 1 << 21:  # most lengths: a JPEG's is 3 bytes
        if value < 1 << 14:
            return bytes((value & 0x7F | 0x80, value >> 7))
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
    value &= (1 << 64) - 1  # int64: negative values are 10-byte two's complement varints
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# The tag of a length-delimited field (wire type 2) numbered 1..15: one byte.
_TAGS = (b"", *(bytes((number << 3 | 2,)) for number in range(1, 16)))


def _header(number: int, length: int) -> bytes:
    """Tag and length of a length-delimited field (wire type 2) of `length` payload bytes."""
    # ~60 headers an Example: the one-byte lengths skip _varint's call.
    return _TAGS[number] + (_ONE_BYTE[length] if length < 128 else _varint(length))


def _field(number: int, payload: bytes) -> bytes:
    return _header(number, len(payload)) + payload


def bytes_feature(values: bytes | str | Iterable[bytes | str]) -> bytes:
    """An encoded Feature holding one or more byte strings (str is UTF-8 encoded)."""
    if isinstance(values, bytes | str):  # most features: one value, no list to build
        value = values.encode() if isinstance(values, str) else values
        inner = _header(1, len(value))
        return b"".join((_header(1, len(inner) + len(value)), inner, value))
    parts: list[bytes] = []
    for item in values:
        value = item.encode() if isinstance(item, str) else item
        parts += (_header(1, len(value)), value)
    size = sum(map(len, parts))
    # One join, so an image's bytes are copied once here (Feature.bytes_list = 1, value = 1).
    return b"".join([_header(1, size), *parts])


def float_feature(values: float | Iterable[float]) -> bytes:
    """An encoded Feature holding float32 values."""
    if isinstance(values, int | float):
        floats: Sequence[float] = (values,)
    else:
        floats = values if isinstance(values, list | tuple) else list(values)
    packed = struct.pack(f"<{len(floats)}f", *floats)
    return _field(2, _field(1, packed) if floats else b"")  # Feature.float_list = 2, packed


def int64_feature(values: int | Iterable[int]) -> bytes:
    """An encoded Feature holding int64 values."""
    if isinstance(values, int):  # height, width: one value
        return _field(3, _field(1, _varint(values)))
    ints = [int(v) for v in values]
    packed = b"".join([_varint(v) for v in ints])
    return _field(3, _field(1, packed) if ints else b"")  # Feature.int64_list = 3, packed


@functools.cache
def _map_key(name: str) -> bytes:
    """The key field of a Features map entry (a handful of names, encoded once)."""
    return _field(1, name.encode())


def example(features: dict[str, bytes]) -> bytes:
    """Serialized tf.train.Example of {name: encoded Feature}."""
    # Features.feature is map<string, Feature>: entries {1: key, 2: value} in field 1 of
    # Features, which is field 1 of Example. Joined once: the features are copied once.
    parts: list[bytes] = []
    for name, feature in features.items():
        key, size = _map_key(name), len(feature)
        value_header = _header(2, size)
        entry_header = _header(1, len(key) + len(value_header) + size)
        parts.append(entry_header + key + value_header)  # small: joined here, not copied later
        parts.append(feature)
    return b"".join([_header(1, sum(map(len, parts))), *parts])


def shard_name(prefix: str, index: int, count: int) -> str:
    return SHARD_NAME.format(prefix=prefix, index=index, count=count)


@dataclass(frozen=True)
class Split:
    """One split to write: `items` spread over `num_shards` files named after `prefix`."""

    prefix: str
    items: Sequence[Any]
    num_shards: int


@dataclass(frozen=True)
class _ShardTask:
    prefix: str
    path: str
    items: Sequence[Any]
    encode: Callable[[Any], bytes]
    files: Callable[[Any], Iterable[str]] | None


def _masked_crc32c(data: bytes) -> bytes:
    """TFRecord's checksum: CRC-32C rotated right by 15 bits plus a constant, little-endian."""
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def write_record(file: BinaryIO, record: bytes) -> None:
    """One TFRecord: length, its checksum, the bytes, their checksum (no copy of `record`)."""
    length = struct.pack("<Q", len(record))
    file.write(length + _masked_crc32c(length))
    file.write(record)
    file.write(_masked_crc32c(record))


def _write_shard(task: _ShardTask) -> tuple[str, int, str, list[int]]:
    """Encode, write and check one shard; return its split's prefix, the records written, its
    name and stamp (for the CHECKED manifest)."""
    written = 0
    items = task.items if task.files is None else ahead(task.items, task.files)
    with open(task.path, "wb") as file:
        for item in items:
            write_record(file, task.encode(item))
            written += 1
    path = Path(task.path)
    problem = damage(path)  # still in the page cache: cheap here, a full read cold
    if problem:
        raise DataError(_damaged(path, problem))
    return task.prefix, written, path.name, _stamp(path)


def write_splits(
    out_dir: Path,
    splits: Iterable[Split],
    encode: Callable[[Any], bytes],
    workers: int = 1,
    files: Callable[[Any], Iterable[str]] | None = None,
) -> dict[str, list[Path]]:
    """Write `encode(item)` for every item of every split into its shards in `out_dir`; return
    {prefix: shard paths}.

    One shard per task, all splits on one process pool (datasets.pool.map_batches). `splits`
    is iterated lazily: a generator that plans the next split (parses its index) does so while
    the shards of the ones before are written. `encode` runs in the workers (a picklable
    module-level callable) and may raise DataError to abort everything. `files(item)`, where
    given (module-level too), names the files `encode` will read: they are read ahead
    (datasets.readahead). Every shard is written, empty ones too, so the file names always say
    how many there are. Each shard's frames are walked once written and its size and mtime
    kept in `out_dir`/CHECKED, so `check_shards` need not walk it again. Raises DataError if a
    split's records written differ from its items.
    """
    expected: dict[str, int] = {}
    paths: dict[str, list[Path]] = {}

    def shard_tasks() -> Iterator[list[_ShardTask]]:
        for split in splits:
            if split.num_shards < 1:
                raise DataError(
                    f"{split.prefix}: the number of shards must be >= 1, got {split.num_shards}"
                )
            count = split.num_shards
            tasks = [
                _ShardTask(
                    split.prefix,
                    str(out_dir / shard_name(split.prefix, i, count)),
                    split.items[i::count],
                    encode,
                    files,
                )
                for i in range(count)
            ]
            expected[split.prefix] = len(split.items)
            paths[split.prefix] = [Path(t.path) for t in tasks]
            yield tasks

    written: Counter[str] = Counter()
    checked: dict[str, list[int]] = {}
    for prefix, count, name, stamp in map_batches(_write_shard, shard_tasks(), workers):
        written[prefix] += count
        checked[name] = stamp
    for prefix, count in expected.items():
        if written[prefix] != count:
            raise DataError(
                f"{out_dir}: wrote {written[prefix]} {prefix} records, expected {count}"
            )
    write_json(out_dir / CHECKED, dict(sorted(checked.items())))
    return paths


# ----------------------------------------------------------------------------- damaged shards

_HEADER = 12  # uint64 length, masked CRC-32C of those 8 bytes
_FOOTER = 4  # masked CRC-32C of the record
REMAKE = "re-make the prepared data with `snakemake --forcerun prepare_dataset <target>`"
_READING: dict[str, None] = {}  # shards read in this process, in order (find_damaged)
# Beside the shards: {name: [size, mtime_ns]} of each shard as written and walked whole. A shard
# whose size or mtime differs (cut, rewritten, swapped in) is walked again.
CHECKED = "shards-checked.json"
_WALKED: dict[str, tuple[int, ...]] = {}  # shards walked whole in this process: their stat


def _stamp(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def _checked_at_prepare(folder: Path) -> dict[str, Any]:
    """The CHECKED manifest of `folder`, or {} (none, or unreadable: the shards are walked)."""
    try:
        found = json.loads((folder / CHECKED).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def damage(path: Path, checksums: bool = False, at: int | None = None) -> str | None:
    """What is wrong with the TFRecord file `path`, or None.

    Walks the record frames by their length fields (one 12-byte read a record, each length's
    checksum checked): a frame that runs past the end of the file is truncation. With
    `checksums` every record's checksum is checked too (the whole file is read); `at` checks
    the record starting at that offset, or whose data does (the offsets TensorFlow's reader
    reports: "truncated record at <start>", "corrupted record at <start + 12>").
    """
    found = _walk(path, checksums, at)
    return found[1] if found else None


def _walk(path: Path, checksums: bool, at: int | None) -> tuple[int, str] | None:
    """`damage`, with the offset of the damaged record."""
    size = path.stat().st_size
    start = 0
    with path.open("rb") as file:
        while start < size:
            file.seek(start)
            header = file.read(_HEADER)
            if len(header) < _HEADER:
                return start, (
                    f"truncated: the file ends {size - start} bytes into the "
                    f"{_HEADER}-byte header of the record at byte {start}"
                )
            if _masked_crc32c(header[:8]) != header[8:]:
                return start, f"corrupted record at byte {start} (its length fails its checksum)"
            (length,) = struct.unpack("<Q", header[:8])
            end = start + _HEADER + length + _FOOTER
            if end > size:
                return start, (
                    f"truncated record at byte {start}: it needs {end - start} bytes, "
                    f"the file ends {size - start} bytes into it"
                )
            if checksums or at in (start, start + _HEADER):
                data = file.read(length)
                if _masked_crc32c(data) != file.read(_FOOTER):
                    return start, f"corrupted record at byte {start} (its data fails its checksum)"
            start = end
    return None


def _damaged(path: Path, problem: str) -> str:
    return f"{path}: {problem}; the shard is damaged: {REMAKE}"


def check_shards(paths: Iterable[Path]) -> None:
    """Raise DataError naming the first of `paths` whose records do not fill it exactly (cut
    short, or a length corrupted); checksums are left to the reader.

    A shard is walked (a read a record: seconds a GB cold) only if it is not as prepare wrote
    and walked it (CHECKED) nor as this process last walked it."""
    manifests: dict[Path, dict[str, Any]] = {}
    for path in map(Path, paths):
        stat = path.stat() if path.is_file() else None
        if stat is not None:
            stamp = [stat.st_size, stat.st_mtime_ns]
            seen = (*stamp, stat.st_ctime_ns, stat.st_ino)
            if path.parent not in manifests:
                manifests[path.parent] = _checked_at_prepare(path.parent)
            if manifests[path.parent].get(path.name) == stamp or _WALKED.get(str(path)) == seen:
                continue
        problem = damage(path)
        if problem:
            raise DataError(_damaged(path, problem))
        if stat is not None:
            _WALKED[str(path)] = seen


def reading(paths: Iterable[Path]) -> None:
    """Note that this process reads `paths`, for `find_damaged` to search."""
    for path in paths:
        _READING[str(path)] = None


def find_damaged(reader_message: str) -> str | None:
    """After TensorFlow's reader failed with `reader_message` (a DataLossError's: "truncated
    record at N", "corrupted record at N", no file named): one line naming the shard this
    process reads (`reading`) that is damaged and what to do, or None if none is found.

    With an offset in the message, the shard damaged at that offset: the frames of every
    shard are walked (a read a record) and the record there checksummed. Without one, the
    first shard whose frames are damaged, else whose checksums fail (every record read)."""
    match = re.search(r"(?:truncated|corrupted) record at (\d+)", reader_message)
    at = int(match.group(1)) if match else None
    paths = [Path(p) for p in _READING if Path(p).is_file()]
    # With an offset, the first walk checksums the record there: no second one is needed.
    for checksums in (False,) if at is not None else (False, True):
        for path in paths:
            found = _walk(path, checksums, at)
            if found and (at is None or at in (found[0], found[0] + _HEADER)):
                return _damaged(path, found[1])
    return None
