"""Evaluation metrics: Dice on integer label maps (numpy) and top-k accuracy counts.

The module imports no torch, so segmentation evaluation needs none; ``topk_correct`` works
on the torch tensors it is given.

``dice_per_class`` follows the reference nnU-Net validation Dice: per class, per volume,
with an empty class scored 1.0 when it is also absent from the prediction and 0.0
otherwise. Scores are fractions in [0, 1]; callers multiply by 100 for reporting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def _dice_one(pred_mask: np.ndarray, target_mask: np.ndarray) -> float:
    target_size = int(np.count_nonzero(target_mask))
    pred_size = int(np.count_nonzero(pred_mask))
    if target_size == 0:
        # Dice is undefined here; the reference rewards a correctly empty prediction.
        return 1.0 if pred_size == 0 else 0.0
    overlap = int(np.count_nonzero(pred_mask & target_mask))
    return 2.0 * overlap / (pred_size + target_size)


def dice_per_class(
    pred: np.ndarray, target: np.ndarray, classes: Sequence[int] = (1, 2, 3)
) -> np.ndarray:
    """Dice of each class in ``classes`` between two integer label maps of equal shape.

    Returns a float64 array of ``len(classes)`` values in [0, 1].
    """
    pred, target = np.asarray(pred), np.asarray(target)
    if pred.shape != target.shape:
        raise ValueError(f"shape mismatch: pred {pred.shape} vs target {target.shape}")
    return np.array([_dice_one(pred == c, target == c) for c in classes], dtype=np.float64)


def topk_correct(
    logits: torch.Tensor, target: torch.Tensor, ks: Sequence[int] = (1, 5)
) -> dict[int, int]:
    """For each k in ``ks``, how many samples have their target among the k highest logits.

    ``logits`` is (N, C), ``target`` (N,) class indices; k is clamped to C (so top-5 of a
    3-class problem counts every sample). Ties are broken by ``torch.topk``'s order.
    """
    if logits.ndim != 2 or target.shape != logits.shape[:1]:
        raise ValueError(
            f"expected logits (N, C) and target (N,), got {tuple(logits.shape)} "
            f"and {tuple(target.shape)}"
        )
    if any(k < 1 for k in ks):
        raise ValueError(f"k must be >= 1, got {tuple(ks)}")
    max_k = min(max(ks), logits.shape[1])
    # hits[i, j]: the j-th highest logit of sample i is its target (at most one j per row).
    hits = logits.topk(max_k, dim=1).indices == target.unsqueeze(1)
    per_rank = hits.sum(dim=0).cumsum(dim=0)  # per_rank[j]: targets within the top j+1
    return {k: int(per_rank[min(k, max_k) - 1]) for k in ks}
