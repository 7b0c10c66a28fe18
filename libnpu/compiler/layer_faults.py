"""A failure inside one layer's quantization, named for that layer, so the compile keeps the
layer on the CPU instead of ending.

A model whose every operator the chip runs can still hold one layer no integer grid
takes: its weights and bias are only known once the whole graph is optimized (a batch
norm folded into the convolution before it), so the placement, which judges each
operator alone, passes it, and the whole model's quantization then failed with a message
naming no layer ("quantization: scales must be finite and > 0"). The quantizer raises
:class:`LayerFault` for such a failure (one of ``LAYER_FAULTS`` while it quantizes one op);
the compiler (:func:`libnpu.compiler.lower.compile_model`) puts the source operators that
op came from on the CPU with the fault's reason, says so, and quantizes again.

What the user gave wrongly (an input shape, calibration data with inf or NaN, weights
holding NaN) is not a layer's fault: those errors are raised as they are, never caught.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from .ir import IRError, Op, SourceOp

__all__ = ["LAYER_FAULTS", "MAX_LAYER_FAULTS", "LayerFault", "fault_sources"]

#: What one layer's quantization raises when it fails on that layer (the compiler's own
#: arithmetic and rules, not a malformed model): these become a :class:`LayerFault`.
LAYER_FAULTS: tuple[type[BaseException], ...] = (
    ValueError, ArithmeticError, IndexError, KeyError, TypeError, AttributeError, np.linalg.LinAlgError)
#: At most this many layers go to the CPU this way in one compile (each costs a quantization).
MAX_LAYER_FAULTS = 8


class LayerFault(IRError):
    """Quantizing the op ``op_name`` (making ``tensors``) failed; ``cause`` says why."""

    def __init__(self, op: Op | None, tensors: Collection[str], cause: BaseException) -> None:
        self.op_name = op.name if op is not None else ""
        self.tensors = frozenset(tensors)
        text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        self.cause = text if isinstance(cause, IRError) else f"{type(cause).__name__}: {text}"
        where = op.describe() if op is not None else f"tensor {sorted(self.tensors)[0]!r}"
        super().__init__(f"quantizing {where} failed: {self.cause}")

    @property
    def reason(self) -> str:
        """The CPU placement's reason: the real cause, as the quantizer raised it."""
        return f"quantizing it for the chip failed: {self.cause}"


def fault_sources(fault: LayerFault, sources: Sequence[SourceOp]) -> list[SourceOp]:
    """The source operators the faulty op came from: those whose IR ops have its name
    (the op a fusion kept) or make one of its tensors (an activation fused into it)."""
    return [s for s in sources
            if any(op.name == fault.op_name and fault.op_name or set(op.outputs) & fault.tensors for op in s.ir_ops)]
