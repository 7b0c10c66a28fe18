"""Per-channel grids for int16 activation tensors (``int16_grid="per_channel"``).

A tensor's int16 grid may have one scale per channel of its last axis (symmetric, zero
point 0), each covering the headroom times that channel's calibrated peak instead of the
whole tensor's. On mediapipe's hand_recrop the residual trunk's channels added by each
stage stay at 5-15% of the trunk's range, and the depthwise layers after the parametric ReLUs
amplify their rounding: per-channel grids take the rounding's predicted error from 0.037
to 0.012 pixels rms with the same 2x headroom (``benchmarks/rounding_noise.py``), and with
the margin below the device's from 0.048 to 0.023 on 18 unseen pictures
(``benchmarks/unseen_variants.py``). Each channel's grid reaches the tensor's headroom times
``CHANNEL_MARGIN`` times its own calibrated peak, within ``1 / CHANNEL_SPREAD`` of the
widest channel's reach and never beyond it (:func:`spread_limited`, :func:`channel_quant`).

Which tensors get one (:func:`per_channel_tensors`): the output of a promoted op that
rescales (``registry.Operator.channel_grid == "rescale"``: the convolutions, fully
connected, ADD and the parametric ReLU; fused activation none or RELU, whose clamp does not depend on the
scale) or that moves channels without rescaling them (``"move"``: max pooling, padding,
strided slices and reshapes keeping the last axis; their output takes the input's channel
scales), when every op reading it can take one, as its operator's ``channel_reader`` says:

* a depthwise convolution (:func:`reads_activation`): its weights take the scales
  (:mod:`libnpu.compiler.folding`), which changes no integer weight;
* a convolution or fully connected layer with int16 weights (:func:`reads_folded`): the
  same, requantized from the float weights. Not with int8 weights: folding gives a starved
  input channel's weights fewer steps, and the quantizer's GPTQ rounding of the int8
  weights would be lost;
* ADD (:func:`reads_broadcast`) and the parametric ReLU's x (:func:`reads_activation`): the chip's
  per-channel int16 descriptors (``*16_PER_CHANNEL``, docs/hardware.md);
* a channel-moving op whose output gets one too.

Anything else (an int8 op, a conversion, a graph output, another int16 op) keeps the
tensor per tensor. Graph inputs and outputs, and int8 tensors, never change.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from . import registry
from .float_ref import FloatInterpreter, evaluate
from .ir import Graph, Op, QuantParams, Tensor
from .scales import choose_int16_scale, symmetric

__all__ = ["INT16_GRIDS", "MIN_CHANNEL_RATIO", "CHANNEL_SPREAD", "CHANNEL_MARGIN", "rescales", "moves_channels",
           "reads_activation", "reads_folded", "reads_broadcast", "channel_peaks", "spread_limited",
           "per_channel_tensors", "channel_quant", "moved_quant", "channel_map"]

INT16_GRIDS = ("per_tensor", "per_channel")
#: A channel's step is at least this fraction of its tensor's widest channel's step, so a
#: dead channel (peak 0) keeps requantization multipliers the chip's shifts can hold.
MIN_CHANNEL_RATIO = 2.0 ** -12
#: A channel's grid is at most this many times finer than its tensor's widest channel's:
#: a narrow channel's own peak on ten calibration pictures says little about unseen ones
#: (measured: see docs/models.md).
CHANNEL_SPREAD = 16.0
#: How much further than its own calibrated peak (times the tensor's headroom) a channel's
#: grid reaches: a narrow channel can leave its range on unseen pictures by more than the
#: whole tensor does (at 1, hand_recrop clipped on 4 of 18 unseen variants; 3 and 4 trade
#: its gain for face_detection_short_range's faces: docs/models.md).
CHANNEL_MARGIN = 2.0
Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


def channel_peaks(float_graph: Graph, dataset: Sequence[Feed]) -> dict[str, np.ndarray]:
    """The largest magnitude of each channel (last axis) of every op output of
    ``float_graph`` over ``dataset``."""
    run = FloatInterpreter(float_graph)
    names = [o for op in float_graph.ops for o in op.outputs if float_graph.tensors[o].shape]
    peaks: dict[str, np.ndarray] = {}
    for feed in dataset:
        values = run.run(feed, keep=names)
        for n in names:
            v = np.abs(np.asarray(values[n], np.float64))
            peak = v.reshape(-1, v.shape[-1]).max(axis=0, initial=0.0)
            peaks[n] = np.maximum(peaks[n], peak) if n in peaks else peak
    return peaks


def spread_limited(peaks: Mapping[str, np.ndarray], spread: float, margin: float = 1.0) -> dict[str, np.ndarray]:
    """Each tensor's channel peaks times ``margin``, raised to at least its widest channel's
    peak / ``spread`` and at most that peak (no channel's grid is coarser than the tensor's)."""
    result = {}
    for n, p in peaks.items():
        top = float(p.max(initial=0.0))
        result[n] = np.minimum(np.maximum(p * float(margin), top / float(spread)), top)
    return result


def rescales(op_type: str) -> bool:
    """Whether the operator may give its int16 output a per-channel grid of its own."""
    return registry.get(op_type, "channel_grid") == "rescale"


def moves_channels(op_type: str) -> bool:
    """Whether the operator's output holds some of its input's channels, keeping their scales."""
    return registry.get(op_type, "channel_grid") == "move"


# Operators' channel_reader rules: (graph, op, tensor name, int16 weights) -> bool.
def reads_activation(g: Graph, op: Op, name: str, int16_weights: bool) -> bool:
    """The tensor is the op's activation input (input 0) and none of its others."""
    return op.inputs[0] == name and name not in op.inputs[1:]


