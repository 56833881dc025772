"""Tests for the ADE20K TFRecord preparation (ade20k.prepare, ade20k_tfrecord): records parsed
back with tf.data hold the files' bytes; every bad input is one line naming the files and
leaves an earlier prepared folder untouched."""

from __future__ import annotations

import io
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from accelpipe.core.errors import DataError
from accelpipe.datasets import ade20k, ade20k_layout, ade20k_tfrecord, image_bytes, tfrecord
from accelpipe.datasets.ade20k_synthetic import synthesize
from accelpipe.inputs import ade20k_input
from accelpipe.inputs.tf_data_checks import checked
from tests.helpers.dataset_config import prepare_config

pytestmark = pytest.mark.tensorflow

FEATURES = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string),
    "image/format": tf.io.FixedLenFeature((), tf.string),
    "image/filename": tf.io.FixedLenFeature((), tf.string),
    "image/height": tf.io.FixedLenFeature((), tf.int64),
    "image/width": tf.io.FixedLenFeature((), tf.int64),
    "label/encoded": tf.io.FixedLenFeature((), tf.string),
    "label/format": tf.io.FixedLenFeature((), tf.string),
}


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(tmp_path_factory.mktemp("ade") / "raw", 7, 4, (40, 30), seed=5)


@pytest.fixture(scope="module")
def prepared(raw: Path) -> Path:
    cfg = prepare_config("ade20k", "tfrecord", {"train_shards": 3, "val_shards": 2})
    return ade20k.prepare_variant("tfrecord", raw, raw.parent / "prepared", cfg, workers=2)


def _shards(prepared: Path, split: str) -> list[Path]:
    return sorted(prepared.glob(f"{split}-*.tfrecord"))


def _parse(paths: list[Path]) -> list[dict]:
    return [
        {k: v.numpy() for k, v in tf.io.parse_single_example(r, FEATURES).items()}
        for r in tf.data.TFRecordDataset([str(p) for p in paths])
    ]


def _names(raw: Path, split: str) -> list[str]:
    return sorted(p.name for p in ade20k_layout.image_dir(raw, split).iterdir())


def test_layout_and_dataset_json(prepared: Path) -> None:
    assert sorted(p.name for p in prepared.iterdir()) == [
        "dataset.json",
        "shards-checked.json",
        "train-00000-of-00003.tfrecord",
        "train-00001-of-00003.tfrecord",
        "train-00002-of-00003.tfrecord",
        "val-00000-of-00002.tfrecord",
        "val-00001-of-00002.tfrecord",
    ]
    meta = json.loads((prepared / "dataset.json").read_text())
    assert meta == {
        "format": ade20k.FORMAT,
        "features": ade20k_tfrecord.FEATURES,
        "splits": {"train": {"images": 7, "shards": 3}, "val": {"images": 4, "shards": 2}},
        "num_classes": 150,
        "ignore_index": 255,
        "label_convention": ade20k.LABEL_CONVENTION,
        "label_values_checked": "in the input pipeline (each label as it is decoded)",
        "classes": list(ade20k_layout.CLASS_NAMES),
    }
    assert sorted(meta["features"]) == sorted(FEATURES)
    assert meta["classes"][0] == "wall" and meta["classes"][149] == "flag"
    assert "0 -> ignore_index 255 and k -> k - 1" in meta["label_convention"]


@pytest.mark.parametrize("split", ["train", "val"])
def test_records_hold_the_files_bytes(raw: Path, prepared: Path, split: str) -> None:
    shards = _shards(prepared, split)
    names = _names(raw, split)
    for index, shard in enumerate(shards):  # round robin over the sorted names
        assert [r["image/filename"].decode() for r in _parse([shard])] == names[
            index :: len(shards)
        ]
    for rec in _parse(shards):
        jpg = ade20k_layout.image_dir(raw, split) / rec["image/filename"].decode()
        png = ade20k_layout.annotation_dir(raw, split) / f"{jpg.stem}.png"
        assert rec["image/encoded"] == jpg.read_bytes()  # not re-encoded
        assert rec["label/encoded"] == png.read_bytes()
        assert (rec["image/format"], rec["label/format"]) == (b"jpeg", b"png")
        with Image.open(jpg) as image:
            assert (rec["image/width"], rec["image/height"]) == image.size


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list:
    """The splits prepare hands to the shard writer, recorded without writing (none may
    reach it before a pairing error)."""
    splits: list = []

    def write_splits(out_dir: Path, planned, *args, **kwargs) -> None:
        splits.extend(planned)

    monkeypatch.setattr(ade20k, "write_splits", write_splits)
    return splits


