"""ADE20K (SceneParsing, ADEChallengeData2016; the Segmenter workload): raw sources, raw
check, TFRecord preparation.

Raw layout (as the official zip's top-level folder ADEChallengeData2016/ unpacks)::

    <raw>/images/training/ADE_train_00000001.jpg ...       20210 in the real set
    <raw>/images/validation/ADE_val_00000001.jpg ...       2000
    <raw>/annotations/training/ADE_train_00000001.png ...  8-bit single channel, 0..150
    <raw>/annotations/validation/ADE_val_00000001.png ...

Annotation values: 0 = unlabelled ("other"), k = class k in 1..150 (CLASS_NAMES[k - 1]).

Sources: `synthetic` (accelpipe.datasets.ade20k_synthetic), `ade20k` (the official zip,
downloaded with resume and a sha1 check, then safely extracted) and `path:` (an existing copy,
linked after its layout is checked).

Prepared layout (variant `tfrecord`, accelpipe.datasets.ade20k_tfrecord)::

    <out>/train-%05d-of-%05d.tfrecord   every training image with its annotation
    <out>/val-%05d-of-%05d.tfrecord     every validation image
    <out>/dataset.json                  counts, shards, classes, the label convention

The records keep the raw PNG values; ade20k_input.shift_labels applies the one label shift.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

from accelpipe.datasets import existing_copy
from accelpipe.datasets.download import download, safe_extract
from accelpipe.datasets.tfrecord import Split, write_splits
from accelpipe.errors import ConfigError, DataError
from accelpipe.io import atomic_path, write_json

NUM_CLASSES = 150
IGNORE_INDEX = 255
ROOT = "ADEChallengeData2016"  # the zip's top-level folder
URL = "http://data.csail.mit.edu/places/ADEchallenge/ADEChallengeData2016.zip"
SHA1 = "219e1696abb36c8ba3a3afe7fb2f4b4606a897c7"  # Segmenter's segm/scripts/prepare_ade20k.py
SPLITS = ("train", "val")
SPLIT_FOLDERS = {"train": "training", "val": "validation"}
VARIANT = "tfrecord"
FORMAT = "accelpipe ADE20K TFRecord v1: ADEChallengeData2016 JPEG and PNG bytes as they are"
LABEL_CONVENTION = (
    "records hold the raw annotation PNG: 0 = unlabelled, k in 1..150 = class k; "
    "ade20k_input.shift_labels maps 0 -> ignore_index 255 and k -> k - 1 (mmseg "
    "reduce_zero_label), so class c of `classes` is label c"
)

# objectInfo150 names in order (mmseg ADE20KDataset.CLASSES, whose 'bed ' has a stray space);
# CLASS_NAMES[c] is the name of training label c (raw value c + 1).
CLASS_NAMES: tuple[str, ...] = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane",
    "grass", "cabinet", "sidewalk", "person", "earth", "door", "table", "mountain", "plant",
    "curtain", "chair", "car", "water", "painting", "sofa", "shelf", "house", "sea", "mirror",
    "rug", "field", "armchair", "seat", "fence", "desk", "rock", "wardrobe", "lamp", "bathtub",
    "railing", "cushion", "base", "box", "column", "signboard", "chest of drawers", "counter",
    "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand", "path", "stairs",
    "runway", "case", "pool table", "pillow", "screen door", "stairway", "river", "bridge",
    "bookcase", "blind", "coffee table", "toilet", "flower", "book", "hill", "bench",
    "countertop", "stove", "palm", "kitchen island", "computer", "swivel chair", "boat", "bar",
    "arcade machine", "hovel", "bus", "towel", "light", "truck", "tower", "chandelier",
    "awning", "streetlight", "booth", "television receiver", "airplane", "dirt track",
    "apparel", "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet",
    "poster", "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer",
    "plaything", "swimming pool", "stool", "barrel", "basket", "waterfall", "tent", "bag",
    "minibike", "cradle", "oven", "ball", "food", "step", "tank", "trade name", "microwave",
    "pot", "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture", "hood",
    "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen", "plate",
    "monitor", "bulletin board", "shower", "radiator", "glass", "clock", "flag",
)  # fmt: skip


def image_dir(raw: Path, split: str) -> Path:
    return Path(raw) / "images" / SPLIT_FOLDERS[split]


def annotation_dir(raw: Path, split: str) -> Path:
    return Path(raw) / "annotations" / SPLIT_FOLDERS[split]


def file_stem(split: str, index: int) -> str:
    """ADE_train_00000001 (index from 1), the stem both files of an image share."""
    return f"ADE_{split}_{index:08d}"


def check_raw(raw: str | Path) -> dict[str, int]:
    """Check the layout and that every image has its annotation and vice versa; return the
    images per split. Pixel contents are checked when the records are written."""
    from accelpipe.datasets.ade20k_tfrecord import pairs

    return {split: len(pairs(Path(raw), split)) for split in SPLITS}


# ----------------------------------------------------------------------------- sources


def fetch(out: Path, downloads: str | Path, url: str, sha1: str, *, progress: bool = True) -> Path:
    """Download (resuming, sha1-checked) and extract the zip; its ADEChallengeData2016/ becomes
    `out`. The zip stays in `downloads`, so a rerun costs no transfer."""
    archive = download(url, Path(downloads) / f"{ROOT}.zip", sha1=sha1, progress=progress)
    unpacked = out.with_name(f".unpack-{out.name}")
    safe_extract(archive, unpacked)
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


def make_raw(cfg: dict[str, Any], out: Path, downloads: str | Path) -> dict[str, Any]:
    """Create the raw layout in `out` from the configured source; return facts for provenance."""
    source = cfg.get("source", "synthetic")
    if source == "synthetic":
        from accelpipe.datasets.ade20k_synthetic import synthesize

        synth = cfg.get("synthetic") or {}
        synthesize(
            out,
            train_images=synth.get("train_images", 24),
            val_images=synth.get("val_images", 8),
            size=synth.get("size", (96, 72)),
            seed=synth.get("seed", 0),
        )
    elif source == "ade20k":
        block = cfg.get("download") or {}
        fetch(out, downloads, block.get("url") or URL, block.get("sha1") or SHA1)
    elif source.startswith("path:"):
        _link_copy(source.removeprefix("path:"), out)
    else:
        raise ConfigError(
            f"datasets.ade20k.source: unknown source {source!r} (synthetic | ade20k | path:...)"
        )
    return {"source": source.split(":", 1)[0], "images": check_raw(out)}


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
    from accelpipe.datasets.ade20k_tfrecord import encode, pair_files, pairs

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
    from accelpipe.datasets.ade20k_tfrecord import FEATURES

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
    options = cfg.get("prepare") or {}
    return prepare(
        raw,
        out,
        train_shards=options.get("train_shards", 64),
        val_shards=options.get("val_shards", 8),
        workers=workers,
        verify_labels=options.get("verify_labels", False),
    )
