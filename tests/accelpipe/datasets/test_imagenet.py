"""ImageNet: the pipeline sources (make_raw), path: source, index, failures.

Tests of the synthetic archives: test_imagenet_synthetic.py; of the tar import:
test_imagenet_tars.py. All build their data with tests/helpers/imagenet_raw.py.
"""

from __future__ import annotations

import json
import shutil

import pytest
from PIL import Image

from accelpipe.core.errors import ConfigError, DataError
from accelpipe.datasets import imagenet, imagenet_layout
from accelpipe.datasets.sources import make_raw
from tests.helpers.imagenet_raw import imagenet_config, index_rows

# ---------------------------------------------------------------------------- index


def test_index_rows_match_the_files_on_disk(imagenet_raw, imagenet_index):
    raw, _, _ = imagenet_raw
    root = raw / imagenet_layout.ROOT
    wnids = json.loads((imagenet_index / "classes.json").read_text())["wnids"]
    assert wnids == sorted(p.name for p in (root / "train").iterdir())
    for split in imagenet_layout.SPLITS:
        text = (imagenet_index / f"{split}.csv").read_text()
        assert text.splitlines()[0] == "path,label,bytes,width,height"
        rows = index_rows(imagenet_index / f"{split}.csv")
        on_disk = sorted(p.relative_to(root).as_posix() for p in (root / split).glob("*/*"))
        assert [r["path"] for r in rows] == on_disk
        for row in rows:
            path = root / row["path"]
            assert int(row["label"]) == wnids.index(path.parent.name)
            assert int(row["bytes"]) == path.stat().st_size
            with Image.open(path) as im:
                assert (int(row["width"]), int(row["height"])) == im.size
    config = json.loads((imagenet_index / "config.json").read_text())
    assert config == {"root": str(root), "classes": 4, "train": 20, "val": 12}


def test_index_with_workers_is_identical(imagenet_raw, imagenet_index, tmp_path):
    out = imagenet.index(imagenet_raw[0] / imagenet_layout.ROOT, tmp_path / "par", workers=3)
    for name in ("train.csv", "val.csv", "classes.json", "config.json"):
        assert (out / name).read_bytes() == (imagenet_index / name).read_bytes()


def test_bad_image_names_file_and_keeps_output(imagenet_raw, imagenet_index, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(imagenet_raw[0] / imagenet_layout.ROOT, root)
    out = imagenet.index(root, tmp_path / "out")
    before = (out / "train.csv").read_bytes()
    bad = next((root / "train").iterdir()) / "broken.JPEG"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match=f"{bad}: not a readable image"):
        imagenet.index(root, tmp_path / "out", workers=2)
    assert (out / "train.csv").read_bytes() == before


def test_prepare_unknown_variant_and_options(imagenet_raw, tmp_path):
    with pytest.raises(DataError, match="known: index"):
        imagenet.prepare_variant("tfrecord", imagenet_raw[0], tmp_path / "o", {"prepare": {}}, 1)
    with pytest.raises(ConfigError, match="resize"):
        imagenet.prepare_variant(
            "index", imagenet_raw[0], tmp_path / "o", {"prepare": {"resize": 1}}, 1
        )


# ---------------------------------------------------------------------------- path: source


def test_path_source_links_an_existing_image_folder(imagenet_raw, tmp_path):
    raw, _, facts = imagenet_raw
    mine = tmp_path / "mine"
    shutil.copytree(raw / imagenet_layout.ROOT, mine / imagenet_layout.ROOT)
    for location in (mine, mine / imagenet_layout.ROOT):  # the root itself or a folder holding it
        out = tmp_path / f"raw-{location.name}"
        got = make_raw(imagenet.SOURCES, imagenet_config(f"path:{location}"), out, tmp_path / "dl")
        assert got == {**facts, "source": "path"}
        assert (out / imagenet_layout.ROOT / "train").resolve() == (
            mine / imagenet_layout.ROOT / "train"
        )
        classes = json.loads((out / imagenet_layout.ROOT / "classes.json").read_text())
        assert classes == json.loads((raw / imagenet_layout.ROOT / "classes.json").read_text())
    index = imagenet.prepare_variant("index", out, tmp_path / "index", {"prepare": {}}, 1)
    assert json.loads((index / "config.json").read_text())["train"] == 20


def test_path_source_errors_name_the_path(imagenet_raw, tmp_path):
    with pytest.raises(DataError, match=f"{tmp_path / 'nope'}: dataset path given by"):
        make_raw(
            imagenet.SOURCES,
            imagenet_config(f"path:{tmp_path / 'nope'}"),
            tmp_path / "o1",
            tmp_path / "dl",
        )
    root = tmp_path / "mine"
    shutil.copytree(imagenet_raw[0] / imagenet_layout.ROOT, root)
    (root / "val" / "n00000001").mkdir()
    with pytest.raises(DataError, match=f"{root}: train/ and val/ have different class folders"):
        make_raw(
            imagenet.SOURCES, imagenet_config(f"path:{root}"), tmp_path / "o2", tmp_path / "dl"
        )
    shutil.rmtree(root / "val")
    with pytest.raises(DataError, match=f"{root}: no val/ folder"):
        make_raw(
            imagenet.SOURCES, imagenet_config(f"path:{root}"), tmp_path / "o3", tmp_path / "dl"
        )