def test_parallel_workers_write_identical_records(
    raw: Path, prepared: Path, tmp_path: Path
) -> None:
    serial = ade20k.prepare(raw, tmp_path / "serial", train_shards=3, val_shards=2, workers=1)
    for path in prepared.iterdir():
        if path.name != tfrecord.CHECKED:  # the shards' sizes and mtimes: a cache, not data
            assert (serial / path.name).read_bytes() == path.read_bytes()


def test_default_shard_counts(raw: Path, tmp_path: Path, written: list) -> None:
    cfg = prepare_config("ade20k", "tfrecord", {})
    ade20k.prepare_variant("tfrecord", raw, tmp_path / "out", cfg, workers=1)
    assert [(split.prefix, split.num_shards) for split in written] == [("train", 64), ("val", 8)]


def test_unknown_variant(raw: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="ade20k has no prepared variant 'index'"):
        ade20k.prepare_variant("index", raw, tmp_path / "out", {}, workers=1)


def test_png_header() -> None:
    grey = _png_bytes(np.zeros((3, 5), np.uint8))
    assert image_bytes.png_header(grey) == (5, 3, 8, 0)
    rgb = _png_bytes(np.zeros((3, 5, 3), np.uint8))
    assert image_bytes.png_header(rgb) == (5, 3, 8, 2)
    assert image_bytes.png_header(b"\xff\xd8" + grey[2:]) is None
    assert image_bytes.png_header(grey[:20]) is None


def _png_bytes(pixels: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels, mode).save(buf, format="PNG")
    return buf.getvalue()


# ----------------------------------------------------------------------------- bad input


@pytest.fixture
def copy(raw: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(raw, tmp_path / "raw"))


def _files(raw: Path, split: str, index: int) -> tuple[Path, Path]:
    stem = ade20k_layout.file_stem(split, index)
    return (
        ade20k_layout.image_dir(raw, split) / f"{stem}.jpg",
        ade20k_layout.annotation_dir(raw, split) / f"{stem}.png",
    )


def _prepare_fails(raw: Path, out: Path, workers: int = 1, verify_labels: bool = False) -> str:
    """The one-line message; the earlier `out` and its folder are untouched."""
    out.mkdir()
    (out / "earlier.txt").write_text("kept")
    with pytest.raises(DataError) as err:
        ade20k.prepare(
            raw, out, train_shards=2, val_shards=2, workers=workers, verify_labels=verify_labels
        )
    assert "\n" not in str(err.value)
    assert [p.name for p in out.iterdir()] == ["earlier.txt"]
    assert (out / "earlier.txt").read_text() == "kept"
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    return str(err.value)


def test_image_without_annotation_names_both(copy: Path, tmp_path: Path, written) -> None:
    jpg, png = _files(copy, "val", 3)
    png.unlink()
    message = _prepare_fails(copy, tmp_path / "out")
    assert message == f"{jpg}: image without its annotation {png}"
    assert written == []


def test_annotation_without_image_names_both(copy: Path, tmp_path: Path, written) -> None:
    jpg, png = _files(copy, "train", 2)
    jpg.unlink()
    message = _prepare_fails(copy, tmp_path / "out")
    assert message == f"{png}: annotation without its image {jpg}"
    assert written == []


def test_several_images_without_annotation_are_counted(copy: Path, tmp_path: Path) -> None:
    for index in (2, 5, 6):
        _files(copy, "train", index)[1].unlink()
    jpg, png = _files(copy, "train", 2)
    message = _prepare_fails(copy, tmp_path / "out")
    assert message == f"{jpg}: image without its annotation {png} (2 more like it)"


def test_annotation_of_another_size_names_both(copy: Path, tmp_path: Path) -> None:
    jpg, png = _files(copy, "train", 4)
    with Image.open(jpg) as image:
        width, height = image.size
    Image.fromarray(np.ones((height, width + 3), np.uint8)).save(png)
    message = _prepare_fails(copy, tmp_path / "out")
    assert message == (
        f"{jpg} and {png}: the JPEG is {width}x{height}, the annotation PNG {width + 3}x{height}"
    )


def _label_with_151(raw: Path, split: str, index: int) -> tuple[Path, Path]:
    jpg, png = _files(raw, split, index)
    label = np.array(Image.open(png))
    label[3, 4] = 151
    Image.fromarray(label).save(png)
    return jpg, png


