"""Reductions over any axes: SUM, REDUCE_MAX, REDUCE_MIN (TFLite) and REDUCE_L2 (ONNX
ReduceL2: no TFLite builtin, the chip's formula is in docs/hardware.md); ONNX ReduceSum,
ReduceMax, ReduceMin, ReduceL2. ARG_MAX / ARG_MIN (ONNX ArgMax, ArgMin) along one axis,
whose int32/int64 output is never quantized. MEAN is in ``pool``. The IR keeps TFLite's ``axes`` and
``keep_dims``; the chip reduces with the axes kept, a dropped axis is the same bytes."""
from __future__ import annotations

import numpy as np
import onnx as onnx_proto
import tflite

from npu_hw import ops as spec_ops

from .. import onnx_import, qparams, tflite_export, tflite_import
from ..descriptors import pad_rank
from ..ir import Graph, Op, Tensor
from ..registry import Operator, onnx, register, tflite_options

_ATTRS = ("axes", "keep_dims")


def _tflite_reduce(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.ReducerOptions)
    rank = len(im.shape(ins[0]))
    axes = sorted({int(a) % rank for a in im.const(ins[1], "axes", where).reshape(-1)})
    if not axes:
        raise tflite_import.UnsupportedOpError(f"{where}: a reduction over no axes")
    return dict(axes=tuple(axes), keep_dims=bool(o.KeepDims()) if o else False), ins[:1]


def _float(fn):
    return lambda op, ins, out: fn(ins[0], axis=tuple(op.attrs["axes"]), keepdims=op.attrs["keep_dims"])


def _l2(x, axis, keepdims):
    return np.sqrt(np.sum(np.square(x, dtype=np.float64), axis=axis, keepdims=keepdims)).astype(np.float32)


def _fields(low, op, p) -> dict:
    shape = low.shape(op.inputs[0])
    return dict(rank=len(shape), in_shape=pad_rank(shape), axes_mask=sum(1 << a for a in p["axes"]))


def _sum_params(g, op) -> dict:
    return dict(axes=tuple(op.attrs["axes"]), **qparams.rescale(g, op))


def _l2_params(g, op) -> dict:
    (si, zi), (so, zo) = qparams.qp(g, op.inputs[0]), qparams.qp(g, op.outputs[0])
    return dict(axes=tuple(op.attrs["axes"]), input_zp=zi, output_zp=zo, scale=float(np.float64(si) / np.float64(so)))


def _lower_sum(low, op, p):
    return low.emit("SUM", op, dict(_fields(low, op, p), input_zp=p["input_zp"], output_zp=p["output_zp"],
                                    multiplier=p["multiplier"], shift=p["shift"]))


def _lower_l2(low, op, p):
    return low.emit("REDUCE_L2", op, dict(_fields(low, op, p), input_zp=p["input_zp"], output_zp=p["output_zp"],
                                          scale=p["scale"]))


def _export_reduce(w, op, outs) -> None:
    w.with_constant(op, outs, op.attrs["axes"], {"ReducerOptions": dict(KeepDims=bool(op.attrs["keep_dims"]))})


register(Operator(
    "SUM", _ATTRS, tflite=_tflite_reduce, float_ref=_float(np.sum), params=_sum_params, lower=_lower_sum,
    export=_export_reduce))
for _name, _fn in (("REDUCE_MAX", np.max), ("REDUCE_MIN", np.min)):
    register(Operator(
        _name, _ATTRS, tflite=_tflite_reduce, float_ref=_float(_fn), same_scale=True,
        params=lambda g, op: dict(axes=tuple(op.attrs["axes"])),
        lower=lambda low, op, p, name=_name: low.emit(name, op, _fields(low, op, p)),
        export=_export_reduce, tflite_version=2))


