"""Tests for accelpipe.inputs.ade20k_input, the tf.data Segmenter input pipeline: the one
label shift, parsing, mmseg's keep-ratio rescale rule, the cat_max_ratio crop, padding,
photometric distortion, normalisation, worker sharding, and the train and eval datasets on a
small synthetic ADE20K prepared by ade20k.prepare."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from accelpipe.core.errors import DataError
from accelpipe.core.keras2 import tf
from accelpipe.datasets import ade20k, ade20k_layout
from accelpipe.datasets.ade20k_synthetic import CLASSES_USED, synthesize
from accelpipe.inputs import ade20k_input
from tests.helpers.tf_pipelines import parallel, stateful_ops

pytestmark = pytest.mark.tensorflow

# The synthetic classes after the shift, and ignore.
SHIFTED = {class_id - 1 for class_id, _colour, _texture in CLASSES_USED}  # {0, 2, 12, 86, 149}


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(tmp_path_factory.mktemp("ade") / "raw", 5, 3, (48, 36), seed=2)


@pytest.fixture(scope="module")
def prepared(raw: Path) -> Path:
    # One train file: fewer files than two workers, so they shard records.
    return ade20k.prepare(raw, raw.parent / "prepared", train_shards=1, val_shards=2)


def _files(prepared: Path, split: str) -> list[Path]:
    return sorted(prepared.glob(f"{split}-*.tfrecord"))


def _png(path: Path) -> np.ndarray:
    return np.array(Image.open(path))


KEY = tf.constant([3, 4], tf.int64)  # a stateless seed


def _key(seed: int) -> tf.Tensor:
    return tf.constant([11, seed], tf.int64)


def _example(label: np.ndarray, image: np.ndarray | None = None) -> dict[str, tf.Tensor]:
    """A parsed example (as `parse` returns) from arrays."""
    if image is None:
        image = np.full((*label.shape, 3), 100, np.uint8)
    return {"image": tf.constant(image), "label": tf.constant(label), "filename": tf.constant("x")}


# ----------------------------------------------------------------------------- labels, parse


def test_shift_labels_is_reduce_zero_label() -> None:
    raw = tf.constant([[0, 1, 2], [150, 149, 75]], tf.uint8)
    shifted = ade20k_input.shift_labels(raw)
    assert shifted.dtype == tf.int32
    assert shifted.numpy().tolist() == [[255, 0, 1], [149, 148, 74]]


def test_parse_decodes_the_files(raw: Path, prepared: Path) -> None:
    names = []
    for record in tf.data.TFRecordDataset([str(f) for f in _files(prepared, "val")]):
        out = ade20k_input.parse(record)
        name = out["filename"].numpy().decode()
        names.append(name)
        jpg = ade20k_layout.image_dir(raw, "val") / name
        png = ade20k_layout.annotation_dir(raw, "val") / name.replace(".jpg", ".png")
        assert out["image"].dtype == tf.uint8 and out["label"].dtype == tf.uint8
        expected = tf.io.decode_jpeg(jpg.read_bytes(), channels=3).numpy()
        assert np.array_equal(out["image"].numpy(), expected)
        assert np.array_equal(out["label"].numpy(), _png(png))  # raw values, not shifted
        assert out["label"].shape == out["image"].shape[:2]
    assert names == ["ADE_val_00000001.jpg", "ADE_val_00000003.jpg", "ADE_val_00000002.jpg"]


# ----------------------------------------------------------------------------- augmentation


@pytest.mark.parametrize(
    ("height", "width", "ratio", "crop", "expected"),
    [
        (480, 640, 1.0, 512, [512, 683]),  # short side to 512
        (480, 640, 0.5, 512, [256, 341]),
        (480, 640, 2.0, 512, [1024, 1365]),
        (100, 1000, 1.0, 512, [205, 2048]),  # long side capped at 4 * crop
        (36, 48, 0.5, 32, [16, 21]),
        (3, 2, 0.01, 8, [1, 1]),  # never below one pixel
    ],
)
def test_rescale_size_is_mmcv_keep_ratio(
    height: int, width: int, ratio: float, crop: int, expected: list[int]
) -> None:
    assert ade20k_input.rescale_size(height, width, ratio, crop).numpy().tolist() == expected


def test_random_rescale_labels_are_nearest_neighbour() -> None:
    rng = np.random.default_rng(0)
    label = rng.choice([0, 5, 7, 150], size=(30, 40)).astype(np.uint8)
    source = set(ade20k_input.shift_labels(label).numpy().ravel().tolist())
    image = rng.integers(0, 256, (30, 40, 3)).astype(np.float32)
    for ratio in (0.5, 0.9, 1.7):
        out_image, out_label = ade20k_input.random_rescale(
            tf.constant(image), ade20k_input.shift_labels(label), 64, (ratio, ratio), KEY
        )
        size = ade20k_input.rescale_size(30, 40, ratio, 64).numpy().tolist()
        assert out_image.shape == (*size, 3) and out_label.shape == tuple(size)
        assert set(np.unique(out_label.numpy()).tolist()) <= source  # nothing blended
        assert out_image.numpy().min() >= 0 and out_image.numpy().max() <= 255


@pytest.mark.parametrize(
    ("window", "acceptable"),
    [
        ([[1, 1], [1, 1]], False),  # one class
        ([[255, 255], [255, 3]], False),  # one class besides ignore
        ([[255, 255], [255, 255]], False),  # nothing but ignore
        ([[1, 1], [1, 2]], False),  # 3/4 is not below 0.75
        ([[1, 1], [2, 2]], True),
        ([[1, 1], [255, 2]], True),  # 2/3 of the non-ignored pixels
        ([[1, 2], [3, 4]], True),
    ],
)
def test_crop_acceptable_is_mmseg_cat_max_ratio(window: list, acceptable: bool) -> None:
    assert bool(ade20k_input.crop_acceptable(tf.constant(window, tf.int32))) is acceptable


def test_random_crop_keeps_image_and_label_aligned() -> None:
    """Image channel 0 = row, channel 1 = column; the label is their sum mod 150."""
    rows, cols = np.mgrid[:40, :50]
    image = np.stack([rows, cols, np.zeros_like(rows)], axis=-1).astype(np.float32)
    label = ((rows + cols) % 150).astype(np.int32)
    crop_fn = tf.function(ade20k_input.random_crop)
    for seed in range(10):
        out_image, out_label = (t.numpy() for t in crop_fn(image, label, 16, _key(seed)))
        assert out_image.shape == (16, 16, 3) and out_label.shape == (16, 16)
        top, left = int(out_image[0, 0, 0]), int(out_image[0, 0, 1])
        assert 0 <= top <= 24 and 0 <= left <= 34
        assert np.array_equal(out_image, image[top : top + 16, left : left + 16])
        assert np.array_equal(out_label, label[top : top + 16, left : left + 16])
    small_image, small_label = crop_fn(image[:10, :12], label[:10, :12], 16, KEY)
    assert small_image.shape == (10, 12, 3)  # the whole image: padding comes later
    assert np.array_equal(small_label.numpy(), label[:10, :12])


def test_random_crop_retries_towards_mixed_windows() -> None:
    """Columns 0..11 alternate classes 1 and 2, the rest is class 3: an 8x8 window is
    acceptable only if it starts left of column 10 (10 of the 17 offsets). mmseg retries up
    to 10 times, so (these keys) every crop is acceptable, where without retries about 40 %
    of them would not be."""
    cols = np.arange(24)
    label = np.tile(np.where(cols < 12, 1 + cols % 2, 3), (8, 1)).astype(np.int32)
    image = np.tile(cols[None, :, None], (8, 1, 3)).astype(np.float32)
    crop_fn = tf.function(ade20k_input.random_crop)
    lefts = [int(crop_fn(image, label, 8, _key(seed))[0][0, 0, 0]) for seed in range(40)]
    assert all(left < 10 for left in lefts)
    assert len(set(lefts)) > 3
    one_class = np.full((8, 24), 3, np.int32)  # nothing acceptable: still one crop
    assert crop_fn(image, one_class, 8, KEY)[1].shape == (8, 8)


def test_pad_is_zero_and_ignore_at_the_bottom_right() -> None:
    image = tf.fill([5, 7, 3], 0.5)
    label = tf.fill([5, 7], 4)
    out_image, out_label = (t.numpy() for t in ade20k_input.pad(image, label, 9))
    assert out_image.shape == (9, 9, 3) and out_label.shape == (9, 9)
    assert np.all(out_image[:5, :7] == 0.5) and np.all(out_label[:5, :7] == 4)
    assert np.all(out_image[5:] == 0) and np.all(out_image[:, 7:] == 0)
    assert np.all(out_label[5:] == 255) and np.all(out_label[:, 7:] == 255)


def test_normalise_maps_0_255_to_minus_1_1() -> None:
    out = ade20k_input.normalise(tf.constant([0, 127.5, 255, 51], tf.float32)).numpy()
    np.testing.assert_allclose(out, [-1.0, 0.0, 1.0, -0.6], atol=1e-6)
    assert ade20k_input.normalise(tf.constant([255], tf.uint8)).dtype == tf.float32


def test_contrast_scales_pixels_as_mmseg() -> None:
    out = ade20k_input._contrast(tf.constant([10.0, 100.0, 250.0]), KEY).numpy()
    alpha = out[0] / 10.0
    assert 0.5 <= alpha <= 1.5
    np.testing.assert_allclose(out, np.minimum([10 * alpha, 100 * alpha, 250 * alpha], 255))


def test_photometric_stays_in_range_and_keeps_grey_grey() -> None:
    grey = tf.fill([4, 4, 3], 100.0)
    colour = tf.constant(np.random.default_rng(0).uniform(0, 255, (6, 6, 3)), tf.float32)
    photometric = tf.function(ade20k_input.photometric)
    changed = 0
    for seed in range(30):
        out = photometric(grey, _key(seed)).numpy()
        # brightness +-32, then contrast 0.5..1.5; saturation and hue leave grey alone
        assert np.allclose(out, out[0, 0, 0], atol=1e-3)
        assert (100 - 32) * 0.5 - 1e-3 <= out[0, 0, 0] <= (100 + 32) * 1.5 + 1e-3
        out = photometric(colour, _key(seed)).numpy()
        assert out.min() >= 0 and out.max() <= 255
        changed += not np.allclose(out, colour.numpy(), atol=1e-3)
    assert changed >= 20  # each step with p 0.5: unchanged with p 1/16


def test_each_photometric_step_runs_with_p_half() -> None:
    maybe = tf.function(lambda x, key: ade20k_input._maybe(lambda y, _: y + 1.0, x, key))
    applied = sum(int(maybe(tf.constant(0.0), _key(seed))) for seed in range(200))
    assert 70 <= applied <= 130


# ----------------------------------------------------------------------------- datasets


def test_train_dataset_batches(prepared: Path) -> None:
    ds = ade20k_input.train_dataset(_files(prepared, "train"), 3, 32, seed=1)
    seen: set[int] = set()
    for images, labels in ds.take(4):
        assert images.shape == (3, 32, 32, 3) and images.dtype == tf.float32
        assert labels.shape == (3, 32, 32) and labels.dtype == tf.int32
        images, labels = images.numpy(), labels.numpy()
        assert images.min() >= -1.0 and images.max() <= 1.0
        seen |= set(np.unique(labels).tolist())
    assert seen <= SHIFTED | {255}  # valid shifted classes or ignore, nothing blended
    assert 255 in seen and len(seen & SHIFTED) >= 3


def test_small_image_is_padded_with_ignore(tmp_path: Path) -> None:
    """A 16x20 image at ratio 0.5 and crop 64 rescales to 32x40 (short side int(64 * 0.5)):
    the crop is the whole image, padded to 64x64 bottom-right."""
    label = np.zeros((16, 20), np.uint8)
    label[:8] = 150
    label[8:] = 1
    for seed in range(3):
        image, out = ade20k_input.train_example(_example(label), 64, (0.5, 0.5), _key(seed))
        image, out = image.numpy(), out.numpy()
        assert image.shape == (64, 64, 3) and out.shape == (64, 64)
        assert np.all(out[32:] == 255) and np.all(out[:, 40:] == 255)
        assert np.all(image[32:] == 0) and np.all(image[:, 40:] == 0)
        assert out[:16, :40].tolist() == [[149] * 40] * 16  # flips keep rows
        assert out[16:32, :40].tolist() == [[0] * 40] * 16


def test_unlabelled_pixels_become_ignore(tmp_path: Path) -> None:
    label = np.zeros((16, 20), np.uint8)
    label[:, :10] = 13
    _image, out = ade20k_input.train_example(_example(label), 32, (1.0, 1.0), KEY)
    assert set(np.unique(out.numpy()).tolist()) == {12, 255}


def test_train_dataset_workers_see_disjoint_records(
    raw: Path, prepared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One train file, two workers: each worker's epoch is every other record, once."""
    monkeypatch.setattr(ade20k_input, "train_example", lambda e, crop, scale, key: e["filename"])
    files = _files(prepared, "train")
    assert len(files) == 1
    names = sorted(p.name for p in ade20k_layout.image_dir(raw, "train").iterdir())
    seen = []
    for index in range(2):
        ds = ade20k_input.train_dataset(files, 1, 8, seed=4, num_workers=2, index=index)
        count = len(names[index::2])
        seen.append(sorted(b[0].numpy().decode() for b in ds.take(count)))
        assert seen[-1] == names[index::2]  # one epoch: each of its records once
    assert not set(seen[0]) & set(seen[1])


