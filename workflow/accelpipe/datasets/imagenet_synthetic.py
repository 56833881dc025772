"""Synthetic ILSVRC2012: a tiny learnable dataset written as the three official archives.

`source: synthetic` (the default) packs it into tars in the official layout (described in
`accelpipe.datasets.imagenet_layout`) and imports those like a user's tars, so every default
run exercises the importer end to end. Each class is noisy, cluttered stripes of its own hue:
mean colour alone separates the classes.
"""

from __future__ import annotations

import colorsys
import gzip
import io
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.io
from PIL import Image

from accelpipe.core.errors import ConfigError
from accelpipe.datasets.imagenet_layout import (
    DEVKIT,
    GROUND_TRUTH,
    KEY,
    TRAIN_TAR,
    VAL_TAR,
    val_name,
)

_MTIME = 1_335_000_000  # fixed member times (April 2012): the tars' md5 depends on the seed only
_SYNSET_FIELDS = (
    "ILSVRC2012_ID",
    "WNID",
    "words",
    "gloss",
    "num_children",
    "children",
    "wordnet_height",
    "num_train_images",
)
_MAT_HEADER_BYTES = 116  # MAT-file v5 descriptive text; scipy writes the creation time there


def _synthetic_wnids(rng: np.random.Generator, classes: int) -> list[str]:
    """Real-looking WordNet ids n0xxxxxxx, distinct, sorted."""
    numbers = rng.choice(9_000_000, size=classes, replace=False) + 1_000_000
    return sorted(f"n{int(n):08d}" for n in numbers)


