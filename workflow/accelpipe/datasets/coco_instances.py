"""COCO instances JSON -> the image records the TFRecord converter writes, checked.

Every field the converter uses is checked, and a problem is one DataError naming the file,
the entry (`annotations[12]`) and the key, or the image id for a box outside its image. As the
tensorflow/tpu converter does, boxes with w or h <= 0 are skipped, and so are boxes that end
past the image by less than BOX_TOLERANCE_PX (rounding in the annotation); with `skip_empty`
(the train split, Habana's `--ignore_images_without_bbox`) images left without boxes are
dropped.

COCO 2017's train file is ~450 MB with ~860k annotations and millions of polygon
coordinates: it is parsed with orjson, its 'annotations' array a window at a time
(`stream_instances`: ~4 GB of parsed polygons never live at once), and each entry is checked
in one pass, with the cyclic garbage collector paused (a JSON tree has no cycles, and
collections over millions of new objects cost more than the parse itself). orjson reads an
integer past 64 bits as a float; integer fields therefore take ints in the int64 range (which
the Example's int64 features hold) and integral floats below 2**53 (exact), and name anything
else.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, cast

import orjson

from accelpipe.core.errors import DataError

BOX_TOLERANCE_PX = 1.0
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_EXACT_FLOAT = float(1 << 53)  # integral floats below this are exact integers


class Box(NamedTuple):
    """One kept annotation, its box normalised by the image size."""

    xmin: float
    xmax: float
    ymin: float
    ymax: float
    label: int  # the COCO category id
    text: str  # the category name
    is_crowd: int
    area: float


@dataclass
class ImageRecord:
    """Everything one Example needs; built from the JSON in the parent, encoded in a worker."""

    path: str
    image_id: int
    file_name: str
    width: int
    height: int
    boxes: list[Box] = field(default_factory=list)


@dataclass
class SplitStats:
    images: int = 0  # records written
    source_images: int = 0  # images in the instances JSON
    skipped_images: int = 0  # without boxes, skipped (train only)
    boxes: int = 0
    crowd_boxes: int = 0
    skipped_boxes: int = 0  # degenerate or ending past the image (within tolerance)


def _field(entry: dict[str, Any], key: str, where: str, ann_file: Path) -> Any:
    try:
        return entry[key]
    except KeyError:
        raise DataError(f"{ann_file}: {where} has no '{key}'") from None


def _int(entry: dict[str, Any], key: str, where: str, ann_file: Path) -> int:
    value = _field(entry, key, where, ann_file)
    if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
        return value
    if type(value) is float and value.is_integer() and abs(value) < _EXACT_FLOAT:
        return int(value)
    raise DataError(f"{ann_file}: {where}.{key} = {value!r} is not an integer (int64)")


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic collections inside: objects are still freed by reference counting."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_instances(ann_file: Path) -> dict[str, Any]:
    """The instances JSON, with 'images', 'annotations' and 'categories' checked to be lists
    of objects."""
    try:
        data = ann_file.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{ann_file}: annotation file not found") from None
    except OSError as err:  # a folder in its place, no permission
        raise DataError(f"{ann_file}: cannot read the annotation file ({err.strerror})") from None
    try:
        with _gc_paused():  # here too for check_raw, which only counts the images
            content = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise DataError(f"{ann_file}: not valid JSON ({err})") from None
    _check_lists(content, ann_file)
    return cast("dict[str, Any]", content)  # checked to be an object


def _check_lists(content: Any, ann_file: Path) -> None:
    for key in ("images", "annotations", "categories"):
        value = content.get(key) if isinstance(content, dict) else None
        if not isinstance(value, list) or not all(type(v) is dict for v in value):
            raise DataError(f"{ann_file}: '{key}' must be a list of objects")


# ---------------------------------------------------------------- streamed annotations
# The parsed 'annotations' array is most of a parse's memory (COCO 2017 train: ~4 GB of
# polygons, for boxes worth ~0.2 GB). `stream_instances` parses the array in windows of about
# CHUNK_BYTES, so only one window's objects live at a time: a first pass finds where the
# windows and the array end (the rest of the file, the categories in COCO, comes after it),
# the second parses them again as they are used.

CHUNK_BYTES = 4 << 20
_KEY = b'"annotations"'
_STREAMED = "\u0000accelpipe: streamed"  # what the array is replaced by in the skeleton
_BETWEEN = re.compile(rb"\}\s*,\s*\{")  # between two objects of the array (or in a string)
_AFTER_END = "unexpected content after document"  # orjson's message past the array's ']'
_WS = b" \t\r\n"
_TRIES = 8  # '"annotations": [' found elsewhere first: tried before the file is parsed whole


def _find(fd: int, needle: bytes, size: int) -> Iterator[int]:
    """Offsets of `needle` in the file, read in blocks."""
    offset = 0
    while offset < size:
        data = os.pread(fd, CHUNK_BYTES + len(needle) - 1, offset)
        at = data.find(needle)
        while at != -1:
            if at < CHUNK_BYTES:  # the overlap's matches belong to the next block
                yield offset + at
            at = data.find(needle, at + 1)
        offset += CHUNK_BYTES


def _skip_ws(data: bytes, at: int) -> int:
    while at < len(data) and data[at] in _WS:
        at += 1
    return at


def _array_starts(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """(offset of a '"annotations": [' key, of the first byte inside its array), in order."""
    for key in _find(fd, _KEY, size):
        head = os.pread(fd, 64, key + len(_KEY))
        at = _skip_ws(head, 0)
        if head[at : at + 1] == b":":
            at = _skip_ws(head, at + 1)
            if head[at : at + 1] == b"[":
                yield key, key + len(_KEY) + at + 1


def _byte_offset(buf: bytes, pos: int) -> int:
    """orjson's error position (characters) in `buf` as a byte offset."""
    return pos if buf.isascii() else len(buf.decode("utf-8", "replace")[:pos].encode())


