"""COCO 2017 detection (the SSD-ResNet34 workload): raw sources, raw check, TFRecord preparation.

Raw layout (as the official zips unpack)::

    <raw>/train2017/000000000009.jpg ...
    <raw>/val2017/000000000139.jpg ...
    <raw>/annotations/instances_train2017.json
    <raw>/annotations/instances_val2017.json

Sources: `synthetic` (accelpipe.datasets.coco_synthetic), `coco` (the three official zips,
downloaded with resume and md5 check, then safely extracted) and `path:` (an existing copy,
linked after its layout is checked).

Prepared layout (variant `tfrecord`, accelpipe.datasets.coco_tfrecord)::

    <out>/train-%05d-of-%05d.tfrecord   images with >= 1 box
    <out>/val-%05d-of-%05d.tfrecord     every val image
    <out>/instances_val2017.json        copied: the evaluator's ground truth
    <out>/dataset.json                  counts per split, categories and the label map
    <out>/shards-checked.json           each shard's size and mtime once walked whole
                                        (tfrecord.CHECKED: the input pipelines skip the walk)
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.io import atomic_path, write_json
from accelpipe.datasets.archives import ArchiveLimits, safe_extract
from accelpipe.datasets.coco_instances import SplitStats, load_instances, records
from accelpipe.datasets.coco_synthetic import synthesize
from accelpipe.datasets.coco_tfrecord import encode, image_files
from accelpipe.datasets.download import download
from accelpipe.datasets.sources import RawSources, existing_copy
from accelpipe.datasets.tfrecord import Split, write_splits

SPLITS = ("train", "val")
VARIANT = "tfrecord"
FORMAT = "tensorflow/tpu create_coco_tf_record (+ ignore_images_without_bbox for train)"

# The official zips: the COCO site publishes no checksums. These md5s are the ones published
# with the same URLs in intel/neural-compressor (examples/.../maskrcnn/download_dataset.sh) and
# several other loaders; gluoncv's scripts/datasets/mscoco.py lists the sha1s in the comments.
# Each zip unpacks to the folder named beside it.
ZIPS: dict[str, dict[str, str]] = {
    "train2017.zip": {
        "url": "http://images.cocodataset.org/zips/train2017.zip",
        "md5": "cced6f7f71b7629ddf16f17bbcfab6b2",  # sha1 10ad623668ab00c62c096f0ed636d6aff41faca5
        "folder": "train2017",
    },
    "val2017.zip": {
        "url": "http://images.cocodataset.org/zips/val2017.zip",
        "md5": "442b8da7639aecaf257c1dceb8ba8c80",  # sha1 4950dc9d00dbe1c933ee0170f5797584351d2a41
        "folder": "val2017",
    },
    "annotations_trainval2017.zip": {
        "url": "http://images.cocodataset.org/annotations/annotations_trainval2017.zip",
        "md5": "f4bbac642086de4f52a3fdda2de5fa2c",  # sha1 8551ee4bb5860311e79dace7e79cb91e432e78b3
        "folder": "annotations",
    },
}
# Keys of the `datasets.coco.download` config block for each zip.
ZIP_KEYS = {
    "train": "train2017.zip",
    "val": "val2017.zip",
    "annotations": "annotations_trainval2017.zip",
}


def annotation_file(raw: Path, split: str) -> Path:
    return raw / "annotations" / f"instances_{split}2017.json"


def check_raw(raw: str | Path) -> dict[str, int]:
    """Check the raw layout (both image folders and instances files); return images per split.

    Only the layout and the JSON's top-level lists are checked here; every image and box is
    checked when it is converted.
    """
    raw = Path(raw)
    counts = {}
    for split in SPLITS:
        folder = raw / f"{split}2017"
        if not folder.is_dir():
            raise DataError(f"{folder}: COCO image folder not found")
        counts[split] = len(load_instances(annotation_file(raw, split))["images"])
    return counts


# ----------------------------------------------------------------------------- sources


def zip_table(download_cfg: dict[str, Any] | None = None) -> dict[str, dict[str, str]]:
    """ZIPS with the config's url / md5 overrides (`{train|val|annotations: {url, md5}}`)."""
    table = {name: dict(entry) for name, entry in ZIPS.items()}
    for key, override in (download_cfg or {}).items():
        if key == "archive":  # the extraction limits, not a zip
            continue
        if key not in ZIP_KEYS:
            raise ConfigError(
                f"datasets.coco.download.{key}: unknown zip (known: {sorted(ZIP_KEYS)})"
            )
        table[ZIP_KEYS[key]] |= {k: v for k, v in (override or {}).items() if v is not None}
    return table


def fetch(
    out: Path,
    downloads: str | Path,
    table: dict[str, dict[str, str]] | None = None,
    *,
    limits: ArchiveLimits,
    progress: bool = True,
) -> Path:
    """Download (resuming, md5-checked) and extract the three zips into the raw layout `out`.

    The zips stay in `downloads`, so a rerun or a later `raw` costs no transfer.
    """
    table = table or ZIPS
    out.mkdir(parents=True, exist_ok=True)
    for name, entry in table.items():
        archive = download(
            entry["url"], Path(downloads) / name, md5=entry.get("md5"), progress=progress
        )
        unpacked = out / f".unpack-{entry['folder']}"
        safe_extract(archive, unpacked, limits=limits)
        folder = unpacked / entry["folder"]
        if not folder.is_dir():
            raise DataError(f"{archive}: has no top-level folder {entry['folder']}/")
        folder.rename(out / entry["folder"])
        shutil.rmtree(unpacked)
    return out


