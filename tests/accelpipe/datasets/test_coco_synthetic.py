"""Tests for accelpipe.datasets.coco_synthetic: the real COCO layout and every instances field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from accelpipe.datasets.coco_synthetic import CATEGORIES, rle_encode, synthesize

IMAGE_KEYS = {
    "id",
    "file_name",
    "width",
    "height",
    "license",
    "coco_url",
    "date_captured",
    "flickr_url",
}
ANN_KEYS = {"id", "image_id", "category_id", "iscrowd", "area", "bbox", "segmentation"}


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(
        tmp_path_factory.mktemp("coco") / "raw", train_images=24, val_images=8, seed=3
    )


def _instances(raw: Path, split: str) -> dict:
    return json.loads((raw / "annotations" / f"instances_{split}2017.json").read_text())


def test_layout_is_the_real_one(raw: Path) -> None:
    assert sorted(p.name for p in raw.iterdir()) == ["annotations", "train2017", "val2017"]
    for split, count in (("train", 24), ("val", 8)):
        content = _instances(raw, split)
        files = sorted(p.name for p in (raw / f"{split}2017").iterdir())
        assert files == sorted(img["file_name"] for img in content["images"])
        assert len(files) == count
        assert all(f.endswith(".jpg") and len(f) == len("000000000009.jpg") for f in files)


def test_every_coco_field_is_present(raw: Path) -> None:
    for split in ("train", "val"):
        content = _instances(raw, split)
        assert set(content) == {"info", "licenses", "images", "annotations", "categories"}
        assert {"description", "url", "version", "year", "contributor", "date_created"} <= set(
            content["info"]
        )
        assert all(set(lic) == {"url", "id", "name"} for lic in content["licenses"])
        assert all(set(img) == IMAGE_KEYS for img in content["images"])
        assert all(set(ann) == ANN_KEYS for ann in content["annotations"])
        assert all(set(cat) == {"id", "name", "supercategory"} for cat in content["categories"])


def test_category_ids_are_coco_non_contiguous(raw: Path) -> None:
    cats = _instances(raw, "train")["categories"]
    ids = [c["id"] for c in cats]
    assert ids == [1, 3, 18, 44, 62]
    assert ids != list(range(1, len(ids) + 1))
    assert {c["name"]: c["supercategory"] for c in cats}["dog"] == "animal"
    assert len({(colour, shape) for *_, colour, shape in CATEGORIES}) == len(CATEGORIES)


def test_image_sizes_and_boxes_are_consistent(raw: Path) -> None:
    content = _instances(raw, "val")
    sizes = set()
    for img in content["images"]:
        with Image.open(raw / "val2017" / img["file_name"]) as im:
            assert im.format == "JPEG"
            assert im.size == (img["width"], img["height"])
        sizes.add((img["width"], img["height"]))
    assert len(sizes) > 1
    by_id = {img["id"]: img for img in content["images"]}
    for ann in content["annotations"]:
        x, y, w, h = ann["bbox"]
        img = by_id[ann["image_id"]]
        assert w > 0 and h > 0 and x >= 0 and y >= 0
        assert x + w <= img["width"] and y + h <= img["height"]
        # a crowd's area counts mask pixels, which may reach one pixel past the polygon
        margin = 2 if ann["iscrowd"] else 0
        assert 0 < ann["area"] <= (w + margin) * (h + margin) + 0.01  # 2-decimal rounding


def test_train_has_empty_images_and_crowds(raw: Path) -> None:
    content = _instances(raw, "train")
    annotated = {ann["image_id"] for ann in content["annotations"]}
    empty = [img for img in content["images"] if img["id"] not in annotated]
    assert 0 < len(empty) < len(content["images"])
    crowds = [ann for ann in content["annotations"] if ann["iscrowd"]]
    assert crowds and all(isinstance(c["segmentation"], dict) for c in crowds)
    polygons = [ann for ann in content["annotations"] if not ann["iscrowd"]]
    assert all(isinstance(p["segmentation"], list) for p in polygons)
    per_image = [sum(a["image_id"] == i for a in content["annotations"]) for i in annotated]
    assert min(per_image) >= 1 and max(per_image) <= 4


def test_ids_are_unique_across_splits(raw: Path) -> None:
    train, val = _instances(raw, "train"), _instances(raw, "val")
    image_ids = [img["id"] for c in (train, val) for img in c["images"]]
    ann_ids = [ann["id"] for c in (train, val) for ann in c["annotations"]]
    assert len(set(image_ids)) == len(image_ids)
    assert len(set(ann_ids)) == len(ann_ids)


def test_crowd_rle_decodes_to_its_area(raw: Path) -> None:
    content = _instances(raw, "train")
    for ann in (a for a in content["annotations"] if a["iscrowd"]):
        h, w = ann["segmentation"]["size"]
        rle = mask_utils.frPyObjects(ann["segmentation"], h, w)
        mask = mask_utils.decode(rle)
        assert mask.sum() == ann["area"]
        ys, xs = np.nonzero(mask)
        x, y, bw, bh = ann["bbox"]
        assert x - 1 <= xs.min() and xs.max() <= x + bw + 1
        assert y - 1 <= ys.min() and ys.max() <= y + bh + 1


def test_rle_encode_matches_pycocotools() -> None:
    mask = np.zeros((5, 4), dtype=np.uint8)
    mask[0, 0] = mask[1:4, 2] = 1
    ours = rle_encode(mask)
    assert ours["size"] == [5, 4]
    assert ours["counts"][0] == 0  # starts inside the mask: an empty leading run of zeros
    decoded = mask_utils.decode(mask_utils.frPyObjects(ours, 5, 4))
    assert np.array_equal(decoded, mask)
    assert rle_encode(np.zeros((2, 2)))["counts"] == [4]


def test_pycocotools_loads_the_instances(raw: Path) -> None:
    coco = COCO(str(raw / "annotations" / "instances_train2017.json"))
    assert coco.getCatIds() == [1, 3, 18, 44, 62]
    assert coco.loadCats([18])[0]["name"] == "dog"
    ann_ids = coco.getAnnIds()
    assert len(ann_ids) == len(_instances(raw, "train")["annotations"])
    person_images = coco.getImgIds(catIds=[1])
    for ann in coco.loadAnns(coco.getAnnIds(imgIds=person_images[:1], catIds=[1])):
        assert ann["category_id"] == 1
        assert coco.annToMask(ann).sum() > 0
    crowd_ids = coco.getAnnIds(iscrowd=True)
    assert crowd_ids and all(coco.anns[i]["iscrowd"] == 1 for i in crowd_ids)


def test_deterministic_by_seed(tmp_path: Path) -> None:
    a = synthesize(tmp_path / "a", train_images=4, val_images=2, seed=7)
    b = synthesize(tmp_path / "b", train_images=4, val_images=2, seed=7)
    c = synthesize(tmp_path / "c", train_images=4, val_images=2, seed=8)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    ann = Path("annotations/instances_train2017.json")
    assert (a / ann).read_bytes() != (c / ann).read_bytes()
