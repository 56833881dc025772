"""The 2D slice-batch loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from accelpipe.core.errors import DataError
from accelpipe.datasets import brats
from accelpipe.inputs.slices import SliceBatches

pytestmark = pytest.mark.torch

CASES = ["BRATS_001", "BRATS_002", "BRATS_003"]
PATCH = (24, 20)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slices")
    task = brats.synthesize(root / "raw", cases=3, shape=(32, 32, 24), seed=4)
    return brats.prepare(task, root / "prep", patch_size=PATCH, n_folds=3)


def _volumes(data: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {c: (np.load(data / f"{c}_x.npy"), np.load(data / f"{c}_y.npy")) for c in CASES}


def _find_block(image: torch.Tensor, label: torch.Tensor, vols) -> tuple[str, int]:
    """(case, z) such that the batch is exactly slices z..z+B-1 of that case."""
    b = image.shape[0]
    img, lab = image.numpy(), label.numpy()
    for case, (x, y) in vols.items():
        for z in range(x.shape[1] - b + 1):
            if np.array_equal(x[:, z : z + b].transpose(1, 0, 2, 3), img) and np.array_equal(
                y[:, z : z + b].transpose(1, 0, 2, 3), lab
            ):
                return case, z
    raise AssertionError("batch is not a contiguous block of any case")


def _batches(ds, workers: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(DataLoader(ds, batch_size=None, num_workers=workers))


def test_shapes_dtypes_and_contiguous_blocks(prepared):
    ds = SliceBatches(prepared, CASES, batch_size=4, steps=12, augment=False, seed=3)
    assert len(ds) == 12
    batches = _batches(ds)
    assert len(batches) == 12
    vols = _volumes(prepared)
    starts = set()
    for image, label in batches:
        assert image.shape == (4, 4, *PATCH) and image.dtype == torch.float32
        assert label.shape == (4, 1, *PATCH) and label.dtype == torch.uint8
        starts.add(_find_block(image, label, vols))
    assert len(starts) > 3  # really random, not one block over and over


def test_foreground_index_matches_labels(prepared):
    ds = SliceBatches(prepared, CASES, batch_size=2, steps=1)
    for case, depth, fg in zip(CASES, ds.depths, ds.foreground, strict=True):
        y = np.load(prepared / f"{case}_y.npy")
        assert depth == y.shape[1]
        assert fg.tolist() == [z for z in range(depth) if y[0, z].any()]
        assert 0 < len(fg) < depth  # the test below needs both kinds of slices


def test_oversampling_one_always_has_foreground(prepared):
    ds = SliceBatches(prepared, CASES, batch_size=2, steps=40, oversampling=1.0, augment=False)
    assert all(label.any() for _, label in _batches(ds))
    # With no oversampling some 2-slice blocks miss the tumour (it spans only part of the volume).
    ds0 = SliceBatches(prepared, CASES, batch_size=2, steps=40, oversampling=0.0, augment=False)
    assert not all(label.any() for _, label in _batches(ds0))


def test_steps_split_across_two_workers(prepared):
    ds = SliceBatches(prepared, CASES, batch_size=3, steps=7, augment=True, seed=5)
    batches = _batches(ds, workers=2)
    assert len(batches) == 7
    assert len({b[0].sum().item() for b in batches}) == 7  # workers do not repeat each other


def test_deterministic_per_seed_and_epoch(prepared):
    def run(seed: int, epoch: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
        ds = SliceBatches(prepared, CASES, batch_size=3, steps=5, seed=seed)
        ds.set_epoch(epoch)
        return _batches(ds, workers=2)

    def same(a, b) -> bool:
        return all(
            torch.equal(x, y) and torch.equal(u, v) for (x, u), (y, v) in zip(a, b, strict=True)
        )

    first = run(1)
    assert same(first, run(1))
    assert not same(first, run(2))
    assert not same(first, run(1, epoch=1))


def test_augmentation_changes_images_but_keeps_label_values(prepared):
    plain = _batches(SliceBatches(prepared, CASES, batch_size=4, steps=20, augment=False, seed=9))
    aug = _batches(SliceBatches(prepared, CASES, batch_size=4, steps=20, augment=True, seed=9))
    assert any(not torch.equal(a[0], p[0]) for a, p in zip(aug, plain, strict=True))
    for image, label in aug:
        assert torch.isfinite(image).all()
        assert set(label.unique().tolist()) <= {0, 1, 2, 3}


def test_short_volume_is_padded_with_repeated_slices(tmp_path):
    depth, batch = 3, 5
    x = np.arange(2 * depth * 4 * 4, dtype=np.float32).reshape(2, depth, 4, 4)
    y = np.zeros((1, depth, 4, 4), dtype=np.uint8)
    y[0, 1] = 1
    np.save(tmp_path / "c_x.npy", x)
    np.save(tmp_path / "c_y.npy", y)
    ds = SliceBatches(tmp_path, ["c"], batch_size=batch, steps=6, augment=False)
    for image, label in _batches(ds):
        assert image.shape == (batch, 2, 4, 4) and label.shape == (batch, 1, 4, 4)
        z = image[:, 0, 0, 0].numpy() // 16  # slice index of each batch entry
        assert sorted(z.tolist()) == z.tolist()  # anatomical order kept
        assert set(z.tolist()) == set(range(depth))  # every slice present, the rest repeats
        assert torch.equal(label[:, 0, 0, 0], torch.from_numpy((z == 1).astype(np.uint8)))


def test_missing_or_inconsistent_files(prepared, tmp_path):
    with pytest.raises(DataError, match=r"BRATS_009_x\.npy"):
        SliceBatches(prepared, ["BRATS_009"], batch_size=2, steps=1)
    np.save(tmp_path / "a_x.npy", np.zeros((4, 3, 8, 8), np.float32))
    np.save(tmp_path / "a_y.npy", np.zeros((1, 2, 8, 8), np.uint8))
    with pytest.raises(DataError, match="case a"):
        SliceBatches(tmp_path, ["a"], batch_size=2, steps=1)
    with pytest.raises(DataError, match="batch_size"):
        SliceBatches(prepared, CASES, batch_size=0, steps=1)


def test_a_reseeded_loader_shares_the_index_and_draws_as_one_built_with_that_seed(prepared):
    """unet2d indexes once per run and reseeds per epoch (issue 33 item 4)."""
    base = SliceBatches(prepared, CASES, batch_size=4, steps=6, seed=10)
    for seed in (11, 12):
        again = base.reseeded(seed)
        assert again.foreground is base.foreground and again.depths is base.depths
        fresh = SliceBatches(prepared, CASES, batch_size=4, steps=6, seed=seed)
        for (a, al), (b, bl) in zip(_batches(again, 2), _batches(fresh, 2), strict=True):
            assert torch.equal(a, b) and torch.equal(al, bl)
    assert base.seed == 10
