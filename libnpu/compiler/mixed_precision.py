"""Mixed precision: int16 activations (a16w8, TFLite's "16x8" scheme) for the layers that
lose most in int8, and int16 weights too (a16w16) where that is not enough.

A promoted op reads and writes int16 activations (symmetric, zero point 0, the scale
covering ``INT16_HEADROOM`` times the range its int8 tensor covered), keeps its int8
per-channel weights, and gets an int64 bias (scale = int16 input scale x weight scale,
from the float bias); the chip runs it with its int16 kernels (``OPF_INT16``), which are
byte-identical to LiteRT's 16x8 reference kernels. A promoted op with weights may also
get int16 weights (symmetric per channel, ``max |w| / 32767`` steps): the chip's
``OPF_WEIGHTS16`` mode, our formula (docs/hardware.md), as LiteRT has no 16x16 kernel.
Where an int16 tensor meets an int8 op (or an int8 one an int16 op) a QUANTIZE converts it
(int8 <-> int16 requantization); a float graph input feeding an int16 op is quantized
straight to int16 and an int16 output is dequantized straight to float.

``int16`` selections (:func:`quantize_mixed`, ``npu compile --int16``):

* ``"none"``: plain int8;
* names: the ops (by op name or output tensor name) to promote;
* ``"auto"``: rank the ops the chip can run in int16 by the error each adds in int8 (its
  own SQNR against float on the calibration data, ``accuracy.layer_errors``), then promote
  the worst 1, 2, 4, ... until every graph output's score against the float graph
  (:func:`held_out.search_scores`: cosine, or for tiny outputs the largest error relative to the
  output's magnitude, at most the acceptance bar's absolute error; an output after a final
  sigmoid or softmax also on its logits) reaches ``int16_target`` (or ``max_layers``). An
  output that even all-int16 activations cannot bring to the target settles for most of
  what they would gain, and one they would not improve is left alone (its error is not the
  activations': int8 weights, say).

``int16_weights`` selections: ``"none"``, names (of promoted ops with weights), or
``"auto"`` (:func:`choose_weights16`): the same search among the promoted ops with weights,
ranked by their own error with int16 activations, toward ``int16_weights_target`` (0.999).
"""
from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from . import int16_states, registry
from .accuracy import errors_to_json, layer_errors
from .channel_grids import (
    CHANNEL_MARGIN,
    CHANNEL_SPREAD,
    INT16_GRIDS,
    channel_peaks,
    channel_quant,
    moved_quant,
    moves_channels,
    per_channel_tensors,
    spread_limited,
)
from .float_ref import FloatInterpreter
from .folding import weight_fold
from .held_out import search_scores
from .ir import Graph, IRError, Op, QuantParams, Tensor
from .optimize import optimize
from .progress import Progress, stage
from .quantizer import equalized, gated, quantize_model, random_dataset
from .scales import MIN_MULTIPLIER, bias_scale, choose_int16_scale, quantize_weights16, symmetric
from .step_reuse import once

__all__ = ["MixedPrecisionError", "int16_quant", "promotable", "takes_int16_weights", "promote", "widened_weights16",
           "choose_auto", "choose_weights16", "quantize_mixed", "parse_selection", "DEFAULT_TARGET",
           "WEIGHTS16_TARGET", "INT16_HEADROOM", "HELD_OUT_MARGIN", "held_out_headroom", "CHANNEL_PEAKS"]

DEFAULT_TARGET = 0.99
#: An int16 tensor's grid reaches this many times its calibration range: one bit of
#: int16's steps costs little, and unseen inputs overflow the calibration range (face_landmark,
#: hand_recrop all-int16 with float weights: 0.059 / 1.56 off bare, 0.004 / 0.23 with 2x).
INT16_HEADROOM = 2.0
#: Metadata: each tensor's calibrated channel peaks while quantize_mixed chooses (promote reads them).
CHANNEL_PEAKS = "int16_channel_peaks"
#: With calibration data, each tensor's headroom is what its own calibration pictures show
#: instead (:func:`held_out_headroom`): ``HELD_OUT_MARGIN`` times the most that one picture
#: exceeded the range of the others, at most ``INT16_HEADROOM``.
HELD_OUT_MARGIN = 1.25
Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


class MixedPrecisionError(IRError):
    """An int16 selection that cannot be applied."""


def int16_quant(int8: QuantParams, headroom: float = INT16_HEADROOM) -> QuantParams:
    """Symmetric int16 parameters covering ``headroom`` times the real range of an int8
    tensor's grid."""
    s, z = float(int8.scale[0]), int(int8.zero_point[0])
    reach = max(abs(-128 - z), abs(127 - z)) * s
    return choose_int16_scale(reach * headroom)


def _int16_of(g: Graph, name: str) -> QuantParams:
    """The int16 parameters of the int8 tensor ``name``: its own headroom when the graph's
    metadata has one (``"int16_headroom"``, :func:`held_out_headroom`), else ``INT16_HEADROOM``."""
    headroom = g.metadata.get("int16_headroom", {}).get(name, INT16_HEADROOM)
    return int16_quant(_quant(g, name), headroom)


