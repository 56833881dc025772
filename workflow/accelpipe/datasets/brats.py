"""BraTS (MSD Task01_BrainTumour): synthetic data, raw-folder check, dim-2 preprocessing, folds.

Raw layout (as downloaded from the Medical Segmentation Decathlon)::

    <raw_dir>/Task01_BrainTumour/dataset.json
    <raw_dir>/Task01_BrainTumour/imagesTr/BRATS_001.nii.gz   # 4D (X, Y, Z, 4) float
    <raw_dir>/Task01_BrainTumour/labelsTr/BRATS_001.nii.gz   # 3D (X, Y, Z) uint8, values 0..3
    <raw_dir>/Task01_BrainTumour/imagesTs/

Prepared layout (what the 2D loader in `accelpipe.datasets.slices` reads)::

    <out_dir>/<case>_x.npy   float32 (4, D, H, W)   z-scored image, axes (C, Z, Y, X)
    <out_dir>/<case>_y.npy   uint8   (1, D, H, W)   label
    <out_dir>/config.json    patch size, classes, channels, labels, sorted case names
    <out_dir>/folds.json     sklearn-compatible shuffled KFold over the sorted case names
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np

from accelpipe.datasets import existing_copy
from accelpipe.datasets.pool import map_tasks
from accelpipe.errors import DataError
from accelpipe.io import atomic_path, read_json, write_json

TASK = "Task01_BrainTumour"
MODALITIES = {"0": "FLAIR", "1": "T1w", "2": "t1gd", "3": "T2w"}
LABELS = {"0": "background", "1": "edema", "2": "non-enhancing tumor", "3": "enhancing tumour"}

# --------------------------------------------------------------------------------------------
# Synthetic data
# --------------------------------------------------------------------------------------------

# Tissue classes of the synthetic anatomy; rows of _CONTRAST.
_WM, _GM, _CSF, _VESSEL, _EDEMA, _CORE, _ENH = range(7)
_TUMOUR_LABEL = {_EDEMA: 1, _CORE: 2, _ENH: 3}
# Mean intensity per tissue and channel (FLAIR, T1w, t1gd, T2w), relative to white matter.
# No single channel separates the sub-regions: CSF is as bright as edema in T2, vessels are
# bright in t1gd like the enhancing rim, and the core is only dark in t1gd/T1w (like CSF).
_CONTRAST = np.array(
    [
        [0.65, 0.95, 0.90, 0.55],  # white matter
        [0.85, 0.65, 0.62, 0.80],  # grey matter
        [0.15, 0.22, 0.22, 1.45],  # CSF: dark FLAIR, bright T2
        [0.62, 0.62, 1.30, 0.50],  # vessels: bright in t1gd only
        [1.15, 0.58, 0.60, 1.10],  # edema: bright FLAIR and T2
        [0.90, 0.40, 0.35, 1.35],  # necrotic / non-enhancing core: dark t1gd, bright T2
        [1.00, 0.70, 1.30, 0.90],  # enhancing rim: bright t1gd
    ],
    dtype=np.float32,
)
_MIN_SHAPE = 16
_MIN_REGION_VOXELS = 8


def synthesize(
    raw_dir: str | Path,
    *,
    cases: int = 10,
    shape: Sequence[int] = (64, 64, 32),
    seed: int = 0,
) -> Path:
    """Write a synthetic, brain-like Task01_BrainTumour into `raw_dir`; return the task folder.

    Deterministic by `seed` (case i uses the generator seeded with (seed, i)). The folder is
    built in a temporary sibling and renamed, so it is either complete or absent.
    """
    shape = tuple(int(s) for s in shape)
    if cases < 1 or len(shape) != 3 or min(shape) < _MIN_SHAPE:
        raise DataError(
            f"synthetic {TASK}: need cases >= 1 and a 3D shape with every side >= {_MIN_SHAPE}, "
            f"got cases={cases}, shape={shape}"
        )
    final = Path(raw_dir) / TASK
    names = [f"BRATS_{i + 1:03d}" for i in range(cases)]
    with atomic_path(final) as tmp:
        for sub in ("imagesTr", "labelsTr", "imagesTs"):
            (tmp / sub).mkdir(parents=True)
        for i, name in enumerate(names):
            image, label = _synth_case(np.random.default_rng([seed, i]), shape)
            affine = np.diag([1.0, 1.0, 1.0, 1.0])  # 1 mm isotropic, like the real data
            _save_nifti(image, affine, tmp / "imagesTr" / f"{name}.nii.gz")
            _save_nifti(label, affine, tmp / "labelsTr" / f"{name}.nii.gz")
        _write_dataset_json(tmp / "dataset.json", names, seed)
    return final


def _save_nifti(data: np.ndarray, affine: np.ndarray, path: Path) -> None:
    img = nib.Nifti1Image(data, affine)
    img.header.set_xyzt_units("mm", "sec")
    nib.save(img, path)


def _write_dataset_json(path: Path, names: Sequence[str], seed: int) -> None:
    meta = {
        "name": "BRATS",
        "description": f"Synthetic brain-tumour volumes in the MSD Task01 layout (seed {seed})",
        "reference": "accelpipe synthetic data",
        "licence": "CC-BY-SA 4.0",
        "release": "1.0",
        "tensorImageSize": "4D",
        "modality": MODALITIES,
        "labels": LABELS,
        "numTraining": len(names),
        "numTest": 0,
        "training": [
            {"image": f"./imagesTr/{n}.nii.gz", "label": f"./labelsTr/{n}.nii.gz"} for n in names
        ],
        "test": [],
    }
    path.write_text(json.dumps(meta, indent=4) + "\n")


def _smooth_field(rng: np.random.Generator, shape: tuple[int, ...], cells: int = 4) -> np.ndarray:
    """A smooth random field of unit std: Gaussian-RBF upsampling of a coarse noise grid."""
    field = rng.standard_normal((cells + 1,) * len(shape)).astype(np.float32)
    for n in shape:  # contract the leading coarse axis each time; the new fine axis goes last
        t = np.linspace(0.0, cells, n, dtype=np.float32)[:, None]
        basis = np.exp(-0.5 * ((t - np.arange(cells + 1, dtype=np.float32)) / 0.7) ** 2)
        basis /= basis.sum(axis=1, keepdims=True)
        field = np.tensordot(field, basis, axes=([0], [1]))
    field -= field.mean()
    return field / max(float(field.std()), 1e-6)


def _ellipsoid_dist(shape: tuple[int, ...], centre: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """Normalised ellipsoidal distance: < 1 inside the ellipsoid."""
    axes = np.ogrid[tuple(slice(0, n) for n in shape)]
    centre, radii = np.asarray(centre, np.float32), np.asarray(radii, np.float32)
    terms = zip(axes, centre, radii, strict=True)
    sq = sum(((a.astype(np.float32) - c) / r) ** 2 for a, c, r in terms)
    return np.sqrt(sq)


def _brain_tissues(
    rng: np.random.Generator, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tissue map of an off-centre ellipsoidal brain: (tissue int8, brain mask, centre, radii)."""
    size = np.array(shape, dtype=np.float32)
    radii = size * rng.uniform(0.30, 0.37, 3).astype(np.float32)
    room = np.maximum(size / 2 - 1.1 * radii - 1, 0)  # keep a zero margin for crop-to-foreground
    centre = size / 2 + rng.uniform(-1, 1, 3).astype(np.float32) * room
    dist = _ellipsoid_dist(shape, centre, radii) * (
        1 + 0.04 * np.clip(_smooth_field(rng, shape), -2, 2)
    )
    brain = dist < 1
    tissue = np.full(shape, _WM, dtype=np.int8)
    # Cortical grey-matter band plus deep grey patches; a thin CSF layer on the surface.
    deep_grey = _smooth_field(rng, shape, cells=6) > 1.2
    tissue[(dist > 0.78) | deep_grey] = _GM
    tissue[dist > 0.94] = _CSF
    for side in (-1, 1):  # two lateral ventricles
        offset = np.array([side * 0.13, 0.05, 0.0], dtype=np.float32) * radii
        vent = _ellipsoid_dist(shape, centre + offset, radii * np.array([0.09, 0.28, 0.22]))
        tissue[vent < 1] = _CSF
    for _ in range(int(rng.integers(12, 24))):  # small vessels, bright in t1gd only
        spot = centre + rng.uniform(-0.8, 0.8, 3).astype(np.float32) * radii
        tissue[_ellipsoid_dist(shape, spot, rng.uniform(0.8, 1.8, 3)) < 1] = _VESSEL
    return tissue, brain, centre, radii