def _windows(fd: int, start: int, size: int) -> tuple[list[tuple[int, int]], int] | None:
    """(offset, length) of windows of whole elements of the array from `start`, and the offset
    of its ']'; None if the array does not parse this way (the caller parses the file whole)."""
    spans: list[tuple[int, int]] = []
    at, window = start, CHUNK_BYTES
    while at < size:
        data = os.pread(fd, window, at)
        cuts = [m.start() + 1 for m in _BETWEEN.finditer(data)][::-1]
        for cut in [*cuts, len(data)]:
            buf = b"[" + data[:cut] + (b"]" if cut < len(data) else b"")
            try:
                orjson.loads(buf)
            except orjson.JSONDecodeError as err:
                if err.msg == _AFTER_END:  # the array ends in this window
                    end = buf.rfind(b"]", 0, _byte_offset(buf, err.pos)) - 1
                    return [*spans, (at, end)], at + end
                continue  # a cut inside a string or a value: an earlier one
            if cut == len(data):
                break  # the whole window parsed, the array still open: a bigger one
            spans.append((at, cut))
            at += _skip_ws(data, data.index(b",", cut) + 1)
            window = CHUNK_BYTES
            break
        else:
            if at + len(data) >= size:
                return None
            window *= 2  # no whole element in the window
            continue
        if cut == len(data):
            if at + len(data) >= size:
                return None
            window *= 2
    return None


def stream_instances(ann_file: Path) -> tuple[dict[str, Any], Iterable[dict[str, Any]]]:
    """The instances JSON without its 'annotations' (checked as `load_instances` does), and
    those annotations, parsed a window at a time as they are iterated (once).

    A file where this finds no top-level 'annotations' array is parsed whole (its errors
    named by `load_instances`)."""
    try:
        fd = os.open(ann_file, os.O_RDONLY)
    except OSError:
        fd = -1
    try:
        found = _skeleton(fd, ann_file) if fd != -1 else None
    except OSError:  # a folder in its place
        found = None
    if found is None:
        if fd != -1:
            os.close(fd)
        content = load_instances(ann_file)
        return content, content["annotations"]
    content, spans = found

    def annotations() -> Iterator[dict[str, Any]]:
        try:
            for offset, length in spans:
                try:
                    chunk = orjson.loads(b"[" + os.pread(fd, length, offset) + b"]")
                except orjson.JSONDecodeError as err:  # checked by the first pass
                    raise DataError(f"{ann_file}: changed while it was read ({err})") from None
                if not all(type(v) is dict for v in chunk):
                    raise DataError(f"{ann_file}: 'annotations' must be a list of objects")
                yield from chunk
        finally:
            os.close(fd)

    return content, annotations()


def _skeleton(fd: int, ann_file: Path) -> tuple[dict[str, Any], list[tuple[int, int]]] | None:
    """The file parsed with its top-level 'annotations' array left out, and the array's
    windows (the key is also searched for in strings and nested objects: those are tried and
    left)."""
    size = os.fstat(fd).st_size
    for key, start in itertools.islice(_array_starts(fd, size), _TRIES):
        planned = _windows(fd, start, size)
        if planned is None:
            return None  # not valid JSON from there: the whole parse names the problem
        spans, end = planned
        head = os.pread(fd, key + len(_KEY), 0) + b":" + orjson.dumps(_STREAMED)
        try:
            content = orjson.loads(head + os.pread(fd, size - end - 1, end + 1))
        except orjson.JSONDecodeError:
            continue  # a key inside a string
        if isinstance(content, dict) and content.get("annotations") == _STREAMED:
            content["annotations"] = []
            _check_lists(content, ann_file)
            return content, [(o, n) for o, n in spans if n > 0]
    return None


