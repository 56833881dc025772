"""ImageNet 2012 (ILSVRC2012): import of the official tars, synthetic data, ImageFolder index.

ImageNet has no public download. `source: import` lays out the tars the user supplies,
`source: path:/folder` links an existing ImageFolder, and `source: synthetic` (the default)
draws a tiny learnable dataset, packs it into tars in the official layout and imports those,
so every default run exercises the importer end to end.

Official archives (what `import` reads)::

    ILSVRC2012_img_train.tar       n01440764.tar ...            one tar per class
        n01440764.tar              n01440764_10026.JPEG ...     flat
    ILSVRC2012_img_val.tar         ILSVRC2012_val_00000001.JPEG ...   flat
    ILSVRC2012_devkit_t12.tar.gz   ILSVRC2012_devkit_t12/data/meta.mat   `synsets` struct array
                                   ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt

Raw layout (every source)::

    <raw>/ILSVRC2012/train/<wnid>/*.JPEG
    <raw>/ILSVRC2012/val/<wnid>/*.JPEG
    <raw>/ILSVRC2012/classes.json    {"wnids": [sorted], "words": {wnid: name}} (words may be {})

Prepared variant `index`::

    <out>/train.csv, <out>/val.csv   path,label,bytes,width,height; path relative to the root,
                                     label = index of the wnid in the sorted wnid list
    <out>/classes.json               wnids in label order + words
    <out>/config.json                {"root", "classes", "train", "val"}
"""

from __future__ import annotations

import colorsys
import contextlib
import csv
import gzip
import io
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import scipy.io
from PIL import Image

from accelpipe.datasets.download import (
    _EndCheckingTarInfo,
    _one_line,
    _tar_member_problem,
    md5sum,
    safe_extract,
)
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
_WNID = re.compile(r"n\d{8}")
_COPY_BYTES = 1 << 20

# --------------------------------------------------------------------------------------------
# Synthetic data
# --------------------------------------------------------------------------------------------

_MTIME = 1_335_000_000  # fixed member times (April 2012): the tars' md5 depends on the seed only
_SYNSET_FIELDS = (
    "ILSVRC2012_ID",
    "WNID",
    "words",
    "gloss",
    "num_children",
    "children",
    "wordnet_height",
    "num_train_images",
)
_MAT_HEADER_BYTES = 116  # MAT-file v5 descriptive text; scipy writes the creation time there


def _val_name(number: int) -> str:
    return f"ILSVRC2012_val_{number:08d}.JPEG"


def _synthetic_wnids(rng: np.random.Generator, classes: int) -> list[str]:
    """Real-looking WordNet ids n0xxxxxxx, distinct, sorted."""
    numbers = rng.choice(9_000_000, size=classes, replace=False) + 1_000_000
    return sorted(f"n{int(n):08d}" for n in numbers)


