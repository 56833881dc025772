"""ImageNet: synthetic archives, import of the official layout, path: source, index, failures."""

from __future__ import annotations

import csv
import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from accelpipe.datasets import imagenet
from accelpipe.datasets.download import md5sum
from accelpipe.errors import ConfigError, DataError

SYNTH = {"classes": 4, "train_per_class": 5, "val_per_class": 3, "size": [40, 32], "seed": 3}


def _cfg(source: str = "synthetic", **import_keys: object) -> dict:
    block = {"train_tar": None, "val_tar": None, "devkit": None, "val_labels": None, "md5": {}}
    return {"source": source, "synthetic": dict(SYNTH), "import": {**block, **import_keys}}


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _tar_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _jpeg(width: int = 8, height: int = 6) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 20, 20)).save(buf, "JPEG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """(raw folder, folder of the generated archives, make_raw facts), made once."""
    base = tmp_path_factory.mktemp("imagenet")
    facts = imagenet.make_raw(_cfg(), base / "raw", base / "downloads")
    return base / "raw", base / "downloads" / "imagenet-synthetic", facts


@pytest.fixture(scope="module")
def prepared(synthetic, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "index"
    return imagenet.prepare_variant("index", synthetic[0], out, {"prepare": {}}, workers=1)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _ground_truth(tars: Path) -> dict[str, str]:
    """{val file name: wnid}, read from the devkit without the module's own reader."""
    with tarfile.open(tars / imagenet.DEVKIT) as tf:
        top = "ILSVRC2012_devkit_t12/data"
        mat = io.BytesIO(tf.extractfile(f"{top}/meta.mat").read())
        truth = tf.extractfile(f"{top}/{imagenet.GROUND_TRUTH}").read().decode().split()
    synsets = scipy.io.loadmat(mat, struct_as_record=False, squeeze_me=True)["synsets"]
    by_id = {int(s.ILSVRC2012_ID): s.WNID for s in synsets if s.num_children == 0}
    assert list(by_id.values()) != sorted(by_id.values())  # IDs are not in wnid order
    return {f"ILSVRC2012_val_{i:08d}.JPEG": by_id[int(t)] for i, t in enumerate(truth, 1)}


# ---------------------------------------------------------------------------- synthetic + index


def test_synthetic_raw_layout_and_facts(synthetic):
    raw, tars, facts = synthetic
    assert facts == {"source": "synthetic", "classes": 4, "train": 20, "val": 12}
    root = raw / imagenet.ROOT
    classes = json.loads((root / "classes.json").read_text())
    wnids = classes["wnids"]
    assert wnids == sorted(wnids) and len(wnids) == 4
    assert all(w.startswith("n0") and len(w) == 9 and w[1:].isdigit() for w in wnids)
    assert set(classes["words"]) == set(wnids)
    for split in imagenet.SPLITS:
        assert sorted(p.name for p in (root / split).iterdir()) == wnids
    with tarfile.open(tars / imagenet.TRAIN_TAR) as outer:
        assert outer.getnames() == [f"{w}.tar" for w in wnids]


def test_val_images_follow_the_devkit_ground_truth(synthetic):
    raw, tars, _ = synthetic
    truth = _ground_truth(tars)
    placed = {p.name: p.parent.name for p in (raw / imagenet.ROOT / "val").glob("*/*")}
    assert placed == truth


def test_synthetic_archives_are_deterministic(synthetic, tmp_path):
    _, tars, _ = synthetic
    again = imagenet.synthesize_tars(tmp_path / "again", **SYNTH)
    for path in again.values():
        assert md5sum(path) == md5sum(tars / path.name)


def test_index_rows_match_the_files_on_disk(synthetic, prepared):
    raw, _, _ = synthetic
    root = raw / imagenet.ROOT
    wnids = json.loads((prepared / "classes.json").read_text())["wnids"]
    assert wnids == sorted(p.name for p in (root / "train").iterdir())
    for split in imagenet.SPLITS:
        text = (prepared / f"{split}.csv").read_text()
        assert text.splitlines()[0] == "path,label,bytes,width,height"
        rows = _rows(prepared / f"{split}.csv")
        on_disk = sorted(p.relative_to(root).as_posix() for p in (root / split).glob("*/*"))
        assert [r["path"] for r in rows] == on_disk
        for row in rows:
            path = root / row["path"]
            assert int(row["label"]) == wnids.index(path.parent.name)
            assert int(row["bytes"]) == path.stat().st_size
            with Image.open(path) as im:
                assert (int(row["width"]), int(row["height"])) == im.size
    config = json.loads((prepared / "config.json").read_text())
    assert config == {"root": str(root), "classes": 4, "train": 20, "val": 12}


def test_index_with_workers_is_identical(synthetic, prepared, tmp_path):
    out = imagenet.index(synthetic[0] / imagenet.ROOT, tmp_path / "par", workers=3)
    for name in ("train.csv", "val.csv", "classes.json", "config.json"):
        assert (out / name).read_bytes() == (prepared / name).read_bytes()


def test_classes_are_separable_by_mean_colour(synthetic, prepared):
    """A nearest-centroid classifier on mean chromaticity: what even a tiny CNN can learn."""
    root = synthetic[0] / imagenet.ROOT

    def features(split: str) -> tuple[np.ndarray, np.ndarray]:
        rows = _rows(prepared / f"{split}.csv")
        x = []
        for row in rows:
            rgb = np.asarray(Image.open(root / row["path"]).convert("RGB"), np.float64)
            mean = rgb.reshape(-1, 3).mean(axis=0)
            x.append(mean / mean.sum())
        return np.array(x), np.array([int(r["label"]) for r in rows])

    x_train, y_train = features("train")
    x_val, y_val = features("val")
    centroids = np.stack([x_train[y_train == c].mean(axis=0) for c in range(4)])
    pred = np.argmin(((x_val[:, None] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (pred == y_val).mean() >= 0.9


def test_bad_image_names_file_and_keeps_output(synthetic, prepared, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(synthetic[0] / imagenet.ROOT, root)
    out = imagenet.index(root, tmp_path / "out")
    before = (out / "train.csv").read_bytes()
    bad = next((root / "train").iterdir()) / "broken.JPEG"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match=f"{bad}: not a readable image"):
        imagenet.index(root, tmp_path / "out", workers=2)
    assert (out / "train.csv").read_bytes() == before


def test_prepare_unknown_variant_and_options(synthetic, tmp_path):
    with pytest.raises(DataError, match="known: index"):
        imagenet.prepare_variant("tfrecord", synthetic[0], tmp_path / "o", {"prepare": {}}, 1)
    with pytest.raises(ConfigError, match="resize"):
        imagenet.prepare_variant(
            "index", synthetic[0], tmp_path / "o", {"prepare": {"resize": 1}}, 1
        )


# ---------------------------------------------------------------------------- import


@pytest.fixture
def tars(tmp_path: Path) -> dict[str, Path]:
    """Small official-layout archives: two classes, three val images."""
    a, b = "n01440764", "n01443537"
    train = _tar(
        tmp_path / imagenet.TRAIN_TAR,
        {
            f"{a}.tar": _tar_bytes({f"{a}_1.JPEG": _jpeg(), f"{a}_2.JPEG": _jpeg()}),
            f"{b}.tar": _tar_bytes({f"{b}_1.JPEG": _jpeg()}),
        },
    )
    val = _tar(
        tmp_path / imagenet.VAL_TAR, {f"ILSVRC2012_val_{i:08d}.JPEG": _jpeg() for i in (1, 2, 3)}
    )
    labels = tmp_path / "val_labels.txt"
    labels.write_text(
        f"ILSVRC2012_val_00000001.JPEG {b}\nILSVRC2012_val_00000002.JPEG {a}\n"
        f"ILSVRC2012_val_00000003.JPEG {b}\n"
    )
    return {"train_tar": train, "val_tar": val, "val_labels": labels}


def _val_layout(root: Path) -> dict[str, str]:
    return {p.name: p.parent.name for p in (root / "val").glob("*/*")}


def test_import_with_val_label_file(tars, tmp_path):
    facts = imagenet.make_raw(_cfg("import", **tars), tmp_path / "raw", tmp_path / "dl")
    assert facts == {"source": "import", "classes": 2, "train": 3, "val": 3}
    root = tmp_path / "raw" / imagenet.ROOT
    assert _val_layout(root) == {
        "ILSVRC2012_val_00000001.JPEG": "n01443537",
        "ILSVRC2012_val_00000002.JPEG": "n01440764",
        "ILSVRC2012_val_00000003.JPEG": "n01443537",
    }
    assert sorted(p.name for p in (root / "train" / "n01440764").iterdir()) == [
        "n01440764_1.JPEG",
        "n01440764_2.JPEG",
    ]
    assert json.loads((root / "classes.json").read_text())["words"] == {}


def test_import_with_csv_labels_and_header(tars, tmp_path):
    csv_labels = tmp_path / "LOC_val_solution.csv"
    csv_labels.write_text(
        "ImageId,PredictionString\n"
        "ILSVRC2012_val_00000001,n01443537 1 2 3 4\n"
        "ILSVRC2012_val_00000002,n01440764 1 2 3 4\n"
        "ILSVRC2012_val_00000003,n01443537 1 2 3 4 n01443537 5 6 7 8\n"
    )
    root = imagenet.import_tars(tmp_path / "raw", **{**tars, "val_labels": csv_labels})
    assert _val_layout(root)["ILSVRC2012_val_00000002.JPEG"] == "n01440764"


def test_import_checks_md5_and_names_the_file(tars, tmp_path):
    actual = md5sum(tars["val_tar"])
    md5 = {"train_tar": md5sum(tars["train_tar"]), "val_tar": "0" * 32}
    with pytest.raises(DataError, match=f"{tars['val_tar']}: md5 mismatch.*{'0' * 32}.*{actual}"):
        imagenet.import_tars(tmp_path / "raw", **tars, md5=md5)


def test_missing_import_keys_are_named(tars, tmp_path):
    cfg = _cfg("import", val_tar=tars["val_tar"], val_labels=tars["val_labels"])
    with pytest.raises(ConfigError, match=r"datasets\.imagenet\.import\.train_tar"):
        imagenet.make_raw(cfg, tmp_path / "raw", tmp_path / "dl")
    cfg = _cfg("import", train_tar=tars["train_tar"], val_tar=tars["val_tar"])
    with pytest.raises(ConfigError, match="devkit or val_labels"):
        imagenet.make_raw(cfg, tmp_path / "raw", tmp_path / "dl")
    cfg = _cfg("import", **{**tars, "devkit": tmp_path / "nope.tar.gz"})
    with pytest.raises(DataError, match=r"nope\.tar\.gz: file given by .*import\.devkit"):
        imagenet.make_raw(cfg, tmp_path / "raw", tmp_path / "dl")


def test_corrupt_inner_tar_is_named(tars, tmp_path):
    good = _tar_bytes({"n01440764_1.JPEG": _jpeg(64, 64)})
    _tar(tars["train_tar"], {"n01440764.tar": good, "n01443537.tar": b"garbage" * 200})
    with pytest.raises(DataError, match=r"n01443537\.tar: truncated or corrupt"):
        imagenet.import_tars(tmp_path / "a", **tars)
    _tar(tars["train_tar"], {"n01440764.tar": good[:600]})
    with pytest.raises(DataError, match=r"n01440764\.tar: truncated"):
        imagenet.import_tars(tmp_path / "b", **tars)


@pytest.mark.parametrize("cut", [13_000, 512 + 10240], ids=["mid-member", "at-boundary"])
def test_truncated_outer_tar_is_named(tars, tmp_path, cut):
    # Each inner tar is one 512-byte header + a 10240-byte record in the outer tar.
    data = tars["train_tar"].read_bytes()
    tars["train_tar"].write_bytes(data[:cut])
    with pytest.raises(DataError, match=f"{tars['train_tar']}: .*truncated"):
        imagenet.import_tars(tmp_path / "raw", **tars)


@pytest.mark.parametrize("member", ["../evil.JPEG", "/tmp/evil.JPEG", "sub/../../evil.JPEG"])
def test_path_escape_in_inner_tar_is_refused(tars, tmp_path, member):
    _tar(tars["train_tar"], {"n01440764.tar": _tar_bytes({member: _jpeg()})})
    with pytest.raises(DataError, match=r"n01440764\.tar: refusing member"):
        imagenet.import_tars(tmp_path / "raw", **tars)
    assert not (tmp_path / "evil.JPEG").exists()


def test_links_in_inner_tar_are_refused(tars, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        link = tarfile.TarInfo("n01440764_1.JPEG")
        link.type, link.linkname = tarfile.SYMTYPE, "n01440764_2.JPEG"
        tf.addfile(link)
    _tar(tars["train_tar"], {"n01440764.tar": buf.getvalue()})
    with pytest.raises(DataError, match="only regular files"):
        imagenet.import_tars(tmp_path / "raw", **tars)


def test_val_image_without_label(tars, tmp_path):
    tars["val_labels"].write_text("ILSVRC2012_val_00000001.JPEG n01443537\n")
    with pytest.raises(DataError, match=r"ILSVRC2012_val_00000002\.JPEG has no label in .*val_lab"):
        imagenet.import_tars(tmp_path / "raw", **tars)


def test_labels_for_images_not_in_the_tar(tars, tmp_path):
    with tars["val_labels"].open("a") as fh:
        fh.write("ILSVRC2012_val_00000009.JPEG n01440764\n")
    with pytest.raises(DataError, match=r"val_labels\.txt: labels 1 image.*00000009"):
        imagenet.import_tars(tmp_path / "raw", **tars)


def test_val_label_with_unknown_class(tars, tmp_path):
    tars["val_labels"].write_text(tars["val_labels"].read_text().replace("n01440764", "n09999999"))
    with pytest.raises(DataError, match=r"no class tar.*n09999999"):
        imagenet.import_tars(tmp_path / "raw", **tars)


def test_devkit_ground_truth_with_unknown_id(synthetic, tmp_path):
    _, generated, _ = synthetic
    with tarfile.open(generated / imagenet.DEVKIT) as tf:
        members = {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}
    truth = f"ILSVRC2012_devkit_t12/data/{imagenet.GROUND_TRUTH}"
    members[truth] = b"1\n77\n"
    devkit = _tar(tmp_path / "devkit.tar", members)
    with pytest.raises(DataError, match=r"devkit\.tar: .*ground_truth\.txt line 2: '77'"):
        imagenet.read_devkit(devkit)


# ---------------------------------------------------------------------------- path: source


def test_path_source_links_an_existing_image_folder(synthetic, tmp_path):
    raw, _, facts = synthetic
    mine = tmp_path / "mine"
    shutil.copytree(raw / imagenet.ROOT, mine / imagenet.ROOT)
    for location in (mine, mine / imagenet.ROOT):  # the root itself or a folder holding it
        out = tmp_path / f"raw-{location.name}"
        got = imagenet.make_raw(_cfg(f"path:{location}"), out, tmp_path / "dl")
        assert got == {**facts, "source": "path"}
        assert (out / imagenet.ROOT / "train").resolve() == (mine / imagenet.ROOT / "train")
        classes = json.loads((out / imagenet.ROOT / "classes.json").read_text())
        assert classes == json.loads((raw / imagenet.ROOT / "classes.json").read_text())
    index = imagenet.prepare_variant("index", out, tmp_path / "index", {"prepare": {}}, 1)
    assert json.loads((index / "config.json").read_text())["train"] == 20


def test_path_source_errors_name_the_path(synthetic, tmp_path):
    with pytest.raises(DataError, match=f"{tmp_path / 'nope'}: dataset path given by"):
        imagenet.make_raw(_cfg(f"path:{tmp_path / 'nope'}"), tmp_path / "o1", tmp_path / "dl")
    root = tmp_path / "mine"
    shutil.copytree(synthetic[0] / imagenet.ROOT, root)
    (root / "val" / "n00000001").mkdir()
    with pytest.raises(DataError, match=f"{root}: train/ and val/ have different class folders"):
        imagenet.make_raw(_cfg(f"path:{root}"), tmp_path / "o2", tmp_path / "dl")
    shutil.rmtree(root / "val")
    with pytest.raises(DataError, match=f"{root}: no val/ folder"):
        imagenet.make_raw(_cfg(f"path:{root}"), tmp_path / "o3", tmp_path / "dl")
