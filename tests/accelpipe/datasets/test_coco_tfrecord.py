"""Tests for the COCO TFRecord preparation (coco.prepare, coco_tfrecord, tfrecord): records
parsed back with tf.data and compared with the instances JSON; bad input fails cleanly."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from accelpipe.core.errors import DataError
from accelpipe.datasets import coco, tfrecord
from accelpipe.datasets.coco_synthetic import synthesize
from accelpipe.datasets.image_bytes import jpeg_size
from accelpipe.inputs import coco_input
from tests.helpers.dataset_config import prepare_config

FEATURES = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string),
    "image/format": tf.io.FixedLenFeature((), tf.string),
    "image/filename": tf.io.FixedLenFeature((), tf.string),
    "image/source_id": tf.io.FixedLenFeature((), tf.string),
    "image/key/sha256": tf.io.FixedLenFeature((), tf.string),
    "image/height": tf.io.FixedLenFeature((), tf.int64),
    "image/width": tf.io.FixedLenFeature((), tf.int64),
    **{
        f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32)
        for k in ("xmin", "xmax", "ymin", "ymax")
    },
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/class/text": tf.io.VarLenFeature(tf.string),
    "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
    "image/object/area": tf.io.VarLenFeature(tf.float32),
}


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(
        tmp_path_factory.mktemp("coco") / "raw", train_images=20, val_images=7, seed=5
    )


@pytest.fixture(scope="module")
def prepared(raw: Path) -> Path:
    cfg = prepare_config("coco", "tfrecord", {"train_shards": 3, "val_shards": 2})
    return coco.prepare_variant("tfrecord", raw, raw.parent / "prepared", cfg, workers=2)


def _instances(raw: Path, split: str) -> dict:
    return json.loads(coco.annotation_file(raw, split).read_text())


def _parse(paths: list[Path]) -> list[dict]:
    records = []
    for serialized in tf.data.TFRecordDataset([str(p) for p in paths]):
        parsed = tf.io.parse_single_example(serialized, FEATURES)
        records.append(
            {
                k: (tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v).numpy()
                for k, v in parsed.items()
            }
        )
    return records


def _shards(prepared: Path, split: str) -> list[Path]:
    return sorted(prepared.glob(f"{split}-*.tfrecord"))


def test_layout_and_meta(raw: Path, prepared: Path) -> None:
    names = sorted(p.name for p in prepared.iterdir())
    assert names == [
        "dataset.json",
        "instances_val2017.json",
        "shards-checked.json",
        "train-00000-of-00003.tfrecord",
        "train-00001-of-00003.tfrecord",
        "train-00002-of-00003.tfrecord",
        "val-00000-of-00002.tfrecord",
        "val-00001-of-00002.tfrecord",
    ]
    val_json = coco.annotation_file(raw, "val")
    assert (prepared / "instances_val2017.json").read_bytes() == val_json.read_bytes()
    meta = json.loads((prepared / "dataset.json").read_text())
    assert [c["id"] for c in meta["categories"]] == [1, 3, 18, 44, 62]
    assert [c["label"] for c in meta["categories"]] == [1, 2, 3, 4, 5]
    assert meta["label_to_coco_id"] == {"1": 1, "2": 3, "3": 18, "4": 44, "5": 62}
    assert meta["coco_id_to_label"]["62"] == 5
    train = _instances(raw, "train")
    annotated = {a["image_id"] for a in train["annotations"]}
    assert meta["splits"]["train"]["source_images"] == 20
    assert meta["splits"]["train"]["images"] == len(annotated) < 20
    assert meta["splits"]["train"]["skipped_images"] == 20 - len(annotated)
    assert meta["splits"]["val"]["images"] == 7
    assert meta["splits"]["val"]["shards"] == 2


@pytest.mark.parametrize("split", ["train", "val"])
def test_records_match_the_instances_json(raw: Path, prepared: Path, split: str) -> None:
    content = _instances(raw, split)
    images = {img["id"]: img for img in content["images"]}
    names = {c["id"]: c["name"] for c in content["categories"]}
    anns: dict[int, list] = {}
    for ann in content["annotations"]:
        anns.setdefault(ann["image_id"], []).append(ann)
    records = _parse(_shards(prepared, split))
    expected_ids = [i for i in images if split == "val" or anns.get(i)]
    assert sorted(int(r["image/source_id"]) for r in records) == sorted(expected_ids)
    for rec in records:
        img = images[int(rec["image/source_id"])]
        data = (raw / f"{split}2017" / img["file_name"]).read_bytes()
        assert rec["image/encoded"] == data  # not re-encoded
        assert rec["image/key/sha256"].decode() == hashlib.sha256(data).hexdigest()
        assert rec["image/format"] == b"jpeg"
        assert rec["image/filename"].decode() == img["file_name"]
        assert (rec["image/width"], rec["image/height"]) == (img["width"], img["height"])
        _check_objects(rec, anns.get(img["id"], []), img, names)


def _check_objects(rec: dict, anns: list, img: dict, names: dict) -> None:
    w, h = img["width"], img["height"]
    assert list(rec["image/object/class/label"]) == [a["category_id"] for a in anns]
    assert [t.decode() for t in rec["image/object/class/text"]] == [
        names[a["category_id"]] for a in anns
    ]
    assert list(rec["image/object/is_crowd"]) == [a["iscrowd"] for a in anns]
    assert rec["image/object/area"] == pytest.approx([a["area"] for a in anns])
    boxes = [a["bbox"] for a in anns]
    assert rec["image/object/bbox/xmin"] == pytest.approx([x / w for x, _, _, _ in boxes])
    assert rec["image/object/bbox/xmax"] == pytest.approx([(x + bw) / w for x, _, bw, _ in boxes])
    assert rec["image/object/bbox/ymin"] == pytest.approx([y / h for _, y, _, _ in boxes])
    assert rec["image/object/bbox/ymax"] == pytest.approx([(y + bh) / h for _, y, _, bh in boxes])


def test_crowds_are_stored_not_filtered(prepared: Path) -> None:
    crowd = [c for r in _parse(_shards(prepared, "train")) for c in r["image/object/is_crowd"]]
    assert 1 in crowd and 0 in crowd


def test_records_are_spread_round_robin(raw: Path, prepared: Path) -> None:
    counts = [len(_parse([p])) for p in _shards(prepared, "train")]
    assert max(counts) - min(counts) <= 1
    first = _parse(_shards(prepared, "val")[:1])
    val_ids = [img["id"] for img in _instances(raw, "val")["images"]]
    assert [int(r["image/source_id"]) for r in first] == val_ids[::2]


# ----------------------------------------------------------------------------- bad input


@pytest.fixture
def copy(raw: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(raw, tmp_path / "raw"))


def _edit(raw: Path, split: str, fn) -> None:
    path = coco.annotation_file(raw, split)
    content = json.loads(path.read_text())
    fn(content)
    path.write_text(json.dumps(content))


def _prepare_fails(raw: Path, out: Path, match: str) -> DataError:
    out.mkdir()
    (out / "earlier.txt").write_text("kept")
    with pytest.raises(DataError, match=match) as err:
        coco.prepare(raw, out, train_shards=2, val_shards=2, workers=2)
    assert "\n" not in str(err.value)
    assert [p.name for p in out.iterdir()] == ["earlier.txt"]  # earlier result untouched
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    return err.value


def test_corrupt_jpeg_names_the_image_id(copy: Path, tmp_path: Path) -> None:
    img = _instances(copy, "val")["images"][3]
    path = copy / "val2017" / img["file_name"]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _prepare_fails(copy, tmp_path / "out", rf"image id {img['id']}: not a complete JPEG")


def test_jpeg_of_another_size_names_the_image_id(copy: Path, tmp_path: Path) -> None:
    img = _instances(copy, "val")["images"][0]
    _edit(copy, "val", lambda c: c["images"][0].update(width=img["width"] + 5))
    _prepare_fails(copy, tmp_path / "out", rf"image id {img['id']}: JPEG is \d+x\d+")


def test_box_outside_its_image_names_the_image_id(copy: Path, tmp_path: Path) -> None:
    ann = _instances(copy, "train")["annotations"][2]

    def move_out(content: dict) -> None:
        content["annotations"][2]["bbox"][0] = 10_000

    _edit(copy, "train", move_out)
    _prepare_fails(copy, tmp_path / "out", rf"image id {ann['image_id']}: annotations\[2\]")


@pytest.mark.parametrize("split", ["train", "val"])
def test_missing_annotation_file_is_named(copy: Path, tmp_path: Path, split: str) -> None:
    missing = coco.annotation_file(copy, split)
    missing.unlink()
    err = _prepare_fails(copy, tmp_path / "out", "annotation file not found")
    assert str(err) == f"{missing}: annotation file not found"


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The splits prepare hands to the shard writer, in order, recorded without writing."""
    seen: list[str] = []

    def write_splits(out_dir: Path, splits, *args, **kwargs) -> None:
        seen.extend(split.prefix for split in splits)

    monkeypatch.setattr(coco, "write_splits", write_splits)
    return seen


