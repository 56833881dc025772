"""COCO instances -> TFRecord shards in the tensorflow/tpu `create_coco_tf_record` format.

One tf.train.Example per image with the features the SSD input pipeline reads:

    image/encoded            the JPEG file's bytes, not re-encoded
    image/format             b"jpeg"
    image/filename           file_name from the instances JSON
    image/source_id          the COCO image id as a decimal string
    image/key/sha256         hex sha256 of image/encoded
    image/height, width      int64, from the instances JSON (checked against the JPEG header)
    image/object/bbox/xmin, xmax, ymin, ymax   floats normalised by the image width / height
    image/object/class/label int64 COCO category id (1..90, with gaps)
    image/object/class/text  category name
    image/object/is_crowd    int64, stored and not filtered (crowd boxes are trained on)
    image/object/area        float, the annotation's area

As the converter does, boxes with w or h <= 0 are skipped, and so are boxes that end past the
image by less than BOX_TOLERANCE_PX (rounding in the annotation). A box further outside is an
error naming the image id. With `skip_empty` (the train split, Habana's
`--ignore_images_without_bbox`) images left without boxes are not written.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelpipe.datasets.tfrecord import bytes_feature, example, float_feature, int64_feature
from accelpipe.errors import DataError
from accelpipe.io import read_json

BOX_TOLERANCE_PX = 1.0
# Start-of-frame markers (baseline, progressive, lossless, arithmetic...): they hold the size.
_SOF_MARKERS = frozenset(
    {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
)
# Markers without a length field.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})
_EOI_SEARCH_BYTES = 1024  # tolerate a little padding after the end-of-image marker


@dataclass
class Box:
    xmin: float
    xmax: float
    ymin: float
    ymax: float
    label: int
    text: str
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


# ----------------------------------------------------------------------------- instances JSON


def _list(content: Any, key: str, ann_file: Path) -> list[dict[str, Any]]:
    value = content.get(key) if isinstance(content, dict) else None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise DataError(f"{ann_file}: '{key}' must be a list of objects")
    return value


def _field(entry: dict[str, Any], key: str, where: str, ann_file: Path) -> Any:
    try:
        return entry[key]
    except KeyError:
        raise DataError(f"{ann_file}: {where} has no '{key}'") from None


def _int(entry: dict[str, Any], key: str, where: str, ann_file: Path) -> int:
    value = _field(entry, key, where, ann_file)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DataError(f"{ann_file}: {where}.{key} = {value!r} is not an integer") from None


def load_instances(ann_file: Path) -> dict[str, Any]:
    """The instances JSON, with 'images', 'annotations' and 'categories' checked to be lists."""
    if not ann_file.is_file():
        raise DataError(f"{ann_file}: annotation file not found")
    content = read_json(ann_file)
    for key in ("images", "annotations", "categories"):
        _list(content, key, ann_file)
    return content


def categories(content: dict[str, Any], ann_file: Path) -> dict[int, dict[str, Any]]:
    """{COCO id: category} of an instances JSON."""
    out: dict[int, dict[str, Any]] = {}
    for i, cat in enumerate(content["categories"]):
        cat_id = _int(cat, "id", f"categories[{i}]", ann_file)
        _field(cat, "name", f"categories[{i}]", ann_file)
        out[cat_id] = cat
    return out


def _box(ann: dict[str, Any], image: ImageRecord, where: str, ann_file: Path) -> Box | None:
    """The normalised box of one annotation; None if the converter would skip it."""
    bbox = _field(ann, "bbox", where, ann_file)
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
        return None
    tol = BOX_TOLERANCE_PX
    if x < -tol or y < -tol or x + w > image.width + tol or y + h > image.height + tol:
        raise DataError(
            f"{ann_file}: image id {image.image_id}: {where} (id {ann.get('id')}) has bbox "
            f"{bbox} outside its {image.width}x{image.height} image"
        )
    if x + w > image.width or y + h > image.height:
        return None  # the converter's rule: a box ending past the image is dropped
    return Box(
        xmin=x / image.width,
        xmax=(x + w) / image.width,
        ymin=y / image.height,
        ymax=(y + h) / image.height,
        label=0,
        text="",
        is_crowd=int(ann.get("iscrowd", 0)),
        area=float(ann.get("area", w * h)),
    )


def _images(content: dict[str, Any], image_dir: Path, ann_file: Path) -> dict[int, ImageRecord]:
    records: dict[int, ImageRecord] = {}
    for i, img in enumerate(content["images"]):
        where = f"images[{i}]"
        image_id = _int(img, "id", where, ann_file)
        name = str(_field(img, "file_name", where, ann_file))
        width, height = (_int(img, k, where, ann_file) for k in ("width", "height"))
        if width < 1 or height < 1:
            raise DataError(f"{ann_file}: image id {image_id} has size {width}x{height}")
        records[image_id] = ImageRecord(str(image_dir / name), image_id, name, width, height)
    return records


def records(
    ann_file: Path, image_dir: Path, *, skip_empty: bool
) -> tuple[list[ImageRecord], SplitStats, dict[int, dict[str, Any]]]:
    """The split's image records in the JSON's image order, its stats and its categories.

    Raises DataError naming the file and key for an annotation whose category or image is not
    listed, or naming the image id for a box outside its image.
    """
    content = load_instances(ann_file)
    cats = categories(content, ann_file)
    by_id = _images(content, image_dir, ann_file)
    stats = SplitStats(source_images=len(by_id))
    for i, ann in enumerate(content["annotations"]):
        where = f"annotations[{i}]"
        cat_id = _int(ann, "category_id", where, ann_file)
        if cat_id not in cats:
            raise DataError(
                f"{ann_file}: {where}.category_id = {cat_id} (annotation id {ann.get('id')}, "
                f"image id {ann.get('image_id')}) is not in 'categories' (known: {sorted(cats)})"
            )
        image = by_id.get(_int(ann, "image_id", where, ann_file))
        if image is None:
            raise DataError(f"{ann_file}: {where}.image_id = {ann['image_id']} is not in 'images'")
        box = _box(ann, image, where, ann_file)
        if box is None:
            stats.skipped_boxes += 1
            continue
        box.label, box.text = cat_id, str(cats[cat_id]["name"])
        image.boxes.append(box)
    kept = [r for r in by_id.values() if r.boxes or not skip_empty]
    stats.images = len(kept)
    stats.skipped_images = len(by_id) - len(kept)
    stats.boxes = sum(len(r.boxes) for r in kept)
    stats.crowd_boxes = sum(b.is_crowd for r in kept for b in r.boxes)
    return kept, stats, cats


# ----------------------------------------------------------------------------- JPEG and Example


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's start-of-frame header, or None if the bytes are not a
    complete JPEG (no SOI, no SOF, a segment running past the end, or no EOI near the end).

    Reads only the marker segments before the image data: about a microsecond per image, where
    decoding would cost milliseconds.
    """
    if data[:2] != b"\xff\xd8" or data.rfind(b"\xff\xd9", -_EOI_SEARCH_BYTES) < 0:
        return None
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if marker in _SOF_MARKERS:
            if pos + 9 > end or length < 8:
                return None
            height, width = struct.unpack_from(">HH", data, pos + 5)
            return width, height
        if marker == 0xDA or length < 2:  # image data before any frame header
            return None
        pos += 2 + length
    return None


