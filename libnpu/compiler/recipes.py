"""Named sets of quantizer options (``npu compile --recipe``, ``to_int8_graph(recipe=...)``).

A recipe only fills in the options the caller left unset: an option given explicitly
always wins. int8 models are imported as they are, so no recipe touches them.

* ``default`` (also when no recipe is named): accurate by default
  (:mod:`libnpu.compiler.escalation`): a share of the calibration data is held out, and the
  quantizer escalates from int8 step by step (int16 activations, int16 weights, bias
  correction) until every output reaches the fidelity target (``target``, cosine 0.99) on
  it, within four steps; what it chose and each output's score are in the metadata.
* ``fast``: the quantizer's own defaults (minmax ranges, nearest rounding, int8 only) on
  all the calibration data, nothing measured: the default until 2026-11-29, and what tests
  whose point is not accuracy use.
* ``accurate``: GPTQ weight rounding (:mod:`libnpu.compiler.weight_rounding`) and int16
  activations where the int8 graph misses an output cosine of 0.999 on the calibration
  data (``int16="auto"``, ``int16_target=0.999``, :mod:`libnpu.compiler.mixed_precision`),
  and int16 weights on those int16 layers where the outputs still miss 0.999
  (``int16_weights="auto"``: face_landmark and hand_recrop, whose int8 weights were most
  of the error left). Slower to compile (all three run the graph on the calibration data)
  and, where layers go int16, slower to run. The int16 target is above the 0.99 default
  because calibration pictures flatter: selfie_segmentation_landscape reached 0.992 on its
  ten texture pictures with 32 int16 layers but 0.889 on unseen pictures of people; at
  0.999 all its 114 layers go int16 and the unseen pictures reach 0.982
  (``benchmarks/models_in_the_wild.py``).
  Also channel equalization (``equalize=True``, :mod:`libnpu.compiler.equalization`): it
  changes no function, and the finer the weights the more the activations' grids are what
  is left (pose_landmark_full with int16 weights: segmentation 0.97 -> 0.995 simulated).
  And per-channel int16 grids (``int16_grid="per_channel"``, :mod:`libnpu.compiler.channel_grids`):
  hand_recrop's crop box, whose error is its int16 tensors' rounding, from 0.048 to 0.023
  pixels rms on 18 unseen picture variants (0.0569 -> 0.0411 on the acceptance's two, bar
  0.05), pose_landmark_full's segmentation 0.9906 -> 0.9983, the other models measured as
  before within their bars (``benchmarks/models_in_the_wild.py``). ``--int16-grid
  per-tensor`` gives the grids LiteRT has (a model with per-channel ones cannot be exported
  to ``.tflite``).

Not in ``accurate``: each int16 tensor's own headroom (``int16_headroom="held-out"``,
:func:`libnpu.compiler.mixed_precision.held_out_headroom`) instead of twice every range. It
takes hand_recrop's crop box (pixels) from 0.042 to 0.026 pixels rms on 18 unseen picture
variants and passes issue 13's 0.05 on its two evaluation pictures (0.0569 -> 0.0456), but
face_detection_short_range's classificators fall from cosine 0.9996 to 0.977: faces drive six
of its tensors 1.3-1.67 times beyond the calibration textures' range, where one calibration
picture held out went at most 1.0-1.22 beyond the others. Add it where it pays:
``--recipe accurate --int16-headroom held-out``.

Bias correction is not in ``accurate``: measured on mediapipe's models (device, two unseen
pictures) it takes selfie_segmentation from cosine 0.41 to 0.99 but pose_landmark_full's
presence score from |error| 0.05 to 0.91 and hand_landmark_full's handedness from 0.02 to
0.07; its ``"auto"`` mode (kept when it helps on held-out calibration pictures) chose
wrongly on selfie_segmentation, hand_landmark_full and face_landmark, as textures do not
predict people. Add it where it pays: ``--recipe accurate --bias-correction``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .ir import IRError

__all__ = ["RECIPES", "RecipeError", "apply_recipe", "escalates"]

RECIPES: dict[str, dict[str, Any]] = {
    "default": {},
    "fast": {},
    "accurate": {"weight_rounding": "gptq", "int16": "auto", "int16_target": 0.999, "int16_weights": "auto",
                 "equalize": True, "int16_grid": "per_channel"},
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


def escalates(options: Mapping[str, Any]) -> bool:
    """Whether ``options`` ask for the default recipe, which measures and escalates
    (:mod:`libnpu.compiler.escalation`): no recipe named, or ``"default"``."""
    return options.get("recipe") in (None, "default")
