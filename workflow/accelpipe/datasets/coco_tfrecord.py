"""COCO image records -> Examples in the tensorflow/tpu `create_coco_tf_record` format.

The records come from the instances JSON (accelpipe.datasets.coco_instances); one
tf.train.Example per image with the features the SSD input pipeline reads:

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

A JPEG that is not complete, or whose header size differs from the JSON's, is a DataError
naming the image id.
"""

from __future__ import annotations

import hashlib
import struct

from accelpipe.datasets.coco_instances import Box, ImageRecord
from accelpipe.datasets.tfrecord import bytes_feature, example, float_feature, int64_feature
from accelpipe.errors import DataError

# Start-of-frame markers (baseline, progressive, lossless, arithmetic...): they hold the size.
_SOF_MARKERS = frozenset(
    {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
)
# Markers without a length field.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})
_EOI_SEARCH_BYTES = 1024  # tolerate a little padding after the end-of-image marker


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
    """The files `encode` reads for this record (read ahead by tfrecord.write_splits)."""
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


_FORMAT = bytes_feature("jpeg")
_NO_BOXES: tuple[tuple, ...] = ((),) * len(Box._fields)


def _features(record: ImageRecord, data: bytes) -> dict[str, bytes]:
    # One pass over the boxes into columns (Box's field order), not one per feature.
    columns = zip(*record.boxes, strict=True) if record.boxes else _NO_BOXES
    xmin, xmax, ymin, ymax, label, text, is_crowd, area = columns
    return {
        "image/height": int64_feature(record.height),
        "image/width": int64_feature(record.width),
        "image/filename": bytes_feature(record.file_name),
        "image/source_id": bytes_feature(str(record.image_id)),
        "image/key/sha256": bytes_feature(hashlib.sha256(data).hexdigest()),
        "image/encoded": bytes_feature(data),
        "image/format": _FORMAT,
        "image/object/bbox/xmin": float_feature(xmin),
        "image/object/bbox/xmax": float_feature(xmax),
        "image/object/bbox/ymin": float_feature(ymin),
        "image/object/bbox/ymax": float_feature(ymax),
        "image/object/class/text": bytes_feature(text),
        "image/object/class/label": int64_feature(label),
        "image/object/is_crowd": int64_feature(is_crowd),
        "image/object/area": float_feature(area),
    }
