"""Fold what ONNX exporters compute at run time but the import already knows.

PyTorch and TF exporters write shapes, paddings, anchors and branches as small graphs
(``F.pad``: Shape -> Size -> Mul/Sub -> ConstantOfShape -> Concat -> Reshape -> Slice ->
Transpose -> Pad; YOLO anchors: Shape -> Range -> Expand -> Concat; ``if x.shape[1] == 3``:
Equal -> If). Once the input dimensions are fixed, all of it is constant:
:func:`fold_onnx` turns it into initializers before the importer lowers the graph, so no
such node reaches the chip or the CPU. Repeated until nothing changes:

* a node whose inputs are all constant is evaluated by ``onnx.reference.ReferenceEvaluator``
  (the ONNX reference implementation, part of the ``onnx`` package the import already
  needs: one evaluator for every operator and opset, no per-op code here); Shape and
  Size only need their input's static shape;
* an ``If`` whose condition is constant is replaced by the nodes of the branch taken
  (names defined in the branch prefixed to stay unique; outer-scope names kept);
* a ``Where`` whose condition is constant and all true (all false) is an Identity of its
  first (second) operand when that operand already has the output's shape.

Then nodes no output depends on and initializers nothing reads are dropped. A node that
needs a free dimension stays as it is (the importer then says which shape is dynamic),
as does one the evaluator cannot run (no implementation, or a random operator) and one
whose output inference makes larger than :data:`MAX_FOLDED_ELEMENTS`.

Declared shapes are checked as onnxruntime checks them: an output or ``value_info``
shape that disagrees with shape inference gives an :class:`ONNXShapeWarning` and the
inferred shape is used (a model exported with batch 2 whose free batch is fixed to 1
still imports).

onnxsim (onnx-simplifier 0.8.1, cp311 wheel) folds these graphs too, but needs
onnxruntime at run time (a test-only dependency here), fuses and renames nodes beyond
folding (the placement report names each source node by its index) and prints its own
warnings; the reference evaluator keeps every other node as it was.
"""
from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from .onnx_shapes import inferred_shapes

__all__ = ["MAX_FOLDED_ELEMENTS", "ONNXShapeWarning", "SourceIndex", "fold_onnx"]

# Node outputs -> (index of the source node in the file, its op type): how the importer
# names a node after folding (an If's inlined nodes keep the If's index).
SourceIndex = dict[tuple[str, ...], tuple[int, str]]

# Not evaluated even on constant inputs: a new value each run, control flow (an If is
# inlined instead), sequences and optionals (no tensor to store as an initializer).
_NEVER_EVALUATED = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
    "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase",
    "SequenceAt", "SequenceLength", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
    "OptionalHasElement"})

# A folded tensor's size limit (256 MiB of float32): a model's own numbers (ConstantOfShape's
# shape, Expand's, Range's limit) say how much the import would allocate; past this the
# node stays, for the importer to refuse or the host to run.
MAX_FOLDED_ELEMENTS = 1 << 26


class ONNXShapeWarning(UserWarning):
    """A declared shape disagrees with shape inference; the inferred one is used."""


def fold_onnx(model: onnx.ModelProto, name: str = "model") -> tuple[onnx.ModelProto, SourceIndex]:
    """``model`` (a copy) with its constant subgraphs folded into initializers, constant
    ``If`` and ``Where`` resolved, dead nodes and unused initializers removed, and declared
    shapes that disagree with inference replaced by the inferred ones; with the source
    index of each node left. Call it once the input dimensions are fixed."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    origin: SourceIndex = {tuple(n.output): (i, n.op_type) for i, n in enumerate(graph.node)}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    changed = True
    while changed:
        static = _static_shapes(model)
        changed = _fold_pass(graph, consts, static, opset)
        changed = _inline_constant_ifs(graph, consts, origin) or changed
    _remove_dead(graph)
    _use_inferred_shapes(model, name)
    return model, origin


def _dims(vi: onnx.ValueInfoProto) -> tuple[int | None, ...] | None:
    """A value's declared dims (None for a free one), or None without a shape."""
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)


