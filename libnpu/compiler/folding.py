"""Per-channel int16 activations feeding an op with weights: their channel scales live in
the weights.

An int16 activation tensor may have one scale per channel of its last axis (symmetric,
``int16_grid="per_channel"``, :mod:`libnpu.compiler.channel_grids`). A CONV_2D,
DEPTHWISE_CONV_2D or FULLY_CONNECTED reading one computes ``sum(x_q[i] * w_q[o, .., i])``
like any other: its weights were quantized from ``w[o, .., i] * s_in[i]`` (zero point 0,
so padding stays exact), its effective input scale is 1, and its requantization
multipliers are ``s_w[o] / s_out[o]``. The integer kernel, and the chip, are unchanged.
This module says which ops carry folded scales and how they broadcast over the weights;
the compiler's float simulation divides them back out (:mod:`libnpu.compiler.float_ref`).
"""
from __future__ import annotations

import numpy as np

from . import registry
from .ir import Graph, Op

__all__ = ["folded_input_scales", "weight_fold", "takes_channel_grids"]


def takes_channel_grids(op_type: str) -> bool:
    """Whether an operator's int16 activations may have per-channel grids (last axis): its
    parameters and lowering handle them (``registry.Operator.channel_grid``;
    :mod:`libnpu.compiler.channel_grids` chooses where)."""
    return registry.get(op_type, "channel_grid") is not None


def folded_input_scales(graph: Graph, op: Op) -> np.ndarray | None:
    """The channel scales of ``op``'s activation input that its weights carry (float64),
    or None: an op without weights, or whose input has one scale."""
    if registry.get(op.type, "weight_axis") is None:
        return None
    t = graph.tensors[op.inputs[0]]
    if t.dtype != "int16" or t.quant is None or not t.quant.per_channel:
        return None
    return t.quant.scale.astype(np.float64)


def weight_fold(weight_shape: tuple[int, ...], scales: np.ndarray) -> np.ndarray:
    """``scales`` (one per input channel) shaped to multiply weights of ``weight_shape``
    along their last axis: a convolution's OHWI or a fully connected layer's ``[out, in]``
    hold one entry per input channel there, a depthwise convolution's ``[1, KH, KW, C * M]``
    ``M`` in a row (output channel ``o`` reads input channel ``o // M``)."""
    scales = np.asarray(scales, np.float64)
    scales = np.repeat(scales, weight_shape[-1] // scales.size)
    return scales.reshape((1,) * (len(weight_shape) - 1) + (-1,))