def _squares(g: Graph, name: str, producers: dict[str, Op], consumers: dict[str, list[Op]]) -> list[str] | None:
    """The ``x`` of each ``x * x`` term of the sum ``name`` (an ADD tree read only by its
    parent), or None when it is not such a sum."""
    op = producers.get(name)
    if op is None or op.attrs.get("activation", "NONE") != "NONE" or len(consumers.get(name, [])) != 1 \
            or name in g.outputs:
        return None
    if op.type == "MUL" and op.inputs[0] == op.inputs[1] and not g.tensors[op.inputs[0]].is_constant:
        return [op.inputs[0]]
    if op.type != "ADD":
        return None
    terms = [_squares(g, i, producers, consumers) for i in op.inputs]
    return None if any(t is None for t in terms) else [x for t in terms for x in t]  # type: ignore[union-attr]


#: An epsilon under the square root no larger than this is left out of the fused magnitude
#: (:func:`fuse_l2_norm`): it moves ``sqrt(x + eps)`` by at most ``sqrt(eps)`` (1e-4), under one
#: step of any grid a magnitude gets (GTCRN's ``sqrt(re**2 + im**2 + 1e-12)``: 1e-6).
MAX_EPSILON = 1e-8


def _without_epsilon(g: Graph, name: str, producers: dict[str, Op], consumers: dict[str, list[Op]]) -> str:
    """The sum under ``x + eps`` when ``name`` is that (an ADD of a constant in [0,
    ``MAX_EPSILON``] read only by its parent, as exporters keep a gradient finite at 0), else
    ``name``."""
    op = producers.get(name)
    if op is None or op.type != "ADD" or op.attrs.get("activation", "NONE") != "NONE" \
            or len(consumers.get(name, [])) != 1 or name in g.outputs:
        return name
    sums = [i for i in op.inputs if not g.tensors[i].is_constant]
    consts = [g.tensors[i] for i in op.inputs if g.tensors[i].is_constant]
    if len(sums) != 1 or len(consts) != 1 or consts[0].quant is not None:
        return name
    eps = np.asarray(consts[0].data, np.float64)
    if eps.size != 1 or not 0.0 <= float(eps.reshape(-1)[0]) <= MAX_EPSILON:
        return name
    return sums[0]


def fuse_l2_norm(g: Graph) -> int:
    """``sqrt(a*a + b*b + ...)`` (an STFT's magnitude, as exporters write it) -> REDUCE_L2
    over the terms stacked on a new leading axis.

    Why: quantized, the sum of squares needs a grid for values from 0 to the largest
    energy, and the small magnitudes (most bins of quiet audio) round to 0 or to one step
    before the SQRT sees them; even an int16 grid left Silero VAD's speech probability
    0.04-0.1 off float. REDUCE_L2 squares and sums the terms exactly in integers and rounds
    once, after the square root, on the magnitude's own grid. An epsilon added under the
    root (``MAX_EPSILON`` at most) is left out: it hid GTCRN's magnitude from this rewrite, and
    its SQRT (int8 only) of an int8 or int16 power left a frame 30 dB under the loudest at
    cosine 0.60 with every layer int16 (0.40 at int8; ``tests/libnpu/compiler/test_streaming.py``)."""
    fused = 0
    producers, consumers = g.producers(), g.consumers()
    for sqrt in [op for op in g.ops if op.type == "SQRT"]:
        terms = _squares(g, _without_epsilon(g, sqrt.inputs[0], producers, consumers), producers, consumers)
        if terms is None or len(terms) < 2:
            continue
        shape = g.tensors[terms[0]].shape
        if len(shape) >= 6 or any(g.tensors[t].shape != shape or g.tensors[t].dtype != "float32" for t in terms):
            continue
        out = sqrt.outputs[0]
        at = g.ops.index(sqrt)
        stacked = []
        for t in terms:
            one = g.add_tensor(Tensor(g.unique_name(f"{t}__term"), (1, *shape), "float32")).name
            g.ops.insert(at, Op("RESHAPE", [t], [one], dict(new_shape=(1, *shape)), one))
            at += 1
            stacked.append(one)
        joined = g.add_tensor(Tensor(g.unique_name(f"{out}__terms"), (len(terms), *shape), "float32")).name
        g.ops.insert(at, Op("CONCATENATION", stacked, [joined], dict(axis=0, activation="NONE"), joined))
        g.ops[at + 1] = Op("REDUCE_L2", [joined], [out], dict(axes=(0,), keep_dims=False), sqrt.name)
        fused += 1
    if fused:
        g.prune()
    return fused


