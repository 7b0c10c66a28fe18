"""Import a float ONNX model into the graph IR (NHWC, TFLite-style ops).

ONNX image tensors are NCHW; the IR is NHWC. Every 4-D activation is kept in NHWC
inside the graph; a TRANSPOSE is inserted only where an op needs the ONNX layout
(e.g. Flatten of a feature map with H*W > 1) and, unless ``nhwc_io`` is set, at 4-D
graph inputs and outputs so the imported graph keeps the ONNX model's I/O layout.
Batch normalization becomes MUL + ADD by per-channel constants (the quantizer's
optimizer folds them into the preceding convolution).

The glue only: each ONNX node type's handler is declared with the operator it becomes
(``compiler.ops``, ``registry.onnx``); the helpers here are what those handlers share.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from ..loadable import HostCall
from . import registry
from .input_shapes import InputShapes, fix_onnx_inputs
from .ir import Graph, IRError, Op, SourceOp, Tensor, require_data, same_pads

__all__ = ["ONNXImportError", "import_onnx", "import_onnx_sources", "load_onnx", "pads_2d", "binary", "unary",
           "squeeze_leading", "TO_NHWC", "TO_NCHW", "AXIS_TO_NHWC"]

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
AXIS_TO_NHWC = {0: 0, 1: 3, 2: 1, 3: 2}


class ONNXImportError(IRError):
    """The ONNX model uses something the importer cannot express."""


def _onnx_dtype(elem_type: int) -> str:
    return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


class _Importer:
    def __init__(self, model: onnx.ModelProto, name: str, nhwc_io: bool, input_shapes: InputShapes, *,
                 fallback: bool = False, force_host: Mapping[int, str] | None = None) -> None:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        self.fallback, self.force_host = fallback, dict(force_host or {})
        # node index in the file, found again by the node's outputs after folding
        self.origin = {tuple(n.output): (i, n.op_type) for i, n in enumerate(model.graph.node)}
        self.sources: list[SourceOp] = []
        model, _ = fix_onnx_inputs(model, input_shapes, name)   # free input dims given or refused, never guessed
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
        seen = set()
        for node in graph.node:
            idx = self.origin.get(tuple(node.output), (len(self.origin), node.op_type))[0]
            seen.add(idx)
            source = SourceOp(idx, node.op_type)
            self.sources.append(source)
            where = f"{node.op_type} node {idx} ({node.name or node.output[0]!r})"
            before = len(self.g.ops)
            try:
                if idx in self.force_host:
                    raise ONNXImportError(self.force_host[idx])
                self.import_node(node, where)
            except IRError as exc:
                if not self.fallback:
                    raise
                del self.g.ops[before:]
                for o in node.output:
                    self.env.pop(o, None)
                source.reason = _reason(exc, where)
                self.host_node(node, source, where)
            source.ir_ops = self.g.ops[before:]
        # nodes folded into constants at import time run nowhere
        self.sources += [SourceOp(i, op) for i, op in self.origin.values() if i not in seen]
        self.sources.sort(key=lambda src: src.index)
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


    def import_node(self, node, where: str) -> None:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        handler = _GLUE.get(node.op_type) or registry.onnx_handler(node.op_type)
        if handler is None and node.domain not in ("", "ai.onnx"):
            raise ONNXImportError(f"custom op {node.op_type!r} (domain {node.domain}): the chip has no custom "
                                  "operators")
        if handler is None:
            raise ONNXImportError(f"unsupported op {where}")
        handler(self, node, attrs, where)

    def host_node(self, node, source: SourceOp, where: str) -> None:
        """A HOST op running ``node`` on the host (a one-node ONNX model, ONNX layout)."""
        data = [n for n in node.input if n and n not in self.consts]
        ins = [self.value(n, False, where) for n in data]
        outs = [self.new_tensor(o, False, where) for o in node.output if o]
        helper = onnx.helper

        def info(name: str, ir_name: str):
            return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(self.g.tensors[ir_name].shape))
        inits = [numpy_helper.from_array(self.consts[n], n) for n in dict.fromkeys(node.input) if n in self.consts]
        sub = helper.make_graph([node], f"host_{source.index}", [info(n, i) for n, i in zip(data, ins)],
                                [info(o, i) for o, i in zip([o for o in node.output if o], outs)], inits)
        model = helper.make_model(sub, opset_imports=list(self.model.opset_import),
                                  ir_version=self.model.ir_version)
        call = HostCall("onnx", model.SerializeToString(), node.op_type, source.index, source.reason)
        self.g.add_op(Op("HOST", ins, outs, {"host": call}, name=node.output[0]))


def _reason(exc: Exception, where: str) -> str:
    """The one-line reason an import failure gives, without the node's own location."""
    text = str(exc).replace(f"unsupported op {where}", "no NPU operator of this type")
    return text.replace(f"{where}: ", "").splitlines()[0] if text else type(exc).__name__


