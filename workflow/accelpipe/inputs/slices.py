"""The 2D training loader: batches of contiguous slices from prepared volumes.

As in the reference (NVIDIA nnU-Net, dim 2), one batch is `batch_size` CONTIGUOUS axial slices
of ONE randomly chosen volume. With probability `oversampling` the block is centred on a random
foreground slice (label > 0), otherwise it starts at a random slice; blocks are clamped to the
volume. A volume with fewer slices than `batch_size` contributes all its slices plus slices drawn
with replacement, in sorted (anatomical) order.

Volumes are opened with `np.load(mmap_mode="r")` and only the slices of a batch are copied, so
memory stays bounded whatever the dataset size. Typical use::

    ds = SliceBatches(prepared, fold["train"], batch_size=32, steps=1000)
    loader = DataLoader(ds, batch_size=None, num_workers=4, pin_memory=True)
    for epoch in range(epochs):
        ds.set_epoch(epoch)  # new draws each epoch (the workers get a fresh copy of `ds`)
        for image, label in loader: ...  # image float32 (B, C, H, W), label uint8 (B, 1, H, W)

Labels are uint8 (4x less to pin and copy than int64); call `.long()` on the device for the
loss. Batches are deterministic per (seed, epoch, worker id).

Data-parallel training: `batch_size` is the GLOBAL batch and rank `r` of `world_size` gets the
r-th contiguous `batch_size // world_size` slices of it. Every rank draws the same global block
(same seed), so without augmentation the ranks' batches of a step are exactly the single
process's batch, split. Augmentation draws per rank (each rank augments only its own slices, so
the loader's cost does not grow with the world size).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from accelpipe.core.errors import DataError
from accelpipe.inputs.transforms import BatchAugment


def _open(path: Path) -> np.ndarray:
    try:
        return cast("np.ndarray", np.load(path, mmap_mode="r"))  # a .npy: a memmap array
    except FileNotFoundError:
        raise DataError(f"{path}: prepared file not found") from None
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: not a readable .npy file ({err})") from None


class SliceBatches(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Yields `steps` (image, label) batches in total, split across DataLoader workers.

    Each batch is this rank's `batch_size // world_size` slices of the global batch.
    """

    def __init__(
        self,
        data_dir: str | Path,
        cases: Sequence[str],
        *,
        batch_size: int,
        steps: int,
        oversampling: float = 0.33,
        augment: bool = True,
        seed: int = 1,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        super().__init__()
        if batch_size < 1 or steps < 0 or not 0.0 <= oversampling <= 1.0 or not cases:
            raise DataError(
                f"SliceBatches: need cases, batch_size >= 1, steps >= 0 and oversampling in "
                f"[0, 1]; got {len(cases)} cases, batch_size={batch_size}, steps={steps}, "
                f"oversampling={oversampling}"
            )
        if not 0 <= rank < world_size or batch_size % world_size:
            raise DataError(
                f"SliceBatches: rank {rank} of world_size {world_size} with a global batch of "
                f"{batch_size}: need 0 <= rank < world_size dividing the batch"
            )
        self.data_dir = Path(data_dir)
        self.cases = list(cases)
        self.batch_size, self.steps = batch_size, steps
        self.rank, self.world_size = rank, world_size
        self.local_batch = batch_size // world_size
        self.oversampling, self.augment, self.seed = oversampling, augment, seed
        self.epoch = 0
        self.depths: list[int] = []
        self.foreground: list[np.ndarray] = []  # per case: indices of slices with label > 0
        for case in self.cases:
            depth, fg = self._index(case)
            self.depths.append(depth)
            self.foreground.append(fg)

    def _paths(self, case: str) -> tuple[Path, Path]:
        return self.data_dir / f"{case}_x.npy", self.data_dir / f"{case}_y.npy"

    def _index(self, case: str) -> tuple[int, np.ndarray]:
        """Check one case's files agree; return its depth and foreground slice indices."""
        xp, yp = self._paths(case)
        x, y = _open(xp), _open(yp)
        if x.ndim != 4 or y.ndim != 4 or y.shape[0] != 1 or x.shape[1:] != y.shape[1:]:
            raise DataError(f"case {case}: image {xp} {x.shape} and label {yp} {y.shape} disagree")
        depth = y.shape[1]
        fg = np.flatnonzero(np.asarray(y[0]).reshape(depth, -1).any(axis=1)).astype(np.int32)
        return depth, fg

    def reseeded(self, seed: int) -> SliceBatches:
        """This loader drawing from `seed`, sharing the case index (built once per run: the
        index reads every label file, seconds per epoch at full size)."""
        other = copy.copy(self)
        other.seed = seed
        return other

    def set_epoch(self, epoch: int) -> None:
        """Mix `epoch` into the seed so every epoch draws new batches."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.steps

    def sample(self, rng: np.random.Generator) -> tuple[int, slice | np.ndarray]:
        """Draw (case index, slice selection) for one batch."""
        ci = int(rng.integers(len(self.cases)))
        depth, fg, b = self.depths[ci], self.foreground[ci], self.batch_size
        if depth < b:  # too few slices: all of them plus repeats, kept in anatomical order
            extra = rng.integers(0, depth, b - depth)
            return ci, np.sort(np.concatenate([np.arange(depth), extra]))
        if rng.random() < self.oversampling and len(fg):
            centre = int(fg[rng.integers(len(fg))])
            start = min(max(centre - b // 2, 0), depth - b)
        else:
            start = int(rng.integers(0, depth - b + 1))
        return ci, slice(start, start + b)

    def shard(self, sel: slice | np.ndarray) -> slice | np.ndarray:
        """This rank's contiguous part of a global selection."""
        lo = self.rank * self.local_batch
        if isinstance(sel, slice):
            return slice(sel.start + lo, sel.start + lo + self.local_batch)
        return sel[lo : lo + self.local_batch]

    def load(self, ci: int, sel: slice | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy the selected slices of case `ci` into (B, C, H, W) / (B, 1, H, W) tensors."""
        xp, yp = self._paths(self.cases[ci])
        x, y = _open(xp), _open(yp)
        n = sel.stop - sel.start if isinstance(sel, slice) else len(sel)
        image = np.empty((n, x.shape[0], *x.shape[2:]), dtype=np.float32)
        label = np.empty((n, 1, *y.shape[2:]), dtype=np.uint8)
        image[:] = x[:, sel].transpose(1, 0, 2, 3)  # one copy, straight from the page cache
        label[:] = y[:, sel].transpose(1, 0, 2, 3)
        return torch.from_numpy(image), torch.from_numpy(label)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        n = self.steps // nw + (1 if wid < self.steps % nw else 0)
        rng = np.random.default_rng([self.seed, self.epoch, wid])  # the same on every rank
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)) + self.rank)
        augment = BatchAugment() if self.augment else None
        for _ in range(n):
            ci, sel = self.sample(rng)
            image, label = self.load(ci, self.shard(sel))
            if augment is not None:
                image, label = augment(image, label, gen)
            yield image, label