def held_out_headroom(graph: Graph, dataset: Sequence[Feed]) -> dict[str, float]:
    """Each activation tensor's int16 headroom, from how far one calibration sample goes
    beyond the range the others span: ``min(INT16_HEADROOM, HELD_OUT_MARGIN * r)`` with
    ``r = max_i m_i / max_{j != i} m_j`` (``m_i`` the tensor's largest magnitude on sample i).

    Why per tensor: the 2x headroom makes every int16 step twice as coarse, yet only some
    tensors leave their calibration range on unseen pictures. On mediapipe's hand_recrop
    (ten calibration pictures) the tensors near the input did (conv2d_2: 1.22 times its
    range on astronaut / chelsea; held out, one calibration picture went 1.18 beyond the
    other nine), while the deep residual trunk, whose rounding carries most of the output's
    error, stayed inside (0.93; held out 1.02-1.08). It is a weak predictor where unseen
    inputs differ in kind: face_detection_short_range's faces drove six tensors 1.3-1.67
    times beyond ten texture pictures' range where the held-out picture had gone 1.0-1.22
    beyond (its classificators fell from cosine 0.9996 to 0.977), so it is an option, not
    in ``--recipe accurate``. Fewer than two samples: no entry."""
    if len(dataset) < 2:
        return {}
    run = FloatInterpreter(graph)
    names = [o for op in graph.ops for o in op.outputs]
    peaks: dict[str, list[float]] = {n: [] for n in names}
    for feed in dataset:
        values = run.run(feed, keep=names)
        for n in names:
            peaks[n].append(float(np.abs(np.asarray(values[n], np.float64)).max(initial=0.0)))
    result = {}
    for n, m in peaks.items():
        top = sorted(m)
        if top[-2] <= 0:
            continue
        result[n] = min(INT16_HEADROOM, HELD_OUT_MARGIN * top[-1] / top[-2])
    return result


_SCALE_2_POW_15 = symmetric(2.0 ** -15)


def _quant(g: Graph, name: str) -> QuantParams:
    quant = g.tensors[name].quant
    if quant is None:
        raise MixedPrecisionError(f"int16: tensor {name!r} is not quantized")
    return quant


def promotable(op: Op, graph: Graph | None = None) -> bool:
    """Whether ``op`` (of ``graph``) may run with int16 activations (conversions themselves
    stay as they are).

    A host step (one output) may too: the CPU dequantizes what the chip stores, so int16
    boundaries only cost the conversion, and spare an int8 step between int16 layers; not
    one whose output is on no grid (an index, an output shaped per run: compiler.dynamic_shapes)."""
    if op.type == "HOST":
        return len(op.outputs) == 1 and (graph is None or graph.tensors[op.outputs[0]].quant is not None)
    return bool(registry.get(op.type, "int16")) and op.type not in ("QUANTIZE", "DEQUANTIZE")


def takes_int16_weights(op: Op) -> bool:
    """Whether ``op`` may get int16 weights too (a16w16): an op with weights whose chip
    kernel takes them."""
    return registry.get(op.type, "weight_axis") is not None and not registry.get(op.type, "int8_weights_only")


def parse_selection(selection: str | Iterable[str] | None) -> str | list[str]:
    """``"none"``, ``"auto"`` or a sorted list of names, from a string (comma separated) or names."""
    if selection is None:
        return "none"
    if isinstance(selection, str):
        if selection.strip() in ("", "none", "auto"):
            return selection.strip() or "none"
        selection = selection.split(",")
    names = sorted({n.strip() for n in selection if n.strip()})
    return names or "none"


def _select(g: Graph, names: Iterable[str], optional: Collection[str] = ()) -> set[int]:
    chosen: set[int] = set()
    outputs, prefixes, named = g.op_lookup()     # once: a scan per name was names x ops
    for name in names:
        # The op producing a tensor of that name (unique), else the ops of that name (the
        # quantizer's edge ops share names with the ops they follow). An ``optional`` name
        # (a rule's, on the float graph) may be gone: rewrites name theirs "<name>/..."
        # (a hard-swish's gate), or the op went to the CPU.
        by_tensor = outputs.get(name) or (prefixes.get(name, []) if name in optional else [])
        by_name = named.get(name, [])
        ops = [op for op in by_tensor if promotable(op, g)] or [op for op in by_name if promotable(op, g)]
        if not ops and name in optional:
            continue
        if not by_tensor and not by_name:
            raise MixedPrecisionError(f"int16: no op or tensor named {name!r}")
        if not ops:
            found = by_tensor or by_name
            raise MixedPrecisionError(f"int16: {found[0].describe()} has no int16 kernel on the chip")
        chosen.update(id(op) for op in ops)
    return chosen


