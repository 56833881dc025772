"""Pixel-wise cross-entropy from logits with an ignored label (Segmenter's
`CrossEntropyLoss(ignore_index=255)`), in TensorFlow."""

from __future__ import annotations

from accelpipe.core.keras2 import tf


def segmentation_loss(logits: tf.Tensor, labels: tf.Tensor, ignore_index: int) -> tf.Tensor:
    """Mean cross-entropy over the pixels whose label is not `ignore_index`.

    `logits` (B, H, W, C) are float32 scores, never probabilities (a softmax before this
    would be the hackathon's double softmax); `labels` (B, H, W) are already shifted
    (0..C-1, ignore_index). A batch with no labelled pixel gives 0, not NaN.
    """
    valid = tf.not_equal(labels, ignore_index)
    safe = tf.where(valid, labels, tf.zeros_like(labels))
    per_pixel = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe, logits=logits)
    weight = tf.cast(valid, per_pixel.dtype)
    return tf.reduce_sum(per_pixel * weight) / tf.maximum(tf.reduce_sum(weight), 1.0)
