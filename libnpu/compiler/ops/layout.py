"""Data movement: RESHAPE (and SQUEEZE), CONCATENATION, PAD (and PADV2 with a zero value),
TRANSPOSE, STRIDED_SLICE (ONNX Flatten, Reshape, Concat, Pad, Transpose). None of them
rescales: inputs and output share one quantization."""
from __future__ import annotations

import numpy as np
import tflite

from .. import onnx_import, qparams, tflite_export, tflite_import
from ..descriptors import Emitted, pad_rank
from ..float_ref import activation
from ..ir import IRError, strided_slice_masks
from ..registry import Operator, onnx, register, tflite_options
from .gather import onnx_pad_by_gather

# RESHAPE --------------------------------------------------------------------------------


def _lower_reshape(low, op, p):
    src, dst = low.plan.placements[op.inputs[0]], low.plan.placements[op.outputs[0]]
    if src == dst:
        return None  # aliased by the memory plan: same bytes, nothing to do
    return low.emit("RESHAPE", op, dict(count=low.g.tensors[op.inputs[0]].nbytes))


register(Operator(
    "RESHAPE", ("new_shape",), tflite=lambda im, ins, outs, table, where: (dict(new_shape=im.shape(outs[0])), ins[:1]),
    tflite_aliases=("SQUEEZE", "EXPAND_DIMS"), float_ref=lambda op, ins, out: ins[0].reshape(out.shape),
    same_scale=True,
    params=lambda g, op: dict(shape=tuple(g.tensors[op.outputs[0]].shape)), lower=_lower_reshape,
    export=lambda wr, op, outs: wr.with_constant(op, outs, op.attrs["new_shape"]), int16=True,
    channel_grid="move"))


def reshape_to(im, node, where, out_shape: tuple[int, ...] | None = None) -> None:
    """Emit a RESHAPE of ONNX node ``node``'s input to its output's (or ``out_shape``) shape."""
    out_shape = out_shape or im.onnx_shape(node.output[0], where)
    src = node.input[0]
    # A feature map with a single pixel has the same element order in NCHW and NHWC.
    in_shape = im.onnx_shape(src, where)
    flat_ok = im.is_nhwc(src) and in_shape[2] * in_shape[3] == 1
    x = im.value(src, None if flat_ok else False, where)
    im.emit("RESHAPE", [x], node.output[0], False, where, dict(new_shape=out_shape), shape=out_shape)


@onnx("Flatten")
def _onnx_flatten(im, node, attrs, where):
    reshape_to(im, node, where)


@onnx("Reshape")
def _onnx_reshape(im, node, attrs, where):
    target = [int(d) for d in im.const(node.input[1], where).reshape(-1)]
    in_shape = im.onnx_shape(node.input[0], where)
    # ONNX rules: 0 copies the input dimension (unless allowzero), -1 is inferred.
    dims = [in_shape[i] if d == 0 and not attrs.get("allowzero", 0) else d for i, d in enumerate(target)]
    if dims.count(-1) > 1:
        raise onnx_import.ONNXImportError(f"{where}: more than one -1 in shape {target}")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1]))
        dims[dims.index(-1)] = int(np.prod(in_shape)) // max(known, 1)
    if int(np.prod(dims)) != int(np.prod(in_shape)):
        raise onnx_import.ONNXImportError(f"{where}: cannot reshape {in_shape} to {target}")
    reshape_to(im, node, where, tuple(dims))


# CONCATENATION --------------------------------------------------------------------------


def _tflite_concat(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.ConcatenationOptions)
    rank = len(im.shape(outs[0]))
    return dict(axis=int(o.Axis()) % rank,
                activation=tflite_import.activation(o.FusedActivationFunction(), where)), ins


def _float_concat(op, ins, out):
    return activation(np.concatenate(ins, axis=op.attrs["axis"]), op.attrs.get("activation", "NONE"))


