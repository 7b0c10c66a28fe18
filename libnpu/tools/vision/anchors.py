"""SSD anchors, generated the way MediaPipe's SsdAnchorsCalculator does.

Layers that share a stride share one feature map: their anchors are emitted cell by
cell together.  Each layer contributes one anchor per aspect ratio, plus (when
``interpolated_scale_aspect_ratio`` > 0) one whose scale is the geometric mean of this
layer's scale and the next one's.  With ``fixed_anchor_size`` every anchor is 1x1 (the
model regresses absolute sizes), which is what BlazeFace uses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["AnchorOptions", "BLAZEFACE_SHORT_RANGE", "ssd_anchors"]


@dataclass(frozen=True)
class AnchorOptions:
    input_height: int
    input_width: int
    strides: tuple[int, ...]
    min_scale: float = 0.1484375
    max_scale: float = 0.75
    aspect_ratios: tuple[float, ...] = (1.0,)
    interpolated_scale_aspect_ratio: float = 1.0
    anchor_offset_x: float = 0.5
    anchor_offset_y: float = 0.5
    fixed_anchor_size: bool = True

    @property
    def num_layers(self) -> int:
        return len(self.strides)


#: MediaPipe face_detection_short_range: 16x16 cells x 2 anchors + 8x8 cells x 6 = 896.
BLAZEFACE_SHORT_RANGE = AnchorOptions(input_height=128, input_width=128, strides=(8, 16, 16, 16))


def _scale(options: AnchorOptions, layer: int) -> float:
    if options.num_layers == 1:
        return (options.min_scale + options.max_scale) / 2
    return options.min_scale + (options.max_scale - options.min_scale) * layer / (options.num_layers - 1)


def ssd_anchors(options: AnchorOptions = BLAZEFACE_SHORT_RANGE) -> np.ndarray:
    """Anchors as a float32 array (N, 4): x_center, y_center, width, height, in 0..1."""
    if not options.strides:
        raise ValueError("anchor options need at least one stride")
    rows: list[tuple[float, float, float, float]] = []
    layer = 0
    while layer < options.num_layers:
        sizes: list[tuple[float, float]] = []   # (width, height) of each anchor in a cell
        last = layer
        while last < options.num_layers and options.strides[last] == options.strides[layer]:
            scale = _scale(options, last)
            for ratio in options.aspect_ratios:
                sizes.append((scale * math.sqrt(ratio), scale / math.sqrt(ratio)))
            if options.interpolated_scale_aspect_ratio > 0:
                following = 1.0 if last == options.num_layers - 1 else _scale(options, last + 1)
                mean = math.sqrt(scale * following)
                ratio = options.interpolated_scale_aspect_ratio
                sizes.append((mean * math.sqrt(ratio), mean / math.sqrt(ratio)))
            last += 1
        stride = options.strides[layer]
        rows_n = math.ceil(options.input_height / stride)
        cols_n = math.ceil(options.input_width / stride)
        for y in range(rows_n):
            for x in range(cols_n):
                cx = (x + options.anchor_offset_x) / cols_n
                cy = (y + options.anchor_offset_y) / rows_n
                for w, h in sizes:
                    rows.append((cx, cy, 1.0, 1.0) if options.fixed_anchor_size else (cx, cy, w, h))
        layer = last
    return np.asarray(rows, np.float32)
