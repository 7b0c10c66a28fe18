"""Import a float ONNX model into the graph IR (NHWC, TFLite-style ops).

ONNX image tensors are NCHW; the IR is NHWC. Every 4-D activation is kept in NHWC
inside the graph; a TRANSPOSE is inserted only where an op needs the ONNX layout
(e.g. Flatten of a feature map with H*W > 1) and, unless ``nhwc_io`` is set, at 4-D
graph inputs and outputs so the imported graph keeps the ONNX model's I/O layout.
Batch normalization becomes MUL + ADD by per-channel constants (the quantizer's
optimizer folds them into the preceding convolution).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from .ir import Graph, IRError, Op, Tensor, require_data, same_pads

__all__ = ["ONNXImportError", "import_onnx", "load_onnx"]

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
_AXIS_TO_NHWC = {0: 0, 1: 3, 2: 1, 3: 2}


class ONNXImportError(IRError):
    """The ONNX model uses something the importer cannot express."""


def _onnx_dtype(elem_type: int) -> str:
    return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


class _Importer:
    def __init__(self, model: onnx.ModelProto, name: str, nhwc_io: bool, batch: int) -> None:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        for vi in model.graph.input:  # pin dynamic dims (batch) before shape inference
            for d in vi.type.tensor_type.shape.dim:
                if not d.HasField("dim_value"):
                    d.dim_value = batch
        model = _fold_constant_subgraphs(model, name)
        try:
            self.model = shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as exc:  # onnx raises its own InferenceError types
            raise ONNXImportError(f"{name}: ONNX shape inference failed: {exc}") from exc
        self.g = Graph(name)
        self.nhwc_io = nhwc_io
        self.consts: dict[str, np.ndarray] = {
            i.name: numpy_helper.to_array(i) for i in self.model.graph.initializer}
        self.shapes: dict[str, tuple[tuple[int, ...], str]] = {}
        for vi in list(self.model.graph.value_info) + list(self.model.graph.input) + list(self.model.graph.output):
            tt = vi.type.tensor_type
            if tt.HasField("shape"):
                dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
                self.shapes[vi.name] = (dims, _onnx_dtype(tt.elem_type))
        # ONNX name -> (IR name, whether the IR tensor is the NHWC permutation of it)
        self.env: dict[str, tuple[str, bool]] = {}
        self._layout_cache: dict[tuple[str, bool], str] = {}

    # helpers ------------------------------------------------------------------------
    def const(self, name: str, where: str) -> np.ndarray:
        if name in self.consts:
            return self.consts[name]
        raise ONNXImportError(f"{where}: input {name!r} must be a constant (initializer or Constant node)")

    def onnx_shape(self, name: str, where: str) -> tuple[int, ...]:
        if name in self.consts:
            return self.consts[name].shape
        shape = self.shapes.get(name, (None, None))[0]
        if shape is None or any(d < 0 for d in shape):
            raise ONNXImportError(f"{where}: shape of {name!r} is unknown or dynamic ({shape})")
        return shape

    def new_tensor(self, onnx_name: str, nhwc: bool, where: str, shape: tuple[int, ...] | None = None) -> str:
        shape = shape if shape is not None else self.onnx_shape(onnx_name, where)
        if nhwc:
            shape = tuple(shape[p] for p in TO_NHWC)
        name = self.g.unique_name(onnx_name)
        self.g.add_tensor(Tensor(name, shape, "float32"))
        self.env[onnx_name] = (name, nhwc)
        return name

    def value(self, onnx_name: str, nhwc: bool | None, where: str) -> str:
        """IR name of ``onnx_name`` in the wanted layout (None: whatever it has)."""
        if onnx_name in self.consts:
            data = self.consts[onnx_name].astype(np.float32)
            if nhwc and data.ndim == 4:
                data = data.transpose(TO_NHWC)
            key = (onnx_name, bool(nhwc and data.ndim == 4))
            if key not in self._layout_cache:
                self._layout_cache[key] = self.g.add_const(onnx_name, data).name
            return self._layout_cache[key]
        if onnx_name not in self.env:
            raise ONNXImportError(f"{where}: input {onnx_name!r} is not produced by any node")
        ir_name, is_nhwc = self.env[onnx_name]
        if nhwc is None or is_nhwc == nhwc or len(self.g.tensors[ir_name].shape) != 4:
            return ir_name
        key = (onnx_name, nhwc)
        if key not in self._layout_cache:
            src = self.g.tensors[ir_name]
            perm = TO_NHWC if nhwc else TO_NCHW
            out = self.g.add_tensor(Tensor(self.g.unique_name(f"{ir_name}__{'nhwc' if nhwc else 'nchw'}"),
                                           tuple(src.shape[p] for p in perm), "float32"))
            self.g.add_op(Op("TRANSPOSE", [ir_name], [out.name], {"perm": perm}))
            self._layout_cache[key] = out.name
        return self._layout_cache[key]

    def is_nhwc(self, onnx_name: str) -> bool:
        return onnx_name in self.env and self.env[onnx_name][1]

    def emit(self, type_: str, inputs: list[str], onnx_out: str, nhwc: bool, where: str,
             attrs: dict[str, Any] | None = None, shape: tuple[int, ...] | None = None) -> str:
        out = self.new_tensor(onnx_out, nhwc, where, shape)
        self.g.add_op(Op(type_, inputs, [out], attrs or {}, name=onnx_out))
        return out

    # driver -------------------------------------------------------------------------
    def run(self) -> Graph:
        graph = self.model.graph
        init_names = set(self.consts)
        for vi in graph.input:
            if vi.name in init_names:
                continue
            shape, dtype = self.shapes[vi.name]
            if dtype != "float32":
                raise ONNXImportError(f"input {vi.name!r}: only float32 inputs are supported, got {dtype}")
            if len(shape) == 4 and self.nhwc_io:
                self.new_tensor(vi.name, True, "input")
            else:
                self.new_tensor(vi.name, False, "input")
            self.g.inputs.append(self.env[vi.name][0])
        for idx, node in enumerate(graph.node):
            where = f"{node.op_type} node {idx} ({node.name or node.output[0]!r})"
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            handler = _HANDLERS.get(node.op_type)
            if handler is None:
                raise ONNXImportError(f"unsupported op {where}")
            handler(self, node, attrs, where)
        for vi in graph.output:
            if vi.name not in self.env:
                raise ONNXImportError(f"graph output {vi.name!r} is not computed by any node")
            name = self.value(vi.name, None if self.nhwc_io else False, "output")
            self.g.outputs.append(name)
        self.g.metadata["source"] = "onnx"
        self.g.metadata["layout"] = "NHWC" if self.nhwc_io else "as ONNX (NCHW)"
        self.g.prune()
        self.g.validate()
        self.g.check_runnable()
        return self.g


# op handlers ------------------------------------------------------------------------

def _pads_2d(im: _Importer, node, attrs, kernel, strides, dilations, where) -> tuple[int, int, int, int]:
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        p = list(attrs.get("pads", [0, 0, 0, 0]))
        return (p[0], p[2], p[1], p[3])
    if auto == "VALID":
        return (0, 0, 0, 0)
    _, _, h, w = im.onnx_shape(node.input[0], where)
    _, t, b = same_pads(h, kernel[0], strides[0], dilations[0])
    _, l, r = same_pads(w, kernel[1], strides[1], dilations[1])
    if auto == "SAME_LOWER":
        t, b, l, r = b, t, r, l
    return (t, b, l, r)


def _conv(im: _Importer, node, attrs, where):
    w = im.const(node.input[1], where).astype(np.float32)
    if w.ndim != 4:
        raise ONNXImportError(f"{where}: only 2-D convolutions are supported")
    cout, cin_g, kh, kw = w.shape
    group = int(attrs.get("group", 1))
    strides = tuple(attrs.get("strides", (1, 1)))
    dil = tuple(attrs.get("dilations", (1, 1)))
    pads = _pads_2d(im, node, attrs, (kh, kw), strides, dil, where)
    cin = im.onnx_shape(node.input[0], where)[1]
    x = im.value(node.input[0], True, where)
    bias = ""
    if len(node.input) > 2 and node.input[2]:
        bias = im.g.add_const(node.input[2], im.const(node.input[2], where).astype(np.float32)).name
    common = dict(stride=strides, dilation=dil, pads=pads, activation="NONE")
    if group > 1 and group == cin and cin_g == 1:
        wt = im.g.add_const(node.input[1], w.transpose(1, 2, 3, 0)).name  # [1, KH, KW, Cout]
        im.emit("DEPTHWISE_CONV_2D", [x, wt, bias], node.output[0], True, where,
                dict(common, depth_multiplier=cout // cin))
    else:
        wt = im.g.add_const(node.input[1], w.transpose(0, 2, 3, 1)).name  # OHWI
        im.emit("CONV_2D", [x, wt, bias], node.output[0], True, where, dict(common, groups=group))


def _gemm(im: _Importer, node, attrs, where):
    if attrs.get("transA", 0):
        raise ONNXImportError(f"{where}: transA is not supported")
    w = im.const(node.input[1], where).astype(np.float32) * float(attrs.get("alpha", 1.0))
    if not attrs.get("transB", 0):
        w = w.T
    bias = ""
    if len(node.input) > 2 and node.input[2]:
        c = im.const(node.input[2], where).astype(np.float32) * float(attrs.get("beta", 1.0))
        bias = im.g.add_const(node.input[2], np.broadcast_to(c.reshape(-1), (w.shape[0],)).copy()).name
    wt = im.g.add_const(node.input[1], np.ascontiguousarray(w)).name
    im.emit("FULLY_CONNECTED", [im.value(node.input[0], False, where), wt, bias], node.output[0], False,
            where, dict(activation="NONE", keep_num_dims=False))


def _matmul(im: _Importer, node, attrs, where):
    if node.input[1] not in im.consts:
        raise ONNXImportError(f"{where}: only MatMul by a constant weight is supported")
    w = im.const(node.input[1], where).astype(np.float32)
    if w.ndim != 2:
        raise ONNXImportError(f"{where}: weight must be 2-D")
    wt = im.g.add_const(node.input[1], np.ascontiguousarray(w.T)).name
    x = im.value(node.input[0], False, where)
    im.emit("FULLY_CONNECTED", [x, wt, ""], node.output[0], False, where,
            dict(activation="NONE", keep_num_dims=len(im.g.tensors[x].shape) > 2))


def _binary(op_type: str) -> Callable:
    def handler(im: _Importer, node, attrs, where):
        a, b = node.input[0], node.input[1]
        shapes = [im.onnx_shape(n, where) for n in (a, b)]
        out_shape = im.onnx_shape(node.output[0], where)
        nhwc = len(out_shape) == 4 and any(im.is_nhwc(n) for n in (a, b))
        ins = []
        for n, s in zip((a, b), shapes):
            if n in im.consts:
                data = im.consts[n].astype(np.float32)
                if nhwc:  # right-align to rank 4, then permute like the activation
                    data = data.reshape((1,) * (4 - data.ndim) + data.shape).transpose(TO_NHWC)
                    data = _squeeze_leading(data)
                ins.append(im.g.add_const(n, data).name)
            else:
                ins.append(im.value(n, nhwc if len(s) == 4 else None, where))
        im.emit(op_type, ins, node.output[0], nhwc, where, dict(activation="NONE"))
    return handler


def _squeeze_leading(data: np.ndarray) -> np.ndarray:
    while data.ndim > 1 and data.shape[0] == 1:
        data = data[0]
    return data


def _batchnorm(im: _Importer, node, attrs, where):
    scale, bias, mean, var = (im.const(n, where).astype(np.float64) for n in node.input[1:5])
    a = scale / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
    b = bias - mean * a
    x = node.input[0]
    rank = len(im.onnx_shape(x, where))
    nhwc = rank == 4
    xin = im.value(x, True if nhwc else None, where)
    if not nhwc and rank != 2:
        raise ONNXImportError(f"{where}: batch normalization of a rank-{rank} tensor is not supported")
    mid_name = f"{node.output[0]}__bn_mul"
    mid = im.new_tensor(mid_name, nhwc, where, im.onnx_shape(node.output[0], where))
    ca = im.g.add_const(f"{node.output[0]}__bn_scale", a.astype(np.float32)).name
    cb = im.g.add_const(f"{node.output[0]}__bn_shift", b.astype(np.float32)).name
    im.g.add_op(Op("MUL", [xin, ca], [mid], {"activation": "NONE"}))
    im.emit("ADD", [mid, cb], node.output[0], nhwc, where, dict(activation="NONE"))


def _unary(op_type: str) -> Callable:
    def handler(im: _Importer, node, attrs, where):
        nhwc = im.is_nhwc(node.input[0])
        im.emit(op_type, [im.value(node.input[0], None, where)], node.output[0], nhwc, where)
    return handler


def _clip(im: _Importer, node, attrs, where):
    lo = attrs.get("min", -np.inf)
    hi = attrs.get("max", np.inf)
    if len(node.input) > 1 and node.input[1]:
        lo = float(im.const(node.input[1], where))
    if len(node.input) > 2 and node.input[2]:
        hi = float(im.const(node.input[2], where))
    kind = {(0.0, np.inf): "RELU", (0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}.get((float(lo), float(hi)))
    if kind is None:
        raise ONNXImportError(f"{where}: Clip({lo}, {hi}) is not a supported activation")
    _unary(kind)(im, node, attrs, where)


def _identity(im: _Importer, node, attrs, where):
    if node.input[0] in im.consts:
        im.consts[node.output[0]] = im.consts[node.input[0]]
    else:
        im.env[node.output[0]] = im.env[node.input[0]]


def _constant(im: _Importer, node, attrs, where):
    if "value" not in attrs:
        raise ONNXImportError(f"{where}: only tensor-valued Constant nodes are supported")
    im.consts[node.output[0]] = numpy_helper.to_array(attrs["value"])


def _pool(op_type: str) -> Callable:
    def handler(im: _Importer, node, attrs, where):
        if attrs.get("ceil_mode", 0):
            raise ONNXImportError(f"{where}: ceil_mode is not supported")
        if any(d != 1 for d in attrs.get("dilations", (1, 1))):
            raise ONNXImportError(f"{where}: dilated pooling is not supported")
        kernel = tuple(attrs["kernel_shape"])
        strides = tuple(attrs.get("strides", (1, 1)))
        pads = _pads_2d(im, node, attrs, kernel, strides, (1, 1), where)
        if op_type == "AVERAGE_POOL_2D" and attrs.get("count_include_pad", 0) and any(pads):
            raise ONNXImportError(f"{where}: count_include_pad with padding is not supported")
        im.emit(op_type, [im.value(node.input[0], True, where)], node.output[0], True, where,
                dict(filter=kernel, stride=strides, pads=pads, activation="NONE"))
    return handler


def _global_avg(im: _Importer, node, attrs, where):
    _, _, h, w = im.onnx_shape(node.input[0], where)
    im.emit("AVERAGE_POOL_2D", [im.value(node.input[0], True, where)], node.output[0], True, where,
            dict(filter=(h, w), stride=(1, 1), pads=(0, 0, 0, 0), activation="NONE"))


def _reshape_to(im: _Importer, node, where, out_shape: tuple[int, ...] | None = None):
    out_shape = out_shape or im.onnx_shape(node.output[0], where)
    src = node.input[0]
    # A feature map with a single pixel has the same element order in NCHW and NHWC.
    in_shape = im.onnx_shape(src, where)
    flat_ok = im.is_nhwc(src) and in_shape[2] * in_shape[3] == 1
    x = im.value(src, None if flat_ok else False, where)
    im.emit("RESHAPE", [x], node.output[0], False, where, dict(new_shape=out_shape), shape=out_shape)


def _flatten(im: _Importer, node, attrs, where):
    _reshape_to(im, node, where)


def _reshape(im: _Importer, node, attrs, where):
    target = [int(d) for d in im.const(node.input[1], where).reshape(-1)]
    in_shape = im.onnx_shape(node.input[0], where)
    # ONNX rules: 0 copies the input dimension (unless allowzero), -1 is inferred.
    dims = [in_shape[i] if d == 0 and not attrs.get("allowzero", 0) else d for i, d in enumerate(target)]
    if dims.count(-1) > 1:
        raise ONNXImportError(f"{where}: more than one -1 in shape {target}")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1]))
        dims[dims.index(-1)] = int(np.prod(in_shape)) // max(known, 1)
    if int(np.prod(dims)) != int(np.prod(in_shape)):
        raise ONNXImportError(f"{where}: cannot reshape {in_shape} to {target}")
    _reshape_to(im, node, where, tuple(dims))


def _softmax(im: _Importer, node, attrs, where):
    shape = im.onnx_shape(node.input[0], where)
    axis = int(attrs.get("axis", -1)) % len(shape)
    if axis != len(shape) - 1:
        raise ONNXImportError(f"{where}: softmax over axis {axis} (not the last) is not supported")
    im.emit("SOFTMAX", [im.value(node.input[0], False, where)], node.output[0], False, where,
            dict(beta=1.0))


def _concat(im: _Importer, node, attrs, where):
    rank = len(im.onnx_shape(node.output[0], where))
    axis = int(attrs["axis"]) % rank
    nhwc = rank == 4 and any(im.is_nhwc(n) for n in node.input)
    ins = [im.value(n, nhwc if rank == 4 else None, where) for n in node.input]
    im.emit("CONCATENATION", ins, node.output[0], nhwc, where,
            dict(axis=_AXIS_TO_NHWC[axis] if nhwc else axis, activation="NONE"))


def _pad(im: _Importer, node, attrs, where):
    mode = attrs.get("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
        raise ONNXImportError(f"{where}: only constant padding is supported")
    pads = attrs.get("pads")
    if pads is None:
        pads = im.const(node.input[1], where)
    if len(node.input) > 2 and node.input[2] and float(im.const(node.input[2], where)) != 0.0:
        raise ONNXImportError(f"{where}: padding value other than 0 is not supported")
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    rank = len(pads) // 2
    pairs = [(pads[i], pads[i + rank]) for i in range(rank)]
    nhwc = rank == 4 and im.is_nhwc(node.input[0])
    if nhwc:
        pairs = [pairs[p] for p in TO_NHWC]
    im.emit("PAD", [im.value(node.input[0], None, where)], node.output[0], nhwc, where,
            dict(paddings=tuple(pairs)))


def _transpose(im: _Importer, node, attrs, where):
    shape = im.onnx_shape(node.input[0], where)
    perm = tuple(attrs.get("perm", tuple(reversed(range(len(shape))))))
    x = node.input[0]
    if im.is_nhwc(x):  # compose: the IR tensor is NCHW.transpose(TO_NHWC)
        perm = tuple(TO_NCHW[p] for p in perm)
    im.emit("TRANSPOSE", [im.value(x, None, where)], node.output[0], False, where, dict(perm=perm))


def _reduce_mean(im: _Importer, node, attrs, where):
    shape = im.onnx_shape(node.input[0], where)
    axes = attrs.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = im.const(node.input[1], where).tolist()
    axes = sorted(int(a) % len(shape) for a in (axes if axes is not None else range(len(shape))))
    keep = bool(attrs.get("keepdims", 1))
    nhwc = im.is_nhwc(node.input[0]) and keep
    ir_axes = tuple(sorted(_AXIS_TO_NHWC[a] for a in axes)) if nhwc else tuple(axes)
    x = im.value(node.input[0], True if nhwc else False, where)
    im.emit("MEAN", [x], node.output[0], nhwc, where, dict(axes=ir_axes, keep_dims=keep))


def _resize(im: _Importer, node, attrs, where):
    def text(key: str, default: str) -> str:
        v = attrs.get(key, default)
        return v.decode() if isinstance(v, bytes) else v
    mode, coord = text("mode", "nearest"), text("coordinate_transformation_mode", "half_pixel")
    nearest = text("nearest_mode", "round_prefer_floor")
    in_shape, out_shape = im.onnx_shape(node.input[0], where), im.onnx_shape(node.output[0], where)
    if len(in_shape) != 4 or in_shape[:2] != out_shape[:2]:
        raise ONNXImportError(f"{where}: only spatial (H, W) resizing of 4-D tensors is supported")
    if coord == "pytorch_half_pixel" and min(out_shape[2:]) > 1:
        coord = "half_pixel"
    # The ONNX settings that mean exactly what TFLite's two resize ops compute.
    table = {("linear", "asymmetric"): ("RESIZE_BILINEAR", False, False),
             ("linear", "align_corners"): ("RESIZE_BILINEAR", True, False),
             ("linear", "half_pixel"): ("RESIZE_BILINEAR", False, True),
             ("nearest", "asymmetric", "floor"): ("RESIZE_NEAREST_NEIGHBOR", False, False),
             ("nearest", "align_corners", "round_prefer_ceil"): ("RESIZE_NEAREST_NEIGHBOR", True, False),
             ("nearest", "tf_half_pixel_for_nn", "floor"): ("RESIZE_NEAREST_NEIGHBOR", False, True)}
    key = (mode, coord) if mode == "linear" else (mode, coord, nearest)
    if key not in table or attrs.get("antialias", 0) or attrs.get("exclude_outside", 0):
        raise ONNXImportError(f"{where}: Resize mode={mode} coordinate_transformation_mode={coord}"
                              f"{'' if mode == 'linear' else ' nearest_mode=' + nearest} is not supported")
    op_type, align, half = table[key]
    im.emit(op_type, [im.value(node.input[0], True, where)], node.output[0], True, where,
            dict(size=tuple(out_shape[2:]), align_corners=align, half_pixel_centers=half))


def _fold_slice(ins, attrs):
    data, starts, ends = ins[0], ins[1], ins[2]
    axes = ins[3] if len(ins) > 3 and ins[3] is not None else range(len(starts))
    steps = ins[4] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        index[int(ax)] = slice(int(st), int(en), int(sp))
    return data[tuple(index)]


def _unsqueeze(ins, attrs):
    axes = attrs.get("axes") if "axes" in attrs else ins[1]
    out = ins[0]
    rank = out.ndim + len(axes)
    for ax in sorted(int(a) % rank for a in axes):
        out = np.expand_dims(out, ax)
    return out


def _squeeze(ins, attrs):
    axes = attrs.get("axes") if "axes" in attrs else (ins[1] if len(ins) > 1 else None)
    return np.squeeze(ins[0], axis=None if axes is None else tuple(int(a) for a in axes))


# Ops evaluated when all their inputs are constants (Shape only needs a static shape).
_FOLDERS: dict[str, Callable] = {
    "Shape": lambda ins, attrs: np.asarray(ins[0].shape, np.int64),
    "Gather": lambda ins, attrs: np.take(ins[0], ins[1], axis=int(attrs.get("axis", 0))),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda ins, attrs: np.concatenate([np.atleast_1d(i) for i in ins], axis=int(attrs["axis"])),
    "Cast": lambda ins, attrs: ins[0].astype(onnx.helper.tensor_dtype_to_np_dtype(attrs["to"])),
    "Add": lambda ins, attrs: ins[0] + ins[1],
    "Sub": lambda ins, attrs: ins[0] - ins[1],
    "Mul": lambda ins, attrs: ins[0] * ins[1],
    "Div": lambda ins, attrs: (ins[0] // ins[1]) if ins[0].dtype.kind in "iu" else ins[0] / ins[1],
    "Slice": _fold_slice,
    "Reshape": lambda ins, attrs: ins[0].reshape([d if d != 0 else ins[0].shape[i]
                                                  for i, d in enumerate(ins[1].tolist())]),
    "Transpose": lambda ins, attrs: ins[0].transpose(attrs.get("perm")),
    "Identity": lambda ins, attrs: ins[0],
}


def _fold_constant_subgraphs(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """Turn nodes computable at import time into initializers: Constant nodes, shape
    arithmetic (Shape -> Gather -> Concat -> Reshape, as exporters write flatten) and
    any foldable op whose inputs are all constants. Repeats until nothing changes, so
    that shape inference afterwards sees every static shape."""
    graph = model.graph
    while True:
        consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        try:
            inferred = shape_inference.infer_shapes(model)
        except Exception as exc:
            raise ONNXImportError(f"{name}: ONNX shape inference failed: {exc}") from exc
        static: dict[str, tuple[int, ...]] = {}
        for vi in list(inferred.graph.value_info) + list(inferred.graph.input):
            tt = vi.type.tensor_type
            if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
                static[vi.name] = tuple(d.dim_value for d in tt.shape.dim)
        kept, changed = [], False
        for node in graph.node:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            value = None
            if node.op_type == "Constant" and "value" in attrs:
                value = numpy_helper.to_array(attrs["value"])
            elif node.op_type == "Shape" and (node.input[0] in static or node.input[0] in consts):
                src = consts.get(node.input[0])
                value = np.asarray(src.shape if src is not None else static[node.input[0]], np.int64)
            elif node.op_type in _FOLDERS and node.op_type != "Shape" and \
                    all(i in consts for i in node.input if i):
                try:
                    value = np.asarray(_FOLDERS[node.op_type]([consts[i] if i else None for i in node.input],
                                                              attrs))
                except (ValueError, IndexError, TypeError) as exc:
                    raise ONNXImportError(f"{name}: cannot evaluate {node.op_type} node "
                                          f"{node.name or node.output[0]!r} on constants: {exc}") from exc
            if value is None or len(node.output) != 1:
                kept.append(node)
                continue
            graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
            consts[node.output[0]] = value
            changed = True
        if not changed:
            return model
        del graph.node[:]
        graph.node.extend(kept)


def _div(im: _Importer, node, attrs, where):
    if node.input[1] not in im.consts:
        raise ONNXImportError(f"{where}: only division by a constant is supported")
    recip = 1.0 / im.consts[node.input[1]].astype(np.float32)
    im.consts[f"{node.output[0]}__reciprocal"] = recip
    node = onnx.helper.make_node("Mul", [node.input[0], f"{node.output[0]}__reciprocal"], list(node.output))
    _binary("MUL")(im, node, attrs, where)


_HANDLERS: dict[str, Callable] = {
    "Div": _div,
    "Conv": _conv,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Add": _binary("ADD"),
    "Sub": _binary("SUB"),
    "Mul": _binary("MUL"),
    "BatchNormalization": _batchnorm,
    "Relu": _unary("RELU"),
    "Sigmoid": _unary("LOGISTIC"),
    "Tanh": _unary("TANH"),
    "Clip": _clip,
    "Identity": _identity,
    "Dropout": _identity,
    "Constant": _constant,
    "MaxPool": _pool("MAX_POOL_2D"),
    "AveragePool": _pool("AVERAGE_POOL_2D"),
    "GlobalAveragePool": _global_avg,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Softmax": _softmax,
    "Concat": _concat,
    "Pad": _pad,
    "Transpose": _transpose,
    "ReduceMean": _reduce_mean,
    "Resize": _resize,
}


def import_onnx(model: onnx.ModelProto | bytes, name: str = "model", *, nhwc_io: bool = False,
                batch: int = 1) -> Graph:
    """Build a float IR graph from an ONNX model (proto or serialized bytes).

    ``nhwc_io``: make 4-D graph inputs/outputs NHWC (no layout transposes at the edges).
    ``batch``: value for dynamic input dimensions.
    Raises :class:`~libnpu.compiler.ir.EmptyModelError` for an empty model or one that
    imports with no operators or no outputs (what a truncated file parses as).
    """
    if isinstance(model, (bytes, bytearray)):
        require_data(model, name)
        try:
            model = onnx.load_model_from_string(bytes(model))
        except Exception as exc:
            raise ONNXImportError(f"{name}: not a readable ONNX model: {exc}") from exc
    return _Importer(model, name, nhwc_io, batch).run()


def load_onnx(path: str | os.PathLike, **kw: Any) -> Graph:
    """Read and import an ``.onnx`` file; see :func:`import_onnx` for options."""
    p = Path(path)
    return import_onnx(p.read_bytes(), p.name.removesuffix(".onnx"), **kw)
