"""Tests for the per-class Dice metric and the top-k accuracy counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from accelpipe.metrics import dice_per_class, topk_correct


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
