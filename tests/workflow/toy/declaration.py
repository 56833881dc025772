"""toy: one convolution that segments the BraTS slices unet2d's prepare stage writes (the
brats `2d` variant, shared: its prepare settings stay unet2d's). What a new workload declares:
its registry entry and its settings views; no framework, Snakemake imports it to plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from accelpipe.config.declare import Workload
from accelpipe.config.settings import TorchTrain


@dataclass(frozen=True)
class ToyTrain(TorchTrain):
    # Not options of the toy's schema: eager AdamW at a constant rate, read in the train process.
    loader_workers: int = field(default=0, init=False)
    compile: bool = field(default=False, init=False)
    channels_last: bool = field(default=False, init=False)
    optimizer: str = field(default="adamw", init=False)
    momentum: float = field(default=0.0, init=False)
    scheduler: str = field(default="constant", init=False)
    warmup_epochs: float = field(default=0.0, init=False)
    poly_power: float = field(default=1.0, init=False)


@dataclass(frozen=True)
class ToyModel:
    kernel: int


@dataclass(frozen=True)
class ToyEvaluate:
    batch_size: int


WORKLOAD = Workload(
    "toy", "brats", "2d", "pytorch", ("config.json", "folds.json"), "mean_dice",
    train=ToyTrain,
    model=ToyModel,
    evaluate=ToyEvaluate,
)  # fmt: skip
