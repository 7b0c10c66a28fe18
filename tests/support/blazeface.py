"""BlazeFace short-range post-processing (anchors + box decoding) for the tests.

Anchors follow MediaPipe's face_detection_short_range graph: a 16x16 grid (stride 8)
with 2 anchors per cell, then an 8x8 grid (stride 16) with 6; fixed anchor size; box
offsets are in input pixels (128).
"""
from __future__ import annotations

import numpy as np


def anchors() -> np.ndarray:
    out = []
    for grid, per_cell in ((16, 2), (8, 6)):
        for y in range(grid):
            for x in range(grid):
                out.extend([((x + 0.5) / grid, (y + 0.5) / grid)] * per_cell)
    return np.asarray(out)


def best_face(regressors: np.ndarray, classificators: np.ndarray) -> tuple[float, np.ndarray]:
    """(score, box [x0, y0, x1, y1] in 0..1 of the input) of the most confident anchor."""
    reg = regressors.reshape(896, 16).astype(np.float64)
    logits = np.clip(classificators.reshape(896).astype(np.float64), -80, 80)
    scores = 1 / (1 + np.exp(-logits))
    i = int(scores.argmax())
    a = anchors()[i]
    cx, cy = reg[i, 0] / 128 + a[0], reg[i, 1] / 128 + a[1]
    w, h = reg[i, 2] / 128, reg[i, 3] / 128
    return float(scores[i]), np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])


def iou(a: np.ndarray, b: np.ndarray) -> float:
    x0, y0 = np.maximum(a[:2], b[:2])
    x1, y1 = np.minimum(a[2:], b[2:])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    return float(inter / (area(a) + area(b) - inter))