# helpers shared by the operators' ONNX handlers ------------------------------------

def pads_2d(im: _Importer, node, attrs, kernel, strides, dilations, where) -> tuple[int, int, int, int]:
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        p = list(attrs.get("pads", [0, 0, 0, 0]))
        return (p[0], p[2], p[1], p[3])
    if auto == "VALID":
        return (0, 0, 0, 0)
    h, w = (1, *im.onnx_shape(node.input[0], where)[2:])[-2:]   # [N, C, L]: a 2-D window of height 1
    _, t, b = same_pads(h, kernel[0], strides[0], dilations[0])
    _, left, right = same_pads(w, kernel[1], strides[1], dilations[1])
    if auto == "SAME_LOWER":
        t, b, left, right = b, t, right, left
    return (t, b, left, right)


def binary(op_type: str) -> Callable:
    """A handler emitting IR ``op_type`` for an elementwise binary node (constants laid
    out like the activation they meet)."""
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
                    data = squeeze_leading(data)
                ins.append(im.g.add_const(n, data).name)
            else:
                ins.append(im.value(n, nhwc if len(s) == 4 else None, where))
        im.emit(op_type, ins, node.output[0], nhwc, where, dict(activation="NONE"))
    return handler


def squeeze_leading(data: np.ndarray) -> np.ndarray:
    while data.ndim > 1 and data.shape[0] == 1:
        data = data[0]
    return data


def unary(op_type: str) -> Callable:
    """A handler emitting IR ``op_type`` for a one-input node, in its input's layout."""
    def handler(im: _Importer, node, attrs, where):
        nhwc = im.is_nhwc(node.input[0])
        im.emit(op_type, [im.value(node.input[0], None, where)], node.output[0], nhwc, where)
    return handler


def _identity(im: _Importer, node, attrs, where):
    if node.input[0] in im.consts:
        im.consts[node.output[0]] = im.consts[node.input[0]]
    else:
        im.env[node.output[0]] = im.env[node.input[0]]


def _constant(im: _Importer, node, attrs, where):
    if "value" not in attrs:
        raise ONNXImportError(f"{where}: only tensor-valued Constant nodes are supported")
    im.consts[node.output[0]] = numpy_helper.to_array(attrs["value"])


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


# Nodes that produce no IR op: the importer resolves them to their input or a constant.
_GLUE: dict[str, Callable] = {
    "Identity": _identity,
    "Dropout": _identity,
    "Constant": _constant,
}


def import_onnx(model: onnx.ModelProto | bytes, name: str = "model", *, nhwc_io: bool = False,
                input_shapes: InputShapes = None) -> Graph:
    """Build a float IR graph from an ONNX model; see :func:`import_onnx_sources`."""
    return import_onnx_sources(model, name, nhwc_io=nhwc_io, input_shapes=input_shapes)[0]


def import_onnx_sources(model: onnx.ModelProto | bytes, name: str = "model", *, nhwc_io: bool = False,
                        input_shapes: InputShapes = None, fallback: bool = False,
                        force_host: Mapping[int, str] | None = None) -> tuple[Graph, list[SourceOp]]:
    """Build a float IR graph from an ONNX model (proto or serialized bytes).

    ``nhwc_io``: make 4-D graph inputs/outputs NHWC (no layout transposes at the edges).
    ``input_shapes``: shapes for inputs with free dimensions (:mod:`libnpu.compiler.input_shapes`:
    a free leading batch dimension is 1 by default, any other free dimension needs one).
    ``fallback``: a node the import cannot take for the chip becomes a HOST op (run on the
    host) instead of an error; ``force_host`` maps more node indices to the reason they
    go to the host. Also returns what became of each node (:class:`SourceOp`).
    Raises :class:`~libnpu.compiler.ir.EmptyModelError` for an empty model or one that
    imports with no operators or no outputs (what a truncated file parses as).
    """
    if isinstance(model, (bytes, bytearray)):
        require_data(model, name)
        try:
            model = onnx.load_model_from_string(bytes(model))
        except Exception as exc:
            raise ONNXImportError(f"{name}: not a readable ONNX model: {exc}") from exc
    importer = _Importer(model, name, nhwc_io, input_shapes, fallback=fallback, force_host=force_host)
    return importer.run(), importer.sources


def load_onnx(path: str | os.PathLike, **kw: Any) -> Graph:
    """Read and import an ``.onnx`` file; see :func:`import_onnx` for options."""
    p = Path(path)
    return import_onnx(p.read_bytes(), p.name.removesuffix(".onnx"), **kw)
