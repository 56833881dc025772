"""The SSD detection loss and the coupled L2 term (REFERENCE-tensorflow A.2, pitfalls 4 and 5).

API:

- `ssd_loss(cls_logits [B,A,C], box_pred [B,A,4], cls_targets [B,A] int, box_targets [B,A,4],
  num_matched [B]) -> {"total", "cls", "box"}`, scalar float32 tensors; total = cls + box.
- `l2_loss(variables) -> scalar`: sum(v^2) / 2 over the variables; the trainer adds
  `weight_decay * l2_loss(ssd_resnet34.l2_variables(model))` to the loss it differentiates
  (a coupled L2 term, not Keras' decoupled `weight_decay`); the reported loss excludes it.

All math is float32 whatever the mixed-precision policy: the inputs are cast first, so bf16
logits would not lose the small per-anchor terms of an 8732-anchor sum.

Both parts are summed per image and divided by that image's own number of matched anchors, then
averaged over the batch. The divisor is max(num_matched, 1): the reference divides by
num_matched and relies on the training set dropping images without boxes (its "sporadic NaN"
note); with the guard such an image contributes 0 instead of NaN (it has no positives and,
at 3 negatives per positive, no negatives either).
"""

from __future__ import annotations

from collections.abc import Iterable

from accelpipe.core.keras2 import tf

NEGATIVES_PER_POSITIVE = 3


def _huber(x: tf.Tensor) -> tf.Tensor:
    """Smooth L1 with delta 1: 0.5 x^2 inside |x| <= 1, |x| - 0.5 outside."""
    ax = tf.abs(x)
    return tf.where(ax <= 1.0, 0.5 * tf.square(x), ax - 0.5)


def _negative_mask(neg_ce: tf.Tensor, num_neg: tf.Tensor) -> tf.Tensor:
    """[B, A] mask of the `num_neg` [B] anchors with the largest `neg_ce` in each row.

    Sort once to get the anchor order, sort the order again to get each anchor's rank (the
    reference's double top_k); ties keep the lower anchor index first (top_k is stable).
    """
    num_anchors = tf.shape(neg_ce)[1]
    _, order = tf.math.top_k(neg_ce, k=num_anchors)
    _, rank = tf.math.top_k(-order, k=num_anchors)
    # top_k of -order sorts anchor ids ascending, so `rank[b, a]` is where anchor a landed.
    return rank < num_neg[:, None]


def localization_loss(
    box_pred: tf.Tensor, box_targets: tf.Tensor, positive: tf.Tensor, divisor: tf.Tensor
) -> tf.Tensor:
    per_anchor = tf.reduce_sum(_huber(box_pred - box_targets), axis=-1)
    per_image = tf.reduce_sum(tf.where(positive, per_anchor, 0.0), axis=1)
    return tf.reduce_mean(per_image / divisor)


def classification_loss(
    cls_logits: tf.Tensor, cls_targets: tf.Tensor, positive: tf.Tensor, divisor: tf.Tensor
) -> tf.Tensor:
    """Softmax CE over the positives plus the 3 x num_pos hardest negatives of each image.

    Positives are ranked below every negative (score -1 < any CE), and num_neg is capped at
    the number of negatives, so no anchor is counted twice; the reference caps at 8732 and
    could double-count positives only when an image has more than 2183 of them.
    """
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=cls_targets, logits=cls_logits)
    num_pos = tf.reduce_sum(tf.cast(positive, tf.int32), axis=1)
    num_anchors = tf.shape(ce)[1]
    num_neg = tf.minimum(NEGATIVES_PER_POSITIVE * num_pos, num_anchors - num_pos)
    hard = _negative_mask(tf.where(positive, -1.0, ce), num_neg)
    per_image = tf.reduce_sum(tf.where(positive | hard, ce, 0.0), axis=1)
    return tf.reduce_mean(per_image / divisor)


def ssd_loss(
    cls_logits: tf.Tensor,
    box_pred: tf.Tensor,
    cls_targets: tf.Tensor,
    box_targets: tf.Tensor,
    num_matched: tf.Tensor,
) -> dict[str, tf.Tensor]:
    """The SSD loss of a batch: {"total": cls + box, "cls": ..., "box": ...} (float32)."""
    cls_logits = tf.cast(cls_logits, tf.float32)
    box_pred = tf.cast(box_pred, tf.float32)
    box_targets = tf.cast(box_targets, tf.float32)
    cls_targets = tf.cast(cls_targets, tf.int32)
    positive = cls_targets > 0
    divisor = tf.maximum(tf.reshape(tf.cast(num_matched, tf.float32), [-1]), 1.0)
    cls = classification_loss(cls_logits, cls_targets, positive, divisor)
    box = localization_loss(box_pred, box_targets, positive, divisor)
    return {"total": cls + box, "cls": cls, "box": box}


def l2_loss(variables: Iterable[tf.Variable]) -> tf.Tensor:
    """sum(v^2) / 2 over `variables` in float32 (tf.nn.l2_loss), 0 for none."""
    terms = [tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in variables]
    return tf.add_n(terms) if terms else tf.constant(0.0)
