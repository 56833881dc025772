"""The SSD input pipeline on COCO TFRecords (tf.data), as the reference reads them.

Train: shard files per worker, shuffle files, interleave TFRecord readers, parse, drop images
without boxes, shuffle, repeat, then per image the SSD random crop, a horizontal flip,
colour jitter (brightness, contrast, saturation, hue, always, in that order), ImageNet
normalisation and the anchor matching (models.ssd_boxes.encode_labels), batch, prefetch.
No `cache()`: the reference caches only when the whole set fits in host RAM (~90 GB).
Every random draw is a stateless op keyed by (seed, worker, element index)
(`shards.keyed`): the same seed gives the same augmented batches, with the maps parallel.
Eval: resize to 300x300 without keeping the aspect ratio, normalise, keep the image id and
its original size for mapping detections back; a shard cut short is a DataError naming it
before the first image.

Class ids: the records hold COCO's ids (1..90, with gaps); the model trains on contiguous
1..N (0 is background) in the order of the sorted COCO ids, which `class_table` maps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np

from accelpipe.core.keras2 import tf
from accelpipe.datasets import tfrecord
from accelpipe.inputs.shards import graph_only, keyed, worker_records
from accelpipe.models.ssd_boxes import encode_labels

IMAGE_SIZE = 300
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# The SSD crop: each pass either keeps the image (1 in 7) or asks for a crop whose IoU with
# every ground-truth box exceeds one of these, trying 50 candidates at once.
_MIN_IOUS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9)
_CANDIDATES = 50
_MAX_PASSES = 32  # then keep the image: a pass keeps it with p = 1/7 anyway

_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string),
    "image/source_id": tf.io.FixedLenFeature((), tf.string),
    "image/height": tf.io.FixedLenFeature((), tf.int64),
    "image/width": tf.io.FixedLenFeature((), tf.int64),
    **{
        f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32)
        for k in ("ymin", "xmin", "ymax", "xmax")
    },
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
}


class ClassTable:
    """COCO category id -> contiguous label 1..N (sorted ids); unknown ids -> -1.

    A gather from a dense vector indexed by id, not a tf.lookup table: a table lookup is a
    stateful op, and under op determinism (train.deterministic) tf.data runs a pipeline
    holding one serially, every parallel map, interleave and prefetch of it."""

    def __init__(self, coco_ids: Sequence[int]) -> None:
        ids = sorted(coco_ids)
        dense = np.full(max(ids, default=0) + 2, -1, np.int64)  # the last: unknown ids
        dense[ids] = np.arange(1, len(ids) + 1)
        self.dense = tf.constant(dense)

    def lookup(self, keys: tf.Tensor) -> tf.Tensor:
        unknown = tf.cast(tf.shape(self.dense)[0] - 1, keys.dtype)
        return tf.gather(self.dense, tf.where((keys >= 0) & (keys < unknown), keys, unknown))


def class_table(coco_ids: Sequence[int]) -> ClassTable:
    """COCO category id -> contiguous label 1..N (sorted ids); unknown ids -> -1."""
    return ClassTable(coco_ids)


def parse(record: tf.Tensor, table: ClassTable) -> dict[str, tf.Tensor]:
    """One tf.Example: JPEG bytes, id, size, boxes [N,4] (ymin, xmin, ymax, xmax), labels [N]."""
    ex = tf.io.parse_single_example(record, _FEATURES)
    coords = [
        tf.sparse.to_dense(ex[f"image/object/bbox/{k}"]) for k in ("ymin", "xmin", "ymax", "xmax")
    ]
    labels = table.lookup(tf.sparse.to_dense(ex["image/object/class/label"]))
    return {
        "jpeg": ex["image/encoded"],
        "source_id": tf.strings.to_number(ex["image/source_id"], tf.int64),
        "size": tf.stack([ex["image/height"], ex["image/width"]]),
        "boxes": tf.stack(coords, axis=1),
        "labels": tf.cast(labels, tf.int32),
    }


def _area(boxes: tf.Tensor) -> tf.Tensor:
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def _iou(crops: tf.Tensor, boxes: tf.Tensor) -> tf.Tensor:
    """IoU of every crop [C,4] with every box [G,4] -> [C,G]."""
    lo = tf.maximum(crops[:, None, :2], boxes[None, :, :2])
    hi = tf.minimum(crops[:, None, 2:], boxes[None, :, 2:])
    inter = tf.reduce_prod(tf.maximum(hi - lo, 0.0), axis=-1)
    return inter / (_area(crops)[:, None] + _area(boxes)[None, :] - inter)


def _centres_inside(crops: tf.Tensor, boxes: tf.Tensor) -> tf.Tensor:
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2  # [G,2] (cy, cx)
    return tf.reduce_all(
        (centres[None] > crops[:, None, :2]) & (centres[None] < crops[:, None, 2:]), axis=-1
    )


def split_key(key: tf.Tensor, n: int) -> list[tf.Tensor]:
    """`n` independent stateless seeds from one."""
    return cast("list[tf.Tensor]", tf.unstack(tf.random.experimental.stateless_split(key, n)))


def _one_pass(boxes: tf.Tensor, key: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One pass of the SSD crop: (accepted?, crop [ymin, xmin, ymax, xmax])."""
    choice_key, size_key, origin_key = split_key(key, 3)
    choice = tf.random.stateless_uniform([], choice_key, 0, len(_MIN_IOUS) + 1, dtype=tf.int32)
    whole = tf.constant([0.0, 0.0, 1.0, 1.0])
    if_kept = (tf.constant(True), whole)

    def try_crops() -> tuple[tf.Tensor, tf.Tensor]:
        min_iou = tf.gather(_MIN_IOUS, choice)
        hw = tf.random.stateless_uniform([_CANDIDATES, 2], size_key, 0.3, 1.0)
        origin = tf.random.stateless_uniform([_CANDIDATES, 2], origin_key) * (1.0 - hw)
        crops = tf.concat([origin, origin + hw], axis=1)
        aspect = hw[:, 0] / hw[:, 1]
        valid = (
            (aspect > 0.5)
            & (aspect < 2.0)
            & tf.reduce_all(_iou(crops, boxes) > min_iou, axis=1)
            & tf.reduce_any(_centres_inside(crops, boxes), axis=1)
        )
        first = tf.argmax(tf.cast(valid, tf.int32))
        return tf.reduce_any(valid), tf.gather(crops, first)

    return cast(
        "tuple[tf.Tensor, tf.Tensor]",
        tf.cond(choice == len(_MIN_IOUS), lambda: if_kept, try_crops),
    )


