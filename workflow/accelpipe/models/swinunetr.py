"""SwinUNETR (MONAI's implementation) configured from `swinunetr.model`.

One input channel (CT) and one output channel (the GTV-1 mask): the output is a logit for a
sigmoid, never a softmax over a single channel (which is constant 1 and cannot learn).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# isort: off
from accelpipe.devices import tensorboard_stub  # noqa: F401  before MONAI: see there

# isort: on
from monai.networks.nets import SwinUNETR

from accelpipe.core.errors import ConfigError

DOWNSAMPLING = 32  # patch embedding (2) x four patch-merging stages (2**4)


def check_roi(roi: Sequence[int]) -> None:
    """The patch must halve cleanly five times, and keep more than one voxel at the bottleneck:
    instance norm on a 1x1x1 feature map fails in training."""
    if any(side % DOWNSAMPLING for side in roi):
        raise ConfigError(f"config key 'swinunetr.model.roi': {list(roi)} is not a multiple of 32")
    if all(side == DOWNSAMPLING for side in roi):
        raise ConfigError(
            f"config key 'swinunetr.model.roi': {list(roi)} leaves a 1x1x1 bottleneck; "
            "make one side at least 64"
        )


def build_model(model_cfg: dict[str, Any]) -> SwinUNETR:
    check_roi(model_cfg["roi"])
    heads = model_cfg["num_heads"]
    if any(model_cfg["feature_size"] * 2**i % h for i, h in enumerate(heads)):
        raise ConfigError(
            "config key 'swinunetr.model.num_heads': each stage's width "
            f"(feature_size x 2^stage) must divide by its heads, got {heads}"
        )
    return SwinUNETR(
        in_channels=1,
        out_channels=1,
        feature_size=model_cfg["feature_size"],
        depths=tuple(model_cfg["depths"]),
        num_heads=tuple(model_cfg["num_heads"]),
        window_size=model_cfg["window_size"],
        use_checkpoint=model_cfg["use_checkpoint"],
        spatial_dims=3,
    )
