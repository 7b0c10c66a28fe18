"""Additive attention masks: a key masked out by a bool or integer mask input, on integer grids.

PyTorch's ``scores.masked_fill(~mask, float("-inf"))`` (and ``key_padding_mask``) exports as
``Where(Not(mask), -inf, 0)`` added to the attention scores before their ``Softmax``. No grid
holds -inf: a calibration with padded keys stopped at "calibration: tensor ... has
non-finite values", and one with every key valid (a package that never pads) gave the mask
the grid of its zeros, so at run time a masked key read as 0 and took part in the softmax
(trueocr's reading-order model with 4 of 16 boxes padded: its outputs 0.93-0.99 against
onnxruntime). Two rules keep the mask:

* :func:`finite_attention_masks` (ONNX, at import): the -inf a ``Where`` selects, when its
  output reaches only ``Softmax`` inputs through additions and data movement, becomes
  ``-MASK_DEPTH``: a masked key then weighs ``exp(-32)`` (1e-14) of what it would unmasked,
  nothing at float32's or any grid's resolution.
* :func:`widen_mask_ranges` (quantization, on the calibrated ranges): an operand of an ADD
  feeding a SOFTMAX that the model computes from its integer or bool inputs only (the mask)
  gets a grid reaching ``-MASK_DEPTH`` and 0 whatever the calibration saw, and the sum's
  grid reaches ``MASK_DEPTH`` under the other operand's lowest value, so a masked score
  keeps its distance to every row's maximum.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from . import registry
from .ir import Graph, Op

__all__ = ["MASK_DEPTH", "ATTENTION_MASKS", "finite_attention_masks", "mask_operands", "widen_mask_ranges"]

#: The graph metadata key naming the masks :func:`finite_attention_masks` rewrote (the
#: importer sets it): a host call may compute one beside float values (a position
#: encoding), so the data flow alone does not tell it from the scores.
ATTENTION_MASKS = "attention_masks"

#: How far under the scores a masked key sits (exp(-32) = 1.3e-14 of its unmasked weight).
MASK_DEPTH = 32.0

#: ONNX nodes a mask passes through on its way to the softmax: data movement and the addition.
_ONNX_PATH = frozenset({"Unsqueeze", "Reshape", "Expand", "Squeeze", "Transpose", "Cast", "Add", "Identity"})

Range = tuple[float, float]


def _feeds_softmax_only(graph: onnx.GraphProto, tensor: str) -> bool:
    """Whether every path from ``tensor`` ends at a Softmax input through ``_ONNX_PATH`` nodes."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)
    outputs = {o.name for o in graph.output}
    pending, seen, softmax = [tensor], set(), False
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in outputs:
            return False
        for node in readers.get(name, []):
            if node.op_type == "Softmax":
                softmax = True
            elif node.op_type in _ONNX_PATH:
                pending += list(node.output)
            else:
                return False
    return softmax


def finite_attention_masks(model: onnx.ModelProto) -> list[str]:
    """Rewrite ``model`` in place: a constant -inf a ``Where`` selects becomes ``-MASK_DEPTH``
    when the ``Where`` feeds softmax inputs only (:func:`_feeds_softmax_only`); the outputs
    of the ``Where`` nodes rewritten."""
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    rewritten = []
    for node in graph.node:
        if node.op_type != "Where" or len(node.input) != 3:
            continue
        branches = [initializers[i] for i in node.input[1:] if i in initializers]
        masked = [b for b in branches if np.any(np.isneginf(numpy_helper.to_array(b)))]
        if not masked or not _feeds_softmax_only(graph, node.output[0]):
            continue
        for init in masked:
            value = numpy_helper.to_array(init).copy()
            value[np.isneginf(value)] = -MASK_DEPTH
            init.CopyFrom(numpy_helper.from_array(value, init.name))
        rewritten.append(node.output[0])
    return rewritten


def _float_inputs_upstream(graph: Graph, tensor: str, producer: Mapping[str, Op]) -> bool:
    """Whether ``tensor`` depends on a float input of ``graph`` (a state counts as one)."""
    floats = {n for n in graph.inputs if graph.tensors[n].dtype in ("float32", "float16")}
    floats |= {s.input for s in graph.states}
    pending, seen = [tensor], set()
    while pending:
        name = pending.pop()
        if name in seen or not name or graph.tensors[name].is_constant:
            continue
        seen.add(name)
        if name in floats:
            return True
        op = producer.get(name)
        if op is not None:
            pending += list(op.inputs)
    return False


def mask_operands(graph: Graph) -> list[tuple[str, str, str]]:
    """The additive masks of ``graph``: ``(mask, scores, sum)`` for each ADD whose output
    reaches a SOFTMAX through data movement only and one of whose operands is a mask: one
    the import rewrote (:data:`ATTENTION_MASKS`, and its data movement), or one the model
    computes from its integer or bool inputs only."""
    readers: dict[str, list] = {}
    for op in graph.ops:
        for i in op.inputs:
            readers.setdefault(i, []).append(op)
    known, pending = set(), [n for n in graph.metadata.get(ATTENTION_MASKS, ()) if n in graph.tensors]
    while pending:
        name = pending.pop()
        if name not in known:
            known.add(name)
            pending += [op.outputs[0] for op in readers.get(name, []) if registry.get(op.type, "same_scale")]

    def feeds_softmax(tensor: str) -> bool:
        ops = readers.get(tensor, [])
        return bool(ops) and all(op.type == "SOFTMAX" or registry.get(op.type, "same_scale")
                                 and feeds_softmax(op.outputs[0]) for op in ops)

    producer = {o: op for op in graph.ops for o in op.outputs}
    found = []
    for op in graph.ops:
        if op.type != "ADD" or len(op.inputs) != 2 or any(graph.tensors[i].is_constant for i in op.inputs) \
                or not feeds_softmax(op.outputs[0]):
            continue
        masks = [i for i in op.inputs if graph.tensors[i].dtype == "float32"
                 and (i in known or not _float_inputs_upstream(graph, i, producer))]
        if len(masks) == 1:
            scores = op.inputs[1] if op.inputs[0] == masks[0] else op.inputs[0]
            found.append((masks[0], scores, op.outputs[0]))
    return found


def widen_mask_ranges(graph: Graph, ranges: Mapping[str, Range]) -> dict[str, Range]:
    """``ranges`` with each additive mask's (:func:`mask_operands`) reaching ``-MASK_DEPTH``
    and 0, and its sum's reaching ``MASK_DEPTH`` under the scores' lowest value."""
    ranges = dict(ranges)
    for mask, scores, total in mask_operands(graph):
        if mask in ranges:
            ranges[mask] = (min(ranges[mask][0], -MASK_DEPTH), max(ranges[mask][1], 0.0))
        if total in ranges and scores in ranges:
            ranges[total] = (min(ranges[total][0], ranges[scores][0] - MASK_DEPTH), ranges[total][1])
    return ranges
