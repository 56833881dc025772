"""ImageNet 2012 (ILSVRC2012): sources, raw folder check, ImageFolder index.

ImageNet has no public download. `source: import` lays out the tars the user supplies,
`source: path:/folder` links an existing ImageFolder, and `source: synthetic` (the default)
draws a tiny learnable dataset, packs it into tars in the official layout and imports those,
so every default run exercises the importer end to end.

Raw layout (every source)::

    <raw>/ILSVRC2012/train/<wnid>/*.JPEG
    <raw>/ILSVRC2012/val/<wnid>/*.JPEG
    <raw>/ILSVRC2012/classes.json    {"wnids": [sorted], "words": {wnid: name}} (words may be {})

Prepared variant `index`::

    <out>/train.csv, <out>/val.csv   path,label,bytes,width,height; path relative to the root,
                                     label = index of the wnid in the sorted wnid list
    <out>/classes.json               wnids in label order + words
    <out>/config.json                {"root", "classes", "train", "val"}

Import of the official tars (and their layout): `accelpipe.datasets.imagenet_tars`; synthetic
data: `accelpipe.datasets.imagenet_synthetic`.
"""

from __future__ import annotations

import contextlib
import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from accelpipe.datasets.download import _one_line, md5sum
from accelpipe.datasets.pool import map_tasks
from accelpipe.errors import ConfigError, DataError
from accelpipe.io import atomic_path, read_json, write_json

ROOT = "ILSVRC2012"
SPLITS = ("train", "val")
TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"
CSV_HEADER = ("path", "label", "bytes", "width", "height")
_KEY = "datasets.imagenet"


# --------------------------------------------------------------------------------------------
# Names shared with imagenet_tars and imagenet_synthetic
# --------------------------------------------------------------------------------------------


def _val_name(number: int) -> str:
    return f"ILSVRC2012_val_{number:08d}.JPEG"


def _known(words: dict[str, str], wnids: Sequence[str]) -> dict[str, str]:
    return {w: words[w] for w in wnids if w in words}


# --------------------------------------------------------------------------------------------
# Raw folder check and existing folders
# --------------------------------------------------------------------------------------------


def _class_dirs(split_dir: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(split_dir) if e.is_dir() and e.name[0] != ".")


def _image_names(class_dir: Path) -> list[str]:
    """Sorted file names in a class folder (hidden files skipped); a sub-folder is an error."""
    names = []
    for entry in os.scandir(class_dir):
        if entry.name.startswith("."):
            continue  # .DS_Store and friends
        if entry.is_dir():
            raise DataError(f"{entry.path}: unexpected folder inside class folder {class_dir}")
        names.append(entry.name)
    return sorted(names)


def check_raw(root: str | Path) -> dict[str, Any]:
    """Validate an ImageFolder root; return {"wnids": sorted class folders, "train": n, "val": n}.

    train/ and val/ must exist, hold the same class folders and at least one image each.
    """
    root = Path(root)
    classes = {}
    for split in SPLITS:
        if not (root / split).is_dir():
            raise DataError(f"{root}: no {split}/ folder (expected {split}/<wnid>/<images>)")
        classes[split] = _class_dirs(root / split)
    train, val = classes["train"], classes["val"]
    if not train:
        raise DataError(f"{root / 'train'}: no class folders")
    if train != val:
        only_t, only_v = sorted(set(train) - set(val)), sorted(set(val) - set(train))
        raise DataError(
            f"{root}: train/ and val/ have different class folders "
            f"(only in train: {only_t[:3]}, only in val: {only_v[:3]})"
        )
    summary: dict[str, Any] = {"wnids": train}
    for split in SPLITS:
        summary[split] = sum(len(_image_names(root / split / w)) for w in train)
        if summary[split] == 0:
            raise DataError(f"{root / split}: no images in the class folders")
    return summary


def _existing_words(root: Path) -> dict[str, str]:
    """Class names shipped with an existing copy: classes.json or Kaggle's LOC_synset_mapping."""
    if (root / "classes.json").is_file():
        words = read_json(root / "classes.json").get("words")
        return {str(k): str(v) for k, v in words.items()} if isinstance(words, dict) else {}
    mapping = root / "LOC_synset_mapping.txt"
    if mapping.is_file():
        pairs = (line.split(maxsplit=1) for line in mapping.read_text().splitlines())
        return {p[0]: p[1].strip() for p in pairs if len(p) == 2}
    return {}


def _link_existing(location: str, out: Path) -> Path:
    """`path:` source: link train/ and val/ of an existing ImageFolder under <out>/ILSVRC2012.

    Linking the two splits (not the whole root) leaves room for our classes.json without
    writing into the user's copy.
    """
    path = Path(location).expanduser()
    if not path.exists():
        raise DataError(f"{path}: dataset path given by {_KEY}.source does not exist")
    root = path / ROOT if (path / ROOT).is_dir() else path
    summary = check_raw(root)
    dest = out / ROOT
    dest.mkdir(parents=True)
    for split in SPLITS:
        (dest / split).symlink_to((root / split).resolve(), target_is_directory=True)
    words = _known(_existing_words(root), summary["wnids"])
    write_json(dest / "classes.json", {"wnids": summary["wnids"], "words": words})
    return dest


