"""A tiny synthetic COCO 2017 in the real layout, deterministic by seed.

    <root>/train2017/000000xxxxxx.jpg
    <root>/val2017/000000xxxxxx.jpg
    <root>/annotations/instances_train2017.json
    <root>/annotations/instances_val2017.json

Each category is one learnable colour + shape drawn on a noisy grey background, under COCO's
real (non-contiguous) category id, name and supercategory. The instances JSON has every field
the real one has: polygon segmentations for ordinary objects and, like real COCO, a few
`iscrowd=1` objects with an uncompressed column-major RLE. Some train images have no objects,
which the train split of the TFRecord conversion must skip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from accelpipe.core.io import write_json
from accelpipe.datasets.synthetic_images import image_size, noisy_background

# (COCO id, name, supercategory, RGB colour, shape): ids as in the real COCO 2017 list.
CATEGORIES: tuple[tuple[int, str, str, tuple[int, int, int], str], ...] = (
    (1, "person", "person", (220, 40, 40), "ellipse"),
    (3, "car", "vehicle", (40, 80, 220), "rectangle"),
    (18, "dog", "animal", (40, 170, 60), "triangle"),
    (44, "bottle", "kitchen", (230, 200, 30), "diamond"),
    (62, "chair", "furniture", (150, 60, 190), "hexagon"),
)
LICENSES = [
    {
        "url": "http://creativecommons.org/licenses/by/2.0/",
        "id": 4,
        "name": "Attribution License",
    },
    {
        "url": "http://creativecommons.org/licenses/by-nc-sa/2.0/",
        "id": 1,
        "name": "Attribution-NonCommercial-ShareAlike License",
    },
]
CROWD_EVERY = 7  # every 7th object of a split is a crowd region (real COCO: ~1 %)
EMPTY_EVERY = 6  # every 6th train image has no objects (real train2017: ~1 %)


def _polygon(shape: str, x: float, y: float, w: float, h: float) -> list[tuple[float, float]]:
    """Outline of `shape` inscribed in the box (x, y, w, h), as (x, y) points."""
    cx, cy = x + w / 2, y + h / 2
    if shape == "rectangle":
        return [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]
    if shape == "triangle":
        return [(cx, y), (x + w, y + h), (x, y + h)]
    if shape == "diamond":
        return [(cx, y), (x + w, cy), (cx, y + h), (x, cy)]
    sides = 6 if shape == "hexagon" else 24
    return [
        (
            cx + w / 2 * math.cos(2 * math.pi * k / sides),
            cy + h / 2 * math.sin(2 * math.pi * k / sides),
        )
        for k in range(sides)
    ]


def _shoelace(points: Sequence[tuple[float, float]]) -> float:
    xs, ys = np.array(points).T
    return float(abs(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))) / 2)


def _bbox(points: Sequence[tuple[float, float]], size: tuple[int, int]) -> list[float]:
    """[x, y, w, h] to 2 decimals, never past the image even after rounding."""
    xs, ys = np.array(points).T
    x, y = round(float(xs.min()), 2), round(float(ys.min()), 2)
    w = min(round(float(xs.max() - xs.min()), 2), size[0] - x)
    h = min(round(float(ys.max() - ys.min()), 2), size[1] - y)
    return [x, y, round(w, 2), round(h, 2)]


def rle_encode(mask: np.ndarray) -> dict[str, Any]:
    """Uncompressed COCO RLE of a binary (H, W) mask: run lengths in column-major order,
    starting with a (possibly empty) run of zeros, as real COCO stores crowd regions."""
    flat = np.asarray(mask, dtype=bool).flatten(order="F")
    change = np.flatnonzero(np.diff(flat.astype(np.int8))) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0]:
        counts = [0, *counts]
    return {"counts": counts, "size": [int(mask.shape[0]), int(mask.shape[1])]}


def _objects(
    rng: np.random.Generator, canvas: Image.Image, n: int
) -> list[tuple[int, str, list[tuple[float, float]]]]:
    """Draw `n` objects on `canvas`; return (category id, shape, outline) per object."""
    width, height = canvas.size
    draw = ImageDraw.Draw(canvas)
    out = []
    for _ in range(n):
        cat_id, _name, _super, colour, shape = CATEGORIES[int(rng.integers(len(CATEGORIES)))]
        w = rng.uniform(0.2, 0.6) * width
        h = rng.uniform(0.2, 0.6) * height
        # A pixel's margin keeps the rounded box inside the image (the converter skips others).
        x, y = rng.uniform(1, width - w - 1), rng.uniform(1, height - h - 1)
        points = _polygon(shape, x, y, w, h)
        tint = tuple(int(np.clip(c + rng.integers(-15, 16), 0, 255)) for c in colour)
        draw.polygon(points, fill=tint)
        out.append((cat_id, shape, points))
    return out


def _annotation(
    ann_id: int,
    image_id: int,
    cat_id: int,
    points: list[tuple[float, float]],
    crowd: bool,
    size: tuple[int, int],
) -> dict[str, Any]:
    width, height = size
    # The JSON stores 2 decimals: area and box come from the stored outline, not the drawn one.
    points = [(round(px, 2), round(py, 2)) for px, py in points]
    entry: dict[str, Any] = {
        "id": ann_id,
        "image_id": image_id,
        "category_id": cat_id,
        "iscrowd": int(crowd),
    }
    if crowd:
        canvas = Image.new("1", (width, height))
        ImageDraw.Draw(canvas).polygon(points, fill=1)
        mask = np.array(canvas, dtype=bool)
        entry["segmentation"] = rle_encode(mask)
        entry["area"] = float(mask.sum())
    else:
        entry["segmentation"] = [[v for p in points for v in p]]
        entry["area"] = round(_shoelace(points), 2)
    entry["bbox"] = _bbox(points, size)
    return entry


def _split(
    root: Path,
    split: str,
    count: int,
    size: Sequence[int],
    rng: np.random.Generator,
    first_ids: tuple[int, int],
) -> dict[str, Any]:
    """Write one split's JPEGs and return its instances JSON content."""
    folder = root / f"{split}2017"
    folder.mkdir(parents=True)
    images, annotations = [], []
    image_id, ann_id = first_ids
    for i in range(count):
        image_id += int(rng.integers(1, 50))  # ids have gaps, as in real COCO
        width, height = image_size(rng, size)
        canvas = noisy_background(rng, width, height)
        empty = split == "train" and i % EMPTY_EVERY == EMPTY_EVERY - 1
        for cat_id, _shape, points in _objects(
            rng, canvas, 0 if empty else int(rng.integers(1, 5))
        ):
            ann_id += 1
            crowd = ann_id % CROWD_EVERY == 0
            annotations.append(
                _annotation(ann_id, image_id, cat_id, points, crowd, (width, height))
            )
        name = f"{image_id:012d}.jpg"
        canvas.save(folder / name, format="JPEG", quality=90)
        images.append(_image_entry(image_id, name, split, width, height, rng))
    return {
        "info": _info(),
        "licenses": LICENSES,
        "images": images,
        "annotations": annotations,
        "categories": [{"supercategory": s, "id": i, "name": n} for i, n, s, _c, _sh in CATEGORIES],
    }


