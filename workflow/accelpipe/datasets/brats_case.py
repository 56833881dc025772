"""One BraTS/MSD case through nnU-Net's 2D preprocessing: load, crop, z-score, pad, write.

`prepare_case` runs in a worker process (see `accelpipe.datasets.brats.prepare`): it reads the
case's image and label with `accelpipe.datasets.nifti.read_nifti`, brings them to (C, Z, Y, X)
and (Z, Y, X), crops both to the image's non-zero bounding box, z-scores each channel over that
box, pads H, W symmetrically to >= the patch size, centre-crops to it, and writes
`<case>_x.npy` (float32) and `<case>_y.npy` (uint8). Errors are DataErrors naming the file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np

from accelpipe.core.errors import DataError
from accelpipe.datasets.nifti import read_nifti


def _foreground_bbox(image: np.ndarray) -> tuple[slice, ...]:
    """Bounding box (Z, Y, X slices) of voxels where any channel of (C, Z, Y, X) is non-zero."""
    mask = np.logical_or.reduce(image != 0, axis=0) if image.shape[0] > 1 else image[0] != 0
    if not mask.any():
        return tuple(slice(0, 0) for _ in mask.shape)
    box = []
    for ax in range(mask.ndim):
        others = tuple(a for a in range(mask.ndim) if a != ax)
        hit = np.flatnonzero(np.logical_or.reduce(mask, axis=others))
        box.append(slice(int(hit[0]), int(hit[-1]) + 1))
    return tuple(box)


def _window(size: int, target: int) -> tuple[slice, slice]:
    """(source, destination) slices that pad symmetrically to >= target, then centre-crop."""
    if size <= target:
        start = (target - size) // 2
        return slice(0, size), slice(start, start + size)
    start = (size - target) // 2
    return slice(start, start + target), slice(0, target)


def _channel_stats(chan: np.ndarray, n: int) -> tuple[float, float]:
    """(mean, std) of a contiguous channel whose non-zero voxels all lie in a region of n voxels.

    Zeros outside the bounding box add nothing to the sums, so the sums over the whole channel
    (fast contiguous reductions) equal those over the crop. Float32 partial sums over 64k-voxel
    chunks, accumulated in float64, keep the relative error ~1e-8. einsum, not np.dot: BLAS
    would start its own threads inside every worker process.
    """
    flat = chan.reshape(-1)
    total = sq = 0.0
    for i in range(0, flat.size, 1 << 16):
        part = flat[i : i + (1 << 16)]
        total += float(part.sum())
        sq += float(np.einsum("i,i->", part, part))
    mean = total / n
    return mean, float(np.sqrt(max(sq / n - mean * mean, 0.0)))


def _zscore_into(
    out: np.ndarray,
    image: np.ndarray,
    box: tuple[slice, ...],
    stats: list[tuple[float, float]],
    src: tuple[slice, slice],
    dst: tuple[slice, slice],
) -> None:
    """Per-channel z-score of image[:, box] with per-channel (mean, std) into out (C, D, H, W).

    `src`/`dst` are the (H, W) slices of the cropped volume and of `out` from the pad/centre
    crop; only the padding margins of `out` are zeroed (it is a reused, uninitialised buffer).
    """
    # (the index is built apart: mypy takes `image[(a, *b)]` for 3.11's `image[a, *b]`)
    index = (slice(None), *box)
    crop = image[index]
    (sh, sw), (dh, dw) = src, dst
    for c, (mean, std) in enumerate(stats):
        scale = np.float32(1.0 / std if std > 1e-8 else 1.0)  # constant channel: centre only
        o = out[c]
        o[:, : dh.start] = 0
        o[:, dh.stop :] = 0
        o[:, dh, : dw.start] = 0
        o[:, dh, dw.stop :] = 0
        window = o[:, dh, dw]
        np.subtract(crop[c][:, sh, sw], np.float32(mean), out=window)
        window *= scale


_SCRATCH: list[np.ndarray] = []  # per-process output buffer, reused across cases


def _scratch(shape: tuple[int, ...]) -> np.ndarray:
    """A float32 array of `shape` backed by a reused buffer (no page faults per case)."""
    size = int(np.prod(shape))
    if not _SCRATCH or _SCRATCH[0].size < size:
        _SCRATCH[:] = [np.empty(size, dtype=np.float32)]
    return _SCRATCH[0][:size].reshape(shape)


def _image_xyzc(image: np.ndarray, path: str) -> np.ndarray:
    """(X, Y, Z, C) view of a 3D single-modality, 4D, or 5D (X, Y, Z, 1, C) vector image."""
    if image.ndim == 3:
        return image[..., None]
    if image.ndim == 5 and image.shape[3] == 1:
        return image[:, :, :, 0, :]
    if image.ndim != 4:
        raise DataError(
            f"{path}: image of shape {image.shape} is not 3D (X, Y, Z) or 4D (X, Y, Z, C)"
        )
    return image


def _label_xyz(label: np.ndarray, path: str) -> np.ndarray:
    """(X, Y, Z) view of a label map stored 3D or with trailing singleton axes."""
    while label.ndim > 3 and label.shape[-1] == 1:
        label = label[..., 0]
    if label.ndim != 3:
        raise DataError(f"{path}: label map of shape {label.shape} is not 3D (X, Y, Z)")
    return label


def _load_case(entry: dict[str, Any], channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Image (C, Z, Y, X) float32 and label (Z, Y, X), both views where possible."""
    case = entry["case"]
    image = _image_xyzc(read_nifti(entry["image"]), entry["image"])
    label = _label_xyz(read_nifti(entry["label"]), entry["label"])
    if image.shape[:3] != label.shape:
        raise DataError(
            f"case {case}: image shape {image.shape} does not match label shape {label.shape} "
            f"({entry['image']}, {entry['label']})"
        )
    if image.shape[3] != channels:
        raise DataError(
            f"{entry['image']}: case {case} has {image.shape[3]} channels, "
            f"dataset.json lists {channels} modalities"
        )
    if image.dtype != np.float32:  # other stored types (or byte orders): one conversion
        image = image.astype(np.float32)
    # NIfTI is Fortran-ordered (X fastest), so the (C, Z, Y, X) transpose is C-contiguous.
    return image.transpose(3, 2, 1, 0), label.transpose(2, 1, 0)


