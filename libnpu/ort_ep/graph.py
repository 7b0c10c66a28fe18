"""ORT's graph as an ONNX model: what the EP reads through ORT's function tables.

:class:`OrtTables` wraps the ``OrtApi`` / ``OrtEpApi`` tables ORT hands the library (status
checks, strings, tensors). :func:`read_graph` reads an ``OrtGraph`` (nodes, attributes,
value types, constant initializers) into a :class:`GraphView`; :func:`to_onnx` writes nodes
of it as an ONNX model, :func:`twin_model` the float twin of a QDQ graph
(:mod:`libnpu.compiler.qdq_import`) that the placement reads; :func:`range_dataset` /
:func:`file_dataset` are calibration feeds; :func:`run_order` orders nodes so that each run
of chip nodes can be one fused node.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from libnpu.compiler.qdq_import import Dequantized, clamped_name, range_feeds, twin_nodes

from .ort_c import (
    ATTR_FLOAT,
    ATTR_FLOATS,
    ATTR_INT,
    ATTR_INTS,
    ATTR_STRING,
    ATTR_STRINGS,
    ATTR_TENSOR,
    ELEMENT_TYPES,
    ORT_API_VERSION,
)

__all__ = ["OrtTables", "OrtCallError", "GraphNode", "GraphView", "read_graph", "to_onnx", "twin_model",
           "range_dataset", "file_dataset", "run_order"]


class OrtCallError(RuntimeError):
    """An ORT API call returned an error status."""


class OrtTables:
    """ORT's function tables, with the checks and conversions every caller needs."""

    def __init__(self, ffi: Any, api_base: Any) -> None:
        self.ffi = ffi
        self.api = api_base.GetApi(ORT_API_VERSION)
        if self.api == ffi.NULL:
            raise OrtCallError(f"ONNX Runtime {ffi.string(api_base.GetVersionString()).decode()} does not offer "
                               f"API version {ORT_API_VERSION} (onnxruntime >= 1.{ORT_API_VERSION} needed)")
        self.ep_api = self.api.GetEpApi()

    def status(self, code: int, message: str) -> Any:
        return self.api.CreateStatus(code, self.ffi.new("char[]", message.encode(errors="replace")))

    def check(self, status: Any) -> None:
        if status != self.ffi.NULL:
            message = self.ffi.string(self.api.GetErrorMessage(status)).decode(errors="replace")
            self.api.ReleaseStatus(status)
            raise OrtCallError(message)

    def text(self, function: Any, obj: Any) -> str:
        out = self.ffi.new("const char**")
        self.check(function(obj, out))
        return self.ffi.string(out[0]).decode() if out[0] != self.ffi.NULL else ""

    def listed(self, count_function: Any, list_function: Any, obj: Any, ctype: str) -> list[Any]:
        count = self.ffi.new("size_t*")
        self.check(count_function(obj, count))
        if count[0] == 0:
            return []
        items = self.ffi.new(f"{ctype}[]", count[0])
        self.check(list_function(obj, items, count[0]))
        return list(items)

    def shape_info(self, info: Any) -> tuple[int, list[int]]:
        """(ONNX element type, dims with -1 for a free one) of a tensor's type-and-shape info."""
        ffi, api = self.ffi, self.api
        elem, rank = ffi.new("int*"), ffi.new("size_t*")
        self.check(api.GetTensorElementType(info, elem))
        self.check(api.GetDimensionsCount(info, rank))
        dims = ffi.new("int64_t[]", max(rank[0], 1))
        self.check(api.GetDimensions(info, dims, rank[0]))
        return int(elem[0]), [int(dims[i]) for i in range(rank[0])]

    def value_type(self, value_info: Any) -> tuple[int, list[int]] | None:
        type_info = self.ffi.new("const OrtTypeInfo**")
        self.check(self.api.GetValueInfoTypeInfo(value_info, type_info))
        if type_info[0] == self.ffi.NULL:
            return None
        tensor = self.ffi.new("const OrtTensorTypeAndShapeInfo**")
        self.check(self.api.CastTypeInfoToTensorInfo(type_info[0], tensor))
        return None if tensor[0] == self.ffi.NULL else self.shape_info(tensor[0])

    def array(self, value: Any) -> np.ndarray:
        """A copy of a tensor OrtValue's data."""
        ffi, api = self.ffi, self.api
        info = ffi.new("OrtTensorTypeAndShapeInfo**")
        self.check(api.GetTensorTypeAndShape(value, info))
        try:
            elem, dims = self.shape_info(info[0])
        finally:
            api.ReleaseTensorTypeAndShapeInfo(info[0])
        if elem not in ELEMENT_TYPES:
            raise OrtCallError(f"a tensor of ONNX element type {elem}, which the NPU does not carry")
        size, data = ffi.new("size_t*"), ffi.new("const void**")
        self.check(api.GetTensorSizeInBytes(value, size))
        self.check(api.GetTensorData(value, data))
        raw = bytes(ffi.buffer(data[0], size[0])) if size[0] else b""
        return np.frombuffer(raw, ELEMENT_TYPES[elem]).reshape(dims)

    def log(self, logger: Any, level: int, message: str) -> None:
        if logger == self.ffi.NULL:
            return
        status = self.api.Logger_LogMessage(logger, level, self.ffi.new("char[]", message.encode(errors="replace")),
                                            self.ffi.new("char[]", __file__.encode()), 0,
                                            self.ffi.new("char[]", b"npu-ort-ep"))
        if status != self.ffi.NULL:
            self.api.ReleaseStatus(status)