def _class_style(c: int, classes: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """(hue, stripe angle, stripe period) of a class: hue is spread evenly over the colour wheel,
    so mean colour alone separates the classes, and it survives crops and flips."""
    return c / classes, float(rng.uniform(0, np.pi)), float(rng.uniform(5, 12))


def _synth_image(
    rng: np.random.Generator, style: tuple[float, float, float], size: Sequence[int]
) -> np.ndarray:
    """One (H, W, 3) uint8 image: jittered class-coloured stripes, a distractor blob, noise."""
    hue, angle, period = style
    w, h = (max(8, round(s * rng.uniform(0.75, 1.25))) for s in size)
    colour = colorsys.hsv_to_rgb(
        (hue + rng.normal(0, 0.012)) % 1.0, rng.uniform(0.6, 0.9), rng.uniform(0.6, 0.9)
    )
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    theta = angle + rng.normal(0, 0.15)
    wave = np.sin(
        (x * np.cos(theta) + y * np.sin(theta)) * (2 * np.pi / (period * rng.uniform(0.85, 1.15)))
        + rng.uniform(0, 2 * np.pi)
    )
    img = np.asarray(colour, np.float32) * (1 + 0.3 * wave[..., None])
    # A random-coloured ellipse (up to ~20% of the image) at a random place: clutter.
    cx, cy = rng.uniform(0, w), rng.uniform(0, h)
    rx, ry = rng.uniform(0.08, 0.25) * w, rng.uniform(0.08, 0.25) * h
    img[((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 < 1] = rng.uniform(0, 1, 3)
    img = img * 255 + rng.normal(0, 10, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _rngs(key: Sequence[int], count: int) -> Iterator[np.random.Generator]:
    """One generator per image, keyed by (*key, index): images do not depend on each other."""
    return (np.random.default_rng([*key, i]) for i in range(count))


def _jpeg(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _add_bytes(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), _MTIME, 0o644
    tf.addfile(info, io.BytesIO(data))


def _add_dir(tf: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mtime, info.mode = tarfile.DIRTYPE, _MTIME, 0o755
    tf.addfile(info)


def _tar_bytes(members: Iterable[tuple[str, bytes | None]]) -> bytes:
    """An uncompressed tar in memory; a None payload makes a directory member."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            if data is None:
                _add_dir(tf, name)
            else:
                _add_bytes(tf, name, data)
    return buf.getvalue()


def synthesize_tars(
    dest: str | Path,
    *,
    classes: int = 10,
    train_per_class: int = 24,
    val_per_class: int = 6,
    size: Sequence[int] = (80, 64),
    seed: int = 0,
) -> dict[str, Path]:
    """Write a synthetic ILSVRC2012 as the three official archives into `dest` (created).

    Returns {"train_tar", "val_tar", "devkit"} paths. `size` is the nominal (width, height);
    each image's sides are drawn within +-25% of it, like the varied sizes of the real data.
    Deterministic by `seed`, down to the archives' bytes. Like the real devkit, ILSVRC2012_IDs
    are not in wnid order, so an importer that assumed they were would misfile val images.
    """
    size = tuple(int(s) for s in size)
    if classes < 2 or train_per_class < 1 or val_per_class < 1 or len(size) != 2:
        raise ConfigError(
            f"{_KEY}.synthetic: need classes >= 2, train_per_class >= 1, val_per_class >= 1 "
            f"and size [width, height], got {classes}, {train_per_class}, {val_per_class}, {size}"
        )
    rng = np.random.default_rng(seed)
    wnids = _synthetic_wnids(rng, classes)
    styles = [_class_style(c, classes, rng) for c in range(classes)]
    ids = (rng.permutation(classes) + 1).tolist()  # ILSVRC2012_ID of wnids[c]
    dest = Path(dest)
    dest.mkdir(parents=True)
    paths = {"train_tar": dest / TRAIN_TAR, "val_tar": dest / VAL_TAR, "devkit": dest / DEVKIT}
    with tarfile.open(paths["train_tar"], "w", format=tarfile.GNU_FORMAT) as outer:
        for c, wnid in enumerate(wnids):
            images = (
                (f"{wnid}_{j + 1}.JPEG", _jpeg(_synth_image(rng_, styles[c], size)))
                for j, rng_ in enumerate(_rngs((seed, 0, c), train_per_class))
            )
            _add_bytes(outer, f"{wnid}.tar", _tar_bytes(images))
    # Val images in a shuffled class order, numbered from 1 like ILSVRC2012_val_00000001.JPEG.
    order = rng.permutation(np.repeat(np.arange(classes), val_per_class)).tolist()
    with tarfile.open(paths["val_tar"], "w", format=tarfile.GNU_FORMAT) as tf:
        for k, rng_ in enumerate(_rngs((seed, 1), len(order))):
            _add_bytes(tf, _val_name(k + 1), _jpeg(_synth_image(rng_, styles[order[k]], size)))
    truth = "".join(f"{ids[c]}\n" for c in order)
    _write_devkit(paths["devkit"], wnids, styles, ids, truth, train_per_class)
    return paths


def _style_words(style: tuple[float, float, float]) -> str:
    hue, angle, _ = style
    return f"synthetic hue {360 * hue:.0f} deg, stripes {np.degrees(angle):.0f} deg"


def _synsets(
    wnids: Sequence[str], styles: Sequence[tuple[float, float, float]], ids: Sequence[int], n: int
) -> np.ndarray:
    """meta.mat's `synsets`: leaves (ILSVRC2012_ID 1..k, no children) then two inner nodes."""
    rows = [
        (
            ids[c],
            wnid,
            _style_words(styles[c]),
            "a synthetic ImageNet class: coloured stripes with noise and clutter",
            0,
            np.zeros((1, 0)),
            0,
            n,
        )
        for c, wnid in enumerate(wnids)
    ]
    rows.sort(key=lambda row: row[0])  # the real meta.mat lists synsets by ILSVRC2012_ID
    k = len(wnids)
    leaves = np.arange(1, k + 1, dtype=np.float64)[None, :]
    rows.append((k + 1, "n00001740", "entity", "the root", 1, np.array([[k + 2.0]]), 2, n * k))
    rows.append((k + 2, "n00021939", "artifact", "all classes", k, leaves, 1, n * k))
    synsets = np.empty((len(rows), 1), dtype=[(f, object) for f in _SYNSET_FIELDS])
    for r, row in enumerate(rows):
        # Numbers as doubles, like MATLAB writes them.
        synsets[r, 0] = tuple(float(v) if isinstance(v, int) else v for v in row)
    return synsets


def _write_devkit(
    path: Path,
    wnids: Sequence[str],
    styles: Sequence[tuple[float, float, float]],
    ids: Sequence[int],
    truth: str,
    train_per_class: int,
) -> None:
    buf = io.BytesIO()
    scipy.io.savemat(buf, {"synsets": _synsets(wnids, styles, ids, train_per_class)})
    mat = bytearray(buf.getvalue())
    mat[:_MAT_HEADER_BYTES] = b"MATLAB 5.0 MAT-file, synthetic ImageNet devkit".ljust(
        _MAT_HEADER_BYTES
    )
    top = "ILSVRC2012_devkit_t12"
    tar = _tar_bytes(
        [
            (top, None),
            (f"{top}/readme.txt", b"Synthetic ILSVRC2012 development kit (accelpipe).\n"),
            (f"{top}/data", None),
            (f"{top}/data/meta.mat", bytes(mat)),
            (f"{top}/data/{GROUND_TRUTH}", truth.encode()),
        ]
    )
    with path.open("wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
        gz.write(tar)


# --------------------------------------------------------------------------------------------
# Import of the official tars
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _open_stream(source: Path | IO[bytes], label: str) -> Iterator[tarfile.TarFile]:
    """A tar opened for one sequential pass (works on a member of another streamed tar).

    Tar errors raised while the caller reads become one DataError naming `label`.
    """
    where = {"name": source} if isinstance(source, Path) else {"fileobj": source}
    try:
        with tarfile.open(mode="r|*", tarinfo=_EndCheckingTarInfo, **where) as tf:
            yield tf
    except (tarfile.TarError, EOFError, zlib.error) as err:
        raise DataError(f"{label}: truncated or corrupt tar ({_one_line(err)})") from None


def _files(tf: tarfile.TarFile, label: str) -> Iterator[tarfile.TarInfo]:
    """The regular-file members of a flat streamed tar, one at a time.

    Folders are skipped; escapes, links, devices and nested paths raise DataError. tarfile
    keeps every TarInfo it has read; clearing the list keeps memory flat over 1.28M members.
    """
    while (member := tf.next()) is not None:
        tf.members.clear()
        problem = _tar_member_problem(member, set())
        name = posixpath.normpath(member.name)
        if problem is None and not (member.isfile() or member.isdir()):
            problem = "only regular files are allowed"
        if problem is None and member.isfile() and "/" in name:
            problem = "expected a flat archive (no folders)"
        if problem:
            raise DataError(f"{label}: refusing member {member.name!r}: {problem}")
        if member.isfile():
            member.name = name
            yield member
    # After the first member tarfile takes a missing or garbled header for the end.
    if not isinstance(getattr(tf, "accelpipe_end", None), tarfile.EOFHeaderError):
        raise DataError(f"{label}: truncated tar (no end-of-archive marker)")


def _write_member(tf: tarfile.TarFile, member: tarfile.TarInfo, path: Path, label: str) -> None:
    src = tf.extractfile(member)
    assert src is not None  # _files yields regular files only
    try:
        with src, path.open("xb") as fh:
            shutil.copyfileobj(src, fh, _COPY_BYTES)
    except FileExistsError:
        raise DataError(f"{label}: member {member.name!r} appears twice") from None


def _extract_train(train_tar: Path, dest: Path) -> list[str]:
    """train tar of per-class tars -> dest/<wnid>/*.JPEG; return the sorted wnids."""
    dest.mkdir()
    wnids: list[str] = []
    with _open_stream(train_tar, str(train_tar)) as outer:
        for member in _files(outer, str(train_tar)):
            wnid = member.name.removesuffix(".tar")
            if not member.name.endswith(".tar") or not wnid or wnid.startswith("."):
                raise DataError(
                    f"{train_tar}: unexpected member {member.name!r} (expected one <wnid>.tar "
                    "per class)"
                )
            if wnid in wnids:
                raise DataError(f"{train_tar}: class tar {member.name!r} appears twice")
            (dest / wnid).mkdir()
            label = f"{train_tar}: {member.name}"
            with _open_stream(outer.extractfile(member), label) as inner:  # type: ignore[arg-type]
                for image in _files(inner, label):
                    _write_member(inner, image, dest / wnid / image.name, label)
            wnids.append(wnid)
    if not wnids:
        raise DataError(f"{train_tar}: no class tars (<wnid>.tar) in the archive")
    return sorted(wnids)


def _extract_val(
    val_tar: Path, dest: Path, labels: dict[str, str], wnids: Sequence[str], source: Path
) -> None:
    """Flat val tar -> dest/<wnid>/<name> by `labels` (read from `source`)."""
    unknown = sorted(set(labels.values()) - set(wnids))
    if unknown:
        raise DataError(
            f"{source}: {len(unknown)} val class(es) have no class tar in the train archive, "
            f"e.g. {unknown[0]}"
        )
    dest.mkdir()
    for wnid in wnids:  # every class gets a val folder, as ImageFolder expects
        (dest / wnid).mkdir()
    seen: set[str] = set()
    with _open_stream(val_tar, str(val_tar)) as tf:
        for member in _files(tf, str(val_tar)):
            wnid = labels.get(member.name)
            if wnid is None:
                raise DataError(f"{val_tar}: val image {member.name} has no label in {source}")
            _write_member(tf, member, dest / wnid / member.name, str(val_tar))
            seen.add(member.name)
    missing = sorted(set(labels) - seen)
    if missing:
        raise DataError(
            f"{source}: labels {len(missing)} image(s) that are not in {val_tar}, e.g. {missing[0]}"
        )


def _read_meta(path: Path, label: str) -> tuple[dict[int, str], dict[str, str]]:
    """meta.mat -> ({ILSVRC2012_ID: wnid} of the leaf synsets, {wnid: words})."""
    try:
        synsets = scipy.io.loadmat(path, squeeze_me=True).get("synsets")
    except (ValueError, TypeError, OSError, scipy.io.matlab.MatReadError) as err:
        raise DataError(f"{label}: not a readable MAT-file ({_one_line(err)})") from None
    fields = set(getattr(getattr(synsets, "dtype", None), "names", None) or ())
    if not {"ILSVRC2012_ID", "WNID"} <= fields:
        raise DataError(f"{label}: no `synsets` struct with ILSVRC2012_ID and WNID fields")
    ids: dict[int, str] = {}
    words: dict[str, str] = {}
    for row in np.atleast_1d(synsets):
        if "num_children" in fields and int(row["num_children"]) != 0:
            continue  # inner WordNet nodes: not classes
        wnid = str(row["WNID"])
        ids[int(row["ILSVRC2012_ID"])] = wnid
        if "words" in fields:
            words[wnid] = str(row["words"])
    return ids, words


def _read_ground_truth(path: Path, ids: dict[int, str], label: str) -> dict[str, str]:
    """One ILSVRC2012_ID per line; line i labels ILSVRC2012_val_<i>.JPEG."""
    labels = {}
    lines = path.read_text().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    for i, line in enumerate(lines, 1):
        wnid = ids.get(int(line)) if line.strip().isdigit() else None
        if wnid is None:
            raise DataError(
                f"{label} line {i}: {line.strip()!r} is not the ILSVRC2012_ID of a class "
                "in meta.mat"
            )
        labels[_val_name(i)] = wnid
    return labels


def _find(root: Path, name: str, devkit: Path) -> Path:
    found = sorted(p for p in root.rglob(name) if p.parent.name == "data")
    if len(found) != 1:
        raise DataError(f"{devkit}: expected one data/{name} in the devkit, found {len(found)}")
    return found[0]


def read_devkit(devkit: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """The devkit's val labels {ILSVRC2012_val_*.JPEG: wnid} and class words {wnid: words}."""
    devkit = Path(devkit)
    with tempfile.TemporaryDirectory(prefix="imagenet-devkit-") as tmp:
        staging = safe_extract(devkit, Path(tmp) / "devkit")
        meta, truth = _find(staging, "meta.mat", devkit), _find(staging, GROUND_TRUTH, devkit)
        ids, words = _read_meta(meta, f"{devkit}: {meta.relative_to(staging)}")
        labels = _read_ground_truth(truth, ids, f"{devkit}: {truth.relative_to(staging)}")
    return labels, words


def read_val_labels(path: str | Path) -> dict[str, str]:
    """{val file name: wnid} from `name wnid` lines or a two-column CSV (a header is skipped).

    Names without an extension get `.JPEG` (Kaggle's LOC_val_solution.csv works too: its
    second column starts with the wnid).
    """
    path = Path(path)
    labels: dict[str, str] = {}
    for i, line in enumerate(path.read_text().splitlines(), 1):
        fields = [f for f in re.split(r"[,;\s]+", line.strip()) if f]
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) < 2:
            raise DataError(f"{path} line {i}: expected `<file name> <wnid>`, got {line!r}")
        name, wnid = fields[0], fields[1]
        if not labels and not _WNID.fullmatch(wnid) and "." not in name:
            continue  # header line
        name = name if "." in name else f"{name}.JPEG"
        if labels.setdefault(name, wnid) != wnid:
            raise DataError(f"{path} line {i}: {name} is labelled twice, differently")
    if not labels:
        raise DataError(f"{path}: no val labels in the file")
    return labels


def _check_md5(path: Path, expected: str | None, key: str) -> None:
    if expected is None:
        return
    actual = md5sum(path)
    if actual != expected.lower():
        raise DataError(
            f"{path}: md5 mismatch for {_KEY}.import.{key}: expected {expected}, got {actual}"
        )


def import_tars(
    out: str | Path,
    *,
    train_tar: str | Path,
    val_tar: str | Path,
    devkit: str | Path | None = None,
    val_labels: str | Path | None = None,
    md5: dict[str, str | None] | None = None,
) -> Path:
    """Lay the official archives out as an ImageFolder at `<out>/ILSVRC2012`; return it.

    Val labels come from `val_labels` if given, else from the devkit (which also gives the
    class words). Checksums in `md5` ({key: hex or None}) are checked first. Archives are
    read in one streaming pass each; `out` must not hold an ILSVRC2012 folder yet.
    """
    given = {"train_tar": train_tar, "val_tar": val_tar, "devkit": devkit, "val_labels": val_labels}
    paths = {key: Path(p).expanduser() for key, p in given.items() if p is not None}
    for key, path in paths.items():
        if not path.is_file():
            raise DataError(f"{path}: file given by {_KEY}.import.{key} not found")
    if "devkit" not in paths and "val_labels" not in paths:
        raise ConfigError(f"{_KEY}.import: set devkit or val_labels (the val images' classes)")
    for key in ("train_tar", "val_tar", "devkit"):
        if key in paths:
            _check_md5(paths[key], (md5 or {}).get(key), key)
    labels, words = read_devkit(paths["devkit"]) if "devkit" in paths else ({}, {})
    source = paths.get("val_labels", paths.get("devkit"))
    if "val_labels" in paths:
        labels = read_val_labels(paths["val_labels"])
    root = Path(out) / ROOT
    root.mkdir(parents=True)
    wnids = _extract_train(paths["train_tar"], root / "train")
    _extract_val(paths["val_tar"], root / "val", labels, wnids, source)  # type: ignore[arg-type]
    write_json(root / "classes.json", {"wnids": wnids, "words": _known(words, wnids)})
    return root


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
# --------------------------------------------------------------------------------------------


def _import_raw(cfg: dict[str, Any], out: Path) -> Path:
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
