"""SSD300 with a ResNet-34 backbone on COCO 2017: wires the TFRecords, the model, the SSD
loss and pycocotools' COCOeval to the TensorFlow engine.

Recipe as the reference (MLPerf v0.6 / Habana): SGD momentum 0.9, lr = base_lr x
global_batch / 32 with a linear warmup, x1.01 until epoch `cosine_begin`, then a cosine to
0.01 at `cosine_end`; a coupled L2 term (weight_decay x sum v^2 / 2 over every non-BN
variable, biases included) added to the loss for the gradients only; the stem and the first
block's first conv and BN frozen.
"""

from __future__ import annotations

import csv
import functools
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from accelpipe.config.settings import TrainSlice, view
from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.io import read_json, write_json
from accelpipe.core.keras2 import keras, tf
from accelpipe.devices.tf_device import TFDevice
from accelpipe.engines import tf_trainer
from accelpipe.engines.evaluations import InTrainingEval, in_training_eval
from accelpipe.engines.tf_trainer import TFTrainJob
from accelpipe.inputs.coco_input import eval_dataset, train_dataset
from accelpipe.inputs.tf_data_checks import checked
from accelpipe.launch.tf_launch import InputShard
from accelpipe.models import ssd_resnet34
from accelpipe.models.ssd_boxes import default_boxes
from accelpipe.models.ssd_loss import l2_loss, ssd_loss
from accelpipe.models.ssd_postprocess import decode_detections
from accelpipe.workloads.ssd.declaration import SSDEvaluate, SSDModel, SSDTrain

log = logging.getLogger(__name__)
_COCO_STATS = ("AP", "AP50", "AP75", "APs", "APm", "APl")


# keras (tf_keras) has no type information, so its base class is Any
class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[misc]
    """The reference's SSD schedule, in epochs of `steps_per_epoch` steps."""

    def __init__(
        self, peak: float, steps_per_epoch: int, warmup: float, cos_begin: float, cos_end: float
    ) -> None:
        self.peak, self.steps_per_epoch = peak, steps_per_epoch
        self.warmup, self.cos_begin, self.cos_end = warmup, cos_begin, cos_end

    def __call__(self, step: Any) -> tf.Tensor:
        epoch = tf.cast(step, tf.float32) / self.steps_per_epoch
        warm = tf.minimum(1.0, epoch / self.warmup) if self.warmup > 0 else tf.constant(1.0)
        progress = (epoch - self.cos_begin) / (self.cos_end - self.cos_begin)
        cosine = 0.5 * (1.0 + tf.cos(math.pi * tf.clip_by_value(progress, 0.0, 1.0))) + 0.01
        mul = tf.where(epoch < self.cos_begin, warm * 1.01, cosine)
        return self.peak * mul

    def get_config(self) -> dict[str, Any]:
        return vars(self).copy()


def _shards(prepared: Path, split: str) -> list[Path]:
    files = sorted(prepared.glob(f"{split}-*.tfrecord"))
    if not files:
        raise DataError(f"{prepared}: no {split}-*.tfrecord shards (run prepare)")
    return files


def _categories(prepared: Path) -> list[dict[str, Any]]:
    """COCO categories of the prepared set (id, name), sorted by id: label k is the k-th."""
    meta = read_json(prepared / "dataset.json")
    return sorted(meta["categories"], key=lambda c: c["id"])


def _build(architecture: dict[str, Any]) -> keras.Model:
    """The model from the architecture facts the train stage records (its stage.json)."""
    return ssd_resnet34.build_ssd300(
        num_classes=architecture["classes"] + 1, width=architecture["width"]
    )


def _epoch_batches(
    files: list[Path], ids: list[int], anchors: tf.Tensor, seed: int, epoch: int, shard: InputShard
) -> tf.data.Dataset:
    """One epoch's batches of this worker's shard; a new shuffle order per epoch."""
    return train_dataset(
        files,
        ids,
        anchors,
        shard.batch_size,
        seed=seed * 1000 + epoch,
        num_workers=shard.num_workers,
        index=shard.index,
    )


