"""A torch Dataset over a prepared image index, the ImageNet transforms and the loader.

The index (written by ``datasets/imagenet.py``) is ``<prepared>/{train,val}.csv`` with the
header ``path,label,bytes,width,height``; ``path`` is relative to the ImageFolder root named
by ``<prepared>/config.json`` key ``root``; ``<prepared>/classes.json`` lists the ``wnids``.

Images are decoded with PIL in ``__getitem__``, so decoding runs in the DataLoader workers.
Transforms are PIL + numpy (no torchvision): train is RandomResizedCrop + horizontal flip,
eval is resize-shorter-side + centre crop; both end in a normalized CHW float32 tensor.

Determinism with workers: ``make_loader`` seeds the sampler's generator, and the DataLoader
derives each worker's torch seed from it (``torch.initial_seed()`` in the worker is
base_seed + worker_id). A ``TrainTransform`` without an explicit generator builds its numpy
generator from ``torch.initial_seed()`` the first time it runs in a process, so every worker
draws a different, reproducible stream; the same seed gives the same batches.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler

from accelpipe.core.errors import DataError

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SPLITS = ("train", "val")
# Fold /255 and the normalization into one multiply-add per pixel.
_SCALE = (1.0 / (255.0 * np.asarray(STD))).astype(np.float32)
_SHIFT = (np.asarray(MEAN) / np.asarray(STD)).astype(np.float32)

Transform = Callable[[Image.Image], torch.Tensor]
Box = tuple[int, int, int, int]  # left, top, width, height
_Item = TypeVar("_Item")


def to_normalized_tensor(img: Image.Image | np.ndarray) -> torch.Tensor:
    """uint8 HWC RGB -> float32 CHW, ``(x / 255 - MEAN) / STD``."""
    arr = np.asarray(img, dtype=np.uint8)
    out = arr.astype(np.float32) * _SCALE - _SHIFT
    return torch.from_numpy(np.ascontiguousarray(out.transpose(2, 0, 1)))


def random_resized_crop_box(
    width: int,
    height: int,
    rng: np.random.Generator,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> Box:
    """A random crop covering ``scale`` of the area with aspect (w/h) in ``ratio``.

    Ten tries at a random area and log-uniform aspect; if none fits inside the image, the
    largest centred crop whose aspect is clamped into ``ratio``.
    """
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left = int(rng.integers(0, width - w + 1))
            top = int(rng.integers(0, height - h + 1))
            return left, top, w, h
    aspect = width / height
    if aspect < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif aspect > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


class TrainTransform:
    """RandomResizedCrop to ``size`` (bilinear), horizontal flip with ``flip_p``, normalize.

    ``rng``: an explicit generator (single process, tests). Leave it None with DataLoader
    workers: each process then seeds its own from ``torch.initial_seed()`` (module docstring).
    """

    def __init__(
        self,
        size: int = 224,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        flip_p: float = 0.5,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.size, self.scale, self.ratio, self.flip_p = size, scale, ratio, flip_p
        self._rng, self._explicit, self._pid = rng, rng is not None, -1

    def _generator(self) -> np.random.Generator:
        # Keyed on the pid: a copy forked or pickled into a worker must not replay its
        # parent's stream, and each worker's torch seed differs (base_seed + worker_id).
        if self._rng is None or (not self._explicit and self._pid != os.getpid()):
            self._rng = np.random.default_rng(torch.initial_seed())
            self._pid = os.getpid()
        return self._rng

    def __call__(self, img: Image.Image) -> torch.Tensor:
        rng = self._generator()
        left, top, w, h = random_resized_crop_box(
            img.width, img.height, rng, self.scale, self.ratio
        )
        box = (left, top, left + w, top + h)
        # One call: PIL resamples just the box, with antialiasing when it shrinks.
        arr = np.asarray(img.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box))
        if rng.random() < self.flip_p:
            arr = arr[:, ::-1]
        return to_normalized_tensor(arr)


class EvalTransform:
    """Resize the shorter side to ``round(size / crop_fraction)``, centre crop, normalize."""

    def __init__(self, size: int = 224, crop_fraction: float = 0.875) -> None:
        if not 0 < crop_fraction <= 1:
            raise ValueError(f"crop_fraction must be in (0, 1], got {crop_fraction}")
        self.size = size
        self.resize = round(size / crop_fraction)

    def __call__(self, img: Image.Image) -> torch.Tensor:
        w, h = img.size
        scale = self.resize / min(w, h)
        new_w, new_h = round(w * scale), round(h * scale)
        img = img.resize((new_w, new_h), Image.Resampling.BILINEAR)
        left, top = round((new_w - self.size) / 2), round((new_h - self.size) / 2)
        return to_normalized_tensor(img.crop((left, top, left + self.size, top + self.size)))


def _read_index(csv_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(paths as a bytes array, int64 labels) of one split's CSV."""
    if not csv_path.is_file():
        raise DataError(f"missing image index {csv_path} (run the prepare step)")
    with csv_path.open(newline="") as f:
        reader = csv.DictReader(f)
        if not {"path", "label"} <= set(reader.fieldnames or ()):
            raise DataError(f"{csv_path}: expected columns path,label,..., got {reader.fieldnames}")
        try:
            rows = [(r["path"], int(r["label"])) for r in reader]
        except (TypeError, ValueError) as err:
            raise DataError(f"{csv_path}: bad row: {err}") from None
    # A numpy bytes array, not a list of str: forked workers touching a million Python
    # objects would copy their pages (refcounts), growing each worker's memory.
    paths = np.array([p.encode() for p, _ in rows], dtype=np.bytes_)
    return paths, np.array([label for _, label in rows], dtype=np.int64)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return cast("dict[str, Any]", json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(f"cannot read {path}: {err}") from None


class IndexedImages(Dataset[tuple[torch.Tensor, int]]):
    """One split of a prepared index; items are ``(CHW float32 tensor, int label)``."""

    def __init__(self, prepared: Path, split: str, transform: Transform) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        prepared = Path(prepared)
        self.root = Path(_read_json(prepared / "config.json")["root"])
        self.classes: list[str] = _read_json(prepared / "classes.json")["wnids"]
        self.paths, self.labels = _read_index(prepared / f"{split}.csv")
        n = len(self.classes)
        if len(self.labels) and (self.labels.min() < 0 or self.labels.max() >= n):
            raise DataError(f"{prepared / split}.csv: labels outside 0..{n - 1} (classes.json)")
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def load(self, index: int) -> Image.Image:
        """The decoded RGB image (CMYK and greyscale JPEGs are converted)."""
        path = self.root / self.paths[index].decode()
        # Declared: PIL's __enter__ returns typing.Self, which mypy reads as Any for Python 3.10.
        img: Image.Image
        try:
            with Image.open(path) as img:
                img.load()  # decode now, inside the try: truncated files fail here
                return img if img.mode == "RGB" else img.convert("RGB")
        except (OSError, ValueError, Image.DecompressionBombError) as err:
            raise DataError(f"cannot decode image {path}: {err}") from None

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.load(index)), int(self.labels[index])


def seed_worker(worker_id: int) -> None:
    """Seed numpy's and Python's global RNGs from this worker's torch seed."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def make_loader(
    dataset: Dataset[_Item],
    batch_size: int,
    shuffle: bool,
    workers: int,
    pin_memory: bool,
    seed: int,
    drop_last: bool,
    sampler: Sampler[int] | None = None,
) -> DataLoader[_Item]:
    """A seeded DataLoader; workers persist across epochs. ``sampler`` (e.g. a
    DistributedSampler) replaces shuffling."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle and sampler is None,
        sampler=sampler,
        num_workers=workers,
        pin_memory=pin_memory,
        drop_last=drop_last,
        generator=generator,
        worker_init_fn=seed_worker if workers > 0 else None,
        persistent_workers=workers > 0,
    )