def _real(g: Graph, name: str, src: Graph | None) -> np.ndarray:
    """A constant's real value: the float graph's when it has it, else dequantized."""
    if src is not None and name in src.tensors and src.tensors[name].is_constant \
            and src.tensors[name].quant is None:
        return np.asarray(src.tensors[name].data, np.float64)
    t = g.tensors[name]
    return t.quant.dequantize(np.asarray(t.data)).astype(np.float64) if t.quant is not None \
        else np.asarray(t.data, np.float64)


def _int16_constant(g: Graph, name: str, src: Graph | None, grid: QuantParams | None = None) -> str:
    """An int16 copy of a constant activation operand (ADD / MUL by a constant), on its
    own grid, or on ``grid`` (a same-scale op's: MAXIMUM compares raw values)."""
    real = _real(g, name, src)
    reach = float(np.abs(real).max(initial=0.0)) or 1.0
    qp = grid if grid is not None else choose_int16_scale(reach)
    new = g.unique_name(f"{name}__int16")
    g.add_tensor(Tensor(new, g.tensors[name].shape, "int16", qp, qp.quantize(real.astype(np.float32), "int16")))
    return new


def _int64_bias(g: Graph, op: Op, in_scale: float, src: Graph | None, float_only: bool = False) -> None:
    """Requantize the op's bias to int64 at ``in_scale`` x weight scale (16x8 spec).

    From the float graph's bias when ``src`` has it: the int32 bias carries the int8 grid's
    rounding (a step of int8 input scale x weight scale), which int16 activations would
    otherwise keep (hand_recrop: 0.11 pixels of its 1.06). What the quantizer changed
    beyond that rounding (bias correction, GPTQ's bias column) is kept, unless ``float_only``:
    a layer given int16 weights takes the float bias alone, since what the quantizer added
    compensated its int8 weights, which it no longer has (pose_landmark_full's segmentation:
    0.72 with the compensated biases, 0.99 without)."""
    if len(op.inputs) < 3 or not op.inputs[2]:
        return
    name = op.inputs[2]
    t32 = g.tensors[name]
    real = _real(g, name, None).reshape(-1)  # the quantizer's bias (bias correction included)
    if src is not None and name in src.tensors and src.tensors[name].quant is None \
            and t32.quant is not None and t32.dtype == "int32":
        exact = np.asarray(src.tensors[name].data, np.float64).reshape(-1)
        step = np.broadcast_to(t32.quant.scale.astype(np.float64), exact.shape)
        rounded = np.clip(np.round(exact / step), -2 ** 31, 2 ** 31 - 1) * step
        real = exact if float_only else exact + (real - rounded)
    w_scale = _quant(g, op.inputs[1]).scale.astype(np.float64)
    scale = bias_scale(in_scale, w_scale).astype(np.float32)
    scale = np.broadcast_to(scale, real.shape) if scale.size == 1 and real.size > 1 else scale
    # Saturate with the sign (a cast would wrap): 2**62 leaves the int64 accumulator room
    # for any sum of int16 x int16 products the kernels add to it.
    q = np.clip(np.round(real / scale.astype(np.float64)), -2 ** 62, 2 ** 62).astype(np.int64)
    g.tensors[name] = Tensor(name, t32.shape, "int64", symmetric(scale), q)


def _int16_weights(g: Graph, op: Op, src: Graph, in_scale: float, out_scale: float | np.ndarray,
                   fold: np.ndarray | None = None) -> None:
    """Replace the op's int8 weights by int16 ones (a16w16) on the same axis, from the float
    graph's weights and bias (:func:`libnpu.compiler.scales.quantize_weights16`). ``fold``:
    the channel scales of a per-channel input, multiplied into the float weights first
    (:mod:`libnpu.compiler.folding`; ``in_scale`` is then 1); ``out_scale`` one per output
    channel or one."""
    name = op.inputs[1]
    if name not in src.tensors or src.tensors[name].quant is not None:
        raise MixedPrecisionError(f"int16 weights: {op.describe()} has no float weights to requantize")
    w = np.asarray(src.tensors[name].data, np.float64)
    if fold is not None:
        w = w * weight_fold(w.shape, fold)
    q8 = _quant(g, name)
    b = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] in src.tensors else ""
    data, qp = quantize_weights16(w, q8.axis if q8.per_channel else None, src.tensors[b].data if b else None,
                                  in_scale, out_scale)
    g.tensors[name] = Tensor(name, g.tensors[name].shape, "int16", qp, data)


def _fold_into_int8_weights(g: Graph, op: Op, scales: np.ndarray) -> None:
    """Multiply a per-channel input's ``scales`` into the weight scales of a DEPTHWISE_CONV_2D
    with int8 weights (each output channel reads one input channel: no integer weight changes)."""
    name = op.inputs[1]
    t = g.tensors[name]
    q = _quant(g, name)
    factor = weight_fold(t.shape, scales).reshape(-1)
    scale = (np.broadcast_to(q.scale.astype(np.float64), factor.shape) * factor).astype(np.float32)
    g.tensors[name] = Tensor(name, t.shape, t.dtype, symmetric(scale, len(t.shape) - 1), t.data)