def _start(model: keras.Model, pretrained: str, weights: Path | None) -> dict[str, Any] | None:
    """The backbone's starting weights: the weights stage's folder where the run names a
    source (its rule passes it), else random init; facts for stage.json."""
    if pretrained == "none":
        return None
    if weights is None:
        raise ConfigError(
            f"ssd.model.pretrained is {pretrained}, but no converted weights were given "
            "(the train rule passes the weights stage's folder; by hand: --weights)"
        )
    return {"source": pretrained, **ssd_resnet34.load_pretrained(model, weights)}


def train(
    prepared: Path, run: str, cfg: TrainSlice, work_dir: Path, weights: Path | None = None
) -> dict[str, Any] | None:
    categories = _categories(prepared)
    ids = [c["id"] for c in categories]
    splits = read_json(prepared / "dataset.json")["splits"]  # read once: train and eval
    train_images = splits["train"]["images"]
    files = _shards(prepared, "train")
    model_cfg = view(SSDModel, cfg["model"], where="ssd.model")
    architecture = {"classes": len(ids), "width": model_cfg.width}

    def make_job(train_cfg: SSDTrain, device: TFDevice) -> TFTrainJob:
        batch = train_cfg.batch_size
        # as the reference: ceil(images / global batch)
        steps = train_cfg.steps_per_epoch or math.ceil(train_images / batch)
        model = _build(architecture)
        pretrained = _start(model, model_cfg.pretrained, weights)
        schedule = WarmupCosine(
            train_cfg.lr * batch / 32,
            steps,
            train_cfg.warmup_epochs,
            model_cfg.cosine_begin,
            model_cfg.cosine_end,
        )
        l2_vars = ssd_resnet34.l2_variables(model)
        anchors = tf.constant(default_boxes(), tf.float32)

        def loss_fn(outputs: Any, targets: Any) -> tf.Tensor:
            return ssd_loss(outputs[0], outputs[1], *targets)["total"]

        return TFTrainJob(
            model=model,
            optimizer=keras.optimizers.SGD(schedule, momentum=train_cfg.momentum),
            loss_fn=loss_fn,
            dataset=functools.partial(_epoch_batches, files, ids, anchors, train_cfg.seed),
            steps_per_epoch=steps,
            batch_size=batch,
            variables=ssd_resnet34.trainable_variables(model),
            regularization=lambda: train_cfg.weight_decay * l2_loss(l2_vars),
            facts={
                "architecture": architecture,
                "train_images": train_images,
                "pretrained": pretrained,
            },
            evaluation=_in_training(cfg, train_cfg, prepared, splits),
        )

    return tf_trainer.run_training(cfg, cfg.train_as(SSDTrain), work_dir, make_job)


