"""SSD300 default boxes, the box coder and the anchor matching (`encode_labels`).

API (every box is normalised to [0, 1] and ordered [ymin, xmin, ymax, xmax] unless named
"centre form", which is [cy, cx, h, w]):

- `default_boxes() -> np.ndarray [8732, 4]` float32 corners; `default_boxes_centre()` the same
  boxes in centre form. Order: level (38, 19, 10, 5, 3, 1), then row, column, box, which is the
  order of the model's NHWC head reshape (a different order silently ruins training).
- `encode(boxes, anchors)` / `decode(deltas, anchors)`: Faster R-CNN coder on [ty, tx, th, tw]
  with scale factors (10, 10, 5, 5). Work on numpy arrays or tensors (TF ops).
- `iou(a [N,4], b [M,4]) -> [N, M]` (TF ops).
- `encode_labels(gt_boxes [G,4], gt_classes [G], anchors [8732,4]) -> (classes [8732] int32,
  boxes [8732,4] float32, num_matched float32 scalar)`: one image, TF ops, for `tf.data.map`.

The geometry follows the MLPerf SSD-ResNet34 reference (REFERENCE-tensorflow A.2): per cell
(s_k, s_k), (sqrt(s_k s_{k+1}), same) and, per aspect ratio a, (w, h) = (s_k sqrt(a),
s_k / sqrt(a)) then its transpose; the clip to [0, 1] is applied to (cy, cx, h, w), not to the
corners, so corner boxes at the border may reach past the image.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from accelpipe.core.keras2 import tf

IMAGE_SIZE = 300
FEATURE_SIZES = (38, 19, 10, 5, 3, 1)
STEPS = (8, 16, 32, 64, 100, 300)
SCALES = (21, 45, 99, 153, 207, 261, 315)  # pixels; level k uses SCALES[k] and SCALES[k + 1]
ASPECT_RATIOS = ((2,), (2, 3), (2, 3), (2, 3), (2,), (2,))
NUM_DEFAULTS = tuple(2 + 2 * len(r) for r in ASPECT_RATIOS)  # (4, 6, 6, 6, 4, 4)
NUM_BOXES = sum(f * f * n for f, n in zip(FEATURE_SIZES, NUM_DEFAULTS, strict=True))  # 8732
SCALE_FACTORS = (10.0, 10.0, 5.0, 5.0)  # ty, tx, th, tw
MATCH_THRESHOLD = 0.5
_EPS = 1e-8  # keeps log() and divisions finite for degenerate (zero-size) boxes


def _level_sizes(level: int) -> list[tuple[float, float]]:
    """(w, h) of the default boxes of one cell at `level`, in the reference's order."""
    s1 = SCALES[level] / IMAGE_SIZE
    s2 = SCALES[level + 1] / IMAGE_SIZE
    s3 = math.sqrt(s1 * s2)
    sizes = [(s1, s1), (s3, s3)]
    for a in ASPECT_RATIOS[level]:
        w, h = s1 * math.sqrt(a), s1 / math.sqrt(a)
        sizes += [(w, h), (h, w)]
    return sizes


def default_boxes_centre() -> np.ndarray:
    """The 8732 default boxes as [cy, cx, h, w], each value clipped to [0, 1]."""
    boxes = []
    for level, size in enumerate(FEATURE_SIZES):
        fk = IMAGE_SIZE / STEPS[level]
        sizes = _level_sizes(level)
        for i, j in itertools.product(range(size), repeat=2):  # row-major, like NHWC
            cy, cx = (i + 0.5) / fk, (j + 0.5) / fk
            boxes += [(cy, cx, h, w) for w, h in sizes]
    return np.clip(np.asarray(boxes, np.float64), 0.0, 1.0).astype(np.float32)


def centre_to_corners(boxes):
    """[..., (cy, cx, h, w)] -> [..., (ymin, xmin, ymax, xmax)] (numpy or TF)."""
    cy, cx, h, w = (boxes[..., k] for k in range(4))
    stack = np.stack if isinstance(boxes, np.ndarray) else tf.stack
    return stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], axis=-1)


def corners_to_centre(boxes):
    """[..., (ymin, xmin, ymax, xmax)] -> [..., (cy, cx, h, w)] (numpy or TF)."""
    y0, x0, y1, x1 = (boxes[..., k] for k in range(4))
    stack = np.stack if isinstance(boxes, np.ndarray) else tf.stack
    return stack([(y0 + y1) / 2, (x0 + x1) / 2, y1 - y0, x1 - x0], axis=-1)


def default_boxes() -> np.ndarray:
    """The 8732 default boxes as [ymin, xmin, ymax, xmax] float32 (from the clipped centres)."""
    return centre_to_corners(default_boxes_centre()).astype(np.float32)


