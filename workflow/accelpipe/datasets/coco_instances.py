"""COCO instances JSON -> the image records the TFRecord converter writes, checked.

Every field the converter uses is checked, and a problem is one DataError naming the file,
the entry (`annotations[12]`) and the key, or the image id for a box outside its image. As the
tensorflow/tpu converter does, boxes with w or h <= 0 are skipped, and so are boxes that end
past the image by less than BOX_TOLERANCE_PX (rounding in the annotation); with `skip_empty`
(the train split, Habana's `--ignore_images_without_bbox`) images left without boxes are
dropped.

COCO 2017's train file is ~450 MB with ~860k annotations and millions of polygon
coordinates: it is parsed with orjson and each entry is checked in one pass, with the cyclic
garbage collector paused (a JSON tree has no cycles, and collections over millions of new
objects cost more than the parse itself). orjson reads an integer past 64 bits as a float;
integer fields therefore take ints in the int64 range (which the Example's int64 features
hold) and integral floats below 2**53 (exact), and name anything else.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
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
    for key in ("images", "annotations", "categories"):
        value = content.get(key) if isinstance(content, dict) else None
        if not isinstance(value, list) or not all(type(v) is dict for v in value):
            raise DataError(f"{ann_file}: '{key}' must be a list of objects")
    return cast("dict[str, Any]", content)  # checked above to be an object


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
    content = load_instances(ann_file)
    cats = categories(content, ann_file)
    names = {cat_id: str(cat["name"]) for cat_id, cat in cats.items()}
    by_id = _images(content, image_dir, ann_file)
    stats = SplitStats(source_images=len(by_id))
    for i, ann in enumerate(content["annotations"]):
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
