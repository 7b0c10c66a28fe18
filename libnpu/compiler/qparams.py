"""Per-op int8 kernel parameters, derived from an int8 IR op as TFLite's Prepare does.

The lowering copies these into task descriptors; names match the keyword arguments of
the chip's kernels (``firmware_sim.kernels``). All derivations come from the hardware
spec (``firmware_sim.spec.fixedpoint``), so compiler and chip cannot disagree.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from firmware_sim.spec import fixedpoint as fp

from .ir import Graph, IRError, Op, strided_slice_masks

__all__ = ["op_params", "ACTIVATION_CODES", "SUPPORTED_OPS"]

ACTIVATION_CODES = {"NONE": fp.ACT_NONE, "RELU": fp.ACT_RELU, "RELU6": fp.ACT_RELU6,
                    "RELU_N1_TO_1": fp.ACT_RELU_N1_TO_1}


def _qp(g: Graph, name: str) -> tuple[float, int]:
    t = g.tensors[name]
    if t.quant is None:
        raise IRError(f"tensor {name!r} has no quantization")
    return float(t.quant.scale[0]), int(t.quant.zero_point[0])


def _act(g: Graph, op: Op) -> dict[str, int]:
    s, z = _qp(g, op.outputs[0])
    lo, hi = fp.fused_activation_range(ACTIVATION_CODES[op.attrs.get("activation", "NONE")], s, z)
    return dict(act_min=lo, act_max=hi)


def _window(g: Graph, op: Op) -> dict[str, Any]:
    pads = op.attrs["pads"]
    return dict(stride=tuple(op.attrs["stride"]), padding=(pads[0], pads[2]),
                out_hw=tuple(g.tensors[op.outputs[0]].shape[1:3]))


def _weighted(g: Graph, op: Op) -> dict[str, Any]:
    in_s, in_z = _qp(g, op.inputs[0])
    out_s, out_z = _qp(g, op.outputs[0])
    w = g.tensors[op.inputs[1]]
    scale = fp.effective_scale(in_s, w.quant.scale, out_s)
    mult, shift = fp.quantize_multiplier_array(scale)
    p = dict(input_zp=in_z, output_zp=out_z, multiplier=mult, shift=shift, **_act(g, op))
    if op.type == "FULLY_CONNECTED":
        p["scale"] = scale  # LiteRT's FC requantizes in double
    else:
        p.update(_window(g, op), dilation=tuple(op.attrs["dilation"]))
    return p


def _add(g: Graph, op: Op) -> dict[str, Any]:
    (s1, z1), (s2, z2), (so, zo) = (_qp(g, n) for n in (*op.inputs, op.outputs[0]))
    return dict(input1_zp=z1, input2_zp=z2, output_zp=zo, **fp.add_params(s1, s2, so), **_act(g, op))


def _mul(g: Graph, op: Op) -> dict[str, Any]:
    (s1, z1), (s2, z2), (so, zo) = (_qp(g, n) for n in (*op.inputs, op.outputs[0]))
    m, sh = fp.mul_multiplier(s1, s2, so)
    return dict(input1_zp=z1, input2_zp=z2, output_zp=zo, multiplier=m, shift=sh, **_act(g, op))


def _pool(g: Graph, op: Op) -> dict[str, Any]:
    return dict(filter_hw=tuple(op.attrs["filter"]), **_window(g, op), **_act(g, op))


def _softmax(g: Graph, op: Op) -> dict[str, Any]:
    m, sh, dmin = fp.softmax_params(op.attrs["beta"], _qp(g, op.inputs[0])[0])
    return dict(input_beta_multiplier=m, input_beta_left_shift=sh, diff_min=dmin)


def _lut(kind: int):
    def params(g: Graph, op: Op) -> dict[str, Any]:
        return dict(lut=fp.activation_lut(kind, *_qp(g, op.inputs[0]), *_qp(g, op.outputs[0])))
    return params


def _relu(g: Graph, op: Op) -> dict[str, Any]:
    (si, zi), (so, zo) = _qp(g, op.inputs[0]), _qp(g, op.outputs[0])
    m, sh = fp.relu_multiplier(si, so)
    lo, hi = fp.fused_activation_range(ACTIVATION_CODES[op.type], so, zo)
    return dict(input_zp=zi, output_zp=zo, multiplier=m, shift=sh, act_min=lo, act_max=hi)


def _mean(g: Graph, op: Op) -> dict[str, Any]:
    (si, zi), (so, zo) = _qp(g, op.inputs[0]), _qp(g, op.outputs[0])
    m, sh = fp.rescale_multiplier(si, so)
    return dict(axes=tuple(op.attrs["axes"]), keep_dims=bool(op.attrs["keep_dims"]),
                input_zp=zi, output_zp=zo, multiplier=m, shift=sh)


def _quantize(g: Graph, op: Op) -> dict[str, Any]:
    so, zo = _qp(g, op.outputs[0])
    if g.tensors[op.inputs[0]].dtype == "float32":
        return dict(scale=so, zero_point=zo)
    si, zi = _qp(g, op.inputs[0])
    m, sh = fp.rescale_multiplier(si, so)
    return dict(input_zp=zi, output_zp=zo, multiplier=m, shift=sh)


def _dequantize(g: Graph, op: Op) -> dict[str, Any]:
    s, z = _qp(g, op.inputs[0])
    return dict(scale=s, zero_point=z)


def _resize(g: Graph, op: Op) -> dict[str, Any]:
    return dict(out_hw=tuple(op.attrs["size"]), align_corners=bool(op.attrs["align_corners"]),
                half_pixel_centers=bool(op.attrs["half_pixel_centers"]))


def _strided_slice(g: Graph, op: Op) -> dict[str, Any]:
    end_mask, shrink = strided_slice_masks(op.attrs)
    return dict(begin=tuple(op.attrs["begin"]), end=tuple(op.attrs["end"]), strides=tuple(op.attrs["strides"]),
                end_mask=end_mask, shrink_axis_mask=shrink)


_PARAMS = {
    "CONV_2D": _weighted, "DEPTHWISE_CONV_2D": _weighted, "FULLY_CONNECTED": _weighted,
    "ADD": _add, "MUL": _mul,
    "MAX_POOL_2D": _pool, "AVERAGE_POOL_2D": _pool,
    "SOFTMAX": _softmax,
    "LOGISTIC": _lut(fp.LUT_LOGISTIC), "TANH": _lut(fp.LUT_TANH),
    "RELU": _relu, "RELU6": _relu, "RELU_N1_TO_1": _relu,
    "MEAN": _mean,
    "QUANTIZE": _quantize, "DEQUANTIZE": _dequantize,
    "RESIZE_BILINEAR": _resize, "RESIZE_NEAREST_NEIGHBOR": _resize,
    "STRIDED_SLICE": _strided_slice,
    "RESHAPE": lambda g, op: dict(shape=tuple(g.tensors[op.outputs[0]].shape)),
    "CONCATENATION": lambda g, op: dict(axis=op.attrs["axis"]),
    "TRANSPOSE": lambda g, op: dict(perm=tuple(op.attrs["perm"])),
    "PAD": lambda g, op: dict(paddings=tuple(tuple(p) for p in op.attrs["paddings"]),
                              pad_value=_qp(g, op.outputs[0])[1]),
}


SUPPORTED_OPS = frozenset(_PARAMS)


def op_params(graph: Graph, op: Op) -> dict[str, Any]:
    """Keyword parameters of the int8 kernel that computes ``op`` (tensors excluded)."""
    fn = _PARAMS.get(op.type)
    if fn is None:
        raise IRError(f"no int8 kernel parameters for {op.describe()}")
    params = fn(graph, op)
    for k, v in params.items():
        if isinstance(v, np.ndarray) and v.dtype == np.int64:
            params[k] = v.astype(np.int32)
    return params