def evaluate(
    prepared: Path, run: str, cfg: dict[str, Any], model_dir: Path, out_dir: Path
) -> dict[str, Any]:
    """COCO box AP of the trained model on the validation images (pycocotools COCOeval).

    Writes metrics.json, per_category_ap.csv and detections.json (COCO results format).
    """

    categories = _categories(prepared)
    ids = [c["id"] for c in categories]
    ev = view(SSDEvaluate, cfg["evaluate"], where="ssd.evaluate")
    architecture = read_json(model_dir / "stage.json")["architecture"]
    if architecture["classes"] != len(ids):
        raise DataError(
            f"{model_dir}: trained on {architecture['classes']} categories, "
            f"{prepared / 'dataset.json'} has {len(ids)}"
        )
    model, _ = tf_trainer.load_for_eval(model_dir, cfg, functools.partial(_build, architecture))
    metrics, detections, per_category = _scores(model, prepared, ev)
    write_json(out_dir / "detections.json", detections)
    write_json(out_dir / "metrics.json", metrics)
    with (out_dir / "per_category_ap.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["category_id", "name", "AP"])
        for c in categories:
            writer.writerow([c["id"], c["name"], per_category.get(c["id"], "")])
    log.info("COCO AP %s, AP50 %s", metrics["AP"], metrics["AP50"])
    return metrics


def _scores(
    model: keras.Model, prepared: Path, ev: SSDEvaluate
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[int, float | str]]:
    """COCO box AP of `model` on the validation images, its detections (COCO results format)
    and the AP per category: the evaluate stage's scoring, and the train stage's inside
    training."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    ids = [c["id"] for c in _categories(prepared)]
    detections: list[dict[str, Any]] = []
    for batch in checked(eval_dataset(_shards(prepared, "val"), ids, ev.batch_size)):
        cls_logits, boxes = model(batch["image"], training=False)
        detections += decode_detections(
            cls_logits.numpy(),
            boxes.numpy(),
            batch["source_id"].numpy(),
            batch["size"].numpy(),
            ids,
            score_threshold=ev.score_threshold,
            nms_iou=ev.nms_iou,
            max_detections=ev.max_detections,
        )
    truth = COCO(str(prepared / "instances_val2017.json"))
    stats, per_category = _coco_eval(truth, detections, COCO, COCOeval)
    metrics = {
        **dict(zip(_COCO_STATS, stats, strict=True)),
        "detections": len(detections),
        "images": len(truth.getImgIds()),
        "note": _note(stats),
    }
    return metrics, detections, per_category


def _in_training(
    cfg: TrainSlice, train_cfg: SSDTrain, prepared: Path, splits: dict[str, Any]
) -> InTrainingEval | None:
    """The run's evaluations inside training (train.eval_every), scored as `evaluate` does."""

    return in_training_eval(
        "ssd",
        cfg,
        train_cfg,
        SSDEvaluate,
        lambda model, ev: _scores(model, prepared, ev)[0],
        lambda: (splits["train"]["images"], splits["val"]["images"]),
    )


def _note(stats: list[float | None]) -> str:
    """metrics.json's note: what the numbers are, and why any of them is null."""
    note = "COCO box AP (pycocotools COCOeval, maxDets 100), fractions 0..1"
    undefined = [k for k, v in zip(_COCO_STATS, stats, strict=True) if v is None]
    if undefined:
        note += (
            f"; {', '.join(undefined)} null: the validation set has no ground-truth box of "
            "that size (APs: area < 32^2 px, APm: 32^2 to 96^2, APl: > 96^2, AP: any), so "
            "pycocotools reports -1: the AP is undefined, not 0"
        )
    return note


def _coco_eval(
    truth: Any, detections: list[dict[str, Any]], coco_cls: Any, eval_cls: Any
) -> tuple[list[float | None], dict[int, float | str]]:
    """COCOeval's first six stats (AP, AP50, AP75, APs, APm, APl) and the AP per category
    (area all, 100 detections). A stat COCOeval reports as -1 (no ground truth of that size,
    so no precision to average) is None: undefined, not 0; so is a category's AP ("" in the
    table) when the category has no ground truth."""
    if detections:
        result = truth.loadRes(json.loads(json.dumps(detections)))
    else:  # loadRes refuses an empty list: an empty result set scores 0 where there is truth
        result = coco_cls()
        result.dataset = {
            "images": list(truth.dataset["images"]),
            "categories": list(truth.dataset["categories"]),
            "annotations": [],
        }
        result.createIndex()
    coco_eval = eval_cls(truth, result, iouType="bbox")
    coco_eval.evaluate()
    coco_eval.accumulate()
    coco_eval.summarize()
    precision = coco_eval.eval["precision"]  # [iou thresholds, recall, category, area, maxDets]
    per_category: dict[int, float | str] = {}
    for k, cat_id in enumerate(coco_eval.params.catIds):
        p = precision[:, :, k, 0, -1]
        valid = p[p > -1]
        per_category[cat_id] = round(float(np.mean(valid)), 6) if valid.size else ""
    stats = [None if s <= -1 else round(float(s), 6) for s in coco_eval.stats[: len(_COCO_STATS)]]
    return stats, per_category
