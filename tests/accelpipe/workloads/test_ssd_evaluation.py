"""SSD's COCO metrics: an AP pycocotools cannot define (-1: no ground truth of that size) is
written as null with the reason in the note, never as 0.0."""

from __future__ import annotations

import pytest

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from accelpipe.workloads.ssd import workload as ssd

pytestmark = pytest.mark.tensorflow


def _truth() -> COCO:
    """Two images, small boxes only (area < 32^2): no medium or large ground truth."""
    truth = COCO()
    truth.dataset = {
        "images": [{"id": i, "width": 100, "height": 100} for i in (1, 2)],
        "categories": [{"id": 1, "name": "cat"}, {"id": 3, "name": "dog"}],
        "annotations": [
            {
                "id": 1,
                "image_id": 1,
                "category_id": 1,
                "bbox": [10, 10, 20, 20],
                "area": 400.0,
                "iscrowd": 0,
            },
            {
                "id": 2,
                "image_id": 2,
                "category_id": 1,
                "bbox": [50, 50, 10, 10],
                "area": 100.0,
                "iscrowd": 0,
            },
        ],
    }
    truth.createIndex()
    return truth


def test_an_ap_with_no_ground_truth_of_its_size_is_null_not_zero() -> None:
    detections = [{"image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "score": 0.9}]
    stats, per_category = ssd._coco_eval(_truth(), detections, COCO, COCOeval)
    metrics = dict(zip(ssd._COCO_STATS, stats, strict=True))
    assert metrics["APm"] is None and metrics["APl"] is None
    assert metrics["AP"] == pytest.approx(0.50495, abs=1e-4)
    assert metrics["APs"] == metrics["AP"]
    assert per_category == {1: metrics["AP"], 3: ""}  # dog: no ground truth at all
    note = ssd._note(stats)
    assert "APm, APl null" in note and "no ground-truth box of that size" in note


def test_no_detections_score_zero_where_there_is_truth_and_null_elsewhere() -> None:
    stats, per_category = ssd._coco_eval(_truth(), [], COCO, COCOeval)
    assert stats == [0.0, 0.0, 0.0, 0.0, None, None]
    assert per_category == {1: 0.0, 3: ""}


def test_the_note_says_nothing_of_null_when_every_ap_is_defined() -> None:
    note = ssd._note([0.1, 0.2, 0.3, 0.0, 0.5, 0.6])
    assert "null" not in note