def _lower_concat(low, op, p):
    out = low.shape(op.outputs[0])
    axis = p["axis"]
    # An empty input adds nothing, and the chip refuses one (eeg-spindles' head joins its
    # output to a [1, 0, 1] constant, as torch.cat with an empty tensor exports)
    inputs = [i for i in op.inputs if low.shape(i)[axis] > 0]
    if not inputs:
        return None         # an empty output: nothing to copy
    sizes = np.asarray([low.shape(i)[axis] for i in inputs], np.uint32)
    table = low.plan.add_address_table(f"{op.name}/inputs", inputs)
    item = np.dtype(low.g.tensors[op.outputs[0]].dtype).itemsize  # the chip copies bytes
    fields = dict(num_inputs=len(inputs), outer=int(np.prod(out[:axis], dtype=np.int64)),
                  inner=int(np.prod(out[axis + 1:], dtype=np.int64)) * item, axis_total=out[axis])
    extra = dict(inputs_iova=(table.region, table.offset), sizes_iova=low.const(op, "sizes", sizes))
    return Emitted("CONCATENATION", 0, fields, dict(output=op.outputs[0]), extra)


def _export_concat(wr, op, outs) -> None:
    wr.add(op.type, [wr.name(i) for i in op.inputs], outs, {"ConcatenationOptions": dict(
        Axis=op.attrs["axis"], FusedActivationFunction=tflite_export.ACT[op.attrs["activation"]])})


register(Operator(
    "CONCATENATION", ("axis", "activation"), tflite=_tflite_concat, float_ref=_float_concat, same_scale=True,
    params=lambda g, op: dict(axis=op.attrs["axis"]), lower=_lower_concat, export=_export_concat,
    tflite_version=2, int16=True))


@onnx("Concat")
def _onnx_concat(im, node, attrs, where):
    rank = len(im.onnx_shape(node.output[0], where))
    axis = int(attrs["axis"]) % rank
    nhwc = rank == 4 and any(im.is_nhwc(n) for n in node.input)
    ins = [im.value(n, nhwc if rank == 4 else None, where) for n in node.input]
    im.emit("CONCATENATION", ins, node.output[0], nhwc, where,
            dict(axis=onnx_import.AXIS_TO_NHWC[axis] if nhwc else axis, activation="NONE"))


# PAD ----------------------------------------------------------------------------------------


def _tflite_pad(im, ins, outs, table, where):
    pads = im.const(ins[1], "paddings", where).astype(np.int64)
    if len(ins) > 2 and ins[2] >= 0:  # PADV2: explicit pad value
        value = im.const(ins[2], "constant value", where).reshape(-1)[0]
        t = im.graph.tensors[im.tensor(ins[2])]
        if (t.quant is not None and t.quant.zero_point[0] != value) or (t.quant is None and float(value) != 0.0):
            raise tflite_import.UnsupportedOpError(f"{where}: PADV2 value other than zero is not supported")
    return dict(paddings=tuple(tuple(int(v) for v in row) for row in pads)), ins[:1]


def _lower_pad(low, op, p):
    shape = low.shape(op.inputs[0])
    return low.emit("PAD", op, dict(rank=len(shape), in_shape=pad_rank(shape),
                                    pad_before=pad_rank([a for a, _ in p["paddings"]]),
                                    pad_after=pad_rank([b for _, b in p["paddings"]]), pad_value=p["pad_value"]))


register(Operator(
    "PAD", ("paddings",), tflite=_tflite_pad, tflite_aliases=("PADV2",),  # ((before, after) per axis), zero fill
    float_ref=lambda op, ins, out: np.pad(ins[0], op.attrs["paddings"]), same_scale=True,
    params=lambda g, op: dict(paddings=tuple(tuple(p) for p in op.attrs["paddings"]),
                              pad_value=qparams.qp(g, op.outputs[0])[1]),
    lower=_lower_pad, export=lambda wr, op, outs: wr.with_constant(op, outs, op.attrs["paddings"]),
    tflite_version=2, int16=True, channel_grid="move"))


