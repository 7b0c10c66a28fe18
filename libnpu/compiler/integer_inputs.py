"""Integer tensors in a float model: taken as they are, never quantized, run where they can be.

A float model may take integers: token or byte ids into an embedding (magika's int32
bytes), a sample rate (Silero VAD's int64 ``sr``), a mask. They keep their own dtype from
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

__all__ = ["INTEGER_INPUTS", "IntegerOperandError", "refuse_integer_operands", "integer_activations",
           "random_integers"]

#: Non-float dtypes a float model's inputs (and host ops' results) may have.
INTEGER_INPUTS = ("int32", "int64", "bool")

#: ONNX op type -> {input position: dtypes the chip's operator reads there as they are}.
_CHIP_READS = {"Gather": {1: ("int32",)}}


class IntegerOperandError(IRError):
    """An op the chip would run takes an integer tensor computed at run time."""


def refuse_integer_operands(op_type: str, operands: Sequence[Tensor | None], where: str) -> None:
    """Raise :class:`IntegerOperandError` when ``op_type`` takes a run-time integer or bool
    tensor (``operands``: each input's IR tensor, None for a constant or an absent one)
    where the chip's operator does not read that dtype."""
    allowed = _CHIP_READS.get(op_type, {})
    for position, t in enumerate(operands):
        if t is None or t.is_constant or t.dtype not in INTEGER_INPUTS:
            continue
        if t.dtype in allowed.get(position, ()):
            continue
        reads = "; ".join(f"input {p} in {'/'.join(d)}" for p, d in allowed.items())
        raise IntegerOperandError(
            f"{where}: input {t.name!r} is {t.dtype} computed at run time; the chip computes on int8-quantized "
            f"floats{' (it reads ' + reads + ')' if reads else ''}")


def integer_activations(graph: Graph) -> set[str]:
    """The run-time integer and bool tensors of ``graph``: what the quantizer leaves as they are."""
    return {n for n, t in graph.tensors.items() if not t.is_constant and t.quant is None
            and t.dtype in INTEGER_INPUTS}


def random_integers(rng: np.random.Generator, t: Tensor) -> np.ndarray:
    """Random calibration values for an integer input: 0s and 1s (valid ids of any table,
    and both values of a flag); give calibration data for anything finer."""
    return rng.integers(0, 2, t.shape).astype(t.dtype)
