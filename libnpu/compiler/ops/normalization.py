"""L2_NORMALIZATION over the last axis (ONNX LpNormalization with p = 2 over the channel
axis, or the last one)."""
from __future__ import annotations

import numpy as np
import tflite

from .. import onnx_import, qparams, tflite_import
from ..registry import Operator, onnx, register

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