def test_value_above_150_names_the_file_and_value_with_verify_labels(
    copy: Path, tmp_path: Path
) -> None:
    jpg, png = _label_with_151(copy, "val", 2)
    message = _prepare_fails(copy, tmp_path / "out", workers=2, verify_labels=True)
    assert message == f"{png} (annotation of {jpg}): value 151 is above the 150 classes"


def test_values_are_left_to_the_input_pipeline_without_verify_labels(
    copy: Path, tmp_path: Path
) -> None:
    """The record is written as it is; parsing it is one DataError naming both files."""
    _label_with_151(copy, "val", 2)
    out = ade20k.prepare(copy, tmp_path / "out", train_shards=1, val_shards=1)
    meta = json.loads((out / "dataset.json").read_text())
    assert meta["label_values_checked"] == "in the input pipeline (each label as it is decoded)"
    with pytest.raises(DataError) as err:
        list(checked(ade20k_input.eval_dataset(_shards(out, "val"))))
    assert str(err.value) == (
        "ADE_val_00000002.png (annotation of ADE_val_00000002.jpg): value 151 is above the 150 "
        "classes (prepare with verify_labels checks every file)"
    )


NOT_8_BIT_GREY = {
    "8-bit colour type 2": lambda label: Image.fromarray(np.stack([label] * 3, axis=-1)),
    "16-bit colour type 0": lambda label: Image.fromarray(label.astype(np.uint16)),
    "8-bit colour type 3": lambda label: Image.fromarray(label).convert("P"),
    "8-bit colour type 4": lambda label: Image.fromarray(np.stack([label] * 2, axis=-1), "LA"),
}


@pytest.mark.parametrize("header", sorted(NOT_8_BIT_GREY))
def test_png_that_is_not_8_bit_grey_is_named(copy: Path, tmp_path: Path, header: str) -> None:
    jpg, png = _files(copy, "train", 1)
    NOT_8_BIT_GREY[header](np.array(Image.open(png))).save(png, format="PNG")
    message = _prepare_fails(copy, tmp_path / "out")
    assert message == f"{png} (annotation of {jpg}): PNG is {header}, not 8-bit single-channel"


def test_one_bit_png_is_named(copy: Path, tmp_path: Path) -> None:
    jpg, png = _files(copy, "train", 1)
    Image.open(png).convert("1").save(png)
    message = _prepare_fails(copy, tmp_path / "out")
    assert message == f"{png} (annotation of {jpg}): PNG is 1-bit colour type 0, not 8-bit " + (
        "single-channel"
    )


def test_annotation_that_is_not_a_png(copy: Path, tmp_path: Path) -> None:
    jpg, png = _files(copy, "val", 1)
    shutil.copyfile(jpg, png)
    assert _prepare_fails(copy, tmp_path / "out") == f"{png} (annotation of {jpg}): not a PNG file"


