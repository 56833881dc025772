"""ADE20K (SceneParsing, ADEChallengeData2016; the Segmenter workload): raw sources, raw
check, TFRecord preparation.

Raw layout: `accelpipe.datasets.ade20k_layout`. Sources: `synthetic`
(accelpipe.datasets.ade20k_synthetic), `ade20k` (the official zip, downloaded with resume and
a sha1 check, then safely extracted) and `path:` (an existing copy, linked after its layout is
checked).

Prepared layout (variant `tfrecord`, accelpipe.datasets.ade20k_tfrecord)::

    <out>/train-%05d-of-%05d.tfrecord   every training image with its annotation
    <out>/val-%05d-of-%05d.tfrecord     every validation image
    <out>/dataset.json                  counts, shards, classes, the label convention
    <out>/shards-checked.json           each shard's size and mtime once walked whole
                                        (tfrecord.CHECKED: the input pipelines skip the walk)

The records keep the raw PNG values; ade20k_input.shift_labels applies the one label shift.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

from accelpipe.core.errors import DataError
from accelpipe.core.io import atomic_path, write_json
from accelpipe.datasets.ade20k_layout import CLASS_NAMES, IGNORE_INDEX, NUM_CLASSES, ROOT, SPLITS
from accelpipe.datasets.ade20k_synthetic import synthesize
from accelpipe.datasets.ade20k_tfrecord import FEATURES, encode, pair_files, pairs
from accelpipe.datasets.archives import ArchiveLimits, safe_extract
from accelpipe.datasets.download import download
from accelpipe.datasets.sources import RawSources, existing_copy
from accelpipe.datasets.tfrecord import Split, write_splits

VARIANT = "tfrecord"
FORMAT = "accelpipe ADE20K TFRecord v1: ADEChallengeData2016 JPEG and PNG bytes as they are"
LABEL_CONVENTION = (
    "records hold the raw annotation PNG: 0 = unlabelled, k in 1..150 = class k; "
    "ade20k_input.shift_labels maps 0 -> ignore_index 255 and k -> k - 1 (mmseg "
    "reduce_zero_label), so class c of `classes` is label c"
)


def check_raw(raw: str | Path) -> dict[str, int]:
    """Check the layout and that every image has its annotation and vice versa; return the
    images per split. Pixel contents are checked when the records are written."""
    return {split: len(pairs(Path(raw), split)) for split in SPLITS}


# ----------------------------------------------------------------------------- sources


def fetch(
    out: Path,
    downloads: str | Path,
    url: str,
    sha1: str,
    *,
    limits: ArchiveLimits,
    progress: bool = True,
) -> Path:
    """Download (resuming, sha1-checked) and extract the zip; its ADEChallengeData2016/ becomes
    `out`. The zip stays in `downloads`, so a rerun costs no transfer."""
    archive = download(url, Path(downloads) / f"{ROOT}.zip", sha1=sha1, progress=progress)
    unpacked = out.with_name(f".unpack-{out.name}")
    safe_extract(archive, unpacked, limits=limits)
    try:
        if not (unpacked / ROOT).is_dir():
            raise DataError(f"{archive}: has no top-level folder {ROOT}/")
        (unpacked / ROOT).rename(out)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
    return out


def _link_copy(location: str, out: Path) -> None:
    """Link the layout of an existing copy (ADEChallengeData2016/ itself or its parent)."""
    root = existing_copy(location, ROOT, "ade20k")
    check_raw(root)
    out.mkdir(parents=True)
    for folder in ("images", "annotations"):
        (out / folder).symlink_to((root / folder).resolve(), target_is_directory=True)


def _synthesize(synth: dict[str, Any], out: Path, downloads: Path) -> None:
    synthesize(
        out,
        train_images=synth["train_images"],
        val_images=synth["val_images"],
        size=synth["size"],
        seed=synth["seed"],
    )


def _download(block: dict[str, Any], out: Path, downloads: Path) -> None:
    limits = ArchiveLimits.from_config(block["archive"], "datasets.ade20k.download.archive")
    fetch(out, downloads, block["url"], block["sha1"], limits=limits)


SOURCES = RawSources(
    dataset="ade20k",
    official="ade20k",
    settings="download",
    synthesize=_synthesize,
    fetch=_download,
    link=_link_copy,
    check=lambda raw: {"images": check_raw(raw)},
)


# ----------------------------------------------------------------------------- preparation


def prepare(
    raw: str | Path,
    out: str | Path,
    *,
    train_shards: int = 64,
    val_shards: int = 8,
    workers: int = 1,
    verify_labels: bool = False,
) -> Path:
    """Write the TFRecord shards and dataset.json into `out` (atomic).

    A missing partner file stops it before any record is written; an image that is not a
    complete JPEG or PNG (by its bytes: a PNG under a .jpg name is fine), a bad annotation PNG
    or a size mismatch stops it from the worker, and so does an annotation value above 150
    with `verify_labels` (without it, ade20k_input finds one when it decodes the label). Each
    is one DataError naming the files, and an existing `out` is left untouched. Records are
    checked against the expected count.
    """
    raw, out = Path(raw), Path(out)
    shards = {"train": train_shards, "val": val_shards}
    plans = {split: pairs(raw, split) for split in SPLITS}
    encoder = functools.partial(encode, verify_labels=verify_labels)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        splits = [Split(split, plans[split], shards[split]) for split in SPLITS]
        write_splits(tmp, splits, encoder, workers, pair_files)
        counts = {split: len(plans[split]) for split in SPLITS}
        write_json(tmp / "dataset.json", _meta(counts, shards, verify_labels))
    return out


def _meta(counts: dict[str, int], shards: dict[str, int], verify_labels: bool) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "features": FEATURES,
        "splits": {s: {"images": counts[s], "shards": shards[s]} for s in SPLITS},
        "num_classes": NUM_CLASSES,
        "ignore_index": IGNORE_INDEX,
        "label_convention": LABEL_CONVENTION,
        "label_values_checked": "in prepare and the input pipeline"
        if verify_labels
        else "in the input pipeline (each label as it is decoded)",
        "classes": list(CLASS_NAMES),
    }


def prepare_variant(variant: str, raw: Path, out: Path, cfg: dict[str, Any], workers: int) -> Path:
    """The prepared variants of ADE20K; `tfrecord` holds the raw JPEG and PNG bytes."""
    if variant != VARIANT:
        raise DataError(f"ade20k has no prepared variant {variant!r} (known: {VARIANT})")
    options = cfg["prepare"]
    return prepare(
        raw,
        out,
        train_shards=options["train_shards"],
        val_shards=options["val_shards"],
        workers=workers,
        verify_labels=options["verify_labels"],
    )
