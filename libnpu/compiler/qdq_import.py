"""QDQ ONNX models (``QuantizeLinear -> DequantizeLinear`` pairs) as the float twin the
compiler quantizes, with the grids those pairs chose as its calibration.

ORT's quantizer (``quantize_static``, QDQ format) writes an int8 model as a float graph
with ``QuantizeLinear -> DequantizeLinear`` pairs on the activations and a
``DequantizeLinear`` behind each int8 weight. The compiler imports float models and
quantizes them itself, so such a model becomes its float twin (:func:`dequantize`): weight
``DequantizeLinear`` nodes become float constants, each activation's Q -> DQ pair is dropped
(its consumers read the float value), and each pair's grid becomes the range of the value it
carries (:attr:`Dequantized.ranges`), which the quantizer takes as that tensor's grid
instead of recalibrating (:data:`QDQ_RANGES`: a range ``scale * (qmin - zp),
scale * (qmax - zp)`` gives back that scale and zero point); a weight the model quantized
with one scale per tensor keeps one (:data:`QDQ_PER_TENSOR`: the compiler would choose one
per channel), the symmetric int8 scale ``max |w| / 127`` of the dequantized weights being
the model's own. A pair whose range starts at 0
also clamps what it carries (the quantizer drops the Relu it makes redundant): the twin
keeps that clamp as a Relu (:attr:`Dequantized.clamped`). Every node of the QDQ graph maps
to one node of the twin (its compute node) or to the compute nodes its Q/DQ chain connects
(:attr:`Dequantized.neighbours`).

One rule, two users: the ONNX import (:func:`float_twin`, ``npu compile model_qdq.onnx``)
and the ONNX Runtime execution provider (:mod:`libnpu.ort_ep`, which reads ORT's graph and
places the twin's nodes) both build the twin with :func:`dequantize` and :func:`twin_nodes`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import registry
from .ir import IRError

__all__ = ["QDQError", "Dequantized", "FloatTwin", "TwinNode", "dequantize", "twin_nodes", "float_twin", "is_qdq",
           "range_feeds", "along_moves", "float_front_end", "clamped_name", "QDQ_OPS", "QDQ_RANGES", "QDQ_PER_TENSOR"]

Range = tuple[float, float]
# graph metadata keys the quantizer honours: tensor name -> the range its QuantizeLinear
# chose; the ops whose weights the model quantized with one scale per tensor
QDQ_RANGES = "qdq_ranges"
QDQ_PER_TENSOR = "qdq_per_tensor_weights"

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_LIMITS = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int16): (-32768, 32767),
           np.dtype(np.uint16): (0, 65535)}


class QDQError(IRError):
    """A QuantizeLinear / DequantizeLinear node whose grid is no grid (a scale not finite and positive)."""


@dataclass
class Dequantized:
    """The float twin of a QDQ node list (indices refer to the list given)."""
    compute: list[int]                                   # nodes kept, in order
    constants: dict[str, np.ndarray]                     # new float constants (dequantized weights)
    alias: dict[str, str] = field(default_factory=dict)  # a dropped DQ's output -> the float value it stood for
    ranges: dict[str, Range] = field(default_factory=dict)   # float value -> its Q's range
    neighbours: dict[int, set[int]] = field(default_factory=dict)          # dropped node -> compute nodes it serves
    clamped: set[str] = field(default_factory=set)       # float values whose Q -> DQ pair clamps them at 0
    per_tensor: set[str] = field(default_factory=set)    # dequantized weights whose scale was one per tensor

    def name(self, value: str) -> str:
        """The twin's name of a value of the QDQ graph (a clamped value's Relu output, read
        through the pair's DQ)."""
        through_pair = value in self.alias
        while value in self.alias:
            value = self.alias[value]
        return clamped_name(value) if through_pair and value in self.clamped else value


@dataclass
class TwinNode:
    """One node of the twin: ``origin`` is its index in the QDQ node list (-1: a clamp's Relu)."""
    origin: int
    op_type: str
    inputs: list[str]
    outputs: list[str]


def clamped_name(value: str) -> str:
    """The name of a clamped value's Relu output."""
    return f"{value}__relu"


def _per_axis(values: np.ndarray, rank: int, axis: int) -> np.ndarray:
    if values.size <= 1:
        return values.reshape(())
    shape = [1] * rank
    shape[axis % rank] = values.size
    return values.reshape(shape)


