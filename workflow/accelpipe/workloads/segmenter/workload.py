"""ViT Segmenter on ADE20K: wires the TFRecords, the ViT encoder with its linear or mask
transformer decoder, the pixel cross-entropy and mmseg's mIoU to the TensorFlow engine.

Recipe as Segmenter (rstrudel/segmenter, not the hackathon's adaptation): Nesterov SGD,
momentum 0.9, no weight decay, poly decay (power 0.9) from lr to min_lr over every step,
logits upsampled and scored by cross-entropy with label 255 ignored. Labels are shifted
once, in the input pipeline (inputs.ade20k_input): raw 0 -> 255, k -> k - 1.

Evaluation as Segmenter's single-scale numbers: each validation image resized keep-ratio
to `evaluate.short_side`, sliding windows of the training size (stride = window on
ADE20K), overlapping logits averaged, resized to the original size, argmax (in bands of
rows, so a large image never holds its full-size logits); mIoU, mean
accuracy and pixel accuracy accumulated over the whole set (metrics.SegmentationCounts).
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from accelpipe.config.settings import TrainSlice, view
from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.io import read_json, write_json
from accelpipe.core.keras2 import keras, tf
from accelpipe.datasets.ade20k_layout import CLASS_NAMES, IGNORE_INDEX, NUM_CLASSES
from accelpipe.devices.tf_device import TFDevice
from accelpipe.engines import tf_trainer
from accelpipe.engines.evaluations import InTrainingEval, in_training_eval
from accelpipe.engines.tf_trainer import TFTrainJob
from accelpipe.inputs.ade20k_input import eval_dataset, normalise, train_dataset
from accelpipe.inputs.tf_data_checks import checked
from accelpipe.launch.tf_launch import InputShard
from accelpipe.models import segmenter, vit_npz
from accelpipe.models.metrics import SegmentationCounts
from accelpipe.models.segmentation_loss import segmentation_loss
from accelpipe.models.ssd_loss import l2_loss
from accelpipe.workloads.segmenter.declaration import (
    SegmenterEvaluate,
    SegmenterModel,
    SegmenterTrain,
)

log = logging.getLogger(__name__)
# architecture facts the train stage records and evaluation rebuilds the model from
_ARCHITECTURE_KEYS = ("encoder", "decoder", "image_size", "drop_path", "dropout", "decoder_dropout")


def _shards(prepared: Path, split: str) -> list[Path]:
    files = sorted(prepared.glob(f"{split}-*.tfrecord"))
    if not files:
        raise DataError(f"{prepared}: no {split}-*.tfrecord shards (run prepare)")
    return files


def _build(architecture: dict[str, Any]) -> keras.Model:
    return segmenter.build_segmenter(
        num_classes=architecture["classes"],
        image_size=architecture["image_size"],
        encoder=architecture["encoder"],
        decoder=architecture["decoder"],
        dropout=architecture["dropout"],
        drop_path=architecture["drop_path"],
        decoder_dropout=architecture["decoder_dropout"],
    )


def _pretrained(
    model: keras.Model, model_cfg: SegmenterModel, weights: Path | None
) -> dict[str, Any] | None:
    """The encoder's starting weights: the weights stage's folder where the run names a
    source (its rule passes it), else random init; facts for stage.json."""
    if model_cfg.pretrained == "none":
        return None
    if weights is None:
        raise ConfigError(
            f"segmenter.model.pretrained is {model_cfg.pretrained}, but no converted weights "
            "were given (the train rule passes the weights stage's folder; by hand: --weights)"
        )
    return {"source": model_cfg.pretrained, **vit_npz.load_converted(model, weights)}


def train(
    prepared: Path, run: str, cfg: TrainSlice, work_dir: Path, weights: Path | None = None
) -> dict[str, Any] | None:
    files = _shards(prepared, "train")
    splits = read_json(prepared / "dataset.json")["splits"]  # read once: train and eval
    train_images = splits["train"]["images"]
    model_cfg = cfg["model"]
    architecture = {"classes": NUM_CLASSES} | {k: model_cfg[k] for k in _ARCHITECTURE_KEYS}

    def make_job(train_cfg: SegmenterTrain, device: TFDevice) -> TFTrainJob:
        batch = train_cfg.batch_size
        steps = train_cfg.steps_per_epoch or math.ceil(train_images / batch)
        model = _build(architecture)
        model_view = view(SegmenterModel, model_cfg, where="segmenter.model")
        pretrained = _pretrained(model, model_view, weights)
        schedule = keras.optimizers.schedules.PolynomialDecay(
            train_cfg.lr,
            decay_steps=train_cfg.epochs * steps,
            end_learning_rate=train_cfg.min_lr,
            power=train_cfg.poly_power,
        )
        optimizer = keras.optimizers.SGD(
            schedule, momentum=train_cfg.momentum, nesterov=train_cfg.nesterov
        )
        decayed = _decayed_variables(model)

        def epoch_batches(epoch: int, shard: InputShard) -> tf.data.Dataset:
            return train_dataset(
                files,
                shard.batch_size,
                crop=architecture["image_size"],
                seed=train_cfg.seed * 1000 + epoch,
                num_workers=shard.num_workers,
                index=shard.index,
                scale=train_cfg.scale_range,
            )

        return TFTrainJob(
            model=model,
            optimizer=optimizer,
            loss_fn=lambda logits, labels: segmentation_loss(logits, labels, IGNORE_INDEX),
            dataset=epoch_batches,
            steps_per_epoch=steps,
            batch_size=batch,
            regularization=(
                (lambda: train_cfg.weight_decay * l2_loss(decayed))
                if train_cfg.weight_decay
                else None
            ),
            facts={
                "architecture": architecture,
                "train_images": train_images,
                "pretrained": pretrained,
            },
            evaluation=_in_training(cfg, train_cfg, prepared, splits, architecture["image_size"]),
        )

    return tf_trainer.run_training(cfg, cfg.train_as(SegmenterTrain), work_dir, make_job)


def _decayed_variables(model: keras.Model) -> list[tf.Variable]:
    """Weights under the (optional) coupled L2: all but embeddings, norms and biases."""
    skip = {id(v) for v in segmenter.no_decay_variables(model)}
    return [v for v in model.trainable_variables if id(v) not in skip]


# ----------------------------------------------------------------------------- evaluation


def window_anchors(length: int, window: int, stride: int) -> list[int]:
    """Segmenter's window starts along one axis: every stride while a window fits before the
    end, then one flush with the end (it overlaps the one before)."""
    if length <= window:
        return [0]
    return [a for a in range(0, length, stride) if a < length - window] + [length - window]


def _windows(image: np.ndarray, window: int, stride: int) -> Iterator[tuple[int, int]]:
    height, width = image.shape[:2]
    for top in window_anchors(height, window, stride):
        for left in window_anchors(width, window, stride):
            yield top, left


def sliding_window_logits(
    model: keras.Model, image: np.ndarray, window: int, stride: int, batch_size: int
) -> np.ndarray:
    """Averaged logits (H, W, C) of a normalised image (H, W, 3) at least `window` high and
    wide, from windows of `window` pixels every `stride`."""
    height, width = image.shape[:2]
    total = np.zeros((height, width, NUM_CLASSES), np.float32)
    count = np.zeros((height, width, 1), np.float32)
    spots = list(_windows(image, window, stride))
    for first in range(0, len(spots), batch_size):
        chunk = spots[first : first + batch_size]
        crops = np.stack([image[t : t + window, c : c + window] for t, c in chunk])
        logits = model(crops, training=False).numpy()
        for (top, left), part in zip(chunk, logits, strict=True):
            total[top : top + window, left : left + window] += part
            count[top : top + window, left : left + window] += 1
    return total / count


def predict(
    model: keras.Model, image: np.ndarray, window: int, short_side: int, stride: int, batch: int
) -> np.ndarray:
    """Class map (H, W) of a uint8 image at its original size (Segmenter's single scale)."""
    height, width = image.shape[:2]
    scale = short_side / min(height, width)
    resized = (max(1, round(height * scale)), max(1, round(width * scale)))
    x = normalise(tf.image.resize(tf.cast(image, tf.float32), resized, "bilinear")).numpy()
    # images narrower than a window are padded (zeros = mid-grey after normalisation)
    padded = np.zeros((max(resized[0], window), max(resized[1], window), 3), np.float32)
    padded[: resized[0], : resized[1]] = x
    logits = sliding_window_logits(model, padded, window, stride, batch)
    return resize_argmax(logits[: resized[0], : resized[1]], (height, width))


# Bytes of resized logits one band holds: ~32 MiB, whatever the image size (the whole
# resized map of a 4000x3000 image would be 7.2 GB at 150 classes).
_BAND_BYTES = 32 << 20


def _bilinear_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output index, the two input indices and the weight of the upper one, exactly as
    TF's ResizeBilinear with half_pixel_centers (what tf.image.resize(..., "bilinear") runs,
    antialias off): float32 `(i + 0.5) * (in / out) - 0.5`, lower = floor clamped at 0,
    upper = ceil clamped at in - 1, lerp = in - floor(in)."""
    scale = np.float32(in_size) / np.float32(out_size)
    centre = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    floor = np.floor(centre)
    lower = np.maximum(floor.astype(np.int64), 0)
    upper = np.minimum(np.ceil(centre).astype(np.int64), in_size - 1)
    return lower, upper, (centre - floor).astype(np.float32)


def resized_rows(logits: np.ndarray, size: tuple[int, int], start: int, stop: int) -> np.ndarray:
    """Rows `start:stop` of `tf.image.resize(logits, size, "bilinear")` (float32, bit for bit
    on CPU), computed from the only input rows they read: (stop - start, width, C).

    As the TF kernel: each input row is first interpolated along x (top_left + (top_right -
    top_left) * x_lerp), then each output row is top + (bottom - top) * y_lerp. Nothing
    bigger than two bands' worth of rows is ever made."""
    y_lower, y_upper, y_lerp = _bilinear_taps(logits.shape[0], size[0])
    x_lower, x_upper, x_lerp = _bilinear_taps(logits.shape[1], size[1])
    lower, upper = y_lower[start:stop], y_upper[start:stop]
    sources = np.unique(np.concatenate([lower, upper]))  # at most 2 x (stop - start) rows
    along_x = logits[np.ix_(sources, x_upper)].astype(np.float32, copy=False)
    left = logits[np.ix_(sources, x_lower)]
    along_x -= left
    along_x *= x_lerp[None, :, None]
    along_x += left
    del left
    top = along_x[np.searchsorted(sources, lower)]
    band: npt.NDArray[np.float32] = along_x[np.searchsorted(sources, upper)]
    del along_x
    band -= top
    band *= y_lerp[start:stop, None, None]
    band += top
    return band


