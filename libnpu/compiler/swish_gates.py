"""Channel equalization through a hard-swish: ``conv -> hard-swish [-> MUL c] [-> ADD c] ->
depthwise`` rewritten so that no tensor between the two convolutions starves a channel.

MobileNetV3-style blocks (PP-LCNet, PP-OCR's detectors, mediapipe's selfie segmentation)
put a hard-swish, and in PP-LCNetV3 a learnable affine ``a * h + b``, between a
convolution and the depthwise layer that reads it. The batch norm folded into that
depthwise layer amplifies the channels that stay small: in PP-OCRv5's text detector the
depthwise input's channels peak between 0.6 and 207 on the calibration pictures and its
weights are up to 100 times larger on the small ones, so one int8 grid for the whole tensor
(and for the convolution's output and the hard-swish's before it) leaves those channels a
step or two, and the depthwise output reached cosine 0.56 against float on a page of text
with every layer before it at 0.98 or more. :mod:`libnpu.compiler.equalization` lifts such
channels where the layers in between commute with a per-channel scale; a hard-swish does
not (``hswish(s x) != s hswish(x)``), so here the block is rewritten as::

    x' = k * conv(...)                   the convolution's weights and bias times k_c
    g  = relu6(x' / k + 3)               a 1x1 depthwise layer (weights 1/k_c, bias 3, RELU6)
    z' = x' * g + s b                    MUL, then ADD (none when b is 0)
    depthwise(z' ; weights / s)

with ``k_c = s_c a_c / 6``: ``x' * g = s a x relu6(x + 3) / 6 = s a hswish(x)``, so ``z' = s z``
and the depthwise layer computes what it did, in float exactly. ``s_c`` is
:func:`libnpu.compiler.equalization.channel_scales` of each channel's calibrated peak over
``z`` and ``a h`` (the MUL's output: an offset ``b`` must not hide how far ``a h`` moves),
with the sign of ``a_c``, so that ``k_c > 0``; every tensor from ``x'`` to ``z'`` then has
its channels within a factor of about four of each other, and the gate ``g`` lies in [0, 6]
for every channel. A channel whose ``x`` is at most -3 gives 0 whatever its value, so the
grid of ``x'`` need not reach below ``-3 max k``: the rewritten graph says so in its metadata
(:data:`RANGE_FLOORS`, which the quantizer applies to the calibrated ranges); without it a
channel's large negative values, which the hard-swish maps to 0, would set the grid.

Which blocks (:func:`gate_chains`): the producer a CONV_2D or depthwise layer (multiplier 1)
with constant float weights, no fused activation, its output read by the hard-swish only;
then MUL / ADD by constants that vary along the channels only (scalars or one per channel),
each read once; the last tensor read only by a depthwise layer (multiplier 1) as its input;
nothing in between a graph output or a state's new value. A block is rewritten only where
some channel is lifted (``s_c != 1``). It costs the chip one task per block (the 1x1 gate
and the MUL where the hard-swish's table lookup was one). The hard-swish is recognised by what
its operator computes (:func:`computes_swish`), as the fusion of its spellings recognises it.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import registry
from .equalization import channel_maxima, channel_scales
from .ir import Graph, Op, Tensor

__all__ = ["RANGE_FLOORS", "GATED", "Chain", "computes_swish", "gate_chains", "gate_swishes"]

#: Float-graph metadata: tensor name -> the lowest value its grid needs to hold (calibrated
#: values below it all give the same results downstream).
RANGE_FLOORS = "range_floors"
#: Float-graph metadata: how many blocks :func:`gate_swishes` rewrote.
GATED = "gated_swishes"
_SWISH_KNEE = 3.0        # hswish(x) = x * relu6(x + 3) / 6: 0 for x <= -3
_PRODUCERS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3}   # op type -> output-channel axis of its weights

_PROBE = np.linspace(-8.0, 8.0, 321, dtype=np.float32)

Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


@functools.cache
def computes_swish(op_type: str) -> bool:
    """Whether the operator's float reference, on one input and no attributes, is
    ``x * relu6(x + 3) / 6`` (probed on [-8, 8])."""
    operator = registry.find(op_type)
    if operator is None or operator.float_ref is None:
        return False
    try:
        with np.errstate(all="ignore"):
            y = operator.float_ref(Op(op_type, ["x"], ["y"], {}), [_PROBE], Tensor("y", _PROBE.shape, "float32"))
        y = np.asarray(y, np.float64)
    except Exception:  # an operator whose reference needs more inputs or attributes: not this one
        return False
    want = _PROBE * np.clip(_PROBE + _SWISH_KNEE, 0.0, 6.0) / 6.0
    return y.shape == want.shape and bool(np.allclose(y, want, atol=1e-5))


@dataclass
class Chain:
    """One block :func:`gate_swishes` may rewrite."""
    producer: Op
    swish: Op
    affine: list[Op]          # the MUL / ADD ops between the hard-swish and the depthwise layer
    readers: list[Op]         # the depthwise layer, and any CONV_2D also reading its input


def _readers(graph: Graph) -> dict[str, list[Op]]:
    readers: dict[str, list[Op]] = {}
    for op in graph.ops:
        for i in set(op.inputs):
            if i:
                readers.setdefault(i, []).append(op)
    return readers


def _own_float_constant(graph: Graph, name: str, readers: Mapping[str, list[Op]]) -> bool:
    t = graph.tensors[name]
    return t.is_constant and t.quant is None and t.dtype == "float32" and len(readers.get(name, [])) == 1


def _channel_vector(graph: Graph, name: str, channels: int) -> np.ndarray | None:
    """A constant's values per channel, if it varies along the last axis only."""
    t = graph.tensors[name]
    if not t.is_constant or t.quant is not None or t.dtype != "float32":
        return None
    d = np.asarray(t.data, np.float64)
    if d.size == 1:
        return np.full(channels, float(d.reshape(-1)[0]))
    if d.size == channels and d.shape[-1] == channels:
        return d.reshape(-1)
    return None


