"""BraTS (MSD Task01_BrainTumour) and any MSD task like it: raw check, 2D preprocessing, folds.

Raw layout (as downloaded from the Medical Segmentation Decathlon):
`accelpipe.datasets.brats_layout`. A `path:` source may hold another MSD task: images 3D
(X, Y, Z) for one modality or 4D (X, Y, Z, C), any NIfTI variant nibabel reads
(`accelpipe.datasets.nifti`); the channel count is the number of `modality` entries and the
classes are the `labels` of its dataset.json.

Prepared layout (what the 2D loader in `accelpipe.inputs.slices` reads)::

    <out_dir>/<case>_x.npy   float32 (C, D, H, W)   z-scored image, axes (C, Z, Y, X)
    <out_dir>/<case>_y.npy   uint8   (1, D, H, W)   label
    <out_dir>/config.json    patch size, classes, channels, labels, sorted case names
    <out_dir>/folds.json     sklearn-compatible shuffled KFold over the sorted case names

Synthetic data: `accelpipe.datasets.brats_synthetic`; one case's preprocessing:
`accelpipe.datasets.brats_case`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path, read_json, write_json
from accelpipe.datasets import msd
from accelpipe.datasets.archives import ArchiveLimits
from accelpipe.datasets.brats_case import CaseTask, prepare_case, release_scratch
from accelpipe.datasets.brats_layout import LABELS, MODALITIES, TASK
from accelpipe.datasets.brats_synthetic import synthesize
from accelpipe.datasets.pool import map_tasks
from accelpipe.datasets.sources import RawSources, existing_copy

__all__ = [
    "SOURCES",
    "check_raw",
    "dataset_meta",
    "kfold",
    "make_folds",
    "prepare",
    "prepare_variant",
    "synthesize",
]

# --------------------------------------------------------------------------------------------
# Raw folder check
# --------------------------------------------------------------------------------------------


def _case_name(image_rel: str) -> str:
    name = Path(image_rel).name
    for suffix in (".nii.gz", ".nii"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def dataset_meta(task_dir: str | Path) -> tuple[dict[str, str], int]:
    """(labels, channels) of a task's dataset.json; DataError naming it if they are malformed.

    `labels` maps every label value "0".."n-1" (n >= 2, in order) to its name; `channels` is the
    number of `modality` entries. Either missing: BraTS's.
    """
    meta_path = Path(task_dir) / "dataset.json"
    return _labels_and_channels(read_json(meta_path), meta_path)


def _labels_and_channels(meta: Any, meta_path: Path) -> tuple[dict[str, str], int]:
    meta = meta if isinstance(meta, dict) else {}
    labels, modality = meta.get("labels") or LABELS, meta.get("modality") or MODALITIES
    if not isinstance(labels, dict) or not isinstance(modality, dict | list):
        raise DataError(f"{meta_path}: 'labels' and 'modality' must be objects")
    try:
        by_value = {int(k): str(v) for k, v in labels.items()}
    except ValueError:
        by_value = {}
    if len(by_value) < 2 or sorted(by_value) != list(range(len(labels))):
        raise DataError(
            f"{meta_path}: 'labels' must name the label values 0..n-1 (n >= 2), "
            f"got keys {list(labels)}"
        )
    return {str(v): by_value[v] for v in sorted(by_value)}, len(modality)


def check_raw(task_dir: str | Path) -> list[dict[str, Any]]:
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
    _labels_and_channels(meta, meta_path)
    entries: list[dict[str, Any]] = []
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
# Folds and preparation
# --------------------------------------------------------------------------------------------


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
    """Preprocess a raw MSD task folder for 2D training (see the module docstring); return out_dir.

    Per case (`brats_case.prepare_case`): (X, Y, Z[, C]) -> (C, Z, Y, X); crop to the image's
    non-zero bounding box; z-score each channel over the cropped volume; pad H, W symmetrically
    with zeros to >= patch_size and centre-crop to exactly patch_size. Runs on `workers`
    processes, each loading, processing and writing whole cases. Output is built in a temporary
    sibling and renamed: on any error (a DataError naming the file or case) an existing out_dir
    is left untouched.
    """
    task_dir = Path(task_dir)
    entries = check_raw(task_dir)
    if len(entries) < n_folds:
        raise DataError(f"{task_dir}: {len(entries)} cases is fewer than n_folds={n_folds}")
    labels, channels = dataset_meta(task_dir)
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


def _run(tasks: list[CaseTask], workers: int) -> Iterable[dict[str, Any]]:
    """prepare_case over tasks; a worker holds one case at a time and returns only metadata."""
    try:
        yield from map_tasks(prepare_case, tasks, workers)
    finally:
        release_scratch()  # in-process runs: do not keep a case-sized buffer in the caller


# --------------------------------------------------------------------------------------------
# Sources (run by `sources.make_raw`) and the prepared variants (`accelpipe prepare`)
# --------------------------------------------------------------------------------------------


def _synthesize(synth: dict[str, Any], out: Path, downloads: Path) -> None:
    synthesize(out, cases=synth["cases"], shape=synth["shape"], seed=synth["seed"])


def _download(block: dict[str, Any], out: Path, downloads: Path) -> None:
    msd.fetch_task(
        TASK,
        out,
        url=block["url"],
        md5=block["md5"],
        download_dir=downloads,
        limits=ArchiveLimits.from_config(block["archive"], "datasets.brats.msd.archive"),
    )


def _link_copy(location: str, out: Path) -> None:
    task_dir = existing_copy(location, TASK, "brats")
    check_raw(task_dir)
    out.mkdir(parents=True)
    (out / TASK).symlink_to(task_dir.resolve(), target_is_directory=True)


SOURCES = RawSources(
    dataset="brats",
    official="msd",
    settings="msd",
    synthesize=_synthesize,
    fetch=_download,
    link=_link_copy,
    check=lambda raw: {"cases": len(check_raw(raw / TASK))},
)


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