@onnx("Pad")
def _onnx_pad(im, node, attrs, where):
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge"):
        raise onnx_import.ONNXImportError(f"{where}: padding mode {mode!r} is not supported")
    pads = attrs.get("pads")
    if pads is None:
        pads = im.const(node.input[1], where)
    if len(node.input) > 2 and node.input[2] and float(im.const(node.input[2], where)) != 0.0:
        raise onnx_import.ONNXImportError(f"{where}: padding value other than 0 is not supported")
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    rank = len(pads) // 2
    pairs = [(pads[i], pads[i + rank]) for i in range(rank)]
    if mode != "constant":
        onnx_pad_by_gather(im, node, pairs, mode.upper(), where)
        return
    nhwc = rank == 4 and im.is_nhwc(node.input[0])
    if nhwc:
        pairs = [pairs[p] for p in onnx_import.TO_NHWC]
    im.emit("PAD", [im.value(node.input[0], None, where)], node.output[0], nhwc, where,
            dict(paddings=tuple(pairs)))


# TRANSPOSE ------------------------------------------------------------------------------------


def _tflite_transpose(im, ins, outs, table, where):
    perm = im.const(ins[1], "perm", where).reshape(-1)
    return dict(perm=tuple(int(p) for p in perm)), ins[:1]


def _lower_transpose(low, op, p):
    shape = low.shape(op.inputs[0])
    return low.emit("TRANSPOSE", op, dict(rank=len(shape), in_shape=pad_rank(shape), perm=pad_rank(p["perm"])))


register(Operator(
    "TRANSPOSE", ("perm",), tflite=_tflite_transpose,
    float_ref=lambda op, ins, out: ins[0].transpose(op.attrs["perm"]), same_scale=True,
    params=lambda g, op: dict(perm=tuple(op.attrs["perm"])), lower=_lower_transpose,
    export=lambda wr, op, outs: wr.with_constant(op, outs, op.attrs["perm"]), tflite_version=2,
    int16=True))


@onnx("Transpose")
def _onnx_transpose(im, node, attrs, where):
    shape = im.onnx_shape(node.input[0], where)
    perm = tuple(attrs.get("perm", tuple(reversed(range(len(shape))))))
    x = node.input[0]
    if im.is_nhwc(x):  # compose: the IR tensor is NCHW.transpose(TO_NHWC)
        perm = tuple(onnx_import.TO_NCHW[p] for p in perm)
    im.emit("TRANSPOSE", [im.value(x, None, where)], node.output[0], False, where, dict(perm=perm))


# STRIDED_SLICE ----------------------------------------------------------------------------------
# Masks and negative indices are resolved to Python-slice bounds per axis; end == -1 with a
# negative stride means "through index 0" (a Python slice's None).


def _dense_slice_spec(rank: int, begin, end, strides, o) -> list[tuple[int | None, int | None, int, bool]]:
    """TFLite's sparse slice spec (entries with ellipsis and new-axis bits) as one
    ``(begin, end, stride, shrink)`` per input axis, masked bounds as None."""
    entries = len(begin)
    ellipsis, new_axis = o.EllipsisMask(), o.NewAxisMask()
    real = sum(1 for i in range(entries) if not (ellipsis >> i) & 1 and not (new_axis >> i) & 1)
    if ellipsis and rank - real < 1:
        # LiteRT 2.3 computes a wrong shape for an ellipsis that stands for no axis.
        raise tflite_import.UnsupportedOpError("STRIDED_SLICE: an ellipsis standing for no axis is not supported")
    dense: list[tuple[int | None, int | None, int, bool]] = []
    for i in range(entries):
        if (ellipsis >> i) & 1:
            dense += [(None, None, 1, False)] * max(rank - real, 0)
        elif not (new_axis >> i) & 1:
            s = int(strides[i]) if i < len(strides) else 1
            b = None if (o.BeginMask() >> i) & 1 else int(begin[i])
            e = None if (o.EndMask() >> i) & 1 or i >= len(end) else int(end[i])
            dense.append((b, e, s, bool((o.ShrinkAxisMask() >> i) & 1)))
    return dense + [(None, None, 1, False)] * (rank - len(dense))


