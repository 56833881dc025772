"""Tests for accelpipe.inputs.coco_input, the tf.data SSD input pipeline: the class table,
parsing of the converter's records, the SSD crop (with the crop read back from a coordinate
image), the flip, the normalisation, worker sharding, and the train and eval datasets on a
small synthetic COCO prepared by coco.prepare."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from accelpipe.core.errors import DataError
from accelpipe.core.keras2 import tf
from accelpipe.datasets import coco, tfrecord
from accelpipe.datasets.coco_instances import Box, ImageRecord
from accelpipe.datasets.coco_synthetic import synthesize
from accelpipe.datasets.coco_tfrecord import encode
from accelpipe.inputs import coco_input
from accelpipe.models.ssd_boxes import NUM_BOXES, default_boxes
from tests.helpers.tf_pipelines import parallel, stateful_ops

pytestmark = pytest.mark.tensorflow

COCO_IDS = [1, 3, 18, 44, 62]  # the synthetic set's categories
TOL = 1e-4


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("coco")
    return synthesize(root / "raw", train_images=9, val_images=5, size=(48, 36), seed=2)


@pytest.fixture(scope="module")
def prepared(raw: Path) -> Path:
    # One train file: fewer files than two workers, so they shard records.
    return coco.prepare(raw, raw.parent / "prepared", train_shards=1, val_shards=2)


def _instances(raw: Path, split: str) -> dict:
    return json.loads(coco.annotation_file(raw, split).read_text())


def _files(prepared: Path, split: str) -> list[Path]:
    return sorted(prepared.glob(f"{split}-*.tfrecord"))


def _jpeg(path: Path, width: int, height: int) -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, format="JPEG", quality=90)


def _box(xmin: float, ymin: float, xmax: float, ymax: float, label: int) -> Box:
    return Box(xmin, xmax, ymin, ymax, label, f"c{label}", is_crowd=0, area=1.0)


# ----------------------------------------------------------------------------- class table, parse


def test_class_table_maps_sorted_coco_ids_to_1_to_n() -> None:
    table = coco_input.class_table([62, 1, 18, 3, 44])
    keys = tf.constant([1, 3, 18, 44, 62, 7, 0, 90], tf.int64)
    assert table.lookup(keys).numpy().tolist() == [1, 2, 3, 4, 5, -1, -1, -1]


def test_parse_reads_a_converter_record(tmp_path: Path) -> None:
    _jpeg(tmp_path / "a.jpg", 40, 30)
    boxes = [_box(0.1, 0.2, 0.5, 0.6, 18), _box(0.0, 0.25, 1.0, 0.75, 1), _box(0, 0, 1, 1, 7)]
    record = ImageRecord(str(tmp_path / "a.jpg"), 123456, "a.jpg", 40, 30, boxes)
    out = coco_input.parse(tf.constant(encode(record)), coco_input.class_table(COCO_IDS))
    assert out["source_id"].dtype == tf.int64 and int(out["source_id"]) == 123456
    assert out["size"].numpy().tolist() == [30, 40]  # (height, width)
    assert out["jpeg"].numpy() == (tmp_path / "a.jpg").read_bytes()
    assert out["boxes"].dtype == tf.float32
    np.testing.assert_allclose(
        out["boxes"].numpy(),
        [[0.2, 0.1, 0.6, 0.5], [0.25, 0.0, 0.75, 1.0], [0, 0, 1, 1]],  # ymin, xmin, ymax, xmax
        rtol=0,
        atol=1e-7,
    )
    assert out["labels"].dtype == tf.int32
    assert out["labels"].numpy().tolist() == [3, 1, -1]  # 18 -> 3, 1 -> 1, 7 unknown


def test_parse_of_an_image_without_boxes(tmp_path: Path) -> None:
    _jpeg(tmp_path / "e.jpg", 20, 16)
    record = ImageRecord(str(tmp_path / "e.jpg"), 9, "e.jpg", 20, 16)
    out = coco_input.parse(tf.constant(encode(record)), coco_input.class_table(COCO_IDS))
    assert out["boxes"].shape == (0, 4) and out["labels"].shape == (0,)
    assert out["size"].numpy().tolist() == [16, 20]


def test_parse_matches_the_prepared_records(raw: Path, prepared: Path) -> None:
    content = _instances(raw, "val")
    images = {img["id"]: img for img in content["images"]}
    anns: dict[int, list] = {}
    for ann in content["annotations"]:
        anns.setdefault(ann["image_id"], []).append(ann)
    table = coco_input.class_table(COCO_IDS)
    seen = []
    for serialized in tf.data.TFRecordDataset([str(f) for f in _files(prepared, "val")]):
        out = coco_input.parse(serialized, table)
        img = images[int(out["source_id"])]
        seen.append(img["id"])
        assert out["size"].numpy().tolist() == [img["height"], img["width"]]
        w, h = img["width"], img["height"]
        objects = anns.get(img["id"], [])
        expected = [
            [y / h, x / w, (y + bh) / h, (x + bw) / w]
            for x, y, bw, bh in (a["bbox"] for a in objects)
        ]
        np.testing.assert_allclose(
            out["boxes"].numpy().reshape(-1, 4), np.reshape(expected, (-1, 4)), atol=1e-6
        )
        labels = [COCO_IDS.index(a["category_id"]) + 1 for a in objects]
        assert out["labels"].numpy().tolist() == labels
    assert sorted(seen) == sorted(images)


# ----------------------------------------------------------------------------- augmentation


def _coordinate_image(size: int = 101) -> np.ndarray:
    """Channel 0 = y, channel 1 = x (both 0..1), channel 2 = 0.5: bilinear resampling keeps
    a linear ramp exact, so a crop's corners can be read back from the output's corners."""
    ramp = np.linspace(0.0, 1.0, size, dtype=np.float32)
    y, x = np.meshgrid(ramp, ramp, indexing="ij")
    return np.stack([y, x, np.full_like(y, 0.5)], axis=-1)


def _crop_of(image: np.ndarray) -> np.ndarray:
    """[ymin, xmin, ymax, xmax] of the crop that made `image` from _coordinate_image()."""
    return np.array([image[0, 0, 0], image[0, 0, 1], image[-1, -1, 0], image[-1, -1, 1]])


def _centres_inside(crop: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    cy, cx = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    return (cy > crop[0]) & (cy < crop[2]) & (cx > crop[1]) & (cx < crop[3])


def _random_boxes(rng: np.random.Generator) -> np.ndarray:
    n = int(rng.integers(1, 6))
    lo = rng.uniform(0.0, 0.8, (n, 2))
    hi = np.minimum(lo + rng.uniform(0.05, 0.6, (n, 2)), 1.0)
    return np.concatenate([lo, hi], axis=1).astype(np.float32)  # ymin, xmin, ymax, xmax


def test_ssd_crop_with_a_fixed_crop_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    crop = tf.constant([0.2, 0.1, 0.8, 0.6])
    monkeypatch.setattr(coco_input, "_one_pass", lambda boxes, key: (tf.constant(True), crop))
    boxes = tf.constant(
        [
            [0.3, 0.2, 0.5, 0.4],  # inside: re-normalised
            [0.0, 0.0, 0.5, 0.3],  # centre (0.25, 0.15) inside, clipped at the top
            [0.0, 0.5, 0.3, 1.0],  # centre (0.15, 0.75) outside: dropped
            [0.6, 0.4, 1.0, 0.9],  # centre (0.8, 0.65) outside: dropped
        ]
    )
    image, out, labels = coco_input.ssd_crop(
        tf.constant(_coordinate_image()), boxes, tf.constant([1, 2, 3, 4]), tf.constant([0, 0])
    )
    assert image.shape == (300, 300, 3)
    np.testing.assert_allclose(_crop_of(image.numpy()), crop.numpy(), atol=TOL)
    assert labels.numpy().tolist() == [1, 2]
    np.testing.assert_allclose(
        out.numpy(),
        [[(0.3 - 0.2) / 0.6, (0.2 - 0.1) / 0.5, (0.5 - 0.2) / 0.6, (0.4 - 0.1) / 0.5],
         [0.0, 0.0, (0.5 - 0.2) / 0.6, (0.3 - 0.1) / 0.5]],
        atol=1e-6,
    )  # fmt: skip


def _iou(crop: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    lo, hi = np.maximum(crop[:2], boxes[:, :2]), np.minimum(crop[2:], boxes[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    return inter / (area(crop) + area(boxes) - inter)


def test_ssd_crop_over_many_seeds_keeps_the_reference_rules() -> None:
    crop_fn = tf.function(coco_input.ssd_crop, reduce_retracing=True)
    image = tf.constant(_coordinate_image())
    whole = np.array([0.0, 0.0, 1.0, 1.0])
    runs, cropped, dropped, checked = 300, 0, 0, 0
    for seed in range(runs):
        boxes = _random_boxes(np.random.default_rng(seed))
        labels = np.arange(1, len(boxes) + 1, dtype=np.int32)
        key = tf.constant([7, seed], tf.int64)
        out_image, out_boxes, out_labels = (
            t.numpy() for t in crop_fn(image, tf.constant(boxes), tf.constant(labels), key)
        )
        assert out_image.shape == (300, 300, 3)
        crop = _crop_of(out_image)
        assert np.all(crop >= -TOL) and np.all(crop <= 1 + TOL)
        if not np.allclose(crop, whole, atol=TOL):
            cropped += 1
            h, w = crop[2] - crop[0], crop[3] - crop[1]
            assert 0.3 - TOL <= h <= 1 + TOL and 0.3 - TOL <= w <= 1 + TOL
            assert 0.5 - TOL < h / w < 2 + TOL
            assert np.all(_iou(crop, boxes) > 0)  # the lowest bar: IoU > 0 with every box
        assert out_boxes.shape == (len(out_labels), 4)
        assert np.all(out_boxes >= 0.0) and np.all(out_boxes <= 1.0)
        assert np.all(out_boxes[:, 0] <= out_boxes[:, 2])
        assert np.all(out_boxes[:, 1] <= out_boxes[:, 3])
        # Exactly the boxes whose centre is inside the crop stay, in order, with their labels,
        # clipped and re-normalised to the crop; unless a centre lies on an edge, where the
        # crop's read-back precision cannot decide.
        centres = np.tile((boxes[:, :2] + boxes[:, 2:]) / 2, 2)
        if np.abs(centres - crop).min() < 1e-3:
            continue
        checked += 1
        keep = _centres_inside(crop, boxes)
        dropped += not keep.all()
        assert out_labels.tolist() == labels[keep].tolist()
        assert keep.any()  # a crop is accepted only with a centre inside it
        size = np.tile(crop[2:] - crop[:2], 2)
        expected = np.clip((boxes[keep] - np.tile(crop[:2], 2)) / size, 0.0, 1.0)
        np.testing.assert_allclose(out_boxes, expected, atol=1e-3)
    # Both outcomes happen: the image kept (1 in 7 per pass) and real crops, some dropping boxes.
    assert 0.2 * runs < cropped < runs
    assert dropped > 0.05 * runs and checked > 0.9 * runs


def test_flip_mirrors_boxes_and_pixels() -> None:
    boxes = tf.constant([[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 1.0, 0.25]])
    image = np.zeros((20, 40, 3), np.float32)
    image[2:10, 8:24] = 1.0  # the first box, in pixels
    flipped_image, flipped = coco_input._flip(tf.constant(image), boxes)
    np.testing.assert_allclose(
        flipped.numpy(), [[0.1, 0.4, 0.5, 0.8], [0.0, 0.75, 1.0, 1.0]], atol=1e-7
    )
    assert np.array_equal(flipped_image.numpy(), image[:, ::-1])
    ys, xs = np.nonzero(flipped_image.numpy()[..., 0])
    assert (xs.min() / 40, (xs.max() + 1) / 40) == pytest.approx((0.4, 0.8))
    assert (ys.min() / 20, (ys.max() + 1) / 20) == pytest.approx((0.1, 0.5))
    twice_image, twice = coco_input._flip(flipped_image, flipped)
    np.testing.assert_allclose(twice.numpy(), boxes.numpy(), atol=1e-7)
    assert np.array_equal(twice_image.numpy(), image)


def test_normalise_is_imagenet_mean_and_std() -> None:
    x = np.random.default_rng(1).uniform(0, 1, (4, 5, 3)).astype(np.float32)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(
        coco_input.normalise(tf.constant(x)).numpy(), (x - mean) / std, rtol=1e-5
    )
    np.testing.assert_allclose(
        coco_input.normalise(tf.zeros([1, 1, 3])).numpy()[0, 0], -mean / std, rtol=1e-6
    )


# ----------------------------------------------------------------------------- sharding


def test_train_dataset_workers_see_disjoint_records_covering_all(
    raw: Path, prepared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The train split is one file, so two workers shard its records; each worker's epoch is
    its records once (train_example is replaced to return the image id)."""
    monkeypatch.setattr(coco_input, "train_example", lambda e, anchors, key: e["source_id"])
    files = _files(prepared, "train")
    assert len(files) == 1
    train_ids = sorted(a["image_id"] for a in _instances(raw, "train")["annotations"])
    train_ids = sorted(set(train_ids))
    seen = []
    for index in range(2):
        ds = coco_input.train_dataset(files, COCO_IDS, None, 1, seed=4, num_workers=2, index=index)
        count = len(train_ids) // 2 + (index < len(train_ids) % 2)
        seen.append([int(b[0]) for b in ds.take(count)])
        assert len(set(seen[-1])) == count  # one epoch: every record of the worker once
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == train_ids


