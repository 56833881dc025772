"""The Segmenter input pipeline on ADE20K TFRecords (tf.data), as Segmenter's ADE20K config
(mmseg 0.14.1) builds it.

Labels: the records hold the raw annotation PNG (0 = unlabelled, k = class k in 1..150).
`check_label` checks every decoded label's values (prepare checks them only with
verify_labels: it would decode each PNG a second time); a value above 150 stops training or
evaluation with one DataError naming the annotation (inputs.tf_data_checks).
`shift_labels` is the one place they become training labels (0 -> IGNORE_INDEX 255,
k -> k - 1: mmseg `reduce_zero_label`); both datasets below apply it right after decoding.

Train, per image in mmseg's order: keep-ratio random rescale (`Resize(img_scale=(4 * crop,
crop), ratio_range=scale)`: image bilinear, labels nearest), `RandomCrop(crop,
cat_max_ratio=0.75)`, `RandomFlip(0.5)`, `PhotoMetricDistortion` (brightness +-32, contrast
[0.5, 1.5] before or after the colour steps, saturation [0.5, 1.5], hue +-18 OpenCV units,
each with p 0.5), normalisation to [-1, 1] (x / 127.5 - 1: the ViT's mean = std = 0.5), then
`Pad(crop)` bottom-right with 0 in normalised units (mmseg pads after Normalize) and labels
IGNORE_INDEX. Records are sharded per worker (`shards.worker_records`), shuffled, repeated,
batched with drop_remainder and prefetched; no `cache()` (20k full-size images).
Every random draw is a stateless op keyed by (seed, worker, element index) (`shards.keyed`):
the same seed gives the same augmented batches, with the maps parallel.
Differences from mmseg: pixels stay float between the photometric steps (mmseg rounds to
uint8 after each), and the hue shift is drawn uniform, not as an integer.

Eval: every validation image once in file order, at its original size (the evaluator does the
keep-ratio resize and the sliding windows); a shard cut short is a DataError naming it before
the first image.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from accelpipe.core.keras2 import tf
from accelpipe.datasets import tfrecord
from accelpipe.datasets.ade20k_layout import IGNORE_INDEX, NUM_CLASSES
from accelpipe.inputs.shards import graph_only, keyed, worker_records
from accelpipe.inputs.tf_data_checks import check

SCALE_RANGE = (0.5, 2.0)
CAT_MAX_RATIO = 0.75
CROP_TRIES = 10  # mmseg: up to 10 crops are checked, then the 11th is kept unchecked
BRIGHTNESS_DELTA = 32.0  # pixel units (0..255)
CONTRAST_RANGE = (0.5, 1.5)
SATURATION_RANGE = (0.5, 1.5)
# mmseg adds +-18 to OpenCV's uint8 hue (0..179, i.e. 2 degrees a unit): +-36 degrees, a
# tenth of the hue circle, which is what tf.image.adjust_hue's delta measures.
HUE_DELTA = 18 / 180
SHUFFLE_RECORDS = 256  # serialized records (~100 KB each at full size)

_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string),
    "image/filename": tf.io.FixedLenFeature((), tf.string),
    "label/encoded": tf.io.FixedLenFeature((), tf.string),
}


def shift_labels(raw: tf.Tensor) -> tf.Tensor:
    """Raw annotation values -> int32 training labels: 0 -> IGNORE_INDEX, k -> k - 1."""
    raw = tf.cast(raw, tf.int32)
    return tf.where(raw == 0, tf.constant(IGNORE_INDEX, tf.int32), raw - 1)


def decode(record: tf.Tensor) -> dict[str, tf.Tensor]:
    """One record -> image uint8 [H,W,3], label uint8 [H,W] (raw values, not yet checked),
    filename, and `top`, the label's largest value, for `check_label`."""
    ex = tf.io.parse_single_example(record, _FEATURES)
    label = tf.io.decode_png(ex["label/encoded"], channels=1)[..., 0]
    return {
        "image": tf.io.decode_jpeg(ex["image/encoded"], channels=3),
        "label": label,
        "filename": ex["image/filename"],
        "top": tf.reduce_max(label),
    }