# (entry from brats.check_raw, output folder, patch (H, W), classes, channels)
CaseTask: TypeAlias = tuple[dict[str, Any], str, tuple[int, int], int, int]


def prepare_case(task: CaseTask) -> dict[str, Any]:
    """Load, crop, normalise, pad/crop and write one case; return small metadata only.

    `task` is (entry from check_raw, output folder, patch (H, W), classes, channels).
    """
    entry, out_dir, patch, n_class, channels = task
    case = entry["case"]
    image, label = _load_case(entry, channels)
    if not (label.min() >= 0 and label.max() <= n_class - 1):  # NaN fails too
        raise DataError(f"{entry['label']}: case {case} has label values outside 0..{n_class - 1}")
    box = _foreground_bbox(image)
    depth, h, w = (s.stop - s.start for s in box)
    if depth * h * w == 0:
        raise DataError(f"{entry['image']}: case {case} has an all-zero image")
    stats = [_channel_stats(image[c], depth * h * w) for c in range(image.shape[0])]
    if not all(math.isfinite(m) and math.isfinite(s) for m, s in stats):
        raise DataError(f"{entry['image']}: case {case} has NaN or infinite voxel values")
    (sh, dh), (sw, dw) = _window(h, patch[0]), _window(w, patch[1])
    x = _scratch((image.shape[0], depth, *patch))
    _zscore_into(x, image, box, stats, (sh, sw), (dh, dw))
    y = np.zeros((1, depth, *patch), dtype=np.uint8)
    lab = label[box][:, sh, sw]
    y[0, :, dh, dw] = np.rint(lab) if lab.dtype.kind == "f" else lab
    out = Path(out_dir)
    np.save(out / f"{case}_x.npy", x)
    np.save(out / f"{case}_y.npy", y)
    return {"case": case, "shape": list(image.shape), "bbox": [[s.start, s.stop] for s in box]}


def release_scratch() -> None:
    """Drop this process's output buffer (after an in-process run)."""
    _SCRATCH.clear()