def _keep_multipliers(g: Graph, op: Op, in_scale: float, out_scale: np.ndarray) -> None:
    """Coarsen the int8 weight steps of a 16x8 op's channels whose requantization multiplier
    ``in x w / out`` falls under ``MIN_MULTIPLIER``: the chip flushes it to 0 and such a
    channel outputs 0, its bias lost, where the float simulation the escalation measures
    with keeps it (a near-dead depthwise channel on a per-channel int16 input, whose fine
    channel scale the weights carry: in paddleocr-en-v4-rec's escalated compile 51
    channels of 4 layers, some 0 on the chip where the simulation had -513 steps). Those weights round to a
    few steps or none, as :func:`~libnpu.compiler.scales.quantize_weights16` does for int16 weights."""
    name = op.inputs[1]
    t = g.tensors[name]
    q = _quant(g, name)
    scale = q.scale.astype(np.float64)
    floor = MIN_MULTIPLIER * out_scale / in_scale
    if floor.size != scale.size:
        floor = np.array([floor.max()]) if scale.size == 1 else np.broadcast_to(floor.max(), scale.shape)
    if np.all(scale >= floor):
        return
    wider = np.where(scale < floor, floor * 1.01, scale)
    shape = [1] * len(t.shape)
    if scale.size > 1:
        shape[q.axis] = -1
    real = np.asarray(t.data, np.float64) * scale.reshape(shape)
    data = np.clip(np.round(real / wider.reshape(shape)), -127, 127).astype(t.data.dtype)
    g.tensors[name] = Tensor(name, t.shape, t.dtype, symmetric(wider, q.axis if scale.size > 1 else 0), data)


def _headroom(g: Graph, name: str) -> float:
    return float(g.metadata.get("int16_headroom", {}).get(name, INT16_HEADROOM))


def promote(graph: Graph, names: Iterable[str], src: Graph | None = None,
            weights16: Iterable[str] = ()) -> Graph:
    """A copy of the int8 graph ``graph`` with the ops ``names`` (op or output tensor names)
    running on int16 activations, and the conversions they need.

    ``src`` is the float graph ``graph`` was quantized from (constant operands of ADD / MUL
    and biases are then requantized from their float values; without it they are
    dequantized first). Biases are the quantizer's (bias correction included), requantized
    to int64. ``weights16`` (some of ``names``, ops with weights; needs ``src``): those
    also get int16 weights (a16w16, the chip's ``OPF_WEIGHTS16``).
    The int16 output of a promoted op keeps the op's output name (a graph output of an
    int8-I/O graph stays int8: the int16 one is then ``<name>__int16``).
    """
    g = graph.copy()
    chosen = _select(g, names)
    wide = _select(g, weights16)
    for op in g.ops:
        if id(op) not in wide:
            continue
        if id(op) not in chosen or not takes_int16_weights(op):
            raise MixedPrecisionError(f"int16 weights: {op.describe()} is not a promoted op with weights")
        if src is None:
            raise MixedPrecisionError("int16 weights need the float graph (src)")
    if not chosen:
        return g
    peaks = g.metadata.get(CHANNEL_PEAKS)
    per_channel = per_channel_tensors(g, chosen, wide, peaks) if peaks else set()
    producer = {o: op for op in g.ops for o in op.outputs}
    consumers: dict[str, list[Op]] = {}
    for op in g.ops:
        for i in op.inputs:
            if i:
                consumers.setdefault(i, []).append(op)
    new_ops: list[Op] = []    # a state whose new value turns int16 turns int16 too (and is read as such):
    int16_of: dict[str, str] = int16_states.widen_states(g, chosen, lambda name: _int16_of(g, name), new_ops)
    promoted: list[str] = []
    widened: list[str] = []
    tensors: dict[str, list[str]] = {"int16_tensors": [], "int16_weight_tensors": []}
    for op in g.ops:
        if id(op) not in chosen:
            new_ops.append(op)
            continue
        weight_axis = registry.get(op.type, "weight_axis")
        ins = list(op.inputs)
        for k, i in enumerate(op.inputs):
            if not i or (weight_axis is not None and k in (1, 2)):
                continue
            if g.tensors[i].quant is None and not g.tensors[i].is_constant:
                continue      # on no grid (a host op's float input as given, an integer): as it is
            if g.tensors[i].is_constant:
                ins[k] = _int16_constant(g, i, src)
            else:
                if i not in int16_of:
                    int16_of[i] = _convert_to_int16(g, i, producer, new_ops)
                ins[k] = int16_of[i]
        out = op.outputs[0]
        t8 = g.tensors[out]
        data = [i for i in ins if i and not g.tensors[i].is_constant and g.tensors[i].quant is not None]
        if registry.get(op.type, "same_scale") and data:   # max(x, -0.4): the constant on x's grid
            ins = [_int16_constant(g, o, src, _quant(g, data[0])) if o and g.tensors[o].is_constant else i
                   for o, i in zip(op.inputs, ins)]
        joined = _same_grid(g, op, ins, new_ops) if registry.get(op.type, "same_scale") else None
        if joined is not None:
            quant = joined
        elif out in per_channel and moves_channels(op.type):
            quant = moved_quant(op, _quant(g, ins[0]), g.tensors[ins[0]].shape, t8)
        elif out in per_channel:
            quant = channel_quant(peaks[out], _headroom(g, out), len(t8.shape))
        elif registry.get(op.type, "fixed_output") is not None:
            quant = _SCALE_2_POW_15  # the int16 spec's fixed output (SOFTMAX)
        elif registry.get(op.type, "same_scale"):
            quant = _quant(g, ins[0])
        else:
            quant = _int16_of(g, out)
        if weight_axis is not None:
            in_quant = _quant(g, ins[0])
            fold = in_quant.scale.astype(np.float64) if in_quant.per_channel else None
            in_scale = 1.0 if fold is not None else float(in_quant.scale[0])
            if id(op) in wide:
                _int16_weights(g, op, src, in_scale, quant.scale.astype(np.float64), fold)  # type: ignore[arg-type]
                widened.append(op.name)
                tensors["int16_weight_tensors"].append(out)
            else:
                if fold is not None:
                    _fold_into_int8_weights(g, op, fold)
                _keep_multipliers(g, op, in_scale, quant.scale.astype(np.float64))
            _int64_bias(g, op, in_scale, src, float_only=id(op) in wide)
        after: list[Op] = []
        int8_users = [c for c in consumers.get(out, []) if id(c) not in chosen  # a host call reads any grid:
                      and c.type not in ("DEQUANTIZE", "HOST")]         # int8 for it undid a Loop's promotion
        if out in g.outputs:  # an int8 graph output stays int8
            out16 = g.unique_name(f"{out}__int16")
            g.add_tensor(Tensor(out16, t8.shape, "int16", quant))
            after.append(Op("QUANTIZE", [out16], [out], name=out))
            for c in consumers.get(out, []):
                if c.type == "DEQUANTIZE":
                    c.inputs = [out16 if x == out else x for x in c.inputs]
        else:
            out16 = out
            g.tensors[out] = Tensor(out, t8.shape, "int16", quant)
            if int8_users:
                out8 = g.unique_name(f"{out}__int8")
                g.add_tensor(Tensor(out8, t8.shape, "int8", t8.quant))
                after.append(Op("QUANTIZE", [out], [out8], name=out8))
                for c in int8_users:
                    c.inputs = [out8 if x == out else x for x in c.inputs]
        int16_of[out] = out16
        new_ops.append(Op(op.type, ins, [out16], dict(op.attrs), op.name))
        new_ops.extend(after)
        promoted.append(op.name)
        tensors["int16_tensors"].append(out)
    g.ops = new_ops + int16_states.tie_widened_states(g)
    _drop_dead_conversions(g)
    # op names are for people; output tensors name ops unambiguously (ONNX 1-D conv: TRANSPOSE's name)
    g.metadata = dict(g.metadata, int16_layers=promoted,
                      **({"int16_weights": widened} if widened else {}), **tensors)
    g.validate()
    return g