def categories(content: dict[str, Any], ann_file: Path) -> dict[int, dict[str, Any]]:
    """{COCO id: category} of an instances JSON."""
    out: dict[int, dict[str, Any]] = {}
    for i, cat in enumerate(content["categories"]):
        cat_id = _int(cat, "id", f"categories[{i}]", ann_file)
        _field(cat, "name", f"categories[{i}]", ann_file)
        out[cat_id] = cat
    return out


def _images(content: dict[str, Any], image_dir: Path, ann_file: Path) -> dict[int, ImageRecord]:
    folder = os.fspath(image_dir)  # os.path.join: a Path per image costs ~5 us
    records: dict[int, ImageRecord] = {}
    for i, img in enumerate(content["images"]):
        where = f"images[{i}]"
        image_id = _int(img, "id", where, ann_file)
        name = str(_field(img, "file_name", where, ann_file))
        width, height = _int(img, "width", where, ann_file), _int(img, "height", where, ann_file)
        if width < 1 or height < 1:
            raise DataError(f"{ann_file}: image id {image_id} has size {width}x{height}")
        if image_id in records:
            raise DataError(f"{ann_file}: {where}: image id {image_id} is listed twice")
        records[image_id] = ImageRecord(os.path.join(folder, name), image_id, name, width, height)
    return records


def _box(
    ann: dict[str, Any], image: ImageRecord, label: tuple[int, str], where: str, ann_file: Path
) -> Box | None:
    """The normalised box of one annotation with its (category id, name); None if the
    converter would skip it."""
    bbox = _field(ann, "bbox", where, ann_file)
    try:
        x, y, w, h = map(float, bbox)
    except (TypeError, ValueError):
        raise DataError(
            f"{ann_file}: {where}.bbox = {bbox!r} is not [x, y, width, height]"
        ) from None
    if w <= 0 or h <= 0:
        return None  # degenerate (a NaN size compares False here and fails the next check)
    x1, y1, width, height, tol = x + w, y + h, image.width, image.height, BOX_TOLERANCE_PX
    # Written so that NaN or infinity compares False: such a box is an error.
    if not (x >= -tol and y >= -tol and x1 <= width + tol and y1 <= height + tol):
        raise DataError(
            f"{ann_file}: image id {image.image_id}: {where} (id {ann.get('id')}) has bbox "
            f"{bbox} outside its {width}x{height} image"
        )
    if x1 > width or y1 > height:
        return None  # the converter's rule: a box ending past the image is dropped
    crowd = ann.get("iscrowd", 0)
    if crowd not in (0, 1):
        raise DataError(f"{ann_file}: {where}.iscrowd = {crowd!r} is not 0 or 1")
    area = ann.get("area", w * h)
    if type(area) is not float:
        area = _float(area, f"{where}.area", ann_file)
    return Box(x / width, x1 / width, y / height, y1 / height, *label, int(crowd), area)


def _float(value: Any, where: str, ann_file: Path) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DataError(f"{ann_file}: {where} = {value!r} is not a number") from None


def records(
    ann_file: Path, image_dir: Path, *, skip_empty: bool
) -> tuple[list[ImageRecord], SplitStats, dict[int, dict[str, Any]]]:
    """The split's image records in the JSON's image order, its stats and its categories.

    Raises DataError naming the file and key for an annotation whose category or image is not
    listed, or naming the image id for a box outside its image.
    """
    with _gc_paused():  # 3x faster on COCO's train file (benchmarks/bench_coco_instances.py)
        return _records(ann_file, image_dir, skip_empty)


def _records(
    ann_file: Path, image_dir: Path, skip_empty: bool
) -> tuple[list[ImageRecord], SplitStats, dict[int, dict[str, Any]]]:
    content, annotations = stream_instances(ann_file)
    cats = categories(content, ann_file)
    names = {cat_id: str(cat["name"]) for cat_id, cat in cats.items()}
    by_id = _images(content, image_dir, ann_file)
    stats = SplitStats(source_images=len(by_id))
    for i, ann in enumerate(annotations):
        where = f"annotations[{i}]"
        cat_id = _int(ann, "category_id", where, ann_file)
        if cat_id not in names:
            raise DataError(
                f"{ann_file}: {where}.category_id = {cat_id} (annotation id {ann.get('id')}, "
                f"image id {ann.get('image_id')}) is not in 'categories' (known: {sorted(cats)})"
            )
        image = by_id.get(_int(ann, "image_id", where, ann_file))
        if image is None:
            raise DataError(f"{ann_file}: {where}.image_id = {ann['image_id']} is not in 'images'")
        box = _box(ann, image, (cat_id, names[cat_id]), where, ann_file)
        if box is None:
            stats.skipped_boxes += 1
        else:
            image.boxes.append(box)
    kept = [r for r in by_id.values() if r.boxes or not skip_empty]
    stats.images = len(kept)
    stats.skipped_images = len(by_id) - len(kept)
    stats.boxes = sum(len(r.boxes) for r in kept)
    stats.crowd_boxes = sum(b.is_crowd for r in kept for b in r.boxes)
    return kept, stats, cats