def dequantize(nodes: list, constants: dict[str, np.ndarray]) -> Dequantized:
    """The float twin of ``nodes`` (objects with ``op_type``, ``inputs``, ``outputs``,
    ``attributes``), whose constant inputs ``constants`` holds."""
    consumers: dict[str, list[int]] = {}
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            if v:
                consumers.setdefault(v, []).append(i)
        for v in n.outputs:
            producer[v] = i
    out = Dequantized([], {})
    dropped: set[int] = set()

    def axis_of(node) -> int:
        return next((a.i for a in node.attributes if a.name == "axis"), 1)

    def qparams(node) -> tuple[np.ndarray, np.ndarray] | None:
        scale = constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
        zero = constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if scale is None:
            return None
        scale = scale.astype(np.float32)
        if not np.all(np.isfinite(scale) & (scale > 0)):     # it would become a tensor's grid as it is
            raise QDQError(f"{node.op_type} node {node.outputs[0]!r}: scale {scale.ravel()[:4].tolist()} "
                           "is not a finite positive number")
        return scale, (zero if zero is not None else np.zeros((), np.uint8))

    for i, n in enumerate(nodes):
        if n.op_type == "DequantizeLinear" and n.inputs[0] in constants and (q := qparams(n)) is not None:
            data = constants[n.inputs[0]]
            scale, zero = (_per_axis(v, data.ndim, axis_of(n)) for v in q)
            out.constants[n.outputs[0]] = ((data.astype(np.float32) - zero.astype(np.float32)) * scale
                                           ).astype(np.float32)
            if scale.size == 1:
                out.per_tensor.add(n.outputs[0])
            dropped.add(i)
        elif n.op_type == "QuantizeLinear" and (q := qparams(n)) is not None:
            pairs = consumers.get(n.outputs[0], [])
            if not pairs or any(nodes[c].op_type != "DequantizeLinear" for c in pairs):
                continue           # an int8 value leaves the QDQ pattern: the node stays (the CPU runs it)
            scale, zero = q
            low, high = _LIMITS.get(zero.dtype, (-128, 127))
            source = n.inputs[0]
            out.ranges[source] = (float(np.min(scale * (low - zero.astype(np.float32)))),
                                  float(np.max(scale * (high - zero.astype(np.float32)))))
            if out.ranges[source][0] >= 0:
                out.clamped.add(source)
            dropped.add(i)
            for c in pairs:
                dropped.add(c)
                out.alias[nodes[c].outputs[0]] = source
    out.compute = [i for i in range(len(nodes)) if i not in dropped]
    kept = set(out.compute)
    for i in dropped:                   # the compute nodes each dropped node's Q/DQ chain connects
        seen, todo, found = {i}, [i], set()
        while todo:
            k = todo.pop()
            near = [producer[v] for v in nodes[k].inputs if v in producer]
            near += [c for v in nodes[k].outputs for c in consumers.get(v, [])]
            for m in near:
                if m in kept:
                    found.add(m)
                elif m not in seen:
                    seen.add(m)
                    todo.append(m)
        out.neighbours[i] = found
    return out


def twin_nodes(nodes: list, twin: Dequantized) -> list[TwinNode]:
    """The twin's nodes in order: each compute node of ``nodes`` reading the float values,
    and a Relu after each clamped value (a graph input's first)."""
    made: list[TwinNode] = []

    def clamp(value: str) -> None:
        made.append(TwinNode(-1, "Relu", [value], [clamped_name(value)]))
    produced = {v for i in twin.compute for v in nodes[i].outputs}
    for value in sorted(twin.clamped - produced):       # a graph input's clamp
        clamp(value)
    for i in twin.compute:
        n = nodes[i]
        made.append(TwinNode(i, n.op_type, [twin.name(v) if v else "" for v in n.inputs], list(n.outputs)))
        for value in n.outputs:
            if value in twin.clamped:
                clamp(value)
    return made


@dataclass
class _Node:
    """An ONNX NodeProto as :func:`dequantize` reads nodes."""
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attributes: list[onnx.AttributeProto]


def is_qdq(model: onnx.ModelProto) -> bool:
    """Whether ``model``'s graph has QuantizeLinear / DequantizeLinear nodes."""
    return any(n.op_type in QDQ_OPS for n in model.graph.node)


@dataclass
class FloatTwin:
    """A QDQ ONNX model's float twin and what the quantizer keeps of the QDQ model."""
    model: onnx.ModelProto
    ranges: dict[str, Range]     # value (the twin's name) -> the range its Q -> DQ pair carried
    origins: list[int]           # each twin node's index in the QDQ model
    per_tensor: set[str]         # weights (the twin's constants) quantized with one scale


