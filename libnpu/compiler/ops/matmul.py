"""BATCH_MATMUL: the product of two activations (ONNX MatMul and Gemm whose second
operand is not a constant; a constant one is a FULLY_CONNECTED). The IR keeps TFLite's
``adj_x`` / ``adj_y``; batch axes broadcast like numpy. int8, or int16 activations
(LiteRT's int16 kernel: both operands and the output int16, zero points 0), which mixed
precision may choose for an attention's logits (Q.K^T before a SOFTMAX)."""
from __future__ import annotations

import numpy as np
import tflite

from npu_hw import fixedpoint as fp
from npu_hw import ops as spec_ops

from .. import onnx_import, qparams, tflite_import
from ..descriptors import Emitted, pad_rank
from ..ir import Op, Tensor
from ..registry import Operator, register, tflite_options


def _tflite(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.BatchMatMulOptions)
    if len(im.shape(ins[0])) < 2 or len(im.shape(ins[1])) < 2:
        raise tflite_import.UnsupportedOpError(f"{where}: operands of rank < 2")
    return dict(adj_x=bool(o.AdjX()) if o else False, adj_y=bool(o.AdjY()) if o else False), ins[:2]


def _float(op, ins, out):
    a, b = ins
    if op.attrs["adj_x"]:
        a = np.swapaxes(a, -1, -2)
    if op.attrs["adj_y"]:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b).astype(np.float32)


def _params(g, op) -> dict:
    (sa, za), (sb, zb), (so, zo) = (qparams.qp(g, n) for n in (*op.inputs[:2], op.outputs[0]))
    mult, shift = fp.quantize_multiplier(float(fp.effective_scale(sa, sb, so)[0]))
    return dict(lhs_zp=za, rhs_zp=zb, output_zp=zo, multiplier=mult, shift=shift, **qparams.act_range(g, op),
                adj_x=bool(op.attrs["adj_x"]), adj_y=bool(op.attrs["adj_y"]))


def _lower(low, op, p):
    rank = len(low.shape(op.outputs[0]))
    shapes = [(1,) * (rank - len(low.shape(n))) + low.shape(n) for n in op.inputs[:2]]
    flags = (spec_ops.OPF_ADJ_X if p["adj_x"] else 0) | (spec_ops.OPF_ADJ_Y if p["adj_y"] else 0)
    fields = dict(rank=rank, lhs_shape=pad_rank(shapes[0]), rhs_shape=pad_rank(shapes[1]),
                  **{k: p[k] for k in ("lhs_zp", "rhs_zp", "output_zp", "multiplier", "shift", "act_min", "act_max")})
    return Emitted("BATCH_MATMUL", flags, fields, dict(lhs=op.inputs[0], rhs=op.inputs[1], output=op.outputs[0]))


def _export(wr, op, outs) -> None:
    wr.add(op.type, [wr.name(i) for i in op.inputs[:2]], outs,
           {"BatchMatMulOptions": dict(AdjX=bool(op.attrs["adj_x"]), AdjY=bool(op.attrs["adj_y"]))})


def _macs(g, op) -> int:
    a = g.tensors[op.inputs[0]].shape
    return g.tensors[op.outputs[0]].size * int(a[-2] if op.attrs["adj_x"] else a[-1])


register(Operator(
    "BATCH_MATMUL", ("adj_x", "adj_y"), tflite=_tflite, float_ref=_float, params=_params, lower=_lower,
    export=_export, tflite_version=2, macs=_macs, int16=True, q15_requant=True))


def onnx_matmul(im, node, where, trans_a: bool = False, trans_b: bool = False, scale: float = 1.0,
                addend: str = "", addend_scale: float = 1.0) -> None:
    """Emit ONNX MatMul (or Gemm: ``alpha * A' B' + beta * C``) of two activations as
    BATCH_MATMUL, then MUL by alpha and ADD of C when they are not the identity."""
    ins = []
    for n in node.input[:2]:
        name = im.value(n, False, where)
        if len(im.g.tensors[name].shape) < 2:
            raise onnx_import.ONNXImportError(f"{where}: operands of rank < 2 are not supported")
        ins.append(name)
    out_shape = im.onnx_shape(node.output[0], where)
    tail = [(op, value) for op, value in (("MUL", scale), ("ADD", addend)) if value not in (1.0, "")]
    current = ins
    for k, (op_type, value) in enumerate([("BATCH_MATMUL", None), *tail]):
        last = k == len(tail)
        if op_type == "BATCH_MATMUL":
            attrs = dict(adj_x=trans_a, adj_y=trans_b)
        else:
            attrs = dict(activation="NONE")
            if op_type == "MUL":
                other = im.g.add_const(f"{node.output[0]}__alpha", np.float32(value).reshape(1)).name
            elif value in im.consts:
                c = im.consts[value].astype(np.float32) * np.float32(addend_scale)
                other = im.g.add_const(f"{node.output[0]}__c", c).name
            else:
                if addend_scale != 1.0:
                    raise onnx_import.ONNXImportError(f"{where}: beta with a computed C is not supported")
                other = im.value(value, False, where)
            current = [current[0], other]
        if last:
            im.emit(op_type, current, node.output[0], False, where, attrs)
        else:
            mid = im.g.add_tensor(Tensor(im.g.unique_name(f"{node.output[0]}__{op_type.lower()}"), out_shape,
                                         "float32"))
            im.g.add_op(Op(op_type, current, [mid.name], attrs))
            current = [mid.name]


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(BATCH_MATMUL='BatchMatMulOptions')