def _link_copy(location: str, out: Path) -> None:
    """Link the layout of an existing copy (the folder holding train2017/ ..., or a folder
    holding that one as `coco/`) into `out`."""
    root = existing_copy(location, "coco", "coco")
    check_raw(root)
    out.mkdir(parents=True)
    for folder in ("train2017", "val2017", "annotations"):
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
    limits = ArchiveLimits.from_config(block["archive"], "datasets.coco.download.archive")
    fetch(out, downloads, zip_table(block), limits=limits)


SOURCES = RawSources(
    dataset="coco",
    official="coco",
    settings="download",
    synthesize=_synthesize,
    fetch=_download,
    link=_link_copy,
    check=lambda raw: {"images": check_raw(raw)},
)


# ----------------------------------------------------------------------------- preparation


def _category_list(cats: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Categories sorted by COCO id; `label` is the contiguous 1..N id the model trains on."""
    return [
        {
            "id": cid,
            "name": cats[cid]["name"],
            "supercategory": cats[cid].get("supercategory", ""),
            "label": k,
        }
        for k, cid in enumerate(sorted(cats), start=1)
    ]


def prepare(
    raw: str | Path,
    out: str | Path,
    *,
    train_shards: int = 256,
    val_shards: int = 32,
    workers: int = 1,
) -> Path:
    """Write the TFRecord shards, the val ground truth and dataset.json into `out` (atomic).

    A DataError (an image that is not a complete JPEG or PNG, or a bad box: naming the image
    id; bad instances file: naming the file and key; categories differing between the splits)
    stops the conversion and leaves an existing `out` untouched. Records are checked against
    the expected count.
    """
    raw, out = Path(raw), Path(out)
    shards = {"train": train_shards, "val": val_shards}
    stats: dict[str, SplitStats] = {}
    cats: dict[str, dict[int, dict[str, Any]]] = {}
    with atomic_path(out) as tmp:
        tmp.mkdir()
        splits = _planned_splits(raw, shards, stats, cats)
        write_splits(tmp, splits, encode, workers, files=image_files)
        shutil.copyfile(annotation_file(raw, "val"), tmp / "instances_val2017.json")
        write_json(tmp / "dataset.json", _meta(stats, shards, cats["train"]))
    return out


def _planned_splits(
    raw: Path,
    shards: dict[str, int],
    stats: dict[str, SplitStats],
    cats: dict[str, dict[int, dict[str, Any]]],
) -> Iterator[Split]:
    """Each split's records, parsed from its instances JSON when the writer asks for it; fills
    `stats` and `cats`. Val comes first: its shards are written while the train JSON (~20x
    larger in COCO 2017, seconds to parse) is read, instead of every core but one waiting."""
    for split in ("val", "train"):
        ann_file = annotation_file(raw, split)
        plan, stats[split], cats[split] = records(
            ann_file, raw / f"{split}2017", skip_empty=split == "train"
        )
        if split == "train" and sorted(cats["train"]) != sorted(cats["val"]):
            raise DataError(
                f"{annotation_file(raw, 'val')}: 'categories' differ from the train split's"
            )
        yield Split(split, plan, shards[split])


def _meta(
    stats: dict[str, SplitStats], shards: dict[str, int], cats: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    categories = _category_list(cats)
    return {
        "format": FORMAT,
        "splits": {s: asdict(stats[s]) | {"shards": shards[s]} for s in SPLITS},
        "categories": categories,
        "label_to_coco_id": {str(c["label"]): c["id"] for c in categories},
        "coco_id_to_label": {str(c["id"]): c["label"] for c in categories},
    }


def prepare_variant(variant: str, raw: Path, out: Path, cfg: dict[str, Any], workers: int) -> Path:
    """The prepared variants of COCO; `tfrecord` is the SSD reference's TFRecord conversion."""
    if variant != VARIANT:
        raise DataError(f"coco has no prepared variant {variant!r} (known: {VARIANT})")
    train_shards, val_shards = shard_counts(raw, cfg["prepare"])
    return prepare(raw, out, train_shards=train_shards, val_shards=val_shards, workers=workers)


def shard_counts(raw: Path, options: dict[str, Any]) -> tuple[int, int]:
    """(train, val) shard files: `train_shards` / `val_shards`, or with `shard_mb` at least as
    many as keep each shard's JPEG bytes (the split folder's, what the records carry) near
    that size: TensorFlow's guidance is ~100-200 MB, so a full-size dataset's reads spread
    over many files while a small one keeps the fewest."""
    target = options.get("shard_mb")
    counts = []
    for split in SPLITS:
        fewest = options[f"{split}_shards"]
        if target is None:
            counts.append(fewest)
            continue
        with os.scandir(raw / f"{split}2017") as entries:
            total = sum(e.stat().st_size for e in entries if e.is_file())
        counts.append(max(fewest, math.ceil(total / (target * 1e6))))
    return counts[0], counts[1]
