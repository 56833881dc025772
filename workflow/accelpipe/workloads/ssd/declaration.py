"""ssd: what the workflow knows of it before any framework loads (the registry's entry, its
settings views). SSD300 with a ResNet-34 backbone on COCO, TensorFlow (an MLPerf benchmark); the
backbone starts from MLPerf's pretrained ResNet-34.

Its framework module is `workload` (train, evaluate); its data files beside this one:
schema.yaml (its config block), published.yaml (quality target, published figures, loader),
recipe.yaml (the reference recipe its defaults follow). No framework: Snakemake imports this.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelpipe.config.declare import Memory, Pretrained, Workload
from accelpipe.config.settings import TFTrain


@dataclass(frozen=True)
class SSDTrain(TFTrain):
    momentum: float
    warmup_epochs: float


@dataclass(frozen=True)
class SSDModel:
    width: int
    pretrained: str  # mlperf | none | path:<...> (accelpipe.plan.pretrained)
    cosine_begin: float
    cosine_end: float


@dataclass(frozen=True)
class SSDEvaluate:
    batch_size: int
    score_threshold: float
    nms_iou: float
    max_detections: int


WORKLOAD = Workload(
    "ssd",
    "coco",
    "tfrecord",
    "tensorflow",
    ("dataset.json",),
    "AP",
    train=SSDTrain,
    model=SSDModel,
    evaluate=SSDEvaluate,
    pretrained=Pretrained("resnet34", "mlperf", needs=(("width", 64),)),
    mlperf_benchmark="ssd",
    # at the reference's sizes: a 300^2 image; ResNet-34 SSD300 ~20 M parameters as published
    memory=Memory(20_000_000, 300 * 300 * 3),
)
