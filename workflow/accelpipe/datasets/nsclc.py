"""NSCLC-Radiomics (TCIA): DICOM CT + DICOM SEG, synthetic or downloaded, prepared to NIfTI.

Raw layout: `accelpipe.datasets.nsclc_layout`. Sources: `synthetic`
(accelpipe.datasets.nsclc_synthetic); `tcia` downloads the SEG series of the collection and
the CT series each one references through NBIA's REST API (see `tcia`; partial and finished
downloads live in the downloads folder, outside the raw output, so a failed run resumes);
`path:` links an existing copy after checking that it holds at least one SEG with its CT
series.

Prepared layout (variant `nifti`, what MONAI's `load_decathlon_datalist` reads)::

    <out>/images/<PatientID>.nii.gz    CT in Hounsfield units (int16, or float32 if rescaled)
    <out>/labels/<PatientID>.nii.gz    uint8 mask of the configured segment (e.g. GTV-1)
    <out>/datalist.json                {"training": [...], "validation": [...], "label": ...}
    <out>/config.json                  label, counts, shapes and voxel spacing summary

Image and label share shape (columns, rows, slices) and a RAS affine (see `dicom`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np

from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path, write_json
from accelpipe.datasets import dicom, tcia
from accelpipe.datasets.archives import ArchiveLimits
from accelpipe.datasets.nsclc_layout import COLLECTION
from accelpipe.datasets.nsclc_synthetic import synthesize
from accelpipe.datasets.pool import map_tasks
from accelpipe.datasets.sources import RawSources, existing_copy

log = logging.getLogger(__name__)

VARIANTS = ("nifti",)


# --------------------------------------------------------------------------------------------
# Raw tree: series found by their headers
# --------------------------------------------------------------------------------------------


@dataclass
class Series:
    """One series folder of the raw tree, described by the header of its first file."""

    uid: str
    patient: str
    modality: str
    files: list[Path]
    referenced: str | None = None  # SEG: SeriesInstanceUID of the image series it was drawn on


@dataclass
class Case:
    """One patient: its SEG instances, each with the files of the CT series it references."""

    patient: str
    segs: list[tuple[Path, list[Path]]] = field(default_factory=list)


def _series_folders(root: Path) -> Iterable[tuple[Path, list[Path]]]:
    """(folder, sorted .dcm files) for every folder under root that holds DICOM files."""
    for folder, _dirs, names in sorted(os.walk(root)):
        files = sorted(Path(folder) / n for n in names if n.lower().endswith(".dcm"))
        if files:
            yield Path(folder), files


def scan(root: Path) -> dict[str, Series]:
    """Every series under `root`, keyed by SeriesInstanceUID (one folder holds one series)."""
    if not root.is_dir():
        raise DataError(f"{root}: raw {COLLECTION} folder not found")
    found: dict[str, Series] = {}
    for folder, files in _series_folders(root):
        ds = dicom.read_dicom(files[0], pixels=False)
        uid = str(ds.get("SeriesInstanceUID", ""))
        if not uid:
            raise DataError(f"{files[0]}: no SeriesInstanceUID")
        if uid in found:
            raise DataError(
                f"series {uid} is in two folders: {found[uid].files[0].parent}, {folder}"
            )
        modality = str(ds.get("Modality", ""))
        ref = dicom.referenced_series_uid(ds, str(files[0])) if modality == "SEG" else None
        found[uid] = Series(uid, str(ds.get("PatientID", "")), modality, files, ref)
    return found


def check_raw(root: Path) -> list[Case]:
    """Cases (sorted by patient) of a raw tree; every SEG must have its CT series in the tree."""
    index = scan(root)
    segs = sorted((s for s in index.values() if s.modality == "SEG"), key=lambda s: s.uid)
    if not segs:
        raise DataError(
            f"{root}: no DICOM SEG series found "
            f"(expected {COLLECTION}/<PatientID>/<SeriesInstanceUID>/*.dcm)"
        )
    cases: dict[str, Case] = {}
    for seg in segs:
        image = index.get(seg.referenced or "")
        if image is None:
            raise DataError(
                f"{seg.files[0]}: SEG series {seg.uid} references image series "
                f"{seg.referenced}, which is not under {root}"
            )
        case = cases.setdefault(seg.patient, Case(seg.patient))
        case.segs += [(path, image.files) for path in seg.files]
    return [cases[p] for p in sorted(cases)]


# --------------------------------------------------------------------------------------------
# Preparation: DICOM -> NIfTI + datalist
# --------------------------------------------------------------------------------------------


def _save_nifti(data: np.ndarray, affine: np.ndarray, path: Path) -> None:
    # nibabel ships py.typed but leaves these methods unannotated
    img = nib.Nifti1Image(data, affine)  # type: ignore[no-untyped-call]
    img.set_qform(affine, code=1)  # type: ignore[no-untyped-call]  # scanner coordinates (RAS)
    img.set_sform(affine, code=1)  # type: ignore[no-untyped-call]
    img.header.set_xyzt_units("mm", "sec")  # type: ignore[no-untyped-call]
    nib.save(img, path)


def _prepare_case(task: tuple[Case, str, str]) -> dict[str, Any]:
    """Read one patient's CT and SEG, write image and label NIfTI; return small metadata."""
    case, label, out_dir = task
    segs = [(path, dicom.read_dicom(path), ct_files) for path, ct_files in case.segs]
    # A patient may have several SEGs: use the first that has the label, else report the first.
    path, seg, ct_files = next((s for s in segs if dicom.has_segment(s[1], label)), segs[0])
    ct = dicom.read_ct_series(ct_files)
    mask = dicom.segment_mask(seg, path, label, ct)
    name = dicom.safe_name(case.patient)
    _save_nifti(ct.hu, ct.affine, Path(out_dir) / "images" / f"{name}.nii.gz")
    _save_nifti(mask, ct.affine, Path(out_dir) / "labels" / f"{name}.nii.gz")
    return {
        "patient": case.patient,
        "name": name,
        "shape": list(ct.hu.shape),
        "spacing": [round(v, 4) for v in ct.spacing],
        "label_voxels": int(mask.sum()),
        "seg_series": str(seg.SeriesInstanceUID),
        "ct_series": ct.series_uid,
    }


