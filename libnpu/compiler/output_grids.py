"""Grids for a model's small raw outputs that reach both signs, whatever sign calibration saw.

An output of fewer than ``SMALL_OUTPUT`` values that a linear op makes with no activation
(a presence logit, a score, a box offset) is judged by the acceptance bar within 0.05 of
float on inputs calibration never saw. Its int8 grid was its calibrated range widened to
hold 0, so a logit negative on every calibration sample (no face in any texture) got a grid
ending at 0, and the first face, a positive logit, came out as 0: as far off as its value
(|diff| 2.1), however many held-out samples of the same kind measured it exact. The sign
of such an output is what it tells, and calibration seeing one sign says nothing about the
next input's: :func:`signed_small_outputs` gives it a grid reaching its largest calibrated
magnitude on both sides (one bit of its int8 grid; the escalation's measurement then says
whether that holds, and its int16 steps are symmetric anyway). An output after an op whose
own range is bounded (a sigmoid, a ReLU) keeps its grid: its sign is fixed by the op.
"""
from __future__ import annotations

from collections.abc import Mapping

from .accuracy import SMALL_OUTPUT
from .ir import Graph

__all__ = ["LINEAR_OPS", "signed_small_outputs"]

#: Ops whose output may take either sign whatever their inputs' (with no fused activation).
LINEAR_OPS = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D",
              "ADD", "SUB", "MUL", "MEAN", "SUM")
#: Ops between such an op and the output that keep its values.
_SAME_VALUES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE")


def signed_small_outputs(graph: Graph, ranges: Mapping[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """``ranges`` with each small raw output of ``graph`` (and the tensors between it and
    the linear op making it) reaching its largest calibrated magnitude on both sides."""
    result = dict(ranges)
    producers = graph.producers()
    for out in graph.outputs:
        if graph.tensors[out].size >= SMALL_OUTPUT:
            continue
        chain, op = [out], producers.get(out)
        while op is not None and op.type in _SAME_VALUES and op.inputs[0] in producers:
            chain.append(op.inputs[0])
            op = producers[op.inputs[0]]
        if op is None or op.type not in LINEAR_OPS or op.attrs.get("activation", "NONE") != "NONE":
            continue
        known = [result[n] for n in chain if n in result]
        if not known:
            continue
        reach = max(max(abs(lo), abs(hi)) for lo, hi in known)
        for name in chain:
            if name in result:
                result[name] = (-reach, reach)
    return result
