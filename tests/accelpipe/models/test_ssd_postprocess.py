"""Tests for the SSD evaluation decode: threshold, per-class top-k, NMS, global cap, COCO ids
and pixel boxes."""

from __future__ import annotations

import numpy as np
import pytest

from accelpipe.models.ssd_boxes import default_boxes
from accelpipe.models.ssd_postprocess import decode_detections, detect_image, nms, softmax

pytestmark = pytest.mark.tensorflow


def test_nms_keeps_the_best_of_overlapping_boxes() -> None:
    boxes = np.array(
        [
            [0.0, 0.0, 1.0, 1.0],
            [0.0, 0.0, 1.0, 0.9],  # IoU 0.9 with box 0
            [2.0, 2.0, 3.0, 3.0],  # apart
            [0.0, 0.0, 1.0, 0.5],  # IoU exactly 0.5 with box 0: suppressed, like the reference
            [0.0, 0.0, 1.0, 0.49],  # IoU 0.49 with box 0, 0.544 with box 1 (suppressed first)
        ]
    )
    scores = np.array([0.6, 0.9, 0.7, 0.3, 0.2])
    assert nms(boxes, scores, 0.5).tolist() == [1, 2]
    assert nms(boxes[[0, 2, 3]], scores[[0, 2, 3]], 0.5).tolist() == [1, 0]
    assert nms(boxes[[0, 4]], scores[[0, 4]], 0.5).tolist() == [0, 1]


def _scores(rows: list[list[float]]) -> np.ndarray:
    return np.asarray(rows, np.float64)


def _apart(n: int) -> np.ndarray:
    """n non-overlapping boxes."""
    return np.array([[i, i, i + 0.5, i + 0.5] for i in range(n)], np.float64)


def test_threshold_background_and_best_first() -> None:
    scores = _scores(
        [
            [0.9, 0.05, 0.05],  # 0.05 is not > 0.05
            [0.0, 0.5, 0.5],
            [0.99, 0.01, 0.0],  # background never reported
            [0.2, 0.06, 0.74],
        ]
    )
    boxes, kept, labels = detect_image(scores, _apart(4))
    assert kept.tolist() == [0.74, 0.5, 0.5, 0.06]
    assert labels.tolist() == [2, 1, 2, 1]
    np.testing.assert_array_equal(boxes[0], _apart(4)[3])


def test_per_class_top_k_then_global_cap() -> None:
    scores = np.zeros((6, 3))
    scores[:, 1] = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    scores[:, 2] = [0.1, 0.2, 0.3, 0.35, 0.45, 0.55]
    _, kept, labels = detect_image(scores, _apart(6), per_class=2)
    assert kept.tolist() == [0.9, 0.8, 0.55, 0.45]
    assert labels.tolist() == [1, 1, 2, 2]
    _, kept, _ = detect_image(scores, _apart(6), per_class=2, max_detections=3)
    assert kept.tolist() == [0.9, 0.8, 0.55]


def test_nms_runs_per_class() -> None:
    same = np.array([[0.0, 0.0, 1.0, 1.0]] * 2)
    scores = _scores([[0.0, 0.8, 0.2], [0.0, 0.1, 0.9]])
    _, kept, labels = detect_image(scores, same)
    # class 1: both boxes (0.8 kept, 0.1 suppressed); class 2: 0.9 kept, 0.2 suppressed
    assert kept.tolist() == [0.9, 0.8] and labels.tolist() == [2, 1]


def test_nothing_above_threshold_gives_no_detections() -> None:
    boxes, kept, labels = detect_image(_scores([[1.0, 0.0, 0.0]]), _apart(1))
    assert boxes.shape == (0, 4) and kept.size == 0 and labels.size == 0


def test_decode_detections_maps_ids_and_pixels() -> None:
    anchors = default_boxes()
    a = 5776 + 100  # an anchor on the 19x19 level, inside the image
    logits = np.zeros((2, 8732, 4), np.float32)
    logits[:, :, 0] = 10.0  # background everywhere ...
    logits[0, a, 2] = 30.0  # ... but image 0, anchor a is contiguous class 2
    deltas = np.zeros((2, 8732, 4), np.float32)  # zero deltas decode to the anchor itself
    out = decode_detections(
        logits, deltas, [b"42", 7], np.array([[200, 400], [10, 10]]), coco_ids=[90, 1, 5]
    )
    assert len(out) == 1
    det = out[0]
    y0, x0, y1, x1 = anchors[a].astype(np.float64)
    assert det["image_id"] == 42
    assert det["category_id"] == 5  # sorted ids [1, 5, 90]: label 2 -> 5
    np.testing.assert_allclose(
        det["bbox"], [x0 * 400, y0 * 200, (x1 - x0) * 400, (y1 - y0) * 200], atol=2e-3
    )
    assert det["score"] == pytest.approx(1.0, abs=1e-5)


def test_softmax_is_stable_for_large_logits() -> None:
    p = softmax(np.array([[1000.0, 0.0, -1000.0]]))
    np.testing.assert_allclose(p, [[1.0, 0.0, 0.0]])


def test_nms_matches_a_plain_greedy_loop_on_random_boxes() -> None:
    rng = np.random.default_rng(3)
    lo = rng.uniform(0, 0.7, (120, 2))
    boxes = np.concatenate([lo, lo + rng.uniform(0.05, 0.3, (120, 2))], axis=1)
    scores = rng.uniform(size=120)

    def iou(a: np.ndarray, b: np.ndarray) -> float:
        h = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        w = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        area = lambda x: (x[2] - x[0]) * (x[3] - x[1])  # noqa: E731
        return h * w / (area(a) + area(b) - h * w)

    expected: list[int] = []
    for i in np.argsort(-scores):
        if all(iou(boxes[i], boxes[j]) < 0.5 for j in expected):
            expected.append(int(i))
    assert nms(boxes, scores, 0.5).tolist() == expected
