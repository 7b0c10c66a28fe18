"""Face detection with MediaPipe's BlazeFace (short range), quantized by our quantizer.

Pre-processing as MediaPipe does it: the picture is letterboxed into 128x128 (aspect
ratio kept, padding), values mapped from 0..255 to [-1, 1].  Post-processing: SSD
decoding with the short-range anchors, sigmoid scores over a threshold, weighted NMS,
and the letterbox undone so boxes are in the source picture's pixels.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import libnpu
from libnpu import model_zoo
from libnpu.tools.vision import (
    BLAZEFACE_DECODE,
    BLAZEFACE_SHORT_RANGE,
    Detection,
    decode_ssd,
    draw_box,
    draw_points,
    letterbox,
    nms,
    ssd_anchors,
    weighted_nms,
    write_png,
)
from libnpu.tools.vision.image import Letterbox, resize
from libnpu.tools.vision.ssd import DecodeOptions

if TYPE_CHECKING:
    from .run import LoadTiming

__all__ = ["INPUT_SIZE", "model_input", "preprocess", "detect_normalized", "postprocess", "FaceDetector",
           "calibration_set", "second_picture", "annotate", "load_detector", "reference_detections", "run_faces"]

INPUT_SIZE = 128
_ANCHORS = ssd_anchors(BLAZEFACE_SHORT_RANGE)


def model_input(pixels: np.ndarray) -> np.ndarray:
    """RGB pixels (H, W, 3), 0..255, already at the model's size -> the (1, H, W, 3) float32 input in [-1, 1]."""
    return (np.asarray(pixels) / 127.5 - 1.0).astype(np.float32)[None]


