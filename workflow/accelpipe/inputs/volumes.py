"""MONAI pipelines over prepared NIfTI volumes (datalist.json), for the 3D segmentation workloads.

The deterministic part (load, RAS orientation, resampling, HU window, crop to the body) runs
once per volume and is kept by CacheDataset; the random part (crops around the tumour or
background, flips, rotations, intensity jitter) runs in the DataLoader's persistent workers.
This follows the AMD SwinUNETR adaptation of the MONAI BTCV recipe (see REFERENCE.md).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

# isort: off
from accelpipe.devices import tensorboard_stub  # noqa: F401  before MONAI: see there

# isort: on
from monai import transforms as mt
from monai.data import CacheDataset, DataLoader, partition_dataset

from accelpipe.core.errors import DataError
from accelpipe.core.io import read_json
from accelpipe.inputs import volume_cache

KEYS = ("image", "label")


@dataclass(frozen=True)
class VolumeSettings:
    """What shapes a volume before the network sees it (the workload's `transforms` block + roi)."""

    spacing: tuple[float, float, float]
    hu_range: tuple[float, float]
    roi: tuple[int, int, int]

    @classmethod
    def from_config(cls, transforms: dict[str, Any], roi: Sequence[int]) -> VolumeSettings:
        # the config schema holds roi to three integers
        roi3 = cast(tuple[int, int, int], tuple(roi))
        return cls(tuple(transforms["spacing"]), tuple(transforms["hu_range"]), roi3)


def datalist(prepared: Path, split: str) -> list[dict[str, str]]:
    """The `training` or `validation` entries of datalist.json, with absolute paths."""
    entries = read_json(prepared / "datalist.json").get(split)
    if not entries:
        raise DataError(f"{prepared / 'datalist.json'}: no '{split}' entries")
    out = []
    for entry in entries:
        item = dict(entry)
        for key in KEYS:
            path = prepared / entry[key]
            if not path.exists():
                raise DataError(f"{path}: listed in datalist.json but missing")
            item[key] = str(path)
        out.append(item)
    return out


def load_transforms(s: VolumeSettings) -> list[mt.Transform]:
    """Deterministic: the cached part of training and the whole of evaluation."""
    low, high = s.hu_range
    return [
        mt.LoadImaged(keys=KEYS, image_only=True),
        mt.EnsureChannelFirstd(keys=KEYS),
        mt.Orientationd(keys=KEYS, axcodes="RAS"),
        mt.Spacingd(keys=KEYS, pixdim=s.spacing, mode=("bilinear", "nearest")),
        mt.ScaleIntensityRanged(
            keys="image", a_min=low, a_max=high, b_min=0.0, b_max=1.0, clip=True
        ),
        mt.CropForegroundd(keys=KEYS, source_key="image", allow_smaller=True),
    ]


def train_transforms(s: VolumeSettings, num_samples: int, augment: bool) -> mt.Compose:
    crop = [
        mt.SpatialPadd(keys=KEYS, spatial_size=s.roi),
        mt.RandCropByPosNegLabeld(
            keys=KEYS,
            label_key="label",
            spatial_size=s.roi,
            pos=1,
            neg=1,
            num_samples=num_samples,
            image_key="image",
            image_threshold=0,
        ),
    ]
    jitter = [
        *(mt.RandFlipd(keys=KEYS, prob=0.2, spatial_axis=axis) for axis in range(3)),
        mt.RandRotate90d(keys=KEYS, prob=0.2, max_k=3),
        mt.RandScaleIntensityd(keys="image", factors=0.1, prob=0.1),
        mt.RandShiftIntensityd(keys="image", offsets=0.1, prob=0.1),
    ]
    return mt.Compose([*load_transforms(s), *crop, *(jitter if augment else [])])


def eval_transforms(s: VolumeSettings) -> mt.Compose:
    return mt.Compose(load_transforms(s))


def rank_share(
    items: list[dict[str, str]], seed: int, rank: int, world_size: int
) -> list[dict[str, str]]:
    """This rank's items: every rank an equal share, so DDP steps stay in lockstep."""
    if world_size == 1:
        return items
    share: list[dict[str, str]] = partition_dataset(
        items, num_partitions=world_size, shuffle=True, seed=seed, even_divisible=True
    )[rank]
    return share


def train_loader(
    items: list[dict[str, str]],
    transform: mt.Compose,
    *,
    batch_size: int,
    cache_rate: float,
    workers: int,
    pin_memory: bool,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    cache: volume_cache.CachePlan | None = None,
) -> DataLoader:
    """Shuffled batches of this rank's share of `items`, cached after the deterministic part.

    `cache` (volume_cache.plan over the rank's share) bounds how many volumes are cached and
    by how many threads; without one, `cache_rate` of them by one thread per CPU.
    Persistent workers keep their state (and CacheDataset's cache stays in the parent) across
    epochs instead of forking afresh each epoch.
    """
    items = rank_share(items, seed, rank, world_size)
    dataset = CacheDataset(
        items,
        transform,
        cache_num=cache.volumes if cache else sys.maxsize,
        cache_rate=cache_rate,
        num_workers=cache.builders if cache else None,
        progress=False,
    )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=pin_memory,
        generator=torch.Generator().manual_seed(seed),
    )


def endless_pairs(loader: DataLoader) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(image, label) batches as plain tensors, pass after pass over `loader`.

    MetaTensor carries affine and transform history; the network needs neither, and plain
    tensors keep the training step free of MetaTensor's per-op bookkeeping.
    """
    while True:
        for batch in loader:
            yield batch["image"].as_tensor(), batch["label"].as_tensor()
