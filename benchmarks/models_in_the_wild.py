"""Acceptance for issue 13, "Done when": models from the wild, compiled and run on the device.

Two parts, each measured exactly as the issue states it:

* **mediapipe**: the 13 float models of the ``mediapipe==0.10.14`` wheel that plain LiteRT
  runs. Each is quantized by the compiler, calibrated on ten natural pictures of the
  ``scikit-image`` wheel (resized to the model's input, scaled to [0, 1]), loaded on a
  scratch device and run on two other pictures; float LiteRT gets the same inputs. Every
  output must reach cosine similarity >= 0.98 with LiteRT's (an output of fewer than 8
  values: max absolute difference <= 0.05).
* **onnx**: every operator of FuriosaAI's supported list, with its variants, as a
  single-node float ONNX model; compiled with random calibration in [-1, 1], run on the
  device on inputs in [-1, 1] and compared with onnxruntime: max |error| <= 5% of
  max |reference| on every output.

A model the compiler refuses, or that fails on the device, is a failure with its one-line
reason: nothing is skipped. Run from the repository root::

    python -m benchmarks.models_in_the_wild                 # everything (several minutes)
    python -m benchmarks.models_in_the_wild --models hand_landmark_lite Conv Clip_min_max
    python -m benchmarks.models_in_the_wild --part onnx --json

Measured 2026-11-24 on branch quant (before the operator and fallback branches merged),
recipe below, on the device: mediapipe 1/13 pass (face_detection_short_range, cosine
0.994/0.996); 9 are refused (PRELU 6, HARD_SWISH 2, DENSIFY 2 - counted once each);
hand_landmark_lite / _full fail on world landmarks (cosine 0.964 / 0.979; 0.52 / 0.61
before this branch) and handedness (|diff| 0.092 / 0.132); pose_landmark_full fails on
four of five outputs (segmentation 0.62, world landmarks 0.61, presence |diff| 0.97): its
trunk falls to 7-15 dB cumulative SQNR in int8 (``npu compile --report``). ONNX: 24/44
pass, the 20 others refused by the importer (Clip with general bounds, ConvTranspose,
DepthToSpace, Exp, Expand, LpNormalization, MatMul of two activations, Mean, ReduceL2,
ReduceSum, Slice, Softplus, Split, Unsqueeze).

Measured 2026-11-24 on branch accuracy (every operator, fallback, quant and int16 branch
merged), on the device. ONNX: 44/44 pass (worst Softmax 2.8%, LpNormalization 1.8%), no
operator on the CPU. mediapipe with ``--recipe accurate`` (GPTQ, int16 auto): 8/13 pass
(face_detection_short_range 0.994, face_detection_full_range_sparse 0.996,
hand_landmark_lite world landmarks 0.988 / handedness |diff| 0.045, hand_landmark_full
0.997 / 0.018, iris_landmark, palm_detection_lite / _full 0.988 / 0.983, pose_detection 0.996);
GPTQ alone gave 5/13. Missing the bar: face_landmark's face logit (|diff| 0.37; values
-1.5..-11), hand_recrop (outputs in pixels, 130-230: |diff| 5-8 against a bar of 0.05),
selfie_segmentation (0.41; 0.988 with ``--option bias_correction=true``, which passes) and
_landscape (0.916; 0.951 with it), pose_landmark_full's segmentation (0.68; its four other
outputs pass; bias correction ruins its presence score). PRELU (face_landmark, hand_recrop)
and HARD_SWISH / LOGISTIC (selfie models) have no int16 kernel, which leaves their
activations int8.

Measured 2026-11-24 on branch int16-more (int16 PRELU and HARD_SWISH, our formulas, so
``auto`` can promote them), ``--recipe accurate``: selfie_segmentation 0.41 -> 0.996
(passes: 9/13); face_landmark's face logit |diff| 0.37 -> 0.147 (landmarks cosine 0.9999)
and hand_recrop 8.0 -> 1.06 (pixels; bar 0.05) improve but miss the bar with every
activation int16 (97 and 63 layers): what is left is the int8 weights';
selfie_segmentation_landscape 0.916 -> 0.889 (its LOGISTIC has no int16 mode yet). The
eight that passed still pass (palm_detection_lite 0.988 -> 0.990, palm_detection_full
0.983 -> 0.999; the others as before); pose_landmark_full as before (segmentation 0.68,
its four other outputs pass). mediapipe: 9/13.

Measured 2026-11-24 on branch logistic16 (int16 LOGISTIC / TANH byte-identical to
LiteRT's int16 kernels; a host step may keep int16 boundaries; ``accurate``'s int16 target
0.999), ``--recipe accurate``: selfie_segmentation_landscape 0.889 -> 0.982 (passes:
10/13). With the 0.99 target ``auto`` stopped at 32 int16 layers, which reach 0.992 on the
calibration textures but 0.889 on the people; all 114 in int16 with the custom
transposed conv's logits still int8 at the host step (step 1.7) gave 0.975, with int16
there 0.982. The others: selfie_segmentation 0.996 -> 0.9996, palm_detection_lite 0.990
-> 0.999, pose_detection 0.996 -> 0.999, the rest as before or better;
face_landmark (0.147), hand_recrop (1.06 pixels) and pose_landmark_full's segmentation
(0.68) fail as before.

Measured 2026-11-24 on branch w16 (int16 weights, a16w16: ``--recipe accurate`` now adds
``int16_weights="auto"``; int16 grids get twice the calibration range; int64 biases from
the float biases), on the device: face_landmark's face logit |diff| 0.147 -> 0.0096
(passes), hand_recrop 1.06 -> 0.072 pixels (bar 0.05: its int16-activation rounding alone
is about that, see docs/models.md), hand_landmark_full handedness 0.018 -> 0.0046 and world
landmarks 0.997 -> 1.0000, hand_landmark_lite handedness 0.045 -> 0.0025 and world
landmarks 0.988 -> 1.0000; face_detection_short_range (0.994 / 0.996),
face_detection_full_range_sparse (0.994 / 0.996), iris_landmark (0.9988 / 0.9996),
palm_detection_lite (0.991 / 0.998) and _full (0.9992 / 0.9998), pose_detection
(0.997 / 0.998) and selfie_segmentation (0.996) pass as before: mediapipe 10/13
(pose_landmark_full and selfie_segmentation_landscape not re-measured). The automatic
choice costs compile time: hand_landmark_full's quantization took ~310 s instead of ~160 s.

Measured 2026-11-24 on branch pose (GPTQ rounds each layer's bias last, so it takes up
the weights' mean error; channel equalization in ``accurate``), ``--recipe accurate``:
pose_landmark_full's segmentation 0.68 -> 0.72 (0.75 without equalization; its other four
outputs pass as before). Its worst picture is chelsea, a cat: no person, logits -1690..135,
and the float model itself is that sensitive there: noise of half a pixel step (0.5/255)
on the input takes the float logits to cosine 0.915 against their own (astronaut 0.997),
while its landmarks stay at 0.99997. Simulated with every activation int16: exact
weights in the trunk alone would give 0.967, so what is left is the int8 weights, spread
over the trunk (no single layer: exact weights in any one part move it either way), and
then one tensor's int16 grid (the first conv's channel 15, under 0.015 of a range of 6,
multiplied by ~400 by the depthwise layer after it: 0.973 -> 0.992 when float), which
equalization lifts. With branch w16 (int16 weights, f6888b6) merged, the biases of the
layers it widens taken from the float graph alone (GPTQ's bias column compensates int8
weights, which those layers no longer have): segmentation 0.9906 and every output passes
(0.840 without equalization; 0.717 when the widened layers keep the compensated biases:
then int16_weights="auto" finds nothing to gain); hand_landmark_lite passes there too.
The others on this branch alone, main -> pose: hand_landmark_lite world landmarks 0.988 ->
0.994, handedness |diff| 0.045 -> 0.038; pose_detection 0.996 / 0.997 -> 0.995 / 0.998;
selfie_segmentation 0.996 -> 0.993 (all pass).

Measured 2026-11-24 on merged main (int16 LOGISTIC/TANH, int16 weights, equalization, plain
GPTQ: the bias column took face_landmark's logit to 0.33 off once merged), ``--recipe
accurate``: 12 of 13 pass. face_landmark 0.0045; pose_landmark_full segmentation 0.9906,
presence 0.0014; selfie_segmentation_landscape 0.9942 (one earlier run failed with a
transport error, "MEM_FREE payload is 304 bytes", not reproduced since: see the closing
note); selfie_segmentation 0.9998; hand_landmark_full 0.0015 / 1.0000, _lite 0.0025 / 1.0000;
face_detection short 0.9996 / full 0.9987; iris 0.9975; palm lite 0.9990, full 0.9990;
pose_detection 0.9994. hand_recrop fails at 0.0569 pixels (bar 0.05).

Measured 2026-11-24 on branch recrop (``--option int16_headroom='"held-out"'``: each int16
tensor's headroom from how far one calibration picture exceeds the others' range, instead of
2x everywhere), ``--recipe accurate``: hand_recrop passes, 0.0569 -> 0.0456 pixels. Its error
is its int16 tensors' rounding (``benchmarks/rounding_noise.py``: 0.027 pixels rms predicted,
0.026 measured over 18 unseen variants of astronaut / chelsea / text, 0.042 with the 2x
headroom), so on the two evaluation pictures it passes or fails by chance (about half of
such pairs would exceed 0.05; 12 of the 18 variants did with 2x, 3 with held-out). Also
with it: face_landmark 0.0105, hand_landmark_full 0.0007 / 1.0000, pose_landmark_full
segmentation 0.9990 (0.9906 with 2x), selfie_segmentation_landscape 0.9945,
face_detection_full_range_sparse 0.9987 / 0.9995, hand_landmark_lite 0.0005 / 1.0000,
iris_landmark 0.9975, palm_detection_lite 0.9989, _full 0.9976, pose_detection 0.9992,
selfie_segmentation 0.9999 (pass: 12 of 13 with it too); face_detection_short_range's
classificators 0.9766 (fail; 0.9996 with 2x): faces leave six of its tensors' ranges by
1.3-1.67x, which held-out textures (1.0-1.22x) did not predict. So it is an option, not in
the recipe, and the recipe's figures are those above (hand_recrop fails).

Measured 2026-11-24 on branch pcq16 (per-channel int16 grids, ``int16_grid="per_channel"``,
now in ``--recipe accurate``: one scale per channel of an int16 tensor where the ops around
it take one, each reaching the 2x headroom times twice its own calibrated peak, within
1/16 of the widest channel's; docs/models.md), on the device, one model at a time:
**13 of 13 pass**. hand_recrop passes, 0.0569 -> 0.0411 pixels
(``benchmarks/unseen_variants.py``, 18 unseen variants: rms 0.048 -> 0.023, variants over
the bar 12 -> 2). The models most sensitive to the quantizer, per tensor -> per channel:
face_landmark's face logit 0.0045 -> 0.0049 (on the 18 variants 0.005 -> 0.020 rms, 0 -> 1
over the bar), face_detection_short_range 0.9996 -> 0.9987 / 0.9998, pose_landmark_full
segmentation 0.9906 -> 0.9983 (presence 0.0014 -> 0.0039), selfie_segmentation_landscape
0.9942 -> 0.9940, hand_landmark_full handedness 0.0015 -> 0.0010 / 1.0000. The other
seven: face_detection_full_range_sparse 0.9987 / 0.9995, hand_landmark_lite 0.0025 / 1.0000,
iris_landmark 0.9975 / 0.9997, palm_detection_lite 0.9990 / 0.9998, palm_detection_full
0.9990 / 0.9996, pose_detection 0.9994 / 0.9998, selfie_segmentation 0.9998. Without the
margin (grids at 2x each channel's own peak) single narrow channels clipped on unseen
pictures (hand_recrop 3.3 pixels off on 4 of 18 variants); with a spread of 4 instead of
16, ``auto`` chose 64 int16 layers and no int16 weights for face_landmark (its logit 0.18
rms off on the variants).

Measured 2026-11-29 on branch accurate (issue 26 item 8: the default recipe holds out two of
the ten calibration pictures, calibrates on eight and escalates until every output reaches
cosine 0.99 on the two: ``libnpu/compiler/escalation.py``), ``--plain --also-fast``, i.e.
default options against ``--recipe fast`` (the default until then), side by side on the
same device, one model after the other, on a 2-CPU machine shared with five other sessions
(load average 10-16: every time below is several times what an idle machine takes; the
ratios are what to read). Compile seconds fast -> default, the step chosen, the worst output:

=============================== ============ ============== ========== ======================
model                           fast         default        chosen     worst output (default)
=============================== ============ ============== ========== ======================
face_detection_short_range      pass  11.0   pass   71.7    int16 act  cosine 0.9978 (0.9884)
iris_landmark                   pass   8.9   pass   15.8    int8       cosine 0.9959 (0.9973)
palm_detection_lite             pass  23.2   pass  352.5    int16 act  cosine 0.9990 (0.9801)
face_detection_full_range_sp.   FAIL  29.2   pass  215.6    int16 act  cosine 0.9989 (0.9778)
palm_detection_full             FAIL  17.7   pass  268.8    int16 act  cosine 0.9983 (0.9792)
pose_detection                  FAIL   4.8   pass  299.1    int16 w    cosine 0.9997 (0.9731)
hand_landmark_lite              FAIL  10.0   pass  318.4    int16 w    |diff| 0.0025 (0.186)
hand_landmark_full              FAIL  23.0   pass 1433.0    int16 w    |diff| 0.0005 (0.036)
face_landmark                   FAIL   5.7   pass   74.3    int16 act  |diff| 0.0258 (0.716)
pose_landmark_full              FAIL  35.6   pass 1884.7    int16 w    |diff| 0.0060 (0.973)
selfie_segmentation             FAIL  33.5   FAIL  284.8    int8       cosine 0.9105 (0.2487)
hand_recrop                     FAIL   3.7   FAIL   45.0    int16 act  |diff| 0.7992 (9.98)
=============================== ============ ============== ========== ======================

(in brackets: ``--recipe fast``'s figure; hand_landmark_full's world landmarks, cosine
0.864 with fast, reach 1.0000). **Pass count: fast 3 of 12, default 10 of 12**;
selfie_segmentation_landscape was still compiling at the deadline (fast fails it, 0.853).
hand_landmark_full and pose_landmark_full ran all four steps (their held-out pictures
reached 0.983 / 0.978 at best, so the compile ended with a warning, yet the unseen pictures
pass). The two failures are the measurement's blind spots: selfie_segmentation's held-out
textures hold no person, the float mask is all but zero and the int8 one exactly zero
(cosine 0 at every step, so all four ran and the first was kept); hand_recrop's crop box
(pixels, 130-230) is a small output scored relatively (1 - max|error| / max|value|: 0.996
on the held-out pictures), while the bar is 0.05 pixels absolute. Every model the held-out
pictures send past int8 costs the int16 search:
6 to 62 times the int8 compile here, at most four quantizations (int8, int16
activations, int16 weights, bias correction). iris_landmark, the one model whose held-out
pictures pass at int8, compiled in 1.8 times ``fast``'s time (the measurement: two float and
two simulated runs). face_detection_short_range and palm_detection_lite passed the bar at
int8 but under the 0.99 target (0.988, 0.980 on the evaluation pictures; 0.971, 0.987 on
the held-out ones), so the default escalates them too. The tests keep their speed: the
16 test files that compile float models took 527 s before and 550 s after (run at the same
time, side by side; tests whose point is not accuracy use ``--recipe fast``).

The mediapipe models are compiled with ``RECIPE`` (``--plain``: the compiler's defaults);
quantizer options (``--method``, ``--option key=json``) go to the compiler as ``npu compile``
would pass them, so the script also compares calibration methods. The ONNX single-node
cases use the compiler's defaults plus the options given. Exit status 0 when every case passed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import libnpu
from benchmarks.scratch_device import ScratchDevice
from libnpu import model_zoo
from libnpu.loadable import Loadable
from libnpu.tools.compile import compile_model_file
from libnpu.tools.vision import resize

#: Pictures the quantizer calibrates on, and the ones it never sees (evaluation).
CALIBRATION = ("coffee", "camera", "motorcycle_left", "coins", "moon", "brick", "grass", "gravel", "ihc", "page")
EVALUATION = ("astronaut", "chelsea")

#: Quantizer options the mediapipe models are compiled with unless --plain: the compiler's
#: "accurate" recipe (libnpu/compiler/recipes.py: GPTQ weight rounding, which took
#: hand_landmark_lite's world landmarks from cosine 0.77 to 0.96-0.98, and int16 activations
#: where the int8 graph misses the output target on the calibration data).
RECIPE: dict[str, Any] = {"recipe": "accurate"}

#: The part name of the mediapipe models compiled with ``--recipe fast`` (``--also-fast``).
FAST_PART = "mp-fast"

COSINE_BAR = 0.98
SMALL_OUTPUT = 8          # outputs with fewer values are judged by absolute difference
ABS_BAR = 0.05
ONNX_RELATIVE_BAR = 0.05  # max |error| <= 5% of max |reference|


@dataclass
class OutputCheck:
    name: str
    values: int
    metric: str            # "cosine" or "absdiff" or "rel_err"
    value: float
    passed: bool


@dataclass
class CaseResult:
    part: str
    name: str
    passed: bool
    outputs: list[OutputCheck] = field(default_factory=list)
    cpu_ops: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    compile_seconds: float = 0.0
    fidelity: dict[str, Any] | None = None   # what the default recipe measured and chose


# comparisons ------------------------------------------------------------------------------

def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).reshape(-1), b.astype(np.float64).reshape(-1)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(a @ b / (na * nb))


def judge_mediapipe(name: str, got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> OutputCheck:
    """Worst case over the evaluation pictures of one output."""
    size = int(want[0].size)
    if size < SMALL_OUTPUT:
        worst = max(float(np.abs(g.astype(np.float64) - w).max()) for g, w in zip(got, want))
        return OutputCheck(name, size, "absdiff", worst, worst <= ABS_BAR)
    worst = min(cosine(g, w) for g, w in zip(got, want))
    return OutputCheck(name, size, "cosine", worst, worst >= COSINE_BAR)


def judge_onnx(name: str, got: np.ndarray, want: np.ndarray) -> OutputCheck:
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) if want.size else 0.0
    ref = float(np.abs(want).max()) if want.size else 0.0
    rel = err / ref if ref > 0 else (0.0 if err == 0 else float("inf"))
    return OutputCheck(name, int(want.size), "rel_err", rel, rel <= ONNX_RELATIVE_BAR)


def cpu_ops(loadable: Loadable) -> list[str]:
    """Operators the compiler left to the host: the loadable's ``placement`` metadata, rows
    ``[index, operator, device, reason]`` (device "NPU" or "CPU"), and the layers the
    escalation kept in float on the CPU (``fidelity.cpu_float``, by their IR op type), or a
    QDQ file's float front end (``cpu_float``: no escalation, no fidelity)."""
    rows = loadable.metadata.get("placement") or []
    kept = ((loadable.metadata.get("fidelity") or {}).get("cpu_float") or loadable.metadata.get("cpu_float")
            or {}).get("layers") or []
    return [str(row[1]) for row in rows if isinstance(row, (list, tuple)) and len(row) > 2
            and str(row[2]).upper() == "CPU"] + [str(layer).split()[0] for layer in kept]


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


