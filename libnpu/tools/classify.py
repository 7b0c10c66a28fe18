"""Image classification with the MLPerf-Tiny ResNet-8 (CIFAR-10, int8) on the device.

The model takes 32x32 RGB int8 pictures: pixel - 128 (scale 1/128, zero point 0),
as in the MLPerf-Tiny reference harness.  Sample inputs are made locally: thumbnails
of the astronaut picture and a few synthetic scenes, plus random noise.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

import libnpu
from libnpu import model_zoo
from libnpu.tools.vision import resize

__all__ = ["CIFAR10_CLASSES", "to_input", "sample_inputs", "Classifier", "run_classify"]

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def to_input(picture: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 -> (1, 32, 32, 3) int8 model input (resized, pixel - 128)."""
    small = np.clip(resize(np.asarray(picture)[..., :3], 32, 32) + 0.5, 0, 255)
    return (small.astype(np.int16) - 128).astype(np.int8)[None]


def _scene(top: tuple[int, int, int], bottom: tuple[int, int, int], blob: tuple[int, int, int] | None,
           seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, 32)[:, None, None]
    img = (1 - t) * np.array(top) + t * np.array(bottom) + rng.normal(0, 6, (32, 32, 3))
    if blob is not None:
        ys, xs = np.mgrid[0:32, 0:32]
        mask = ((ys - 18) / 6.0) ** 2 + ((xs - 15) / 10.0) ** 2 < 1
        img[mask] = blob
    return np.clip(img, 0, 255).astype(np.uint8)


def sample_inputs() -> list[tuple[str, np.ndarray]]:
    """(name, int8 input) pairs: astronaut thumbnails, synthetic scenes, noise."""
    astronaut = model_zoo.sample_image()
    pictures = [
        ("astronaut (whole picture)", astronaut),
        ("astronaut (space shuttle crop)", astronaut[0:300, 340:512]),
        ("synthetic: sky over sea with a grey hull", _scene((135, 180, 235), (20, 60, 120), (110, 110, 115), 1)),
        ("synthetic: sky over grass with a brown body", _scene((150, 190, 230), (60, 130, 40), (120, 80, 40), 2)),
    ]
    inputs = [(name, to_input(p)) for name, p in pictures]
    inputs.append(("random noise", np.random.default_rng(3).integers(-128, 128, (1, 32, 32, 3)).astype(np.int8)))
    return inputs


class Classifier:
    """ResNet-8 on the device: ``classify(int8 input)`` -> (class index, probabilities)."""

    def __init__(self, model: libnpu.CompiledModel) -> None:
        self.model = model
        self.request = model.create_request()

    def classify(self, x: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """(top-1 index, float probabilities, raw int8 output)."""
        raw = self.request.infer([x])[0]
        probs = self.request.outputs(dequantized=True)[0].reshape(-1)
        return int(probs.argmax()), probs, raw

    def close(self) -> None:
        self.request.release()
        self.model.close()


def run_classify(*, devroot: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
                 as_json: bool = False) -> int:
    """The classification program of the main job (``npu classify``)."""
    from .models import LiteRT, litert_available
    from .run import load_timed
    path = model_zoo.resnet8_cifar10()
    samples = sample_inputs()
    model, timing, _ = load_timed(path, lambda descs: [samples[0][1]], devroot=devroot, cache_dir=cache_dir)
    classifier = Classifier(model)
    reference = LiteRT(path, "reference") if litert_available() else None
    rows: list[dict[str, Any]] = []
    try:
        for name, x in samples:
            top, probs, raw = classifier.classify(x)
            row = {"input": name, "top1": CIFAR10_CLASSES[top], "probability": round(float(probs[top]), 4),
                   "latency_ms": round(classifier.request.timing.latency_s * 1e3, 3),
                   "device_time_ms": round(classifier.request.timing.device_time_ns / 1e6, 4)}
            if reference is not None:
                row["identical_to_litert_builtin_ref"] = bool(np.array_equal(raw, reference.run([x])[0]))
            rows.append(row)
    finally:
        classifier.close()
    if as_json:
        print(json.dumps({"model": str(path), "load": timing.as_dict(), "results": rows}, indent=2))
        return 0
    what = "cache hit" if timing.cache_hit else "compiled (cache miss)"
    print(f"ResNet-8 CIFAR-10 int8: {what} {timing.compile_s * 1e3:.1f} ms, load {timing.load_s * 1e3:.1f} ms, "
          f"first inference {timing.first_inference_s * 1e3:.1f} ms")
    for r in rows:
        same = {True: ", output byte-identical to LiteRT BUILTIN_REF", False: ", OUTPUT DIFFERS FROM LiteRT",
                None: ""}[r.get("identical_to_litert_builtin_ref")]
        print(f"  {r['input']:<44} top-1 {r['top1']:<10} p={r['probability']:.3f}  latency {r['latency_ms']:.2f} ms, "
              f"device time {r['device_time_ms']:.3f} ms{same}")
    return 0 if all(r.get("identical_to_litert_builtin_ref", True) for r in rows) else 1
