"""ImageNet: the pipeline sources (make_raw), path: source, index, failures.

Tests of the synthetic archives: test_imagenet_synthetic.py; of the tar import:
test_imagenet_tars.py. Both build their data with the helpers here.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from accelpipe.datasets import imagenet
from accelpipe.errors import ConfigError, DataError

SYNTH = {"classes": 4, "train_per_class": 5, "val_per_class": 3, "size": [40, 32], "seed": 3}


def _cfg(source: str = "synthetic", **import_keys: object) -> dict:
    block = {"train_tar": None, "val_tar": None, "devkit": None, "val_labels": None, "md5": {}}
    return {"source": source, "synthetic": dict(SYNTH), "import": {**block, **import_keys}}


def build_synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """(raw folder, folder of the generated archives, make_raw facts) of SYNTH."""
    base = tmp_path_factory.mktemp("imagenet")
    facts = imagenet.make_raw(_cfg(), base / "raw", base / "downloads")
    return base / "raw", base / "downloads" / "imagenet-synthetic", facts


def build_index(raw: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `index` variant of the raw folder `raw`."""
    out = tmp_path_factory.mktemp("prepared") / "index"
    return imagenet.prepare_variant("index", raw, out, {"prepare": {}}, workers=1)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """build_synthetic, made once."""
    return build_synthetic(tmp_path_factory)


@pytest.fixture(scope="module")
def prepared(synthetic, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(synthetic[0], tmp_path_factory)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------- index


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
