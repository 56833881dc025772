"""unet2d: what the workflow knows of it before any framework loads (the registry's entry, its
settings views). nnU-Net 2D (DynUNet, deep supervision) on BraTS, PyTorch; each run cross-
validated (its schema block's `folds`).

Its framework module is `workload` (train, evaluate); its data files beside this one:
schema.yaml (its config block), published.yaml (quality target, published figures, loader),
recipe.yaml (the reference recipe its defaults follow). No framework: Snakemake imports this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelpipe.config.declare import Memory, Workload
from accelpipe.config.settings import TorchTrain


@dataclass(frozen=True)
class UNet2DTrain(TorchTrain):
    oversampling: float
    augment: bool
    # Not options of unet2d's schema: the reference's recipe is eager AdamW with no warmup
    # (its schedules are constant or cosine, so no poly exponent applies).
    compile: bool = field(default=False, init=False)
    optimizer: str = field(default="adamw", init=False)
    momentum: float = field(default=0.0, init=False)
    warmup_epochs: float = field(default=0.0, init=False)
    poly_power: float = field(default=1.0, init=False)


@dataclass(frozen=True)
class UNet2DModel:
    filters: tuple[int, ...]
    strides: tuple[int, ...]
    deep_supervision: bool
    deep_supr_num: int


@dataclass(frozen=True)
class UNet2DEvaluate:
    batch_size: int


WORKLOAD = Workload(
    "unet2d",
    "brats",
    "2d",
    "pytorch",
    ("config.json", "folds.json"),
    "mean_dice",
    train=UNet2DTrain,
    model=UNet2DModel,
    evaluate=UNet2DEvaluate,
    # at the reference's sizes: a 192x160 slice of 4 channels and its label; DynUNet,
    # 20.6 M parameters
    memory=Memory(20_600_000, 192 * 160 * 5),
)
