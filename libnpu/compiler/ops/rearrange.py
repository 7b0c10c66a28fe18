"""Rearrangements the chip runs with its TRANSPOSE and CONCATENATION descriptors:
DEPTH_TO_SPACE and SPACE_TO_DEPTH (a rank-6 transpose of the NHWC bytes) and PACK (a
concatenation along a new axis); ONNX DepthToSpace (DCR and CRD) and SpaceToDepth. Pure
data movement: one quantization for inputs and output, exact copies."""
from __future__ import annotations

import numpy as np
import tflite

from .. import tflite_import
from ..descriptors import Emitted, pad_rank
from ..ir import Op, Tensor
from ..registry import Operator, onnx, register, tflite_options

# Both are the same permutation of a 6-D view: DEPTH_TO_SPACE reads [N, H, W, b, b, C] and
# writes [N, H, b, W, b, C]; SPACE_TO_DEPTH reads [N, H, b, W, b, C] and writes [N, H, W, b, b, C].
_SWAP = (0, 1, 3, 2, 4, 5)


def _view_6d(op_type: str, shape: tuple[int, ...], b: int) -> list[int]:
    n, h, w, c = shape
    if op_type == "DEPTH_TO_SPACE":
        return [n, h, w, b, b, c // (b * b)]
    return [n, h // b, b, w // b, b, c]


def _float_rearrange(op, ins, out):
    x = ins[0]
    return x.reshape(_view_6d(op.type, x.shape, op.attrs["block_size"])).transpose(_SWAP).reshape(out.shape)


def _tflite_block(cls):
    def imported(im, ins, outs, table, where):
        o = tflite_import.options(table, cls)
        b = int(o.BlockSize()) if o else 0
        shape = im.shape(ins[0])
        if b < 1 or len(shape) != 4:
            raise tflite_import.UnsupportedOpError(f"{where}: block size {b} on shape {shape}")
        return dict(block_size=b), ins[:1]
    return imported


def _lower_rearrange(low, op, p):
    view = _view_6d(op.type, low.shape(op.inputs[0]), p["block_size"])
    return low.emit("TRANSPOSE", op, dict(rank=6, in_shape=pad_rank(view), perm=pad_rank(_SWAP)))


def _export_block(options: str):
    def export(wr, op, outs) -> None:
        wr.add(op.type, [wr.name(op.inputs[0])], outs, {options: dict(BlockSize=op.attrs["block_size"])})
    return export


for _name, _cls, _opts in (("DEPTH_TO_SPACE", tflite.DepthToSpaceOptions, "DepthToSpaceOptions"),
                           ("SPACE_TO_DEPTH", tflite.SpaceToDepthOptions, "SpaceToDepthOptions")):
    register(Operator(
        _name, ("block_size",), tflite=_tflite_block(_cls), float_ref=_float_rearrange, same_scale=True,
        params=lambda g, op: dict(block_size=int(op.attrs["block_size"])), lower=_lower_rearrange,
        export=_export_block(_opts)))  # BUILTIN_REF registers version 1 only


@onnx("DepthToSpace", "SpaceToDepth")
def _onnx_depth_space(im, node, attrs, where):
    b = int(attrs["blocksize"])
    x = im.value(node.input[0], True, where)
    mode = attrs.get("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if node.op_type == "SpaceToDepth" or mode == "DCR":
        kind = "DEPTH_TO_SPACE" if node.op_type == "DepthToSpace" else "SPACE_TO_DEPTH"
        im.emit(kind, [x], node.output[0], True, where, dict(block_size=b))
        return
    # CRD: input channel c * b * b + i * b + j: the NHWC view [N, H, W, C, b, b]
    # goes to [N, H, b, W, b, C], then merges into [N, H*b, W*b, C].
    n, h, w, c = im.g.tensors[x].shape
    c_out = c // (b * b)
    view = im.g.add_tensor(Tensor(im.g.unique_name(f"{x}__crd"), (n, h, w, c_out, b, b), "float32"))
    im.g.add_op(Op("RESHAPE", [x], [view.name], dict(new_shape=view.shape)))
    moved = im.g.add_tensor(Tensor(im.g.unique_name(f"{x}__crd_t"), (n, h, b, w, b, c_out), "float32"))
    im.g.add_op(Op("TRANSPOSE", [view.name], [moved.name], dict(perm=(0, 1, 4, 2, 5, 3))))
    out_shape = (n, h * b, w * b, c_out)
    out = im.new_tensor(node.output[0], True, where)
    im.g.add_op(Op("RESHAPE", [moved.name], [out], dict(new_shape=out_shape), name=node.output[0]))


# PACK ---------------------------------------------------------------------------------------


def _tflite_pack(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.PackOptions)
    rank = len(im.shape(outs[0]))
    return dict(axis=int(o.Axis()) % rank if o else 0), ins


def _lower_pack(low, op, p):
    out = low.shape(op.outputs[0])
    axis = p["axis"]
    table = low.plan.add_address_table(f"{op.name}/inputs", list(op.inputs))
    sizes = np.ones(len(op.inputs), np.uint32)
    fields = dict(num_inputs=len(op.inputs), outer=int(np.prod(out[:axis], dtype=np.int64)),
                  inner=int(np.prod(out[axis + 1:], dtype=np.int64)), axis_total=len(op.inputs))
    extra = dict(inputs_iova=(table.region, table.offset), sizes_iova=low.const(op, "sizes", sizes))
    return Emitted("CONCATENATION", 0, fields, dict(output=op.outputs[0]), extra)


def _export_pack(wr, op, outs) -> None:
    wr.add(op.type, [wr.name(i) for i in op.inputs], outs,
           {"PackOptions": dict(ValuesCount=len(op.inputs), Axis=op.attrs["axis"])})


register(Operator(
    "PACK", ("axis",), tflite=_tflite_pack,
    float_ref=lambda op, ins, out: np.stack(ins, axis=op.attrs["axis"]), same_scale=True,
    params=lambda g, op: dict(axis=int(op.attrs["axis"])), lower=_lower_pack, export=_export_pack,
    tflite_version=2))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(DEPTH_TO_SPACE='DepthToSpaceOptions', PACK='PackOptions', SPACE_TO_DEPTH='SpaceToDepthOptions')