def test_train_dataset_drops_images_without_boxes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coco_input, "train_example", lambda e, anchors, key: e["source_id"])
    _jpeg(tmp_path / "a.jpg", 20, 16)
    records = [
        ImageRecord(str(tmp_path / "a.jpg"), i, "a.jpg", 20, 16, boxes)
        for i, boxes in ((1, [_box(0.1, 0.1, 0.9, 0.9, 3)]), (2, []), (3, [_box(0, 0, 1, 1, 62)]))
    ]
    files = tfrecord.write_splits(tmp_path, [tfrecord.Split("t", records, 1)], encode)["t"]
    ds = coco_input.train_dataset(files, COCO_IDS, None, 1, seed=0)
    assert sorted(int(b[0]) for b in ds.take(4)) == [1, 1, 3, 3]  # two epochs, no image 2


# ----------------------------------------------------------------------------- datasets


def test_train_dataset_batches(prepared: Path) -> None:
    anchors = tf.constant(default_boxes())
    ds = coco_input.train_dataset(_files(prepared, "train"), COCO_IDS, anchors, 3, seed=1)
    lo = (0 - np.array(coco_input.MEAN)) / np.array(coco_input.STD)
    hi = (1 - np.array(coco_input.MEAN)) / np.array(coco_input.STD)
    for images, (classes, boxes, num_matched) in ds.take(3):
        assert images.shape == (3, 300, 300, 3) and images.dtype == tf.float32
        assert classes.shape == (3, NUM_BOXES) and classes.dtype == tf.int32
        assert boxes.shape == (3, NUM_BOXES, 4) and boxes.dtype == tf.float32
        assert num_matched.shape == (3,) and num_matched.dtype == tf.float32
        images, classes, boxes = images.numpy(), classes.numpy(), boxes.numpy()
        assert np.all(images >= lo - 1e-5) and np.all(images <= hi + 1e-5)
        assert classes.min() >= 0 and classes.max() <= len(COCO_IDS)
        positives = (classes > 0).sum(axis=1)
        assert np.all(positives > 0)  # every train image has boxes, each matches an anchor
        assert num_matched.numpy().tolist() == positives.tolist()
        assert np.all(np.isfinite(boxes))
        assert np.all(boxes[classes == 0] == 0)


