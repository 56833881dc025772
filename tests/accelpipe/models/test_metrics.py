"""Tests for the per-class Dice metric and the top-k accuracy counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from accelpipe.models.metrics import SegmentationCounts, dice_per_class, topk_correct

pytestmark = pytest.mark.torch


def _labels() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 4, size=(6, 8, 8))


def test_perfect_match_scores_one() -> None:
    target = _labels()
    np.testing.assert_array_equal(dice_per_class(target.copy(), target), [1.0, 1.0, 1.0])


def test_disjoint_scores_zero() -> None:
    target = np.zeros((4, 4), dtype=np.int64)
    target[:2] = 1
    pred = np.zeros_like(target)
    pred[2:] = 1
    assert dice_per_class(pred, target, classes=(1,))[0] == 0.0


def test_class_absent_from_both_scores_one() -> None:
    target = np.array([[0, 1], [1, 2]])
    np.testing.assert_array_equal(dice_per_class(target.copy(), target), [1.0, 1.0, 1.0])


def test_class_absent_from_target_but_predicted_scores_zero() -> None:
    target = np.array([[0, 1], [1, 0]])
    pred = np.array([[3, 1], [1, 0]])
    np.testing.assert_array_equal(dice_per_class(pred, target), [1.0, 1.0, 0.0])


def test_class_present_but_not_predicted_scores_zero() -> None:
    target = np.array([[2, 1], [1, 0]])
    pred = np.array([[0, 1], [1, 0]])
    np.testing.assert_array_equal(dice_per_class(pred, target), [1.0, 0.0, 1.0])


def test_partial_overlap_hand_computed() -> None:
    target = np.zeros((4, 4), dtype=np.uint8)
    target[0, :3] = 1  # 3 pixels of class 1
    target[3, :] = 2  # 4 pixels of class 2
    pred = np.zeros_like(target)
    pred[0, 1:] = 1  # 3 pixels, 2 overlap -> 2*2/(3+3) = 2/3
    pred[3, :2] = 2  # 2 pixels, 2 overlap -> 2*2/(2+4) = 2/3
    pred[2, 0] = 2  # one false positive -> 2*2/(3+4) = 4/7
    result = dice_per_class(pred, target)
    np.testing.assert_allclose(result, [2 / 3, 4 / 7, 1.0])
    assert result.dtype == np.float64


def test_custom_classes_and_order() -> None:
    target = np.array([[1, 2], [2, 2]])
    pred = np.array([[1, 1], [2, 2]])
    np.testing.assert_allclose(dice_per_class(pred, target, classes=(2, 1)), [0.8, 2 / 3])


def test_shape_mismatch_names_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(4, 4\).*\(4, 5\)"):
        dice_per_class(np.zeros((4, 4)), np.zeros((4, 5)))


def _logits() -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.tensor(
        [
            [0.1, 0.9, 0.0, 0.3, 0.2, 0.5],  # order 1,5,3,4,0,2
            [2.0, 1.0, 3.0, 0.0, -1.0, 0.5],  # order 2,0,1,5,3,4
            [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],  # order 5,4,3,2,1,0
            [5.0, 4.0, 3.0, 2.0, 1.0, 0.0],  # order 0,1,2,3,4,5
        ]
    )
    # Target ranks: 1st, 2nd, 6th, 5th.
    return logits, torch.tensor([1, 0, 0, 4])


def test_topk_hand_computed() -> None:
    logits, target = _logits()
    assert topk_correct(logits, target) == {1: 1, 5: 3}
    assert topk_correct(logits, target, ks=(1, 2, 3, 6)) == {1: 1, 2: 2, 3: 2, 6: 4}


def test_topk_clamps_k_to_the_number_of_classes() -> None:
    logits, _ = _logits()
    assert topk_correct(logits[:, :3], torch.tensor([1, 2, 0, 1]), ks=(1, 5)) == {1: 2, 5: 4}


def test_topk_returns_python_ints_and_handles_an_empty_batch() -> None:
    logits, target = _logits()
    counts = topk_correct(logits, target, ks=(1,))
    assert type(counts[1]) is int
    assert topk_correct(torch.zeros(0, 10), torch.zeros(0, dtype=torch.long)) == {1: 0, 5: 0}


def test_topk_rejects_bad_shapes_and_k() -> None:
    logits, target = _logits()
    with pytest.raises(ValueError, match=r"\(4, 6\).*\(3,\)"):
        topk_correct(logits, target[:3])
    with pytest.raises(ValueError, match="k must be"):
        topk_correct(logits, target, ks=(0,))


# ---------------------------------------------------------------- mmseg mIoU over a dataset


def test_segmentation_counts_follow_mmseg_definitions() -> None:
    """Two images, hand-counted: classes 0..3, 255 ignored, class 3 absent from both."""
    counts = SegmentationCounts(num_classes=4, ignore_index=255)
    counts.update(np.array([[0, 0], [1, 2]]), np.array([[0, 1], [1, 255]]))
    counts.update(np.array([[2, 2, 0]]), np.array([[2, 0, 0]]))
    # class 0: pred 3 px, label 3 px, intersect 2 -> IoU 2/4, acc 2/3
    # class 1: pred 1, label 2, intersect 1 -> IoU 1/2, acc 1/2
    # class 2: pred 2 (the 2 on an ignored pixel does not count), label 1, inter 1 -> 1/2, 1/1
    per_class = counts.per_class()
    np.testing.assert_allclose(per_class["iou"][:3], [0.5, 0.5, 0.5])
    np.testing.assert_allclose(per_class["accuracy"][:3], [2 / 3, 1 / 2, 1.0])
    assert np.isnan(per_class["iou"][3]) and np.isnan(per_class["accuracy"][3])
    summary = counts.summary()
    assert summary["mIoU"] == pytest.approx(0.5)
    assert summary["mean_accuracy"] == pytest.approx((2 / 3 + 1 / 2 + 1) / 3)
    assert summary["pixel_accuracy"] == pytest.approx(4 / 6)


def test_a_class_only_predicted_scores_zero_iou_and_no_accuracy() -> None:
    counts = SegmentationCounts(num_classes=3, ignore_index=255)
    counts.update(np.array([[2, 0]]), np.array([[0, 0]]))
    per_class = counts.per_class()
    assert per_class["iou"][2] == 0.0 and np.isnan(per_class["accuracy"][2])
    assert counts.summary()["mIoU"] == pytest.approx((0.5 + 0.0) / 2)


def test_accumulating_is_not_averaging_per_image() -> None:
    """mmseg sums counts over the set: a small image weighs by its pixels, not as an image."""
    counts = SegmentationCounts(num_classes=2, ignore_index=255)
    counts.update(np.zeros((1, 1), int), np.ones((1, 1), int))  # 1 px, all wrong
    counts.update(np.ones((3, 3), int), np.ones((3, 3), int))  # 9 px, all right
    assert counts.summary()["pixel_accuracy"] == pytest.approx(0.9)
    assert counts.per_class()["iou"][1] == pytest.approx(0.9)


def test_segmentation_counts_refuse_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"prediction \(2, 2\) and label \(2, 3\)"):
        SegmentationCounts(3, 255).update(np.zeros((2, 2), int), np.zeros((2, 3), int))
