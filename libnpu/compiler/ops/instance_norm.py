"""INSTANCE_NORM: each channel of an NHWC tensor normalized over H, W, then scaled and
shifted per channel (``gamma``, ``beta``: constants or run-time values). ONNX
InstanceNormalization imports as it; the spellings of TensorFlow's and PyTorch's
exports become it by the float graph's rewrite (:mod:`libnpu.compiler.instance_norm_fusion`).
No TFLite builtin: the chip runs our formula (``npu_hw.ops``, docs/hardware.md), int8 or
int16, the plane statistics from exact integer sums."""
from __future__ import annotations

import numpy as np

from .. import onnx_import, qparams
from ..descriptors import Emitted, LoweringError
from ..float_ref import activation
from ..instance_norm_fusion import SPATIAL_AXES, fuse_instance_norms
from ..registry import Operator, onnx, register
from .unary import divide_by_square_root


def _rewrite(g) -> int:
    # the spellings are matched in RSQRT form: SQRT + DIV made RSQRT first (RSQRT's own
    # rewrite may come later in the registry's order)
    return divide_by_square_root(g) + fuse_instance_norms(g)


def _float(op, ins, out):
    x = np.asarray(ins[0], np.float64)
    mean = x.mean(axis=SPATIAL_AXES, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=SPATIAL_AXES, keepdims=True)
    gamma, beta = (np.asarray(v, np.float64).reshape(-1) for v in ins[1:3])
    y = (x - mean) / np.sqrt(var + op.attrs["epsilon"]) * gamma + beta
    return activation(y, op.attrs["activation"]).astype(np.float32)


def _params(g, op) -> dict:
    names = dict(zip(("input", "gamma", "beta"), op.inputs), output=op.outputs[0])
    p: dict = {}
    for role, name in names.items():
        scale, zp = qparams.qp(g, name)
        p[f"{role}_scale"], p[f"{role}_zp"] = scale, zp
    return dict(p, epsilon=float(op.attrs["epsilon"]), **qparams.act_range(g, op))


def _lower(low, op, p):
    x, gamma, beta = (low.g.tensors[n] for n in op.inputs)
    out = low.g.tensors[op.outputs[0]]
    if x.dtype != out.dtype or (x.dtype == "int8" and "int16" in (gamma.dtype, beta.dtype)):
        raise LoweringError(f"{op.describe()}: input {x.dtype}, gamma {gamma.dtype}, beta {beta.dtype}, "
                            f"output {out.dtype} (the input and output one type, gamma and beta no wider)")
    shape = low.shape(op.inputs[0])
    fields = dict(p, batch=shape[0], pixels=int(np.prod(shape[1:-1])), channels=shape[-1],
                  gamma_size=gamma.size, beta_size=beta.size,
                  gamma_int16=int(gamma.dtype == "int16"), beta_int16=int(beta.dtype == "int16"))
    return Emitted("INSTANCE_NORM", 0, fields, dict(input=op.inputs[0], gamma=op.inputs[1], beta=op.inputs[2],
                                                     output=op.outputs[0]))


register(Operator("INSTANCE_NORM", ("epsilon", "activation"), rewrite=_rewrite, float_ref=_float,
                  fused_activation=True, params=_params, lower=_lower, int16=True,
                  macs=lambda g, op: 3 * g.tensors[op.inputs[0]].size))


@onnx("InstanceNormalization")
def _onnx_instance_norm(im, node, attrs, where):
    """``(x - mean) / sqrt(var + epsilon) * scale + bias`` per channel over H, W of an NCHW
    input (PyTorch's fast-style networks)."""
    shape = im.onnx_shape(node.input[0], where)
    if len(shape) != 4:
        raise onnx_import.ONNXImportError(f"{where}: InstanceNormalization of a rank-{len(shape)} tensor "
                                          "(only 4-D) is not supported")
    x = im.value(node.input[0], True, where)
    scale, bias = (im.value(n, None, where) for n in node.input[1:3])
    im.emit("INSTANCE_NORM", [x, scale, bias], node.output[0], True, where,
            dict(epsilon=float(attrs.get("epsilon", 1e-5)), activation="NONE"))