def _infer(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """Shape inference from the inputs alone: declared output and value_info shapes set
    aside while it runs (a stale one, e.g. the exported batch, would be taken as true and
    folded into the graph), back in ``model`` after."""
    graph = model.graph
    value_info = list(graph.value_info)
    outputs = [onnx.ValueInfoProto() for _ in graph.output]
    for saved, vi in zip(outputs, graph.output):
        saved.CopyFrom(vi)
        vi.type.tensor_type.ClearField("shape")
    del graph.value_info[:]
    try:
        return inferred_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx raises its own error types; the importer's strict pass reports them
        return None
    finally:
        graph.value_info.extend(value_info)
        for saved, vi in zip(outputs, graph.output):
            vi.CopyFrom(saved)


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every value whose shape inference knows all dims."""
    inferred = _infer(model)
    if inferred is None:
        return {}
    g = inferred.graph
    out: dict[str, tuple[int, ...]] = {}
    for vi in [*g.value_info, *g.input, *g.output]:
        dims = _dims(vi)
        if dims is not None and all(d is not None for d in dims):
            out[vi.name] = tuple(int(d) for d in dims if d is not None)
    return out


def _fold_pass(graph: onnx.GraphProto, consts: dict[str, np.ndarray], static: dict[str, tuple[int, ...]],
               opset: int) -> bool:
    """One pass in file order: evaluate what can be, resolve constant Wheres. A node
    reading a value folded in this pass whose output size inference did not know waits
    for the next pass (inference then knows it, for the size limit)."""
    kept: list[onnx.NodeProto] = []
    changed = False
    fresh: set[str] = set()
    for node in graph.node:
        unsized = any(o not in static for o in node.output if o)
        values = None if unsized and fresh.intersection(node.input) else _evaluate(node, consts, static, opset)
        if values is None:
            where = _constant_where(node, consts, static)
            kept.append(where or node)
            changed = changed or where is not None
            continue
        for out, value in zip(node.output, values):
            if out:
                graph.initializer.append(numpy_helper.from_array(value, out))
                consts[out] = value
                fresh.add(out)
        changed = True
    if changed:
        del graph.node[:]
        graph.node.extend(kept)
    return changed


def _evaluate(node: onnx.NodeProto, consts: dict[str, np.ndarray], static: dict[str, tuple[int, ...]],
              opset: int) -> list[np.ndarray] | None:
    """The node's output values if the import can know them, else None."""
    if node.domain not in ("", "ai.onnx") or node.op_type in _NEVER_EVALUATED:
        return None
    if node.op_type in ("Shape", "Size"):
        src = node.input[0]
        shape = consts[src].shape if src in consts else static.get(src)
        if shape is None:
            return None
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), np.int64)]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        return [np.array(shape[attrs.get("start", 0):attrs.get("end")], np.int64)]
    if not all(i in consts for i in node.input if i):
        return None
    if any(int(np.prod(static[o], dtype=np.float64)) > MAX_FOLDED_ELEMENTS for o in node.output if o in static):
        return None
    if node.op_type == "Constant" and [a.name for a in node.attribute] == ["value"]:
        return [numpy_helper.to_array(node.attribute[0].t)]   # what exporters write most: no evaluator needed
    feeds = {i: consts[i] for i in node.input if i}
    try:
        # a one-node model, not the node alone: the evaluator then takes the operator's version
        # of the model's opset (a NodeProto alone gets the newest: Unsqueeze's axes attribute refused)
        inputs = [onnx.helper.make_tensor_value_info(i, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                  for i, v in feeds.items()]
        graph = onnx.helper.make_graph([node], "fold", inputs, [onnx.ValueInfoProto(name=o) for o in node.output if o])
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        values = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - no implementation, a type or an op it refuses: the node stays for the importer
        return None
    values = [np.asarray(v) for v in values]
    if any(v.dtype == object for v in values):
        return None
    return values


def _constant_where(node: onnx.NodeProto, consts: dict[str, np.ndarray],
                    static: dict[str, tuple[int, ...]]) -> onnx.NodeProto | None:
    """Identity of the operand a constant, uniform ``Where`` condition picks (when it
    already has the output's shape), else None."""
    if node.op_type != "Where" or node.input[0] not in consts or consts[node.input[0]].size == 0:
        return None
    cond = consts[node.input[0]]
    if not (cond.all() or not cond.any()):
        return None
    pick = node.input[1] if cond.all() else node.input[2]
    if pick not in static or static.get(node.output[0]) != static[pick]:
        return None
    return onnx.helper.make_node("Identity", [pick], list(node.output), name=node.name)


def _inline_constant_ifs(graph: onnx.GraphProto, consts: dict[str, np.ndarray], origin: SourceIndex) -> bool:
    """Replace each ``If`` with a constant condition by the nodes of its branch."""
    nodes: list[onnx.NodeProto] = []
    changed = False
    taken = _all_names(graph)
    for node in graph.node:
        cond = consts.get(node.input[0]) if node.op_type == "If" else None
        if cond is None or cond.size != 1:
            nodes.append(node)
            continue
        branch = next(onnx.helper.get_attribute_value(a) for a in node.attribute
                      if a.name == ("then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"))
        source = origin.get(tuple(node.output))
        inlined = _branch_nodes(graph, consts, node, branch, taken)
        for n in inlined:
            if source is not None:
                origin[tuple(n.output)] = source
        nodes += inlined
        changed = True
    if changed:
        del graph.node[:]
        graph.node.extend(nodes)
    return changed


def _branch_nodes(graph: onnx.GraphProto, consts: dict[str, np.ndarray], if_node: onnx.NodeProto,
                  branch: onnx.GraphProto, taken: set[str]) -> list[onnx.NodeProto]:
    """The branch's nodes with the names it defines made unique in ``graph`` (its
    initializers moved to ``graph``), then one Identity per output of the If."""
    prefix = f"{if_node.name or if_node.output[0]}/"
    defined = [i.name for i in branch.initializer] + [o for n in branch.node for o in n.output if o]
    rename: dict[str, str] = {}
    for old in defined:
        new, k = prefix + old, 1
        while new in taken:
            new, k = f"{prefix}{old}_{k}", k + 1
        rename[old] = new
        taken.add(new)
    for init in branch.initializer:
        moved = onnx.TensorProto()
        moved.CopyFrom(init)
        moved.name = rename[init.name]
        graph.initializer.append(moved)
        consts[moved.name] = numpy_helper.to_array(moved)
    out: list[onnx.NodeProto] = []
    for n in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        _rename_refs(copy, rename)
        copy.output[:] = [rename.get(o, o) for o in copy.output]
        copy.name = prefix + (n.name or n.output[0])
        out.append(copy)
    for vi, result in zip(branch.output, if_node.output):
        if result:
            out.append(onnx.helper.make_node("Identity", [rename.get(vi.name, vi.name)], [result],
                                             name=f"{prefix}{result}"))
    return out


def _rename_refs(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    """Rename the values ``node`` reads, in its subgraphs too (they may read the branch's),
    but not a name a subgraph defines again (it shadows the branch's there)."""
    node.input[:] = [rename.get(i, i) for i in node.input]
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            own = {i.name for i in sub.initializer} | {i.name for i in sub.input} | \
                {o for n in sub.node for o in n.output}
            visible = {k: v for k, v in rename.items() if k not in own}
            for inner in sub.node:
                _rename_refs(inner, visible)
            for vi in sub.output:
                vi.name = visible.get(vi.name, vi.name)


def _all_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name in ``graph`` and its subgraphs."""
    names = {v.name for v in [*graph.input, *graph.output, *graph.value_info]} | {i.name for i in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                names |= _all_names(sub)
    return names


def _reads(node: onnx.NodeProto) -> set[str]:
    """The values a node reads, its subgraphs' outer-scope reads included."""
    names = set(node.input)
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in sub.node:
                names |= _reads(inner)
            names.update(vi.name for vi in sub.output)
    return names


def _remove_dead(graph: onnx.GraphProto) -> None:
    """Drop nodes whose outputs nothing reads, then initializers nothing reads."""
    live = {o.name for o in graph.output}
    kept: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if any(o in live for o in node.output if o):
            kept.append(node)
            live |= _reads(node)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    unused = {i.name for i in graph.initializer} - live
    inits = [i for i in graph.initializer if i.name not in unused]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    inputs = [vi for vi in graph.input if vi.name not in unused]   # IR < 4 lists initializers as inputs too
    del graph.input[:]
    graph.input.extend(inputs)


def _conflict(declared: tuple[int | None, ...], inferred: tuple[int | None, ...]) -> bool:
    return len(declared) != len(inferred) or any(
        d is not None and i is not None and d != i for d, i in zip(declared, inferred))


def _use_inferred_shapes(model: onnx.ModelProto, name: str) -> None:
    """Declared output and value_info shapes that inference contradicts give way to it,
    with a warning each (onnxruntime's lenient merge), the others stay; value_info of
    what folding made constant goes. A value_info contradicted only because a value it
    is computed from was (propagated by an earlier inference) changes without a warning
    of its own: the warning names where the disagreement starts."""
    graph = model.graph
    consts = {i.name for i in graph.initializer}
    kept = [vi for vi in graph.value_info if vi.name not in consts]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    inferred = _infer(model)
    if inferred is None:
        return
    found = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output] if _dims(vi) is not None}
    conflicts: dict[str, tuple[onnx.ValueInfoProto, tuple[int | None, ...], tuple[int | None, ...]]] = {}
    for vi in [*graph.output, *graph.value_info]:
        dims, seen = _dims(vi), _dims(found[vi.name]) if vi.name in found else None
        if dims is not None and seen is not None and _conflict(dims, seen):
            conflicts[vi.name] = (vi, dims, seen)
    producers = {o: n for n in graph.node for o in n.output}
    outputs = {o.name for o in graph.output}
    for value, (vi, dims, seen) in conflicts.items():
        derived = value in producers and any(i in conflicts for i in producers[value].input)
        if value in outputs or not derived:
            kind = "output" if value in outputs else "value_info"
            warnings.warn(f"{name}: {kind} {value!r} is declared {_text(dims)} but its inputs make it "
                          f"{_text(seen)}; using the inferred shape (as onnxruntime does)", ONNXShapeWarning,
                          stacklevel=2)
        vi.type.tensor_type.shape.CopyFrom(found[value].type.tensor_type.shape)


