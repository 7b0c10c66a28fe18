"""Elementwise binary ops: ADD, SUB, MUL (ONNX Add, Sub, Mul, Div (by a constant as MUL,
else DIV), and BatchNormalization as MUL + ADD by per-channel constants; TFLite SQUARE as
MUL of itself)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx as onnx_proto
import tflite

from npu_hw import fixedpoint as fp
from npu_hw import ops as spec_ops

from .. import channel_grids, float_ref, onnx_import, qparams, tflite_export, tflite_import
from ..descriptors import Emitted, pad_rank
from ..ir import Op
from ..registry import Operator, onnx, register, tflite_options


def _tflite(options_class: type) -> Callable:
    def handler(im, ins, outs, table, where):
        o = tflite_import.options(table, options_class)
        return dict(activation=tflite_import.activation(o.FusedActivationFunction() if o else 0, where)), ins
    return handler


def _float(fn: Callable) -> Callable:
    return lambda op, ins, out: float_ref.activation(fn(ins[0], ins[1]).astype(np.float32),
                                                     op.attrs.get("activation", "NONE"))


def _scales(g, op):
    return [qparams.qp(g, n) for n in (*op.inputs, op.outputs[0])]


def channel_rows(g, op, columns: tuple[str, ...], params) -> np.ndarray | None:
    """For a binary int16 op with a per-channel grid among its activations: one row
    of ``columns`` per output channel, ``params(s1, s2, so)`` of that channel's scales
    (an operand with one scale repeats it); None when every grid has one scale."""
    out = g.tensors[op.outputs[0]]
    if out.dtype != "int16" or not out.shape:
        return None
    channels = out.shape[-1]
    names = (*op.inputs[:2], op.outputs[0])
    found = [qparams.channel_scales(g, n, channels) for n in names]
    if all(f is None for f in found):
        return None
    scales = [f if f is not None else np.repeat(g.tensors[n].quant.scale[:1], channels) for f, n in zip(found, names)]
    rows = [params(float(a), float(b), float(o)) for a, b, o in zip(*scales)]
    return np.array([[r[k] for k in columns] for r in rows], np.int32)


def _add_params(g, op) -> dict:
    (s1, z1), (s2, z2), (so, zo) = _scales(g, op)
    int16 = g.tensors[op.outputs[0]].dtype == "int16"  # TFLite's general int16 path shifts by 15
    shift = fp.ADD_LEFT_SHIFT_INT16 if int16 else fp.ADD_LEFT_SHIFT
    rows = channel_rows(g, op, spec_ops.ADD16_CHANNEL_PARAMS, lambda a, b, o: fp.add_params(a, b, o, shift))
    if rows is not None:   # ADD16_PER_CHANNEL
        return dict(input1_zp=z1, input2_zp=z2, output_zp=zo, left_shift=shift, channel_params=rows,
                    **qparams.act_range(g, op))
    return dict(input1_zp=z1, input2_zp=z2, output_zp=zo, **fp.add_params(s1, s2, so, shift),
                **qparams.act_range(g, op))


def _mul_params(g, op) -> dict:
    (s1, z1), (s2, z2), (so, zo) = _scales(g, op)
    m, sh = fp.mul_multiplier(s1, s2, so)
    return dict(input1_zp=z1, input2_zp=z2, output_zp=zo, multiplier=m, shift=sh, **qparams.act_range(g, op))


def lower_binary(low, op, p):
    """A broadcasting binary descriptor named like the op, or with per-channel parameter rows
    (``channel_params``) the op's ``*16_PER_CHANNEL`` descriptor with the rows as a constant."""
    out = tuple(low.shape(op.outputs[0])) or (1,)     # a scalar (a scale computed at run time): one value
    rank = len(out)
    shapes = [(1,) * (rank - len(low.shape(i))) + tuple(low.shape(i)) for i in op.inputs]
    fields = dict(p, rank=rank, in1_shape=pad_rank(shapes[0]), in2_shape=pad_rank(shapes[1]),
                  out_shape=pad_rank(out))
    operands = dict(input1=op.inputs[0], input2=op.inputs[1], output=op.outputs[0])
    rows = fields.pop("channel_params", None)
    if rows is None:
        return Emitted(op.type, 0, fields, operands)
    return Emitted(f"{op.type}16_PER_CHANNEL", 0, dict(fields, channels=rows.shape[0]), operands,
                   dict(params=low.const(op, "channel_params", rows)))


