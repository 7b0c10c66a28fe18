"""GATHER along one axis by constant indices, and the operators the chip runs as gathers,
one axis at a time: MIRROR_PAD (REFLECT / SYMMETRIC), BROADCAST_TO (ONNX Expand), TILE
(ONNX Tile), ONNX Pad in reflect or edge mode and ONNX ScatterND by constant indices (a
CONCATENATION of the data and the updates, then one GATHER). Pure data movement: one
quantization, exact copies."""
from __future__ import annotations

import numpy as np
import tflite

from .. import onnx_import, tflite_import
from ..descriptors import Emitted, LoweringError
from ..ir import Graph, Op, Tensor
from ..registry import Operator, onnx, register, tflite_options


def add_gather(g: Graph, x: str, axis: int, indices, out: str | None = None, name: str = "") -> str:
    """Add ``GATHER(x, indices)`` along ``axis`` (a new output tensor unless ``out``)."""
    src = g.tensors[x]
    idx = np.asarray(indices, np.int64)
    shape = src.shape[:axis] + idx.shape + src.shape[axis + 1:]
    if out is None:
        out = g.add_tensor(Tensor(g.unique_name(name or f"{x}__gather"), shape, src.dtype, src.quant)).name
    g.add_op(Op("GATHER", [x], [out], dict(axis=axis, indices=tuple(int(i) for i in idx.reshape(-1)),
                                           indices_shape=tuple(idx.shape)), name=out))
    return out


def _chain(g: Graph, x: str, per_axis: list[np.ndarray | None], out: str) -> None:
    """One GATHER per axis with an index table (None: axis unchanged); the last writes ``out``."""
    steps = [(a, idx) for a, idx in enumerate(per_axis) if idx is not None]
    if not steps:  # nothing to do: still one op, a copy
        steps = [(0, np.arange(g.tensors[x].shape[0]))]
    for k, (axis, idx) in enumerate(steps):
        x = add_gather(g, x, axis, idx, out if k == len(steps) - 1 else None)


def mirror_indices(size: int, before: int, after: int, mode: str) -> np.ndarray | None:
    """Index table padding one axis: ``REFLECT`` (edge not repeated), ``SYMMETRIC``, ``EDGE``."""
    if before == after == 0:
        return None
    inner = np.arange(size)
    if mode == "EDGE":
        return np.clip(np.arange(-before, size + after), 0, size - 1)
    shift = 1 if mode == "REFLECT" else 0
    if before > size - shift or after > size - shift:
        raise ValueError(f"{mode} padding ({before}, {after}) is too large for size {size}")
    left = np.arange(before, 0, -1) - (1 - shift)
    right = size - 1 - shift - np.arange(after)
    return np.concatenate([left, inner, right])


# GATHER -------------------------------------------------------------------------------------


def _tflite_gather(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.GatherOptions)
    rank = len(im.shape(ins[0]))
    if o is not None and o.BatchDims():
        raise tflite_import.UnsupportedOpError(f"{where}: batch_dims is not supported")
    axis = int(o.Axis()) % rank if o else 0
    if im.graph.tensors[im.tensor(ins[1])].data is None:  # ids computed by the model: read at run time
        if im.graph.tensors[im.tensor(ins[1])].dtype != "int32":
            raise tflite_import.UnsupportedOpError(f"{where}: indices computed at run time must be int32")
        return dict(axis=axis, indices=(), indices_shape=im.shape(ins[1])), ins[:2]
    idx = np.asarray(im.const(ins[1], "indices", where), np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= im.shape(ins[0])[axis]):
        raise tflite_import.UnsupportedOpError(f"{where}: an index lies outside axis {axis}")
    return dict(axis=axis, indices=tuple(int(i) for i in idx.reshape(-1)), indices_shape=tuple(idx.shape)), ins[:1]


def _float_gather(op, ins, out):
    if len(ins) > 1:  # indices computed by the model
        return np.take(ins[0], np.asarray(ins[1]).astype(np.int64), axis=op.attrs["axis"])
    idx = np.asarray(op.attrs["indices"], np.int64).reshape(op.attrs["indices_shape"])
    return np.take(ins[0], idx, axis=op.attrs["axis"])


