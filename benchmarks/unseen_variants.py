"""How a mediapipe model of issue 13 does on pictures it has never seen, beyond the two the
acceptance uses: 18 variants (astronaut, chelsea and text, each flipped either way,
cropped at two places and with contrast lowered or raised), run on the device against
float LiteRT, compiled as ``benchmarks/models_in_the_wild.py`` compiles it (``--recipe
accurate``; ``--option key=json`` adds quantizer options, ``--plain`` drops the recipe).

For each output: the rms error over all variants and values, the worst |error| and how many
variants exceed issue 13's bar (an output of fewer than 8 values: |error| <= 0.05; else
cosine >= 0.98). It says whether a model passes the acceptance by margin or by the draw of
its two evaluation pictures. Run from the repository root::

    python -m benchmarks.unseen_variants hand_recrop [--option int16_grid='"per_channel"']
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.models_in_the_wild import (
    ABS_BAR,
    CALIBRATION,
    COSINE_BAR,
    RECIPE,
    SMALL_OUTPUT,
    _device_outputs,
    _litert,
    _litert_run,
    _match,
    cosine,
    picture_feed,
    recipe_options,
)
from benchmarks.scratch_device import ScratchDevice
from libnpu import model_zoo
from libnpu.tools.compile import compile_model_file

PICTURES = ("astronaut", "chelsea", "text")


def _crop(picture: np.ndarray, top: float, left: float, size: float = 0.75) -> np.ndarray:
    h, w = picture.shape[:2]
    y, x = int(top * h * (1 - size)), int(left * w * (1 - size))
    return picture[y:y + int(h * size), x:x + int(w * size)]


def _contrast(picture: np.ndarray, factor: float) -> np.ndarray:
    mean = picture.astype(np.float64).mean()
    return np.clip((picture - mean) * factor + mean, 0, 255).astype(np.uint8)


#: Six transforms of a picture: none of them is a calibration picture.
TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "flip_lr": lambda p: p[:, ::-1],
    "flip_ud": lambda p: p[::-1],
    "crop_top_left": lambda p: _crop(p, 0.0, 0.0),
    "crop_bottom_right": lambda p: _crop(p, 1.0, 1.0),
    "contrast_low": lambda p: _contrast(p, 0.6),
    "contrast_high": lambda p: _contrast(p, 1.4),
}


def variants() -> list[tuple[str, np.ndarray]]:
    """The 18 pictures: (name, uint8 RGB)."""
    return [(f"{name}/{how}", np.ascontiguousarray(fn(model_zoo.picture(name))))
            for name in PICTURES for how, fn in TRANSFORMS.items()]


def measure(model: str, options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per output: rms error, worst error (or cosine), and the variants missing the bar."""
    path = model_zoo.mediapipe_model(model)
    interp = _litert(path)
    shape = tuple(interp.get_input_details()[0]["shape"])
    calibration = [[picture_feed(model_zoo.picture(p), shape)] for p in CALIBRATION]
    pictures = variants()
    feeds = [[picture_feed(p, shape)] for _, p in pictures]
    with tempfile.TemporaryDirectory(prefix="npu-variants-") as tmp, ScratchDevice(cores=2, memory="2G") as device:
        compiled = compile_model_file(path, calibration, cache_dir=str(Path(tmp) / "cache"), progress=False,
                                      **options)
        got = _device_outputs(compiled.loadable, device.devroot, feeds)
    want = [_litert_run(interp, feed) for feed in feeds]
    result = {}
    for ref_name, dev_name in _match(want[0], got[0]):
        pairs = [(np.asarray(g[dev_name], np.float64).reshape(-1), np.asarray(w[ref_name], np.float64).reshape(-1))
                 for g, w in zip(got, want)]
        errors = np.concatenate([a - b for a, b in pairs])
        if pairs[0][1].size < SMALL_OUTPUT:
            per_variant = [float(np.abs(a - b).max()) for a, b in pairs]
            missed = [n for (n, _), v in zip(pictures, per_variant) if v > ABS_BAR]
            worst = {"max_abs_error": round(max(per_variant), 5)}
        else:
            per_variant = [cosine(a, b) for a, b in pairs]
            missed = [n for (n, _), v in zip(pictures, per_variant) if v < COSINE_BAR]
            worst = {"min_cosine": round(min(per_variant), 5)}
        result[ref_name] = {"rms_error": round(float(np.sqrt(np.mean(errors ** 2))), 5), **worst,
                            "variants": len(pairs), "missing_the_bar": missed,
                            "per_variant": {n: round(v, 5) for (n, _), v in zip(pictures, per_variant)}}
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.unseen_variants", description=__doc__.split("\n")[0])
    p.add_argument("model", choices=model_zoo.MEDIAPIPE_MODELS)
    p.add_argument("--plain", action="store_true", help=f"the compiler's defaults, not {RECIPE}")
    p.add_argument("--option", action="append", default=[], metavar="KEY=JSON", help="another quantizer option")
    args = p.parse_args(argv)
    options = recipe_options(p, args.plain, args.option)
    print(json.dumps({"model": args.model, "options": options, "outputs": measure(args.model, options)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
