"""Row operators over the last axis: L2_NORMALIZATION (ONNX LpNormalization with p = 2
over the channel axis, or the last one) and LOG_SOFTMAX; ONNX LogSoftmax and Softmax over
any axis (a pair of TRANSPOSEs around the op when the axis is not the last one in the IR); ONNX
LayerNormalization as the ops it computes; INSTANCE_NORM (ONNX InstanceNormalization, and
conditional instance norm spelled out op by op, fused; a LayerNorm's statistics too, over
each row reshaped to a plane)."""
from __future__ import annotations

import numpy as np
import tflite

from npu_hw import fixedpoint as fp

from .. import onnx_import, qparams, tflite_export, tflite_import
from ..descriptors import Emitted, LoweringError
from ..float_ref import activation
from ..ir import Graph, Op, Tensor
from ..probe_regions import scalar
from ..registry import Operator, onnx, register, tflite_options
from .unary import divide_by_square_root

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

# INSTANCE_NORM ---------------------------------------------------------------------------------
# Each channel of an NHWC tensor normalized over H, W, then scaled and shifted per channel
# (gamma, beta: constants or run-time values). ONNX InstanceNormalization imports as it; the
# spellings of TensorFlow's and PyTorch's exports become it by the float graph's rewrite
# (fuse_instance_norms). No TFLite builtin: the chip runs our formula (npu_hw.ops,
# docs/hardware.md), int8 or int16, the plane statistics from exact integer sums.
#
# Why fuse, and what is matched. TensorFlow's ``nn.moments`` + ``nn.batch_normalization``
# (Magenta's conditional instance norm, as tf2onnx or the TFLite converter write it) and PyTorch-style spellings compute
# each channel's mean and variance over H, W and then ``(x - mean) * rsqrt(var + eps) *
# gamma + beta``, gamma and beta per channel, constants or run-time values (a style
# vector's dense layers). Op by op on the chip, the variance goes through a tensor of
# squares whose one grid spans every channel: a channel 100x narrower than the widest has
# 10^4x smaller squares, which fall under one step even at int16, so its variance reads 0
# and its normalized values are noise times ``1 / sqrt(eps)`` (a synthetic style network:
# cosine 0.92 at int16). INSTANCE_NORM takes each plane's statistics from exact integer
# sums (``firmware_sim.kernels.instance_norm``), whatever the channel's size.
#
# An int8 QDQ model's norm (tf2onnx's export of a quantized TensorFlow network) is fused
# too: its pairs fix the grids of the squares and of the variance, and the variance's
# AVERAGE_POOL_2D, a data-moving op, gave its output the squares' grid (8x coarser than the
# file's own in an arbitrary-style network: variances under a step, SQNR ~0 dB, cosine 0.97
# against onnxruntime). The fused op keeps the file's grids for x, gamma, beta and output.
#
# :func:`fuse_instance_norms` starts at each mean over the spatial axes (1, 2) of a 4-D
# NHWC tensor ``x`` (MEAN, or an AVERAGE_POOL_2D whose window is the whole picture: ONNX
# GlobalAveragePool) and follows the ops the spellings use after the optimizer's rewrites
# (SQRT + DIV and SQRT + 1 / v are RSQRT then, ``E[x^2] - E[x]^2`` is centred):
#
# - the variance: ``MEAN(MUL(d, d))``, ``d = x - mean`` (as tf2onnx writes TensorFlow's
#   squared difference; a TFLite graph's own squared-difference op is not matched), then
#   ``ADD(var, eps)`` (a constant scalar) and RSQRT (times constant ones, if any); a RELU
#   fused into these (a QDQ pair on a grid starting at 0 imports as one) changes nothing of
#   values never negative and is allowed;
# - a per-channel mean (or ``MUL(mean, inv)``) may reach its reader through RESHAPEs and
#   TRANSPOSEs that leave it as it was (a QDQ model's int8 ``[1, C, 1, 1]`` Reshape);
# - centred: ``MUL(d, r)``, then optionally ``MUL(., gamma)`` and ``ADD(., beta)``;
# - TensorFlow's: ``inv = MUL(r, gamma)`` (or ``r``), ``ADD(MUL(x, inv), SUB(beta, MUL(mean, inv)))``.
#
# gamma and beta are tensors of one value per channel (shape 1, 1, 1, C or C) that ``x``
# does not feed; a missing one becomes a constant 1 or 0. The ops are replaced only when
# no value between them is read elsewhere or is a model output; the last op's fused
# activation moves onto the INSTANCE_NORM.