def _add_tumour(
    rng: np.random.Generator,
    tissue: np.ndarray,
    brain: np.ndarray,
    centre: np.ndarray,
    radii: np.ndarray,
) -> np.ndarray:
    """Paint nested edema > enhancing rim > core into `tissue`; return the label map."""
    shape = tissue.shape
    for _ in range(100):  # redraw until every sub-region is present (almost always the first try)
        direction = rng.standard_normal(3).astype(np.float32)
        direction *= rng.uniform(0.0, 0.35) / max(float(np.linalg.norm(direction)), 1e-6)
        t_centre = centre + direction * radii
        t_radii = radii * rng.uniform(0.42, 0.58) * rng.uniform(0.85, 1.15, 3)
        rim = rng.uniform(0.6, 0.75)
        core = rim * rng.uniform(0.55, 0.75)
        dist = _ellipsoid_dist(shape, t_centre, t_radii.astype(np.float32))
        outer = dist * (1 + 0.15 * np.clip(_smooth_field(rng, shape), -2, 2))
        inner = dist * (1 + 0.07 * np.clip(_smooth_field(rng, shape, cells=6), -2, 2))
        label = np.zeros(shape, dtype=np.uint8)
        label[outer < 1] = 1
        label[inner < rim] = 3
        label[inner < core] = 2
        label[~brain] = 0
        counts = np.bincount(label.ravel(), minlength=4)
        if counts[1:].min() >= _MIN_REGION_VOXELS:
            for cls, value in _TUMOUR_LABEL.items():
                tissue[label == value] = cls
            return label
    raise DataError(f"synthetic {TASK}: shape {shape} is too small to hold a tumour")