def _bodies(graph: onnx.GraphProto):
    """(node, body) for every Loop / If / Scan body under ``graph``, nested ones too."""
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else \
                list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else []
            for sub in subs:
                yield node, sub
                yield from _bodies(sub)


def free_body_shapes(model: onnx.ModelProto, name: str, cause: str) -> bool:
    """After ONNX's strict inference failed with ``cause``: a body's declared output or
    value_info shape that inference contradicts fails it for the whole model, where
    onnxruntime merges leniently (a warning) and runs it. The declared shapes of every
    Loop / If / Scan body (not their types, not their inputs) are set aside in ``model``
    with one warning, for inference to say what they are; False when there were none (the
    caller then reports ``cause``)."""
    freed = []
    for node, body in _bodies(model.graph):
        for vi in [*body.output, *body.value_info]:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                vi.type.tensor_type.ClearField("shape")
                freed.append(f"{node.op_type} {node.name or node.output[0]!r}: {vi.name!r}")
    if freed:
        shown = ", ".join(freed[:4]) + (f" and {len(freed) - 4} more" if len(freed) > 4 else "")
        first = cause.splitlines()[0] if cause else "failed"
        warnings.warn(f"{name}: ONNX shape inference fails inside a subgraph ({first}); the declared "
                      f"shapes of {shown} are set aside and inferred (as onnxruntime merges them)",
                      ONNXShapeWarning, stacklevel=3)
    return bool(freed)


def _text(dims: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