@pytest.mark.parametrize("split", ["train", "val"])
def test_unknown_category_names_file_annotation_and_image(
    copy: Path, tmp_path: Path, split: str, planned: list[str]
) -> None:
    ann = _instances(copy, split)["annotations"][1]
    _edit(copy, split, lambda c: c["annotations"][1].update(category_id=7))
    err = _prepare_fails(
        copy,
        tmp_path / "out",
        rf"instances_{split}2017\.json: annotations\[1\]\.category_id = 7 "
        rf"\(annotation id {ann['id']}, image id {ann['image_id']}\) is not in 'categories' "
        r"\(known: \[1, 3, 18, 44, 62\]\)$",
    )
    assert str(err).startswith(str(coco.annotation_file(copy, split)))
    # Val is planned first; a split whose JSON is bad never reaches the writer.
    assert planned == ([] if split == "val" else ["val"])


@pytest.mark.parametrize("value", ["dog", None])
def test_non_integer_category_id_is_named(
    copy: Path, tmp_path: Path, value: object, planned: list[str]
) -> None:
    _edit(copy, "val", lambda c: c["annotations"][0].update(category_id=value))
    _prepare_fails(
        copy,
        tmp_path / "out",
        rf"instances_val2017\.json: annotations\[0\]\.category_id = {value!r} is not an integer",
    )
    assert planned == []