def test_eval_dataset_yields_every_val_image_once(raw: Path, prepared: Path) -> None:
    images = _instances(raw, "val")["images"]
    sizes = {img["id"]: [img["height"], img["width"]] for img in images}
    ids = [img["id"] for img in images]
    batches = list(coco_input.eval_dataset(_files(prepared, "val"), COCO_IDS, 2))
    assert [len(b["source_id"]) for b in batches] == [2, 2, 1]  # the last batch is kept
    seen = [int(i) for b in batches for i in b["source_id"]]
    assert seen == ids[0::2] + ids[1::2]  # file order: val-00000 holds records 0, 2, 4
    for batch in batches:
        assert batch["image"].dtype == tf.float32
        assert batch["image"].shape[1:] == (300, 300, 3)
        for source_id, size in zip(batch["source_id"], batch["size"], strict=True):
            assert size.numpy().tolist() == sizes[int(source_id)]
    # The image is the JPEG resized to 300x300 (aspect not kept) and normalised.
    first = images[0]
    data = (raw / "val2017" / first["file_name"]).read_bytes()
    pixels = tf.io.decode_jpeg(data, channels=3).numpy().astype(np.float32) / 255
    assert pixels.shape[:2] == (first["height"], first["width"]) != (300, 300)
    expected = coco_input.normalise(tf.image.resize(pixels, [300, 300])).numpy()
    np.testing.assert_allclose(batches[0]["image"][0].numpy(), expected, atol=1e-5)