def ssd_crop(
    image: tf.Tensor, boxes: tf.Tensor, labels: tf.Tensor, key: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The IoU-biased random crop, resized to 300x300; boxes whose centre leaves the crop
    are dropped, the rest clipped and re-normalised to it. `key`: the stateless seed."""
    pass_keys = tf.random.experimental.stateless_split(key, _MAX_PASSES)

    def cond(i: tf.Tensor, done: tf.Tensor, crop: tf.Tensor) -> tf.Tensor:
        return (i < _MAX_PASSES) & ~done

    def body(
        i: tf.Tensor, done: tf.Tensor, crop: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        accepted, candidate = _one_pass(boxes, tf.gather(pass_keys, i))
        return i + 1, accepted, candidate

    start = (tf.constant(0), tf.constant(False), tf.constant([0.0, 0.0, 1.0, 1.0]))
    _, done, crop = tf.while_loop(cond, body, start)
    crop = tf.where(done, crop, tf.constant([0.0, 0.0, 1.0, 1.0]))
    keep = _centres_inside(crop[None], boxes)[0]
    boxes, labels = tf.boolean_mask(boxes, keep), tf.boolean_mask(labels, keep)
    size = tf.concat([crop[2:] - crop[:2]] * 2, axis=0)
    boxes = tf.clip_by_value((boxes - tf.concat([crop[:2]] * 2, axis=0)) / size, 0.0, 1.0)
    image = tf.image.crop_and_resize(image[None], crop[None], [0], [IMAGE_SIZE, IMAGE_SIZE])[0]
    return image, boxes, labels


def _flip(image: tf.Tensor, boxes: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    flipped = tf.stack([boxes[:, 0], 1.0 - boxes[:, 3], boxes[:, 2], 1.0 - boxes[:, 1]], axis=1)
    return tf.image.flip_left_right(image), flipped


def _colour(image: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    brightness, contrast, saturation, hue = split_key(key, 4)
    image = tf.image.stateless_random_brightness(image, 0.125, brightness)
    image = tf.image.stateless_random_contrast(image, 0.5, 1.5, contrast)
    image = tf.image.stateless_random_saturation(image, 0.5, 1.5, saturation)
    image = tf.image.stateless_random_hue(image, 0.05, hue)
    return tf.clip_by_value(image, 0.0, 1.0)


def normalise(image: tf.Tensor) -> tf.Tensor:
    """[0,1] RGB -> ImageNet mean/std, as the backbone was trained."""
    return (image - MEAN) * (1.0 / tf.constant(STD))


def train_example(
    example: dict[str, tf.Tensor], anchors: tf.Tensor, key: tf.Tensor
) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
    """One training image -> (image [300,300,3], (classes [A], boxes [A,4], num_matched));
    its augmentations drawn from the stateless seed `key`."""
    crop_key, flip_key, colour_key = split_key(key, 3)
    image = tf.image.convert_image_dtype(tf.io.decode_jpeg(example["jpeg"], channels=3), tf.float32)
    image, boxes, labels = ssd_crop(image, example["boxes"], example["labels"], crop_key)
    flip = tf.random.stateless_uniform([], flip_key) < 0.5
    image, boxes = tf.cond(flip, lambda: _flip(image, boxes), lambda: (image, boxes))
    image = normalise(_colour(image, colour_key))
    image.set_shape([IMAGE_SIZE, IMAGE_SIZE, 3])
    return image, encode_labels(boxes, labels, anchors)


def eval_example(example: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    image = tf.image.convert_image_dtype(tf.io.decode_jpeg(example["jpeg"], channels=3), tf.float32)
    image = tf.image.resize(image, [IMAGE_SIZE, IMAGE_SIZE])  # the reference's aspect-free resize
    return {"image": normalise(image), "source_id": example["source_id"], "size": example["size"]}


def train_dataset(
    files: Sequence[Path],
    coco_ids: Sequence[int],
    anchors: tf.Tensor,
    batch_size: int,
    seed: int,
    num_workers: int = 1,
    index: int = 0,
) -> tf.data.Dataset:
    """Endless batches of (images, (classes, boxes, num_matched)) for this worker's shards."""
    table = class_table(coco_ids)
    ds = worker_records(files, num_workers, index, seed)
    ds = ds.map(graph_only(lambda r: parse(r, table)), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.filter(graph_only(lambda e: tf.shape(e["labels"])[0] > 0))
    ds = keyed(ds.shuffle(64, seed=seed).repeat(), seed, index)
    ds = ds.map(
        graph_only(lambda key, e: train_example(e, anchors, key)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def eval_dataset(
    files: Sequence[Path], coco_ids: Sequence[int], batch_size: int
) -> tf.data.Dataset:
    """Every validation image once, in file order."""
    files = sorted(files)
    tfrecord.check_shards(files)
    tfrecord.reading(files)
    table = class_table(coco_ids)
    ds = tf.data.TFRecordDataset([str(f) for f in files])
    ds = ds.map(
        graph_only(lambda r: eval_example(parse(r, table))), num_parallel_calls=tf.data.AUTOTUNE
    )
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