def _export_l2(w, op, outs) -> None:
    """Float only (a layer kept in float on the CPU, :mod:`libnpu.compiler.cpu_float`):
    TFLite has no L2 reduction, so ``SQRT(SUM(MUL(x, x)))``."""
    x, out = w.src.tensors[op.inputs[0]], w.src.tensors[op.outputs[0]]
    if x.quant is not None:
        raise tflite_export.TFLiteExportError(f"cannot export the quantized {op.describe()} to TFLite")
    squares = w.tidx(Tensor(f"{out.name}__squares", x.shape, "float32"))
    w.add("MUL", [w.name(x.name), w.name(x.name)], [squares], {"MulOptions": dict(FusedActivationFunction=0)})
    total = w.tidx(Tensor(f"{out.name}__sum", out.shape, "float32"))
    w.add("SUM", [squares, w.const_i32(out.name, op.attrs["axes"])], [total],
          {"ReducerOptions": dict(KeepDims=bool(op.attrs["keep_dims"]))})
    w.add("SQRT", [total], outs, {})


register(Operator(
    "REDUCE_L2", _ATTRS, rewrite=fuse_l2_norm, float_ref=_float(_l2), params=_l2_params, lower=_lower_l2,
    int16=True, export=_export_l2))


@onnx("ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2")
def _onnx_reduce(im, node, attrs, where):
    shape = im.onnx_shape(node.input[0], where)
    axes = attrs.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = im.const(node.input[1], where).reshape(-1).tolist()
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            raise onnx_import.ONNXImportError(f"{where}: noop_with_empty_axes is not supported")
        axes = range(len(shape))
    axes = sorted({int(a) % len(shape) for a in axes})
    keep = bool(attrs.get("keepdims", 1))
    nhwc = im.is_nhwc(node.input[0]) and keep and len(shape) == 4
    ir_axes = tuple(sorted(onnx_import.AXIS_TO_NHWC[a] for a in axes)) if nhwc else tuple(axes)
    kind = {"ReduceSum": "SUM", "ReduceMax": "REDUCE_MAX", "ReduceMin": "REDUCE_MIN",
            "ReduceL2": "REDUCE_L2"}[node.op_type]
    x = im.value(node.input[0], True if nhwc else False, where)
    im.emit(kind, [x], node.output[0], nhwc, where, dict(axes=ir_axes, keep_dims=keep))


# ARG_MAX / ARG_MIN ---------------------------------------------------------------------------

_INDEX_TYPES = {tflite.TensorType.INT32: "int32", tflite.TensorType.INT64: "int64"}


def _tflite_arg(cls):
    def imported(im, ins, outs, table, where):
        o = tflite_import.options(table, cls)
        rank = len(im.shape(ins[0]))
        axis = int(im.const(ins[1], "axis", where).reshape(-1)[0]) % rank
        out = im.graph.tensors[im.tensor(outs[0])]
        if out.dtype not in ("int32", "int64") or (o is not None and o.OutputType() not in _INDEX_TYPES):
            raise tflite_import.UnsupportedOpError(f"{where}: output type {out.dtype}")
        return dict(axis=axis, keep_dims=False), ins[:1]
    return imported


def _float_arg(pick):
    def ref(op, ins, out):
        y = pick(ins[0], axis=op.attrs["axis"])
        return (np.expand_dims(y, op.attrs["axis"]) if op.attrs["keep_dims"] else y).astype(out.dtype)
    return ref