def resize_argmax(
    logits: np.ndarray, size: tuple[int, int], band_rows: int | None = None
) -> np.ndarray:
    """argmax over classes of `logits` (h, w, C) resized bilinearly to `size` (H, W): the
    same int32 class map as `tf.argmax(tf.image.resize(logits, size, "bilinear"), -1)`,
    made `band_rows` output rows at a time (default: ~_BAND_BYTES of logits per band), so
    memory grows with the image's width, never with its area."""
    height, width = size
    classes = logits.shape[-1]
    if band_rows is None:
        band_rows = max(1, _BAND_BYTES // (width * classes * 4))
    classes_map = np.empty((height, width), np.int32)
    for start in range(0, height, band_rows):
        stop = min(start + band_rows, height)
        classes_map[start:stop] = np.argmax(resized_rows(logits, size, start, stop), axis=-1)
    return classes_map


def evaluate(
    prepared: Path, run: str, cfg: dict[str, Any], model_dir: Path, out_dir: Path
) -> dict[str, Any]:
    """mIoU, mean accuracy and pixel accuracy over the validation set.

    Writes metrics.json, per_class_iou.csv and `evaluate.prediction_images` colourised
    predictions (prediction_<image>.png: image | ground truth | prediction).
    """
    ev = view(SegmenterEvaluate, cfg["evaluate"], where="segmenter.evaluate")
    architecture = read_json(model_dir / "stage.json")["architecture"]
    model, _ = tf_trainer.load_for_eval(
        model_dir, cfg, lambda: _build(architecture | {"drop_path": 0.0})
    )
    out_dir.mkdir(parents=True, exist_ok=True)

    def keep(index: int, name: str, image: np.ndarray, label: np.ndarray, pred: np.ndarray) -> None:
        if index < ev.prediction_images:
            _write_prediction(out_dir / f"prediction_{Path(name).stem}.png", image, label, pred)

    metrics, counts = _scores(model, prepared, ev, architecture["image_size"], keep)
    write_json(out_dir / "metrics.json", metrics)
    _write_per_class(out_dir / "per_class_iou.csv", counts)
    log.info("mIoU %.4f, pixel accuracy %.4f", metrics["mIoU"] or 0, metrics["pixel_accuracy"] or 0)
    return metrics


def _scores(
    model: keras.Model,
    prepared: Path,
    ev: SegmenterEvaluate,
    window: int,
    keep: Callable[[int, str, np.ndarray, np.ndarray, np.ndarray], None] | None = None,
) -> tuple[dict[str, Any], SegmentationCounts]:
    """mIoU, mean accuracy and pixel accuracy of `model` over the validation set, and the
    counts behind them: the evaluate stage's scoring, and the train stage's inside training.
    `keep(index, filename, image, label, prediction)` sees each image's prediction."""
    stride = ev.stride or window
    counts = SegmentationCounts(NUM_CLASSES, IGNORE_INDEX)
    images = 0
    for example in checked(eval_dataset(_shards(prepared, "val"))):
        image, label = example["image"].numpy(), example["label"].numpy()
        pred = predict(model, image, window, ev.short_side, stride, ev.batch_size)
        counts.update(pred, label)
        if keep is not None:
            keep(images, example["filename"].numpy().decode(), image, label, pred)
        images += 1
    metrics = {
        **{k: _finite(v) for k, v in counts.summary().items()},
        "images": images,
        "classes_scored": int(np.sum(~np.isnan(counts.per_class()["iou"]))),
        "note": (
            "mmseg mean_iou over the whole val set, single scale (short side "
            f"{ev.short_side}, windows {window} stride {stride}), fractions 0..1"
        ),
    }
    return metrics, counts


def _in_training(
    cfg: TrainSlice, train_cfg: SegmenterTrain, prepared: Path, splits: dict[str, Any], window: int
) -> InTrainingEval | None:
    """The run's evaluations inside training (train.eval_every), scored as `evaluate` does."""

    return in_training_eval(
        "segmenter",
        cfg,
        train_cfg,
        SegmenterEvaluate,
        lambda model, ev: _scores(model, prepared, ev, window)[0],
        lambda: (splits["train"]["images"], splits["val"]["images"]),
    )


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


def _write_per_class(path: Path, counts: SegmentationCounts) -> None:
    per_class = counts.per_class()
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["class", "name", "IoU", "accuracy", "label_pixels", "predicted_pixels"])
        for k in range(NUM_CLASSES):
            writer.writerow(
                [
                    k,
                    CLASS_NAMES[k],
                    _finite(float(per_class["iou"][k])),
                    _finite(float(per_class["accuracy"][k])),
                    int(counts.label_area[k]),
                    int(counts.pred_area[k]),
                ]
            )


def palette() -> np.ndarray:
    """A fixed colour per class (C, 3) and black for ignored pixels (last row)."""
    colours = np.random.default_rng(150).integers(40, 256, (NUM_CLASSES, 3), dtype=np.uint8)
    return np.concatenate([colours, np.zeros((1, 3), np.uint8)])


def _colourise(classes: np.ndarray) -> np.ndarray:
    index = np.where(classes == IGNORE_INDEX, NUM_CLASSES, classes)
    return palette()[index]


def _write_prediction(path: Path, image: np.ndarray, label: np.ndarray, pred: np.ndarray) -> None:
    from PIL import Image

    strip = np.concatenate([image, _colourise(label), _colourise(pred)], axis=1)
    Image.fromarray(strip.astype(np.uint8)).save(path)
