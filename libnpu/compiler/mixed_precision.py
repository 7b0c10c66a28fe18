"""Mixed precision: int16 activations (a16w8, TFLite's "16x8" scheme) for the layers that
lose most in int8.

A promoted op reads and writes int16 activations (symmetric, zero point 0, the scale
covering the range its int8 tensor covered), keeps its int8 per-channel weights, and gets
an int64 bias (scale = int16 input scale x weight scale); the chip runs it with its int16
kernels (``OPF_INT16``), which are byte-identical to LiteRT's 16x8 reference kernels.
Where an int16 tensor meets an int8 op (or an int8 one an int16 op) a QUANTIZE converts it
(int8 <-> int16 requantization); a float graph input feeding an int16 op is quantized
straight to int16 and an int16 output is dequantized straight to float.

``int16`` selections (:func:`quantize_mixed`, ``npu compile --int16``):

* ``"none"``: plain int8;
* names: the ops (by op name or output tensor name) to promote;
* ``"auto"``: rank the ops the chip can run in int16 by the error each adds in int8 (its
  own SQNR against float on the calibration data, ``accuracy.layer_errors``), then promote
  the worst 1, 2, 4, ... until every graph output's score against the float graph
  (:func:`output_scores`: cosine, or for tiny outputs the largest error relative to the
  output's magnitude) reaches ``int16_target`` (or ``max_layers`` are promoted). An
  output that even all-int16 activations cannot bring to the target settles for most of
  what they would gain, and one they would not improve is left alone (its error is not
  the activations': int8 weights, say).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from . import registry
from .float_ref import FloatInterpreter
from .ir import Graph, IRError, Op, QuantParams, Tensor
from .optimize import optimize
from .progress import Progress, stage

__all__ = ["MixedPrecisionError", "int16_quant", "promotable", "promote", "output_scores",
           "choose_auto", "quantize_mixed", "parse_selection", "DEFAULT_TARGET"]

INT16_MAX = 32767
DEFAULT_TARGET = 0.99
Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


class MixedPrecisionError(IRError):
    """An int16 selection that cannot be applied."""


def int16_quant(int8: QuantParams) -> QuantParams:
    """Symmetric int16 parameters covering the real range of an int8 tensor's grid."""
    s, z = float(int8.scale[0]), int(int8.zero_point[0])
    reach = max(abs(-128 - z), abs(127 - z)) * s
    return _symmetric(reach)


def _symmetric(reach: float) -> QuantParams:
    return QuantParams(np.array([reach / INT16_MAX], np.float32), np.zeros(1, np.int64))


_SCALE_2_POW_15 = QuantParams(np.array([2.0 ** -15], np.float32), np.zeros(1, np.int64))


def _quant(g: Graph, name: str) -> QuantParams:
    quant = g.tensors[name].quant
    if quant is None:
        raise MixedPrecisionError(f"int16: tensor {name!r} is not quantized")
    return quant


def promotable(op: Op) -> bool:
    """Whether ``op`` may run with int16 activations (conversions themselves stay as they are)."""
    return bool(registry.get(op.type, "int16")) and op.type not in ("QUANTIZE", "DEQUANTIZE")


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


def _select(g: Graph, names: Iterable[str]) -> set[int]:
    chosen: set[int] = set()
    for name in names:
        # The op producing a tensor of that name (unique), else the ops of that name (the
        # quantizer's edge ops share names with the ops they follow).
        by_tensor = [op for op in g.ops if name in op.outputs]
        by_name = [op for op in g.ops if op.name == name]
        if not by_tensor and not by_name:
            raise MixedPrecisionError(f"int16: no op or tensor named {name!r}")
        ops = [op for op in by_tensor if promotable(op)] or [op for op in by_name if promotable(op)]
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


