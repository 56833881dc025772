"""Synthetic BraTS (MSD Task01_BrainTumour): brain-like volumes in the raw MSD layout.

Writes what `accelpipe.datasets.brats.check_raw` and `prepare` read, as the real download
has it (`accelpipe.datasets.brats_layout`):
`<raw_dir>/Task01_BrainTumour/{dataset.json, imagesTr/, labelsTr/, imagesTs/}`, images 4D
(X, Y, Z, 4) float32 with a zero background, labels 3D (X, Y, Z) uint8 with values 0..3.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import nibabel as nib
import numpy as np
import numpy.typing as npt

from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path
from accelpipe.datasets.brats_layout import LABELS, MODALITIES, TASK

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
    # nibabel ships py.typed but leaves these methods unannotated
    img = nib.Nifti1Image(data, affine)  # type: ignore[no-untyped-call]
    img.header.set_xyzt_units("mm", "sec")  # type: ignore[no-untyped-call]
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
    sq: npt.NDArray[np.float32] = sum(((a.astype(np.float32) - c) / r) ** 2 for a, c, r in terms)
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