#: The axes an instance norm's MEANs reduce, in the IR's NHWC layout.
SPATIAL_AXES = (1, 2)


class _Walk:
    """The readers and producers of a graph's tensors, and the ops a match has taken."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.readers: dict[str, list[Op]] = {}
        self.producer: dict[str, Op] = {}
        for op in g.ops:
            for i in op.inputs:
                self.readers.setdefault(i, []).append(op)
            for o in op.outputs:
                self.producer[o] = op
        self.taken: list[Op] = []

    def only_reader(self, name: str, op_type: str, non_negative: bool = False) -> Op | None:
        """The one op reading ``name``, when it is of ``op_type`` with no fused activation
        (or, for a value that is never negative, a RELU, which changes nothing of it)."""
        found = self.readers.get(name, [])
        if len(found) != 1 or found[0].type != op_type or not _unclamped(found[0], non_negative):
            return None
        return found[0]

    def past_relus(self, name: str) -> str:
        """``name`` past RELUs that are its one reader: on a value never negative they change
        nothing (a QDQ model's pair on a grid starting at 0 imports as one, after an op that
        cannot fuse it)."""
        while len(found := self.readers.get(name, [])) == 1 and found[0].type == "RELU":
            self.take(found[0])
            name = found[0].outputs[0]
        return name

    def moved(self, name: str) -> dict[str, list[Op]]:
        """``name`` and the tensors that are ``name`` again past RESHAPEs and TRANSPOSEs
        of a tensor with one axis longer than 1 (its values in the same order), in
        ``name``'s shape: tf2onnx's ``[1, 1, 1, C] -> [1, C, 1, 1] -> [1, 1, 1, C]`` around a
        QDQ model's per-channel statistics. Each with the moves on its way."""
        shape = self.g.tensors[name].shape
        found: dict[str, list[Op]] = {name: []}
        todo: list[tuple[str, list[Op]]] = [(name, [])]
        while todo:
            at, path = todo.pop()
            for op in self.readers.get(at, []):
                out = op.outputs[0]
                if op.type in ("RESHAPE", "TRANSPOSE") and op.inputs[0] == at and len(path) < 4 \
                        and sum(d > 1 for d in self.g.tensors[out].shape) <= 1:
                    if self.g.tensors[out].shape == shape:
                        found[out] = path + [op]
                    todo.append((out, path + [op]))
        return found

    def other(self, op: Op, name: str) -> str | None:
        """The other input of a two-input ``op`` reading ``name``."""
        if len(op.inputs) != 2 or name not in op.inputs:
            return None
        return op.inputs[1] if op.inputs[0] == name else op.inputs[0]

    def take(self, *ops: Op | None) -> bool:
        if any(op is None for op in ops):
            return False
        self.taken.extend(op for op in ops if op is not None and op not in self.taken)
        return True


def _unclamped(op: Op, non_negative: bool = False) -> bool:
    """``op`` has no fused activation, or a RELU on a value that is never negative (a QDQ
    model's pair on a square or a variance, whose grid starts at 0, imports as one)."""
    return op.attrs.get("activation", "NONE") in (("NONE", "RELU") if non_negative else ("NONE",))


def _same_mean(g: Graph, op: Op | None, axes: tuple[int, ...] = SPATIAL_AXES, non_negative: bool = False) -> bool:
    """``op`` is the mean over ``axes`` of its input, keeping them: MEAN, or (over H, W of a
    4-D NHWC tensor) an AVERAGE_POOL_2D whose one window is the whole picture (ONNX
    GlobalAveragePool)."""
    if op is None or not _unclamped(op, non_negative):
        return False
    shape = g.tensors[op.inputs[0]].shape
    if op.type == "MEAN":
        return bool(op.attrs.get("keep_dims")) and tuple(sorted(a % len(shape) for a in op.attrs["axes"])) == axes
    return axes == SPATIAL_AXES and op.type == "AVERAGE_POOL_2D" and len(shape) == 4 \
        and tuple(op.attrs["filter"]) == tuple(shape[1:3]) and not any(op.attrs["pads"]) \
        and g.tensors[op.outputs[0]].shape == (shape[0], 1, 1, shape[3])


