"""Pictures as numpy arrays (H, W, C) uint8: resizing, letterboxing, drawing, PNG output."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["resize", "Letterbox", "letterbox", "draw_box", "draw_points", "write_png"]


def _weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) linear-interpolation weights; a widened triangle when shrinking (antialiasing)."""
    ratio = n_in / n_out
    support = max(1.0, ratio)
    centres = (np.arange(n_out) + 0.5) * ratio - 0.5
    taps = np.arange(n_in)
    w = np.clip(1.0 - np.abs(taps[None, :] - centres[:, None]) / support, 0.0, None)
    w /= w.sum(axis=1, keepdims=True)
    return w


def resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize (antialiased when shrinking) of an (H, W, C) or (H, W) array; float32 out."""
    img = np.asarray(image, np.float32)
    if img.ndim not in (2, 3) or img.shape[0] == 0 or img.shape[1] == 0:
        raise ValueError(f"expected an (H, W[, C]) picture, got shape {img.shape}")
    if height <= 0 or width <= 0:
        raise ValueError(f"bad target size {height}x{width}")
    wy = _weights(img.shape[0], height).astype(np.float32)
    wx = _weights(img.shape[1], width).astype(np.float32)
    if img.ndim == 2:
        return wy @ img @ wx.T
    return np.einsum("yh,hwc,xw->yxc", wy, img, wx, optimize=True)


@dataclass(frozen=True)
class Letterbox:
    """How a picture was fitted into a model input: scale, then padding on each side."""
    source_height: int
    source_width: int
    height: int
    width: int
    scale: float
    pad_x: float
    pad_y: float

    def to_source(self, xy: np.ndarray) -> np.ndarray:
        """Points (..., 2) normalised to the model input -> pixels of the source picture."""
        xy = np.asarray(xy, np.float64)
        x = (xy[..., 0] * self.width - self.pad_x) / self.scale
        y = (xy[..., 1] * self.height - self.pad_y) / self.scale
        return np.stack([x, y], axis=-1)


def letterbox(image: np.ndarray, height: int, width: int, fill: float = 0.0) -> tuple[np.ndarray, Letterbox]:
    """Fit ``image`` into height x width keeping its aspect ratio, padding the rest with ``fill``.

    Returns the float32 picture and the :class:`Letterbox` mapping back to the source.
    """
    src_h, src_w = image.shape[:2]
    scale = min(height / src_h, width / src_w)
    new_h, new_w = max(1, round(src_h * scale)), max(1, round(src_w * scale))
    out = np.full((height, width) + image.shape[2:], fill, np.float32)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    out[top:top + new_h, left:left + new_w] = resize(image, new_h, new_w)
    # The exact scale per axis after rounding the new size.
    return out, Letterbox(src_h, src_w, height, width, new_w / src_w, float(left), float(top))


def draw_box(image: np.ndarray, box: np.ndarray, color=(255, 0, 0), thickness: int = 3) -> None:
    """Draw the outline of ``box`` (xmin, ymin, xmax, ymax in pixels) into ``image`` in place."""
    h, w = image.shape[:2]
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    x0, x1 = sorted((min(max(x0, 0), w - 1), min(max(x1, 0), w - 1)))
    y0, y1 = sorted((min(max(y0, 0), h - 1), min(max(y1, 0), h - 1)))
    t = max(1, thickness)
    image[y0:min(y0 + t, y1 + 1), x0:x1 + 1] = color
    image[max(y1 - t + 1, y0):y1 + 1, x0:x1 + 1] = color
    image[y0:y1 + 1, x0:min(x0 + t, x1 + 1)] = color
    image[y0:y1 + 1, max(x1 - t + 1, x0):x1 + 1] = color


def draw_points(image: np.ndarray, points: np.ndarray, color=(0, 255, 0), radius: int = 2) -> None:
    """Draw filled squares at ``points`` (N, 2) of (x, y) pixels, in place."""
    h, w = image.shape[:2]
    for x, y in np.asarray(points).reshape(-1, 2):
        xi, yi = int(round(x)), int(round(y))
        if 0 <= xi < w and 0 <= yi < h:
            image[max(yi - radius, 0):yi + radius + 1, max(xi - radius, 0):xi + radius + 1] = color


def write_png(path: str | os.PathLike, image: np.ndarray) -> Path:
    """Write an (H, W) grey, (H, W, 3) RGB or (H, W, 4) RGBA uint8 picture as a PNG file."""
    img = np.asarray(image)
    if img.dtype != np.uint8:
        raise ValueError(f"write_png needs uint8 pixels, got {img.dtype}")
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or img.shape[2] not in (1, 3, 4) or 0 in img.shape:
        raise ValueError(f"write_png needs (H, W), (H, W, 3) or (H, W, 4), got {image.shape}")
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    Image.fromarray(np.ascontiguousarray(img[:, :, 0] if img.shape[2] == 1 else img)).save(tmp, format="PNG")
    os.replace(tmp, path)
    return path