def preprocess(image: np.ndarray) -> tuple[np.ndarray, Letterbox]:
    """(H, W, 3) uint8 -> the (1, 128, 128, 3) float32 input in [-1, 1] and its letterbox."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] < 3:
        raise ValueError(f"expected an RGB picture (H, W, 3), got shape {image.shape}")
    fitted, box = letterbox(image[..., :3], INPUT_SIZE, INPUT_SIZE, fill=0.0)
    return model_input(fitted), box


def detect_normalized(regressors: np.ndarray, scores: np.ndarray, anchors: np.ndarray | None = None, *,
                      input_size: tuple[int, int] = (INPUT_SIZE, INPUT_SIZE), threshold: float = 0.5,
                      iou_threshold: float = 0.3, weighted: bool = True) -> list[Detection]:
    """Raw model outputs -> detections in coordinates normalized to the model input, best
    first. ``anchors``: (N, 4) x/y centre, width, height (default: short range's 896);
    ``input_size``: the model input's (width, height), the regressors' pixel scale."""
    width, height = input_size
    options = DecodeOptions(**{**BLAZEFACE_DECODE.__dict__, "min_score_thresh": threshold, "x_scale": float(width),
                               "w_scale": float(width), "y_scale": float(height), "h_scale": float(height)})
    found = decode_ssd(regressors, scores, _ANCHORS if anchors is None else anchors, options)
    return (weighted_nms if weighted else nms)(found, iou_threshold)


def postprocess(regressors: np.ndarray, scores: np.ndarray, box: Letterbox, *, threshold: float = 0.5,
                iou_threshold: float = 0.3, weighted: bool = True) -> list[Detection]:
    """Raw model outputs -> detections in the source picture's pixels, best first."""
    found = detect_normalized(regressors, scores, threshold=threshold, iou_threshold=iou_threshold, weighted=weighted)
    out = []
    for d in found:
        corners = box.to_source(d.box.reshape(2, 2)).reshape(4)
        out.append(Detection(d.score, corners, box.to_source(d.keypoints)))
    return out


@dataclass
class FaceDetector:
    """BlazeFace on the device: ``detect(picture)`` -> detections (pixels), with the timing."""
    model: libnpu.CompiledModel
    threshold: float = 0.5
    iou_threshold: float = 0.3
    weighted: bool = True
    last_timing: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.request = self.model.create_request()

    def detect(self, image: np.ndarray) -> list[Detection]:
        x, box = preprocess(image)
        regressors, scores = self.request.infer([x], dequantized=True)
        self.last_timing = {"latency_ms": self.request.timing.latency_s * 1e3,
                            "device_time_ms": self.request.timing.device_time_ns / 1e6}
        return postprocess(regressors, scores, box, threshold=self.threshold, iou_threshold=self.iou_threshold,
                           weighted=self.weighted)

    def close(self) -> None:
        self.request.release()
        self.model.close()


def _scaled_crop(image: np.ndarray, y: int, x: int, size: int) -> np.ndarray:
    return resize(image[y:y + size, x:x + size], INPUT_SIZE, INPUT_SIZE)


def calibration_set() -> list[list[np.ndarray]]:
    """Calibration inputs: crops of scikit-image's astronaut at several scales and offsets,
    mirrored too (the same pre-processing as inference; never the whole, uncropped picture)."""
    image = model_zoo.sample_image()
    crops = [_scaled_crop(image, y, x, s) for y, x, s in
             [(0, 64, 384), (128, 128, 256), (0, 0, 256), (256, 256, 256), (0, 256, 256), (64, 0, 384),
              (128, 0, 384), (32, 96, 320)]]
    crops += [c[:, ::-1] for c in crops[:4]]
    return [[model_input(c)] for c in crops]


def second_picture() -> np.ndarray:
    """A second test picture made locally: the astronaut mirrored, its upper 300x300 part
    around the face enlarged to 340x340 and placed off-centre on a 400x360 gradient canvas
    (so a non-square letterbox and offsets are exercised)."""
    image = model_zoo.sample_image()[:300, ::-1][:, 106:406]
    part = np.clip(resize(image, 340, 340) + 0.5, 0, 255).astype(np.uint8)
    ys, xs = np.mgrid[0:360, 0:400]
    canvas = np.stack([60 + xs * 100 // 400, 90 + ys * 80 // 360, 140 + 0 * xs], axis=-1).astype(np.uint8)
    canvas[20:360, 50:390] = part
    return canvas


def annotate(image: np.ndarray, detections: Sequence[Detection]) -> np.ndarray:
    """A copy of ``image`` with each detection's box (red) and keypoints (green) drawn."""
    out = np.array(image[..., :3], np.uint8)
    thickness = max(2, round(max(out.shape[:2]) / 200))
    for d in detections:
        draw_box(out, d.box, (255, 0, 0), thickness)
        draw_points(out, d.keypoints, (0, 255, 0), thickness)
    return out


#: The detector is compiled int8 only (``--recipe fast``): its crops of one picture held out
#: score the classificators at cosine 0.97 in int8, so the default recipe would escalate to
#: int16 (six times the compile), while the int8 detector finds the faces this demo shows
#: (tests/libnpu/tools/test_faces.py, test_c_runtime.py: score > 0.8, IoU > 0.85 against float).
DETECTOR_RECIPE = "fast"


def load_detector(*, devroot: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
                  threshold: float = 0.5) -> tuple[FaceDetector, LoadTiming]:
    """Compile (cached) and load the quantized BlazeFace; returns (detector, LoadTiming)."""
    from .run import load_timed
    path = model_zoo.blazeface_short_range()
    model, timing, _ = load_timed(path, lambda descs: [preprocess(model_zoo.sample_image())[0]],
                                  devroot=devroot, cache_dir=cache_dir, calibration=calibration_set(),
                                  recipe=DETECTOR_RECIPE)
    return FaceDetector(model, threshold), timing


def reference_detections(image: np.ndarray, threshold: float = 0.5) -> list[Detection]:
    """The float BlazeFace run by LiteRT (needs ai-edge-litert), decoded the same way."""
    from .models import LiteRT
    x, box = preprocess(image)
    it = LiteRT(model_zoo.blazeface_short_range(), "default")
    outputs = dict(zip((d["name"] for d in it.output_details), it.run([x])))
    return postprocess(outputs["regressors"], outputs["classificators"], box, threshold=threshold)


def run_faces(images: Sequence[str | os.PathLike], *, out_dir: str | os.PathLike = ".",
              devroot: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
              threshold: float = 0.5, as_json: bool = False, reference: bool = False) -> int:
    """The face-detection program of the main job (``npu faces``)."""
    from .models import ModelSpecError, litert_available
    pictures: list[tuple[str, np.ndarray]] = []
    for p in images:
        try:
            pictures.append((Path(p).stem, model_zoo.load_png(p)))
        except (OSError, model_zoo.ModelZooError) as exc:
            raise ModelSpecError(f"{p}: cannot read the picture ({exc})") from exc
    if not images:
        pictures = [("astronaut", model_zoo.sample_image()), ("astronaut_mirrored_zoomed", second_picture())]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    detector, timing = load_detector(devroot=devroot, cache_dir=cache_dir, threshold=threshold)
    results: list[dict[str, Any]] = []
    try:
        for name, image in pictures:
            started = time.perf_counter()
            found = detector.detect(image)
            total_ms = (time.perf_counter() - started) * 1e3
            png = write_png(out / f"{name}_faces.png", annotate(image, found))
            entry = {"picture": name, "size": list(image.shape[:2]), "png": str(png.resolve()),
                     "latency_ms": round(detector.last_timing["latency_ms"], 3),
                     "device_time_ms": round(detector.last_timing["device_time_ms"], 3),
                     "with_pre_post_ms": round(total_ms, 3),
                     "faces": [{"score": round(d.score, 4), "box": [round(float(v), 1) for v in d.box]}
                               for d in found]}
            if reference and litert_available():
                from libnpu.tools.vision import iou
                ref = reference_detections(image, threshold)
                entry["float_litert_faces"] = [{"score": round(d.score, 4), "box": [round(float(v), 1) for v in d.box]}
                                               for d in ref]
                if ref and found:
                    entry["iou_vs_float"] = round(iou(found[0].box, ref[0].box), 3)
            results.append(entry)
    finally:
        detector.close()
    if as_json:
        print(json.dumps({"load": timing.as_dict(), "pictures": results}, indent=2))
        return 0
    what = "cache hit" if timing.cache_hit else "compiled and quantized (cache miss)"
    print(f"BlazeFace short range, int8 by our quantizer: {what} {timing.compile_s * 1e3:.0f} ms, "
          f"load {timing.load_s * 1e3:.1f} ms, first inference {timing.first_inference_s * 1e3:.1f} ms")
    for e in results:
        print(f"{e['picture']} {e['size'][1]}x{e['size'][0]}: {len(e['faces'])} face(s); inference latency "
              f"{e['latency_ms']:.2f} ms, device time {e['device_time_ms']:.3f} ms "
              f"({e['with_pre_post_ms']:.1f} ms with pre/post-processing)")
        for f in e["faces"]:
            print(f"  face score {f['score']:.3f} box x {f['box'][0]:.0f}..{f['box'][2]:.0f} "
                  f"y {f['box'][1]:.0f}..{f['box'][3]:.0f}")
        if "iou_vs_float" in e:
            print(f"  float model in LiteRT: {len(e['float_litert_faces'])} face(s), best box IoU with ours "
                  f"{e['iou_vs_float']:.3f}")
        print(f"  wrote {e['png']}")
    return 0