def test_degenerate_and_slightly_outside_boxes_are_skipped(copy: Path, tmp_path: Path) -> None:
    content = _instances(copy, "val")
    images = {img["id"]: img for img in content["images"]}

    def edit(c: dict) -> None:
        c["annotations"][0]["bbox"][2] = 0  # w <= 0
        a1 = c["annotations"][1]
        a1["bbox"][2] = images[a1["image_id"]]["width"] - a1["bbox"][0] + 0.4  # past by 0.4 px

    _edit(copy, "val", edit)
    out = coco.prepare(copy, tmp_path / "out", train_shards=1, val_shards=1)
    meta = json.loads((out / "dataset.json").read_text())
    assert meta["splits"]["val"]["skipped_boxes"] == 2
    assert meta["splits"]["val"]["boxes"] == len(content["annotations"]) - 2
    labels = sum(len(r["image/object/class/label"]) for r in _parse(_shards(out, "val")))
    assert labels == len(content["annotations"]) - 2


def test_unknown_variant(raw: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="coco has no prepared variant 'raw'"):
        coco.prepare_variant("raw", raw, tmp_path / "out", {}, workers=1)


def _reencode(path: Path, image_format: str) -> np.ndarray:
    """Write the image's own pixels back in `image_format` under its `.jpg` name."""
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB"))
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=image_format)
    path.write_bytes(buf.getvalue())
    return pixels