def _per_channel(w: _Walk, name: str | None, channels: int, x: str) -> bool:
    """``name`` holds one value per channel (or one) and is not computed from ``x``."""
    if name is None or name == x:
        return False
    t = w.g.tensors[name]
    if int(np.prod(t.shape)) not in (1, channels) or (len(t.shape) and t.shape[-1] not in (1, channels)):
        return False
    todo, seen = [name], set()
    while todo:                                        # nothing of x upstream (a few ops: dense layers)
        n = todo.pop()
        if n == x:
            return False
        op = w.producer.get(n)
        if op is not None and n not in seen:
            seen.add(n)
            todo.extend(op.inputs)
    return True


def _times_one(w: _Walk, r: str) -> str:
    """``r`` past MULs by a constant 1 (the optimizer's ``1 / sqrt(v)``)."""
    while True:
        readers = w.readers.get(r, [])
        if len(readers) != 1 or readers[0].type != "MUL" or not _unclamped(readers[0], non_negative=True):
            return r
        one = w.other(readers[0], r)
        if one is None or scalar(w.g, one) != 1.0:
            return r
        w.take(readers[0])
        r = readers[0].outputs[0]


def _match(g: Graph, w: _Walk, mean_op: Op, rows: bool = False
           ) -> tuple[list[Op], str, str | None, str | None, float, Op] | None:
    """(ops, x, gamma, beta, epsilon, last op) of the instance norm whose first MEAN is ``mean_op``;
    ``rows``: of the layer norm over the last axis instead, up to ``(x - mean) * r`` (no gamma, beta)."""
    x, mean = mean_op.inputs[0], mean_op.outputs[0]
    shape = g.tensors[x].shape
    rank = len(shape)
    axes = (rank - 1,) if rows else SPATIAL_AXES
    if (rank < 2 if rows else rank != 4) or g.tensors[x].is_constant or not _same_mean(g, mean_op, axes):
        return None
    channels = shape[-1]
    w.take(mean_op)
    means = w.moved(mean)
    d = None
    for alias, moves in means.items():
        for op in w.readers.get(alias, []):
            if op.type == "SUB" and op.inputs == [x, alias] and _unclamped(op):
                d = op
                w.take(*moves)
    square = None
    if d is not None:
        square = next((op for op in w.readers.get(d.outputs[0], []) if op.type == "MUL"
                       and op.inputs == [d.outputs[0]] * 2 and _unclamped(op, non_negative=True)), None)
        w.take(d)
    if square is None:
        return None
    squares = w.past_relus(square.outputs[0])
    var = next((op for op in w.readers.get(squares, []) if _same_mean(g, op, axes, non_negative=True)), None)
    if var is None or len(w.readers[squares]) != 1 or not w.take(square, var):
        return None
    variance = w.past_relus(var.outputs[0])
    shifted = w.only_reader(variance, "ADD", non_negative=True)
    eps = scalar(g, w.other(shifted, variance) or "") if shifted is not None else None
    rsqrt = w.only_reader(w.past_relus(shifted.outputs[0]), "RSQRT") if shifted is not None else None
    if eps is None or eps < 0 or rsqrt is None or not w.take(shifted, rsqrt):
        return None
    r = _times_one(w, w.past_relus(rsqrt.outputs[0]))
    readers = w.readers.get(r, [])
    gamma = beta = None
    if rows:
        if d is None or len(readers) != 1 or readers[0].type != "MUL" or w.other(readers[0], r) != d.outputs[0] \
                or readers[0].attrs.get("activation", "NONE") != "NONE":
            return None
        w.take(readers[0])
        return w.taken, x, None, None, eps, readers[0]
    if d is not None and len(readers) == 1 and readers[0].type == "MUL" and w.other(readers[0], r) == d.outputs[0]:
        last = readers[0]                                   # centred: (x - mean) * r [* gamma] [+ beta]
        w.take(last)
        for op_type in ("MUL", "ADD"):
            after = w.readers.get(last.outputs[0], [])
            if last.attrs.get("activation", "NONE") != "NONE" or len(after) != 1 or after[0].type != op_type \
                    or not _per_channel(w, w.other(after[0], last.outputs[0]), channels, x):
                continue
            if op_type == "MUL":
                gamma = w.other(after[0], last.outputs[0])
            else:
                beta = w.other(after[0], last.outputs[0])
            last = after[0]
            w.take(last)
        return w.taken, x, gamma, beta, eps, last
    inv = r                                                 # TensorFlow's: x * inv + (beta - mean * inv)
    if len(readers) == 1 and readers[0].type == "MUL" and _per_channel(w, w.other(readers[0], r), channels, x) \
            and readers[0].attrs.get("activation", "NONE") == "NONE":
        gamma, inv = w.other(readers[0], r), readers[0].outputs[0]
        w.take(readers[0])
    uses = w.readers.get(inv, [])
    mi = next((op for op in uses if op.type == "MUL" and w.other(op, inv) in means), None)
    xs = next((op for op in uses if op.type == "MUL" and w.other(op, inv) == x), None)
    if len(uses) != 2 or mi is None or xs is None or not (_unclamped(mi) and _unclamped(xs)):
        return None
    w.take(*means[w.other(mi, inv) or ""])
    shift = [(alias, moves, sub) for alias, moves in w.moved(mi.outputs[0]).items()
             if (sub := w.only_reader(alias, "SUB")) is not None and sub.inputs[1] == alias]
    if len(shift) != 1 or not _per_channel(w, shift[0][2].inputs[0], channels, x):
        return None
    sub = shift[0][2]
    w.take(*shift[0][1])
    beta = sub.inputs[0]
    last = next((op for op in w.readers.get(xs.outputs[0], []) if op.type == "ADD"
                 and set(op.inputs) == {xs.outputs[0], sub.outputs[0]}), None)
    if last is None or not w.take(mi, xs, sub, last):
        return None
    return w.taken, x, gamma, beta, eps, last