def test_eval_dataset_gives_every_image_at_its_original_size(raw: Path, prepared: Path) -> None:
    out = list(ade20k_input.eval_dataset(_files(prepared, "val")))
    names = [e["filename"].numpy().decode() for e in out]
    # File order: val-00000 holds images 1 and 3, val-00001 image 2.
    assert names == ["ADE_val_00000001.jpg", "ADE_val_00000003.jpg", "ADE_val_00000002.jpg"]
    for example, name in zip(out, names, strict=True):
        png = _png(ade20k_layout.annotation_dir(raw, "val") / name.replace(".jpg", ".png"))
        with Image.open(ade20k_layout.image_dir(raw, "val") / name) as jpg:
            assert example["image"].shape == (jpg.height, jpg.width, 3)
        assert example["image"].dtype == tf.uint8
        assert example["label"].dtype == tf.int32
        expected = np.where(png == 0, 255, png.astype(np.int32) - 1)
        assert np.array_equal(example["label"].numpy(), expected)


def test_png_decoding_matches_pil(tmp_path: Path) -> None:
    """TF reads the 8-bit grey PNG the converter accepts exactly as PIL writes it."""
    label = np.random.default_rng(1).integers(0, 151, (7, 9)).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(label).save(buf, format="PNG")
    decoded = tf.io.decode_png(buf.getvalue(), channels=1)[..., 0].numpy()
    assert np.array_equal(decoded, label)


