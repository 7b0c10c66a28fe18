"""Probabilities behind a saturating function: the logit a LOGISTIC squashes, scored beside it.

A small output (a speech, face or presence probability) that a LOGISTIC computes hides the
quantization error of everything before it wherever the LOGISTIC saturates: on samples
whose probability is near 0 or 1 a logit off by 0.5 changes nothing, and on an unseen
sample near 0.5 the same error moves the probability by 0.12. Held-out calibration samples
are mostly clear cases (Silero VAD: all eight of them within 0.01 of 0 or 1, and one
evaluation window at 0.69 came out 0.80), so :func:`libnpu.compiler.accuracy.output_scores`
also scores the logit of such an output (:func:`logit_of`) and keeps the lower score.
"""
from __future__ import annotations

from .ir import Graph

__all__ = ["logit_of", "PASSIVE"]

#: Ops between a LOGISTIC and the output that only move or convert its values.
PASSIVE = frozenset({"RESHAPE", "QUANTIZE", "DEQUANTIZE", "TRANSPOSE", "STRIDED_SLICE", "GATHER"})


def logit_of(graph: Graph, name: str) -> str | None:
    """The input of the LOGISTIC that tensor ``name`` of ``graph`` is (through ops that only
    move or convert values, or a MEAN over one value), or None."""
    producers = graph.producers()
    for _ in range(len(graph.ops)):
        op = producers.get(name)
        if op is None:
            return None
        if op.type == "LOGISTIC":
            return op.inputs[0]
        one_value_mean = op.type == "MEAN" and graph.tensors[op.inputs[0]].size == graph.tensors[name].size
        if op.type not in PASSIVE and not one_value_mean:
            return None
        name = op.inputs[0]
    return None