def _int16_constant(g: Graph, name: str, src: Graph | None) -> str:
    """An int16 copy of a constant activation operand (ADD / MUL by a constant)."""
    real = _real(g, name, src)
    reach = float(np.abs(real).max(initial=0.0)) or 1.0
    qp = _symmetric(reach)
    new = g.unique_name(f"{name}__int16")
    g.add_tensor(Tensor(new, g.tensors[name].shape, "int16", qp, qp.quantize(real.astype(np.float32), "int16")))
    return new


def _int64_bias(g: Graph, op: Op, in_scale: float) -> None:
    """Requantize the op's bias to int64 at ``in_scale`` x weight scale (16x8 spec)."""
    if len(op.inputs) < 3 or not op.inputs[2]:
        return
    name = op.inputs[2]
    real = _real(g, name, None)  # the quantizer's bias (bias correction included), dequantized
    w_scale = _quant(g, op.inputs[1]).scale.astype(np.float64)
    scale = (np.float64(np.float32(in_scale)) * w_scale).astype(np.float32)
    scale = np.broadcast_to(scale, real.shape) if scale.size == 1 and real.size > 1 else scale
    q = np.round(real / scale.astype(np.float64)).astype(np.int64)
    g.tensors[name] = Tensor(name, g.tensors[name].shape, "int64",
                             QuantParams(scale, np.zeros(scale.size, np.int64)), q)


def promote(graph: Graph, names: Iterable[str], src: Graph | None = None) -> Graph:
    """A copy of the int8 graph ``graph`` with the ops ``names`` (op or output tensor names)
    running on int16 activations, and the conversions they need.

    ``src`` is the float graph ``graph`` was quantized from (constant operands of ADD / MUL
    are then requantized from their float values; without it they are dequantized first).
    Biases are the quantizer's (bias correction included), requantized to int64.
    The int16 output of a promoted op keeps the op's output name (a graph output of an
    int8-I/O graph stays int8: the int16 one is then ``<name>__int16``).
    """
    g = graph.copy()
    chosen = _select(g, names)
    if not chosen:
        return g
    producer = {o: op for op in g.ops for o in op.outputs}
    consumers: dict[str, list[Op]] = {}
    for op in g.ops:
        for i in op.inputs:
            if i:
                consumers.setdefault(i, []).append(op)
    int16_of: dict[str, str] = {}
    new_ops: list[Op] = []
    promoted: list[str] = []
    for op in g.ops:
        if id(op) not in chosen:
            new_ops.append(op)
            continue
        weight_axis = registry.get(op.type, "weight_axis")
        ins = list(op.inputs)
        for k, i in enumerate(op.inputs):
            if not i or (weight_axis is not None and k in (1, 2)):
                continue
            if g.tensors[i].is_constant:
                ins[k] = _int16_constant(g, i, src)
            else:
                if i not in int16_of:
                    int16_of[i] = _convert_to_int16(g, i, producer, new_ops)
                ins[k] = int16_of[i]
        if weight_axis is not None:
            _int64_bias(g, op, float(_quant(g, ins[0]).scale[0]))
        out = op.outputs[0]
        t8 = g.tensors[out]
        if registry.get(op.type, "fixed_output") is not None:
            quant = _SCALE_2_POW_15  # the int16 spec's fixed output (SOFTMAX)
        elif registry.get(op.type, "same_scale"):
            quant = _quant(g, ins[0])
        else:
            quant = int16_quant(_quant(g, out))
        after: list[Op] = []
        int8_users = [c for c in consumers.get(out, []) if id(c) not in chosen and c.type != "DEQUANTIZE"]
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
    g.ops = new_ops
    _drop_dead_conversions(g)
    g.metadata = dict(g.metadata, int16_layers=promoted)
    g.validate()
    return g


def _convert_to_int16(g: Graph, name: str, producer: Mapping[str, Op], ops: list[Op]) -> str:
    """Append the QUANTIZE giving an int16 copy of the int8 tensor ``name``: from the float
    graph input itself when ``name`` is that input's int8 edge."""
    p = producer.get(name)
    source = p.inputs[0] if p is not None and p.type == "QUANTIZE" and \
        g.tensors[p.inputs[0]].dtype == "float32" else name
    new = g.unique_name(f"{name}__int16")
    g.add_tensor(Tensor(new, g.tensors[name].shape, "int16", int16_quant(_quant(g, name))))
    ops.append(Op("QUANTIZE", [source], [new], name=new))
    return new