def _same_grid(g: Graph, op: Op, ins: list[str], ops: list[Op]) -> QuantParams | None:
    """The one int16 grid of a promoted same-scale op joining several activations (a
    CONCATENATION copies bytes, so its inputs must share the output's grid): the widest of
    its inputs' per-tensor grids, the others requantized onto it by a QUANTIZE appended to
    ``ops`` (``ins`` updated). None when there is nothing to join. Without it a TANH's int16
    output (2**-15) and another op's (twice its int8 reach) were concatenated as raw bytes."""
    data = [k for k, i in enumerate(ins) if i and not g.tensors[i].is_constant and g.tensors[i].quant is not None]
    quants = [_quant(g, ins[k]) for k in data]
    if len(data) < 2 or any(q.per_channel for q in quants):
        return None
    widest = max(quants, key=lambda q: float(q.scale[0]))
    for k, q in zip(data, quants):
        if float(q.scale[0]) != float(widest.scale[0]):
            moved = g.unique_name(f"{ins[k]}__to_{op.outputs[0]}")
            g.add_tensor(Tensor(moved, g.tensors[ins[k]].shape, "int16", widest))
            ops.append(Op("QUANTIZE", [ins[k]], [moved], name=moved))
            ins[k] = moved
    return widest


def _convert_to_int16(g: Graph, name: str, producer: Mapping[str, Op], ops: list[Op]) -> str:
    """Append the QUANTIZE giving an int16 copy of the int8 tensor ``name``: from the float
    graph input itself when ``name`` is that input's int8 edge."""
    p = producer.get(name)
    source = p.inputs[0] if p is not None and p.type == "QUANTIZE" and \
        g.tensors[p.inputs[0]].dtype == "float32" else name
    new = g.unique_name(f"{name}__int16")
    g.add_tensor(Tensor(new, g.tensors[name].shape, "int16", _int16_of(g, name)))
    ops.append(Op("QUANTIZE", [source], [new], name=new))
    return new