@dataclass
class GraphNode:
    """One ORT node, as an ONNX NodeProto needs it."""
    handle: Any
    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attributes: list[onnx.AttributeProto]
    unreadable: str = ""                   # why it cannot be rebuilt ("" when it can)


@dataclass
class GraphView:
    """What the EP read of one OrtGraph."""
    name: str
    nodes: list[GraphNode]
    types: dict[str, tuple[int, list[int]]]
    constants: dict[str, np.ndarray]
    inputs: list[str]
    outputs: list[str]
    opsets: dict[str, int]


def _attribute(ort: OrtTables, attr: Any) -> onnx.AttributeProto | str:
    """The ONNX attribute of an OrtOpAttr, or why it cannot be read."""
    ffi, api = ort.ffi, ort.api
    name = ort.text(api.OpAttr_GetName, attr)
    kind = ffi.new("int*")
    ort.check(api.OpAttr_GetType(attr, kind))
    size = ffi.new("size_t*")
    if kind[0] == ATTR_INT:
        number = ffi.new("int64_t*")
        ort.check(api.ReadOpAttr(attr, kind[0], number, ffi.sizeof("int64_t"), size))
        return helper.make_attribute(name, int(number[0]))
    if kind[0] == ATTR_FLOAT:
        real = ffi.new("float*")
        ort.check(api.ReadOpAttr(attr, kind[0], real, ffi.sizeof("float"), size))
        return helper.make_attribute(name, float(real[0]))
    if kind[0] == ATTR_TENSOR:
        value = ffi.new("OrtValue**")
        ort.check(api.OpAttr_GetTensorAttributeAsOrtValue(attr, value))
        try:
            return helper.make_attribute(name, numpy_helper.from_array(ort.array(value[0]), name))
        finally:
            api.ReleaseValue(value[0])
    if kind[0] in (ATTR_INTS, ATTR_FLOATS, ATTR_STRING, ATTR_STRINGS):
        # first the size (an error status that reports it), then the data
        status = api.ReadOpAttr(attr, kind[0], ffi.NULL, 0, size)
        if status != ffi.NULL:
            api.ReleaseStatus(status)
        buffer = ffi.new("char[]", max(size[0], 1))
        ort.check(api.ReadOpAttr(attr, kind[0], buffer, size[0], size))
        raw = bytes(ffi.buffer(buffer, size[0]))
        if kind[0] == ATTR_INTS:
            return helper.make_attribute(name, [int(v) for v in np.frombuffer(raw, np.int64)])
        if kind[0] == ATTR_FLOATS:
            return helper.make_attribute(name, [float(v) for v in np.frombuffer(raw, np.float32)])
        if kind[0] == ATTR_STRING:
            return helper.make_attribute(name, raw.rstrip(b"\0").decode())
        return helper.make_attribute(name, [s.decode() for s in raw.split(b"\0")[:-1]])
    return f"attribute {name!r} is a subgraph or of a type the EP does not read"