def _blur3(vol: np.ndarray, axes: Iterable[int]) -> np.ndarray:
    """Binomial [1, 2, 1]/4 smoothing along `axes` (partial-volume effect at tissue edges)."""
    for ax in axes:
        pad = [(1, 1) if a == ax else (0, 0) for a in range(vol.ndim)]
        p = np.pad(vol, pad, mode="edge")
        n = vol.shape[ax]

        def shifted(start: int, p: np.ndarray = p, ax: int = ax, n: int = n) -> np.ndarray:
            return p[(slice(None),) * ax + (slice(start, start + n),)]

        vol = 0.25 * shifted(0) + 0.5 * shifted(1) + 0.25 * shifted(2)
    return vol


def _synth_case(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One case: image (X, Y, Z, 4) float32 with a zero background, label (X, Y, Z) uint8."""
    tissue, brain, centre, radii = _brain_tissues(rng, shape)
    label = _add_tumour(rng, tissue, brain, centre, radii)
    # Per-case contrast jitter; stronger for the tumour tissues.
    jitter = rng.uniform(0.92, 1.08, _CONTRAST.shape)
    jitter[_EDEMA:] = rng.uniform(0.85, 1.15, (3, 4))
    contrast = (_CONTRAST * jitter).astype(np.float32)
    image = contrast[tissue]  # (X, Y, Z, 4)
    texture = 1 + 0.04 * _smooth_field(rng, shape, cells=8)
    tumour = label > 0
    texture[tumour] += 0.06 * _smooth_field(rng, shape, cells=8)[tumour]  # heterogeneous tumour
    image *= texture[..., None]
    image = _blur3(image, axes=(0, 1, 2))
    for c in range(4):  # smooth multiplicative bias, Gaussian noise, arbitrary scanner scale
        bias = np.exp(0.2 * _smooth_field(rng, shape, cells=3))
        noise = rng.standard_normal(shape, dtype=np.float32) * rng.uniform(0.06, 0.12)
        scale = rng.uniform(200, 1200)
        image[..., c] = np.maximum(image[..., c] * bias + noise, 0.01) * scale
    image[~brain] = 0  # skull-stripped: exactly zero outside the brain
    return np.ascontiguousarray(image, dtype=np.float32), label


# --------------------------------------------------------------------------------------------
# Raw folder check
# --------------------------------------------------------------------------------------------


def _case_name(image_rel: str) -> str:
    name = Path(image_rel).name
    for suffix in (".nii.gz", ".nii"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def check_raw(task_dir: str | Path) -> list[dict]:
    """Validate a raw MSD task folder; return [{"case", "image", "label"}] in dataset.json order.

    Raises DataError naming dataset.json if it is missing or malformed, the first missing
    image file, or the first case without a label.
    """
    task_dir = Path(task_dir)
    meta_path = task_dir / "dataset.json"
    meta = read_json(meta_path)
    training = meta.get("training") if isinstance(meta, dict) else None
    if not isinstance(training, list) or not training:
        raise DataError(f"{meta_path}: no 'training' list of cases")
    entries: list[dict] = []
    seen: set[str] = set()
    for i, item in enumerate(training):
        if not isinstance(item, dict) or not isinstance(item.get("image"), str):
            raise DataError(f"{meta_path}: training entry {i} has no 'image' path")
        case = _case_name(item["image"])
        if case in seen:
            raise DataError(f"{meta_path}: case {case} is listed twice")
        seen.add(case)
        image = task_dir / item["image"]
        if not image.is_file():
            raise DataError(f"{image}: image of case {case} listed in {meta_path} not found")
        label_rel = item.get("label")
        if not isinstance(label_rel, str):
            raise DataError(f"case {case} has no label in {meta_path}")
        label = task_dir / label_rel
        if not label.is_file():
            raise DataError(f"case {case} has no label: {label} not found")
        entries.append({"case": case, "image": image, "label": label})
    return entries


# --------------------------------------------------------------------------------------------
# Preprocessing
# --------------------------------------------------------------------------------------------


def _gunzip(raw: bytes) -> bytes:
    """Decompress a gzip file, checking its CRC; EOFError/zlib.error if truncated or corrupt.

    zlib gets the output size from the gzip trailer (ISIZE), so it fills one buffer instead of
    joining chunks: ~25% faster than gzip.open().read(). Multi-member files (bgzip) and
    anything odd take the general gzip path.
    """
    isize = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    if 0 < isize <= 1100 * len(raw):  # deflate cannot expand more than ~1032x
        try:
            out = zlib.decompress(raw, 31, isize)
            if len(out) == isize:
                return out
        except MemoryError:
            pass
    return gzip.decompress(raw)


def _read_nifti(path: Path) -> np.ndarray:
    """Array of a .nii/.nii.gz in its stored dtype and axis order, as a view on the bytes.

    Faster than `nib.load(...).get_fdata()`: one gzip pass, no float64 copy, no extra read
    buffer. nibabel parses the header and tells where and how the data is stored.
    """
    try:
        raw = path.read_bytes()
        data = _gunzip(raw) if path.name.endswith(".gz") else raw
        proxy = nib.Nifti1Image.from_bytes(data).dataobj
        count = int(np.prod(proxy.shape))
        if len(data) < proxy.offset + count * proxy.dtype.itemsize:
            raise EOFError("file is shorter than its header says")
        arr = np.frombuffer(data, proxy.dtype, count, proxy.offset)
        arr = arr.reshape(proxy.shape, order=proxy.order)
    except (OSError, EOFError, zlib.error, ValueError, nib.filebasedimages.ImageFileError) as err:
        raise DataError(f"{path}: unreadable or truncated NIfTI ({err})") from None
    slope, inter = float(proxy.slope), float(proxy.inter)
    if (slope, inter) != (1.0, 0.0):
        arr = arr * np.float32(slope) + np.float32(inter)
    return arr


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
    src: tuple[slice, slice],
    dst: tuple[slice, slice],
) -> None:
    """Per-channel z-score of image[:, box] (stats over the whole box) into out (C, D, H, W).

    `src`/`dst` are the (H, W) slices of the cropped volume and of `out` from the pad/centre
    crop; only the padding margins of `out` are zeroed (it is a reused, uninitialised buffer).
    """
    crop = image[(slice(None), *box)]
    n = crop[0].size
    (sh, sw), (dh, dw) = src, dst
    for c in range(image.shape[0]):
        mean, std = _channel_stats(image[c], n)
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


def _load_case(entry: dict, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Image (C, Z, Y, X) float32 and label (Z, Y, X), both views where possible."""
    case = entry["case"]
    image = _read_nifti(Path(entry["image"]))
    label = _read_nifti(Path(entry["label"]))
    if image.ndim == 3:
        image = image[..., None]
    if image.ndim != 4 or label.ndim != 3 or image.shape[:3] != label.shape:
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


def _prepare_case(task: tuple[dict, str, tuple[int, int], int, int]) -> dict[str, Any]:
    """Load, crop, normalise, pad/crop and write one case; return small metadata only."""
    entry, out_dir, patch, n_class, channels = task
    case = entry["case"]
    image, label = _load_case(entry, channels)
    if label.min() < 0 or label.max() > n_class - 1:
        raise DataError(f"{entry['label']}: case {case} has label values outside 0..{n_class - 1}")
    box = _foreground_bbox(image)
    depth, h, w = (s.stop - s.start for s in box)
    if depth * h * w == 0:
        raise DataError(f"{entry['image']}: case {case} has an all-zero image")
    (sh, dh), (sw, dw) = _window(h, patch[0]), _window(w, patch[1])
    x = _scratch((image.shape[0], depth, *patch))
    _zscore_into(x, image, box, (sh, sw), (dh, dw))
    y = np.zeros((1, depth, *patch), dtype=np.uint8)
    lab = label[box][:, sh, sw]
    y[0, :, dh, dw] = np.rint(lab) if lab.dtype.kind == "f" else lab
    out = Path(out_dir)
    np.save(out / f"{case}_x.npy", x)
    np.save(out / f"{case}_y.npy", y)
    return {"case": case, "shape": list(image.shape), "bbox": [[s.start, s.stop] for s in box]}


def kfold(n: int, n_folds: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """sklearn `KFold(n_folds, shuffle=True, random_state=seed).split(range(n))`, reimplemented.

    sklearn shuffles arange(n) with RandomState(seed), cuts it into consecutive test chunks of
    n // k (+1 for the first n % k) and returns both index sets sorted (it goes via masks).
    """
    if n_folds < 2 or n < n_folds:
        raise DataError(f"cannot split {n} cases into {n_folds} folds")
    order = np.arange(n)
    np.random.RandomState(seed).shuffle(order)
    sizes = np.full(n_folds, n // n_folds)
    sizes[: n % n_folds] += 1
    folds, start = [], 0
    for size in sizes:
        test = np.zeros(n, dtype=bool)
        test[order[start : start + size]] = True
        start += size
        folds.append((np.flatnonzero(~test).tolist(), np.flatnonzero(test).tolist()))
    return folds


def make_folds(cases: Sequence[str], n_folds: int, seed: int) -> dict[str, Any]:
    """folds.json content: KFold over the sorted case names."""
    names = sorted(cases)
    splits = kfold(len(names), n_folds, seed)
    return {
        "n_folds": n_folds,
        "seed": seed,
        "folds": [
            {"train": [names[i] for i in tr], "val": [names[i] for i in va]} for tr, va in splits
        ],
    }


def prepare(
    task_dir: str | Path,
    out_dir: str | Path,
    *,
    patch_size: Sequence[int] = (192, 160),
    n_folds: int = 5,
    fold_seed: int = 12345,
    workers: int = 1,
) -> Path:
    """Preprocess a raw Task01 folder for 2D training (see the module docstring); return out_dir.

    Per case: (X, Y, Z, C) -> (C, Z, Y, X); crop to the image's non-zero bounding box; z-score
    each channel over the cropped volume; pad H, W symmetrically with zeros to >= patch_size and
    centre-crop to exactly patch_size. Runs on `workers` processes, each loading, processing and
    writing whole cases. Output is built in a temporary sibling and renamed: on any error (a
    DataError naming the file or case) an existing out_dir is left untouched.
    """
    task_dir = Path(task_dir)
    entries = check_raw(task_dir)
    if len(entries) < n_folds:
        raise DataError(f"{task_dir}: {len(entries)} cases is fewer than n_folds={n_folds}")
    meta = read_json(task_dir / "dataset.json")
    labels = meta.get("labels") or LABELS
    channels = len(meta.get("modality") or MODALITIES)
    patch = tuple(int(p) for p in patch_size)
    if len(patch) != 2 or min(patch) < 1:
        raise DataError(f"patch_size must be two positive ints (H, W), got {list(patch_size)}")
    folds = make_folds([e["case"] for e in entries], n_folds, fold_seed)
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        tasks = [(e, str(tmp), patch, len(labels), channels) for e in entries]
        for _ in _run(tasks, workers):
            pass  # workers write their case; a DataError from any of them aborts everything
        config = {
            "patch_size": list(patch),
            "n_class": len(labels),
            "in_channels": channels,
            "labels": labels,
            "cases": sorted(e["case"] for e in entries),
        }
        write_json(tmp / "config.json", config)
        write_json(tmp / "folds.json", folds)
    return Path(out_dir)


def _run(tasks: list, workers: int) -> Iterable[dict]:
    """_prepare_case over tasks; a worker holds one case at a time and returns only metadata."""
    try:
        yield from map_tasks(_prepare_case, tasks, workers)
    finally:
        _SCRATCH.clear()  # in-process runs: do not keep a case-sized buffer alive in the caller


# --------------------------------------------------------------------------------------------
# Pipeline entry points (called by `accelpipe raw` and `accelpipe prepare`)
# --------------------------------------------------------------------------------------------


def make_raw(cfg: dict[str, Any], out: Path, downloads: str | Path) -> dict[str, Any]:
    """Create the raw layout `<out>/Task01_BrainTumour` from the configured source."""
    from accelpipe.datasets import msd

    source = cfg["source"]
    if source == "synthetic":
        synth = cfg["synthetic"]
        synthesize(out, cases=synth["cases"], shape=synth["shape"], seed=synth["seed"])
    elif source == "msd":
        msd.fetch_task(
            TASK, out, url=cfg["msd"]["url"], md5=cfg["msd"]["md5"], download_dir=downloads
        )
    else:
        task_dir = existing_copy(source.removeprefix("path:"), TASK, "brats")
        check_raw(task_dir)
        out.mkdir(parents=True)
        (out / TASK).symlink_to(task_dir.resolve(), target_is_directory=True)
    cases = check_raw(out / TASK)
    return {"source": source.split(":", 1)[0], "cases": len(cases)}


def prepare_variant(variant: str, raw: Path, out: Path, cfg: dict[str, Any], workers: int) -> Path:
    """The prepared variants of BraTS; `2d` is nnU-Net's 2D preprocessing."""
    if variant != "2d":
        raise DataError(f"brats has no prepared variant {variant!r} (known: 2d)")
    return prepare(
        raw / TASK,
        out,
        patch_size=cfg["prepare"]["patch_size"],
        n_folds=cfg["folds"],
        fold_seed=cfg["prepare"]["fold_seed"],
        workers=workers,
    )
