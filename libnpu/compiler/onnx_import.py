"""Import a float ONNX model into the graph IR (NHWC, TFLite-style ops).

A QDQ model (QuantizeLinear/DequantizeLinear pairs) is imported as its float twin, the
pairs' grids kept for the quantizer (:mod:`libnpu.compiler.qdq_import`); a dynamically
quantized one (onnxruntime's ``quantize_dynamic``) as the float model it stands for
(:mod:`libnpu.compiler.dynamic_quant`).

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
from onnx import numpy_helper

from ..loadable import HostCall
from . import registry
from .attention_masks import ATTENTION_MASKS, finite_attention_masks
from .dynamic_quant import dequantize_dynamic, is_dynamic, per_run_values
from .dynamic_shapes import DYNAMIC_OUTPUTS, data_dependent, dynamic_output_entry
from .host_groups import group_host_ops
from .input_shapes import InputShapes, fix_onnx_inputs
from .integer_inputs import INTEGER_INPUTS, narrowed_index_inputs, refuse_integer_operands
from .ir import SOURCE_OUTPUT_NAMES, Graph, IRError, Op, SourceOp, Tensor, require_data, same_pads
from .onnx_fold import fold_onnx, free_body_shapes
from .onnx_host import TensorType, group_model, probe_shapes, reads
from .onnx_ms_ops import lower_ms_ops, not_lowered_reason
from .onnx_order import sort_nodes
from .onnx_shapes import infer_shapes
from .qdq_import import QDQ_PER_TENSOR, QDQ_RANGES, along_moves, float_twin, is_qdq
from .source_index import record_sources

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
        qdq_types = [n.op_type for n in model.graph.node]     # the file's nodes, as the user reads them
        # producers first, as onnxruntime sorts a file that lists them after their readers
        # (compiler.onnx_order); nodes keep the file's numbers through file_index
        moved = sort_nodes(model.graph, name)
        file_index = moved or list(range(len(qdq_types)))
        # onnxruntime's own operators as the ONNX ones they compute (compiler.onnx_ms_ops)
        lowered = lower_ms_ops(model)
        if lowered:
            model, file_index = lowered.model, [file_index[i] for i in lowered.origins]
        # a dynamically quantized model: the float model it stands for (compiler.dynamic_quant)
        dynamic = dequantize_dynamic(model) if is_dynamic(model) else None
        if dynamic:
            model, file_index = dynamic.model, [file_index[i] for i in dynamic.origins]
        # a QDQ model: its float twin, each Q -> DQ pair's grid kept as its value's range
        twin = float_twin(model) if is_qdq(model) else None
        model, qdq_origins = (twin.model, [file_index[i] if i >= 0 else -1 for i in twin.origins]) if twin \
            else (model, file_index if dynamic or lowered or moved else [])
        self.qdq_ranges = twin.ranges if twin else {}
        self.qdq_per_tensor, self.per_tensor_ops = twin.per_tensor if twin else set(), set()
        self.fallback, self.force_host = fallback, dict(force_host or {})
        self.sources: list[SourceOp] = []
        model, _ = fix_onnx_inputs(model, input_shapes, name)   # free input dims given or refused, never guessed
        # after the dims are fixed: folding needs static shapes. origin: node index in the
        # file, found again by the node's outputs after folding
        model, self.origin = fold_onnx(model, name)
        if qdq_origins:      # numbered as the QDQ file's nodes, as the user reads them (compiler.source_index)
            self.origin = {outs: (qdq_origins[i], qdq_types[qdq_origins[i]]) if qdq_origins[i] >= 0 else (i, op)
                           for outs, (i, op) in self.origin.items()}
        masks = finite_attention_masks(model, self.origin)      # a masked key's sentinel as a value grids hold
        try:
            self.model = infer_shapes(model, strict_mode=True)
        except Exception as exc:  # onnx raises its own InferenceError types
            if not free_body_shapes(model, name, str(exc)):
                raise ONNXImportError(f"{name}: ONNX shape inference failed: {exc}") from exc
            try:
                self.model = infer_shapes(model, strict_mode=True)
            except Exception as again:  # noqa: BLE001 - as above
                raise ONNXImportError(f"{name}: ONNX shape inference failed: {again}") from again
        self.g = Graph(name)
        if masks:
            self.g.metadata[ATTENTION_MASKS] = masks
        self.nhwc_io = nhwc_io
        self.consts: dict[str, np.ndarray] = {
            i.name: numpy_helper.to_array(i) for i in self.model.graph.initializer}
        self.shapes: dict[str, tuple[tuple[int, ...], str]] = {}
        for vi in list(self.model.graph.value_info) + list(self.model.graph.input) + list(self.model.graph.output):
            tt = vi.type.tensor_type
            if tt.HasField("shape"):
                dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
                self.shapes[vi.name] = (dims, _onnx_dtype(tt.elem_type))
        self.dynamic: set[str] = set()     # tensors whose shape depends on the data (compiler.onnx_host)
        self.narrowed: set[str] = set()    # int64 ids the chip takes as int32 (compiler.integer_inputs)
        self.per_run = per_run_values(self.model.graph)    # on a DynamicQuantizeLinear's grid (compiler.dynamic_quant)
        self.data_dependent = data_dependent(self.model.graph, self.shapes, self.consts)   # by rule (dynamic_shapes)
        self.dynamic_outputs: dict[str, dict[str, Any]] = {}    # model outputs a host call makes per run
        self.integral: set[str] = set()    # what host calls give that is not a real number (indices, bools)
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

    def new_tensor(self, onnx_name: str, nhwc: bool, where: str, shape: tuple[int, ...] | None = None,
                   dtype: str = "float32") -> str:
        shape = shape if shape is not None else self.onnx_shape(onnx_name, where)
        if nhwc:
            shape = tuple(shape[p] for p in TO_NHWC)
        name = self.g.unique_name(onnx_name)
        self.g.add_tensor(Tensor(name, shape, dtype))
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
        narrowed = self.narrowed = narrowed_index_inputs(graph.node, [vi.name for vi in graph.input],
                                                         [vi.name for vi in graph.output])
        for vi in graph.input:
            if vi.name in init_names:
                continue
            shape, dtype = self.shapes[vi.name]
            if dtype not in ("float32", *INTEGER_INPUTS):
                raise ONNXImportError(f"input {vi.name!r}: inputs are float32 or {', '.join(INTEGER_INPUTS)}, "
                                     f"not {dtype}")
            if dtype == "int64" and vi.name in narrowed:
                dtype = "int32"
            if dtype != "float32":     # taken as it is, never quantized (libnpu.compiler.integer_inputs)
                self.new_tensor(vi.name, False, "input", shape, dtype)
            elif len(shape) == 4 and self.nhwc_io:
                self.new_tensor(vi.name, True, "input")
            else:
                self.new_tensor(vi.name, False, "input")
            self.g.inputs.append(self.env[vi.name][0])
        seen: dict[int, SourceOp] = {}
        nodes = list(graph.node)
        self.readers: dict[str, set[int]] = {}
        for k, node in enumerate(nodes):
            for n in reads(node):
                self.readers.setdefault(n, set()).add(k)
        origin = [self.origin.get(tuple(node.output), (len(self.origin) + k, node.op_type))
                  for k, node in enumerate(nodes)]
        index = [idx for idx, _ in origin]
        # the CPU nodes placement chose, grouped: one host call per group (compiler.host_groups)
        groups = group_host_ops([(reads(n), list(n.output)) for n in nodes],
                                {k for k in range(len(nodes)) if self.fallback and index[k] in self.force_host})
        pending: list[tuple[int, Any, SourceOp]] = []
        for k in groups.order:
            node, idx = nodes[k], index[k]
            if idx not in seen:      # the nodes of an inlined If are that If's
                seen[idx] = SourceOp(idx, origin[k][1])
                self.sources.append(seen[idx])
            source = seen[idx]
            where = f"{node.op_type} node {idx} ({node.name or node.output[0]!r})"
            if k in groups.group:
                if pending and groups.group[pending[-1][0]] != groups.group[k]:
                    self.host_nodes(pending)
                source.reason = self.force_host[idx]
                pending.append((k, node, source))
                continue
            self.host_nodes(pending)
            before = len(self.g.ops)
            try:
                self.import_node(node, where)
            except IRError as exc:
                if not self.fallback:
                    raise
                del self.g.ops[before:]
                for o in node.output:
                    self.env.pop(o, None)
                source.reason = _reason(exc, where)
                self.host_nodes([(k, node, source)])
            source.ir_ops += self.g.ops[before:]
            if len(node.input) > 1 and node.input[1] in self.qdq_per_tensor:
                self.per_tensor_ops.update(op.name for op in self.g.ops[before:])
        self.host_nodes(pending)
        for vi in graph.output:
            if vi.name not in self.env and vi.name in self.consts:
                self.host_constant_output(vi.name, seen)
        # nodes folded into constants at import time run nowhere
        self.sources += [SourceOp(i, op) for i, op in dict(self.origin.values()).items() if i not in seen]
        self.sources.sort(key=lambda src: src.index)
        record_sources(self.g, self.sources)
        for vi in graph.output:
            if vi.name not in self.env:
                raise ONNXImportError(f"graph output {vi.name!r} is not computed by any node")
            name = self.value(vi.name, None if self.nhwc_io else False, "output")
            self.g.outputs.append(name)
            if name != vi.name:     # --state names the model's outputs (Graph.make_stateful)
                self.g.metadata.setdefault(SOURCE_OUTPUT_NAMES, {})[vi.name] = name
        if self.dynamic_outputs:        # their shape decided per run (compiler.dynamic_shapes)
            self.g.metadata[DYNAMIC_OUTPUTS] = {self.env[n][0]: e for n, e in self.dynamic_outputs.items()}
        self.g.metadata["source"] = "onnx"
        self.g.metadata["layout"] = "NHWC" if self.nhwc_io else "as ONNX (NCHW)"
        if self.qdq_ranges:         # the grids the quantizer keeps (compiler.qdq_import)
            self.g.metadata[QDQ_RANGES] = along_moves(
                self.g.ops, {self.env[n][0]: r for n, r in self.qdq_ranges.items() if n in self.env})
            self.g.metadata[QDQ_PER_TENSOR] = sorted(self.per_tensor_ops)
        self.g.prune()
        self.g.validate()
        self.g.check_runnable()
        return self.g


    def import_node(self, node, where: str) -> None:
        dynamic = [n for n in reads(node) if n in self.dynamic]
        if dynamic:
            raise ONNXImportError(f"{where}: the shape of input {dynamic[0]!r} depends on the data")
        per_run = [n for n in reads(node) if n in self.per_run]
        if per_run:
            raise ONNXImportError(f"{where}: input {per_run[0]!r} is on a grid DynamicQuantizeLinear chooses on each "
                                  "run; the chip's grids are fixed at calibration")
        integral = [n for n in reads(node) if n in self.integral]
        if integral:
            dtype = self.g.tensors[self.env[integral[0]][0]].dtype
            raise ONNXImportError(f"{where}: input {integral[0]!r} is {dtype}, made on the CPU; the chip takes "
                                  "real numbers")
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.domain not in ("", "ai.onnx"):     # never ONNX's handler for another domain's namesake
            raise ONNXImportError(not_lowered_reason(node))
        handler = _GLUE.get(node.op_type) or registry.onnx_handler(node.op_type)
        if handler is None:
            raise ONNXImportError(f"unsupported op {where}")
        refuse_integer_operands(node.op_type, [self.g.tensors[self.env[n][0]] if n in self.env else None
                                               for n in node.input], where)
        handler(self, node, attrs, where)

    def host_nodes(self, group: list[tuple[int, Any, SourceOp]]) -> None:
        """One HOST op running ``group`` (its position, node and source each; emptied) on the
        host: an ONNX model of those nodes (:mod:`compiler.onnx_host`), in the ONNX layout."""
        if not group:
            return
        members = {k for k, _, _ in group}
        nodes = [node for _, node, _ in group]
        sources = [source for _, _, source in group]
        ops = "+".join(n.op_type for n in nodes)
        where = f"{ops} node {sources[0].index} ({nodes[0].name or nodes[0].output[0]!r})"
        made = [o for node in nodes for o in node.output if o]
        read = list(dict.fromkeys(n for node in nodes for n in reads(node) if n not in made))
        finals = {vi.name for vi in self.model.graph.output}
        outs = [o for o in made if o in finals or self.readers.get(o, set()) - members] or made
        ins = [self.value(n, False, where) for n in read if n not in self.consts]
        in_types = {n: (self.g.tensors[i].shape, self.g.tensors[i].dtype)
                    for n, i in zip([n for n in read if n not in self.consts], ins)}
        out_types = self.tensor_types(outs, where)
        self.leave_dynamic([o for o in outs if o in self.dynamic], finals, members, out_types, where)
        ir_outs = [self.new_tensor(o, False, where, *out_types[o]) for o in outs]
        self.integral.update(o for o in outs if out_types[o][1] not in ("float32", "float16"))
        signatures = {o: (tuple(self.dynamic_outputs[o]["signature"]), t[1]) if o in self.dynamic_outputs else t
                      for o, t in out_types.items()}
        model = group_model(nodes, in_types, signatures, {n: self.consts[n] for n in read if n in self.consts},
                            self.model, f"host_{sources[0].index}")
        call = HostCall("onnx", model, ops, sources[0].index,
                        "; ".join(dict.fromkeys(s.reason for s in sources)))
        host = self.g.add_op(Op("HOST", ins, ir_outs, {"host": call}, name=outs[0]))
        for source in sources:
            source.ir_ops = [host]
        group.clear()

    def host_constant_output(self, name: str, seen: dict[int, SourceOp]) -> None:
        """A model output folded to a constant at import (a length from shape arithmetic,
        as NeMo's ``signal_len``): an Identity on the host gives it, in its dtype, every run."""
        folded = self.g.unique_name(f"{name}__folded")
        self.consts[folded] = self.consts.pop(name)
        fresh = len(self.origin) + len(self.model.graph.node)       # an initializer given as an output
        idx, op = next((v for outs, v in self.origin.items() if name in outs), (fresh, "Constant"))
        if idx not in seen:
            seen[idx] = SourceOp(idx, op)
            self.sources.append(seen[idx])
        seen[idx].reason = "a model output folded to a constant: given by the host"
        node = onnx.helper.make_node("Identity", [folded], [name], name=f"{name}__constant")
        self.host_nodes([(-1, node, seen[idx])])

    def tensor_types(self, names: list[str], where: str) -> dict[str, TensorType]:
        """Shape and dtype of each of ``names`` (ONNX layout): by shape inference, else by
        running the model (:func:`compiler.onnx_host.probe_shapes`)."""
        known = {n: self.shapes[n] for n in names if n in self.shapes and all(d >= 0 for d in self.shapes[n][0])}
        missing = [n for n in names if n not in known]
        if missing:
            # the same runs size what inference left unknown after them (a Loop's frames and the
            # convolutions reading them): static if these are, so their nodes import for the chip
            later = [n for n, (dims, _) in self.shapes.items() if any(d < 0 for d in dims)
                     and n not in missing and n not in self.env and n not in self.data_dependent]
            probed, dynamic = probe_shapes(self.model, missing + later, where)
            known.update({n: probed[n] for n in missing})
            self.dynamic |= {n for n in dynamic if n in missing} | {n for n in missing if n in self.data_dependent}
            sized = [n for n in missing if n not in self.dynamic]
            sized += [n for n in later if n not in dynamic] if len(sized) == len(missing) else []
            self.shapes.update({n: probed[n] for n in sized})
        return {n: known[n] for n in names}

    def leave_dynamic(self, names: list[str], finals: set[str], members: set[int],
                      types: dict[str, TensorType], where: str) -> None:
        """Tensors of data-dependent shape leaving a host call: model outputs made per run
        (:mod:`compiler.dynamic_shapes`); once placed, any other reader is refused."""
        for n in names:
            if n not in finals or (self.readers.get(n, set()) - members and self.force_host):
                if self.force_host:     # placed already: its readers are in this host call or none is
                    raise ONNXImportError(f"{where}: the shape of {n!r} depends on the input data, and another "
                                          "host call reads it; only a model output may leave a host call with "
                                          "a shape decided per run: cut the model after this node")
                continue
            inferred = self.shapes[n][0] if n in self.shapes else None
            self.dynamic_outputs[n] = dynamic_output_entry(inferred, types[n][0], self.data_dependent.get(n))


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
