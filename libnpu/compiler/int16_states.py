"""int16 states: a state (a streaming model's cache, a recurrent cell's hidden state:
``Graph.states``) whose new value mixed precision promotes to int16 stays int16 from one
call to the next.

A state is one STATE region read in place by the call and written back by its
``ASSIGN_VARIABLE`` byte copy, so its input and its new value are one tensor type and one
grid (``Graph._validate_states``). When :func:`libnpu.compiler.mixed_precision.promote`
made the new value int16 and the state stayed int8, the graph was invalid and every
escalation step past int8 was refused: a streaming spectral-mask model (GTCRN's kind:
conv cache, GRU cache, ``--state``) stayed int8 at cosine 0.34 on its held-out frames
(``tests/libnpu/compiler/test_streaming.py``). Widened, the state's int16 grid covers what
its int8 grid covered (with int16's headroom), ops promoted with it read it directly, and
the int8 ops reading it read an int8 copy made at the start of the call.
"""
from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

from .ir import Graph, Op, QuantParams, Tensor

__all__ = ["widen_states", "tie_widened_states"]


def widen_states(g: Graph, chosen_ops: Collection[int], int16_grid: Callable[[str], QuantParams],
                 first: list[Op]) -> dict[str, str]:
    """Make int16 (on ``int16_grid(input)``) every int8 state of ``g`` whose new value an op
    of ``chosen_ops`` (ids: the ops promoted) makes (a graph output promoted stays int8: the
    state's value is not). Appends to ``first`` the ops to run first: a QUANTIZE to an int8
    copy of each widened state that other ops read, those ops now reading the copy. Returns
    the widened state inputs -> themselves (their int16 tensor, for the promoted readers)."""
    promoted = {op.outputs[0] for op in g.ops if id(op) in chosen_ops}
    widened: dict[str, str] = {}
    for state in g.states:
        t8 = g.tensors[state.input]
        if state.output not in promoted or state.output in g.outputs or t8.dtype != "int8":
            continue
        g.tensors[state.input] = Tensor(state.input, t8.shape, "int16", int16_grid(state.input))
        state.initial = np.zeros(t8.shape, np.int16)      # real 0: int16 grids are symmetric
        readers = [op for op in g.ops if id(op) not in chosen_ops and state.input in op.inputs]
        if readers:
            copy = g.unique_name(f"{state.input}__int8")
            g.add_tensor(Tensor(copy, t8.shape, "int8", t8.quant))
            first.append(Op("QUANTIZE", [state.input], [copy], name=copy))
            for op in readers:
                op.inputs = [copy if i == state.input else i for i in op.inputs]
        widened[state.input] = state.input
    return widened


def tie_widened_states(g: Graph) -> list[Op]:
    """The ops that put each int16 state's new value on the state's own grid, where the op
    making it chose another (a same-scale op joined to other inputs, a fixed output grid, a
    per-channel grid): a REQUANTIZE to a tensor the state then takes as its new value."""
    tail = []
    for state in g.states:
        have, want = g.tensors[state.output], g.tensors[state.input]
        if want.dtype != "int16":
            continue
        if have.dtype == want.dtype and _same(have.quant, want.quant):
            continue
        tied = g.unique_name(f"{state.output}__state")
        g.add_tensor(Tensor(tied, want.shape, want.dtype, want.quant))
        tail.append(Op("QUANTIZE", [state.output], [tied], name=tied))
        state.output = tied
    return tail


def _same(a: QuantParams | None, b: QuantParams | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.axis == b.axis and np.array_equal(a.scale, b.scale) and np.array_equal(a.zero_point, b.zero_point)
