"""Slices of activations, all run by the chip's STRIDED_SLICE descriptor: TFLite SLICE,
SPLIT, SPLIT_V and UNPACK are imported as one STRIDED_SLICE per output (ONNX Slice,
Split); ONNX Squeeze / Unsqueeze of an activation are RESHAPEs. Pure data movement: the
outputs keep the input's quantization and are exact copies."""
from __future__ import annotations

import numpy as np
import tflite

from .. import onnx_import, tflite_import
from ..ir import Op
from ..registry import Operator, onnx, register, tflite_options
from .layout import reshape_to


def add_slice(graph, x: str, out: str, index: list[slice], new_shape: tuple[int, ...] | None = None) -> Op:
    """Add a STRIDED_SLICE of ``x`` by Python slices (one per axis) writing ``out``."""
    shape = graph.tensors[x].shape
    begin, end, strides = [], [], []
    for s, n in zip(index, shape):
        start, stop, step = s.indices(n)
        begin.append(start)
        end.append(stop)
        strides.append(step)
    attrs = dict(begin=tuple(begin), end=tuple(end), strides=tuple(strides),
                 new_shape=tuple(new_shape if new_shape is not None else graph.tensors[out].shape))
    return graph.add_op(Op("STRIDED_SLICE", [x], [out], attrs, name=out))


def _axis_slices(rank: int, axis: int, sizes: list[int]) -> list[list[slice]]:
    result, start = [], 0
    for size in sizes:
        index = [slice(None)] * rank
        index[axis] = slice(start, start + size)
        result.append(index)
        start += size
    return result


def _split_sizes(total: int, sizes: list[int], where: str) -> list[int]:
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise tflite_import.UnsupportedOpError(f"{where}: bad split sizes {sizes}")
    if -1 in sizes:
        sizes[sizes.index(-1)] = total - sum(s for s in sizes if s != -1)
    if sum(sizes) != total or any(s < 0 for s in sizes):
        raise tflite_import.UnsupportedOpError(f"{where}: split sizes {sizes} do not add up to {total}")
    return sizes


# TFLite ---------------------------------------------------------------------------------


def _tflite_split(im, ins, outs, table, where):
    x = ins[1]
    rank = len(im.shape(x))
    axis = int(im.const(ins[0], "axis", where).reshape(-1)[0]) % rank
    total = im.shape(x)[axis]
    n = len(outs)
    if total % n:
        raise tflite_import.UnsupportedOpError(f"{where}: {total} does not split into {n} equal parts")
    for index, o in zip(_axis_slices(rank, axis, [total // n] * n), outs):
        add_slice(im.graph, im.tensor(x), im.tensor(o), index)


def _tflite_split_v(im, ins, outs, table, where):
    x = ins[0]
    rank = len(im.shape(x))
    axis = int(im.const(ins[2], "axis", where).reshape(-1)[0]) % rank
    sizes = _split_sizes(im.shape(x)[axis], [int(s) for s in im.const(ins[1], "size_splits", where).reshape(-1)],
                         where)
    for index, o in zip(_axis_slices(rank, axis, sizes), outs, strict=True):
        add_slice(im.graph, im.tensor(x), im.tensor(o), index)


def _tflite_unpack(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.UnpackOptions)
    shape = im.shape(ins[0])
    axis = int(o.Axis()) % len(shape) if o else 0
    for k, out in enumerate(outs):
        index = [slice(None)] * len(shape)
        index[axis] = slice(k, k + 1)
        add_slice(im.graph, im.tensor(ins[0]), im.tensor(out), index)


def _tflite_slice(im, ins, outs, table, where):
    shape = im.shape(ins[0])
    begin = [int(v) for v in im.const(ins[1], "begin", where).reshape(-1)]
    size = [int(v) for v in im.const(ins[2], "size", where).reshape(-1)]
    if len(begin) != len(shape) or len(size) != len(shape):
        raise tflite_import.UnsupportedOpError(f"{where}: begin/size do not match rank {len(shape)}")
    index = [slice(b, n if s == -1 else b + s) for b, s, n in zip(begin, size, shape)]
    add_slice(im.graph, im.tensor(ins[0]), im.tensor(outs[0]), index)


register(Operator("SPLIT", tflite=_tflite_split))
register(Operator("SPLIT_V", tflite=_tflite_split_v))
register(Operator("UNPACK", tflite=_tflite_unpack))
register(Operator("SLICE", tflite=_tflite_slice))


# ONNX -------------------------------------------------------------------------------------


def _onnx_axis(im, name: str, axis: int, rank: int) -> int:
    axis %= rank
    return onnx_import.AXIS_TO_NHWC[axis] if rank == 4 and im.is_nhwc(name) else axis


@onnx("Split")
def _onnx_split(im, node, attrs, where):
    x = node.input[0]
    shape = im.onnx_shape(x, where)
    axis = int(attrs.get("axis", 0)) % len(shape)
    if len(node.input) > 1 and node.input[1]:
        sizes = [int(s) for s in im.const(node.input[1], where).reshape(-1)]
    elif "split" in attrs:
        sizes = [int(s) for s in attrs["split"]]
    else:  # equal parts, the last one smaller (opset 18 num_outputs)
        n = len(node.output)
        part = -(-shape[axis] // n)
        sizes = [min(part, shape[axis] - k * part) for k in range(n)]
    if sum(sizes) != shape[axis] or len(sizes) != len(node.output):
        raise onnx_import.ONNXImportError(f"{where}: split sizes {sizes} do not fit axis {axis} of {shape}")
    nhwc = im.is_nhwc(x) and len(shape) == 4
    src = im.value(x, None, where)
    ir_axis = _onnx_axis(im, x, axis, len(shape))
    for index, out in zip(_axis_slices(len(shape), ir_axis, sizes), node.output):
        name = im.new_tensor(out, nhwc, where)
        add_slice(im.g, src, name, index)


@onnx("Slice")
def _onnx_slice(im, node, attrs, where):
    x = node.input[0]
    shape = im.onnx_shape(x, where)
    if "starts" in attrs:  # opset < 10: the bounds are attributes
        starts, ends = np.asarray(attrs["starts"]), np.asarray(attrs["ends"])
        axes, steps = (np.asarray(attrs["axes"]) if "axes" in attrs else None), None
    else:
        starts, ends, axes, steps = [im.const(n, where).reshape(-1) if n else None
                                     for n in list(node.input[1:]) + [""] * 4][:4]
    axes = axes if axes is not None else np.arange(len(starts))
    steps = steps if steps is not None else np.ones(len(starts), np.int64)
    index = [slice(None)] * len(shape)
    nhwc = im.is_nhwc(x) and len(shape) == 4
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = int(ax) % len(shape)
        # ONNX clamps with int64 extremes; Python slices clamp the same way.
        index[_onnx_axis(im, x, ax, len(shape))] = slice(int(st), int(en), int(sp))
    src = im.value(x, None, where)
    name = im.new_tensor(node.output[0], nhwc, where)
    add_slice(im.g, src, name, index)


@onnx("Squeeze", "Unsqueeze")
def _onnx_squeeze(im, node, attrs, where):
    reshape_to(im, node, where)


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(SLICE=None, SPLIT='SplitOptions', SPLIT_V='SplitVOptions', UNPACK='UnpackOptions')