# mediapipe --------------------------------------------------------------------------------

def picture_feed(picture: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A picture resized to an NHWC input and scaled to [0, 1], as mediapipe feeds its models."""
    _, height, width, channels = shape
    return (resize(picture[..., :channels], height, width) / 255.0)[None].astype(np.float32)


def _litert(path: Path):
    from ai_edge_litert import interpreter as litert
    interp = litert.Interpreter(model_path=str(path))
    interp.allocate_tensors()
    return interp


def _litert_run(interp, feeds: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    for detail, value in zip(interp.get_input_details(), feeds):
        interp.set_tensor(detail["index"], value.astype(detail["dtype"]))
    interp.invoke()
    return {d["name"]: interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()}


def _device_outputs(loadable: Loadable, devroot: Path, feeds: Sequence[Sequence[np.ndarray]]) -> list[dict]:
    model = libnpu.load(loadable, devroot=devroot)
    try:
        names = [d.name for d in model.outputs]
        return [dict(zip(names, (np.asarray(o, np.float32) for o in model.infer(list(feed))))) for feed in feeds]
    finally:
        model.close()


def _match(reference: dict[str, np.ndarray], device: dict[str, np.ndarray]) -> list[tuple[str, str]]:
    """Pairs (reference name, device name): by name, else by order."""
    if set(reference) == set(device):
        return [(n, n) for n in reference]
    return list(zip(reference, device))


def run_mediapipe(name: str, devroot: Path, cache_dir: str, options: dict[str, Any]) -> CaseResult:
    started = time.perf_counter()
    result = CaseResult("mediapipe", name, False)
    try:
        path = model_zoo.mediapipe_model(name)
        interp = _litert(path)
        shape = tuple(interp.get_input_details()[0]["shape"])
        calibration = [[picture_feed(model_zoo.picture(p), shape)] for p in CALIBRATION]
        evaluation = [[picture_feed(model_zoo.picture(p), shape)] for p in EVALUATION]
        compiled = compile_model_file(path, calibration, cache_dir=cache_dir, progress=False, **options)
        result.compile_seconds = round(compiled.seconds, 1)
        result.fidelity = compiled.loadable.metadata.get("fidelity")
        result.cpu_ops = cpu_ops(compiled.loadable)
        got = _device_outputs(compiled.loadable, devroot, evaluation)
        want = [_litert_run(interp, feed) for feed in evaluation]
        for ref_name, dev_name in _match(want[0], got[0]):
            result.outputs.append(judge_mediapipe(ref_name, [g[dev_name] for g in got],
                                                  [w[ref_name].reshape(g[dev_name].shape) for w, g in zip(want, got)]))
        result.passed = bool(result.outputs) and all(o.passed for o in result.outputs)
    except Exception as exc:  # a refused or failing model is a reported failure, not a crash
        result.error = _reason(exc)
    result.seconds = round(time.perf_counter() - started, 1)
    return result


# onnx --------------------------------------------------------------------------------------

def _onnx_model(op: str, inputs: dict[str, Sequence[int]], outputs: dict[str, Sequence[int] | None],
                attrs: dict[str, Any] | None = None, consts: dict[str, np.ndarray] | None = None,
                node_inputs: Sequence[str] | None = None) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    consts = consts or {}
    node = helper.make_node(op, list(node_inputs or [*inputs, *consts]), list(outputs), **(attrs or {}))
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) if s is not None
         else onnx.ValueInfoProto(name=n) for n, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)  # fills the outputs left open
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _w(*shape: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.5, 0.5, shape).astype(np.float32)


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


X = [1, 8, 10, 10]  # NCHW feature map
ONNX_CASES: dict[str, Callable[[], bytes]] = {
    "Add": lambda: _onnx_model("Add", {"a": X, "b": X}, {"y": X}),
    "Add_const": lambda: _onnx_model("Add", {"a": X}, {"y": X}, consts={"b": _w(1, 8, 1, 1)}),
    "AveragePool": lambda: _onnx_model("AveragePool", {"x": X}, {"y": None},
                                       {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}),
    "AveragePool_s2": lambda: _onnx_model("AveragePool", {"x": X}, {"y": None},
                                          {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "Clip_relu6": lambda: _onnx_model("Clip", {"x": X}, {"y": X},
                                      consts={"lo": np.float32(0), "hi": np.float32(6)}),
    "Clip_min_max": lambda: _onnx_model("Clip", {"x": X}, {"y": X},
                                        consts={"lo": np.float32(-0.3), "hi": np.float32(0.6)}),
    "Clip_min_only": lambda: _onnx_model("Clip", {"x": X}, {"y": X}, consts={"lo": np.float32(-0.25)}),
    "Clip_max_only": lambda: _onnx_model("Clip", {"x": X}, {"y": X}, consts={"hi": np.float32(0.4)},
                                         node_inputs=["x", "", "hi"]),
    "Concat": lambda: _onnx_model("Concat", {"a": X, "b": [1, 4, 10, 10]}, {"y": [1, 12, 10, 10]}, {"axis": 1}),
    "Concat_w": lambda: _onnx_model("Concat", {"a": X, "b": [1, 8, 10, 3]}, {"y": [1, 8, 10, 13]}, {"axis": 3}),
    "Conv": lambda: _onnx_model("Conv", {"x": X}, {"y": None}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
                                consts={"w": _w(16, 8, 3, 3), "b": _w(16, seed=2)}),
    "Conv_strided": lambda: _onnx_model("Conv", {"x": X}, {"y": None}, {"kernel_shape": [3, 3], "strides": [2, 2]},
                                        consts={"w": _w(16, 8, 3, 3)}),
    "Conv_depthwise": lambda: _onnx_model("Conv", {"x": X}, {"y": None},
                                          {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 8},
                                          consts={"w": _w(8, 1, 3, 3), "b": _w(8, seed=2)}),
    "ConvTranspose": lambda: _onnx_model("ConvTranspose", {"x": X}, {"y": None},
                                         {"kernel_shape": [2, 2], "strides": [2, 2]},
                                         consts={"w": _w(8, 4, 2, 2), "b": _w(4, seed=2)}),
    "ConvTranspose_3x3": lambda: _onnx_model("ConvTranspose", {"x": X}, {"y": None},
                                             {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                              "output_padding": [1, 1]}, consts={"w": _w(8, 4, 3, 3)}),
    "DepthToSpace_DCR": lambda: _onnx_model("DepthToSpace", {"x": X}, {"y": [1, 2, 20, 20]},
                                            {"blocksize": 2, "mode": "DCR"}),
    "DepthToSpace_CRD": lambda: _onnx_model("DepthToSpace", {"x": X}, {"y": [1, 2, 20, 20]},
                                            {"blocksize": 2, "mode": "CRD"}),
    "Exp": lambda: _onnx_model("Exp", {"x": X}, {"y": X}),
    "Expand": lambda: _onnx_model("Expand", {"x": [1, 8, 1, 10]}, {"y": X}, consts={"shape": _i64(1, 8, 10, 10)}),
    "Flatten": lambda: _onnx_model("Flatten", {"x": X}, {"y": [1, 800]}, {"axis": 1}),
    "Gemm": lambda: _onnx_model("Gemm", {"x": [1, 64]}, {"y": [1, 32]}, {"transB": 1},
                                consts={"w": _w(32, 64), "b": _w(32, seed=2)}),
    "Gemm_no_trans": lambda: _onnx_model("Gemm", {"x": [1, 64]}, {"y": [1, 32]}, consts={"w": _w(64, 32)}),
    "LpNormalization": lambda: _onnx_model("LpNormalization", {"x": [1, 64]}, {"y": [1, 64]}, {"axis": -1, "p": 2}),
    "MatMul_const": lambda: _onnx_model("MatMul", {"x": [1, 64]}, {"y": [1, 32]}, consts={"w": _w(64, 32)}),
    "MatMul_two_activations": lambda: _onnx_model("MatMul", {"a": [1, 4, 16, 32], "b": [1, 4, 32, 8]},
                                                  {"y": [1, 4, 16, 8]}),
    "MaxPool": lambda: _onnx_model("MaxPool", {"x": X}, {"y": None}, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "MaxPool_3x3_pad": lambda: _onnx_model("MaxPool", {"x": X}, {"y": None},
                                           {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
    "Mean": lambda: _onnx_model("Mean", {"a": X, "b": X}, {"y": X}),
    "Mul": lambda: _onnx_model("Mul", {"a": X, "b": X}, {"y": X}),
    "Mul_const": lambda: _onnx_model("Mul", {"a": X}, {"y": X}, consts={"b": _w(1, 8, 1, 1)}),
    "Pad": lambda: _onnx_model("Pad", {"x": X}, {"y": None}, consts={"pads": _i64(0, 0, 1, 2, 0, 0, 1, 2)}),
    "ReduceL2": lambda: _onnx_model("ReduceL2", {"x": X}, {"y": None}, {"axes": [1], "keepdims": 1}),
    "ReduceSum": lambda: _onnx_model("ReduceSum", {"x": X}, {"y": None}, {"keepdims": 1}, consts={"axes": _i64(2, 3)}),
    "Relu": lambda: _onnx_model("Relu", {"x": X}, {"y": X}),
    "Reshape": lambda: _onnx_model("Reshape", {"x": X}, {"y": [1, 8, 100]}, consts={"shape": _i64(1, 8, 100)}),
    "Sigmoid": lambda: _onnx_model("Sigmoid", {"x": X}, {"y": X}),
    "Slice": lambda: _onnx_model("Slice", {"x": X}, {"y": None},
                                 consts={"starts": _i64(1, 2), "ends": _i64(7, 9), "axes": _i64(1, 3)}),
    "Slice_step": lambda: _onnx_model("Slice", {"x": X}, {"y": None},
                                      consts={"starts": _i64(0), "ends": _i64(10), "axes": _i64(2), "steps": _i64(2)}),
    "Softmax": lambda: _onnx_model("Softmax", {"x": [1, 32]}, {"y": [1, 32]}, {"axis": -1}),
    "Softplus": lambda: _onnx_model("Softplus", {"x": X}, {"y": X}),
    "Split": lambda: _onnx_model("Split", {"x": X}, {"y0": None, "y1": None}, {"axis": 1},
                                 consts={"split": _i64(3, 5)}),
    "Split_equal": lambda: _onnx_model("Split", {"x": X}, {"y0": None, "y1": None}, {"axis": 3}),
    "Transpose": lambda: _onnx_model("Transpose", {"x": X}, {"y": None}, {"perm": [0, 2, 3, 1]}),
    "Unsqueeze": lambda: _onnx_model("Unsqueeze", {"x": [1, 64]}, {"y": [1, 1, 64]}, consts={"axes": _i64(1)}),
}


def run_onnx(name: str, devroot: Path, cache_dir: str, options: dict[str, Any], workdir: Path) -> CaseResult:
    started = time.perf_counter()
    result = CaseResult("onnx", name, False)
    try:
        import onnxruntime as ort
        path = workdir / f"{name}.onnx"
        path.write_bytes(ONNX_CASES[name]())
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(7)
        feeds = [rng.uniform(-1, 1, i.shape).astype(np.float32) for i in session.get_inputs()]
        want = session.run(None, {i.name: f for i, f in zip(session.get_inputs(), feeds)})
        compiled = compile_model_file(path, None, cache_dir=cache_dir, progress=False, **options)
        result.cpu_ops = cpu_ops(compiled.loadable)
        got = _device_outputs(compiled.loadable, devroot, [feeds])[0]
        names = [o.name for o in session.get_outputs()]
        pairs = _match(dict(zip(names, want)), got)
        for (ref_name, dev_name), w in zip(pairs, want):
            result.outputs.append(judge_onnx(ref_name, got[dev_name].reshape(w.shape), w))
        result.passed = bool(result.outputs) and all(o.passed for o in result.outputs)
    except Exception as exc:
        result.error = _reason(exc)
    result.seconds = round(time.perf_counter() - started, 1)
    return result


# report ------------------------------------------------------------------------------------

def format_table(results: Sequence[CaseResult]) -> str:
    lines = [f"{'part':<9} {'model':<34} {'result':<6} {'cpu ops':>7} {'compile':>8}  "
             "outputs (metric value, worst first)"]
    for r in results:
        if r.error:
            detail = r.error
        else:
            worst = sorted(r.outputs, key=lambda o: (o.passed, o.value if o.metric == "cosine" else -o.value))
            detail = ", ".join(f"{o.name}[{o.values}] {o.metric} {o.value:.4f}{'' if o.passed else ' FAIL'}"
                               for o in worst[:4]) + (f" (+{len(worst) - 4} more)" if len(worst) > 4 else "")
        if r.fidelity:
            detail += f"; chose {r.fidelity['chosen']}"
        lines.append(f"{r.part:<9} {r.name:<34} {'pass' if r.passed else 'FAIL':<6} {len(r.cpu_ops):>7} "
                     f"{r.compile_seconds:>7.1f}s  {detail}")
    return "\n".join(lines)


def verdict(results: Sequence[CaseResult]) -> str:
    parts = []
    for part in ("mediapipe", FAST_PART, "onnx"):
        mine = [r for r in results if r.part == part]
        if mine:
            parts.append(f"{part}: {sum(r.passed for r in mine)}/{len(mine)} pass")
    done = all(r.passed for r in results if r.part != FAST_PART)
    return ("DONE: " if done else "NOT DONE: ") + "; ".join(parts)


def recipe_options(parser: argparse.ArgumentParser, plain: bool, items: Sequence[str]) -> dict[str, Any]:
    """Quantizer options of a benchmark's command line: ``RECIPE`` (none with ``--plain``) and
    each ``--option KEY=JSON`` over it; a value that is not JSON is a usage error."""
    options: dict[str, Any] = {} if plain else dict(RECIPE)
    for item in items:
        key, _, value = item.partition("=")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            parser.error(f"--option {item}: the value must be JSON (e.g. weight_rounding='\"gptq\"')")
    return options


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.models_in_the_wild", description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", metavar="NAME",
                   help=f"cases to run: mediapipe models ({', '.join(model_zoo.MEDIAPIPE_MODELS)}) "
                        "and/or ONNX cases (see --list); default all")
    p.add_argument("--part", choices=("all", "mediapipe", "onnx"), default="all")
    p.add_argument("--list", action="store_true", help="list the case names and exit")
    p.add_argument("--plain", action="store_true",
                   help=f"compile the mediapipe models with the compiler's defaults (the default recipe: held-out "
                        f"samples, escalation to the 0.99 target), not the recipe {RECIPE}")
    p.add_argument("--also-fast", action="store_true",
                   help="also compile each mediapipe model with --recipe fast (int8 only), side by side")
    p.add_argument("--method", help="calibration method passed to the quantizer (default: the compiler's)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=JSON",
                   help="another quantizer option, e.g. --option fc_per_channel=true")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    mediapipe = list(model_zoo.MEDIAPIPE_MODELS) if args.part in ("all", "mediapipe") else []
    onnx_cases = list(ONNX_CASES) if args.part in ("all", "onnx") else []
    if args.list:
        print("\n".join(["mediapipe:", *mediapipe, "onnx:", *onnx_cases]))
        return 0
    if args.models:
        unknown = sorted(set(args.models) - set(mediapipe) - set(onnx_cases))
        if unknown:
            p.error(f"unknown case {unknown[0]!r} (see --list)")
        mediapipe = [m for m in mediapipe if m in args.models]
        onnx_cases = [m for m in onnx_cases if m in args.models]
    options = recipe_options(p, args.plain, args.option)
    if args.method:
        options["method"] = args.method
    explicit = {item.partition("=")[0] for item in args.option}

    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="npu-wild-") as tmp, ScratchDevice(cores=2, memory="2G") as device:
        # A private compile cache: every run measures the compiler of this checkout.
        cache_dir = str(Path(tmp) / "cache")
        onnx_options = {k: v for k, v in options.items() if k not in RECIPE or k in explicit}
        for name in mediapipe:
            runs = [("mediapipe", options)] + ([(FAST_PART, {**options, "recipe": "fast"})] if args.also_fast else [])
            for part, chosen in runs:
                results.append(run_mediapipe(name, device.devroot, cache_dir, chosen))
                results[-1].part = part
                if not args.json:
                    print(format_table(results[-1:]).splitlines()[-1], flush=True)
        for name in onnx_cases:
            results.append(run_onnx(name, device.devroot, cache_dir, onnx_options, Path(tmp)))
            if not args.json:
                print(format_table(results[-1:]).splitlines()[-1], flush=True)
    if args.json:
        print(json.dumps({"results": [asdict(r) for r in results], "verdict": verdict(results),
                          "calibration": CALIBRATION, "evaluation": EVALUATION, "options": options}, indent=2))
    else:
        print()
        print(format_table(results))
        print(verdict(results))
    return 0 if results and all(r.passed for r in results if r.part != FAST_PART) else 1


if __name__ == "__main__":
    sys.exit(main())
