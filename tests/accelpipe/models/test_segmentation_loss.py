"""Pixel cross-entropy with the ignored label, against a numpy reading of its definition."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow

from accelpipe.core.keras2 import tf  # noqa: E402
from accelpipe.models.segmentation_loss import segmentation_loss  # noqa: E402


def _numpy_ce(logits: np.ndarray, labels: np.ndarray, ignore: int) -> float:
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    keep = labels != ignore
    picked = np.take_along_axis(log_p, np.where(keep, labels, 0)[..., None], -1)[..., 0]
    return float(-(picked * keep).sum() / keep.sum())


def test_mean_over_labelled_pixels_only() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=(2, 3, 4)).astype(np.int32)
    labels[0, 0] = 255
    labels[1, :, 1] = 255
    loss = segmentation_loss(tf.constant(logits), tf.constant(labels), 255)
    assert float(loss) == pytest.approx(_numpy_ce(logits, labels, 255), rel=1e-5)


def test_ignored_pixels_get_no_gradient_and_an_empty_batch_gives_zero() -> None:
    logits = tf.Variable(np.zeros((1, 2, 2, 3), np.float32))
    labels = tf.constant([[[1, 255], [255, 255]]], tf.int32)
    with tf.GradientTape() as tape:
        loss = segmentation_loss(logits, labels, 255)
    grad = tape.gradient(loss, logits).numpy()
    assert float(loss) == pytest.approx(np.log(3.0), rel=1e-6)
    np.testing.assert_array_equal(grad[0, 0, 1], 0.0)
    np.testing.assert_allclose(grad[0, 0, 0], [1 / 3, -2 / 3, 1 / 3], rtol=1e-6)
    empty = segmentation_loss(logits, tf.fill((1, 2, 2), 255), 255)
    assert float(empty) == 0.0