def _image_entry(
    image_id: int, name: str, split: str, width: int, height: int, rng: np.random.Generator
) -> dict[str, Any]:
    return {
        "license": LICENSES[int(rng.integers(len(LICENSES)))]["id"],
        "file_name": name,
        "coco_url": f"http://images.cocodataset.org/{split}2017/{name}",
        "height": height,
        "width": width,
        "date_captured": "2013-11-14 16:28:13",
        "flickr_url": f"http://farm4.staticflickr.com/synthetic/{name}",
        "id": image_id,
    }


def _info() -> dict[str, Any]:
    return {
        "description": "accelpipe synthetic COCO 2017 stand-in",
        "url": "http://cocodataset.org",
        "version": "1.0",
        "year": 2017,
        "contributor": "accelpipe",
        "date_created": "2017/09/01",
    }


def synthesize(
    root: str | Path,
    *,
    train_images: int = 48,
    val_images: int = 16,
    size: Sequence[int] = (96, 72),
    seed: int = 0,
) -> Path:
    """Write the synthetic COCO layout under `root` (created); return `root`.

    `size` is the nominal (width, height): each image keeps that area +-20 % at one of
    synthetic_images.ASPECTS.
    """
    root = Path(root)
    (root / "annotations").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    # Val ids and annotation ids start far above train's, so the splits never share one.
    for split, count, first in (
        ("train", train_images, (0, 0)),
        ("val", val_images, (10**6, 10**6)),
    ):
        content = _split(root, split, count, size, rng, first)
        write_json(root / "annotations" / f"instances_{split}2017.json", content)
    return root