def _lower_gather(low, op, p):
    shape = low.shape(op.inputs[0])
    axis = p["axis"]
    dynamic = len(op.inputs) > 1
    fields = dict(outer=int(np.prod(shape[:axis], dtype=np.int64)), axis_size=shape[axis],
                  inner=int(np.prod(shape[axis + 1:], dtype=np.int64)),
                  count=low.g.tensors[op.inputs[1]].size if dynamic else len(p["indices"]))
    if not dynamic:
        return low.emit("GATHER", op, fields, extra=dict(
            indices_iova=low.const(op, "indices", np.asarray(p["indices"], np.int32))))
    if low.g.tensors[op.inputs[1]].dtype != "int32":
        raise LoweringError(f"{op.describe()}: run-time indices must stay int32 (a float model's computed "
                            "indices cannot be quantized)")
    return Emitted("GATHER", 0, fields, dict(input=op.inputs[0], indices_iova=op.inputs[1], output=op.outputs[0]))


def _export_gather(wr, op, outs) -> None:
    if len(op.inputs) > 1:
        indices = wr.name(op.inputs[1])
    else:
        indices = wr.const_i32(op.outputs[0], np.asarray(op.attrs["indices"], np.int32).reshape(
            op.attrs["indices_shape"]))
    wr.add(op.type, [wr.name(op.inputs[0]), indices], outs,
           {"GatherOptions": dict(Axis=op.attrs["axis"])})


register(Operator(
    "GATHER", ("axis", "indices", "indices_shape"), tflite=_tflite_gather, float_ref=_float_gather,
    same_scale=True, index_inputs=(1,),
    params=lambda g, op: dict(axis=int(op.attrs["axis"]), indices=tuple(op.attrs["indices"])),
    lower=_lower_gather, export=_export_gather, tflite_version=2, int16=True))


@onnx("Gather")
def _onnx_gather(im, node, attrs, where):
    x = node.input[0]
    shape = im.onnx_shape(x, where)
    axis = int(attrs.get("axis", 0)) % len(shape)
    if node.input[1] not in im.consts:       # ids computed by the model (int32: refused otherwise)
        out = im.new_tensor(node.output[0], False, where)
        ids = im.value(node.input[1], False, where)
        if im.g.tensors[ids].dtype != "int32":
            raise onnx_import.ONNXImportError(f"{where}: indices computed at run time must be int32")
        im.g.add_op(Op("GATHER", [im.value(x, False, where), ids], [out],
                       dict(axis=axis, indices=(), indices_shape=im.g.tensors[ids].shape), name=out))
        return
    idx = np.asarray(im.const(node.input[1], where), np.int64)
    idx = np.where(idx < 0, idx + shape[axis], idx)
    if idx.size and (idx.min() < 0 or idx.max() >= shape[axis]):
        raise onnx_import.ONNXImportError(f"{where}: an index lies outside axis {axis}")
    out = im.new_tensor(node.output[0], False, where)
    add_gather(im.g, im.value(x, False, where), axis, idx, out)


# MIRROR_PAD ---------------------------------------------------------------------------------


def _tflite_mirror_pad(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.MirrorPadOptions)
    mode = "SYMMETRIC" if o is not None and o.Mode() == 1 else "REFLECT"
    pads = np.asarray(im.const(ins[1], "paddings", where), np.int64)
    shape = im.shape(ins[0])
    try:
        tables = [mirror_indices(n, int(b), int(a), mode) for n, (b, a) in zip(shape, pads)]
    except ValueError as exc:
        raise tflite_import.UnsupportedOpError(f"{where}: {exc}") from None
    _chain(im.graph, im.tensor(ins[0]), tables, im.tensor(outs[0]))


register(Operator("MIRROR_PAD", tflite=_tflite_mirror_pad))


def onnx_pad_by_gather(im, node, pairs: list[tuple[int, int]], mode: str, where) -> None:
    """ONNX Pad in reflect or edge mode, ``pairs`` in the ONNX axis order."""
    x = im.value(node.input[0], False, where)
    shape = im.g.tensors[x].shape
    try:
        tables = [mirror_indices(n, b, a, mode) for n, (b, a) in zip(shape, pairs)]
    except ValueError as exc:
        raise onnx_import.ONNXImportError(f"{where}: {exc}") from None
    if any(b < 0 or a < 0 for b, a in pairs):
        raise onnx_import.ONNXImportError(f"{where}: negative pads are not supported")
    _chain(im.g, x, tables, im.new_tensor(node.output[0], False, where))