def read_graph(ort: OrtTables, graph: Any) -> GraphView:
    """Nodes, value types and constant initializers of ``graph``, as ONNX names them."""
    ffi, api = ort.ffi, ort.api
    types: dict[str, tuple[int, list[int]]] = {}
    constants: dict[str, np.ndarray] = {}
    unreadable: dict[str, str] = {}

    def names(value_infos: list[Any]) -> list[str]:
        out = []
        for vi in value_infos:
            if vi == ffi.NULL:
                out.append("")           # an optional input left out
                continue
            name = ort.text(api.GetValueInfoName, vi)
            out.append(name)
            if name not in types and (found := ort.value_type(vi)) is not None:
                types[name] = found
            constant = ffi.new("bool*")
            ort.check(api.ValueInfo_IsConstantInitializer(vi, constant))
            if constant[0] and name not in constants and name not in unreadable:
                value = ffi.new("const OrtValue**")
                ort.check(api.ValueInfo_GetInitializerValue(vi, value))
                try:
                    constants[name] = ort.array(value[0])
                except OrtCallError as exc:      # e.g. a string tensor: its node stays with ORT
                    unreadable[name] = f"constant {name!r}: {exc}"
        return out

    nodes = []
    for handle in ort.listed(api.Graph_GetNumNodes, api.Graph_GetNodes, graph, "const OrtNode*"):
        node = GraphNode(handle, ort.text(api.Node_GetName, handle), ort.text(api.Node_GetOperatorType, handle),
                         ort.text(api.Node_GetDomain, handle),
                         names(ort.listed(api.Node_GetNumInputs, api.Node_GetInputs, handle, "const OrtValueInfo*")),
                         names(ort.listed(api.Node_GetNumOutputs, api.Node_GetOutputs, handle,
                                          "const OrtValueInfo*")), [])
        subgraphs = ffi.new("size_t*")
        ort.check(api.Node_GetNumSubgraphs(handle, subgraphs))
        for attr in ort.listed(api.Node_GetNumAttributes, api.Node_GetAttributes, handle, "const OrtOpAttr*"):
            made = _attribute(ort, attr)
            if isinstance(made, str):
                node.unreadable = made
            else:
                node.attributes.append(made)
        if subgraphs[0]:
            node.unreadable = "a node with subgraphs (If, Loop, Scan)"
        node.unreadable = node.unreadable or next((unreadable[v] for v in node.inputs if v in unreadable), "")
        nodes.append(node)
    inputs = [n for n in names(ort.listed(api.Graph_GetNumInputs, api.Graph_GetInputs, graph, "const OrtValueInfo*"))
              if n and n not in constants]
    outputs = names(ort.listed(api.Graph_GetNumOutputs, api.Graph_GetOutputs, graph, "const OrtValueInfo*"))
    count = ffi.new("size_t*")
    ort.check(api.Graph_GetNumOperatorSets(graph, count))
    domains, versions = ffi.new("const char*[]", max(count[0], 1)), ffi.new("int64_t[]", max(count[0], 1))
    ort.check(api.Graph_GetOperatorSets(graph, domains, versions, count[0]))
    opsets = {ffi.string(domains[i]).decode(): int(versions[i]) for i in range(count[0])}
    return GraphView(ort.text(api.Graph_GetName, graph) or "graph", nodes, types, constants, inputs, outputs, opsets)


def _value_info(name: str, types: dict[str, tuple[int, list[int]]]) -> onnx.ValueInfoProto:
    elem, dims = types.get(name, (1, []))
    shape = [d if d >= 0 else f"free_{i}" for i, d in enumerate(dims)] if name in types else None
    return helper.make_tensor_value_info(name, elem, shape)