# --------------------------------------------------------------------------------------------
# Prepared variant "index"
# --------------------------------------------------------------------------------------------


def _image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the image header; PIL decodes no pixels for this."""
    try:
        with Image.open(path) as im:
            return im.size
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise DataError(f"{path}: not a readable image ({_one_line(err)})") from None


def _index_class(task: tuple[str, str, str, int]) -> tuple[str, list[tuple]]:
    """CSV rows of one class folder of one split, sorted by file name."""
    root, split, wnid, label = task
    folder = Path(root) / split / wnid
    rows = []
    for name in _image_names(folder):
        path = folder / name
        rows.append((f"{split}/{wnid}/{name}", label, path.stat().st_size, *_image_size(path)))
    return split, rows


def index(root: str | Path, out: str | Path, *, workers: int = 1) -> Path:
    """Write the `index` variant (see the module docstring) of the ImageFolder `root` to `out`.

    Rows are streamed to the CSVs class by class, so memory stays flat. Built in a temporary
    sibling and renamed: on any error (a DataError naming the file) `out` is left untouched.
    """
    root, out = Path(root), Path(out)
    summary = check_raw(root)
    wnids = summary["wnids"]
    words = _known(_existing_words(root), wnids)
    tasks = [(str(root), split, w, i) for split in SPLITS for i, w in enumerate(wnids)]
    counts = dict.fromkeys(SPLITS, 0)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        with contextlib.ExitStack() as stack:
            writers = {}
            for split in SPLITS:
                fh = stack.enter_context((tmp / f"{split}.csv").open("w", newline=""))
                writers[split] = csv.writer(fh, lineterminator="\n")
                writers[split].writerow(CSV_HEADER)
            for split, rows in map_tasks(_index_class, tasks, workers, ordered=True, chunksize=4):
                writers[split].writerows(rows)
                counts[split] += len(rows)
        write_json(tmp / "classes.json", {"wnids": wnids, "words": words})
        write_json(tmp / "config.json", {"root": str(root), "classes": len(wnids), **counts})
    return out


# --------------------------------------------------------------------------------------------
# Pipeline entry points (called by `accelpipe raw` and `accelpipe prepare`)
# imagenet_tars and imagenet_synthetic import this module's names, so they are imported
# lazily here (as in ade20k.py): no import cycle.
# --------------------------------------------------------------------------------------------


def _import_raw(cfg: dict[str, Any], out: Path) -> Path:
    from accelpipe.datasets.imagenet_tars import import_tars

    for key in ("train_tar", "val_tar"):
        if not cfg.get(key):
            raise ConfigError(f"{_KEY}.import.{key} is not set (path to the {key} archive)")
    return import_tars(
        out,
        train_tar=cfg["train_tar"],
        val_tar=cfg["val_tar"],
        devkit=cfg.get("devkit") or None,
        val_labels=cfg.get("val_labels") or None,
        md5=cfg.get("md5") or {},
    )


def _synthetic_raw(cfg: dict[str, Any], out: Path, downloads: Path) -> Path:
    """Synthesize the official archives into <downloads>/imagenet-synthetic (kept, replaced
    on each run) and import them, with their md5s, like a user's tars."""
    from accelpipe.datasets.imagenet_synthetic import synthesize_tars
    from accelpipe.datasets.imagenet_tars import import_tars

    tars_dir = downloads / "imagenet-synthetic"
    with atomic_path(tars_dir) as tmp:
        synthesize_tars(
            tmp,
            classes=cfg["classes"],
            train_per_class=cfg["train_per_class"],
            val_per_class=cfg["val_per_class"],
            size=cfg["size"],
            seed=cfg["seed"],
        )
    tars = {"train_tar": tars_dir / TRAIN_TAR, "val_tar": tars_dir / VAL_TAR}
    tars["devkit"] = tars_dir / DEVKIT
    return import_tars(out, **tars, md5={key: md5sum(path) for key, path in tars.items()})


def make_raw(cfg: dict[str, Any], out: Path, downloads: str | Path) -> dict[str, Any]:
    """Create the raw layout `<out>/ILSVRC2012` from the configured source; return its facts."""
    source, out = cfg["source"], Path(out)
    if source == "synthetic":
        root = _synthetic_raw(cfg["synthetic"], out, Path(downloads))
    elif source == "import":
        root = _import_raw(cfg["import"], out)
    elif source.startswith("path:"):
        root = _link_existing(source.removeprefix("path:"), out)
    else:
        raise ConfigError(f"{_KEY}.source: {source!r} is not synthetic, import or path:<folder>")
    summary = check_raw(root)
    return {
        "source": source.split(":", 1)[0],
        "classes": len(summary["wnids"]),
        "train": summary["train"],
        "val": summary["val"],
    }


def prepare_variant(variant: str, raw: Path, out: Path, cfg: dict[str, Any], workers: int) -> Path:
    """The prepared variants of ImageNet; `index` lists every image with its label and size."""
    if variant != "index":
        raise DataError(f"imagenet has no prepared variant {variant!r} (known: index)")
    options = cfg.get("prepare") or {}
    if options:
        raise ConfigError(f"imagenet index takes no prepare options, got {sorted(options)}")
    return index(Path(raw) / ROOT, out, workers=workers)