def _tflite_strided_slice(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.StridedSliceOptions)
    shape = im.shape(ins[0])
    begin = im.const(ins[1], "begin", where).reshape(-1)
    end = im.const(ins[2], "end", where).reshape(-1)
    strides = im.const(ins[3], "strides", where).reshape(-1)
    dense = _dense_slice_spec(len(shape), begin, end, strides, o)
    if len(dense) != len(shape):
        raise tflite_import.UnsupportedOpError(f"{where}: the slice spec does not fit rank {len(shape)}")
    b_out, e_out, s_out = [], [], []
    for n, (b, e, s, shrink) in zip(shape, dense):
        # Resolve masks and negative indices into a plain Python slice per axis.
        if shrink:
            b = b if b is not None else 0
            e, s = (b + 1 if b != -1 else None), 1
        start, stop, _ = slice(b, e, s).indices(n)
        b_out.append(start)
        e_out.append(stop)
        s_out.append(s)
    return dict(begin=tuple(b_out), end=tuple(e_out), strides=tuple(s_out),
                new_shape=im.shape(outs[0])), ins[:1]


def _float_strided_slice(op, ins, out):
    index = tuple(slice(b, None if (e < 0 and s < 0) else e, s)
                  for b, e, s in zip(op.attrs["begin"], op.attrs["end"], op.attrs["strides"]))
    return ins[0][index].reshape(out.shape)


def _slice_params(g, op) -> dict:
    try:
        end_mask, shrink = strided_slice_masks(op.attrs)
    except IRError:  # new axes (TFLite's new_axis_mask): the same bytes as the plain slice
        end_mask, shrink = sum(1 << d for d, (e, s) in enumerate(zip(op.attrs["end"], op.attrs["strides"]))
                               if e < 0 and s < 0), 0
    return dict(begin=tuple(op.attrs["begin"]), end=tuple(op.attrs["end"]), strides=tuple(op.attrs["strides"]),
                end_mask=end_mask, shrink_axis_mask=shrink)


def _lower_strided_slice(low, op, p):
    shape = low.shape(op.inputs[0])
    return low.emit("STRIDED_SLICE", op, dict(
        rank=len(shape), in_shape=pad_rank(shape), begin=pad_rank(p["begin"]), end=pad_rank(p["end"]),
        strides=pad_rank(p["strides"]), end_mask=p["end_mask"], shrink_axis_mask=p["shrink_axis_mask"]))


def _export_strided_slice(wr, op, outs) -> None:
    try:
        end_mask, shrink = strided_slice_masks(op.attrs)
    except IRError as exc:
        raise tflite_export.TFLiteExportError(f"{op.describe()}: {exc}") from None
    a = op.attrs
    bounds = [wr.const_i32(op.outputs[0], v) for v in (a["begin"], a["end"], a["strides"])]
    wr.add(op.type, [wr.name(op.inputs[0]), *bounds], outs,
           {"StridedSliceOptions": dict(EndMask=end_mask, ShrinkAxisMask=shrink)})


register(Operator(
    "STRIDED_SLICE", ("begin", "end", "strides", "new_shape"), tflite=_tflite_strided_slice,
    float_ref=_float_strided_slice, same_scale=True, params=_slice_params, lower=_lower_strided_slice,
    export=_export_strided_slice, int16=True, channel_grid="move"))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(CONCATENATION='ConcatenationOptions', PAD=None, PADV2=None, RESHAPE=None,
               STRIDED_SLICE='StridedSliceOptions', TRANSPOSE=None)