# ----------------------------------------------------------------------------- determinism


def _take(dataset: tf.data.Dataset, n: int) -> list[np.ndarray]:
    return [t.numpy() for batch in dataset.take(n) for t in tf.nest.flatten(batch)]


def test_the_same_seed_gives_the_same_train_batches(prepared: Path) -> None:
    """Augmentations are stateless, keyed by (seed, worker, element): the threads of the
    parallel maps and the order they finish in play no part. (The shuffles take the global
    seed too, which the engine sets from the seed and the epoch before each epoch's data.)"""
    anchors = tf.constant(default_boxes())
    files = _files(prepared, "train")

    def batches(seed: int) -> list[np.ndarray]:
        tf.random.set_seed(0)
        return _take(coco_input.train_dataset(files, COCO_IDS, anchors, 2, seed=seed), 4)

    first = batches(5)
    assert all(np.array_equal(a, b) for a, b in zip(first, batches(5), strict=True))
    images = [a for a in first if a.ndim == 4]
    other = [a for a in batches(6) if a.ndim == 4]
    assert not all(np.array_equal(a, b) for a, b in zip(images, other, strict=True))


def test_the_parallel_maps_hold_no_stateful_op(prepared: Path) -> None:
    """Under op determinism (train.deterministic) tf.data runs a parallel map holding a
    stateful op (a tf.lookup table, a legacy random op) serially; these hold none."""
    ds = coco_input.train_dataset(
        _files(prepared, "train"), COCO_IDS, tf.constant(default_boxes()), 2, seed=1
    )
    ops = stateful_ops(ds)
    assert [node for node in ops if parallel(node)]  # the interleave and the maps
    assert {node: found for node, found in ops.items() if found} == {}


def test_a_truncated_val_shard_is_named_before_evaluation(prepared: Path, tmp_path: Path) -> None:
    files = []
    for shard in _files(prepared, "val"):
        files.append(tmp_path / shard.name)
        files[-1].write_bytes(shard.read_bytes())
    files[1].write_bytes(files[1].read_bytes()[:-10])
    with pytest.raises(DataError) as err:
        coco_input.eval_dataset(files, COCO_IDS, 2)
    assert str(err.value).startswith(f"{files[1]}: truncated record at byte ")
    assert "`snakemake --forcerun prepare_dataset <target>`" in str(err.value)