def _multiplier_one(op: Op) -> bool:
    return op.type != "DEPTHWISE_CONV_2D" or int(op.attrs.get("depth_multiplier", 1)) == 1


def _affine_step(graph: Graph, op: Op, tensor: str, channels: int) -> np.ndarray | None:
    """The per-channel constant of a MUL / ADD applied to ``tensor``, or None."""
    if op.type not in ("MUL", "ADD") or op.attrs.get("activation", "NONE") != "NONE" or len(op.inputs) != 2:
        return None
    other = [i for i in op.inputs if i != tensor]
    if len(other) != 1 or graph.tensors[op.outputs[0]].shape != graph.tensors[tensor].shape:
        return None
    return _channel_vector(graph, other[0], channels)


def _affine(graph: Graph, chain: Chain) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)`` with the chain's MUL / ADD ops computing ``a * h + b`` per channel."""
    t = chain.swish.outputs[0]
    channels = graph.tensors[t].shape[-1]
    a, b = np.ones(channels), np.zeros(channels)
    for op in chain.affine:
        v = _affine_step(graph, op, t, channels)
        assert v is not None          # gate_chains checked it
        a, b = (a * v, b * v) if op.type == "MUL" else (a, b + v)
        t = op.outputs[0]
    return a, b


def _divisible(graph: Graph, op: Op, name: str, readers: Mapping[str, list[Op]]) -> bool:
    """Whether ``op`` reads ``name`` as its input through weights with one slice per input
    channel on their last axis: a depthwise layer (multiplier 1) or a CONV_2D (one group)."""
    if op.type == "DEPTHWISE_CONV_2D":
        if not _multiplier_one(op):
            return False
    elif op.type != "CONV_2D" or int(op.attrs.get("groups", 1)) != 1:
        return False
    return op.inputs[0] == name and name not in op.inputs[1:] and _own_float_constant(graph, op.inputs[1], readers)


def gate_chains(graph: Graph) -> list[Chain]:
    """The blocks of ``graph`` (optimized, float) that :func:`gate_swishes` may rewrite
    (see the module docstring)."""
    readers = _readers(graph)
    producers = graph.producers()
    results = graph.results()
    chains = []
    for swish in graph.ops:
        if not computes_swish(swish.type) or len(swish.inputs) != 1:
            continue
        x = swish.inputs[0]
        p = producers.get(x)
        if p is None or p.type not in _PRODUCERS or not _multiplier_one(p) or x in results or \
                p.attrs.get("activation", "NONE") != "NONE" or len(readers.get(x, [])) != 1 or \
                not all(_own_float_constant(graph, n, readers) for n in p.inputs[1:3] if n):
            continue
        channels = graph.tensors[x].shape[-1] if graph.tensors[x].shape else 0
        affine: list[Op] = []
        t = swish.outputs[0]
        while t not in results and len(readers.get(t, [])) == 1 and \
                _affine_step(graph, readers[t][0], t, channels) is not None:
            affine.append(readers[t][0])
            t = readers[t][0].outputs[0]
        users = readers.get(t, [])
        if t in results or not any(d.type == "DEPTHWISE_CONV_2D" for d in users) or \
                not all(_divisible(graph, d, t, readers) for d in users):
            continue
        chain = Chain(p, swish, affine, users)
        a, _ = _affine(graph, chain)
        if np.all(np.isfinite(a)) and np.all(a != 0):
            chains.append(chain)
    return chains