def float_twin(model: onnx.ModelProto) -> FloatTwin:
    """The float twin of a QDQ ONNX model (:class:`FloatTwin`). A clamp's Relu has the index
    of its QuantizeLinear, an output's Identity that of its DequantizeLinear.

    The twin keeps the model's input and output names (an output a DQ gave is an Identity
    of the float value)."""
    graph = model.graph
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    nodes = [_Node(n.op_type, list(n.input), list(n.output), list(n.attribute)) for n in graph.node]
    twin = dequantize(nodes, constants)
    protos: list[onnx.NodeProto] = []
    made = twin_nodes(nodes, twin)
    for t in made:
        proto = onnx.NodeProto()
        if t.origin < 0:
            proto = helper.make_node("Relu", t.inputs, t.outputs, name=t.outputs[0])
        else:
            proto.CopyFrom(graph.node[t.origin])
            del proto.input[:]
            proto.input.extend(t.inputs)
        protos.append(proto)
    quantizer = {n.inputs[0]: i for i, n in enumerate(nodes) if n.op_type == "QuantizeLinear" and n.inputs}
    producer = {v: i for i, n in enumerate(nodes) for v in n.outputs}
    origins = [t.origin if t.origin >= 0 else quantizer.get(t.inputs[0], -1) for t in made]
    ranges = dict(twin.ranges)
    ranges.update({clamped_name(v): twin.ranges[v] for v in twin.clamped})
    for vi in graph.output:
        source = twin.name(vi.name)
        if source != vi.name:
            protos.append(helper.make_node("Identity", [source], [vi.name], name=f"{vi.name}__float"))
            origins.append(producer.get(vi.name, -1))
            if source in ranges:
                ranges[vi.name] = ranges[source]
    used = {v for p in protos for v in p.input}
    made_values = {v for p in protos for v in p.output}
    initializers = [i for i in graph.initializer if i.name in used and i.name not in twin.constants]
    initializers += [numpy_helper.from_array(data, name) for name, data in twin.constants.items() if name in used]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:], out.graph.initializer[:], out.graph.value_info[:]
    out.graph.node.extend(protos)
    out.graph.initializer.extend(initializers)
    out.graph.value_info.extend(vi for vi in graph.value_info if vi.name in made_values)
    return FloatTwin(out, ranges, origins, twin.per_tensor & used)


#: IR ops that move an ONNX value's elements without changing them: the import's own
#: layout steps (a 1-D convolution's [N, C, L] <-> [N, 1, L, C] views, NCHW <-> NHWC).
_MOVES = ("RESHAPE", "TRANSPOSE")


def along_moves(ops: list, ranges: Mapping[str, Range]) -> dict[str, Range]:
    """``ranges`` (IR tensor -> its file's grid) extended to the tensors the import's layout
    moves (``ops``: IR ops, ``type`` / ``inputs`` / ``outputs``) make of a value with a
    grid, or make a value with a grid of: the same numbers, so the same grid.

    Without it a 1-D convolution's own output (``X__2d``, viewed back as the file's ``X``)
    had no grid of the file's: calibration chose one, joined to the file's by the moves'
    shared grid, or alone once the optimizer dropped the moves between two convolutions
    (a conv -> conv chain), where onnxruntime rounds to the file's grid."""
    out = dict(ranges)
    moves = [op for op in ops if op.type in _MOVES and op.inputs and op.outputs]
    changed = True
    while changed:
        changed = False
        for op in moves:
            x, y = op.inputs[0], op.outputs[0]
            if (x in out) != (y in out):
                known = out[x] if x in out else out[y]
                out[y if x in out else x] = known
                changed = True
    return out


def float_front_end(graph: Any, ranges: Mapping[str, Range]) -> list[str]:
    """The outputs of the ops of the imported QDQ ``graph`` (an IR graph) that its file
    computes in float: every op reading only the model's float inputs (those with no
    QuantizeLinear of their own, ``ranges`` the file's grids) and what such ops make with
    no QuantizeLinear on it, in order. The file leaves them in float (ops ``quantize_static``
    does not quantize: an audio model's power spectrum, its ``Pow`` and ``Log``), and
    onnxruntime runs them so; an op of them whose value the file does quantize (the
    ``BatchNormalization`` after a log-mel) ends the chain there. Empty when they only move
    data (a ``Transpose`` before the first pair) or when nothing with weights is left
    outside them (a model whose pairs are on its weights alone)."""
    floats = {n for n in graph.inputs if n not in ranges and graph.tensors[n].dtype == "float32"}
    chain = []
    for op in graph.ops:
        data = [i for i in op.inputs if i and not graph.tensors[i].is_constant]
        if data and all(i in floats for i in data):
            chain.append(op)
            floats.update(o for o in op.outputs if o not in ranges)
    moved = {id(op) for op in chain}
    computes = any(not registry.get(op.type, "same_scale") for op in chain)
    chip_work = any(id(op) not in moved and registry.get(op.type, "weight_axis") is not None for op in graph.ops)
    return [op.outputs[0] for op in chain] if computes and chip_work else []


def range_feeds(inputs: Mapping[str, tuple[Any, Any]], ranges: Mapping[str, Range], count: int = 16,
                seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Calibration feeds for ``inputs`` (name -> (shape, numpy dtype), a free dimension
    -1 or None taken as 1), each spanning its QuantizeLinear range ([-1, 1] without one)."""
    rng = np.random.default_rng(seed)
    feeds: list[dict[str, np.ndarray]] = [{} for _ in range(count)]
    for name, (dims, dtype) in inputs.items():
        low, high = ranges.get(name, (-1.0, 1.0))
        shape = [d if d is not None and d > 0 else 1 for d in dims]
        for feed in feeds:
            feed[name] = rng.uniform(low, high, shape).astype(dtype)
    return feeds
