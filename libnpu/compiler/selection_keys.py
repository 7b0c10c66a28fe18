"""Data-dependent selections decided in float: a TopK, NonMaxSuppression or ArgMax, the
tensors that key it and the rows it picks, placed on the CPU back to the chip's last
layers with weights.

A selection's output is decided by the order of its keys, not by their values: a YOLO
detector exported end to end (ultralytics' ``end2end``: scores -> ReduceMax -> TopK 300
anchors -> GatherElements of their boxes and scores -> TopK again -> a [1, 300, 6]
output of x1, y1, x2, y2, score, class) has hundreds of low scores within 1e-4 of each
other. On the chip the scores were a sigmoid's output on its [0, 1) grid: int8's step is
1/256, so every score under 0.002 was the same 0 and TopK took the lowest anchor indices
(the rows scored 0.59-0.60 against float on the held-out samples at every step the
escalation tried, int16 on 260 layers too); the selected boxes then met the scores and
class ids in one CONCATENATION whose grid spans 0-320 pixels, so every score read 0 or 1.3.

The rule (:func:`selection_placements`, applied by :mod:`libnpu.compiler.placement` to
float models): the selection, every op its keys come from back to the last layer the
chip must run (an op with weights), and every op reading what it selects (the gathers,
the concatenation of the rows) with the tensors they gather run on the CPU in float,
one host call where they are consecutive. What such a call makes for the caller or for
another host call stays float (:func:`selected_rows`); the chip's tensors it reads get
room past their calibrated range (:func:`widen_key_ranges`), and the escalation raises
them to int16 where its measurement of the outputs (:mod:`libnpu.compiler.held_out`)
says so. Real NPU stacks do the same (Hailo, RKNN and TIDL run such post-processing on
the CPU in float).

What float cannot fix: keys nearer each other than the chip's error. On YOLOv8 (nudenet
3.0's detector, ``benchmarks/e2e_head.py``, docs/models.md) 247 of the 299 gaps between
consecutive rows' scores are under 1e-4: noise of 1e-4 of each channel's range on the
raw head output (a few int16 steps) already reorders half the rows (cosine 0.94 over the
[300, 6] rows, 1.000 over the rows scored above 0.05). Only the rows above a score
threshold are stable; the whole [K, 6] output is not, at any precision short of float.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import registry
from .ir import Graph, Op, SourceOp

__all__ = ["SELECTIONS", "REASON", "KEY_HEADROOM", "selection_ops", "selection_placements", "is_selection_call",
           "key_inputs", "widen_key_ranges", "selected_rows"]

#: Source operators (ONNX op types, TFLite builtin names) whose output is an order or a
#: choice of indices decided by their input's values.
SELECTIONS = frozenset({"TopK", "NonMaxSuppression", "ArgMax", "ArgMin",
                        "TOPK_V2", "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5", "ARG_MAX", "ARG_MIN"})
#: The placement's reason for the ops the rule moves (the host call keeps it).
REASON = "decides or carries a data-dependent selection"
#: The chip's tensors a selection's host call reads get this share of their calibrated span
#: more range on each side: calibration's largest score is no bound on the next input's
#: (nudenet's 8 calibration pictures peaked at a class logit of 0.54, score 0.63; an unseen
#: one had 10 detections at 0.85-0.88, which all read 0.63 and tied).
KEY_HEADROOM = 0.25


def _stays_on_chip(op: Op) -> bool:
    """An op the keys' walk stops at: a layer with weights."""
    return op.type != "HOST" and registry.get(op.type, "weight_axis") is not None


def selection_ops(graph: Graph, sources: Sequence[SourceOp]) -> list[Op]:
    """The IR ops of ``graph`` that make a data-dependent selection, read what it selects
    (transitively), or make their inputs, back to (not including) the layers that stay on
    the chip; in graph order."""
    live = {id(op) for op in graph.ops}
    pending = [op for src in sources if src.op in SELECTIONS for op in src.ir_ops if id(op) in live]
    if not pending:
        return []
    producer, readers = graph.producers(), graph.consumers()
    chosen: dict[int, Op] = {}
    while pending:           # the selections and what reads their results
        op = pending.pop()
        if id(op) not in chosen and not _stays_on_chip(op):
            chosen[id(op)] = op
            pending += [r for out in op.outputs for r in readers.get(out, [])]
    pending = list(chosen.values())
    while pending:           # what their inputs are made of: the keys, the rows gathered
        op = pending.pop()
        for p in (producer[i] for i in op.inputs if i in producer):
            if id(p) not in chosen and not _stays_on_chip(p):
                chosen[id(p)] = p
                pending.append(p)
    return [op for op in graph.ops if id(op) in chosen]


def selection_placements(graph: Graph, sources: Sequence[SourceOp]) -> dict[int, str]:
    """Source op index -> reason, for the source ops :func:`selection_ops` puts on the CPU:
    those with an IR op it chose and none with weights (a Conv whose layout TRANSPOSE the
    walk reached stays on the chip; a Split whose other half feeds the chip goes: on the
    chip its input's grid spans both halves, nudenet's class logits shared one int8 grid
    with its box bins, 0.23 off its best scores)."""
    moved = {id(op) for op in selection_ops(graph, sources)}
    if not moved:
        return {}
    live = {id(op) for op in graph.ops}
    kinds = sorted({src.op for src in sources if src.op in SELECTIONS})
    reason = (f"{REASON} ({', '.join(kinds)}): kept in float on the CPU, "
              "which near-tied keys on an integer grid would reorder")
    result = {}
    for src in sources:
        ops = [op for op in src.ir_ops if id(op) in live]
        if any(id(op) in moved for op in ops) and not any(_stays_on_chip(op) for op in ops) and not src.reason:
            result[src.index] = reason
    return result


def is_selection_call(op: Op) -> bool:
    """Whether ``op`` is a host call running a selection or ops the rule moved for one."""
    if op.type != "HOST":
        return False
    call = op.attrs["host"]
    return bool(SELECTIONS & set(call.op.split("+"))) or REASON in call.reason


def key_inputs(graph: Graph) -> set[str]:
    """The tensors chip ops of ``graph`` make for a selection's host calls."""
    producer = graph.producers()
    return {i for op in graph.ops if is_selection_call(op) for i in op.inputs
            if i in producer and producer[i].type != "HOST"}


def widen_key_ranges(graph: Graph, ranges: Mapping[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """``ranges`` with each of :func:`key_inputs` wider by ``KEY_HEADROOM`` of its span on each side."""
    result = dict(ranges)
    for name in key_inputs(graph) & set(ranges):
        lo, hi = ranges[name]
        pad = (hi - lo) * KEY_HEADROOM
        result[name] = (lo - pad, hi + pad)
    return result


def selected_rows(graph: Graph) -> set[str]:
    """The float tensors a selection's host call makes that no chip op (nor a state)
    reads: the model's outputs and what another host call reads. The quantizer leaves
    them on no grid, as the CPU computed them. On a grid they lost what the selection
    kept: nudenet's scores crossed between two host calls (a chip partition, the box
    bins' DFL, between them) on their calibrated [0, 0.63], so an unseen picture's ten
    detections at 0.85-0.88 all read 0.63 and tied; the rows of boxes in pixels, a score
    and a class id shared one int8 step of 1.6 pixels, and every score read 0."""
    chip_reads = {i for op in graph.ops if op.type != "HOST" for i in op.inputs}
    states = {n for s in graph.states for n in (s.input, s.output)}
    return {o for op in graph.ops if is_selection_call(op) for o in op.outputs
            if o not in chip_reads | states and graph.tensors[o].dtype == "float32"}