def _drop_dead_conversions(g: Graph) -> None:
    """Remove QUANTIZE ops (and their tensors) that nothing reads any more."""
    while True:
        used = {i for op in g.ops for i in op.inputs if i} | set(g.outputs)
        dead = [op for op in g.ops if op.type == "QUANTIZE" and op.outputs[0] not in used]
        if not dead:
            return
        for op in dead:
            g.ops.remove(op)
            del g.tensors[op.outputs[0]]


# automatic selection ---------------------------------------------------------------------

def _feed_for(graph: Graph, float_graph: Graph, feed: Feed) -> dict[str, np.ndarray]:
    if not isinstance(feed, Mapping):
        feed = dict(zip(float_graph.inputs, feed, strict=True))
    out = {}
    for name in graph.inputs:
        t, value = graph.tensors[name], np.asarray(feed[name], np.float32)
        out[name] = t.quant.quantize(value, t.dtype) if t.quant is not None and t.dtype != "float32" else value
    return out


#: Outputs with fewer values per sample are scored by their largest error, not cosine
#: (as issue 13's acceptance judges them).
SMALL_OUTPUT = 8


def output_scores(float_graph: Graph, graph: Graph, dataset: Sequence[Feed]) -> dict[str, float]:
    """How closely each output of the quantized ``graph`` (simulated by the float
    reference) follows ``float_graph``'s over ``dataset``, 1.0 being exact: the cosine
    similarity of all values, or for an output of fewer than ``SMALL_OUTPUT`` values
    (a score, a probability) ``1 - max |error| / max |reference|``."""
    ref_run, q_run = FloatInterpreter(float_graph), FloatInterpreter(graph)
    refs: dict[str, list[np.ndarray]] = {n: [] for n in graph.outputs}
    gots: dict[str, list[np.ndarray]] = {n: [] for n in graph.outputs}
    for feed in dataset:
        ref = ref_run.run(feed)
        got = q_run.run(_feed_for(graph, float_graph, feed))
        for fname, qname in zip(float_graph.outputs, graph.outputs):
            t = graph.tensors[qname]
            v = np.asarray(got[qname])
            v = t.quant.dequantize(v) if t.quant is not None and t.dtype != "float32" else v
            refs[qname].append(np.asarray(ref[fname], np.float64).reshape(-1))
            gots[qname].append(np.asarray(v, np.float64).reshape(-1))
    result = {}
    for n in graph.outputs:
        r, v = np.concatenate(refs[n]), np.concatenate(gots[n])
        if graph.tensors[n].size < SMALL_OUTPUT:
            scale = float(np.abs(r).max(initial=0.0))
            err = float(np.abs(r - v).max(initial=0.0))
            result[n] = 1.0 - (err / scale if scale > 0 else float(err > 0))
        else:
            rr, vv = float(r @ r), float(v @ v)
            result[n] = 1.0 if rr == vv == 0.0 else 0.0 if rr == 0.0 or vv == 0.0 else float(r @ v) / math.sqrt(rr * vv)
    return result


#: An output whose score all-int16 activations would raise by less than this is left
#: alone by "auto": its error is not the activations' (e.g. int8 weights).
MIN_GAIN = 0.002
#: The share of the reachable gain "auto" settles for when the target is out of reach.
GAIN_SHARE = 0.9


