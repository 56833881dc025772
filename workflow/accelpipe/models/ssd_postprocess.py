"""SSD evaluation decode: model outputs -> COCO detections (REFERENCE-tensorflow A.5), numpy.

API:

- `decode_detections(cls_logits [B,A,C], box_deltas [B,A,4], source_ids [B], sizes [B,2],
  coco_ids, score_threshold=0.05, nms_iou=0.5, max_detections=200, per_class=200,
  anchors=None) -> list[dict]`: COCO results entries `{"image_id", "category_id",
  "bbox": [x, y, w, h] in pixels, "score"}`. `sizes` are the original (height, width);
  contiguous label k (1..N) maps to COCO id `coco_ids[k - 1]` (sorted ids, as trained).
- `detect_image(scores [A,C], boxes [A,4], ...) -> (boxes [K,4], scores [K], labels [K])` for
  one image, normalised corners, contiguous labels.
- `nms(boxes [N,4], scores [N], iou_threshold) -> kept indices`, greedy, by score.

Per image, as the reference: softmax over classes; per class except background, the 200
best-scoring anchors, those scoring > 0.05, greedy NMS that drops a box whose IoU with a kept
one is >= 0.5; then the 200 best over all classes. Boxes are not clipped to the image (the
reference does not clip either). COCOeval itself only looks at the best 100 per image.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from accelpipe.models.ssd_boxes import decode, default_boxes


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def pairwise_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of corner boxes a [N,4] x b [M,4] -> [N, M]; 0 where the union is 0."""
    # per coordinate on [N, M] planes: faster than a [N, M, 2] array and a product reduction
    a_, b_ = a.T[:, :, None], b.T[:, None, :]
    ih = np.minimum(a_[2], b_[2]) - np.maximum(a_[0], b_[0])
    iw = np.minimum(a_[3], b_[3]) - np.maximum(a_[1], b_[1])
    inter = np.maximum(ih, 0.0) * np.maximum(iw, 0.0)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy NMS: indices of the kept boxes, best score first (ties: lower index first).

    A box is dropped when its IoU with a better kept box is >= the threshold. The IoUs of
    the (at most 200) candidates are computed at once; the greedy pass only flips flags.
    """
    order = np.argsort(-scores, kind="stable")
    overlap = pairwise_iou(boxes[order], boxes[order]) >= iou_threshold
    keep = np.ones(order.size, bool)
    for i in range(order.size):
        if keep[i]:
            keep[i + 1 :] &= ~overlap[i, i + 1 :]
    return order[keep]


def _top_per_class(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Anchor indices [k, C] of the k best anchors of every class column, and their scores."""
    if k < scores.shape[0]:
        top = np.argpartition(-scores, k - 1, axis=0)[:k]
    else:
        top = np.broadcast_to(np.arange(scores.shape[0])[:, None], scores.shape)
    return top, np.take_along_axis(scores, top, axis=0)


def detect_image(
    scores: np.ndarray,
    boxes: np.ndarray,
    score_threshold: float = 0.05,
    nms_iou: float = 0.5,
    max_detections: int = 200,
    per_class: int = 200,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image: class probabilities [A, C] + decoded corner boxes [A, 4] -> the kept
    (boxes [K, 4], scores [K], labels [K]), best first, K <= max_detections."""
    out_boxes, out_scores, out_labels = [], [], []
    top, top_scores = _top_per_class(scores[:, 1:], per_class)  # column 0 is background
    passing = top_scores > score_threshold
    for c in np.flatnonzero(passing.any(axis=0)):
        candidates = top[passing[:, c], c]
        column = scores[:, c + 1]
        kept = candidates[nms(boxes[candidates], column[candidates], nms_iou)]
        out_boxes.append(boxes[kept])
        out_scores.append(column[kept])
        out_labels.append(np.full(kept.size, c + 1, np.int64))
    if not out_scores:
        return np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)
    all_scores = np.concatenate(out_scores)
    best = np.argsort(-all_scores, kind="stable")[:max_detections]
    return np.concatenate(out_boxes)[best], all_scores[best], np.concatenate(out_labels)[best]


def to_coco(
    boxes: np.ndarray,
    scores: np.ndarray,
    labels: np.ndarray,
    image_id: int,
    size: Sequence[int],
    coco_ids: Sequence[int],
) -> list[dict[str, Any]]:
    """Normalised corners -> COCO results entries in pixels of the original (height, width)."""
    height, width = float(size[0]), float(size[1])
    ids = sorted(coco_ids)
    entries = []
    for (y0, x0, y1, x1), score, label in zip(boxes, scores, labels, strict=True):
        entries.append(
            {
                "image_id": int(image_id),
                "category_id": int(ids[int(label) - 1]),
                "bbox": [
                    round(float(x0) * width, 3),
                    round(float(y0) * height, 3),
                    round(float(x1 - x0) * width, 3),
                    round(float(y1 - y0) * height, 3),
                ],
                "score": round(float(score), 5),
            }
        )
    return entries


def decode_detections(
    cls_logits: np.ndarray,
    box_deltas: np.ndarray,
    source_ids: Sequence[Any],
    sizes: np.ndarray,
    coco_ids: Sequence[int],
    score_threshold: float = 0.05,
    nms_iou: float = 0.5,
    max_detections: int = 200,
    per_class: int = 200,
    anchors: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """A batch of model outputs -> COCO results entries (see the module docstring)."""
    anchors = default_boxes() if anchors is None else anchors
    entries: list[dict[str, Any]] = []
    for b in range(cls_logits.shape[0]):
        scores = softmax(np.asarray(cls_logits[b], np.float64))
        boxes = decode(np.asarray(box_deltas[b], np.float64), anchors.astype(np.float64))
        kept = detect_image(scores, boxes, score_threshold, nms_iou, max_detections, per_class)
        entries += to_coco(*kept, _image_id(source_ids[b]), sizes[b], coco_ids)
    return entries


def _image_id(source_id: Any) -> int:
    """COCO image id from an int or the TFRecord's `image/source_id` bytes/str."""
    if isinstance(source_id, bytes | np.bytes_):
        source_id = source_id.decode()
    return int(source_id)
