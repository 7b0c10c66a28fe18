"""Per-op int8 kernel parameters, derived from an int8 IR op as TFLite's Prepare does.

The lowering copies these into task descriptors; names match the keyword arguments of
the chip's kernels (``firmware_sim.kernels``). All derivations come from the hardware
spec (``npu_hw.fixedpoint``), so compiler and chip cannot disagree. Each
operator declares its parameters in ``compiler.ops``; the helpers here are shared.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from npu_hw import fixedpoint as fp

from . import registry
from .folding import folded_input_scales
from .ir import Graph, IRError, Op

__all__ = ["op_params", "lowerable", "ACTIVATION_CODES", "qp", "act_range", "window", "weighted",
           "rescale", "channel_scales"]

ACTIVATION_CODES = {"NONE": fp.ACT_NONE, "RELU": fp.ACT_RELU, "RELU6": fp.ACT_RELU6,
                    "RELU_N1_TO_1": fp.ACT_RELU_N1_TO_1}


def qp(g: Graph, name: str) -> tuple[float, int]:
    """Per-tensor ``(scale, zero_point)`` of a quantized tensor."""
    t = g.tensors[name]
    if t.quant is None:
        raise IRError(f"tensor {name!r} has no quantization")
    return float(t.quant.scale[0]), int(t.quant.zero_point[0])


def channel_scales(g: Graph, name: str, channels: int) -> np.ndarray | None:
    """The scales of a per-channel tensor (one per index of its last axis, ``channels`` of
    them), or None when it has one scale."""
    t = g.tensors[name]
    if t.quant is None or not t.quant.per_channel:
        return None
    if t.quant.scale.size != channels or t.quant.axis != len(t.shape) - 1:
        raise IRError(f"tensor {name!r}: per-channel scales must be {channels}, on its last axis")
    return t.quant.scale


def act_range(g: Graph, op: Op) -> dict[str, int]:
    """``act_min`` / ``act_max`` of the op's fused activation on its output's grid."""
    s, z = qp(g, op.outputs[0])
    info = np.iinfo(g.tensors[op.outputs[0]].dtype)
    lo, hi = fp.fused_activation_range(ACTIVATION_CODES[op.attrs.get("activation", "NONE")], s, z,
                                       int(info.min), int(info.max))
    return dict(act_min=lo, act_max=hi)


def window(g: Graph, op: Op) -> dict[str, Any]:
    """Stride, leading padding and output size of a windowed op."""
    pads = op.attrs["pads"]
    return dict(stride=tuple(op.attrs["stride"]), padding=(pads[0], pads[2]),
                out_hw=tuple(g.tensors[op.outputs[0]].shape[1:3]))


def weighted(g: Graph, op: Op) -> dict[str, Any]:
    """Zero points and (per-channel) requantization of an op with weights (input 1).

    A per-channel int16 input's scales are in the weights (:mod:`libnpu.compiler.folding`):
    its effective scale is 1. A per-channel int16 output gives each channel its own
    ``in * w[o] / out[o]``."""
    folded = folded_input_scales(g, op) is not None
    in_s, in_z = (1.0, 0) if folded else qp(g, op.inputs[0])
    out_s, out_z = qp(g, op.outputs[0])
    w = g.tensors[op.inputs[1]]
    out_q = g.tensors[op.outputs[0]].quant
    if out_q is not None and out_q.per_channel:
        w_scales = np.broadcast_to(w.quant.scale, out_q.scale.shape)
        scale = np.concatenate([fp.effective_scale(in_s, ws, os) for ws, os in zip(w_scales, out_q.scale)])
    else:
        scale = fp.effective_scale(in_s, w.quant.scale, out_s)
    mult, shift = fp.quantize_multiplier_array(scale)
    return dict(input_zp=in_z, output_zp=out_z, multiplier=mult, shift=shift, scale=scale,
                **act_range(g, op))


def rescale(g: Graph, op: Op) -> dict[str, Any]:
    """Zero points and the multiplier taking the input's scale to the output's."""
    (si, zi), (so, zo) = qp(g, op.inputs[0]), qp(g, op.outputs[0])
    m, sh = fp.rescale_multiplier(si, so)
    return dict(input_zp=zi, output_zp=zo, multiplier=m, shift=sh)


def lowerable(op_type: str) -> bool:
    """Whether the chip runs int8 ops of this type (parameters and a lowering)."""
    operator = registry.find(op_type)
    return operator is not None and operator.params is not None and operator.lower is not None


def op_params(graph: Graph, op: Op) -> dict[str, Any]:
    """Keyword parameters of the int8 kernel that computes ``op`` (tensors excluded)."""
    fn = registry.get(op.type, "params")
    if fn is None:
        raise IRError(f"no int8 kernel parameters for {op.describe()}")
    params = fn(graph, op)
    for k, v in params.items():
        if isinstance(v, np.ndarray) and v.dtype == np.int64:
            params[k] = v.astype(np.int32)
    return params