def _drop_dead_conversions(g: Graph) -> None:
    """Remove QUANTIZE ops (and their tensors) that nothing reads any more."""
    while True:
        used = {i for op in g.ops for i in op.inputs if i} | set(g.outputs) | {s.output for s in g.states}
        dead = [op for op in g.ops if op.type == "QUANTIZE" and op.outputs[0] not in used]
        if not dead:
            return
        for op in dead:
            g.ops.remove(op)
            del g.tensors[op.outputs[0]]


# automatic selection ---------------------------------------------------------------------

#: An output whose score all-int16 activations would raise by less than this is left alone by "auto" (int8 weights').
MIN_GAIN = 0.002
#: The share of the reachable gain "auto" settles for when the target is out of reach: all of it
#: (0.9 stopped rapidocr-cls at 16 int16 layers, 0.400 off unseen; every layer: 0.032): every layer, untried.
GAIN_SHARE = 1.0
#: The output score int16 weights aim for (``int16_weights="auto"``), after int16 activations:
#: face_landmark's face logit and hand_recrop's box scored 0.9939 / 0.9976 with every
#: activation int16 (both missed on unseen pictures), 0.9994 / 0.9995 with int16 weights.
WEIGHTS16_TARGET = 0.999


def _goals(base: Mapping[str, float], ceiling: Mapping[str, float], target: float) -> dict[str, float]:
    """Each output's goal: ``target``, or, when the most promotion can do (``ceiling``)
    does not reach it, ``GAIN_SHARE`` of its gain (-1, nothing, when that is below ``MIN_GAIN``)."""
    goal = {}
    for name, b in base.items():
        if b >= target or ceiling[name] >= target:
            goal[name] = min(target, ceiling[name]) if b < target else b
        elif ceiling[name] - b < MIN_GAIN:
            goal[name] = -1.0  # nothing to win on this output
        else:
            goal[name] = b + GAIN_SHARE * (ceiling[name] - b)
    return goal


def _fewest(ranked: Sequence[str], limit: int, goal: Mapping[str, float], ceiling: Mapping[str, float],
            scores_of) -> tuple[list[str], dict[str, float]]:
    """The first 1, 2, 4, ... of ``ranked`` (at most ``limit``) whose scores reach ``goal``; all, untried,
    when an output's goal is the ceiling's own score (only every layer is sure to: a try is a run per sample)."""
    k = len(ranked) if limit == len(ranked) and any(goal[n] >= ceiling[n] - 1e-9 for n in goal) else 1
    while True:
        chosen = list(ranked[:k])
        scores = dict(ceiling) if k == len(ranked) else scores_of(chosen)
        if all(scores[n] >= goal[n] for n in goal) or k >= limit:
            return chosen, scores
        k = min(2 * k, limit)


def choose_auto(float_graph: Graph, graph: Graph, dataset: Sequence[Feed], *,
                int16_target: float = DEFAULT_TARGET,
                max_layers: int | None = None) -> tuple[list[str], dict[str, float]]:
    """The ops to promote: the worst by their own int8 error, as few as reach the goal on
    every output (1, 2, 4, ... of them, at most ``max_layers``).

    An output's goal is ``int16_target``, or, when even int16 activations everywhere
    cannot reach it, ``GAIN_SHARE`` of what they would gain (nothing when that is below
    ``MIN_GAIN``: then its error comes from elsewhere, and promoting layers would only cost).
    Returns ``(output tensor names of the chosen ops, output scores of the chosen graph)``."""
    base = search_scores(float_graph, graph, dataset)
    if min(base.values(), default=1.0) >= int16_target:
        return [], base
    errors = layer_errors(float_graph, graph, dataset)
    by_output = {op.outputs[0]: op for op in graph.ops}
    ranked = [e.tensor for e in sorted(errors.values(), key=lambda e: e.local_sqnr_db)
              if e.tensor in by_output and promotable(by_output[e.tensor], graph)]
    limit = len(ranked) if max_layers is None else min(max_layers, len(ranked))
    if not limit:
        return [], base
    ceiling = search_scores(float_graph, promote(graph, ranked, float_graph), dataset)
    goal = _goals(base, ceiling, int16_target)
    if all(goal[n] <= base[n] for n in base):
        return [], base
    return _fewest(ranked, limit, goal, ceiling,
                   lambda chosen: search_scores(float_graph, promote(graph, chosen, float_graph), dataset))


