"""Row operators over the last axis: L2_NORMALIZATION (ONNX LpNormalization with p = 2
over the channel axis, or the last one) and LOG_SOFTMAX; ONNX LogSoftmax and Softmax over
any axis (a pair of TRANSPOSEs around the op when the axis is not the last one in the IR); ONNX
LayerNormalization as the ops it computes."""
from __future__ import annotations

import numpy as np
import tflite

from npu_hw import fixedpoint as fp

from .. import onnx_import, qparams, tflite_import
from ..ir import Op, Tensor
from ..registry import Operator, onnx, register, tflite_options

_EPSILON = 1e-6   # TFLite's float kernel: x / sqrt(max(sum(x^2), epsilon))


def _tflite_l2(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.L2NormOptions)
    if o is not None and o.FusedActivationFunction() != 0:
        raise tflite_import.UnsupportedOpError(f"{where}: L2_NORMALIZATION with a fused activation")
    return {}, ins


def _float_l2(op, ins, out):
    x = ins[0].astype(np.float64)
    norm = np.sqrt(np.maximum((x * x).sum(axis=-1, keepdims=True), _EPSILON))
    return (x / norm).astype(np.float32)


def _lower_l2(low, op, p):
    shape = low.shape(op.inputs[0])
    return low.emit("L2_NORMALIZATION", op, dict(p, rows=int(np.prod(shape[:-1], dtype=np.int64)),
                                                 depth=shape[-1]))


def _export_l2(wr, op, outs) -> None:
    wr.add(op.type, [wr.name(op.inputs[0])], outs, {"L2NormOptions": dict(FusedActivationFunction=0)})


register(Operator("L2_NORMALIZATION", tflite=_tflite_l2, float_ref=_float_l2, fixed_output=(1 / 128, 0),
                  params=lambda g, op: dict(input_zp=qparams.qp(g, op.inputs[0])[1]), lower=_lower_l2,
                  export=_export_l2, tflite_version=2))


@onnx("LpNormalization")
def _onnx_lp_normalization(im, node, attrs, where):
    if int(attrs.get("p", 2)) != 2:
        raise onnx_import.ONNXImportError(f"{where}: LpNormalization with p={attrs['p']} (only 2) is not supported")
    shape = im.onnx_shape(node.input[0], where)
    axis = int(attrs.get("axis", -1)) % len(shape)
    nhwc = im.is_nhwc(node.input[0]) and len(shape) == 4
    last = (nhwc and axis == 1) or (not nhwc and axis == len(shape) - 1)
    if not last and len(shape) == 4 and axis == 1:
        nhwc, last = True, True
    if not last:
        raise onnx_import.ONNXImportError(f"{where}: LpNormalization over axis {axis} (not the channels or the "
                                          "last axis) is not supported")
    im.emit("L2_NORMALIZATION", [im.value(node.input[0], nhwc if len(shape) == 4 else None, where)],
            node.output[0], nhwc, where)


# LOG_SOFTMAX -------------------------------------------------------------------------------------


def log_softmax_params(input_scale: float) -> dict[str, int]:
    """LOG_SOFTMAX int8 (``LogSoftmaxPrepare``, reference kernel): beta 1, Q5.26 differences."""
    mult, left_shift, diff_min = fp.softmax_params(1.0, input_scale)
    reverse_divisor, reverse_shift = fp.quantize_multiplier((1 << (31 - left_shift)) / float(mult))
    return dict(input_multiplier=mult, input_left_shift=left_shift, reverse_scaling_divisor=reverse_divisor,
                reverse_scaling_right_shift=-reverse_shift, diff_min=diff_min)


def _float_log_softmax(op, ins, out):
    x = ins[0].astype(np.float64)
    z = x - x.max(axis=-1, keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=-1, keepdims=True))).astype(np.float32)


def _lower_rows(name: str):
    def lower(low, op, p):
        shape = low.shape(op.inputs[0])
        return low.emit(name, op, dict(p, rows=int(np.prod(shape[:-1], dtype=np.int64)), depth=shape[-1]))
    return lower


register(Operator("LOG_SOFTMAX", tflite=tflite_import.simple, float_ref=_float_log_softmax,
                  fixed_output=(16 / 256, 127), params=lambda g, op: log_softmax_params(qparams.qp(g, op.inputs[0])[0]),
                  lower=_lower_rows("LOG_SOFTMAX"), export=lambda wr, op, outs: wr.simple(op, outs),
                  tflite_version=2))