def _scaled(graph: Graph, name: str, scale: np.ndarray, axis: int) -> None:
    t = graph.tensors[name]
    shape = [1] * len(t.shape)
    shape[axis] = -1
    data = (np.asarray(t.data, np.float64) * scale.reshape(shape)).astype(np.float32)
    graph.tensors[name] = Tensor(name, t.shape, "float32", None, data)


def _rewrite(g: Graph, chain: Chain, s: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Rewrite one block (module docstring) with lifts ``s``; returns ``x'``'s range floor."""
    p, swish = chain.producer, chain.swish
    x, z = swish.inputs[0], chain.readers[0].inputs[0]
    shape = g.tensors[x].shape
    signed = s * np.sign(a)
    k = s * np.abs(a) / 6.0
    _scaled(g, p.inputs[1], k, _PRODUCERS[p.type])
    if len(p.inputs) > 2 and p.inputs[2]:
        _scaled(g, p.inputs[2], k, 0)
    for d in chain.readers:       # weights with the input channels on their last axis
        _scaled(g, d.inputs[1], 1.0 / signed, 3)
    # new names for the rescaled tensors: no other graph's tensor of the old name means this
    x_new = g.add_tensor(Tensor(g.unique_name(f"{x}/gated"), shape, "float32")).name
    gate = g.add_tensor(Tensor(g.unique_name(f"{x}/gate"), shape, "float32")).name
    z_new = g.add_tensor(Tensor(g.unique_name(f"{z}/gated"), shape, "float32")).name
    p.outputs = [x_new]
    weights = g.add_const(f"{gate}/weights", (1.0 / k).reshape(1, 1, 1, -1).astype(np.float32)).name
    bias = g.add_const(f"{gate}/bias", np.full(shape[-1], _SWISH_KNEE, np.float32)).name
    ops = [Op("DEPTHWISE_CONV_2D", [x_new, weights, bias], [gate],
              {"stride": (1, 1), "dilation": (1, 1), "pads": (0, 0, 0, 0), "activation": "RELU6",
               "depth_multiplier": 1}, name=gate)]
    if np.any(b != 0):
        product = g.add_tensor(Tensor(g.unique_name(f"{x}/product"), shape, "float32")).name
        offset = g.add_const(f"{z_new}/offset", (signed * b).astype(np.float32)).name
        ops += [Op("MUL", [x_new, gate], [product], {"activation": "NONE"}, name=product),
                Op("ADD", [product, offset], [z_new], {"activation": "NONE"}, name=z_new)]
    else:
        ops.append(Op("MUL", [x_new, gate], [z_new], {"activation": "NONE"}, name=z_new))
    at = g.ops.index(swish)
    for old in (swish, *chain.affine):
        g.ops.remove(old)
    g.ops[at:at] = ops
    for d in chain.readers:
        d.inputs[0] = z_new
    return -_SWISH_KNEE * float(k.max())


def gate_swishes(graph: Graph, dataset: Iterable[Feed]) -> Graph:
    """A copy of the optimized float graph ``graph`` computing the same function with every
    :func:`gate_chains` block whose channels ``dataset`` shows apart rewritten (module
    docstring). The copy's metadata counts the blocks (:data:`GATED`) and gives the range
    floors (:data:`RANGE_FLOORS`)."""
    g = graph.copy()
    chains = gate_chains(g)
    data = list(dataset)
    names = [n for c in chains for n in (c.readers[0].inputs[0], c.swish.outputs[0])]
    peaks = channel_maxima(g, names, data) if chains and data else {}
    floors = dict(g.metadata.get(RANGE_FLOORS, {}))
    gated = 0
    for chain in chains:
        a, b = _affine(g, chain)
        z, h = chain.readers[0].inputs[0], chain.swish.outputs[0]
        if z not in peaks:
            continue
        s = channel_scales(np.maximum(peaks[z], np.abs(a) * peaks[h]))
        if not (s != 1.0).any():
            continue
        floor = _rewrite(g, chain, s, a, b)
        floors[chain.producer.outputs[0]] = floor
        gated += 1
    g.prune()
    g.toposort()
    g.validate()
    g.metadata = dict(g.metadata, **{GATED: gated}, **({RANGE_FLOORS: floors} if floors else {}))
    return g