def _class_style(c: int, classes: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """(hue, stripe angle, stripe period) of a class: hue is spread evenly over the colour wheel,
    so mean colour alone separates the classes, and it survives crops and flips."""
    return c / classes, float(rng.uniform(0, np.pi)), float(rng.uniform(5, 12))


def _synth_image(
    rng: np.random.Generator, style: tuple[float, float, float], size: Sequence[int]
) -> np.ndarray:
    """One (H, W, 3) uint8 image: jittered class-coloured stripes, a distractor blob, noise."""
    hue, angle, period = style
    w, h = (max(8, round(s * rng.uniform(0.75, 1.25))) for s in size)
    colour = colorsys.hsv_to_rgb(
        (hue + rng.normal(0, 0.012)) % 1.0, rng.uniform(0.6, 0.9), rng.uniform(0.6, 0.9)
    )
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    theta = angle + rng.normal(0, 0.15)
    wave = np.sin(
        (x * np.cos(theta) + y * np.sin(theta)) * (2 * np.pi / (period * rng.uniform(0.85, 1.15)))
        + rng.uniform(0, 2 * np.pi)
    )
    img: npt.NDArray[np.floating[Any]] = np.asarray(colour, np.float32) * (
        1 + 0.3 * wave[..., None]
    )
    # A random-coloured ellipse (up to ~20% of the image) at a random place: clutter.
    cx, cy = rng.uniform(0, w), rng.uniform(0, h)
    rx, ry = rng.uniform(0.08, 0.25) * w, rng.uniform(0.08, 0.25) * h
    img[((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 < 1] = rng.uniform(0, 1, 3)
    img = img * 255 + rng.normal(0, 10, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _rngs(key: Sequence[int], count: int) -> Iterator[np.random.Generator]:
    """One generator per image, keyed by (*key, index): images do not depend on each other."""
    return (np.random.default_rng([*key, i]) for i in range(count))


def _jpeg(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _add_bytes(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), _MTIME, 0o644
    tf.addfile(info, io.BytesIO(data))


def _add_dir(tf: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mtime, info.mode = tarfile.DIRTYPE, _MTIME, 0o755
    tf.addfile(info)


def _tar_bytes(members: Iterable[tuple[str, bytes | None]]) -> bytes:
    """An uncompressed tar in memory; a None payload makes a directory member."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            if data is None:
                _add_dir(tf, name)
            else:
                _add_bytes(tf, name, data)
    return buf.getvalue()


def synthesize_tars(
    dest: str | Path,
    *,
    classes: int = 10,
    train_per_class: int = 24,
    val_per_class: int = 6,
    size: Sequence[int] = (80, 64),
    seed: int = 0,
) -> dict[str, Path]:
    """Write a synthetic ILSVRC2012 as the three official archives into `dest` (created).

    Returns {"train_tar", "val_tar", "devkit"} paths. `size` is the nominal (width, height);
    each image's sides are drawn within +-25% of it, like the varied sizes of the real data.
    Deterministic by `seed`, down to the archives' bytes. Like the real devkit, ILSVRC2012_IDs
    are not in wnid order, so an importer that assumed they were would misfile val images.
    """
    size = tuple(int(s) for s in size)
    if classes < 2 or train_per_class < 1 or val_per_class < 1 or len(size) != 2:
        raise ConfigError(
            f"{KEY}.synthetic: need classes >= 2, train_per_class >= 1, val_per_class >= 1 "
            f"and size [width, height], got {classes}, {train_per_class}, {val_per_class}, {size}"
        )
    rng = np.random.default_rng(seed)
    wnids = _synthetic_wnids(rng, classes)
    styles = [_class_style(c, classes, rng) for c in range(classes)]
    ids = (rng.permutation(classes) + 1).tolist()  # ILSVRC2012_ID of wnids[c]
    dest = Path(dest)
    dest.mkdir(parents=True)
    paths = {"train_tar": dest / TRAIN_TAR, "val_tar": dest / VAL_TAR, "devkit": dest / DEVKIT}
    with tarfile.open(paths["train_tar"], "w", format=tarfile.GNU_FORMAT) as outer:
        for c, wnid in enumerate(wnids):
            images = (
                (f"{wnid}_{j + 1}.JPEG", _jpeg(_synth_image(rng_, styles[c], size)))
                for j, rng_ in enumerate(_rngs((seed, 0, c), train_per_class))
            )
            _add_bytes(outer, f"{wnid}.tar", _tar_bytes(images))
    # Val images in a shuffled class order, numbered from 1 like ILSVRC2012_val_00000001.JPEG.
    order = rng.permutation(np.repeat(np.arange(classes), val_per_class)).tolist()
    with tarfile.open(paths["val_tar"], "w", format=tarfile.GNU_FORMAT) as tf:
        for k, rng_ in enumerate(_rngs((seed, 1), len(order))):
            _add_bytes(tf, val_name(k + 1), _jpeg(_synth_image(rng_, styles[order[k]], size)))
    truth = "".join(f"{ids[c]}\n" for c in order)
    _write_devkit(paths["devkit"], wnids, styles, ids, truth, train_per_class)
    return paths


def _style_words(style: tuple[float, float, float]) -> str:
    hue, angle, _ = style
    return f"synthetic hue {360 * hue:.0f} deg, stripes {np.degrees(angle):.0f} deg"


def _synsets(
    wnids: Sequence[str], styles: Sequence[tuple[float, float, float]], ids: Sequence[int], n: int
) -> np.ndarray:
    """meta.mat's `synsets`: leaves (ILSVRC2012_ID 1..k, no children) then two inner nodes."""
    rows = [
        (
            ids[c],
            wnid,
            _style_words(styles[c]),
            "a synthetic ImageNet class: coloured stripes with noise and clutter",
            0,
            np.zeros((1, 0)),
            0,
            n,
        )
        for c, wnid in enumerate(wnids)
    ]
    rows.sort(key=lambda row: row[0])  # the real meta.mat lists synsets by ILSVRC2012_ID
    k = len(wnids)
    leaves = np.arange(1, k + 1, dtype=np.float64)[None, :]
    rows.append((k + 1, "n00001740", "entity", "the root", 1, np.array([[k + 2.0]]), 2, n * k))
    rows.append((k + 2, "n00021939", "artifact", "all classes", k, leaves, 1, n * k))
    synsets = np.empty((len(rows), 1), dtype=[(f, object) for f in _SYNSET_FIELDS])
    for r, row in enumerate(rows):
        # Numbers as doubles, like MATLAB writes them.
        synsets[r, 0] = tuple(float(v) if isinstance(v, int) else v for v in row)
    return synsets


def _write_devkit(
    path: Path,
    wnids: Sequence[str],
    styles: Sequence[tuple[float, float, float]],
    ids: Sequence[int],
    truth: str,
    train_per_class: int,
) -> None:
    buf = io.BytesIO()
    scipy.io.savemat(buf, {"synsets": _synsets(wnids, styles, ids, train_per_class)})
    mat = bytearray(buf.getvalue())
    mat[:_MAT_HEADER_BYTES] = b"MATLAB 5.0 MAT-file, synthetic ImageNet devkit".ljust(
        _MAT_HEADER_BYTES
    )
    top = "ILSVRC2012_devkit_t12"
    tar = _tar_bytes(
        [
            (top, None),
            (f"{top}/readme.txt", b"Synthetic ILSVRC2012 development kit (accelpipe).\n"),
            (f"{top}/data", None),
            (f"{top}/data/meta.mat", bytes(mat)),
            (f"{top}/data/{GROUND_TRUTH}", truth.encode()),
        ]
    )
    with path.open("wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
        gz.write(tar)