# BROADCAST_TO -------------------------------------------------------------------------------


def broadcast_to(g: Graph, x: str, shape: tuple[int, ...], out: str, where: str) -> None:
    """Add RESHAPE (leading 1s) and one GATHER of zeros per axis that grows from 1."""
    src = g.tensors[x]
    if len(shape) < len(src.shape):
        raise onnx_import.ONNXImportError(f"{where}: cannot broadcast {src.shape} to {shape}")
    padded = (1,) * (len(shape) - len(src.shape)) + src.shape
    if any(a != b and a != 1 for a, b in zip(padded, shape)):
        raise onnx_import.ONNXImportError(f"{where}: cannot broadcast {src.shape} to {shape}")
    if padded != src.shape:
        mid = g.add_tensor(Tensor(g.unique_name(f"{x}__ranked"), padded, src.dtype, src.quant)).name
        g.add_op(Op("RESHAPE", [x], [mid], dict(new_shape=padded)))
        x = mid
    _chain(g, x, [np.zeros(b, np.int64) if a != b else None for a, b in zip(padded, shape)], out)


def _tflite_broadcast_to(im, ins, outs, table, where):
    broadcast_to(im.graph, im.tensor(ins[0]), im.shape(outs[0]), im.tensor(outs[0]), where)


register(Operator("BROADCAST_TO", tflite=_tflite_broadcast_to))


@onnx("Expand")
def _onnx_expand(im, node, attrs, where):
    shape = im.onnx_shape(node.output[0], where)
    out = im.new_tensor(node.output[0], False, where)
    broadcast_to(im.g, im.value(node.input[0], False, where), tuple(shape), out, where)


# TILE ---------------------------------------------------------------------------------------


def _tile_tables(shape: tuple[int, ...], multiples) -> list[np.ndarray | None]:
    return [np.tile(np.arange(n), int(m)) if int(m) != 1 else None for n, m in zip(shape, multiples)]


def _tflite_tile(im, ins, outs, table, where):
    multiples = [int(m) for m in im.const(ins[1], "multiples", where).reshape(-1)]
    shape = im.shape(ins[0])
    if len(multiples) != len(shape) or min(multiples, default=1) < 1:
        raise tflite_import.UnsupportedOpError(f"{where}: multiples {multiples} for shape {shape}")
    _chain(im.graph, im.tensor(ins[0]), _tile_tables(shape, multiples), im.tensor(outs[0]))


register(Operator("TILE", tflite=_tflite_tile))


@onnx("Tile")
def _onnx_tile(im, node, attrs, where):
    multiples = [int(m) for m in im.const(node.input[1], where).reshape(-1)]
    x = im.value(node.input[0], False, where)
    shape = im.g.tensors[x].shape
    if len(multiples) != len(shape) or min(multiples, default=1) < 1:
        raise onnx_import.ONNXImportError(f"{where}: repeats {multiples} for shape {shape}")
    _chain(im.g, x, _tile_tables(shape, multiples), im.new_tensor(node.output[0], False, where))


# ScatterND ----------------------------------------------------------------------------------


