"""Channel equalization: lift the channels a per-tensor activation grid starves.

An activation tensor gets one scale for all its channels (per-tensor quantization), set
by its widest channel. A channel whose values stay far below the others' is then left a
handful of steps, and if the next layer amplifies it (batch norm folded into that layer's
weights), the rounding error comes out amplified too. mediapipe's pose_landmark_full:
its first convolution's channel 15 stays under 0.015 while the others reach 6, and the
depthwise layer after it multiplies that channel by about 400. With every activation
int16 and every weight exact, that one tensor's rounding alone takes the segmentation
output from cosine 0.99 to 0.97 against float on an unseen picture (simulated).

For a layer A with weights whose output feeds only a DEPTHWISE_CONV_2D B, channel c of
A's output is multiplied by ``s_c`` (A's weights and bias for output channel c) and B's
weights for channel c are divided by it: the float graph computes the same function
(Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias Correction",
2019, cross-layer equalization; here the activation ranges are equalized, on the
calibration data). A's fused activation must commute with the scaling: NONE and RELU do
for any ``s_c > 0``; RELU6 does while ``s_c * value <= 6``, which ``s_c`` keeps for
``HEADROOM`` times the channel's largest calibrated value (beyond that, the scaled
channel is clipped, as any activation beyond its calibrated range is clipped by its
grid). B is depthwise so that its weights are quantized per channel: dividing channel
c's weights by ``s_c`` leaves their relative rounding error as it was.

``s_c = min(MAX_SCALE, R / (HEADROOM * r_c))`` where ``r_c`` is channel c's largest
magnitude on the calibration data and ``R`` the tensor's; a channel that would be lifted
by less than ``MIN_SCALE``, or that is always zero, keeps ``s_c = 1``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from .float_ref import FloatInterpreter
from .ir import Graph, Op, Tensor

__all__ = ["HEADROOM", "MAX_SCALE", "MIN_SCALE", "equalization_pairs", "channel_scales", "equalize"]

HEADROOM = 4.0      # a scaled channel keeps room for this many times its calibrated maximum
MAX_SCALE = 1024.0  # no channel is lifted more than this
MIN_SCALE = 2.0     # smaller lifts are not worth the change
_COMMUTING = ("NONE", "RELU", "RELU6")
_PRODUCERS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3}   # op type -> output-channel axis of its weights

Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


def _depth_multiplier_one(op: Op) -> bool:
    return op.type != "DEPTHWISE_CONV_2D" or int(op.attrs.get("depth_multiplier", 1)) == 1


def equalization_pairs(graph: Graph) -> list[tuple[Op, Op]]:
    """``(A, B)`` pairs that :func:`equalize` may rescale: A a CONV_2D or depthwise layer
    with constant float weights and a commuting activation, whose output is not a graph
    output (nor a state's new value) and is read by one op only, B, a depthwise layer (multiplier 1) with constant
    float weights; the weights and biases read by A or B alone."""
    readers: dict[str, list[Op]] = {}
    for op in graph.ops:
        for i in op.inputs:
            if i:
                readers.setdefault(i, []).append(op)
    carried = {s.output for s in graph.states}   # read again by the next call: not internal
    pairs = []
    for a in graph.ops:
        if a.type not in _PRODUCERS or not _depth_multiplier_one(a) or \
                a.attrs.get("activation", "NONE") not in _COMMUTING:
            continue
        out = a.outputs[0]
        users = readers.get(out, [])
        if out in graph.outputs or out in carried or len(users) != 1:
            continue
        b = users[0]
        if b.type != "DEPTHWISE_CONV_2D" or not _depth_multiplier_one(b) or b.inputs[0] != out:
            continue
        constants = [n for n in (*a.inputs[1:3], b.inputs[1]) if n]
        if all(_float_constant(graph, n) and len(readers.get(n, [])) == 1 for n in constants):
            pairs.append((a, b))
    return pairs


def _float_constant(graph: Graph, name: str) -> bool:
    t = graph.tensors[name]
    return t.is_constant and t.quant is None and t.dtype in ("float32", "float16")


def channel_maxima(graph: Graph, names: Sequence[str], dataset: Iterable[Feed]) -> dict[str, np.ndarray]:
    """Largest magnitude of each channel (last axis) of the tensors ``names`` over ``dataset``."""
    run = FloatInterpreter(graph)
    maxima: dict[str, np.ndarray] = {}
    for feed in dataset:
        values = run.run(feed, keep=list(names))
        for n in names:
            v = np.abs(np.asarray(values[n], np.float64))
            m = v.reshape(-1, v.shape[-1]).max(axis=0, initial=0.0)
            maxima[n] = np.maximum(maxima[n], m) if n in maxima else m
    return maxima


def channel_scales(maxima: np.ndarray) -> np.ndarray:
    """``s_c`` for channels whose calibrated maxima are ``maxima`` (see the module docstring)."""
    top = float(maxima.max(initial=0.0))
    scales = np.ones_like(maxima, dtype=np.float64)
    live = maxima > 0
    if top <= 0:
        return scales
    target = np.minimum(MAX_SCALE, top / (HEADROOM * np.where(live, maxima, 1.0)))
    lift = live & (target >= MIN_SCALE)
    scales[lift] = target[lift]
    return scales


def _scaled(t: Tensor, scale: np.ndarray, axis: int) -> Tensor:
    shape = [1] * len(t.shape)
    shape[axis] = -1
    data = (np.asarray(t.data, np.float64) * scale.reshape(shape)).astype(np.float32)
    return Tensor(t.name, t.shape, "float32", None, data)


def equalize(graph: Graph, dataset: Iterable[Feed]) -> Graph:
    """A copy of the float graph ``graph`` computing the same function with the channels of
    every :func:`equalization_pairs` tensor lifted toward its widest channel, as measured
    on ``dataset``. The copy's metadata counts the channels lifted (``"equalized_channels"``)."""
    g = graph.copy()
    pairs = equalization_pairs(g)
    maxima = channel_maxima(g, [a.outputs[0] for a, _ in pairs], list(dataset)) if pairs else {}
    lifted = 0
    for a, b in pairs:
        s = channel_scales(maxima[a.outputs[0]])
        if not (s != 1.0).any():
            continue
        g.tensors[a.inputs[1]] = _scaled(g.tensors[a.inputs[1]], s, _PRODUCERS[a.type])
        if len(a.inputs) > 2 and a.inputs[2]:
            g.tensors[a.inputs[2]] = _scaled(g.tensors[a.inputs[2]], s, 0)
        g.tensors[b.inputs[1]] = _scaled(g.tensors[b.inputs[1]], 1.0 / s, 3)
        lifted += int((s != 1.0).sum())
    g.metadata = dict(g.metadata, equalized_channels=lifted)
    return g
