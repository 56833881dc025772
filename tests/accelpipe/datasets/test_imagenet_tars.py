"""Tests for accelpipe.datasets.imagenet_tars: import of the official archives and devkit,
through make_raw and directly, and every way the archives can be wrong."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from accelpipe.core.errors import ConfigError, DataError
from accelpipe.datasets import imagenet, imagenet_layout, imagenet_tars
from accelpipe.datasets.download import md5sum
from accelpipe.datasets.sources import make_raw
from tests.helpers.archives import schema_limits
from tests.helpers.imagenet_raw import imagenet_config

LIMITS = schema_limits()


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


@pytest.fixture
def tars(tmp_path: Path) -> dict[str, Path]:
    """Small official-layout archives: two classes, three val images."""
    a, b = "n01440764", "n01443537"
    train = _tar(
        tmp_path / imagenet_layout.TRAIN_TAR,
        {
            f"{a}.tar": _tar_bytes({f"{a}_1.JPEG": _jpeg(), f"{a}_2.JPEG": _jpeg()}),
            f"{b}.tar": _tar_bytes({f"{b}_1.JPEG": _jpeg()}),
        },
    )
    val = _tar(
        tmp_path / imagenet_layout.VAL_TAR,
        {f"ILSVRC2012_val_{i:08d}.JPEG": _jpeg() for i in (1, 2, 3)},
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
    facts = make_raw(
        imagenet.SOURCES, imagenet_config("import", **tars), tmp_path / "raw", tmp_path / "dl"
    )
    assert facts == {"source": "import", "classes": 2, "train": 3, "val": 3}
    root = tmp_path / "raw" / imagenet_layout.ROOT
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
    root = imagenet_tars.import_tars(
        tmp_path / "raw", **{**tars, "val_labels": csv_labels}, limits=LIMITS
    )
    assert _val_layout(root)["ILSVRC2012_val_00000002.JPEG"] == "n01440764"


def test_import_checks_md5_and_names_the_file(tars, tmp_path):
    actual = md5sum(tars["val_tar"])
    md5 = {"train_tar": md5sum(tars["train_tar"]), "val_tar": "0" * 32}
    with pytest.raises(DataError, match=f"{tars['val_tar']}: md5 mismatch.*{'0' * 32}.*{actual}"):
        imagenet_tars.import_tars(tmp_path / "raw", **tars, md5=md5, limits=LIMITS)


def test_missing_import_keys_are_named(tars, tmp_path):
    cfg = imagenet_config("import", val_tar=tars["val_tar"], val_labels=tars["val_labels"])
    with pytest.raises(ConfigError, match=r"datasets\.imagenet\.import\.train_tar"):
        make_raw(imagenet.SOURCES, cfg, tmp_path / "raw", tmp_path / "dl")
    cfg = imagenet_config("import", train_tar=tars["train_tar"], val_tar=tars["val_tar"])
    with pytest.raises(ConfigError, match="devkit or val_labels"):
        make_raw(imagenet.SOURCES, cfg, tmp_path / "raw", tmp_path / "dl")
    cfg = imagenet_config("import", **{**tars, "devkit": tmp_path / "nope.tar.gz"})
    with pytest.raises(DataError, match=r"nope\.tar\.gz: file given by .*import\.devkit"):
        make_raw(imagenet.SOURCES, cfg, tmp_path / "raw", tmp_path / "dl")


def test_corrupt_inner_tar_is_named(tars, tmp_path):
    good = _tar_bytes({"n01440764_1.JPEG": _jpeg(64, 64)})
    _tar(tars["train_tar"], {"n01440764.tar": good, "n01443537.tar": b"garbage" * 200})
    with pytest.raises(DataError, match=r"n01443537\.tar: truncated or corrupt"):
        imagenet_tars.import_tars(tmp_path / "a", **tars, limits=LIMITS)
    _tar(tars["train_tar"], {"n01440764.tar": good[:600]})
    with pytest.raises(DataError, match=r"n01440764\.tar: truncated"):
        imagenet_tars.import_tars(tmp_path / "b", **tars, limits=LIMITS)


@pytest.mark.parametrize("cut", [13_000, 512 + 10240], ids=["mid-member", "at-boundary"])
def test_truncated_outer_tar_is_named(tars, tmp_path, cut):
    # Each inner tar is one 512-byte header + a 10240-byte record in the outer tar.
    data = tars["train_tar"].read_bytes()
    tars["train_tar"].write_bytes(data[:cut])
    with pytest.raises(DataError, match=f"{tars['train_tar']}: .*truncated"):
        imagenet_tars.import_tars(tmp_path / "raw", **tars, limits=LIMITS)


@pytest.mark.parametrize("member", ["../evil.JPEG", "/tmp/evil.JPEG", "sub/../../evil.JPEG"])
def test_path_escape_in_inner_tar_is_refused(tars, tmp_path, member):
    _tar(tars["train_tar"], {"n01440764.tar": _tar_bytes({member: _jpeg()})})
    with pytest.raises(DataError, match=r"n01440764\.tar: refusing member"):
        imagenet_tars.import_tars(tmp_path / "raw", **tars, limits=LIMITS)
    assert not (tmp_path / "evil.JPEG").exists()


def test_links_in_inner_tar_are_refused(tars, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        link = tarfile.TarInfo("n01440764_1.JPEG")
        link.type, link.linkname = tarfile.SYMTYPE, "n01440764_2.JPEG"
        tf.addfile(link)
    _tar(tars["train_tar"], {"n01440764.tar": buf.getvalue()})
    with pytest.raises(DataError, match="only regular files"):
        imagenet_tars.import_tars(tmp_path / "raw", **tars, limits=LIMITS)


def test_val_image_without_label(tars, tmp_path):
    tars["val_labels"].write_text("ILSVRC2012_val_00000001.JPEG n01443537\n")
    with pytest.raises(DataError, match=r"ILSVRC2012_val_00000002\.JPEG has no label in .*val_lab"):
        imagenet_tars.import_tars(tmp_path / "raw", **tars, limits=LIMITS)


def test_labels_for_images_not_in_the_tar(tars, tmp_path):
    with tars["val_labels"].open("a") as fh:
        fh.write("ILSVRC2012_val_00000009.JPEG n01440764\n")
    with pytest.raises(DataError, match=r"val_labels\.txt: labels 1 image.*00000009"):
        imagenet_tars.import_tars(tmp_path / "raw", **tars, limits=LIMITS)


def test_val_label_with_unknown_class(tars, tmp_path):
    tars["val_labels"].write_text(tars["val_labels"].read_text().replace("n01440764", "n09999999"))
    with pytest.raises(DataError, match=r"no class tar.*n09999999"):
        imagenet_tars.import_tars(tmp_path / "raw", **tars, limits=LIMITS)


def test_devkit_ground_truth_with_unknown_id(imagenet_raw, tmp_path):
    _, generated, _ = imagenet_raw
    with tarfile.open(generated / imagenet_layout.DEVKIT) as tf:
        members = {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}
    truth = f"ILSVRC2012_devkit_t12/data/{imagenet_layout.GROUND_TRUTH}"
    members[truth] = b"1\n77\n"
    devkit = _tar(tmp_path / "devkit.tar", members)
    with pytest.raises(DataError, match=r"devkit\.tar: .*ground_truth\.txt line 2: '77'"):
        imagenet_tars.read_devkit(devkit, LIMITS)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_class_tars_are_extracted_on_the_workers_into_the_same_tree(tars, tmp_path, monkeypatch):
    """Issue 33 item 4: the 1.28M train images were extracted in one process (~30 min)."""
    one = imagenet_tars.import_tars(tmp_path / "one", **tars, limits=LIMITS, workers=1)
    spread = []
    real = imagenet_tars.map_tasks

    def spy(fn, tasks, workers, **options):
        spread.append((sorted(t.label.rsplit(": ", 1)[1] for t in tasks), workers))
        return real(fn, tasks, workers, **options)

    monkeypatch.setattr(imagenet_tars, "map_tasks", spy)
    two = imagenet_tars.import_tars(tmp_path / "two", **tars, limits=LIMITS, workers=2)
    assert spread == [(["n01440764.tar", "n01443537.tar"], 2)]
    assert _tree(two) == _tree(one) and len(_tree(one)) == 7  # 3 train, 3 val, classes.json
    # A compressed train tar cannot be read from an offset: it is streamed, as before.
    gz = tmp_path / "train.tar.gz"
    with tarfile.open(gz, "w:gz") as out, tarfile.open(tars["train_tar"]) as src:
        for member in src:
            out.addfile(member, src.extractfile(member))
    three = imagenet_tars.import_tars(
        tmp_path / "three", **{**tars, "train_tar": gz}, limits=LIMITS, workers=2
    )
    assert _tree(three) == _tree(one) and len(spread) == 1


def test_a_bad_class_tar_on_a_worker_is_named(tars, tmp_path):
    good = _tar_bytes({"n01440764_1.JPEG": _jpeg(64, 64)})
    _tar(tars["train_tar"], {"n01440764.tar": good, "n01443537.tar": good[:600]})
    with pytest.raises(DataError, match=r"n01443537\.tar: truncated"):
        imagenet_tars.import_tars(tmp_path / "a", **tars, limits=LIMITS, workers=2)
