"""Image-side helpers for vision models: SSD anchors, box decoding, NMS, pictures.

Pure numpy (PNG encoding uses zlib): no image library is needed.

- ``anchors``: SSD anchor generation (MediaPipe's SsdAnchorsCalculator scheme).
- ``ssd``: raw box regressors + scores -> detections; plain and weighted NMS.
- ``image``: resizing, letterboxing, drawing boxes, writing PNG files.
"""
from __future__ import annotations

from .anchors import BLAZEFACE_SHORT_RANGE, AnchorOptions, ssd_anchors
from .image import draw_box, draw_points, letterbox, resize, write_png
from .ssd import BLAZEFACE_DECODE, DecodeOptions, Detection, decode_ssd, iou, nms, weighted_nms

__all__ = ["AnchorOptions", "BLAZEFACE_SHORT_RANGE", "ssd_anchors", "DecodeOptions", "BLAZEFACE_DECODE",
           "Detection", "decode_ssd", "iou", "nms", "weighted_nms", "resize", "letterbox", "draw_box",
           "draw_points", "write_png"]