_lower = lower_binary


def _export(options: str):
    def export(wr, op, outs) -> None:
        fields = dict(FusedActivationFunction=tflite_export.ACT[op.attrs["activation"]])
        if options in ("AddOptions", "SubOptions") and wr.src.tensors[op.outputs[0]].dtype == "int16":
            fields["PotScaleInt16"] = False  # the general-scale int16 kernel, as the chip's
        wr.add(op.type, [wr.name(i) for i in op.inputs], outs, {options: fields})
    return export


register(Operator("ADD", ("activation",), tflite=_tflite(tflite.AddOptions), float_ref=_float(np.add),
                  fused_activation=True, params=_add_params, lower=_lower, export=_export("AddOptions"),
                  tflite_version=2, int16=True, channel_grid="rescale", channel_reader=channel_grids.reads_broadcast))
# The optimizer still turns x - constant into ADD (one op fewer to quantize); SUB of two
# activations runs on the chip's SUB.
register(Operator("SUB", ("activation",), tflite=_tflite(tflite.SubOptions), float_ref=_float(np.subtract),
                  fused_activation=True, params=_add_params, lower=_lower, export=_export("SubOptions"),
                  tflite_version=2, int16=True))   # int16: LiteRT's general int16 SUB (a LayerNorm's x - mean)
register(Operator("MUL", ("activation",), tflite=_tflite(tflite.MulOptions), float_ref=_float(np.multiply),
                  fused_activation=True, params=_mul_params, lower=_lower, export=_export("MulOptions"),
                  tflite_version=2, int16=True))



def _tflite_square(im, ins, outs, table, where):
    """TFLite SQUARE as MUL(x, x), as ONNX Pow by 2 is: a chip op, and one a float front end
    kept on the CPU can hold (basic-pitch's ``|CQT|^2`` before its log was a host call)."""
    x = im.tensor(ins[0])
    im.graph.add_op(Op("MUL", [x, x], [im.tensor(outs[0])], {"activation": "NONE"}))


register(Operator("SQUARE", tflite=_tflite_square))

onnx("Add")(onnx_import.binary("ADD"))
onnx("Sub")(onnx_import.binary("SUB"))
onnx("Mul")(onnx_import.binary("MUL"))


@onnx("Div")
def _onnx_div(im, node, attrs, where):
    if node.input[1] not in im.consts:
        onnx_import.binary("DIV")(im, node, attrs, where)  # ops.binary
        return
    recip = 1.0 / im.consts[node.input[1]].astype(np.float32)
    im.consts[f"{node.output[0]}__reciprocal"] = recip
    node = onnx_proto.helper.make_node("Mul", [node.input[0], f"{node.output[0]}__reciprocal"], list(node.output))
    onnx_import.binary("MUL")(im, node, attrs, where)


@onnx("BatchNormalization")
def _onnx_batchnorm(im, node, attrs, where):
    scale, bias, mean, var = (im.const(n, where).astype(np.float64) for n in node.input[1:5])
    a = scale / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
    b = bias - mean * a
    x = node.input[0]
    rank = len(im.onnx_shape(x, where))
    nhwc = rank == 4
    xin = im.value(x, True if nhwc else None, where)
    if not nhwc and rank not in (2, 3):
        raise onnx_import.ONNXImportError(f"{where}: batch normalization of a rank-{rank} tensor is not supported")
    if rank == 3:  # [N, C, L] (after a 1-D convolution): per-channel constants broadcast along L
        a, b = a.reshape(-1, 1), b.reshape(-1, 1)
    mid_name = f"{node.output[0]}__bn_mul"
    mid = im.new_tensor(mid_name, nhwc, where, im.onnx_shape(node.output[0], where))
    ca = im.g.add_const(f"{node.output[0]}__bn_scale", a.astype(np.float32)).name
    cb = im.g.add_const(f"{node.output[0]}__bn_shift", b.astype(np.float32)).name
    im.g.add_op(Op("MUL", [xin, ca], [mid], {"activation": "NONE"}))
    im.emit("ADD", [mid, cb], node.output[0], nhwc, where, dict(activation="NONE"))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(ADD='AddOptions', MUL='MulOptions', SUB='SubOptions')