def encode(boxes, anchors):
    """Boxes [..., 4] relative to anchors [..., 4] (both corners) -> [ty, tx, th, tw] deltas."""
    lib = np if isinstance(boxes, np.ndarray) else tf.math
    b, a = corners_to_centre(boxes), corners_to_centre(anchors)
    ha, wa = a[..., 2] + _EPS, a[..., 3] + _EPS
    h, w = b[..., 2] + _EPS, b[..., 3] + _EPS
    parts = [
        (b[..., 0] - a[..., 0]) / ha * SCALE_FACTORS[0],
        (b[..., 1] - a[..., 1]) / wa * SCALE_FACTORS[1],
        lib.log(h / ha) * SCALE_FACTORS[2],
        lib.log(w / wa) * SCALE_FACTORS[3],
    ]
    return np.stack(parts, axis=-1) if lib is np else tf.stack(parts, axis=-1)


def decode(deltas, anchors):
    """Inverse of `encode`: deltas [..., (ty, tx, th, tw)] + anchors (corners) -> corners."""
    lib = np if isinstance(deltas, np.ndarray) else tf.math
    a = corners_to_centre(anchors)
    ha, wa = a[..., 2] + _EPS, a[..., 3] + _EPS
    cy = deltas[..., 0] / SCALE_FACTORS[0] * ha + a[..., 0]
    cx = deltas[..., 1] / SCALE_FACTORS[1] * wa + a[..., 1]
    h = lib.exp(deltas[..., 2] / SCALE_FACTORS[2]) * ha
    w = lib.exp(deltas[..., 3] / SCALE_FACTORS[3]) * wa
    parts = [cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2]
    return np.stack(parts, axis=-1) if lib is np else tf.stack(parts, axis=-1)


def iou(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """Pairwise IoU of corner boxes a [N,4] and b [M,4] -> [N, M]; 0 where the union is 0."""
    lo = tf.maximum(a[:, None, :2], b[None, :, :2])
    hi = tf.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = tf.reduce_prod(tf.maximum(hi - lo, 0.0), axis=-1)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return tf.math.divide_no_nan(inter, union)


def match(similarity: tf.Tensor) -> tf.Tensor:
    """ArgMax matching of anchors to GT boxes: [G, A] IoUs -> [A] GT index, or -1 if unmatched.

    An anchor takes its best GT when that IoU is >= 0.5. Then every GT also takes its own best
    anchor (force_match_for_each_row), even below 0.5, so small GT boxes are never left without
    an anchor; where two GTs share a best anchor the first GT wins, as in the reference.
    """
    num_anchors = tf.shape(similarity)[1]
    best_gt = tf.argmax(similarity, axis=0, output_type=tf.int32)
    matches = tf.where(tf.reduce_max(similarity, axis=0) >= MATCH_THRESHOLD, best_gt, -1)
    forced = tf.one_hot(tf.argmax(similarity, axis=1, output_type=tf.int32), num_anchors)
    forced_gt = tf.argmax(forced, axis=0, output_type=tf.int32)
    return tf.where(tf.reduce_max(forced, axis=0) > 0, forced_gt, matches)


def encode_labels(
    gt_boxes: tf.Tensor, gt_classes: tf.Tensor, anchors: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Training targets of one image (TF ops; usable inside `tf.data.Dataset.map`).

    gt_boxes [G, 4] corners, gt_classes [G] contiguous labels 1..N (0 is background),
    anchors [A, 4] corners. Returns (classes [A] int32, 0 where unmatched; boxes [A, 4]
    float32 encoded deltas, 0 where unmatched; num_matched float32 scalar). An image
    without GT boxes gives all background and num_matched 0.
    """
    gt_boxes = tf.reshape(tf.cast(gt_boxes, tf.float32), [-1, 4])
    gt_classes = tf.reshape(tf.cast(gt_classes, tf.int32), [-1])
    anchors = tf.cast(anchors, tf.float32)
    unmatched = tf.zeros_like(anchors[:, 0], tf.int32) - 1  # keeps the static [A] shape
    # argmax over an empty GT axis is an error, hence the branch.
    matches = tf.cond(
        tf.shape(gt_boxes)[0] > 0, lambda: match(iou(gt_boxes, anchors)), lambda: unmatched
    )
    matched = matches >= 0
    safe = tf.maximum(matches, 0)
    classes = tf.where(matched, tf.gather(tf.concat([gt_classes, [0]], 0), safe), 0)
    matched_boxes = tf.gather(tf.concat([gt_boxes, tf.zeros([1, 4])], 0), safe)
    deltas = tf.where(matched[:, None], encode(matched_boxes, anchors), 0.0)
    num_matched = tf.reduce_sum(tf.cast(matched, tf.float32))
    return classes, deltas, num_matched