def to_onnx(view: GraphView, nodes: list[GraphNode], inputs: list[str], outputs: list[str], name: str) -> bytes:
    """An ONNX model of ``nodes`` (in order) with those graph inputs and outputs."""
    used = {i for n in nodes for i in n.inputs if i}
    made = helper.make_graph(
        [helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name or None, domain=n.domain or None)
         for n in nodes],
        name, [_value_info(i, view.types) for i in inputs], [_value_info(o, view.types) for o in outputs],
        initializer=[numpy_helper.from_array(view.constants[c], c) for c in sorted(used & set(view.constants))],
        value_info=[_value_info(v, view.types) for n in nodes for v in n.outputs
                    if v and v in view.types and v not in outputs])
    for proto, node in zip(made.node, nodes):
        proto.attribute.extend(node.attributes)
    opsets = [helper.make_opsetid(d, v) for d, v in view.opsets.items()
              if d in ("", "ai.onnx") or any(n.domain == d for n in nodes)]
    model = helper.make_model(made, opset_imports=opsets, producer_name="npu-ort-ep")
    model.ir_version = min(model.ir_version, 10)
    return model.SerializeToString()


def twin_model(view: GraphView, twin: Dequantized, inputs: list[str], outputs: list[str],
               name: str) -> tuple[bytes, list[int]]:
    """The float twin of ``view`` (:mod:`libnpu.compiler.qdq_import`) as an ONNX model with those
    (QDQ graph's) inputs and outputs, and the index in ``view`` of each of its nodes (-1: a
    Relu for a clamp)."""
    made = twin_nodes(view.nodes, twin)
    nodes = [GraphNode(None, t.outputs[0], t.op_type, "", t.inputs, t.outputs, []) if t.origin < 0 else
             GraphNode(view.nodes[t.origin].handle, view.nodes[t.origin].name, t.op_type, view.nodes[t.origin].domain,
                       t.inputs, t.outputs, view.nodes[t.origin].attributes) for t in made]
    types = dict(view.types)
    types.update({clamped_name(v): view.types[v] for v in twin.clamped if v in view.types})
    merged = GraphView(view.name, nodes, types, {**view.constants, **twin.constants}, [], [], view.opsets)
    model = to_onnx(merged, nodes, list(dict.fromkeys(twin.name(i) for i in inputs)),
                    list(dict.fromkeys(twin.name(o) for o in outputs)), name)
    return model, [t.origin for t in made]


def range_dataset(view: GraphView, twin: Dequantized, inputs: list[str], count: int = 16) -> list[dict]:
    """Calibration feeds spanning each input's QuantizeLinear range ([-1, 1] for an input without one)."""
    names = dict.fromkeys(twin.name(i) for i in inputs)
    return range_feeds({n: ([d if d > 0 else 1 for d in view.types.get(n, (1, []))[1]],
                            ELEMENT_TYPES.get(view.types.get(n, (1, []))[0], "float32")) for n in names},
                       twin.ranges, count)


def run_order(view: GraphView) -> list[int]:
    """A topological order of ``view``'s nodes with each node fed by constants alone (a weight's
    DequantizeLinear) right before its first consumer, so it joins that consumer's run."""
    producer = {v: i for i, n in enumerate(view.nodes) for v in n.outputs}
    constant_fed = {i for i, n in enumerate(view.nodes) if all(not v or v in view.constants for v in n.inputs)}
    order: list[int] = []
    placed: set[int] = set()
    for i, node in enumerate(view.nodes):
        if i in constant_fed:
            continue
        for v in node.inputs:
            p = producer.get(v)
            if p in constant_fed and p not in placed:
                order.append(p)
                placed.add(p)
        order.append(i)
    return order + [i for i in sorted(constant_fed) if i not in placed]


def file_dataset(path: str, view: GraphView, names: list[str]) -> list[dict]:
    """Calibration feeds from a .npy file (samples on the first axis) for a one-input model
    whose input is ``names`` (its name in ``view``)."""
    if len(names) != 1:
        raise ValueError(f"npu ort-ep: option calibration: a .npy file feeds a one-input subgraph, "
                         f"this one has {len(names)} inputs")
    dims = [d if d > 0 else 1 for d in view.types.get(names[0], (1, []))[1]]
    data = np.load(Path(path), allow_pickle=False).astype(np.float32)
    samples = data.reshape((-1, *dims)) if data.size % max(int(np.prod(dims)), 1) == 0 else None
    if samples is None:
        raise ValueError(f"npu ort-ep: option calibration: {path} holds {data.shape}, not samples of {tuple(dims)}")
    return [{names[0]: s} for s in samples]
