"""A tiny synthetic ADE20K in the real ADEChallengeData2016 layout, deterministic by seed.

    <root>/images/{training,validation}/ADE_{train,val}_%08d.jpg        RGB, JPEG quality 90
    <root>/annotations/{training,validation}/ADE_{train,val}_%08d.png   8-bit grey, 0..150

Each image has the nominal area of `size` at one of several aspect ratios (+-20 %), a noisy
grey background left unlabelled (0, about a third of the pixels), a band across the top and
2-4 overlapping regions (rectangles, ellipses, polygons), each of one of five learnable
classes. A class is a distinct colour AND texture, so a tiny ViT can tell them apart from a
patch; the ids span the range (1 and 150 included) to exercise both ends of the label shift.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw

from accelpipe.datasets.ade20k_layout import annotation_dir, file_stem, image_dir
from accelpipe.datasets.synthetic_images import image_size, noisy_background

# (ADE20K class id 1..150, RGB colour, texture): wall, sky, person, awning, flag.
CLASSES_USED: tuple[tuple[int, tuple[int, int, int], str], ...] = (
    (1, (200, 60, 50), "hstripes"),
    (3, (70, 130, 220), "noise"),
    (13, (60, 170, 70), "checker"),
    (87, (220, 200, 40), "vstripes"),
    (150, (160, 60, 190), "dots"),
)
SHAPES = ("rectangle", "ellipse", "polygon")
JPEG_QUALITY = 90
_PERIOD = 4  # texture period in pixels: coarse enough to survive JPEG and a 0.5x rescale


def _pattern(kind: str, width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """A (height, width) array of 0/1 for one texture."""
    yy: npt.NDArray[np.intp]
    xx: npt.NDArray[np.intp]
    yy, xx = np.mgrid[:height, :width] // _PERIOD
    if kind == "hstripes":
        return yy % 2
    if kind == "vstripes":
        return xx % 2
    if kind == "checker":
        return (yy + xx) % 2
    if kind == "dots":
        return (yy % 2) & (xx % 2)
    return (rng.random((height, width)) < 0.5).astype(np.int64)  # noise


def _texture(
    colour: Sequence[int], kind: str, width: int, height: int, rng: np.random.Generator
) -> np.ndarray:
    """(height, width, 3) uint8: the colour at 100 % on the pattern's 1s and 55 % on its 0s."""
    shade = 0.55 + 0.45 * _pattern(kind, width, height, rng)[..., None]
    return np.clip(np.asarray(colour) * shade, 0, 255).astype(np.uint8)


def _outline(
    shape: str, box: tuple[float, float, float, float], rng: np.random.Generator
) -> list[float] | list[tuple[float, float]]:
    """Points (polygon) or the box (rectangle, ellipse) to draw `shape` in."""
    x, y, w, h = box
    if shape != "polygon":
        return [x, y, x + w, y + h]
    angles = np.sort(rng.uniform(0, 2 * math.pi, int(rng.integers(3, 7))))
    return [(x + w / 2 * (1 + math.cos(a)), y + h / 2 * (1 + math.sin(a))) for a in angles]


def _class_id(rng: np.random.Generator) -> int:
    return CLASSES_USED[int(rng.integers(len(CLASSES_USED)))][0]


def _label_map(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """(height, width) uint8 class ids: a band across the top (a scene's wall or sky), then
    2-4 objects; 0 where neither covers the background."""
    canvas = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(canvas)
    draw.rectangle([0, 0, width, rng.uniform(0.3, 0.6) * height], fill=_class_id(rng))
    for _ in range(int(rng.integers(2, 5))):
        class_id = _class_id(rng)
        w, h = rng.uniform(0.25, 0.6) * width, rng.uniform(0.25, 0.6) * height
        box = (rng.uniform(0, width - w), rng.uniform(0, height - h), w, h)
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        outline = _outline(shape, box, rng)
        if shape == "ellipse":
            draw.ellipse(outline, fill=class_id)
        elif shape == "rectangle":
            draw.rectangle(outline, fill=class_id)
        else:
            draw.polygon(outline, fill=class_id)
    return np.array(canvas)


def _example(width: int, height: int, rng: np.random.Generator) -> tuple[Image.Image, Image.Image]:
    """One (RGB image, L annotation) pair."""
    pixels = np.array(noisy_background(rng, width, height))
    label = _label_map(width, height, rng)
    for class_id, colour, kind in CLASSES_USED:
        mask = label == class_id
        if mask.any():
            pixels[mask] = _texture(colour, kind, width, height, rng)[mask]
    return Image.fromarray(pixels, "RGB"), Image.fromarray(label, "L")


def synthesize(
    root: str | Path,
    train_images: int = 24,
    val_images: int = 8,
    size: Sequence[int] = (96, 72),
    seed: int = 0,
) -> Path:
    """Write the synthetic ADE20K layout under `root` (created); return `root`.

    `size` is the nominal (width, height); images are numbered from 1 as in the real set.
    """
    root = Path(root)
    rng = np.random.default_rng(seed)
    for split, count in (("train", train_images), ("val", val_images)):
        images, labels = image_dir(root, split), annotation_dir(root, split)
        images.mkdir(parents=True)
        labels.mkdir(parents=True)
        for index in range(1, count + 1):
            image, label = _example(*image_size(rng, size), rng)
            stem = file_stem(split, index)
            image.save(images / f"{stem}.jpg", format="JPEG", quality=JPEG_QUALITY)
            label.save(labels / f"{stem}.png", format="PNG")
    return root
