"""A model output a host call makes is written by that call in float, not dequantized by a chip job after it.

The quantizer keeps float outputs as DEQUANTIZE ops of int8 tensors (compiler.quantizer,
``io_dtype="float32"``), and the accuracy search judges those int8 tensors. When a host
call makes such a tensor and nothing on the chip reads it (a decoder step's TopK on its
log-probabilities, as a beam search exports it), the DEQUANTIZE after it would be a chip
job of its own, run after the host call only to turn its int8 values to float. The host
computes in float, so at lowering the call writes the float output itself: one job less,
and the output's values the host's own, no longer rounded to the int8 grid.
"""
from __future__ import annotations

from .ir import Graph

__all__ = ["host_only_values", "host_writes_float_outputs"]


def host_only_values(graph: Graph) -> set[str]:
    """The float values of ``graph`` a HOST op makes and only HOST ops read (not an output,
    not a state): they go from one host call to another in float, on no grid. On an int8
    grid calibration fixed, a per-run scale one call passes to the next (onnxruntime's
    dynamic quantization of an attention's ``P @ V``) clipped to the largest it saw, and an
    attention mask calibration saw at 0 only became 0 everywhere."""
    readers: dict[str, list[str]] = {}
    for op in graph.ops:
        for name in op.inputs:
            readers.setdefault(name, []).append(op.type)
    kept = {s.input for s in graph.states} | {s.output for s in graph.states} | set(graph.outputs)
    return {out for op in graph.ops if op.type == "HOST" for out in op.outputs
            if out not in kept and graph.tensors[out].dtype in ("float32", "float16")
            and readers.get(out) and all(t == "HOST" for t in readers[out])}


def host_writes_float_outputs(graph: Graph) -> Graph:
    """``graph`` (a copy when something changes) where each output DEQUANTIZE of a tensor
    made by a HOST op and read by nothing else (no chip op, no state, not itself an
    output) is gone: the HOST op writes the output. The HOST op still writes the int8
    tensor too when another host call reads it."""
    readers: dict[str, list] = {}
    for op in graph.ops:
        for name in op.inputs:
            readers.setdefault(name, []).append(op)
    made_by = {out: op for op in graph.ops for out in op.outputs}
    kept = {s.input for s in graph.states} | {s.output for s in graph.states} | set(graph.outputs)
    folds = [op for op in graph.ops
             if op.type == "DEQUANTIZE" and op.outputs[0] in graph.outputs and op.inputs[0] not in kept
             and getattr(made_by.get(op.inputs[0]), "type", None) == "HOST"
             and all(r is op for r in readers[op.inputs[0]])]
    if not folds:
        return graph
    graph = graph.copy()
    for fold in folds:
        source, output = fold.inputs[0], fold.outputs[0]
        host = next(op for op in graph.ops if source in op.outputs)
        host.outputs = [output if o == source else o for o in host.outputs]
        graph.ops = [op for op in graph.ops if not (op.type == "DEQUANTIZE" and op.outputs == [output])]
        del graph.tensors[source]
    return graph
