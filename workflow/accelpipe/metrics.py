"""Evaluation metrics on integer label maps (numpy only, so evaluation needs no torch).

``dice_per_class`` follows the reference nnU-Net validation Dice: per class, per volume,
with an empty class scored 1.0 when it is also absent from the prediction and 0.0
otherwise. Scores are fractions in [0, 1]; callers multiply by 100 for reporting.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