def reads_folded(g: Graph, op: Op, name: str, int16_weights: bool) -> bool:
    """As :func:`reads_activation`, for an op whose int16 weights take the input's channel
    scales (one weight column per input channel)."""
    return (reads_activation(g, op, name, int16_weights) and int16_weights
            and g.tensors[op.inputs[1]].shape[-1] == g.tensors[name].shape[-1])


def reads_broadcast(g: Graph, op: Op, name: str, int16_weights: bool) -> bool:
    """Any input whose channels are the output's (no broadcast along the last axis)."""
    return g.tensors[op.outputs[0]].shape[-1] == g.tensors[name].shape[-1]


def channel_map(op: Op, in_shape: tuple[int, ...], out: Tensor) -> np.ndarray | None:
    """For a channel-moving op: the input channel each output channel holds (-1 where it
    holds padding), or None when its output's channels do not each come from one input
    channel (a reshape or slice across the last axis)."""
    if not in_shape or not out.shape:
        return None
    probe = np.broadcast_to(np.arange(1, in_shape[-1] + 1, dtype=np.float32), in_shape)
    try:
        y = np.asarray(evaluate(op, [probe] + [None] * (len(op.inputs) - 1), out), np.float32)
    except (ValueError, IndexError, TypeError, KeyError):
        return None
    if y.shape != out.shape:
        return None
    flat = y.reshape(-1, y.shape[-1])
    top = flat.max(axis=0, initial=0.0)
    if np.any((flat != 0) & (flat != top)):
        return None
    return top.astype(np.int64) - 1


def _accepts(g: Graph, reader: Op, name: str, chosen: Collection[int], wide: Collection[int],
             candidates: Collection[str]) -> bool:
    """Whether ``reader`` can read ``name`` on a per-channel grid."""
    if id(reader) not in chosen:
        return False
    if moves_channels(reader.type):
        return reader.inputs[0] == name and reader.outputs[0] in candidates
    accepts = registry.get(reader.type, "channel_reader") if rescales(reader.type) else None
    return accepts is not None and bool(accepts(g, reader, name, id(reader) in wide))


def per_channel_tensors(g: Graph, chosen: Collection[int], wide: Collection[int],
                        peaks: Mapping[str, np.ndarray]) -> set[str]:
    """The activation tensors of the int8 graph ``g`` that get per-channel int16 grids
    when the ops ``chosen`` (ids) run in int16 and those in ``wide`` have int16 weights
    (see the module docstring); ``peaks`` from :func:`channel_peaks`."""
    producer = {o: op for op in g.ops for o in op.outputs}
    readers: dict[str, list[Op]] = {}
    for op in g.ops:
        for i in set(op.inputs):
            if i:
                readers.setdefault(i, []).append(op)
    candidates: set[str] = set()
    for op in g.ops:
        out = op.outputs[0]
        t = g.tensors[out]
        if id(op) not in chosen or out in g.outputs or len(op.outputs) != 1 or not t.shape \
                or op.attrs.get("activation", "NONE") not in ("NONE", "RELU"):
            continue
        if rescales(op.type) and out in peaks and peaks[out].shape == (t.shape[-1],):
            candidates.add(out)
        elif moves_channels(op.type) and channel_map(op, g.tensors[op.inputs[0]].shape, t) is not None:
            candidates.add(out)
    changed = True
    while changed:
        changed = False
        for name in sorted(candidates):
            p = producer[name]
            ok = not (moves_channels(p.type) and p.inputs[0] not in candidates)
            ok = ok and all(_accepts(g, r, name, chosen, wide, candidates) for r in readers.get(name, []))
            if not ok:
                candidates.discard(name)
                changed = True
    return candidates


def channel_quant(peaks: np.ndarray, headroom: float, rank: int) -> QuantParams:
    """Symmetric int16 parameters, one scale per channel covering ``headroom`` times its
    peak (at least ``MIN_CHANNEL_RATIO`` of the widest channel's), on the last axis."""
    reach = headroom * np.asarray(peaks, np.float64)
    top = float(reach.max(initial=0.0)) or 1.0
    return choose_int16_scale(np.maximum(reach, top * MIN_CHANNEL_RATIO), rank - 1)


def moved_quant(op: Op, source: QuantParams, in_shape: tuple[int, ...], out: Tensor) -> QuantParams:
    """The output grid of a channel-moving op: each channel the scale of the input channel
    it holds (padding channels the widest one's: they hold zeros)."""
    where = channel_map(op, in_shape, out)
    if where is None:
        raise ValueError(f"{op.describe()}: its output channels do not come one by one from its input's")
    scales = np.broadcast_to(source.scale, (in_shape[-1],))
    picked = np.where(where >= 0, scales[np.maximum(where, 0)], scales.max())
    return symmetric(picked, len(out.shape) - 1)
