"""resnet50: what the workflow knows of it before any framework loads (the registry's entry, its
settings views). ResNet-50 v1.5 on ImageNet, PyTorch (an MLPerf benchmark).

Its framework module is `workload` (train, evaluate); its data files beside this one:
schema.yaml (its config block), published.yaml (quality target, published figures, loader),
recipe.yaml (the reference recipe its defaults follow). No framework: Snakemake imports this.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelpipe.config.declare import Examples, Memory, Workload
from accelpipe.config.settings import TorchTrain


@dataclass(frozen=True)
class ResNet50Train(TorchTrain):
    label_smoothing: float


@dataclass(frozen=True)
class ResNet50Model:
    width: int
    layers: tuple[int, int, int, int]
    image_size: int


@dataclass(frozen=True)
class ResNet50Evaluate:
    batch_size: int
    loader_workers: int


WORKLOAD = Workload(
    "resnet50",
    "imagenet",
    "index",
    "pytorch",
    ("classes.json",),
    "top1",
    train=ResNet50Train,
    model=ResNet50Model,
    evaluate=ResNet50Evaluate,
    mlperf_benchmark="resnet",
    examples=Examples(runs=("fp32", "bf16")),
    # at the reference's sizes: a 224^2 RGB crop; 25.6 M parameters
    memory=Memory(25_600_000, 224 * 224 * 3),
)
