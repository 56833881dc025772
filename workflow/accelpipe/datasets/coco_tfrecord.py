"""COCO image records -> Examples in the tensorflow/tpu `create_coco_tf_record` format.

The records come from the instances JSON (accelpipe.datasets.coco_instances); one
tf.train.Example per image with the features the SSD input pipeline reads:

    image/encoded            the image file's bytes, not re-encoded
    image/format             b"jpeg" or b"png": what the bytes are, whatever the file's name
    image/filename           file_name from the instances JSON
    image/source_id          the COCO image id as a decimal string
    image/key/sha256         hex sha256 of image/encoded
    image/height, width      int64, from the instances JSON (checked against the image header)
    image/object/bbox/xmin, xmax, ymin, ymax   floats normalised by the image width / height
    image/object/class/label int64 COCO category id (1..90, with gaps)
    image/object/class/text  category name
    image/object/is_crowd    int64, stored and not filtered (crowd boxes are trained on)
    image/object/area        float, the annotation's area

An image that is not a complete JPEG or PNG (accelpipe.datasets.image_bytes: the formats the
input pipeline's decoder and the reference's image/format field take; a PNG under a `.jpg`
name is a PNG), or whose header size differs from the JSON's, is a DataError naming the
image id.
"""

from __future__ import annotations

import hashlib

from accelpipe.core.errors import DataError
from accelpipe.datasets import image_bytes
from accelpipe.datasets.coco_instances import Box, ImageRecord
from accelpipe.datasets.tfrecord import bytes_feature, example, float_feature, int64_feature


def image_files(record: ImageRecord) -> tuple[str]:
    """The files `encode` reads for this record (read ahead by tfrecord.write_splits)."""
    return (record.path,)


def encode(record: ImageRecord) -> bytes:
    """The serialized Example of one image; DataError naming the image id if its file is not
    a complete JPEG or PNG (image_bytes: by its bytes, whatever its name) or not its size."""
    try:
        with open(record.path, "rb") as file:  # not Path: ~5 us a record
            data = file.read()
    except OSError as err:
        raise DataError(f"{record.path}: image id {record.image_id}: {err.strerror}") from None
    try:
        image_format, width, height = image_bytes.image_header(data)
    except image_bytes.ImageProblem as problem:
        raise DataError(f"{record.path}: image id {record.image_id}: {problem}") from None
    if (width, height) != (record.width, record.height):
        raise DataError(
            f"{record.path}: image id {record.image_id}: {image_bytes.name(image_format)} is "
            f"{width}x{height}, the instances JSON says {record.width}x{record.height}"
        )
    return example(_features(record, data, _FORMATS[image_format]))


_FORMATS = {f: bytes_feature(f) for f in image_bytes.FORMATS}
_NO_BOXES: tuple[tuple[()], ...] = ((),) * len(Box._fields)


def _features(record: ImageRecord, data: bytes, image_format: bytes) -> dict[str, bytes]:
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
        "image/format": image_format,
        "image/object/bbox/xmin": float_feature(xmin),
        "image/object/bbox/xmax": float_feature(xmax),
        "image/object/bbox/ymin": float_feature(ymin),
        "image/object/bbox/ymax": float_feature(ymax),
        "image/object/class/text": bytes_feature(text),
        "image/object/class/label": int64_feature(label),
        "image/object/is_crowd": int64_feature(is_crowd),
        "image/object/area": float_feature(area),
    }
