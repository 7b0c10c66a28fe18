"""Cut a sub-model out of a ``.tflite`` flatbuffer: some of its operators, as they are.

The host runs the operators the chip lacks with LiteRT's own kernels; this module writes
the model LiteRT gets: the chosen operators of subgraph 0 with their builtin code,
version, builtin options and custom options copied from the source file, the tensors
they touch (quantization included) and the constant buffers they read. Its inputs are
the non-constant tensors the operators read and nobody among them writes, its outputs
what they write. The subgraphs control flow runs (IF's branches, WHILE's condition and
body, CALL_ONCE's init, at any depth) come along, renumbered, so LiteRT runs an IF or a
WHILE on the CPU as the source model would.

It uses the object API of the schema module that ships with LiteRT
(``ai_edge_litert.schema_py_generated``), so every options table is copied whole,
whatever the operator.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from .ir import IRError

__all__ = ["CutModel", "cut_tflite", "is_empty_constant"]


@dataclass(frozen=True)
class CutModel:
    """A sub-model and where its inputs and outputs come from in the source model."""
    model: bytes
    inputs: tuple[int, ...]     # source tensor indices, in the sub-model's input order
    outputs: tuple[int, ...]    # source tensor indices, in the sub-model's output order


def cut_tflite(model: bytes, op_indices: Sequence[int], outputs: Sequence[int] | None = None) -> CutModel:
    """The operators ``op_indices`` of subgraph 0 of ``model`` as a model of their own.

    ``outputs``: the source tensors the sub-model returns (default: every tensor its
    operators write). Operators computing their inputs from constants alone come along.
    """
    try:
        src = schema.ModelT.InitFromPackedBuf(bytearray(model), 0)
    except Exception as exc:  # flatbuffers reads lazily: damage is any low-level error
        raise IRError(f"cannot read the TFLite model to cut operators {list(op_indices)}: {exc}") from exc
    if not src.subgraphs or any(not 0 <= i < len(src.subgraphs[0].operators or []) for i in op_indices):
        raise IRError(f"operators {list(op_indices)}: not all in the model's subgraph 0")
    graph = src.subgraphs[0]
    written = {int(t) for op in (graph.operators or []) for t in op.outputs} | \
        {int(t) for t in (graph.inputs if graph.inputs is not None else [])}

    def is_constant(t: int) -> bool:
        buf = src.buffers[graph.tensors[t].buffer] if graph.tensors[t].buffer > 0 else None
        return buf is not None and (buf.data is not None and len(buf.data) > 0 or buf.offset > 1) or \
            is_empty_constant(graph.tensors[t].shape, t in written)

    indices = _with_constant_producers(graph, list(op_indices), is_constant)
    chosen = [graph.operators[i] for i in indices]
    written = [t for op in chosen for t in op.outputs if t >= 0]
    read = [t for op in chosen for t in (op.inputs if op.inputs is not None else []) if t >= 0]

    # A variable tensor (an LSTM's states) stays inside: LiteRT keeps it between calls.
    inputs = list(dict.fromkeys(int(t) for t in read if t not in written and not is_constant(t)
                                and not graph.tensors[t].isVariable))
    requested = [int(t) for i in op_indices for t in graph.operators[i].outputs if t >= 0]
    outs = list(dict.fromkeys(int(t) for t in (outputs if outputs is not None else requested)))
    # intermediates: the tensors an int8 LSTM keeps its gates' quantization in
    inner = [t for op in chosen for t in (op.intermediates if op.intermediates is not None else []) if t >= 0]
    used = list(dict.fromkeys([*inputs, *read, *written, *outs, *inner]))
    new_index = {t: i for i, t in enumerate(used)}

    tables = _Tables(src, model, _called_subgraphs(src, chosen))
    sub = schema.SubGraphT()
    sub.tensors = [tables.tensor(graph.tensors[t], is_constant(t)) for t in used]
    sub.operators = [tables.operator(op, new_index) for op in chosen]
    sub.name = b"host"
    sub.inputs = [new_index[t] for t in inputs]
    sub.outputs = [new_index[t] for t in outs]
    subgraphs = [sub]
    for k in tables.subgraph_index:       # the called subgraphs whole, in their new order
        called = src.subgraphs[k]
        same = {t: t for t in range(len(called.tensors or []))}
        called.tensors = [tables.tensor(t, t.buffer > 0 and _has_data(src.buffers[t.buffer]))
                          for t in (called.tensors or [])]
        called.operators = [tables.operator(op, same) for op in (called.operators or [])]
        subgraphs.append(called)
    cut = schema.ModelT()
    cut.version, cut.operatorCodes, cut.subgraphs, cut.buffers = 3, tables.codes, subgraphs, tables.buffers
    cut.description = b"npu-emu host partition"

    builder = flatbuffers.Builder(1024)
    builder.Finish(cut.Pack(builder), file_identifier=b"TFL3")
    return CutModel(bytes(builder.Output()), tuple(inputs), tuple(outs))


def is_empty_constant(shape, written: bool) -> bool:
    """Whether a tensor of ``shape`` is an empty constant: no element, and neither a graph
    input nor an operator's output (``written``). Its buffer holds no data, so it looks
    like a run-time tensor, but LiteRT allocates it and nobody fills it: TF converters give
    a RESHAPE to a scalar such an int32 ``[0]`` shape (onnx-tf's Squeeze of an IF's condition)."""
    dims = [int(d) for d in shape] if shape is not None else []
    return len(dims) > 0 and 0 in dims and not written


# The options fields naming a subgraph, on the operators that run one.
_SUBGRAPH_FIELDS = ("thenSubgraphIndex", "elseSubgraphIndex", "condSubgraphIndex", "bodySubgraphIndex",
                    "initSubgraphIndex")


def _subgraph_refs(op) -> list[int]:
    options = op.builtinOptions
    return [getattr(options, f) for f in _SUBGRAPH_FIELDS if options is not None and hasattr(options, f)]


def _called_subgraphs(src, ops) -> list[int]:
    """The subgraphs ``ops`` run (IF, WHILE, CALL_ONCE), and the ones those run, in order."""
    found: list[int] = []
    pending = [k for op in ops for k in _subgraph_refs(op)]
    while pending:
        k = pending.pop(0)
        if not 0 < k < len(src.subgraphs):
            raise IRError(f"an operator names subgraph {k}, which the model does not have")
        if k not in found:
            found.append(k)
            pending += [j for op in (src.subgraphs[k].operators or []) for j in _subgraph_refs(op)]
    return found


def _has_data(buffer) -> bool:
    return buffer.data is not None and len(buffer.data) > 0 or buffer.offset > 1


class _Tables:
    """The cut model's operator codes, buffers and subgraph numbers, filled as tensors and
    operators are copied into it."""

    def __init__(self, src, model: bytes, called: list[int]) -> None:
        self.src, self.model = src, model
        self.codes: list = []
        self.code_index: dict[int, int] = {}
        self.buffers = [schema.BufferT()]
        self.subgraph_index = {k: i + 1 for i, k in enumerate(called)}

    def tensor(self, tensor, constant: bool):
        if tensor.buffer > 0 and constant:
            self.buffers.append(_inline_buffer(schema, self.src.buffers[tensor.buffer], self.model))
            tensor.buffer = len(self.buffers) - 1
        else:
            tensor.buffer = 0
        return tensor

    def operator(self, op, new_index: dict[int, int]):
        if op.opcodeIndex not in self.code_index:
            self.code_index[op.opcodeIndex] = len(self.codes)
            self.codes.append(self.src.operatorCodes[op.opcodeIndex])
        op.opcodeIndex = self.code_index[op.opcodeIndex]
        op.inputs = [new_index[t] if t >= 0 else -1 for t in (op.inputs if op.inputs is not None else [])]
        op.outputs = [new_index[t] for t in op.outputs]
        op.intermediates = [new_index[t] for t in op.intermediates] if op.intermediates is not None else None
        for f in _SUBGRAPH_FIELDS:
            if op.builtinOptions is not None and hasattr(op.builtinOptions, f):
                setattr(op.builtinOptions, f, self.subgraph_index[getattr(op.builtinOptions, f)])
        return op


def _with_constant_producers(graph, indices: list[int], is_constant) -> list[int]:
    """``indices`` plus the operators computing their inputs from constants alone (fp16
    weights behind DEQUANTIZE, sparse weights made dense), so that a kernel needing
    constant weights (e.g. a custom transposed convolution) gets them as the source had."""
    producer = {t: k for k, op in enumerate(graph.operators) for t in op.outputs}
    constant_result: dict[int, bool] = {}

    def computable(t: int) -> bool:      # a constant, or computed from constants only
        if t < 0 or is_constant(t):
            return True
        if t not in constant_result:
            constant_result[t] = False   # (no cycles in a TFLite graph; guards anyway)
            k = producer.get(t)
            inputs = graph.operators[k].inputs if k is not None else None
            constant_result[t] = k is not None and inputs is not None and len(inputs) > 0 and \
                all(computable(int(i)) for i in inputs)
        return constant_result[t]

    wanted = set(indices)
    pending = list(indices)
    while pending:
        op = graph.operators[pending.pop()]
        for t in (op.inputs if op.inputs is not None else []):
            k = producer.get(int(t))
            if k is not None and k not in wanted and not is_constant(int(t)) and computable(int(t)):
                wanted.add(k)
                pending.append(k)
    return sorted(wanted)


def _inline_buffer(schema, buffer, model: bytes):
    """The buffer with its data inline (large-model files keep it after the flatbuffer)."""
    out = schema.BufferT()
    if buffer.offset > 1:
        out.data = np.frombuffer(model, np.uint8, buffer.size, buffer.offset).copy()
    else:
        out.data = np.asarray(buffer.data, np.uint8)
    return out
