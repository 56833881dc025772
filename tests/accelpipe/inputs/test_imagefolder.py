"""Tests for the prepared-index image dataset, the PIL/numpy transforms and the loader."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from accelpipe.core.errors import DataError
from accelpipe.inputs.imagefolder import (
    MEAN,
    STD,
    EvalTransform,
    IndexedImages,
    TrainTransform,
    make_loader,
    random_resized_crop_box,
    to_normalized_tensor,
)

pytestmark = pytest.mark.torch

WNIDS = ["n01440764", "n01443537", "n01484850"]


def _image(w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8))


def _normalized(arr: np.ndarray) -> np.ndarray:
    """Reference normalization, written out per channel."""
    out = arr.astype(np.float64) / 255.0
    out = (out - np.array(MEAN)) / np.array(STD)
    return out.transpose(2, 0, 1)


def _write_prepared(tmp: Path, n_train: int = 6, n_val: int = 2) -> Path:
    root, prepared = tmp / "imagenet", tmp / "prepared"
    prepared.mkdir()
    for split, n in (("train", n_train), ("val", n_val)):
        with (prepared / f"{split}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["path", "label", "bytes", "width", "height"])
            for i in range(n):
                label = i % len(WNIDS)
                rel = f"{split}/{WNIDS[label]}/img_{i}.JPEG"
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                w, h = 40 + 8 * i, 36 + 4 * i
                mode = "L" if i == 1 else "RGB"  # a greyscale JPEG must come out RGB
                _image(w, h, seed=i).convert(mode).save(root / rel, quality=90)
                writer.writerow([rel, label, (root / rel).stat().st_size, w, h])
    (prepared / "config.json").write_text(json.dumps({"root": str(root)}))
    (prepared / "classes.json").write_text(json.dumps({"wnids": WNIDS}))
    return prepared


# -- transforms -----------------------------------------------------------------


def test_normalize_values() -> None:
    white = to_normalized_tensor(np.full((2, 3, 3), 255, dtype=np.uint8))
    black = to_normalized_tensor(np.zeros((2, 3, 3), dtype=np.uint8))
    assert white.shape == (3, 2, 3) and white.dtype == torch.float32
    for c in range(3):
        assert torch.allclose(white[c], torch.tensor((1 - MEAN[c]) / STD[c]))
        assert torch.allclose(black[c], torch.tensor(-MEAN[c] / STD[c]))
    arr = np.asarray(_image(5, 4))
    np.testing.assert_allclose(to_normalized_tensor(arr).numpy(), _normalized(arr), atol=1e-5)


@pytest.mark.parametrize("size", [(500, 375), (375, 500), (64, 64), (30, 300), (300, 30)])
def test_train_crop_has_the_requested_size(size: tuple[int, int]) -> None:
    transform = TrainTransform(size=32, rng=np.random.default_rng(0))
    img = _image(*size)
    for _ in range(5):
        assert transform(img).shape == (3, 32, 32)


def test_crop_box_respects_scale_ratio_and_bounds() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        left, top, w, h = random_resized_crop_box(400, 300, rng)
        assert left >= 0 and top >= 0 and left + w <= 400 and top + h <= 300
        assert 0.08 * 0.9 <= w * h / (400 * 300) <= 1.0
        assert 3 / 4 * 0.95 <= w / h <= 4 / 3 * 1.05  # up to rounding of w and h


def test_crop_box_falls_back_to_a_centred_clamped_crop() -> None:
    rng = np.random.default_rng(0)
    # Area above the image: no try fits, so the centre crop with aspect clamped to 4/3.
    assert random_resized_crop_box(100, 10, rng, scale=(2.0, 3.0)) == (43, 0, 13, 10)
    assert random_resized_crop_box(10, 100, rng, scale=(2.0, 3.0)) == (0, 43, 10, 13)
    assert random_resized_crop_box(50, 40, rng, scale=(2.0, 3.0)) == (0, 0, 50, 40)


def test_flip_happens_about_half_the_time() -> None:
    arr = np.zeros((16, 16, 3), dtype=np.uint8)
    arr[:, 8:] = 255  # left black, right white
    # Whole-image crop (scale 1, ratio 1 on a square), so only the flip changes the output.
    transform = TrainTransform(16, scale=(1, 1), ratio=(1, 1), rng=np.random.default_rng(0))
    img = Image.fromarray(arr)
    outs = [transform(img) for _ in range(400)]
    flipped = sum(bool(o[0, :, 0].mean() > o[0, :, -1].mean()) for o in outs)
    assert 160 <= flipped <= 240
    never = TrainTransform(16, scale=(1, 1), ratio=(1, 1), flip_p=0.0, rng=np.random.default_rng(0))
    np.testing.assert_allclose(never(img).numpy(), _normalized(arr), atol=1e-5)


def test_train_transform_is_reproducible_with_a_seeded_generator() -> None:
    img = _image(120, 90)
    a = TrainTransform(48, rng=np.random.default_rng(7))
    b = TrainTransform(48, rng=np.random.default_rng(7))
    for _ in range(3):
        assert torch.equal(a(img), b(img))


def test_eval_transform_on_a_square_image_is_the_exact_centre() -> None:
    arr = np.asarray(_image(256, 256))  # shorter side already 256: no resampling
    out = EvalTransform(224)(Image.fromarray(arr))
    np.testing.assert_allclose(out.numpy(), _normalized(arr[16:240, 16:240]), atol=1e-5)


def test_eval_transform_resizes_the_shorter_side_then_crops_the_centre() -> None:
    # 512x384 grey image with a 120x120 white square at its centre: after scaling by 2/3
    # the square is 80 px wide, centred in the 224 crop; the crop's corners stay grey.
    arr = np.full((384, 512, 3), 128, dtype=np.uint8)
    arr[192 - 60 : 192 + 60, 256 - 60 : 256 + 60] = 255
    out = EvalTransform(224)(Image.fromarray(arr))
    assert out.shape == (3, 224, 224)
    white, grey = (1 - MEAN[0]) / STD[0], (128 / 255 - MEAN[0]) / STD[0]
    assert out[0, 112, 112].item() == pytest.approx(white, abs=1e-4)
    assert out[0, 112 - 35, 112 + 35].item() == pytest.approx(white, abs=1e-4)
    assert out[0, 112 - 45, 112].item() == pytest.approx(grey, abs=1e-4)
    for y, x in ((0, 0), (0, 223), (223, 0), (223, 223)):
        assert out[0, y, x].item() == pytest.approx(grey, abs=1e-4)
    assert EvalTransform(32).resize == 37  # round(32 / 0.875)


# -- dataset ----------------------------------------------------------------------


def test_dataset_reads_the_index_and_decodes(tmp_path: Path) -> None:
    prepared = _write_prepared(tmp_path)
    ds = IndexedImages(prepared, "train", EvalTransform(32))
    assert len(ds) == 6 and ds.classes == WNIDS
    labels = []
    for i in range(len(ds)):
        image, label = ds[i]
        assert image.shape == (3, 32, 32) and image.dtype == torch.float32
        labels.append(label)
    assert labels == [0, 1, 2, 0, 1, 2]
    assert ds.load(1).mode == "RGB"
    assert len(IndexedImages(prepared, "val", EvalTransform(32))) == 2


def test_corrupt_and_truncated_images_raise_data_error_naming_them(tmp_path: Path) -> None:
    prepared = _write_prepared(tmp_path)
    ds = IndexedImages(prepared, "train", EvalTransform(32))
    bad = ds.root / ds.paths[2].decode()
    bad.write_bytes(b"not a jpeg at all")
    with pytest.raises(DataError, match=r"img_2\.JPEG"):
        ds[2]
    cut = ds.root / ds.paths[3].decode()
    cut.write_bytes(cut.read_bytes()[:200])
    with pytest.raises(DataError, match=r"img_3\.JPEG"):
        ds[3]
    (ds.root / ds.paths[4].decode()).unlink()
    with pytest.raises(DataError, match=r"img_4\.JPEG"):
        ds[4]


def test_bad_index_raises_data_error(tmp_path: Path) -> None:
    prepared = _write_prepared(tmp_path)
    (prepared / "val.csv").write_text("path,label\na.JPEG,7\n")
    with pytest.raises(DataError, match=r"val\.csv.*labels outside 0\.\.2"):
        IndexedImages(prepared, "val", EvalTransform(32))
    (prepared / "train.csv").unlink()
    with pytest.raises(DataError, match=r"train\.csv"):
        IndexedImages(prepared, "train", EvalTransform(32))


# -- loader -----------------------------------------------------------------------


def _epochs(prepared: Path, seed: int, workers: int) -> list[list[torch.Tensor]]:
    ds = IndexedImages(prepared, "train", TrainTransform(24))
    loader = make_loader(
        ds, 2, shuffle=True, workers=workers, pin_memory=False, seed=seed, drop_last=False
    )
    return [[torch.cat([x.flatten(), y.float()]) for x, y in loader] for _ in range(2)]


def test_loader_with_two_workers_is_deterministic(tmp_path: Path) -> None:
    prepared = _write_prepared(tmp_path)
    first, second = _epochs(prepared, 5, 2), _epochs(prepared, 5, 2)
    for a, b in zip(first, second, strict=True):
        assert len(a) == 3 and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    # Epochs differ (new shuffle, new crops), and so does another seed.
    assert not all(torch.equal(x, y) for x, y in zip(first[0], first[1], strict=True))
    other = _epochs(prepared, 6, 2)
    assert not all(torch.equal(x, y) for x, y in zip(first[0], other[0], strict=True))


def test_workers_draw_different_augmentations(tmp_path: Path) -> None:
    # The same image seen by both workers must not get the same crop (no replayed stream).
    prepared = _write_prepared(tmp_path, n_train=2)
    csv_path = prepared / "train.csv"
    rows = csv_path.read_text().splitlines()
    csv_path.write_text("\n".join([rows[0]] + [rows[1]] * 4) + "\n")
    ds = IndexedImages(prepared, "train", TrainTransform(24))
    loader = make_loader(ds, 2, shuffle=False, workers=2, pin_memory=False, seed=0, drop_last=False)
    a, b = (x for x, _ in loader)  # batch 0 from worker 0, batch 1 from worker 1
    assert not torch.equal(a, b)


def test_loader_flags(tmp_path: Path) -> None:
    ds = IndexedImages(_write_prepared(tmp_path), "val", EvalTransform(16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without an accelerator warns
        loader = make_loader(
            ds, 2, shuffle=False, workers=0, pin_memory=True, seed=0, drop_last=True
        )
        batches = list(loader)
    assert loader.pin_memory and not loader.persistent_workers
    assert len(batches) == 1 and batches[0][0].shape == (2, 3, 16, 16)
    workers = make_loader(ds, 2, shuffle=True, workers=2, pin_memory=False, seed=0, drop_last=False)
    assert workers.persistent_workers and workers.worker_init_fn is not None
