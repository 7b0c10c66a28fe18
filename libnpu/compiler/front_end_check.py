"""Whether a front end needs float: measured by quantizing it alone with int16 activations and weights.

:mod:`libnpu.compiler.cpu_float` blames a layer that magnifies its input grid's error (the
log of a power spectrum) after the int8 step, and moves it with everything upstream of it
(its front end) to the CPU in float. A front end that costs little moves unmeasured
(``cpu_float.front_end_fits``: at most 8M multiply-adds, or a quarter of the model's).
A larger one once moved only when it was the whole model (99% of its multiply-adds): an
audio classifier that ships its log-mel inside (a 13M log-mel feeding a 4M CNN) stayed
on the chip, where no integer grid holds it: 0.61 at int8, 0.95 after every int16 step
and bias correction, 0.94 on audio calibration never saw.

It now moves, whatever it costs, when int16 would not hold it either: the question the
cap stood in for (a backbone mistaken for a front end, which the int16 steps hold, stays
on the chip). :func:`int16_front_end_scores` quantizes the front end alone (its ops as a
graph of their own, the model inputs they read in) with int16 activations on every layer
that has an int16 kernel and int16 weights on every one with weights (per-channel int16
grids: the most the escalation's integer steps give any layer), calibrated on the
escalation's calibration samples; the magnifying layer then runs in float on those int16
values (the chip's LOG reads an int8 grid whatever it is fed, so the chip's own op would
say no for any log), and its output is scored on the held-out samples
(:func:`libnpu.compiler.held_out.measure`). :func:`needs_float`: under the score the
escalation needs, the grid is the error and only float is free of one (the power of a
quiet frame spans more decades than 16 bits). A backbone that merely ends in a log-like
op scores well (its values span a few decades: int16 holds them) and stays on the chip.
The cost is one quantization of the front end and a float and a quantized run of it per
held-out sample, only for a front end over the cap that the int8 step already blames.
"""
from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from . import registry
from .held_out import measure
from .ir import Graph, Op
from .mixed_precision import promotable, quantize_mixed

__all__ = ["front_end_graph", "int16_front_end_scores", "needs_float"]

Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


def front_end_graph(graph: Graph, chain: Collection[str], outputs: Sequence[str]) -> Graph:
    """The float graph of ``graph``'s ops making ``chain`` (a front end: every op upstream of
    its last), its inputs the model inputs they read, its outputs ``outputs``."""
    ops = [op for op in graph.ops if op.outputs[0] in chain]
    sub = Graph(f"{graph.name}:front end:{outputs[-1]}")
    for name in dict.fromkeys(n for op in ops for n in (*op.inputs, *op.outputs) if n):
        sub.add_tensor(copy.deepcopy(graph.tensors[name]))
    sub.inputs = [n for n in graph.inputs if n in sub.tensors]
    sub.outputs = list(outputs)
    sub.ops = [Op(op.type, list(op.inputs), list(op.outputs), copy.deepcopy(op.attrs), op.name) for op in ops]
    sub.validate()
    return sub


def _feeds(graph: Graph, sub: Graph, feeds: Sequence[Feed]) -> list[dict[str, np.ndarray]]:
    """``feeds`` of ``graph`` (by name or in input order) as ``sub``'s inputs take them."""
    named = [feed if isinstance(feed, Mapping) else dict(zip(graph.inputs, feed, strict=True)) for feed in feeds]
    return [{n: feed[n] for n in sub.inputs} for feed in named]


def int16_front_end_scores(graph: Graph, chain: Collection[str], output: str, calibration: Sequence[Feed] | None,
                           held: Sequence[Feed]) -> dict[str, float]:
    """The scores against float (:func:`libnpu.compiler.held_out.measure` on ``held``) of the
    front end making ``output`` (``chain``: :func:`front_end_graph`), its ops up to the
    magnifying one quantized alone with int16 activations on every layer that has an int16
    kernel and int16 weights on every one with weights (per-channel grids), calibrated on
    ``calibration`` (None: random data, as the model's), and the magnifying op in float on
    what they make: by tensor, ``output`` and the input its op reads. The chip's LOG reads
    an int8 grid whatever its input's; in float it tells whether the int16 values hold
    what the op makes of them. {} when the op reads a model input (nothing to quantize)."""
    last = _op(graph, output)
    made_by_chain = [i for i in last.inputs if i in chain]
    if not made_by_chain:
        return {}
    fed = made_by_chain[0]
    full = front_end_graph(graph, chain, [fed, output])
    sub = front_end_graph(graph, [t for t in chain if t != output], [fed])
    wide = [op.outputs[0] for op in sub.ops if promotable(op)]
    weights = [t for t in wide if registry.get(_op(sub, t).type, "weight_axis") is not None]
    q = quantize_mixed(sub, None if calibration is None else _feeds(graph, sub, calibration),
                       int16=wide or "none", int16_weights=weights or "none", int16_grid="per_channel")
    (made,) = q.outputs          # the DEQUANTIZE of the int16 values the magnifying op reads, in float
    for name in (*last.inputs, output):
        if name and name != fed and name not in q.tensors:
            q.add_tensor(copy.deepcopy(full.tensors[name]))
    q.ops.append(Op(last.type, [made if i == fed else i for i in last.inputs], [output], copy.deepcopy(last.attrs),
                    last.name))
    q.outputs = [made, output]
    q.validate()
    return measure(full, q, _feeds(graph, full, held))[0]


def _op(graph: Graph, tensor: str) -> Op:
    return next(op for op in graph.ops if tensor in op.outputs)


def needs_float(scores: Mapping[str, float], output: str, need: float) -> bool:
    """Whether the front end measured by :func:`int16_front_end_scores` needs float: what
    its magnifying layer makes of the int16 values misses ``need`` (the values themselves
    may score far lower on a quiet sample, all under one step of an int8-only CLIP before
    the log: openwakeword's mel model, 0.0 where its log scored -0.98); a layer reading a
    model input does (one op, nothing to quantize)."""
    return not scores or scores[output] < need