def image_files(record: ImageRecord) -> tuple[str]:
    """The files `encode` reads for this record (read ahead by tfrecord.write_shards)."""
    return (record.path,)


def encode(record: ImageRecord) -> bytes:
    """The serialized Example of one image; DataError naming the image id if its JPEG is bad."""
    try:
        with open(record.path, "rb") as file:  # not Path: ~5 us a record
            data = file.read()
    except OSError as err:
        raise DataError(f"{record.path}: image id {record.image_id}: {err.strerror}") from None
    size = jpeg_size(data)
    if size is None:
        raise DataError(f"{record.path}: image id {record.image_id}: not a complete JPEG file")
    if size != (record.width, record.height):
        raise DataError(
            f"{record.path}: image id {record.image_id}: JPEG is {size[0]}x{size[1]}, the "
            f"instances JSON says {record.width}x{record.height}"
        )
    return example(_features(record, data))


def _features(record: ImageRecord, data: bytes) -> dict[str, bytes]:
    boxes: Sequence[Box] = record.boxes
    return {
        "image/height": int64_feature(record.height),
        "image/width": int64_feature(record.width),
        "image/filename": bytes_feature(record.file_name),
        "image/source_id": bytes_feature(str(record.image_id)),
        "image/key/sha256": bytes_feature(hashlib.sha256(data).hexdigest()),
        "image/encoded": bytes_feature(data),
        "image/format": bytes_feature("jpeg"),
        "image/object/bbox/xmin": float_feature([b.xmin for b in boxes]),
        "image/object/bbox/xmax": float_feature([b.xmax for b in boxes]),
        "image/object/bbox/ymin": float_feature([b.ymin for b in boxes]),
        "image/object/bbox/ymax": float_feature([b.ymax for b in boxes]),
        "image/object/class/text": bytes_feature([b.text for b in boxes]),
        "image/object/class/label": int64_feature([b.label for b in boxes]),
        "image/object/is_crowd": int64_feature([b.is_crowd for b in boxes]),
        "image/object/area": float_feature([b.area for b in boxes]),
    }