def _replace(g: Graph, w: _Walk, ops: list[Op], last: Op, new: list[Op]) -> bool:
    """``ops`` (``last`` the one whose output stays) replaced by ``new`` at ``last``'s place,
    unless a value between them is read elsewhere or is a model output."""
    out = last.outputs[0]
    inner = {o for op in ops for o in op.outputs} - {out}
    if inner & g.results() or any(r not in ops for t in inner for r in w.readers.get(t, [])):
        return False
    at = g.ops.index(last)
    g.ops[at:at + 1] = new
    for op in ops:
        if op is not last:
            g.ops.remove(op)
    for t in inner:
        g.tensors.pop(t, None)
    return True


def fuse_instance_norms(g: Graph) -> int:
    """Replace each instance norm spelled out in the float graph ``g`` by one INSTANCE_NORM
    (module docstring); returns how many."""
    made = 0
    for mean_op in [op for op in g.ops if op.type in ("MEAN", "AVERAGE_POOL_2D")]:
        if mean_op not in g.ops or len(g.tensors[mean_op.inputs[0]].shape) != 4 or not _same_mean(g, mean_op):
            continue
        w = _Walk(g)
        found = _match(g, w, mean_op)
        if found is None:
            continue
        ops, x, gamma, beta, eps, last = found
        out, channels, made_here = last.outputs[0], g.tensors[x].shape[-1], []
        if gamma is None:
            gamma = g.add_const(g.unique_name(f"{out}__gamma"), np.ones((channels,), np.float32)).name
            made_here.append(gamma)
        if beta is None:
            beta = g.add_const(g.unique_name(f"{out}__beta"), np.zeros((channels,), np.float32)).name
            made_here.append(beta)
        if _replace(g, w, ops, last, [Op("INSTANCE_NORM", [x, gamma, beta], [out],
                                         {"epsilon": float(eps), "activation": last.attrs.get("activation", "NONE")},
                                         name=last.name)]):
            made += 1
        else:
            for name in made_here:
                g.tensors.pop(name)
    return made