def split(names: Sequence[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Seeded (training, validation) split of sorted names; at least one case in each."""
    names = sorted(names)
    if len(names) < 2:
        raise DataError(f"need at least 2 patients for a training/validation split, got {names}")
    n_val = min(max(1, round(len(names) * val_fraction)), len(names) - 1)
    val = {names[i] for i in np.random.default_rng(seed).permutation(len(names))[:n_val]}
    return [n for n in names if n not in val], sorted(val)


def _summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    spacing = np.array([c["spacing"] for c in cases])
    shapes = np.array([c["shape"] for c in cases])
    return {
        "spacing": {
            "min": spacing.min(0).tolist(),
            "median": np.median(spacing, 0).tolist(),
            "max": spacing.max(0).tolist(),
        },
        "shape": {"min": shapes.min(0).tolist(), "max": shapes.max(0).tolist()},
    }


def _datalist(
    cases: dict[str, dict[str, Any]], train: list[str], val: list[str], label: str
) -> dict[str, Any]:
    def entry(patient: str) -> dict[str, str]:
        name = cases[patient]["name"]
        return {
            "image": f"images/{name}.nii.gz",
            "label": f"labels/{name}.nii.gz",
            "patient": patient,
        }

    return {
        "name": COLLECTION,
        "modality": {"0": "CT"},
        "labels": {"0": "background", "1": label},
        "label": label,
        "training": [entry(p) for p in train],
        "validation": [entry(p) for p in val],
    }


def prepare(
    root: str | Path,
    out_dir: str | Path,
    *,
    label: str = "GTV-1",
    val_fraction: float = 0.2,
    split_seed: int = 0,
    workers: int = 1,
) -> Path:
    """Convert a raw NSCLC-Radiomics tree to NIfTI + datalist.json (module docstring); return out.

    One process per patient at a time on `workers` processes. Output is built in a temporary
    sibling and renamed: on any error (one DataError naming the file or series) an existing
    `out_dir` is left untouched.
    """
    root = Path(root)
    cases = check_raw(root)
    train, val = split([c.patient for c in cases], val_fraction, split_seed)
    with atomic_path(out_dir) as tmp:
        (tmp / "images").mkdir(parents=True)
        (tmp / "labels").mkdir()
        tasks = [(c, label, str(tmp)) for c in cases]
        done = {m["patient"]: m for m in map_tasks(_prepare_case, tasks, workers)}
        write_json(tmp / "datalist.json", _datalist(done, train, val, label))
        meta = [done[p] for p in sorted(done)]
        config = {
            "label": label,
            "patients": len(meta),
            "training": len(train),
            "validation": len(val),
            "val_fraction": val_fraction,
            "split_seed": split_seed,
            **_summary(meta),
            "cases": meta,
        }
        write_json(tmp / "config.json", config)
    return Path(out_dir)


# --------------------------------------------------------------------------------------------
# Sources (run by `sources.make_raw`) and the prepared variants (`accelpipe prepare`)
# --------------------------------------------------------------------------------------------


def _synthesize(synth: dict[str, Any], out: Path, downloads: Path) -> None:
    synthesize(
        out,
        patients=synth["patients"],
        shape=synth["shape"],
        pixel_spacing=synth["pixel_spacing"],
        slice_thickness=synth["slice_thickness"],
        seed=synth["seed"],
    )


def _download(block: dict[str, Any], out: Path, downloads: Path) -> None:
    out.mkdir(parents=True)
    facts = tcia.fetch_collection(
        block["url"],
        block["collection"],
        out / COLLECTION,
        downloads,
        block["download_len"],
        limits=ArchiveLimits.from_config(block["archive"], "datasets.nsclc.tcia.archive"),
    )
    log.info("fetched %(series)d series of %(patients)d patients from TCIA", facts)


def _link_copy(location: str, out: Path) -> None:
    root = existing_copy(location, COLLECTION, "nsclc")
    check_raw(root)
    out.mkdir(parents=True)
    (out / COLLECTION).symlink_to(root.resolve(), target_is_directory=True)


SOURCES = RawSources(
    dataset="nsclc",
    official="tcia",
    settings="tcia",
    synthesize=_synthesize,
    fetch=_download,
    link=_link_copy,
    check=lambda raw: {"patients": len(check_raw(raw / COLLECTION))},
)


def prepare_variant(variant: str, raw: Path, out: Path, cfg: dict[str, Any], workers: int) -> Path:
    """The prepared variants of NSCLC-Radiomics; `nifti` is CT + label NIfTI with a datalist."""
    if variant not in VARIANTS:
        raise DataError(f"nsclc has no prepared variant {variant!r} (known: {', '.join(VARIANTS)})")
    p = cfg["prepare"]
    return prepare(
        Path(raw) / COLLECTION,
        out,
        label=p["label"],
        val_fraction=p["val_fraction"],
        split_seed=p["split_seed"],
        workers=workers,
    )