def choose_auto(float_graph: Graph, graph: Graph, dataset: Sequence[Feed], *,
                int16_target: float = DEFAULT_TARGET,
                max_layers: int | None = None) -> tuple[list[str], dict[str, float]]:
    """The ops to promote: the worst by their own int8 error, as few as reach the goal on
    every output (1, 2, 4, ... of them, at most ``max_layers``).

    An output's goal is ``int16_target``, or, when even int16 activations everywhere
    cannot reach it, ``GAIN_SHARE`` of what they would gain (nothing when that is below
    ``MIN_GAIN``: then its error comes from elsewhere, and promoting layers would only cost).
    Returns ``(output tensor names of the chosen ops, output scores of the chosen graph)``."""
    from .accuracy import layer_errors
    base = output_scores(float_graph, graph, dataset)
    if min(base.values(), default=1.0) >= int16_target:
        return [], base
    errors = layer_errors(float_graph, graph, dataset)
    by_output = {op.outputs[0]: op for op in graph.ops}
    ranked = [e.tensor for e in sorted(errors.values(), key=lambda e: e.local_sqnr_db)
              if e.tensor in by_output and promotable(by_output[e.tensor])]
    limit = len(ranked) if max_layers is None else min(max_layers, len(ranked))
    if not limit:
        return [], base
    ceiling = output_scores(float_graph, promote(graph, ranked, float_graph), dataset)
    goal = {}
    for name, b in base.items():
        if b >= int16_target or ceiling[name] >= int16_target:
            goal[name] = min(int16_target, ceiling[name]) if b < int16_target else b
        elif ceiling[name] - b < MIN_GAIN:
            goal[name] = -1.0  # nothing to win on this output
        else:
            goal[name] = b + GAIN_SHARE * (ceiling[name] - b)
    if all(goal[n] <= base[n] for n in base):
        return [], base
    chosen: list[str] = []
    k = 1
    while True:
        chosen = ranked[:k]
        scores = ceiling if k == len(ranked) else \
            output_scores(float_graph, promote(graph, chosen, float_graph), dataset)
        if all(scores[n] >= goal[n] for n in goal) or k >= limit:
            return chosen, scores
        k = min(2 * k, limit)


def quantize_mixed(graph: Graph, dataset: Iterable[Feed] | None = None, *,
                   int16: str | Iterable[str] | None = "auto", int16_target: float = DEFAULT_TARGET,
                   max_int16_layers: int | None = None, progress: Progress | None = None,
                   **quantize_options: Any) -> Graph:
    """:func:`quantizer.quantize_model`, then int16 activations for the ops ``int16``
    selects (``"none"``, ``"auto"``, or op / tensor names: see the module docstring).

    The chosen op names are in the result's ``metadata["int16_layers"]`` (with "auto",
    also the output scores reached, ``metadata["int16_output_score"]``: see
    :func:`output_scores`)."""
    from .quantizer import equalized, quantize_model, random_dataset
    selection = parse_selection(int16)
    opt = optimize(graph)
    random = dataset is None
    if random:
        data = random_dataset(opt, quantize_options.get("random_count", 8), seed=quantize_options.get("seed", 0))
    else:
        data = list(dataset)  # type: ignore[arg-type]
    if quantize_options.get("equalize"):   # the float graph every measurement below compares with
        opt = graph = equalized(opt, data, progress)
    # With int16 layers the per-layer report is measured on the mixed graph, below.
    report = quantize_options.pop("layer_report", False) if selection != "none" else False
    q = quantize_model(graph, data, progress=progress, **quantize_options)
    if isinstance(q.metadata.get("calibration"), dict):
        q.metadata["calibration"]["random"] = random
    if selection == "none":
        return q
    with stage(progress, "mixed precision"):
        if selection == "auto":
            names, scores = choose_auto(opt, q, data, int16_target=int16_target, max_layers=max_int16_layers)
            result = promote(q, names, opt)
            result.metadata["int16_output_score"] = {k: round(v, 6) for k, v in scores.items()}
        else:
            result = promote(q, selection, opt)
    result.metadata.setdefault("int16_layers", [])
    result.metadata.pop("layer_errors", None)
    if report:
        from .accuracy import errors_to_json, layer_errors
        with stage(progress, "accuracy"):
            result.metadata["layer_errors"] = errors_to_json(layer_errors(opt, result, data))
    return result
