"""ImageNet 2012 (ILSVRC2012): sources, raw folder check, ImageFolder index.

ImageNet has no public download. `source: import` lays out the tars the user supplies,
`source: path:/folder` links an existing ImageFolder, and `source: synthetic` (the default)
draws a tiny learnable dataset, packs it into tars in the official layout and imports those,
so every default run exercises the importer end to end. The archives' and the raw folder's
layouts: `accelpipe.datasets.imagenet_layout`.

Prepared variant `index`::

    <out>/train.csv, <out>/val.csv   path,label,bytes,width,height; path relative to the root,
                                     label = index of the wnid in the sorted wnid list
    <out>/classes.json               wnids in label order + words
    <out>/config.json                {"root", "classes", "train", "val"}

Import of the official tars: `accelpipe.datasets.imagenet_tars`; synthetic data:
`accelpipe.datasets.imagenet_synthetic`.
"""

from __future__ import annotations

import contextlib
import csv
import os
from pathlib import Path
from typing import Any

from PIL import Image

from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.io import atomic_path, read_json, write_json
from accelpipe.datasets.archives import OWN_ARCHIVE, ArchiveLimits, one_line
from accelpipe.datasets.download import md5sum
from accelpipe.datasets.imagenet_layout import (
    DEVKIT,
    KEY,
    ROOT,
    SPLITS,
    TRAIN_TAR,
    VAL_TAR,
    known_words,
)
from accelpipe.datasets.imagenet_synthetic import synthesize_tars
from accelpipe.datasets.imagenet_tars import import_tars
from accelpipe.datasets.pool import map_tasks
from accelpipe.datasets.sources import RawSources, existing_copy

CSV_HEADER = ("path", "label", "bytes", "width", "height")


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


def _link_existing(location: str, out: Path) -> None:
    """`path:` source: link train/ and val/ of an existing ImageFolder under <out>/ILSVRC2012.

    Linking the two splits (not the whole root) leaves room for our classes.json without
    writing into the user's copy.
    """
    root = existing_copy(location, ROOT, "imagenet")
    summary = check_raw(root)
    dest = out / ROOT
    dest.mkdir(parents=True)
    for split in SPLITS:
        (dest / split).symlink_to((root / split).resolve(), target_is_directory=True)
    words = known_words(_existing_words(root), summary["wnids"])
    write_json(dest / "classes.json", {"wnids": summary["wnids"], "words": words})


# --------------------------------------------------------------------------------------------
# Prepared variant "index"
# --------------------------------------------------------------------------------------------


def _image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the image header; PIL decodes no pixels for this."""
    # Declared: PIL's __enter__ returns typing.Self, which mypy reads as Any for Python 3.10.
    im: Image.Image
    try:
        with Image.open(path) as im:
            return im.size
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise DataError(f"{path}: not a readable image ({one_line(err)})") from None


def _index_class(
    task: tuple[str, str, str, int],
) -> tuple[str, list[tuple[str, int, int, int, int]]]:
    """CSV rows of one class folder of one split, sorted by file name."""
    root, split, wnid, label = task
    folder = Path(root) / split / wnid
    rows: list[tuple[str, int, int, int, int]] = []
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
    words = known_words(_existing_words(root), wnids)
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
# Sources (run by `sources.make_raw`) and the prepared variants (`accelpipe prepare`)
# --------------------------------------------------------------------------------------------


def _import_raw(block: dict[str, Any], out: Path, downloads: Path) -> None:
    for key in ("train_tar", "val_tar"):
        if not block[key]:
            raise ConfigError(f"{KEY}.import.{key} is not set (path to the {key} archive)")
    import_tars(
        out,
        train_tar=block["train_tar"],
        val_tar=block["val_tar"],
        devkit=block["devkit"] or None,
        val_labels=block["val_labels"] or None,
        md5=block["md5"],
        limits=ArchiveLimits.from_config(block["archive"], f"{KEY}.import.archive"),
    )


def _synthetic_raw(synth: dict[str, Any], out: Path, downloads: Path) -> None:
    """Synthesize the official archives into <downloads>/imagenet-synthetic (kept, replaced
    on each run) and import them, with their md5s, like a user's tars."""
    tars_dir = downloads / "imagenet-synthetic"
    with atomic_path(tars_dir) as tmp:
        synthesize_tars(
            tmp,
            classes=synth["classes"],
            train_per_class=synth["train_per_class"],
            val_per_class=synth["val_per_class"],
            size=synth["size"],
            seed=synth["seed"],
        )
    tars = {"train_tar": tars_dir / TRAIN_TAR, "val_tar": tars_dir / VAL_TAR}
    tars["devkit"] = tars_dir / DEVKIT
    md5: dict[str, str | None] = {key: md5sum(path) for key, path in tars.items()}
    import_tars(
        out,
        train_tar=tars["train_tar"],
        val_tar=tars["val_tar"],
        devkit=tars["devkit"],
        md5=md5,
        limits=OWN_ARCHIVE,
    )


def _raw_facts(out: Path) -> dict[str, Any]:
    summary = check_raw(out / ROOT)
    return {"classes": len(summary["wnids"]), "train": summary["train"], "val": summary["val"]}


SOURCES = RawSources(
    dataset="imagenet",
    official="import",
    settings="import",
    synthesize=_synthetic_raw,
    fetch=_import_raw,
    link=_link_existing,
    check=_raw_facts,
)


def prepare_variant(variant: str, raw: Path, out: Path, cfg: dict[str, Any], workers: int) -> Path:
    """The prepared variants of ImageNet; `index` lists every image with its label and size."""
    if variant != "index":
        raise DataError(f"imagenet has no prepared variant {variant!r} (known: index)")
    options = cfg["prepare"]
    if options:
        raise ConfigError(f"imagenet index takes no prepare options, got {sorted(options)}")
    return index(Path(raw) / ROOT, out, workers=workers)
