"""Tests for the per-class Dice metric."""

from __future__ import annotations

import numpy as np
import pytest

from accelpipe.metrics import dice_per_class


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
