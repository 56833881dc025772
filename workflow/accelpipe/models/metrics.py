"""Evaluation metrics: Dice on integer label maps (numpy), top-k accuracy counts and
mmseg's mIoU / accuracy accumulated over a whole validation set.

The module imports no torch, so segmentation evaluation needs none; ``topk_correct`` works
on the torch tensors it is given.

``dice_per_class`` follows the reference nnU-Net validation Dice: per class, per volume,
with an empty class scored 1.0 when it is also absent from the prediction and 0.0
otherwise. Scores are fractions in [0, 1]; callers multiply by 100 for reporting.

``SegmentationCounts`` follows mmseg's ``mean_iou`` (what Segmenter reports): per class,
intersection, union and ground-truth area summed over every image, pixels labelled
``ignore_index`` left out; IoU and accuracy per class, classes with no union (absent from
both ground truth and predictions) left out of the means (nanmean).
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


class SegmentationCounts:
    """Per-class pixel counts accumulated image by image; metrics over the whole set."""

    def __init__(self, num_classes: int, ignore_index: int) -> None:
        self.num_classes, self.ignore_index = num_classes, ignore_index
        self.intersect = np.zeros(num_classes, np.int64)
        self.pred_area = np.zeros(num_classes, np.int64)
        self.label_area = np.zeros(num_classes, np.int64)

    def update(self, pred: np.ndarray, label: np.ndarray) -> None:
        """Add one image: `pred` and `label` integer maps of one shape."""
        if pred.shape != label.shape:
            raise ValueError(f"prediction {pred.shape} and label {label.shape} differ in shape")
        keep = label != self.ignore_index
        pred, label = pred[keep].astype(np.int64), label[keep].astype(np.int64)
        n = self.num_classes
        self.intersect += np.bincount(label[pred == label], minlength=n)[:n]
        self.pred_area += np.bincount(pred, minlength=n)[:n]
        self.label_area += np.bincount(label, minlength=n)[:n]

    def per_class(self) -> dict[str, np.ndarray]:
        """IoU and accuracy per class, NaN where undefined (no union / no ground truth)."""
        union = self.pred_area + self.label_area - self.intersect
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = np.where(union > 0, self.intersect / union, np.nan)
            acc = np.where(self.label_area > 0, self.intersect / self.label_area, np.nan)
        return {"iou": iou, "accuracy": acc}

    def summary(self) -> dict[str, float]:
        """mIoU, mean accuracy and pixel accuracy (aAcc) as fractions in [0, 1]."""
        per_class = self.per_class()
        total = int(self.label_area.sum())
        return {
            "mIoU": _nanmean(per_class["iou"]),
            "mean_accuracy": _nanmean(per_class["accuracy"]),
            "pixel_accuracy": float(self.intersect.sum() / total) if total else float("nan"),
        }


def _nanmean(values: np.ndarray) -> float:
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if defined.size else float("nan")
