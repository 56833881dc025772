"""MONAI pipelines over prepared NIfTI volumes: datalist checks, crops, evaluation geometry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets import nsclc
from accelpipe.datasets.nsclc_synthetic import synthesize
from accelpipe.inputs import volume_cache, volumes

pytestmark = pytest.mark.torch

SETTINGS = volumes.VolumeSettings((1.0, 1.0, 3.0), (-1000.0, 1000.0), (32, 32, 16))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nsclc")
    raw = synthesize(root / "raw", patients=3, shape=(40, 40, 12), seed=1)
    return nsclc.prepare(raw, root / "prepared", label="GTV-1", val_fraction=0.34, split_seed=0)


def test_datalist_paths_are_absolute_and_checked(prepared: Path) -> None:
    items = volumes.datalist(prepared, "training")
    assert items and all(Path(i["image"]).is_absolute() for i in items)
    listing = json.loads((prepared / "datalist.json").read_text())
    (prepared / listing["training"][0]["label"]).rename(prepared / "moved.nii.gz")
    try:
        with pytest.raises(DataError, match=r"listed in datalist\.json but missing"):
            volumes.datalist(prepared, "training")
    finally:
        (prepared / "moved.nii.gz").rename(prepared / listing["training"][0]["label"])


def test_train_pipeline_gives_num_samples_crops_of_the_roi(prepared: Path) -> None:
    item = volumes.datalist(prepared, "training")[0]
    for augment in (False, True):
        crops = volumes.train_transforms(SETTINGS, num_samples=3, augment=augment)(item)
        assert len(crops) == 3
        for crop in crops:
            assert tuple(crop["image"].shape) == (1, 32, 32, 16)
            assert tuple(crop["label"].shape) == (1, 32, 32, 16)
            if not augment:  # the HU window maps to 0..1; intensity jitter may leave it
                assert float(crop["image"].min()) >= 0.0 and float(crop["image"].max()) <= 1.0


def test_eval_pipeline_keeps_image_and_label_aligned_in_ras(prepared: Path) -> None:
    item = volumes.datalist(prepared, "validation")[0]
    data = volumes.eval_transforms(SETTINGS)(item)
    assert data["image"].shape == data["label"].shape
    assert (data["image"].affine == data["label"].affine).all()
    assert data["label"].sum() > 0  # the tumour survives resampling and the body crop
    diagonal = data["image"].affine.diagonal()[:3]
    assert (diagonal > 0).all()  # RAS: axes increase left->right, posterior->anterior, up


def test_loader_shards_volumes_across_ranks(prepared: Path) -> None:
    items = volumes.datalist(prepared, "training")
    transform = volumes.train_transforms(SETTINGS, num_samples=1, augment=False)
    loaders = [
        volumes.train_loader(
            items,
            transform,
            batch_size=1,
            cache_rate=1.0,
            workers=0,
            pin_memory=False,
            seed=0,
            rank=r,
            world_size=2,
        )
        for r in range(2)
    ]
    assert [len(loader) for loader in loaders] == [1, 1]  # 2 volumes, one per rank
    image, label = next(volumes.endless_pairs(loaders[0]))
    assert type(image) is not type(next(iter(loaders[0]))["image"])  # plain tensors
    assert image.shape == label.shape == (1, 1, 32, 32, 16)


def test_loader_caches_only_what_its_plan_holds(prepared: Path) -> None:
    """A budget that holds one of the two training volumes (and one builder): the first is
    cached, the other loads when drawn, and batches still come."""
    items = volumes.datalist(prepared, "training")
    one = volume_cache.cached_bytes(items[0]["image"], SETTINGS.spacing)
    budget = (one * (1 + volume_cache.BUILD_TRANSIENT) + one // 2) / 1e9
    cache = volume_cache.plan_for(items, SETTINGS.spacing, 1.0, budget, 1)
    assert (cache.volumes, cache.total, cache.builders) == (1, 2, 1)
    loader = volumes.train_loader(
        items,
        volumes.train_transforms(SETTINGS, num_samples=1, augment=False),
        batch_size=1,
        cache_rate=1.0,
        workers=0,
        pin_memory=False,
        seed=0,
        cache=cache,
    )
    assert loader.dataset.cache_num == 1
    pairs = volumes.endless_pairs(loader)
    shapes = {tuple(next(pairs)[0].shape) for _ in range(4)}  # both volumes, twice
    assert shapes == {(1, 1, 32, 32, 16)}
