"""Tests for the SSD loss: hand-computed values, 3:1 hard negatives, per-image normalisation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accelpipe.core.keras2 import tf
from accelpipe.models.ssd_loss import l2_loss, ssd_loss

pytestmark = pytest.mark.tensorflow

A, C = 8, 3
# class-1 logit of the anchors; every other logit is 0
X = np.array([2.0, 0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 4.0])


def _ce(x: float, label: int) -> float:
    """Softmax CE of logits [0, x, 0] for `label`."""
    return math.log(2 + math.exp(x)) - (x if label == 1 else 0.0)


def _batch(labels: list[list[int]], num_matched: list[float]):
    logits = np.zeros((len(labels), A, C), np.float32)
    logits[:, :, 1] = X
    box_pred = np.zeros((len(labels), A, 4), np.float32)
    box_pred[:, :, :] = [0.5, -2.0, 0.0, 1.0]  # huber: 0.125 + 1.5 + 0 + 0.5
    box_targets = np.zeros((len(labels), A, 4), np.float32)
    return ssd_loss(
        tf.constant(logits),
        tf.constant(box_pred),
        tf.constant(labels, tf.int32),
        tf.constant(box_targets),
        tf.constant(num_matched, tf.float32),
    )


def test_one_positive_takes_its_three_hardest_negatives_and_an_empty_image_adds_zero() -> None:
    image0 = [1, 0, 0, 0, 0, 0, 0, 0]
    loss = _batch([image0, [0] * A], [1.0, 0.0])
    # negatives ranked by CE = rank by x: anchors 7 (x=4), 4 (x=3), 3 (x=2)
    cls0 = _ce(2.0, 1) + _ce(4.0, 0) + _ce(3.0, 0) + _ce(2.0, 0)
    assert float(loss["cls"]) == pytest.approx(cls0 / 2, rel=1e-6)  # mean over 2 images
    assert float(loss["box"]) == pytest.approx(2.125 / 2, rel=1e-6)
    assert float(loss["total"]) == pytest.approx((cls0 + 2.125) / 2, rel=1e-6)


def test_each_image_is_divided_by_its_own_num_matched() -> None:
    image0 = [1, 0, 0, 0, 0, 0, 0, 0]
    image1 = [0, 2, 0, 0, 0, 0, 0, 0]  # 1 positive: CE of label 2 at x=0
    two = [1, 0, 2, 0, 0, 0, 0, 0]  # 2 positives: 6 negatives = all of them
    loss = _batch([image0, image1, two], [1.0, 1.0, 2.0])
    cls0 = _ce(2.0, 1) + _ce(4.0, 0) + _ce(3.0, 0) + _ce(2.0, 0)
    cls1 = _ce(0.0, 2) + _ce(4.0, 0) + _ce(3.0, 0) + _ce(2.0, 0)
    negatives = [_ce(x, 0) for k, x in enumerate(X) if k not in (0, 2)]
    cls2 = (_ce(2.0, 1) + _ce(1.0, 2) + sum(negatives)) / 2
    assert float(loss["cls"]) == pytest.approx((cls0 + cls1 + cls2) / 3, rel=1e-6)
    assert float(loss["box"]) == pytest.approx((2.125 + 2.125 + 2 * 2.125 / 2) / 3, rel=1e-6)


def test_negatives_are_capped_by_how_many_there_are() -> None:
    # 3 positives want 9 negatives; only 5 exist, each counted once.
    labels = [1, 1, 1, 0, 0, 0, 0, 0]
    loss = _batch([labels], [3.0])
    expected = (sum(_ce(x, 1) for x in X[:3]) + sum(_ce(x, 0) for x in X[3:])) / 3
    assert float(loss["cls"]) == pytest.approx(expected, rel=1e-6)


def test_localization_is_smooth_l1_on_positives_only() -> None:
    pred = tf.constant([[[0.5, -2.0, 0.0, 1.0], [9.0, 9.0, 9.0, 9.0]]])
    target = tf.constant([[[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]])
    loss = ssd_loss(tf.zeros([1, 2, 3]), pred, tf.constant([[2, 0]]), target, tf.constant([1.0]))
    assert float(loss["box"]) == pytest.approx(2.125)


def test_an_image_without_positives_gives_finite_loss_and_gradients() -> None:
    logits = tf.Variable(tf.random.normal([2, A, C]))
    boxes = tf.Variable(tf.random.normal([2, A, 4]))
    with tf.GradientTape() as tape:
        loss = ssd_loss(
            logits,
            boxes,
            tf.zeros([2, A], tf.int32),
            tf.zeros([2, A, 4]),
            tf.zeros([2]),
        )
    grads = tape.gradient(loss["total"], [logits, boxes])
    assert float(loss["total"]) == 0.0
    assert all(np.isfinite(g.numpy()).all() for g in grads)


def test_bf16_inputs_give_float32_losses() -> None:
    loss = ssd_loss(
        tf.zeros([1, A, C], tf.bfloat16),
        tf.zeros([1, A, 4], tf.bfloat16),
        tf.constant([[1] + [0] * (A - 1)]),
        tf.zeros([1, A, 4]),
        tf.constant([1.0]),
    )
    assert all(v.dtype == tf.float32 for v in loss.values())
    assert float(loss["cls"]) == pytest.approx(4 * math.log(3), rel=1e-6)


def test_l2_loss_is_half_the_sum_of_squares() -> None:
    variables = [tf.Variable(tf.ones([2, 2])), tf.Variable([3.0])]
    assert float(l2_loss(variables)) == pytest.approx(4 / 2 + 9 / 2)
    assert float(l2_loss([])) == 0.0
