"""Segmentation losses for the nnU-Net workload, in plain torch.

``DiceCELoss`` reproduces the reference per-head loss (MONAI ``DiceCELoss`` with
``include_background=False, softmax=True, to_onehot_y=True, batch=True``): soft Dice over
the batch and spatial dims together per class, plus mean cross-entropy.
``DeepSupervisionLoss`` combines the heads with weights ``0.5**i``, normalised as the reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn


def _labels(target: Tensor, logits: Tensor) -> Tensor:
    """Return ``(B, H, W)`` int64 labels from a ``(B, 1, H, W)`` or ``(B, H, W)`` target."""
    if target.ndim == logits.ndim and target.shape[1] == 1:
        target = target[:, 0]
    if target.shape != logits.shape[:1] + logits.shape[2:]:
        raise ValueError(
            f"target shape {tuple(target.shape)} does not match logits {tuple(logits.shape)}"
        )
    return target.long()


def soft_dice_per_class(probs: Tensor, onehot: Tensor, smooth: float = 1e-5) -> Tensor:
    """Batch soft Dice loss per class: ``1 - (2|p.y| + s) / (|p| + |y| + s)``, shape ``(C,)``.

    Sums over batch and spatial dims together (``batch=True``), so a class only has to
    be present somewhere in the batch to get a meaningful score.
    """
    dims = [0, *range(2, probs.ndim)]
    intersection = (probs * onehot).sum(dims)
    denominator = probs.sum(dims) + onehot.sum(dims)
    return 1.0 - (2.0 * intersection + smooth) / (denominator + smooth)


class DiceCELoss(nn.Module):
    """Soft Dice (softmax, one-hot target, batch-wise) + mean cross-entropy.

    ``logits`` ``(B, C, H, W)`` (any float dtype, computed in float32), ``target``
    ``(B, 1, H, W)`` integer labels -> scalar.
    """

    def __init__(self, include_background: bool = False, smooth: float = 1e-5) -> None:
        super().__init__()
        self.include_background = include_background
        self.smooth = smooth

    def dice_term(self, logits: Tensor, target: Tensor) -> Tensor:
        logits, labels = logits.float(), _labels(target, logits)
        probs = logits.softmax(dim=1)
        # one_hot puts classes last; movedim gives (B, C, H, W) without a copy.
        onehot = F.one_hot(labels, logits.shape[1]).movedim(-1, 1).to(probs.dtype)
        per_class = soft_dice_per_class(probs, onehot, self.smooth)
        return per_class.mean() if self.include_background else per_class[1:].mean()

    def ce_term(self, logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits.float(), _labels(target, logits))

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return self.dice_term(logits, target) + self.ce_term(logits, target)


def downsample_labels(target: Tensor, size: Sequence[int]) -> Tensor:
    """Nearest-neighbour resize of an integer label map ``(B, 1, H, W)`` to ``size``."""
    if tuple(target.shape[-2:]) == tuple(size):
        return target
    # interpolate needs a float input; labels are small integers so the round trip is exact.
    resized = F.interpolate(target.float(), size=size, mode="nearest")
    return resized.to(target.dtype)


class DeepSupervisionLoss(nn.Module):
    """Weighted sum of a per-head loss over deep-supervision outputs.

    Head ``i`` gets weight ``0.5**i`` and a target downsampled (nearest) to its
    resolution. The sum is scaled by ``1 / (2 - 2**-n)`` for ``n`` heads: NVIDIA nnU-Net
    21.02's ``compute_loss`` (commit 2b20ca80, the recipe we follow) and Habana's port of it,
    1.875 for three heads. It is not the sum of the weights, 1.75, which NVIDIA divides by
    from 21.11 on (db06ff53); we keep 21.02's so loss curves compare with that recipe
    (the nnU-Net 2D workload's recipe.yaml).
    """

    def __init__(self, loss: nn.Module) -> None:
        super().__init__()
        self.loss = loss

    def forward(self, preds: Tensor | list[Tensor], target: Tensor) -> Tensor:
        if isinstance(preds, Tensor):
            return self.loss(preds, target)
        if len(preds) == 0:
            raise ValueError("preds is an empty list")
        if target.ndim == 3:
            target = target[:, None]
        total: Tensor | float = 0.0
        for i, pred in enumerate(preds):
            total = total + 0.5**i * self.loss(pred, downsample_labels(target, pred.shape[-2:]))
        assert isinstance(total, Tensor)  # a sum of head losses: preds is not empty
        return total / (2 - 2.0 ** -len(preds))