def check_label(example: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """A decoded example with its label checked to be <= NUM_CLASSES, `top` dropped.

    The check is a stateful op: under op determinism (train.deterministic) tf.data runs a
    map holding one serially, so the pipelines run it in a map of its own after the parallel
    decoding, where it costs one comparison an image."""
    filename, top = example["filename"], example["top"]
    annotation = tf.strings.regex_replace(filename, r"\.jpg$", ".png")
    valid = check(
        top <= NUM_CLASSES,
        annotation,
        " (annotation of ",
        filename,
        "): value ",
        tf.strings.as_string(top),
        f" is above the {NUM_CLASSES} classes (prepare with verify_labels checks every file)",
    )
    with tf.control_dependencies([valid]):
        return {
            "image": example["image"],
            "label": tf.identity(example["label"]),
            "filename": filename,
        }


def parse(record: tf.Tensor) -> dict[str, tf.Tensor]:
    """One record -> image uint8 [H,W,3], label uint8 [H,W] (raw values, checked), filename."""
    return check_label(decode(record))


# ----------------------------------------------------------------------------- augmentation
# Each random step takes `key`, a stateless seed (int [2]); `split_key` derives its parts.


def split_key(key: tf.Tensor, n: int) -> list[tf.Tensor]:
    """`n` independent stateless seeds from one."""
    return cast("list[tf.Tensor]", tf.unstack(tf.random.experimental.stateless_split(key, n)))


def rescale_size(height: tf.Tensor, width: tf.Tensor, ratio: tf.Tensor, crop: int) -> tf.Tensor:
    """[h, w] after mmseg's keep-ratio Resize to img_scale (4 * crop, crop) times `ratio`:
    the largest size whose long side fits int(4 * crop * ratio) and short side
    int(crop * ratio), rounded half up (mmcv.rescale_size)."""
    ratio = tf.cast(ratio, tf.float64)
    long_edge, short_edge = tf.floor(4 * crop * ratio), tf.floor(crop * ratio)
    size = tf.cast(tf.stack([height, width]), tf.float64)
    factor = tf.minimum(long_edge / tf.reduce_max(size), short_edge / tf.reduce_min(size))
    return tf.cast(tf.maximum(tf.floor(size * factor + 0.5), 1.0), tf.int32)


def random_rescale(
    image: tf.Tensor, label: tf.Tensor, crop: int, scale: Sequence[float], key: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Keep-ratio rescale by a ratio ~ U(scale): image bilinear (float), labels nearest."""
    ratio = tf.random.stateless_uniform([], key, scale[0], scale[1], dtype=tf.float64)
    size = rescale_size(tf.shape(image)[0], tf.shape(image)[1], ratio, crop)
    image = tf.image.resize(image, size, method="bilinear")
    label = tf.image.resize(label[..., None], size, method="nearest")[..., 0]
    return image, label


def crop_acceptable(window: tf.Tensor) -> tf.Tensor:
    """mmseg's cat_max_ratio test on a label window: more than one class besides ignore,
    and no class over CAT_MAX_RATIO of the non-ignored pixels."""
    valid = tf.boolean_mask(window, window != IGNORE_INDEX)
    counts = tf.math.bincount(valid, minlength=1)
    classes = tf.math.count_nonzero(counts)
    share = tf.math.divide_no_nan(
        tf.cast(tf.reduce_max(counts), tf.float32), tf.cast(tf.reduce_sum(counts), tf.float32)
    )
    return (classes > 1) & (share < CAT_MAX_RATIO)


def random_crop(
    image: tf.Tensor, label: tf.Tensor, crop: int, key: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """A crop x crop window (smaller where the image is), retried as mmseg's RandomCrop."""
    height, width = tf.shape(label)[0], tf.shape(label)[1]
    try_keys = tf.random.experimental.stateless_split(key, CROP_TRIES + 1)

    def offsets(i: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        top_key, left_key = split_key(tf.gather(try_keys, i), 2)
        top = tf.random.stateless_uniform(
            [], top_key, 0, tf.maximum(height - crop, 0) + 1, tf.int32
        )
        left = tf.random.stateless_uniform(
            [], left_key, 0, tf.maximum(width - crop, 0) + 1, tf.int32
        )
        return top, left

    def rejected(i: tf.Tensor, top: tf.Tensor, left: tf.Tensor) -> tf.Tensor:
        window = label[top : top + crop, left : left + crop]
        return (i < CROP_TRIES) & ~crop_acceptable(window)

    first = (tf.constant(0), *offsets(0))
    _, top, left = tf.while_loop(rejected, lambda i, *_: (i + 1, *offsets(i + 1)), first)
    window = (slice(top, top + crop), slice(left, left + crop))
    return image[window], label[window]


def random_flip(image: tf.Tensor, label: tf.Tensor, key: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    flip = tf.random.stateless_uniform([], key) < 0.5
    return cast(
        "tuple[tf.Tensor, tf.Tensor]",
        tf.cond(
            flip, lambda: (tf.reverse(image, [1]), tf.reverse(label, [1])), lambda: (image, label)
        ),
    )


def _maybe(
    step: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], image: tf.Tensor, key: tf.Tensor
) -> tf.Tensor:
    """`step(image, its key)` with p 0.5, else `image`."""
    coin, step_key = split_key(key, 2)
    applied = tf.random.stateless_uniform([], coin) < 0.5
    return tf.cond(applied, lambda: step(image, step_key), lambda: image)


def _brightness(image: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    delta = tf.random.stateless_uniform([], key, -BRIGHTNESS_DELTA, BRIGHTNESS_DELTA)
    return tf.clip_by_value(image + delta, 0.0, 255.0)


def _contrast(image: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    # mmseg's contrast scales the pixels (img * alpha), not the spread around the mean.
    alpha = tf.random.stateless_uniform([], key, *CONTRAST_RANGE)
    return tf.clip_by_value(image * alpha, 0.0, 255.0)


def _saturation(image: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    factor = tf.random.stateless_uniform([], key, *SATURATION_RANGE)
    return tf.image.adjust_saturation(image / 255.0, factor) * 255.0


def _hue(image: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    delta = tf.random.stateless_uniform([], key, -HUE_DELTA, HUE_DELTA)
    return tf.clip_by_value(tf.image.adjust_hue(image / 255.0, delta) * 255.0, 0.0, 255.0)


def photometric(image: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    """mmseg's PhotoMetricDistortion on float pixels 0..255 (each step with p 0.5)."""
    brightness, order, contrast, saturation, hue = split_key(key, 5)
    image = _maybe(_brightness, image, brightness)
    contrast_first = tf.random.stateless_uniform([], order) < 0.5
    image = tf.cond(contrast_first, lambda: _maybe(_contrast, image, contrast), lambda: image)
    image = _maybe(_hue, _maybe(_saturation, image, saturation), hue)
    return tf.cond(contrast_first, lambda: image, lambda: _maybe(_contrast, image, contrast))


def normalise(image: tf.Tensor) -> tf.Tensor:
    """Pixels 0..255 -> [-1, 1] (mean = std = 127.5, the ViT's normalisation)."""
    return tf.cast(image, tf.float32) / 127.5 - 1.0


def pad(image: tf.Tensor, label: tf.Tensor, crop: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Pad bottom and right to crop x crop: image 0 (normalised), labels IGNORE_INDEX."""
    rows, cols = crop - tf.shape(label)[0], crop - tf.shape(label)[1]
    image = tf.pad(image, [[0, rows], [0, cols], [0, 0]])
    label = tf.pad(label, [[0, rows], [0, cols]], constant_values=IGNORE_INDEX)
    image.set_shape([crop, crop, 3])
    label.set_shape([crop, crop])
    return image, label


def train_example(
    example: dict[str, tf.Tensor], crop: int, scale: Sequence[float], key: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """One parsed record -> (image float32 [crop,crop,3] in [-1,1], label int32 [crop,crop]);
    its augmentations drawn from the stateless seed `key`."""
    rescale_key, crop_key, flip_key, photometric_key = split_key(key, 4)
    image, label = tf.cast(example["image"], tf.float32), shift_labels(example["label"])
    image, label = random_rescale(image, label, crop, scale, rescale_key)
    image, label = random_flip(*random_crop(image, label, crop, crop_key), flip_key)
    return pad(normalise(photometric(image, photometric_key)), label, crop)


def eval_example(example: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {
        "image": example["image"],
        "label": shift_labels(example["label"]),
        "filename": example["filename"],
    }


# ----------------------------------------------------------------------------- datasets


def train_dataset(
    files: Sequence[Path],
    batch_size: int,
    crop: int,
    seed: int,
    num_workers: int = 1,
    index: int = 0,
    scale: Sequence[float] = SCALE_RANGE,
) -> tf.data.Dataset:
    """Endless batches of (images [B,crop,crop,3] float32, labels [B,crop,crop] int32) from
    this worker's share of the shards."""
    ds = worker_records(files, num_workers, index, seed)
    ds = keyed(ds.shuffle(SHUFFLE_RECORDS, seed=seed).repeat(), seed, index)
    ds = ds.map(graph_only(lambda key, r: (key, decode(r))), num_parallel_calls=tf.data.AUTOTUNE)
    # in order: one comparison (check_label)
    ds = ds.map(graph_only(lambda key, e: (key, check_label(e))))
    ds = ds.map(
        graph_only(lambda key, e: train_example(e, crop, tuple(scale), key)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def eval_dataset(files: Sequence[Path]) -> tf.data.Dataset:
    """Every image once, in file order, unbatched: {image uint8 [H,W,3], label int32 [H,W]
    (shifted), filename}."""
    files = sorted(files)
    tfrecord.check_shards(files)
    tfrecord.reading(files)
    ds = tf.data.TFRecordDataset([str(f) for f in files])
    ds = ds.map(graph_only(decode), num_parallel_calls=tf.data.AUTOTUNE).map(
        graph_only(check_label)
    )
    ds = ds.map(graph_only(eval_example), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)