def test_png_under_a_jpg_name_is_prepared_and_decodes_in_the_input_pipeline(
    copy: Path, tmp_path: Path
) -> None:
    """As tf.io.decode_image, the check goes by the bytes, not the name: the record says png
    and the SSD input pipeline decodes it to the PNG's pixels."""
    img = _instances(copy, "val")["images"][2]
    path = copy / "val2017" / img["file_name"]
    pixels = _reencode(path, "PNG")
    out = coco.prepare(copy, tmp_path / "out", train_shards=1, val_shards=1)
    records = {int(r["image/source_id"]): r for r in _parse(_shards(out, "val"))}
    rec = records[img["id"]]
    assert rec["image/encoded"] == path.read_bytes()
    assert (rec["image/format"], rec["image/width"], rec["image/height"]) == (
        b"png",
        img["width"],
        img["height"],
    )
    assert {r["image/format"] for i, r in records.items() if i != img["id"]} == {b"jpeg"}
    ids = [c["id"] for c in json.loads((out / "dataset.json").read_text())["categories"]]
    table = coco_input.class_table(ids)
    for serialized in tf.data.TFRecordDataset([str(p) for p in _shards(out, "val")]):
        example = coco_input.parse(serialized, table)
        if int(example["source_id"]) == img["id"]:
            image = coco_input.eval_example(example)["image"].numpy()
            break
    expected = tf.image.resize(pixels.astype(np.float32) / 255.0, [300, 300])
    np.testing.assert_allclose(image, coco_input.normalise(expected).numpy(), atol=1e-5)


@pytest.mark.parametrize(("image_format", "kind"), [("GIF", "GIF"), ("BMP", "BMP")])
def test_other_image_formats_under_a_jpg_name_name_the_image_id(
    copy: Path, tmp_path: Path, image_format: str, kind: str
) -> None:
    img = _instances(copy, "train")["images"][1]
    _reencode(copy / "train2017" / img["file_name"], image_format)
    _prepare_fails(
        copy, tmp_path / "out", rf"image id {img['id']}: a {kind} image, not JPEG or PNG"
    )


def test_truncated_png_under_a_jpg_name_names_the_image_id(copy: Path, tmp_path: Path) -> None:
    img = _instances(copy, "val")["images"][4]
    path = copy / "val2017" / img["file_name"]
    _reencode(path, "PNG")
    path.write_bytes(path.read_bytes()[:-30])
    _prepare_fails(copy, tmp_path / "out", rf"image id {img['id']}: unreadable PNG \(truncated")


def test_jpeg_size_reads_the_frame_header(raw: Path) -> None:
    img = _instances(raw, "val")["images"][0]
    data = (raw / "val2017" / img["file_name"]).read_bytes()
    assert jpeg_size(data) == (img["width"], img["height"])
    assert jpeg_size(data[: len(data) // 2]) is None  # no end-of-image marker
    assert jpeg_size(b"\x89PNG\r\n\x1a\n" + data[8:]) is None
    assert jpeg_size(data[:2] + b"\xff\xda\x00\x04\x00\x00" + data[-2:]) is None  # no frame


def test_hand_encoded_example_equals_tf_train_example() -> None:
    ours = tfrecord.example(
        {
            "b": tfrecord.bytes_feature([b"\xff" * 300, "text"]),
            "f": tfrecord.float_feature([0.5, 1e-3]),
            "f0": tfrecord.float_feature([]),
            "i": tfrecord.int64_feature([1, -5, 2**40]),
            "i0": tfrecord.int64_feature([]),
            "one": tfrecord.int64_feature(7),
        }
    )
    t = tf.train
    expected = t.Example(
        features=t.Features(
            feature={
                "b": t.Feature(bytes_list=t.BytesList(value=[b"\xff" * 300, b"text"])),
                "f": t.Feature(float_list=t.FloatList(value=[0.5, 1e-3])),
                "f0": t.Feature(float_list=t.FloatList(value=[])),
                "i": t.Feature(int64_list=t.Int64List(value=[1, -5, 2**40])),
                "i0": t.Feature(int64_list=t.Int64List(value=[])),
                "one": t.Feature(int64_list=t.Int64List(value=[7])),
            }
        )
    )
    parsed = t.Example.FromString(ours)
    assert parsed == expected
    assert parsed.features.feature["f0"].WhichOneof("kind") == "float_list"
