"""Additive attention masks: a key masked out by a bool or integer mask input, on integer grids.

PyTorch's ``scores.masked_fill(~mask, float("-inf"))`` (and ``key_padding_mask``) exports as
``Where(Not(mask), -inf, 0)`` added to the attention scores before their ``Softmax``. No grid
holds -inf: a calibration with padded keys stopped at "calibration: tensor ... has
non-finite values", and one with every key valid (a package that never pads) gave the mask
the grid of its zeros, so at run time a masked key read as 0 and took part in the softmax
(trueocr's reading-order model with 4 of 16 boxes padded: its outputs 0.93-0.99 against
onnxruntime). Two rules keep the mask:

* :func:`finite_attention_masks` (ONNX, at import): a masking sentinel (any constant <=
  ``MASK_SENTINEL``: -inf, -1e9, ``finfo(float32).min``) that a ``Where`` selects, a ``Mul``
  scales a mask by (HF's ``(1.0 - mask) * finfo.min``) or an ``Add`` adds as a constant
  mask (a causal one), when its output reaches only ``Softmax`` inputs through additions
  and data movement, becomes ``-MASK_DEPTH``: a masked key then weighs ``exp(-32)`` (1e-14)
  of what it would unmasked, nothing at float32's or any grid's resolution. A finite
  sentinel seen in calibration gave the mask a grid of scale ~4e6 or more (the scores
  collapsed, attention became uniform). ``masked_fill`` on the scores,
  ``Where(c, sentinel, scores)``, becomes ``Add(scores, Where(c, -32, 0))``: the mask is
  made from the bool input alone (on the CPU, before the chip's job, or folded when ``c``
  is constant) and the rule below applies to it.
* :func:`widen_mask_ranges` (quantization, on the calibrated ranges): an operand of an ADD
  feeding a SOFTMAX that the model computes from its integer or bool inputs only (the mask)
  gets a grid reaching ``-MASK_DEPTH`` and 0 whatever the calibration saw, and the sum's
  grid reaches ``MASK_DEPTH`` under the other operand's lowest value, so a masked score
  keeps its distance to every row's maximum. The tensors the chip computes the mask from
  get the ranges a 0/1 mask gives them (:func:`_mask_chain_ranges`).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from . import registry
from .ir import Graph, Op

__all__ = ["MASK_DEPTH", "MASK_SENTINEL", "ATTENTION_MASKS", "finite_attention_masks", "mask_operands",
           "widen_mask_ranges"]

#: The graph metadata key naming the masks :func:`finite_attention_masks` rewrote (the
#: importer sets it): a host call may compute one beside float values (a position
#: encoding), so the data flow alone does not tell it from the scores.
ATTENTION_MASKS = "attention_masks"

#: A constant at or under this is a masking sentinel (-inf, -1e9, ``finfo(float32).min``,
#: BERT's -1e4), never a value a grid should hold.
MASK_SENTINEL = -1e4

#: How far under the scores a masked key sits (exp(-32) = 1.3e-14 of its unmasked weight).
MASK_DEPTH = 32.0

#: ONNX nodes a mask passes through on its way to the softmax: data movement and the addition.
_ONNX_PATH = frozenset({"Unsqueeze", "Reshape", "Expand", "Squeeze", "Transpose", "Cast", "Add", "Identity"})

Range = tuple[float, float]

#: Ops taking rows of their first operand by index (an embedding table's).
_EMBEDDINGS = frozenset({"GATHER"})


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


def _is_sentinel(value: np.ndarray) -> bool:
    """Whether every value of a constant is a masking sentinel (-inf, -1e9, finfo.min...)."""
    return value.size > 0 and value.dtype.kind == "f" and bool(np.all(value <= MASK_SENTINEL))


def _reads_float_inputs(graph: onnx.GraphProto, tensor: str) -> bool:
    """Whether ``tensor`` is computed from a float input of ``graph`` (a mask is computed
    from integer or bool inputs and constants only)."""
    producer = {o: n for n in graph.node for o in n.output}
    floats = {i.name for i in graph.input
              if i.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)}
    pending, seen = [tensor], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in floats:
            return True
        if name in producer:
            pending += list(producer[name].input)
    return False


#: What a rewrite puts in a node's place, and the mask it computes (None: a constant one).
_Made = tuple[list[onnx.NodeProto], str | None] | None


class _Rewriter:
    """The sentinels of one ONNX graph made ``-MASK_DEPTH`` (:func:`finite_attention_masks`)."""

    def __init__(self, model: onnx.ModelProto, origin: dict[tuple[str, ...], tuple[int, str]] | None) -> None:
        self.graph, self.origin = model.graph, origin
        self.consts = {i.name: numpy_helper.to_array(i) for i in self.graph.initializer}

    def constant(self, name: str, value: np.ndarray) -> str:
        """A new initializer (the sentinel's own may have other readers)."""
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        self.consts[name] = value
        return name

    def depth(self, name: str) -> str:
        """``name``'s constant with its sentinels at ``-MASK_DEPTH``, as a new initializer."""
        value = self.consts[name]
        return self.constant(f"{name}_mask_depth", np.where(value <= MASK_SENTINEL, -MASK_DEPTH, value))

    def where(self, node: onnx.NodeProto) -> _Made:
        """``Where(c, K, s)`` (or ``Where(c, s, K)``): a constant ``Where(c, K, other)`` keeps its
        form with ``K`` at -32; one choosing a computed ``s`` becomes ``Add(s, Where(c, -32, 0))``,
        its mask folded when ``c`` is constant (a causal mask), so the chip adds it."""
        cond, *branches = node.input
        sentinel = [i for i, b in enumerate(branches) if b in self.consts and _is_sentinel(self.consts[b])]
        if len(sentinel) != 1:
            return None
        k = sentinel[0]
        other = branches[1 - k]
        out = node.output[0]
        if other in self.consts:
            branches[k] = self.depth(branches[k])
            return [onnx.helper.make_node("Where", [cond, *branches], [out], name=node.name)], out
        # the sentinel's own shape kept: the mask broadcasts to the Where's output as it did
        values = [np.full(self.consts[branches[k]].shape, -MASK_DEPTH, np.float32), np.zeros((), np.float32)]
        picks = values if k == 0 else values[::-1]
        if cond in self.consts:
            mask = self.constant(f"{out}_mask", np.where(self.consts[cond], *picks).astype(np.float32))
            return [onnx.helper.make_node("Add", [other, mask], [out], name=node.name)], None
        mask = f"{out}_mask"
        names = [self.constant(f"{mask}_{n}", v) for n, v in zip(("then", "else"), picks)]
        if self.origin:     # the file's Where makes the mask; the addition is the compiler's own
            self.origin[(mask,)] = self.origin.get((out,), (len(self.graph.node), "Where"))
            self.origin[(out,)] = (max(i for i, _ in self.origin.values()) + 1, "Add")
        return [onnx.helper.make_node("Where", [cond, *names], [mask], name=f"{node.name}_mask"),
                onnx.helper.make_node("Add", [other, mask], [out], name=node.name)], mask

    def scaled(self, node: onnx.NodeProto) -> _Made:
        """``Mul(m, K)`` of a mask ``m`` computed from integer or bool inputs (HF's
        ``(1.0 - mask) * finfo.min``), or ``Add(s, K)`` of a constant mask (a causal one
        holding -inf or finfo.min): ``K``'s sentinels at -32."""
        ins = list(node.input)
        for i, name in enumerate(ins):
            value = self.consts.get(name)
            if value is None or value.dtype.kind != "f" or not np.any(value <= MASK_SENTINEL):
                continue
            if node.op_type == "Mul" and not (_is_sentinel(value) and not _reads_float_inputs(self.graph, ins[1 - i])):
                return None
            ins[i] = self.depth(name)
            made = onnx.helper.make_node(node.op_type, ins, list(node.output), name=node.name)
            return [made], node.output[0] if node.op_type == "Mul" else None
        return None


def finite_attention_masks(model: onnx.ModelProto,
                           origin: dict[tuple[str, ...], tuple[int, str]] | None = None) -> list[str]:
    """Rewrite ``model`` in place: each masking sentinel (a constant <= ``MASK_SENTINEL``:
    -inf, -1e9, ``finfo.min``) a ``Where`` selects, a ``Mul`` scales a mask by, or an ``Add``
    adds as a constant mask becomes ``-MASK_DEPTH`` when the node's output feeds softmax
    inputs only (:func:`_feeds_softmax_only`). ``origin`` (the importer's source index)
    learns the nodes it adds. Returns the masks the rewrite made (tensor names)."""
    graph = model.graph
    rewriter = _Rewriter(model, origin)
    rewritten, nodes = [], []
    for node in list(graph.node):
        made = None
        if node.op_type in ("Where", "Mul", "Add") and len(node.input) == (3 if node.op_type == "Where" else 2) \
                and _feeds_softmax_only(graph, node.output[0]):
            made = rewriter.where(node) if node.op_type == "Where" else rewriter.scaled(node)
        if made is None:
            nodes.append(node)
            continue
        nodes += made[0]
        if made[1] is not None:
            rewritten.append(made[1])
    del graph.node[:]
    graph.node.extend(nodes)
    return rewritten


def _float_inputs_upstream(graph: Graph, tensor: str, producer: Mapping[str, Op]) -> bool:
    """Whether ``tensor`` depends on a float input of ``graph`` (a state counts as one) or on
    rows an integer input picks from a float table (a text encoder's token embeddings)."""
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
        if op is not None and op.type in _EMBEDDINGS and graph.tensors[op.inputs[0]].is_constant \
                and graph.tensors[op.inputs[0]].dtype in ("float32", "float16"):
            return True
        if op is not None:
            pending += list(op.inputs)
    return False


def _readers(graph: Graph) -> dict[str, list[Op]]:
    """The ops reading each tensor of ``graph``."""
    readers: dict[str, list[Op]] = {}
    for op in graph.ops:
        for i in op.inputs:
            readers.setdefault(i, []).append(op)
    return readers


def _feeds_softmax(readers: Mapping[str, list[Op]], tensor: str) -> bool:
    """Whether every reader of ``tensor`` is a SOFTMAX or data movement leading to them."""
    ops = readers.get(tensor, [])
    return bool(ops) and all(op.type == "SOFTMAX" or registry.get(op.type, "same_scale")
                             and _feeds_softmax(readers, op.outputs[0]) for op in ops)


def _drop_sentinels(graph: Graph, ranges: dict[str, Range]) -> None:
    """A calibrated range reaching a masking sentinel (a ``SELECT_V2`` of -1e9 that the CPU
    runs, from a TFLite model the import does not rewrite) on its way to softmax inputs only
    ends ``MASK_DEPTH`` under the lowest value its op reads: the sum of an ADD's lows, a
    data movement's own, a host call's lowest float input (the scores it selects from) or
    0 (a mask made from bool inputs alone). A grid reaching -1e9 has a step of ~4e6: the
    scores collapsed and attention became uniform."""
    readers = _readers(graph)
    for op in graph.ops:
        for out in op.outputs:
            if out not in ranges or ranges[out][0] > MASK_SENTINEL or not _feeds_softmax(readers, out):
                continue
            lows = [ranges[i][0] for i in op.inputs if i in ranges and ranges[i][0] > MASK_SENTINEL]
            if op.type == "ADD":
                low = sum(lows)
            elif registry.get(op.type, "same_scale"):
                low = min(lows, default=-MASK_DEPTH)
            else:
                low = min(lows, default=0.0) - MASK_DEPTH
            ranges[out] = (low, max(ranges[out][1], low))


def mask_operands(graph: Graph) -> list[tuple[str, str, str]]:
    """The additive masks of ``graph``: ``(mask, scores, sum)`` for each ADD whose output
    reaches a SOFTMAX through data movement only and one of whose operands is a mask: one
    the import rewrote (:data:`ATTENTION_MASKS`, and its data movement), or one the model
    computes from its integer or bool inputs only."""
    readers = _readers(graph)
    known, pending = set(), [n for n in graph.metadata.get(ATTENTION_MASKS, ()) if n in graph.tensors]
    while pending:
        name = pending.pop()
        if name not in known:
            known.add(name)
            pending += [op.outputs[0] for op in readers.get(name, []) if registry.get(op.type, "same_scale")]

    def feeds_softmax(tensor: str) -> bool:
        return _feeds_softmax(readers, tensor)

    producer = {o: op for op in graph.ops for o in op.outputs}
    found = []
    for op in graph.ops:
        if op.type != "ADD" or len(op.inputs) != 2 or any(graph.tensors[i].is_constant for i in op.inputs) \
                or not feeds_softmax(op.outputs[0]):
            continue
        # a mask the import rewrote is the mask, whatever else the other operand is computed from
        # (a text encoder's scores come from integer token ids through its embedding tables too)
        masks = [i for i in op.inputs if i in known]
        if len(masks) != 1:
            masks = [i for i in op.inputs if graph.tensors[i].dtype == "float32"
                     and not _float_inputs_upstream(graph, i, producer)]
        if len(masks) == 1:
            scores = op.inputs[1] if op.inputs[0] == masks[0] else op.inputs[0]
            found.append((masks[0], scores, op.outputs[0]))
    return found


def _interval(op_type: str, a: Range, b: Range) -> Range:
    """The range of ``a op b`` over the ranges of its operands."""
    if op_type == "MUL":
        ends = [x * y for x in a for y in b]
        return min(ends), max(ends)
    return (a[0] + b[0], a[1] + b[1]) if op_type == "ADD" else (a[0] - b[1], a[1] - b[0])


def _mask_chain_ranges(graph: Graph, mask: str, ranges: dict[str, Range]) -> None:
    """Widen in ``ranges`` the tensors the chip computes ``mask`` from (HF's ``Cast``, ``1 - m``,
    ``* -32``): what a bool mask gives (a value made on the CPU or read from an input: 0 and 1
    whatever the calibration saw) carried through ADD, SUB, MUL and data movement. A
    calibration with every key valid saw ``1 - m`` at 0 only, and gave it a grid without 1."""
    producer = {o: op for op in graph.ops for o in op.outputs}

    def range_of(name: str, operand: bool) -> Range:
        tensor = graph.tensors[name]
        if tensor.is_constant:
            return float(np.min(tensor.data)), float(np.max(tensor.data))
        op = producer.get(name)
        seen = ranges.get(name, (0.0, 0.0))
        if op is not None and op.type in ("ADD", "SUB", "MUL") and len(op.inputs) == 2:
            got = _interval(op.type, range_of(op.inputs[0], True), range_of(op.inputs[1], True))
        elif op is not None and registry.get(op.type, "same_scale"):
            got = range_of(op.inputs[0], operand)
        else:      # the mask itself made on the CPU (a Where of -32 and 0) keeps its own range
            got = (0.0, 1.0) if operand else seen
        got = (min(got[0], seen[0]), max(got[1], seen[1]))
        if name in ranges:
            ranges[name] = got
        return got

    range_of(mask, False)


def widen_mask_ranges(graph: Graph, ranges: Mapping[str, Range]) -> dict[str, Range]:
    """``ranges`` with each additive mask's (:func:`mask_operands`) reaching ``-MASK_DEPTH``
    and 0, and its sum's reaching ``MASK_DEPTH`` under the scores' lowest value; a
    sentinel calibration saw on the way to a softmax dropped first (:func:`_drop_sentinels`)."""
    ranges = dict(ranges)
    _drop_sentinels(graph, ranges)
    for mask, scores, total in mask_operands(graph):
        _mask_chain_ranges(graph, mask, ranges)
        if mask in ranges:
            ranges[mask] = (min(ranges[mask][0], -MASK_DEPTH), max(ranges[mask][1], 0.0))
        if total in ranges and scores in ranges:
            ranges[total] = (min(ranges[total][0], ranges[scores][0] - MASK_DEPTH), ranges[total][1])
    return ranges