def over_axis(im, node, attrs, where, op_type: str, op_attrs: dict) -> None:
    """Emit ``op_type`` (an op over the last axis) for an ONNX node over ``attrs['axis']``."""
    shape = im.onnx_shape(node.input[0], where)
    rank = len(shape)
    axis = int(attrs.get("axis", -1)) % rank
    opset = next((o.version for o in im.model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset < 13 and axis != rank - 1:
        raise onnx_import.ONNXImportError(f"{where}: {node.op_type} before opset 13 over axis {axis} (it flattens "
                                          "the trailing axes) is not supported")
    if rank == 4 and axis == 1 and im.is_nhwc(node.input[0]):   # the channels: the IR's last axis
        im.emit(op_type, [im.value(node.input[0], True, where)], node.output[0], True, where, op_attrs)
        return
    x = im.value(node.input[0], False, where)
    if axis == rank - 1:
        im.emit(op_type, [x], node.output[0], False, where, op_attrs)
        return
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = tuple(shape[p] for p in perm)
    names = [im.g.unique_name(f"{node.output[0]}__{what}") for what in ("moved", "result")]
    for n in names:
        im.g.add_tensor(Tensor(n, moved, "float32"))
    im.g.add_op(Op("TRANSPOSE", [x], [names[0]], {"perm": tuple(perm)}))
    im.g.add_op(Op(op_type, [names[0]], [names[1]], dict(op_attrs), name=names[1]))
    out = im.new_tensor(node.output[0], False, where)
    im.g.add_op(Op("TRANSPOSE", [names[1]], [out], {"perm": tuple(perm)}, name=node.output[0]))


@onnx("LogSoftmax")
def _onnx_log_softmax(im, node, attrs, where):
    over_axis(im, node, attrs, where, "LOG_SOFTMAX", {})


@onnx("Softmax")
def _onnx_softmax(im, node, attrs, where):
    over_axis(im, node, attrs, where, "SOFTMAX", dict(beta=1.0))


@onnx("LayerNormalization")
def _onnx_layer_norm(im, node, attrs, where):
    """``(x - E[x]) * rsqrt(E[(x - E[x])^2] + epsilon) * scale + bias`` over the axes from
    ``axis`` on (PyTorch's nn.LayerNorm at opset 17): MEAN, SUB, MUL, MEAN, ADD, RSQRT,
    MUL, MUL, ADD, the variance centred (:mod:`libnpu.compiler.variance` says why)."""
    if len(node.output) > 1 and any(node.output[1:]):
        raise onnx_import.ONNXImportError(f"{where}: LayerNormalization's Mean / InvStdDev outputs are not supported")
    shape = im.onnx_shape(node.input[0], where)
    axes = tuple(range(int(attrs.get("axis", -1)) % len(shape), len(shape)))
    x = im.value(node.input[0], False, where)
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    eps = im.g.add_const(f"{node.output[0]}__epsilon", np.array(attrs.get("epsilon", 1e-5), np.float32)).name
    steps = [("mean", "MEAN", [x], kept, dict(axes=axes, keep_dims=True)),
             ("centred", "SUB", [x, "mean"], shape, dict(activation="NONE")),
             ("squared", "MUL", ["centred", "centred"], shape, dict(activation="NONE")),
             ("variance", "MEAN", ["squared"], kept, dict(axes=axes, keep_dims=True)),
             ("shifted", "ADD", ["variance", eps], kept, dict(activation="NONE")),
             ("inverse", "RSQRT", ["shifted"], kept, {}),
             ("normalized", "MUL", ["centred", "inverse"], shape, dict(activation="NONE"))]
    names: dict[str, str] = {}
    for step, op_type, inputs, step_shape, op_attrs in steps:
        names[step] = im.g.add_tensor(Tensor(im.g.unique_name(f"{node.output[0]}__{step}"), tuple(step_shape),
                                             "float32")).name
        im.g.add_op(Op(op_type, [names.get(i, i) for i in inputs], [names[step]], op_attrs))
    last = names["normalized"]
    has_bias = len(node.input) > 2 and node.input[2]
    scaled = node.output[0] if not has_bias else f"{node.output[0]}__scaled"
    if not has_bias:
        im.emit("MUL", [last, im.value(node.input[1], False, where)], node.output[0], False, where,
                dict(activation="NONE"))
        return
    im.shapes[scaled] = (tuple(shape), "float32")
    im.emit("MUL", [last, im.value(node.input[1], False, where)], scaled, False, where, dict(activation="NONE"))
    im.emit("ADD", [im.value(scaled, False, where), im.value(node.input[2], False, where)], node.output[0], False,
            where, dict(activation="NONE"))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(L2_NORMALIZATION='L2NormOptions', LOG_SOFTMAX=None, SOFTMAX='SoftmaxOptions')
