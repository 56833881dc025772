"""ADE20K image + annotation pairs -> TFRecord Examples, one per image.

Features (FEATURES, also written into dataset.json):

    image/encoded    the image file's bytes, not re-encoded
    image/format     b"jpeg" or b"png": what the bytes are, whatever the file's name
    image/filename   the image's file name, e.g. ADE_train_00000001.jpg (the image id)
    image/height     int64, from the image header (the annotation is checked to be the same size)
    image/width      int64
    label/encoded    the annotation PNG's bytes, not re-encoded: raw values 0..150
    label/format     b"png"

`pairs` is the plan (every image with its annotation, sorted by name); `encode` runs in the
`tfrecord.write_splits` workers and checks each pair without decoding it: a complete JPEG (or
a PNG, even under a `.jpg` name: accelpipe.datasets.image_bytes, the one image check), an
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from accelpipe.core.errors import DataError
from accelpipe.datasets import image_bytes
from accelpipe.datasets.ade20k_layout import NUM_CLASSES, annotation_dir, image_dir
from accelpipe.datasets.image_bytes import png_header, png_problem
from accelpipe.datasets.tfrecord import bytes_feature, example, int64_feature

FEATURES = {
    "image/encoded": "the image file's bytes, not re-encoded",
    "image/format": "'jpeg' or 'png': what the bytes are (a .jpg file may hold a PNG)",
    "image/filename": "the image's file name (ADE_{train,val}_%08d.jpg): the image id",
    "image/height": "int64, pixels (image header; the annotation has the same size)",
    "image/width": "int64, pixels",
    "label/encoded": "the annotation PNG's bytes, not re-encoded (8-bit grey, raw 0..150)",
    "label/format": "'png'",
}
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
    try:
        image_format, width, height = image_bytes.image_header(image)
    except image_bytes.ImageProblem as problem:
        raise DataError(f"{pair.image}: {problem} (annotation {pair.label})") from None
    label_size = _check_label(label, pair, verify_labels)
    if label_size != (width, height):
        raise DataError(
            f"{pair.image} and {pair.label}: the {image_bytes.name(image_format)} is "
            f"{width}x{height}, the annotation PNG {label_size[0]}x{label_size[1]}"
        )
    return example(
        {
            "image/encoded": bytes_feature(image),
            "image/format": bytes_feature(image_format),
            "image/filename": bytes_feature(os.path.basename(pair.image)),
            "image/height": int64_feature(height),
            "image/width": int64_feature(width),
            "label/encoded": bytes_feature(label),
            "label/format": bytes_feature("png"),
        }
    )
