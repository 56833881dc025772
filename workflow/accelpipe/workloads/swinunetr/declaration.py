"""swinunetr: what the workflow knows of it before any framework loads (the registry's entry, its
settings views). MONAI SwinUNETR on NSCLC-Radiomics, PyTorch.

Its framework module is `workload` (train, evaluate); its data files beside this one:
schema.yaml (its config block), published.yaml (quality target, published figures, loader),
recipe.yaml (the reference recipe its defaults follow). No framework: Snakemake imports this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelpipe.config.declare import Memory, VolumeCache, Workload
from accelpipe.config.settings import TorchTrain

# Its volume cache on full NSCLC (inputs.volume_cache bounds it, plan.capacity counts it):
# - a volume cached after the deterministic transforms: 248 MB (issue 33), of the 338 volumes
#   of the training split (422 patients, swinunetr.prepare.val_fraction 0.2);
# - the peak of one thread building a cached volume, in units of that volume's cached bytes:
#   the loaded volume, the resampling grid and its float64 intermediates; measured here on
#   251x251x64 and 376x376x96 resampled volumes: 10.4 and 10.0 (issue 33: ~4.5 GB for two
#   builders on full NSCLC, ~9);
# - the default budget's share of the memory the process may use: the rest is the model,
#   optimizer, batches, loader workers and the interpreter.
VOLUME_CACHE = VolumeCache(
    volume_bytes=248_000_000, train_volumes=338, build_transient=10, default_share=0.5
)
CACHE_BUILD_TRANSIENT = VOLUME_CACHE.build_transient
CACHE_SHARE = VOLUME_CACHE.default_share


@dataclass(frozen=True)
class SwinUNETRTrain(TorchTrain):
    num_samples: int
    cache_rate: float
    cache_memory_gb: float | None
    augment: bool
    # Not options of swinunetr's schema: the BTCV recipe is eager AdamW; torch has no
    # channels-last layout for its 3-D convolutions.
    compile: bool = field(default=False, init=False)
    channels_last: bool = field(default=False, init=False)
    optimizer: str = field(default="adamw", init=False)
    momentum: float = field(default=0.0, init=False)


@dataclass(frozen=True)
class SwinUNETRModel:
    roi: tuple[int, int, int]
    feature_size: int
    depths: tuple[int, ...]
    num_heads: tuple[int, ...]
    window_size: int
    use_checkpoint: bool


@dataclass(frozen=True)
class SwinUNETREvaluate:
    sw_batch_size: int
    overlap: float
    mode: str
    threshold: float


WORKLOAD = Workload(
    "swinunetr",
    "nsclc",
    "nifti",
    "pytorch",
    ("datalist.json",),
    "mean_dice",
    train=SwinUNETRTrain,
    model=SwinUNETRModel,
    evaluate=SwinUNETREvaluate,
    # the seed measured bf16 slower than fp16 on MI300X
    auto_precision={"rocm": "fp16"},
    # at the reference's sizes: 4 crops of 96^3 and their labels; feature size 48: 62.2 M parameters
    memory=Memory(62_200_000, 4 * 96**3 * 2, VOLUME_CACHE),
)
