"""SSD post-processing: raw regressors and scores -> detections, then NMS.

Decoding follows MediaPipe's TensorsToDetectionsCalculator: each row of the
regressor tensor holds a box (x/y centre offsets and width/height, in input pixels,
divided by the scales) followed by keypoints; offsets are relative to the anchor
centre and multiplied by the anchor size.  Scores are logits (clipped, then a
sigmoid).  Coordinates of the detections are normalised to the model input (0..1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["DecodeOptions", "BLAZEFACE_DECODE", "Detection", "decode_ssd", "iou", "nms", "weighted_nms"]


@dataclass(frozen=True)
class DecodeOptions:
    num_coords: int = 16
    box_coord_offset: int = 0
    num_keypoints: int = 6
    values_per_keypoint: int = 2
    keypoint_coord_offset: int = 4
    x_scale: float = 128.0
    y_scale: float = 128.0
    w_scale: float = 128.0
    h_scale: float = 128.0
    reverse_output_order: bool = True     # rows hold x before y (MediaPipe face models)
    sigmoid_score: bool = True
    score_clipping_thresh: float = 100.0
    min_score_thresh: float = 0.5


#: MediaPipe face_detection_short_range's decoder settings.
BLAZEFACE_DECODE = DecodeOptions()


@dataclass
class Detection:
    """One detected object: ``box`` = (xmin, ymin, xmax, ymax), ``keypoints`` (K, 2) as (x, y)."""
    score: float
    box: np.ndarray
    keypoints: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.float32))

    def scaled(self, width: float, height: float) -> Detection:
        """The detection with coordinates multiplied by (width, height), e.g. to pixels."""
        s = np.array([width, height], np.float64)
        return Detection(self.score, self.box * np.tile(s, 2), self.keypoints * s)


def decode_ssd(raw_boxes: np.ndarray, raw_scores: np.ndarray, anchors: np.ndarray,
               options: DecodeOptions = BLAZEFACE_DECODE) -> list[Detection]:
    """Detections whose score passes ``options.min_score_thresh``, best first (no NMS)."""
    boxes = np.asarray(raw_boxes, np.float64)
    scores = np.asarray(raw_scores, np.float64)
    n = anchors.shape[0]
    if boxes.size != n * options.num_coords:
        raise ValueError(f"regressors hold {boxes.size} values; {n} anchors x {options.num_coords} expected")
    if scores.size != n:
        raise ValueError(f"scores hold {scores.size} values; expected one per anchor ({n})")
    boxes = boxes.reshape(n, options.num_coords)
    scores = scores.reshape(n)
    if options.sigmoid_score:
        if options.score_clipping_thresh:
            scores = np.clip(scores, -options.score_clipping_thresh, options.score_clipping_thresh)
        scores = 1.0 / (1.0 + np.exp(-scores))
    keep = np.nonzero(scores >= options.min_score_thresh)[0]
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    a = anchors.astype(np.float64)
    o = options.box_coord_offset
    xi, yi = (o, o + 1) if options.reverse_output_order else (o + 1, o)
    wi, hi = (o + 2, o + 3) if options.reverse_output_order else (o + 3, o + 2)
    out = []
    for i in keep:
        ax, ay, aw, ah = a[i]
        cx = boxes[i, xi] / options.x_scale * aw + ax
        cy = boxes[i, yi] / options.y_scale * ah + ay
        w = boxes[i, wi] / options.w_scale * aw
        h = boxes[i, hi] / options.h_scale * ah
        kps = []
        for k in range(options.num_keypoints):
            base = options.keypoint_coord_offset + k * options.values_per_keypoint
            kx, ky = (boxes[i, base], boxes[i, base + 1]) if options.reverse_output_order else \
                (boxes[i, base + 1], boxes[i, base])
            kps.append((kx / options.x_scale * aw + ax, ky / options.y_scale * ah + ay))
        out.append(Detection(float(scores[i]), np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]),
                             np.array(kps, np.float64).reshape(-1, 2)))
    return out


def iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two (xmin, ymin, xmax, ymax) boxes (0 when both are empty)."""
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    union = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1]) + max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _by_score(detections: list[Detection]) -> list[Detection]:
    return sorted(detections, key=lambda d: -d.score)


def nms(detections: list[Detection], iou_threshold: float = 0.3, max_detections: int | None = None) -> list[Detection]:
    """Plain NMS: keep the best box, drop those overlapping it by more than ``iou_threshold``, repeat."""
    kept: list[Detection] = []
    for d in _by_score(detections):
        if all(iou(d.box, k.box) <= iou_threshold for k in kept):
            kept.append(d)
            if max_detections is not None and len(kept) >= max_detections:
                break
    return kept


def weighted_nms(detections: list[Detection], iou_threshold: float = 0.3,
                 max_detections: int | None = None) -> list[Detection]:
    """Weighted NMS (MediaPipe's WEIGHTED algorithm): the best box and every box overlapping
    it by more than ``iou_threshold`` are merged into their score-weighted mean; the merged
    detection keeps the best score."""
    remaining = _by_score(detections)
    kept: list[Detection] = []
    while remaining and (max_detections is None or len(kept) < max_detections):
        best = remaining[0]
        cluster = [d for d in remaining if iou(best.box, d.box) > iou_threshold or d is best]
        remaining = [d for d in remaining if not any(d is c for c in cluster)]
        weights = np.array([d.score for d in cluster])
        box = np.average(np.stack([d.box for d in cluster]), axis=0, weights=weights)
        kps = np.average(np.stack([d.keypoints for d in cluster]), axis=0, weights=weights)
        kept.append(Detection(best.score, box, kps))
    return kept