def fuse_layer_norms(g: Graph) -> int:
    """Replace each layer norm's statistics over the last axis, ``(x - E[x]) * rsqrt(E[(x -
    E[x])^2] + eps)`` op by op, by one INSTANCE_NORM of ``x`` seen as one plane per row
    (RESHAPEs to ``[rows, 1, width, 1]`` and back; gamma and beta stay the ops after it);
    returns how many. Op by op, the squares of a row go onto the one grid of every row's:
    a transformer's few "massive activations" (a delimiter token's residual values in the
    hundreds, squares near 10^5) made it 1.5 wide at int16, where an ordinary token's
    squares are under 1, and its variance came out of a few rounded squares (MiniLM:
    cosine 0.93 with every layer int16). INSTANCE_NORM's statistics are exact integer sums."""
    made = 0
    for mean_op in [op for op in g.ops if op.type == "MEAN"]:
        if mean_op not in g.ops:
            continue
        w = _Walk(g)
        found = _match(g, w, mean_op, rows=True)
        if found is None:
            continue
        ops, x, _, _, eps, last = found
        out, shape = last.outputs[0], g.tensors[mean_op.inputs[0]].shape
        planes = (int(np.prod(shape[:-1], dtype=np.int64)), 1, shape[-1], 1)
        rows = g.add_tensor(Tensor(g.unique_name(f"{out}__rows"), planes, "float32")).name
        normed = g.add_tensor(Tensor(g.unique_name(f"{out}__planes"), planes, "float32")).name
        one = g.add_const(g.unique_name(f"{out}__gamma"), np.ones((1,), np.float32)).name
        zero = g.add_const(g.unique_name(f"{out}__beta"), np.zeros((1,), np.float32)).name
        new = [Op("RESHAPE", [x], [rows], {"new_shape": planes}, name=rows),
               Op("INSTANCE_NORM", [rows, one, zero], [normed], {"epsilon": float(eps), "activation": "NONE"},
                  name=normed),
               Op("RESHAPE", [normed], [out], {"new_shape": tuple(shape)}, name=last.name)]
        if _replace(g, w, ops, last, new):
            made += 1
        else:
            for name in (rows, normed, one, zero):
                g.tensors.pop(name, None)
    return made


def _rewrite(g) -> int:
    # the spellings are matched in RSQRT form: SQRT + DIV made RSQRT first (RSQRT's own
    # rewrite may come later in the registry's order)
    return divide_by_square_root(g) + fuse_instance_norms(g) + fuse_layer_norms(g)


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


def _export(w, op, outs) -> None:
    """Float only (a layer kept in float on the CPU, :mod:`libnpu.compiler.cpu_float`): TFLite
    has no instance norm, so the centred spelling, gamma and beta as they are."""
    x, out = w.src.tensors[op.inputs[0]], w.src.tensors[op.outputs[0]]
    if x.quant is not None:
        raise tflite_export.TFLiteExportError(f"cannot export the quantized {op.describe()} to TFLite")
    kept = tuple(1 if i in SPATIAL_AXES else d for i, d in enumerate(x.shape))
    step = {}

    def add(what: str, type_: str, ins: list[int], shape: tuple[int, ...], opts: dict) -> int:
        step[what] = w.tidx(Tensor(f"{out.name}__{what}", shape, "float32"))
        w.add(type_, ins, [step[what]], opts)
        return step[what]
    none, axes = {"FusedActivationFunction": 0}, w.const_i32(out.name, SPATIAL_AXES)
    mean = add("mean", "MEAN", [w.name(x.name), axes], kept, {"ReducerOptions": dict(KeepDims=True)})
    centred = add("centred", "SUB", [w.name(x.name), mean], x.shape, {"SubOptions": none})
    squares = add("squares", "MUL", [centred, centred], x.shape, {"MulOptions": none})
    var = add("variance", "MEAN", [squares, axes], kept, {"ReducerOptions": dict(KeepDims=True)})
    eps = w.tidx(Tensor(f"{out.name}__epsilon", (1,), "float32", None,
                        np.array([op.attrs["epsilon"]], np.float32)))
    inverse = add("inverse", "RSQRT", [add("shifted", "ADD", [var, eps], kept, {"AddOptions": none})], kept, {})
    normed = add("normalized", "MUL", [centred, inverse], x.shape, {"MulOptions": none})
    scaled = add("scaled", "MUL", [normed, w.name(op.inputs[1])], x.shape, {"MulOptions": none})
    w.add("ADD", [scaled, w.name(op.inputs[2])], outs,
          {"AddOptions": dict(FusedActivationFunction=tflite_export.ACT[op.attrs["activation"]])})


register(Operator("INSTANCE_NORM", ("epsilon", "activation"), rewrite=_rewrite, float_ref=_float,
                  fused_activation=True, params=_params, lower=_lower, int16=True, export=_export,
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


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(L2_NORMALIZATION='L2NormOptions', LOG_SOFTMAX=None, SOFTMAX='SoftmaxOptions')
