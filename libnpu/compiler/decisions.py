"""Decoder loops on the CPU that feed back the token they chose, and the chip layers feeding them (int16 by default).

The default compile runs those layers on int16 activations and int16 weights.

A decoder run as one ONNX ``Loop`` (or a TFLite ``WHILE``) on the CPU is exact in itself:
its body runs in float. What the chip hands it is not: an encoder's features on int8
grids move the decoder's logits a little, and where two tokens are close the ArgMax the
loop feeds back picks the other one; every later step then differs, and when the end
token moves, so does the output's length. The output does not degrade, it jumps: a
decoder can score 0.9999 on the three held-out samples the escalation measures
(:mod:`libnpu.compiler.held_out`) and 0.55 on the next input (a synthetic table decoder,
tests/support/dynamic_models.py: 3 unseen inputs of 8 took another token at int8, 1 with
int16 activations on the encoder, none with int16 weights too). No sample count tells
how rare such a flip is, so the rule is structural: the layers on the chip path into a
deciding host call run on the chip's finest grids (:func:`decision_path`), named at every
step of the escalation as ``int16`` / ``int16_weights`` options name layers
(:mod:`libnpu.compiler.escalation`: the later steps add GPTQ, equalization and bias
correction, no int16 search). The host call reads those int16 values as they are
(:func:`libnpu.compiler.mixed_precision.promote`).
"""
from __future__ import annotations

from .ir import Graph
from .mixed_precision import promotable, takes_int16_weights

__all__ = ["DECIDING_OPS", "deciding_calls", "decision_path"]

DECIDING_OPS = frozenset({"Loop", "WHILE"})
"""Host-call operators (ONNX, TFLite) whose steps feed back what earlier steps computed."""


def deciding_calls(graph: Graph) -> list[str]:
    """The names of ``graph``'s HOST ops that run a :data:`DECIDING_OPS` operator."""
    return [op.name for op in graph.ops if op.type == "HOST"
            and DECIDING_OPS & set(op.attrs["host"].op.split("+"))]


def decision_path(graph: Graph) -> tuple[list[str], list[str]]:
    """``(activations, weights)``: the output tensors of the chip ops whose values reach a
    deciding host call (through any ops), the ones the chip can run on int16 activations,
    and of those the ones that take int16 weights too; both in graph order (empty when
    ``graph`` has no deciding host call)."""
    calls = set(deciding_calls(graph))
    if not calls:
        return [], []
    producer = {o: op for op in graph.ops for o in op.outputs}
    wanted = [i for op in graph.ops if op.name in calls and op.type == "HOST" for i in op.inputs if i]
    reached: set[int] = set()
    while wanted:
        op = producer.get(wanted.pop())
        if op is None or id(op) in reached:
            continue
        reached.add(id(op))
        wanted.extend(i for i in op.inputs if i and not graph.tensors[i].is_constant)
    path = [op for op in graph.ops if id(op) in reached and op.type != "HOST" and promotable(op)]
    return [op.outputs[0] for op in path], [op.outputs[0] for op in path if takes_int16_weights(op)]