def scatter_labels(data_shape: tuple[int, ...], indices: np.ndarray, updates_shape: tuple[int, ...]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Label every value ScatterND reads: the data's ``0..D-1`` and the updates' ``D..D+U-1``
    (row-major), and the output's labels (which value each output element copies; of a
    repeated index, the last update wins, as onnxruntime's loop does)."""
    data = np.arange(int(np.prod(data_shape, dtype=np.int64)), dtype=np.int64).reshape(data_shape)
    updates = data.size + np.arange(int(np.prod(updates_shape, dtype=np.int64)), dtype=np.int64).reshape(updates_shape)
    out = data.copy()
    out[tuple(np.moveaxis(indices, -1, 0))] = updates
    return data, updates, out


def scatter_gather_table(data: np.ndarray, updates: np.ndarray, out: np.ndarray, axis: int) -> np.ndarray | None:
    """The GATHER indices along ``axis`` that make ``out`` from ``concat([data, updates],
    axis)`` (the updates reshaped to the data's shape but for ``axis``), or None when no
    such table exists (the scatter does not keep whole slices along ``axis``)."""
    rest = data.size // max(data.shape[axis], 1)
    if rest == 0 or updates.size % rest:
        return None
    shape = data.shape[:axis] + (updates.size // rest,) + data.shape[axis + 1:]
    joined = np.moveaxis(np.concatenate([data, updates.reshape(shape)], axis=axis), axis, 0).reshape(-1, rest)
    wanted = np.moveaxis(out, axis, 0).reshape(-1, rest)
    first = {int(v): j for j, v in enumerate(joined[:, 0])}
    table = np.asarray([first.get(int(v), -1) for v in wanted[:, 0]], np.int64)
    if (table < 0).any() or not np.array_equal(joined[table], wanted):
        return None
    return table


@onnx("ScatterND")
def _onnx_scatter_nd(im, node, attrs, where):
    """ScatterND by constant indices: where each output value comes from is known at import
    time, so the chip copies it: CONCATENATION of the data and the updates along the one axis
    the scatter replaces whole slices of (a cache's ``x[:, :, a:b] = y``), then a GATHER
    picking the slices; any other pattern, the same over the flattened values."""
    reduction = attrs.get("reduction", b"none")
    if (reduction.decode() if isinstance(reduction, bytes) else reduction) != "none":
        raise onnx_import.ONNXImportError(f"{where}: reduction {reduction!r} is not supported")
    indices = np.asarray(im.const(node.input[1], where), np.int64)
    shape = tuple(im.onnx_shape(node.input[0], where))
    depth = indices.shape[-1] if indices.ndim else 0
    if indices.ndim == 0 or depth > len(shape) or \
            tuple(im.onnx_shape(node.input[2], where)) != indices.shape[:-1] + shape[depth:]:
        raise onnx_import.ONNXImportError(f"{where}: indices {indices.shape} do not fit data {shape}")
    bounds = np.asarray(shape[:depth], np.int64)
    indices = np.where(indices < 0, indices + bounds, indices)
    if indices.size and ((indices < 0) | (indices >= bounds)).any():
        raise onnx_import.ONNXImportError(f"{where}: an index lies outside the data")
    labels = scatter_labels(shape, indices, indices.shape[:-1] + shape[depth:])
    nhwc = len(shape) == 4 and im.is_nhwc(node.input[0]) and labels[1].ndim == 4
    if nhwc:       # the data's own layout: no transpose around the copy
        labels = tuple(a.transpose(onnx_import.TO_NHWC) for a in labels)
    data, updates = (im.value(n, nhwc, where) for n in (node.input[0], node.input[2]))
    out = im.new_tensor(node.output[0], nhwc, where)
    g = im.g
    for axis in range(len(shape)):
        table = scatter_gather_table(*labels, axis)
        if table is not None:
            break
    else:          # the flattened values: one axis
        axis, labels = 0, tuple(a.reshape(-1) for a in labels)
        table = scatter_gather_table(*labels, axis)
        if table is None:          # an empty tensor: nothing for the chip to copy
            raise onnx_import.ONNXImportError(f"{where}: empty data {shape}")
        data = _reshaped(g, data, labels[0].shape)
    rest = labels[0].size // max(labels[0].shape[axis], 1)
    upd_shape = labels[0].shape[:axis] + (labels[1].size // rest,) + labels[0].shape[axis + 1:]
    updates = _reshaped(g, updates, upd_shape)
    src = g.tensors[data]
    joined = g.add_tensor(Tensor(g.unique_name(f"{out}__joined"), src.shape[:axis] + (
        src.shape[axis] + upd_shape[axis],) + src.shape[axis + 1:], src.dtype)).name
    g.add_op(Op("CONCATENATION", [data, updates], [joined], dict(axis=axis, activation="NONE"), name=joined))
    if labels[0].shape == g.tensors[out].shape:
        add_gather(g, joined, axis, table, out)
    else:
        g.add_op(Op("RESHAPE", [add_gather(g, joined, axis, table)], [out],
                    dict(new_shape=g.tensors[out].shape), name=out))


def _reshaped(g: Graph, x: str, shape: tuple[int, ...]) -> str:
    if g.tensors[x].shape == tuple(shape):
        return x
    out = g.add_tensor(Tensor(g.unique_name(f"{x}__flat"), tuple(shape), g.tensors[x].dtype)).name
    g.add_op(Op("RESHAPE", [x], [out], dict(new_shape=tuple(shape)), name=out))
    return out


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(GATHER='GatherOptions', MIRROR_PAD='MirrorPadOptions')
