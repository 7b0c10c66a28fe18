"""Join .tflite models that feed one another into one model: a float host call of several parts.

A front end kept in float on the CPU (:mod:`libnpu.compiler.cpu_float`) may hold a host
call already: the RFFT2D -> COMPLEX_ABS of a spectrogram, cut from the source model
(:mod:`libnpu.compiler.complex_tensors`), between the framing before it and the log after
it. Its ops are LiteRT's and have no IR op, so the exporter (:mod:`~libnpu.compiler.tflite_export`)
cannot write them; split in three host calls, the tensors between would be quantized
where the chip would read them, which is the error the front end moved to escape.
:func:`merge_tflite` appends the parts' subgraphs into one (their tensors renumbered, each
part's inputs bound to the tensors earlier parts write, by name), with their buffers and
operator codes, so one LiteRT call runs them all in float.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import flatbuffers
import tflite
from ai_edge_litert import schema_py_generated as schema

from .ir import IRError

__all__ = ["Part", "joinable", "merge_tflite"]


class Part(NamedTuple):
    """One model to join and the names its inputs and outputs (in its own order) have."""
    model: bytes
    inputs: Sequence[str]
    outputs: Sequence[str]


def joinable(model: bytes) -> bool:
    """Whether :func:`merge_tflite` can join ``model``: one subgraph (no control flow)."""
    return tflite.Model.GetRootAsModel(model, 0).SubgraphsLength() == 1


def merge_tflite(parts: Sequence[Part], inputs: Sequence[str], outputs: Sequence[str]) -> bytes:
    """One model running ``parts`` in order: ``inputs`` (names some part reads and no earlier
    part writes) are its inputs and ``outputs`` (names parts write) its outputs. A part with
    control flow (subgraphs besides its first) is refused."""
    merged = schema.ModelT()
    merged.version, merged.operatorCodes, merged.buffers = 3, [], [schema.BufferT()]
    sub = schema.SubGraphT()
    sub.tensors, sub.operators, sub.name = [], [], b"host"
    named: dict[str, int] = {}
    codes: dict[tuple, int] = {}
    for k, part in enumerate(parts):
        model = schema.ModelT.InitFromPackedBuf(bytearray(part.model), 0)
        if len(model.subgraphs or []) != 1:
            raise IRError(f"part {k} of a host call has {len(model.subgraphs or [])} subgraphs: only one can be joined")
        graph = model.subgraphs[0]
        given = graph.inputs if graph.inputs is not None else []
        made = graph.outputs if graph.outputs is not None else []
        if len(given) != len(part.inputs) or len(made) != len(part.outputs):
            raise IRError(f"part {k} of a host call has {len(given)} inputs and {len(made)} outputs, "
                          f"named {len(part.inputs)} and {len(part.outputs)}")
        bound = {int(t): name for t, name in zip(given, part.inputs)}
        bound.update({int(t): name for t, name in zip(made, part.outputs)})
        index: dict[int, int] = {}
        for j, tensor in enumerate(graph.tensors or []):
            name = bound.get(j)
            if name is not None and name in named:
                index[j] = named[name]          # read from an earlier part, or the model's input
                continue
            if tensor.buffer > 0:
                merged.buffers.append(model.buffers[tensor.buffer])
                tensor.buffer = len(merged.buffers) - 1
            if name is not None:
                tensor.name = name.encode()
                named[name] = len(sub.tensors)
            index[j] = len(sub.tensors)
            sub.tensors.append(tensor)
        for op in graph.operators or []:
            code = model.operatorCodes[op.opcodeIndex]
            key = (code.builtinCode, code.deprecatedBuiltinCode, code.customCode, code.version)
            if key not in codes:
                codes[key] = len(merged.operatorCodes)
                merged.operatorCodes.append(code)
            op.opcodeIndex = codes[key]
            op.inputs = [index[int(t)] if t >= 0 else -1 for t in (op.inputs if op.inputs is not None else [])]
            op.outputs = [index[int(t)] for t in op.outputs]
            if op.intermediates is not None:
                op.intermediates = [index[int(t)] for t in op.intermediates]
            sub.operators.append(op)
    missing = [n for n in (*inputs, *outputs) if n not in named]
    if missing:
        raise IRError(f"a joined host call names {', '.join(map(repr, missing))}, which no part reads or writes")
    sub.inputs, sub.outputs = [named[n] for n in inputs], [named[n] for n in outputs]
    merged.subgraphs = [sub]
    merged.description = b"npu-emu host partition"
    builder = flatbuffers.Builder(1024)
    builder.Finish(merged.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
