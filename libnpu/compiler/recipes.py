"""Named sets of quantizer options (``npu compile --recipe``, ``to_int8_graph(recipe=...)``).

A recipe only fills in the options the caller left unset: an option given explicitly
always wins. int8 models are imported as they are, so no recipe touches them.

* ``default``: the quantizer's own defaults (minmax ranges, nearest rounding, int8 only).
* ``accurate``: GPTQ weight rounding (:mod:`libnpu.compiler.weight_rounding`), bias
  correction (:mod:`libnpu.compiler.bias_correction`) where it helps on held-out
  calibration data (``"auto"``), and int16 activations where the
  int8 graph misses the output target on the calibration data (``int16="auto"``,
  :mod:`libnpu.compiler.mixed_precision`). Slower to compile (each of them runs the graph
  on the calibration data) and, where layers go int16, slower to run. Bias correction
  matters most for deep networks whose small per-layer mean errors add up: mediapipe's
  selfie_segmentation went from cosine 0.29 to 0.98 against float (simulated, two unseen
  pictures), as its layers' own errors (30-40 dB SQNR) grew to -2 dB end to end; but it
  ruined pose_landmark_full's presence score, hence "auto".
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .ir import IRError

__all__ = ["RECIPES", "RecipeError", "apply_recipe"]

RECIPES: dict[str, dict[str, Any]] = {
    "default": {},
    "accurate": {"weight_rounding": "gptq", "bias_correction": "auto", "int16": "auto"},
}


class RecipeError(IRError):
    """An unknown recipe name."""


def apply_recipe(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with its ``recipe`` entry (if any) replaced by that recipe's options,
    the ones given explicitly taking precedence."""
    result = dict(options)
    name = result.pop("recipe", None)
    if name is None:
        return result
    if name not in RECIPES:
        raise RecipeError(f"unknown recipe {name!r} (expected one of {', '.join(RECIPES)})")
    return {**RECIPES[name], **result}
