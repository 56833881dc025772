"""Tests for accelpipe.datasets.ade20k_synthetic: the real ADEChallengeData2016 layout, PNGs in
the official format, learnable classes, determinism."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from accelpipe.datasets.ade20k_synthetic import CLASSES_USED, _pattern, synthesize
from accelpipe.datasets.synthetic_images import ASPECTS

SIZE = (48, 36)
IDS = {class_id for class_id, _colour, _texture in CLASSES_USED}


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(tmp_path_factory.mktemp("ade") / "raw", 12, 4, SIZE, seed=3)


def _pairs(raw: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (np.array(Image.open(jpg)), np.array(Image.open(png)))
        for jpg, png in zip(
            sorted(raw.glob("images/*/*.jpg")), sorted(raw.glob("annotations/*/*.png")), strict=True
        )
    ]


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_layout_is_the_real_one(raw: Path) -> None:
    assert sorted(p.name for p in raw.iterdir()) == ["annotations", "images"]
    for kind, suffix in (("images", "jpg"), ("annotations", "png")):
        assert sorted(p.name for p in (raw / kind).iterdir()) == ["training", "validation"]
        train = sorted(p.name for p in (raw / kind / "training").iterdir())
        val = sorted(p.name for p in (raw / kind / "validation").iterdir())
        assert train == [f"ADE_train_{i:08d}.{suffix}" for i in range(1, 13)]
        assert val == [f"ADE_val_{i:08d}.{suffix}" for i in range(1, 5)]


def test_annotations_are_8_bit_grey_pngs_of_the_image_size(raw: Path) -> None:
    for png in raw.glob("annotations/*/*.png"):
        jpg = raw / "images" / png.parent.name / f"{png.stem}.jpg"
        with Image.open(png) as label, Image.open(jpg) as image:
            assert (label.format, label.mode) == ("PNG", "L")
            assert (image.format, image.mode) == ("JPEG", "RGB")
            assert label.size == image.size
        header = png.read_bytes()[24:26]
        assert tuple(header) == (8, 0)  # IHDR bit depth 8, colour type 0 (grey)


def test_images_vary_in_size_and_aspect_around_the_nominal_area(raw: Path) -> None:
    sizes = [image.shape[:2] for image, _label in _pairs(raw)]
    nominal = SIZE[0] * SIZE[1]
    for height, width in sizes:
        assert 0.8 * nominal - width - height <= width * height <= 1.2 * nominal + width + height
        assert min(abs(width / height - a) for a in ASPECTS) < 0.08
    aspects = {min(ASPECTS, key=lambda a, w=w, h=h: abs(w / h - a)) for h, w in sizes}
    assert len(aspects) >= 3
    assert len(set(sizes)) > len(sizes) // 2


def test_labels_use_the_five_classes_both_ends_and_unlabelled_areas(raw: Path) -> None:
    seen: set[int] = set()
    unlabelled = []
    for _image, label in _pairs(raw):
        values = set(np.unique(label).tolist())
        assert values <= IDS | {0}
        seen |= values
        unlabelled.append((label == 0).mean())
    assert seen == {0, 1, 3, 13, 87, 150}
    assert sum(u > 0 for u in unlabelled) >= 0.75 * len(unlabelled)
    assert 0.1 < float(np.mean(unlabelled)) < 0.6  # labelled pixels are the majority


def test_each_class_is_a_distinct_colour_and_texture(raw: Path) -> None:
    """Inside each region (eroded past the JPEG's blur at the edges) the mean colour is the
    class colour's, nearest among the five, and the texture is there: pixels vary far more
    than the JPEG noise would."""
    colours = {class_id: np.array(colour) for class_id, colour, _ in CLASSES_USED}
    checked = 0
    for image, label in _pairs(raw):
        for class_id, colour in colours.items():
            mask = ndimage.binary_erosion(label == class_id, iterations=2)
            if mask.sum() < 40:
                continue
            pixels = image[mask].astype(float)
            mean = pixels.mean(axis=0)
            expected = {k: c * 0.775 for k, c in colours.items()}  # shade 0.55 or 1.0
            assert min(expected, key=lambda k: np.abs(expected[k] - mean).sum()) == class_id
            assert pixels.std(axis=0).max() > 0.1 * colour.max()
            checked += 1
    assert checked >= 15


def test_deterministic_by_seed(tmp_path: Path, raw: Path) -> None:
    again = synthesize(tmp_path / "again", 12, 4, SIZE, seed=3)
    assert _digests(again) == _digests(raw)
    other = synthesize(tmp_path / "other", 12, 4, SIZE, seed=4)
    assert set(_digests(other)) == set(_digests(raw))
    assert _digests(other) != _digests(raw)


def test_the_five_textures_differ() -> None:
    rng = np.random.default_rng(0)
    patterns = {kind: _pattern(kind, 16, 16, rng) for _id, _colour, kind in CLASSES_USED}
    assert sorted(patterns) == ["checker", "dots", "hstripes", "noise", "vstripes"]
    assert np.all(patterns["hstripes"] == patterns["hstripes"][:, :1])  # constant along rows
    assert patterns["hstripes"][:, 0].tolist() == [0] * 4 + [1] * 4 + [0] * 4 + [1] * 4
    assert np.array_equal(patterns["vstripes"], patterns["hstripes"].T)
    assert np.array_equal(patterns["checker"], patterns["hstripes"] ^ patterns["vstripes"])
    assert np.array_equal(patterns["dots"], patterns["hstripes"] & patterns["vstripes"])
    assert 0.3 < patterns["noise"].mean() < 0.7
    assert len({p.tobytes() for p in patterns.values()}) == 5