def choose_weights16(float_graph: Graph, graph: Graph, names: Sequence[str], dataset: Sequence[Feed], *,
                     target: float = WEIGHTS16_TARGET) -> tuple[list[str], dict[str, float]]:
    """Which of the promoted ops ``names`` (int16 activations) also get int16 weights: the
    worst by their own error in the promoted graph (which, with int16 activations, is
    mostly their int8 weights'), as few as reach ``target`` on every output, chosen as
    :func:`choose_auto` chooses activations (1, 2, 4, ...; an output out of reach settles
    for most of the gain, one int16 weights do not improve is left alone).

    Returns ``(output tensor names of the chosen ops, output scores of the chosen graph)``."""
    promoted = promote(graph, names, float_graph)
    base = search_scores(float_graph, promoted, dataset)
    by_output = {op.outputs[0]: op for op in graph.ops}
    candidates = [n for n in names if n in by_output and takes_int16_weights(by_output[n])]
    if not candidates or min(base.values(), default=1.0) >= target:
        return [], base
    ceiling = search_scores(float_graph, promote(graph, names, float_graph, candidates), dataset)
    goal = _goals(base, ceiling, target)
    if all(goal[n] <= base[n] for n in base):
        return [], base
    errors = layer_errors(float_graph, promoted, dataset)
    ranked = sorted(candidates, key=lambda n: errors[n].local_sqnr_db if n in errors else math.inf)
    return _fewest(ranked, len(ranked), goal, ceiling,
                   lambda chosen: search_scores(float_graph, promote(graph, names, float_graph, chosen), dataset))


def widened_weights16(float_graph: Graph, graph: Graph, names: Sequence[str], weights16: Sequence[str],
                      scores: Mapping[str, float], dataset: Sequence[Feed], target: float = WEIGHTS16_TARGET,
                      ) -> tuple[list[str], list[str], dict[str, float]]:
    """``(int16 layers, int16 weights, output scores)``: ``names`` with ``weights16`` as
    chosen, or, when they leave an output under ``target``, int16 activations on every
    layer the chip runs in int16 and int16 weights on the fewest that reach it
    (:func:`choose_weights16` among them all), if that scores higher.

    The layers int16 activations help most need not be those whose int8 weights lose most
    (PP-OCRv5's recognizer: docs/models.md)."""
    every = [op.outputs[0] for op in graph.ops if promotable(op, graph)]
    if min(scores.values(), default=1.0) >= target or set(every) <= set(names):
        return list(names), list(weights16), dict(scores)
    wide, wide_scores = choose_weights16(float_graph, graph, every, dataset, target=target)
    if min(wide_scores.values(), default=1.0) > min(scores.values(), default=1.0):
        return every, wide, wide_scores
    return list(names), list(weights16), dict(scores)


def _headrooms(choice: float | str, q: Graph, float_graph: Graph, data: Sequence[Feed]) -> dict[str, float]:
    """The per-tensor int16 headroom ``choice`` asks for (see :func:`quantize_mixed`)."""
    if choice == "held-out":
        return held_out_headroom(float_graph, data)
    return {} if float(choice) == INT16_HEADROOM else {name: float(choice) for name in q.tensors}


