"""ADE20K image + annotation pairs -> TFRecord Examples, one per image.

Features (FEATURES, also written into dataset.json):

    image/encoded    the JPEG file's bytes, not re-encoded
    image/format     b"jpeg"
    image/filename   the JPEG's file name, e.g. ADE_train_00000001.jpg (the image id)
    image/height     int64, from the JPEG header (the PNG is checked to be the same size)
    image/width      int64
    label/encoded    the annotation PNG's bytes, not re-encoded: raw values 0..150
    label/format     b"png"

`pairs` is the plan (every image with its annotation, sorted by name); `encode` runs in the
`tfrecord.write_splits` workers and checks each pair without decoding it: a complete JPEG, an
8-bit single-channel PNG of the same size whose chunks are whole and pass their CRCs. Every
problem is one DataError line naming the file(s).

The annotation values (<= 150) need the PNG decoded: ~0.85 ms a label, 5x the rest of the
conversion. ade20k_input checks them where training and evaluation decode the labels anyway;
`verify_labels` (config segmenter.prepare.verify_labels, as nnU-Net's
--verify_dataset_integrity) checks them here as well, before anything trains.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from accelpipe.datasets.ade20k import NUM_CLASSES, annotation_dir, image_dir
from accelpipe.datasets.coco_tfrecord import jpeg_size
from accelpipe.datasets.tfrecord import bytes_feature, example, int64_feature
from accelpipe.errors import DataError

FEATURES = {
    "image/encoded": "the JPEG file's bytes, not re-encoded",
    "image/format": "'jpeg'",
    "image/filename": "the JPEG's file name (ADE_{train,val}_%08d.jpg): the image id",
    "image/height": "int64, pixels (JPEG header; the PNG has the same size)",
    "image/width": "int64, pixels",
    "label/encoded": "the annotation PNG's bytes, not re-encoded (8-bit grey, raw 0..150)",
    "label/format": "'png'",
}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_GREY = 0  # IHDR colour type of a single-channel grey PNG


@dataclass(frozen=True)
class Pair:
    """One image and its annotation (paths as strings: pickled to the workers)."""

    image: str
    label: str


def _listing(folder: Path, suffix: str) -> dict[str, Path]:
    if not folder.is_dir():
        raise DataError(f"{folder}: ADE20K folder not found")
    return {p.stem: p for p in folder.iterdir() if p.suffix == suffix}


def _more(lone: list[str]) -> str:
    return f" ({len(lone) - 1} more like it)" if len(lone) > 1 else ""


def pairs(raw: Path, split: str) -> list[Pair]:
    """The split's (image, annotation) pairs sorted by name; DataError naming both files for
    an image without its annotation or an annotation without its image."""
    images_dir, labels_dir = image_dir(raw, split), annotation_dir(raw, split)
    images, labels = _listing(images_dir, ".jpg"), _listing(labels_dir, ".png")
    if lone := sorted(images.keys() - labels.keys()):
        raise DataError(
            f"{images[lone[0]]}: image without its annotation {labels_dir / lone[0]}.png"
            + _more(lone)
        )
    if lone := sorted(labels.keys() - images.keys()):
        raise DataError(
            f"{labels[lone[0]]}: annotation without its image {images_dir / lone[0]}.jpg"
            + _more(lone)
        )
    if not images:
        raise DataError(f"{images_dir}: no .jpg images")
    return [Pair(str(images[s]), str(labels[s])) for s in sorted(images)]


def _read(path: str) -> bytes:
    try:  # open(), not Path: building a Path costs ~5 us, a tenth of reading the file
        with open(path, "rb") as file:
            return file.read()
    except OSError as err:
        raise DataError(f"{path}: {err.strerror}") from None


def png_header(data: bytes) -> tuple[int, int, int, int] | None:
    """(width, height, bit depth, colour type) from a PNG's IHDR chunk, None if not a PNG."""
    if data[:8] != _PNG_SIGNATURE or data[12:16] != b"IHDR" or len(data) < 26:
        return None
    width, height, depth, colour = struct.unpack_from(">IIBB", data, 16)
    return width, height, depth, colour


def png_problem(data: bytes) -> str | None:
    """What is wrong with a PNG's chunks, None if nothing: each chunk whole and passing its
    CRC-32, an IDAT, an IEND. Finds truncated and corrupted files at a few microseconds a
    file; inflating and unfiltering (decoding) would cost ~0.5 ms more."""
    view, pos, end, has_data = memoryview(data), 8, len(data), False
    while pos + 8 <= end:  # a chunk: length, type, data, CRC
        (length,) = struct.unpack_from(">I", data, pos)
        kind = bytes(view[pos + 4 : pos + 8]).decode("latin-1")
        stop = pos + 8 + length
        if stop + 4 > end:
            return f"truncated in its {kind} chunk"
        if zlib.crc32(view[pos + 4 : stop]) != struct.unpack_from(">I", data, stop)[0]:
            return f"its {kind} chunk fails its CRC"
        has_data |= kind == "IDAT"
        if kind == "IEND":
            return None if has_data else "no IDAT chunk"
        pos = stop + 4
    return "truncated: no IEND chunk"


def _label_max(data: bytes, where: str) -> int:
    """The largest value of an annotation PNG (decodes it)."""
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as png:
            return int(np.asarray(png).max())
    except (OSError, SyntaxError, ValueError) as err:
        raise DataError(f"{where}: unreadable PNG ({' '.join(str(err).split())})") from None


def _check_label(data: bytes, pair: Pair, verify_labels: bool) -> tuple[int, int]:
    """(width, height) of an annotation PNG after checking its format, its chunks and, with
    `verify_labels`, its values."""
    where = f"{pair.label} (annotation of {pair.image})"
    header = png_header(data)
    if header is None:
        raise DataError(f"{where}: not a PNG file")
    width, height, depth, colour = header
    if (depth, colour) != (8, _GREY):
        raise DataError(
            f"{where}: PNG is {depth}-bit colour type {colour}, not 8-bit single-channel"
        )
    if problem := png_problem(data):
        raise DataError(f"{where}: unreadable PNG ({problem})")
    if verify_labels and (top := _label_max(data, where)) > NUM_CLASSES:
        raise DataError(f"{where}: value {top} is above the {NUM_CLASSES} classes")
    return width, height


def pair_files(pair: Pair) -> tuple[str, str]:
    """The files `encode` reads for this pair (read ahead by tfrecord.write_splits)."""
    return pair.image, pair.label


def encode(pair: Pair, verify_labels: bool = False) -> bytes:
    """The serialized Example of one pair; DataError naming the file(s) if a check fails
    (the annotation's values are checked with `verify_labels` only)."""
    image, label = _read(pair.image), _read(pair.label)
    size = jpeg_size(image)
    if size is None:
        raise DataError(f"{pair.image}: not a complete JPEG file (annotation {pair.label})")
    label_size = _check_label(label, pair, verify_labels)
    if label_size != size:
        raise DataError(
            f"{pair.image} and {pair.label}: the JPEG is {size[0]}x{size[1]}, the annotation "
            f"PNG {label_size[0]}x{label_size[1]}"
        )
    return example(
        {
            "image/encoded": bytes_feature(image),
            "image/format": bytes_feature("jpeg"),
            "image/filename": bytes_feature(os.path.basename(pair.image)),
            "image/height": int64_feature(size[1]),
            "image/width": int64_feature(size[0]),
            "label/encoded": bytes_feature(label),
            "label/format": bytes_feature("png"),
        }
    )
