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
on the chip). :func:`measure_int16_front_end` quantizes the front end alone (its ops as a
graph of their own, the model inputs they read in) with int16 activations on every layer
that has an int16 kernel and int16 weights on every one with weights (per-channel int16
grids: the most the escalation's integer steps give any layer), calibrated on the
escalation's calibration samples; the magnifying layer then runs in float on those int16
values (the chip's LOG reads an int8 grid whatever it is fed, so the chip's own op would
say no for any log), and its output is measured on the held-out samples.
:func:`needs_float`: its score under the one the escalation needs (held_out.measure),
and its SQNR still 10 dB or more under that of the values it reads (the grid's error
magnified, as the int8 step's blame found it, not the front end's own rounding carried on):
the grid is the error and only float is free of one (the power of a quiet frame spans
more decades than 16 bits: a synthetic log-mel's log scores 0.36, openwakeword's -0.98,
basic-pitch's CQT 0.89). A backbone that merely ends in a log-like op scores well (its
values span a few decades: 0.99995) and stays on the chip. The cost is one quantization
of the front end and two float and two quantized runs of it per held-out sample, only for
a front end over the cap that the int8 step already blames.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from . import registry
from .accuracy import quantized_feed
from .float_ref import FloatInterpreter
from .held_out import measure
from .ir import Graph, Op
from .mixed_precision import promotable, quantize_mixed

__all__ = ["Int16FrontEnd", "front_end_graph", "measure_int16_front_end", "needs_float"]

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


class Int16FrontEnd(NamedTuple):
    """What int16 on a front end alone gives its magnifying layer (:func:`measure_int16_front_end`)."""
    score: float      # the layer's output, the worst held-out sample (held_out.measure)
    drop_db: float    # how far its SQNR falls under its input's, over all the samples


def measure_int16_front_end(graph: Graph, chain: Collection[str], output: str, calibration: Sequence[Feed] | None,
                            held: Sequence[Feed]) -> Int16FrontEnd | None:
    """The front end making ``output`` (``chain``: :func:`front_end_graph`), its ops up to
    the magnifying one quantized alone with int16 activations on every layer that has an
    int16 kernel and int16 weights on every one with weights (per-channel grids),
    calibrated on ``calibration`` (None: random data, as the model's), and the magnifying
    op in float on what they make, measured against float on ``held``. The chip's LOG reads
    an int8 grid whatever its input's; in float it tells whether the int16 values hold
    what the op makes of them. None when the op reads a model input (nothing to quantize)."""
    last = _op(graph, output)
    made_by_chain = [i for i in last.inputs if i in chain]
    if not made_by_chain:
        return None
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
    feeds = _feeds(graph, full, held)
    score = measure(full, q, feeds)[0][output]
    sqnr = _sqnr_db(full, q, feeds)
    return Int16FrontEnd(score, sqnr[made] - sqnr[output])


def _sqnr_db(float_graph: Graph, graph: Graph, feeds: Sequence[Mapping[str, np.ndarray]]) -> dict[str, float]:
    """Each output's SQNR in ``graph`` against ``float_graph`` over all ``feeds``, by name (both
    graphs name their outputs alike: the quantized one's are DEQUANTIZE outputs)."""
    ref_run, run = FloatInterpreter(float_graph), FloatInterpreter(graph)
    signal = dict.fromkeys(graph.outputs, 0.0)
    noise = dict.fromkeys(graph.outputs, 0.0)
    for feed in feeds:
        want, got = ref_run.run(feed), run.run(quantized_feed(graph, float_graph, feed))
        for name in graph.outputs:
            ref = np.asarray(want[name], np.float64)
            signal[name] += float(np.sum(ref ** 2))
            noise[name] += float(np.sum((np.asarray(got[name], np.float64) - ref) ** 2))
    return {n: 10 * math.log10(max(signal[n], 1e-300) / max(noise[n], 1e-300)) for n in graph.outputs}


def _op(graph: Graph, tensor: str) -> Op:
    return next(op for op in graph.ops if tensor in op.outputs)


def needs_float(measured: Int16FrontEnd | None, need: float, magnified_db: float) -> bool:
    """Whether the front end :func:`measure_int16_front_end` measured needs float: what its
    magnifying layer makes of the int16 values misses ``need`` and still falls
    ``magnified_db`` or more under them (the grid's error magnified, as the int8 step's
    blame found: ``cpu_float.AMPLIFIED_DB``, not the front end's own rounding carried on;
    the values are compared over all the samples, as a quiet one can leave the power all
    under one step of an int8-only CLIP before the log: openwakeword's mel model); a layer
    reading a model input does (one op, nothing to quantize)."""
    return measured is None or measured.score < need and measured.drop_db >= magnified_db