def quantize_mixed(graph: Graph, dataset: Iterable[Feed] | None = None, *,
                   int16: str | Iterable[str] | None = "auto", int16_target: float = DEFAULT_TARGET,
                   max_int16_layers: int | None = None, int16_weights: str | Iterable[str] | None = "none",
                   int16_weights_target: float = WEIGHTS16_TARGET, int16_headroom: float | str = INT16_HEADROOM,
                   int16_grid: str = "per_tensor", int16_channel_spread: float = CHANNEL_SPREAD,
                   int16_channel_margin: float = CHANNEL_MARGIN, progress: Progress | None = None,
                   int16_search_data: Sequence[Feed] | None = None, int16_weights_widen: bool = False,
                   int16_optional: Collection[str] = (), **quantize_options: Any) -> Graph:
    """:func:`quantizer.quantize_model`, then int16 activations for the ops ``int16``
    selects (``"none"``, ``"auto"``, or op / tensor names: see the module docstring), and
    int16 weights for those of them ``int16_weights`` selects (``"none"``, ``"auto"``:
    :func:`choose_weights16` with ``int16_weights_target``, or names).

    The chosen op names are in the result's ``metadata["int16_layers"]`` and
    ``metadata["int16_weights"]`` (with "auto", also the output scores reached,
    ``metadata["int16_output_score"]``: see :func:`held_out.search_scores`).

    ``int16_headroom``: how far an int16 grid reaches beyond its tensor's calibrated range,
    a factor for every tensor or ``"held-out"``: each tensor's own, from its calibration
    samples (:func:`held_out_headroom`; ``INT16_HEADROOM`` without calibration data).

    ``int16_optional``: names of ``int16`` / ``int16_weights`` from a rule on the float graph (gone: skipped).
    ``int16_grid``: ``"per_tensor"`` (one scale per int16 tensor) or ``"per_channel"``: one
    scale per channel of the last axis where every op around the tensor can take it
    (:mod:`libnpu.compiler.channel_grids`), from each channel's calibrated peak; the
    choices of ``"auto"`` are measured with those grids; ``int16_channel_spread``: how many
    times finer than its tensor's widest channel a channel's grid may be
    (:data:`~libnpu.compiler.channel_grids.CHANNEL_SPREAD`). The metadata then has
    ``int16_grid`` and ``int16_per_channel_tensors`` (how many).

    ``int16_weights_widen``: with ``int16_weights="auto"``, search every layer the chip runs
    in int16 too when the selected ones miss ``int16_weights_target``
    (:func:`widened_weights16`: the default recipe's int16 weights step).

    ``int16_search_data``: the samples ``"auto"`` ranks layers and scores outputs on
    (default: the calibration data; the escalation gives its held-out samples).
    ``metadata["int16_searched_all"]``: the searches chose every layer they could."""
    selection = parse_selection(int16)
    wide = parse_selection(int16_weights)
    opt = once("optimize", (graph,), None, lambda: optimize(graph))   # shared by an escalation's steps
    random = dataset is None
    if random:
        data = random_dataset(opt, quantize_options.get("random_count", 8), seed=quantize_options.get("seed", 0))
    else:
        data = list(dataset)  # type: ignore[arg-type]
    opt = graph = gated(opt, data, progress)   # the float graph every measurement below compares with
    if quantize_options.get("equalize"):
        opt = graph = equalized(opt, data, progress)
    # With int16 layers the per-layer report is measured on the mixed graph, below.
    report = quantize_options.pop("layer_report", False) if selection != "none" else False
    if int16_headroom != "held-out" and (isinstance(int16_headroom, str) or not 1.0 <= float(int16_headroom) <= 16.0):
        raise MixedPrecisionError(f"int16 headroom {int16_headroom!r}: expected a factor in [1, 16] or 'held-out'")
    if int16_grid not in INT16_GRIDS:
        raise MixedPrecisionError(f"int16 grid {int16_grid!r}: expected one of {', '.join(INT16_GRIDS)}")
    for label, factor in (("spread", int16_channel_spread), ("margin", int16_channel_margin)):
        if isinstance(factor, str) or not float(factor) >= 1.0:
            raise MixedPrecisionError(f"int16 channel {label} {factor!r}: expected a factor >= 1")
    # Random data: the quantizer draws the same inputs itself, and then says its errors are theirs.
    q = quantize_model(graph, None if random else data, progress=progress, **quantize_options)
    if isinstance(q.metadata.get("calibration"), dict):
        q.metadata["calibration"]["random"] = random
    if selection == "none":
        if wide not in ("none", "auto"):
            raise MixedPrecisionError("int16 weights need int16 activations on their layers")
        return q
    with stage(progress, "mixed precision"):
        q.metadata["int16_headroom"] = _headrooms(int16_headroom, q, opt, [] if random else data)
        if int16_grid == "per_channel":
            peaks = once("channel peaks", (opt, *data), None, lambda: channel_peaks(opt, data))
            q.metadata[CHANNEL_PEAKS] = spread_limited(peaks, int16_channel_spread, int16_channel_margin)
        scores: dict[str, float] | None = None
        search = data if int16_search_data is None else list(int16_search_data)
        if selection == "auto":
            names, scores = choose_auto(opt, q, search, int16_target=int16_target, max_layers=max_int16_layers)
        else:
            picked = _select(q, selection, set(int16_optional))   # once: per op it cost ops x names x ops (minutes)
            names = [op.outputs[0] for op in q.ops if id(op) in picked]
        weights16: list[str] = []
        if wide == "auto" and (names or int16_weights_widen):
            weights16, w_scores = choose_weights16(opt, q, names, search, target=int16_weights_target)
            if int16_weights_widen:
                names, weights16, w_scores = widened_weights16(opt, q, names, weights16, w_scores, search,
                                                               int16_weights_target)
            scores = w_scores if weights16 else scores
        elif wide not in ("none", "auto"):
            wide_ops = _select(q, wide, set(int16_optional))      # a rule's names as q names them
            weights16 = [op.outputs[0] for op in q.ops if id(op) in wide_ops]
        result = promote(q, names, opt, weights16)
        if scores is not None:
            result.metadata["int16_output_score"] = {k: round(v, 6) for k, v in scores.items()}
        every = [op for op in q.ops if promotable(op, q)]   # all "auto" could choose: more samples choose no more
        result.metadata["int16_searched_all"] = "auto" in (selection, wide) and len(names) == len(every) \
            and (wide != "auto" or len(weights16) == sum(map(takes_int16_weights, every)))
    result.metadata.setdefault("int16_layers", [])
    if result.metadata.pop(CHANNEL_PEAKS, None) is not None:
        result.metadata["int16_grid"] = int16_grid
        result.metadata["int16_per_channel_tensors"] = sum(
            1 for t in result.tensors.values() if t.dtype == "int16" and not t.is_constant
            and t.quant is not None and t.quant.per_channel)
    result.metadata.pop("layer_errors", None)
    headroom = result.metadata.pop("int16_headroom", {})
    promoted_outputs = [t.name for t in result.tensors.values() if t.dtype == "int16" and not t.is_constant]
    used = [headroom[n] for n in promoted_outputs if n in headroom]
    if used:
        result.metadata["int16_headroom"] = {"min": round(min(used), 3), "median": round(float(np.median(used)), 3),
                                             "max": round(max(used), 3)}
    if report:
        with stage(progress, "accuracy"):
            result.metadata["layer_errors"] = errors_to_json(layer_errors(opt, result, data))
    return result