# ----------------------------------------------------------------------------- determinism


def _take(dataset: tf.data.Dataset, n: int) -> list[np.ndarray]:
    return [t.numpy() for batch in dataset.take(n) for t in tf.nest.flatten(batch)]


def test_the_same_seed_gives_the_same_train_batches(prepared: Path) -> None:
    """Augmentations are stateless, keyed by (seed, worker, element): the threads of the
    parallel maps and the order they finish in play no part. (The shuffles take the global
    seed too, which the engine sets from the seed and the epoch before each epoch's data.)"""
    files = _files(prepared, "train")

    def batches(seed: int) -> list[np.ndarray]:
        tf.random.set_seed(0)
        return _take(ade20k_input.train_dataset(files, 2, 32, seed=seed), 4)

    first = batches(5)
    assert all(np.array_equal(a, b) for a, b in zip(first, batches(5), strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, batches(6), strict=True))


def test_only_the_label_check_is_stateful_and_it_runs_outside_the_parallel_maps(
    prepared: Path,
) -> None:
    """Under op determinism (train.deterministic) tf.data runs a parallel map holding a
    stateful op serially: the label check (an Assert) has a sequential map of its own."""
    for ds in (
        ade20k_input.train_dataset(_files(prepared, "train"), 2, 32, seed=1),
        ade20k_input.eval_dataset(_files(prepared, "val")),
    ):
        ops = stateful_ops(ds)
        assert [node for node in ops if parallel(node)]
        assert {node: found for node, found in ops.items() if found and parallel(node)} == {}
        assert [found for found in ops.values() if found] == [{"Assert"}]


def test_a_truncated_val_shard_is_named_before_evaluation(prepared: Path, tmp_path: Path) -> None:
    files = []
    for shard in _files(prepared, "val"):
        files.append(tmp_path / shard.name)
        files[-1].write_bytes(shard.read_bytes())
    files[0].write_bytes(files[0].read_bytes()[:100])
    with pytest.raises(DataError) as err:
        ade20k_input.eval_dataset(files)
    assert str(err.value).startswith(f"{files[0]}: truncated record at byte 0: ")
    assert "`snakemake --forcerun prepare_dataset <target>`" in str(err.value)