def test_truncated_png_is_unreadable(copy: Path, tmp_path: Path) -> None:
    jpg, png = _files(copy, "val", 4)
    data = png.read_bytes()
    png.write_bytes(data[: len(data) // 2])
    message = _prepare_fails(copy, tmp_path / "out")
    assert message == f"{png} (annotation of {jpg}): unreadable PNG (truncated in its IDAT chunk)"


def test_png_with_a_flipped_bit_fails_its_crc(copy: Path, tmp_path: Path) -> None:
    jpg, png = _files(copy, "train", 3)
    data = bytearray(png.read_bytes())
    data[data.index(b"IDAT") + 6] ^= 0x10
    png.write_bytes(bytes(data))
    message = _prepare_fails(copy, tmp_path / "out", workers=2)
    assert message == f"{png} (annotation of {jpg}): unreadable PNG (its IDAT chunk fails its CRC)"


def _real_pngs() -> list[Path]:
    """PNGs written by other encoders than Pillow's: matplotlib's shipped images."""
    import matplotlib

    return sorted(Path(matplotlib.get_data_path()).rglob("*.png"))


def test_png_problem_passes_real_pngs_and_finds_their_damage() -> None:
    files = _real_pngs()
    assert len(files) >= 10
    for path in files:
        data = path.read_bytes()
        assert image_bytes.png_problem(data) is None, path
        cut = data[: len(data) * 2 // 3]
        assert image_bytes.png_problem(cut) is not None, path
        flipped = bytearray(data)
        flipped[data.index(b"IDAT") + 8] ^= 0x01
        assert image_bytes.png_problem(bytes(flipped)) == "its IDAT chunk fails its CRC"


def test_png_problem_walks_the_chunks() -> None:
    grey = _png_bytes(np.arange(60, dtype=np.uint8).reshape(6, 10))
    assert image_bytes.png_problem(grey) is None
    assert image_bytes.png_problem(grey[:-12]) == "truncated: no IEND chunk"
    assert image_bytes.png_problem(grey[:-6]) == "truncated: no IEND chunk"
    assert image_bytes.png_problem(grey[:-2]) == "truncated in its IEND chunk"
    idat = grey.index(b"IDAT") - 4
    (length,) = struct.unpack_from(">I", grey, idat)
    no_data = grey[:idat] + grey[idat + 12 + length :]
    assert image_bytes.png_problem(no_data) == "no IDAT chunk"


def test_corrupt_jpeg_names_the_file(copy: Path, tmp_path: Path) -> None:
    jpg, png = _files(copy, "train", 6)
    data = jpg.read_bytes()
    jpg.write_bytes(data[: len(data) // 2])
    message = _prepare_fails(copy, tmp_path / "out", workers=2)  # raised in a worker
    assert message == f"{jpg}: not a complete JPEG file (annotation {png})"


# ----------------------------------------------------------------------------- image formats


def _matplotlib_png() -> Path:
    """A real PNG from another encoder than Pillow's: matplotlib's 128x128 RGBA sample."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "sample_data" / "Minduka_Present_Blue_Pack.png"


def test_png_under_a_jpg_name_is_prepared_and_decodes_in_the_input_pipeline(
    copy: Path, tmp_path: Path
) -> None:
    """As tf.io.decode_image, the check goes by the bytes, not the name: the record says
    png and the input pipeline's decoder reads the pixels."""
    jpg, png = _files(copy, "val", 1)
    sample = _matplotlib_png()
    shutil.copyfile(sample, jpg)
    with Image.open(sample) as image:
        pixels = np.asarray(image.convert("RGB"))
    label = np.arange(128 * 128, dtype=np.int64).reshape(128, 128) % 151
    Image.fromarray(label.astype(np.uint8)).save(png)
    out = ade20k.prepare(copy, tmp_path / "out", train_shards=1, val_shards=1)
    records = {r["image/filename"].decode(): r for r in _parse(_shards(out, "val"))}
    rec = records[jpg.name]
    assert rec["image/encoded"] == sample.read_bytes()
    assert (rec["image/format"], rec["image/width"], rec["image/height"]) == (b"png", 128, 128)
    assert {r["image/format"] for name, r in records.items() if name != jpg.name} == {b"jpeg"}
    decoded = {
        ex["filename"].numpy().decode(): ex
        for ex in checked(ade20k_input.eval_dataset(_shards(out, "val")))
    }
    np.testing.assert_array_equal(decoded[jpg.name]["image"].numpy(), pixels)
    assert decoded[jpg.name]["label"].shape == (128, 128)


def _encoded(pixels: np.ndarray, image_format: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=image_format)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("image_format", "what"),
    [
        ("GIF", "a GIF image, not JPEG or PNG (the image formats the TFRecords hold)"),
        ("BMP", "a BMP image, not JPEG or PNG (the image formats the TFRecords hold)"),
        ("WEBP", "a WebP image, not JPEG or PNG (the image formats the TFRecords hold)"),
        ("TIFF", "a TIFF image, not JPEG or PNG (the image formats the TFRecords hold)"),
    ],
)
def test_other_image_formats_under_a_jpg_name_are_named(
    copy: Path, tmp_path: Path, image_format: str, what: str
) -> None:
    jpg, png = _files(copy, "train", 5)
    with Image.open(jpg) as image:
        jpg.write_bytes(_encoded(np.asarray(image), image_format))
    assert _prepare_fails(copy, tmp_path / "out", workers=2) == f"{jpg}: {what} (annotation {png})"


def test_truncated_png_under_a_jpg_name_is_named(copy: Path, tmp_path: Path) -> None:
    jpg, png = _files(copy, "val", 3)
    data = _matplotlib_png().read_bytes()
    jpg.write_bytes(data[: len(data) // 2])
    message = _prepare_fails(copy, tmp_path / "out")
    assert message == f"{jpg}: unreadable PNG (truncated in its IDAT chunk) (annotation {png})"


def test_a_file_that_is_no_image_is_named(copy: Path, tmp_path: Path) -> None:
    jpg, png = _files(copy, "val", 2)
    jpg.write_text("<html>not found</html>")
    message = _prepare_fails(copy, tmp_path / "out")
    assert message == f"{jpg}: not an image file (neither JPEG nor PNG) (annotation {png})"
