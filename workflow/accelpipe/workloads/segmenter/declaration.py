"""segmenter: what the workflow knows of it before any framework loads (the registry's entry, its
settings views). Segmenter (ViT encoder, linear or mask decoder) on ADE20K, TensorFlow; the
encoder starts from the AugReg ViT of its size.

Its framework module is `workload` (train, evaluate); its data files beside this one:
schema.yaml (its config block), published.yaml (quality target, published figures, loader),
recipe.yaml (the reference recipe its defaults follow). No framework: Snakemake imports this.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelpipe.config.declare import Examples, Memory, Pretrained, Workload
from accelpipe.config.settings import TFTrain


@dataclass(frozen=True)
class SegmenterTrain(TFTrain):
    momentum: float
    nesterov: bool
    poly_power: float
    min_lr: float
    scale_range: tuple[float, float]


@dataclass(frozen=True)
class SegmenterModel:
    encoder: str
    decoder: str
    image_size: int
    pretrained: str  # augreg | none | path:<npz> (accelpipe.plan.pretrained)
    drop_path: float
    dropout: float
    decoder_dropout: float


@dataclass(frozen=True)
class SegmenterEvaluate:
    short_side: int
    stride: int | None
    batch_size: int
    prediction_images: int


WORKLOAD = Workload(
    "segmenter",
    "ade20k",
    "tfrecord",
    "tensorflow",
    ("dataset.json",),
    "mIoU",
    train=SegmenterTrain,
    model=SegmenterModel,
    evaluate=SegmenterEvaluate,
    pretrained=Pretrained("vit", "augreg", picked_by="encoder"),
    examples=Examples(
        grid_keys=("model.decoder", "train.lr"),
        grid_runs=("decoder-mask_lr-0p05", "decoder-linear_lr-0p05"),
    ),
    # at the reference's sizes: a 512^2 crop and its label; ViT-B/16 with its mask decoder,
    # ~100 M parameters as published
    memory=Memory(100_000_000, 512 * 512 * 4),
)
