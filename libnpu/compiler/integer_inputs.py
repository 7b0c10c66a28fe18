"""Integer tensors in a float model: taken as they are, never quantized, run where they can be.

A float model may take integers: token or byte ids into an embedding (magika's int32
bytes), a sample rate (Silero VAD's int64 ``sr``), a mask, 16-bit PCM samples. They keep their own dtype from
the model's input to the ops that consume them: the quantizer leaves every integer or bool
activation as it is (only float activations get an int8 grid), the runtime takes them in
their dtype, and an op consuming one runs on the chip only where the chip reads integers
there (GATHER's int32 run-time indices). Any other op on an integer tensor is refused for
the chip with that reason, so the importer's fallback runs it on the CPU (its host library
takes the integers as they are). An input frozen to a value
(:mod:`libnpu.compiler.frozen_inputs`) is a constant instead, and folds.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .ir import Graph, IRError, Tensor

__all__ = ["INTEGER_INPUTS", "IntegerOperandError", "refuse_integer_operands", "narrowed_index_inputs",
           "integer_activations", "random_integers"]

#: Non-float dtypes a float model's inputs (and host ops' results) may have (int16: PCM
#: samples, as audio exports take them; unquantized, so no int16 activation of the chip's).
INTEGER_INPUTS = ("int16", "int32", "int64", "bool")

#: ONNX op type -> {input position: dtypes the chip's operator reads there as they are}
#: (the Cast and Identity of ids the chip takes narrowed: ``narrowed_index_inputs``; the
#: Cast handler refuses any other of a computed tensor).
_CHIP_READS = {"Gather": {1: ("int32",)}, "Cast": {0: ("int32",)}, "Identity": {0: ("int32",)}}


class IntegerOperandError(IRError):
    """An op the chip would run takes an integer tensor computed at run time."""


def refuse_integer_operands(op_type: str, operands: Sequence[Tensor | None], where: str) -> None:
    """Raise :class:`IntegerOperandError` when ``op_type`` takes a run-time integer or bool
    tensor (``operands``: each input's IR tensor, None for a constant or an absent one)
    where the chip's operator does not read that dtype."""
    allowed = _CHIP_READS.get(op_type, {})
    for position, t in enumerate(operands):
        if t is None or t.is_constant or t.quant is not None or t.dtype not in INTEGER_INPUTS:
            continue        # an int16 with a grid is a quantized activation, not PCM samples
        if t.dtype in allowed.get(position, ()):
            continue
        reads = "; ".join(f"input {p} in {'/'.join(d)}" for p, d in allowed.items())
        raise IntegerOperandError(
            f"{where}: input {t.name!r} is {t.dtype} computed at run time; the chip computes on int8-quantized "
            f"floats{' (it reads ' + reads + ')' if reads else ''}")


def narrowed_index_inputs(nodes: Sequence, inputs: Sequence[str], outputs: Sequence[str]) -> set[str]:
    """The model inputs (of ``inputs``, by name, int64 in the file) the chip takes as int32,
    with the values they pass through unchanged: those that only index (ONNX Gather's input
    1, a token id into an embedding, as PyTorch exports every id in int64), directly or
    through ``Identity`` and ``Cast`` to int32 or int64 (PyTorch's ``.long()``). The
    runtime narrows the caller's int64 ids to int32 and refuses one that does not fit
    (:func:`libnpu.tensors.as_input`), and the chip's GATHER refuses an id outside its
    table, so no id is silently wrapped; a negative id (ONNX's from-the-end indexing) is
    refused too. Without this the lookup ran on the CPU: one host call, and a chip job on
    each side of it, per step."""
    readers: dict[str, list[tuple[object, int]]] = {}
    for node in nodes:
        if any(a.g.node or a.graphs for a in node.attribute):     # an If's or Loop's body may read any of them
            return set()
        for position, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, position))
    narrowed: set[str] = set()
    for name in inputs:
        passed, pending, ok = {name}, [name], True
        while pending and ok:
            value = pending.pop()
            ok = value not in outputs and value in readers
            for node, position in readers.get(value, []):
                if _passes_ids(node):
                    passed.add(node.output[0])
                    pending.append(node.output[0])
                elif not (node.op_type == "Gather" and position == 1):
                    ok = False
        if ok:
            narrowed |= passed
    return narrowed


def _passes_ids(node) -> bool:
    """An ONNX node whose output is its input's integers unchanged (their dtype aside)."""
    if node.op_type == "Identity":
        return True
    to = next((a.i for a in node.attribute if a.name == "to"), None)
    return node.op_type == "Cast" and to in (6, 7)          # TensorProto.INT32, INT64


def integer_activations(graph: Graph) -> set[str]:
    """The run-time integer and bool tensors of ``graph``: what the quantizer leaves as they are."""
    return {n for n, t in graph.tensors.items() if not t.is_constant and t.quant is None
            and t.dtype in INTEGER_INPUTS}


def random_integers(rng: np.random.Generator, t: Tensor) -> np.ndarray:
    """Random calibration values for an integer input: 0s and 1s (valid ids of any table,
    and both values of a flag); give calibration data for anything finer."""
    return rng.integers(0, 2, t.shape).astype(t.dtype)
