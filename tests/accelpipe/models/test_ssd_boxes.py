"""Tests for the SSD default boxes, the box coder and the anchor matching."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accelpipe.core.keras2 import tf
from accelpipe.models import ssd_boxes as sb

pytestmark = pytest.mark.tensorflow

LEVEL_COUNTS = (5776, 2166, 600, 150, 36, 4)


def _np_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def _level_start(level: int) -> int:
    return sum(LEVEL_COUNTS[:level])


def test_there_are_8732_boxes_with_the_known_level_counts() -> None:
    counts = [f * f * n for f, n in zip(sb.FEATURE_SIZES, sb.NUM_DEFAULTS, strict=True)]
    assert tuple(counts) == LEVEL_COUNTS
    assert sb.NUM_DEFAULTS == (4, 6, 6, 6, 4, 4)
    assert sb.NUM_BOXES == 8732
    assert sb.default_boxes().shape == (8732, 4)
    assert sb.default_boxes().dtype == np.float32


def test_first_cell_of_level_0_by_hand() -> None:
    c = 0.5 / 37.5  # fk = 300 / 8
    s1, s2 = 21 / 300, 45 / 300
    s3 = math.sqrt(s1 * s2)
    w2, h2 = s1 * math.sqrt(2), s1 / math.sqrt(2)
    expected = [(c, c, s1, s1), (c, c, s3, s3), (c, c, h2, w2), (c, c, w2, h2)]
    np.testing.assert_allclose(sb.default_boxes_centre()[:4], expected, rtol=1e-6)
    # Corners come from the clipped centre form and are not clipped themselves.
    corners = sb.default_boxes()[:4]
    np.testing.assert_allclose(corners[0], [c - s1 / 2, c - s1 / 2, c + s1 / 2, c + s1 / 2], 1e-5)
    assert corners[0, 0] < 0
    np.testing.assert_allclose(corners[2], [c - h2 / 2, c - w2 / 2, c + h2 / 2, c + w2 / 2], 1e-5)


def test_the_1x1_level_by_hand_and_the_clip_on_centre_form() -> None:
    last = sb.default_boxes_centre()[-4:]
    s1, s2 = 261 / 300, 315 / 300
    s3 = math.sqrt(s1 * s2)  # 0.956: inside [0, 1]
    w2, h2 = min(s1 * math.sqrt(2), 1.0), s1 / math.sqrt(2)  # 1.23 -> clipped to 1
    expected = [(0.5, 0.5, s1, s1), (0.5, 0.5, s3, s3), (0.5, 0.5, h2, w2), (0.5, 0.5, w2, h2)]
    np.testing.assert_allclose(last, expected, rtol=1e-6)
    np.testing.assert_allclose(sb.default_boxes()[-2], [0.5 - h2 / 2, 0.0, 0.5 + h2 / 2, 1.0], 1e-6)
    centre = sb.default_boxes_centre()
    assert centre.min() >= 0.0 and centre.max() <= 1.0


def test_order_is_level_row_column_box_with_fk_300_over_step() -> None:
    centre = sb.default_boxes_centre()
    for level, size in enumerate(sb.FEATURE_SIZES):
        fk = 300 / sb.STEPS[level]  # 18.75 for the 19x19 map, not 19
        n = sb.NUM_DEFAULTS[level]
        for i, j in ((0, 1), (1, 0), (size - 1, size - 1)):
            first = _level_start(level) + (i * size + j) * n
            cell = centre[first : first + n]
            np.testing.assert_allclose(cell[:, 0], min((i + 0.5) / fk, 1.0), rtol=1e-6)
            np.testing.assert_allclose(cell[:, 1], min((j + 0.5) / fk, 1.0), rtol=1e-6)
        # the first box of every cell is the square s_k box
        s1 = sb.SCALES[level] / 300
        np.testing.assert_allclose(centre[_level_start(level), 2:], [s1, s1], rtol=1e-6)


def test_encode_decode_round_trip_numpy_and_tf() -> None:
    rng = np.random.default_rng(0)
    anchors = sb.default_boxes()[rng.choice(8732, 64)].astype(np.float64)
    lo = rng.uniform(0, 0.6, (64, 2))
    boxes = np.concatenate([lo, lo + rng.uniform(0.01, 0.4, (64, 2))], axis=1)
    deltas = sb.encode(boxes, anchors)
    np.testing.assert_allclose(sb.decode(deltas, anchors), boxes, atol=1e-6)
    tf_deltas = sb.encode(tf.constant(boxes, tf.float32), tf.constant(anchors, tf.float32))
    np.testing.assert_allclose(tf_deltas.numpy(), deltas, rtol=1e-3, atol=1e-3)
    back = sb.decode(tf_deltas, tf.constant(anchors, tf.float32)).numpy()
    np.testing.assert_allclose(back, boxes, atol=1e-5)


def test_encode_uses_scale_factors_10_10_5_5() -> None:
    anchor = np.array([[0.4, 0.4, 0.6, 0.6]])  # centre 0.5, size 0.2
    box = np.array([[0.42, 0.4, 0.62, 0.8]])  # centre (0.52, 0.6), size (0.2, 0.4)
    np.testing.assert_allclose(
        sb.encode(box, anchor)[0],
        [10 * 0.02 / 0.2, 10 * 0.1 / 0.2, 0.0, 5 * math.log(2)],
        atol=1e-6,
    )


def test_iou_matches_numpy() -> None:
    a = sb.default_boxes()[:50]
    b = np.array([[0.0, 0.0, 0.05, 0.05], [0.1, 0.1, 0.3, 0.5]], np.float32)
    np.testing.assert_allclose(sb.iou(tf.constant(a), tf.constant(b)).numpy(), _np_iou(a, b), 1e-5)


def _encode(gt, labels):
    anchors = tf.constant(sb.default_boxes())
    cls, boxes, n = sb.encode_labels(
        tf.constant(gt, tf.float32), tf.constant(labels, tf.int32), anchors
    )
    return cls.numpy(), boxes.numpy(), float(n)


def test_matching_threshold_is_iou_at_least_half() -> None:
    gt = np.array([[0.2, 0.3, 0.6, 0.7]], np.float32)
    cls, boxes, n = _encode(gt, [5])
    overlap = _np_iou(sb.default_boxes(), gt)[:, 0]
    expected = overlap >= 0.5
    expected[np.argmax(overlap)] = True
    assert expected.sum() > 1
    np.testing.assert_array_equal(cls > 0, expected)
    assert set(np.unique(cls)) == {0, 5}
    assert n == expected.sum()
    assert cls.dtype == np.int32 and boxes.dtype == np.float32
    # matched anchors decode back to the GT box; unmatched get zero targets
    decoded = sb.decode(boxes[expected].astype(np.float64), sb.default_boxes()[expected])
    np.testing.assert_allclose(decoded, np.repeat(gt, expected.sum(), 0), atol=1e-5)
    assert not boxes[~expected].any()


def test_a_gt_below_the_threshold_still_gets_exactly_its_best_anchor() -> None:
    gt = np.array([[0.50, 0.50, 0.505, 0.503]], np.float32)  # far smaller than any anchor
    overlap = _np_iou(sb.default_boxes(), gt)[:, 0]
    assert overlap.max() < 0.5
    cls, _, n = _encode(gt, [3])
    assert n == 1.0
    assert np.flatnonzero(cls).tolist() == [int(np.argmax(overlap))]
    assert cls[np.argmax(overlap)] == 3


def test_each_anchor_takes_the_gt_it_overlaps_most() -> None:
    anchors = sb.default_boxes()
    gt = np.array([[0.1, 0.1, 0.5, 0.5], [0.2, 0.2, 0.6, 0.6]], np.float32)
    cls, _, _ = _encode(gt, [1, 2])
    overlap = _np_iou(anchors, gt)
    both = (overlap >= 0.5).all(axis=1)
    assert both.any()
    np.testing.assert_array_equal(cls[both], np.where(overlap[both, 0] >= overlap[both, 1], 1, 2))


def test_forced_match_overrides_the_threshold_match_and_the_first_gt_wins_ties() -> None:
    # anchor 1 overlaps GT 0 best (0.6 >= 0.5) but is GT 1's best anchor: forced to GT 1.
    sim = tf.constant([[0.9, 0.6, 0.1], [0.2, 0.55, 0.1]])
    assert sb.match(sim).numpy().tolist() == [0, 1, -1]
    # both GTs' best anchor is anchor 0 (below threshold): the first GT takes it.
    sim = tf.constant([[0.2, 0.1, 0.0], [0.3, 0.1, 0.0]])
    assert sb.match(sim).numpy().tolist() == [0, -1, -1]
    # exactly 0.5 matches
    sim = tf.constant([[0.9, 0.5, 0.49]])
    assert sb.match(sim).numpy().tolist() == [0, 0, -1]


def test_no_gt_boxes_gives_all_background() -> None:
    cls, boxes, n = _encode(np.zeros((0, 4), np.float32), np.zeros(0, np.int32))
    assert cls.shape == (8732,) and not cls.any()
    assert boxes.shape == (8732, 4) and not boxes.any()
    assert n == 0.0


def test_encode_labels_in_tf_data_has_static_shapes() -> None:
    anchors = tf.constant(sb.default_boxes())
    ds = tf.data.Dataset.from_generator(
        lambda: iter([(np.array([[0.1, 0.1, 0.4, 0.4]], np.float32), np.array([2], np.int32))]),
        output_signature=(tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32)),
    ).map(lambda b, c: sb.encode_labels(b, c, anchors))
    specs = ds.element_spec
    assert [s.shape.as_list() for s in specs] == [[8732], [8732, 4], []]
    cls, _, n = next(iter(ds))
    assert float(n) >= 1 and int(tf.reduce_max(cls)) == 2