def _lower_arg(name: str):
    def lower(low, op, p):
        shape = low.shape(op.inputs[0])
        flags = spec_ops.OPF_INDEX_INT64 if low.g.tensors[op.outputs[0]].dtype == "int64" else 0
        return low.emit(name, op, dict(rank=len(shape), in_shape=pad_rank(shape), axis=p["axis"]), flags)
    return lower


def _export_arg(options: str):
    def export(wr, op, outs) -> None:
        out = wr.src.tensors[op.outputs[0]]
        kind = tflite.TensorType.INT64 if out.dtype == "int64" else tflite.TensorType.INT32
        target = outs
        if op.attrs["keep_dims"]:  # TFLite drops the axis: reshape back
            shape = tuple(d for i, d in enumerate(out.shape) if i != op.attrs["axis"])
            target = [wr.tidx(Tensor(f"{out.name}__dropped", shape, out.dtype))]
        wr.add(op.type, [wr.name(op.inputs[0]), wr.const_i32(op.outputs[0], [op.attrs["axis"]])], target,
               {options: dict(OutputType=kind)})
        if op.attrs["keep_dims"]:
            wr.add("RESHAPE", [target[0], wr.const_i32(op.outputs[0], out.shape)], outs, {})
    return export


for _name, _pick, _cls, _opts in (("ARG_MAX", np.argmax, tflite.ArgMaxOptions, "ArgMaxOptions"),
                                  ("ARG_MIN", np.argmin, tflite.ArgMinOptions, "ArgMinOptions")):
    register(Operator(
        _name, ("axis", "keep_dims"), tflite=_tflite_arg(_cls), float_ref=_float_arg(_pick), index_output=True,
        params=lambda g, op: dict(axis=int(op.attrs["axis"])), lower=_lower_arg(_name),
        export=_export_arg(_opts), tflite_version=2))


@onnx("ArgMax", "ArgMin")
def _onnx_arg(im, node, attrs, where):
    if attrs.get("select_last_index", 0):
        raise onnx_import.ONNXImportError(f"{where}: select_last_index is not supported")
    shape = im.onnx_shape(node.input[0], where)
    axis = int(attrs.get("axis", 0)) % len(shape)
    keep = bool(attrs.get("keepdims", 1))
    out = im.new_tensor(node.output[0], False, where)
    im.g.tensors[out] = Tensor(out, im.g.tensors[out].shape, "int64")
    im.g.add_op(Op("ARG_MAX" if node.op_type == "ArgMax" else "ARG_MIN", [im.value(node.input[0], False, where)],
                   [out], dict(axis=axis, keep_dims=keep), name=node.output[0]))


@onnx("Mean")
def _onnx_mean_of_inputs(im, node, attrs, where):
    """ONNX Mean, the elementwise mean of its inputs: ADDs, then MUL by 1 / count."""
    ins = [n for n in node.input if n]
    if len(ins) == 1:
        if ins[0] in im.consts:
            im.consts[node.output[0]] = im.consts[ins[0]]
        else:
            im.env[node.output[0]] = im.env[ins[0]]
        return
    total = ins[0]
    out_shape = im.onnx_shape(node.output[0], where)
    for k, other in enumerate(ins[1:]):
        name = f"{node.output[0]}__sum{k}"
        im.shapes[name] = (out_shape, "float32")
        onnx_import.binary("ADD")(im, onnx_proto.helper.make_node("Add", [total, other], [name]), {}, where)
        total = name
    im.consts[f"{node.output[0]}__count"] = np.float32(1.0 / len(ins))
    onnx_import.binary("MUL")(im, onnx_proto.helper.make_node(
        "Mul", [total, f"{node.output[0]}__count"], list(node.output)), {}, where)


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(ARG_MAX='ArgMaxOptions', REDUCE_MAX='ReducerOptions', REDUCE_MIN='ReducerOptions', SUM='ReducerOptions')
