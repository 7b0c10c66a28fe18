"""Tensors whose shape the data decides (NonZero, NMS, a Loop that stops on its own) and the outputs they make.

Some ONNX operators give an output whose shape is known only once they run: NonZero
(how many values are not zero), NonMaxSuppression (how many boxes are kept), Unique,
Compress, TopK with a computed k, and a Loop whose scan outputs grow by one row per
iteration when the loop stops on a condition its body computes (a decoder emitting
tokens until an end token). Running the model on two random inputs
(:func:`~libnpu.compiler.onnx_host.probe_shapes`) does not always tell: a detector's
NonMaxSuppression may keep its maximum on both, a decoder may stop at the same step.
So these operators' outputs are dynamic by rule (:func:`data_dependent`), and so is any
tensor computed from one whose inferred shape is not static.

Such a tensor never crosses to the chip: its readers run on the CPU, in the host call
that makes it (:mod:`~libnpu.compiler.onnx_import`). When it is a model output, the host
call returns it as it is, a new array each run, never quantized: the graph's metadata
``DYNAMIC_OUTPUTS`` names it with its shape signature (-1 where the data decides, as
ONNX's ``dim_param`` and TFLite's ``shape_signature``) and an upper bound where the
operator gives one (NonZero: its input's size; NonMaxSuppression: batches x classes x
the boxes it keeps per class; a Loop: its constant trip count), which the loadable's
output descriptor carries (:func:`describe_dynamic_outputs`) and the runtime checks
(:mod:`libnpu.partitions`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:     # onnx only for the hints: the runtime (libnpu.host) imports this module, not onnx
    import onnx

from ..dynamic_outputs import DYNAMIC_OUTPUTS

__all__ = ["DYNAMIC_OUTPUTS", "DATA_DEPENDENT_OPS", "data_dependent", "dynamic_output_entry"]

# DYNAMIC_OUTPUTS, graph metadata: IR output name -> {"signature": [dims, -1 where each run
# decides], "bound": [dims] or None}; the loadable's output descriptors take it (compiler.lower)

DATA_DEPENDENT_OPS = ("NonZero", "NonMaxSuppression", "Unique", "Compress")
"""ONNX operators whose outputs' shapes depend on their input values (TopK with a computed
k and a Loop that stops on its own are told apart by their inputs)."""

Shapes = Mapping[str, tuple[tuple[int, ...], str]]     # ONNX name -> (dims, -1 unknown; dtype)
Bound = tuple[int, ...] | None


def data_dependent(graph: onnx.GraphProto, shapes: Shapes, consts: Mapping[str, np.ndarray]) -> dict[str, Bound]:
    """The tensors of ``graph`` whose shape depends on the input data, each with an upper
    bound on its shape when the operator making it gives one (else None). ``shapes``: the
    inferred shapes; ``consts``: the constant tensors by name."""
    found: dict[str, Bound] = {}
    for node in graph.node:
        own = _own_dynamic(node, shapes, consts)
        found.update(own)
        if any(i in found for i in node.input):      # computed from a dynamic tensor, its shape not inferred
            found.update({o: None for o in node.output if o and o not in own and not _static(shapes, o)})
    return found


def _static(shapes: Shapes, name: str) -> bool:
    return name in shapes and all(d >= 0 for d in shapes[name][0])


def _own_dynamic(node: onnx.NodeProto, shapes: Shapes, consts: Mapping[str, np.ndarray]) -> dict[str, Bound]:
    """The outputs ``node`` itself makes data-dependent, with their bounds."""
    ins = list(node.input)
    if node.op_type == "NonZero" and _static(shapes, ins[0]):
        dims = shapes[ins[0]][0]
        return {node.output[0]: (len(dims), int(np.prod(dims)))}
    if node.op_type == "NonMaxSuppression":
        keep = consts.get(ins[2]) if len(ins) > 2 and ins[2] else np.zeros(1, np.int64)
        if keep is not None and _static(shapes, ins[1]) and len(shapes[ins[1]][0]) == 3:
            batches, classes, _ = shapes[ins[1]][0]
            return {node.output[0]: (batches * classes * int(np.asarray(keep).reshape(-1)[0]), 3)}
        return {node.output[0]: None}
    if node.op_type in DATA_DEPENDENT_OPS:
        return {o: None for o in node.output if o}
    if node.op_type == "TopK" and len(ins) > 1 and ins[1] not in consts:
        return {o: None for o in node.output if o}
    if node.op_type == "Loop":
        return _loop_scans(node, shapes, consts)
    return {}


def _loop_scans(node: onnx.NodeProto, shapes: Shapes, consts: Mapping[str, np.ndarray]) -> dict[str, Bound]:
    """A Loop's scan outputs, unless it runs a constant number of times (a constant trip
    count, a start condition that is constant and true, and a condition the body computes
    from no input value: :func:`_condition_without_data`)."""
    body = next(a.g for a in node.attribute if a.name == "body")
    carried = len(node.input) - 2
    scans = [o for o in node.output[carried:] if o]
    trips = consts.get(node.input[0]) if node.input[0] else None
    if not scans:
        return {}
    start = consts.get(node.input[1]) if len(node.input) > 1 and node.input[1] else np.ones((), bool)
    if trips is not None and start is not None and bool(np.asarray(start).reshape(-1)[0]) \
            and _condition_without_data(node, body, consts):
        return {}
    bounds: dict[str, Bound] = {}
    for o in scans:       # a row per iteration: at most the trip count, when it is a constant
        rest = shapes[o][0][1:] if o in shapes else None
        known = trips is not None and rest is not None and all(d >= 0 for d in rest)
        bounds[o] = (int(np.asarray(trips).reshape(-1)[0]), *rest) if known and rest is not None else None
    return bounds


def _condition_without_data(node: onnx.NodeProto, body: onnx.GraphProto, consts: Mapping[str, np.ndarray]) -> bool:
    """Whether the condition a Loop's body gives is computed from no input value: from the
    iteration number, constants, the condition it starts with (a constant here) and carried
    values that start constant and are updated that way themselves. A condition passed on
    unchanged is one; so is TensorFlow's ``while`` counter against a length a static shape
    gives (``tf.map_fn`` over a batch, as tf2onnx exports it), which runs as many times
    whatever the data."""
    carried = len(node.input) - 2
    known = {k for k in range(carried) if node.input[2 + k] in consts}      # until shown otherwise
    while True:
        free = {body.input[0].name, body.input[1].name, *consts, *(i.name for i in body.initializer)}
        free |= {body.input[2 + k].name for k in known if 2 + k < len(body.input)}
        for inner in body.node:
            if inner.op_type not in _RANDOM and not any(a.HasField("g") or a.graphs for a in inner.attribute) \
                    and all(i in free for i in inner.input if i):
                free.update(o for o in inner.output if o)
        kept = {k for k in known if 1 + k < len(body.output) and body.output[1 + k].name in free}
        if kept == known:
            return body.output[0].name in free
        known = kept


# operators a new value each run: never computed "from no input value"
_RANDOM = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                     "Bernoulli"})


def dynamic_output_entry(inferred: tuple[int, ...] | None, probed: tuple[int, ...], bound: Bound) -> dict[str, Any]:
    """The ``DYNAMIC_OUTPUTS`` entry of an output: its signature (the inferred dims, -1
    where unknown; all -1 when even its rank was not inferred) and its bound, the dims
    the signature fixes with the operator's bound where it gives one (None: no bound)."""
    signature = list(inferred) if inferred is not None and len(inferred) == len(probed) else [-1] * len(probed)
    if bound is None or len(bound) != len(signature):
        return {"signature": signature, "bound": None}
    return {"signature": signature, "bound": [s if s >= 0 else int(b) for s, b in zip(signature, bound)]}
