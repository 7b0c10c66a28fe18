"""The ONNX side of the CPU fallback: a group of nodes as the one ONNX model a host call runs.

The ONNX importer hands each group of CPU nodes (:mod:`~libnpu.compiler.host_groups`)
here. The model written holds the nodes as they are (attributes, domains, subgraphs of
If / Loop / Scan), the constants they read (their subgraphs' outer-scope reads too), and
as inputs and outputs the tensors crossing the group's edge, with their ONNX element
types: an int64 index, a bool condition or a uint8 code stays what it is. The host runs
the model with onnxruntime (or the compiler's float reference when it imports every node,
:mod:`libnpu.host`).

Tensors the chip partitions exchange with a host call need static shapes (the memory
plan). Where ONNX shape inference cannot give one (operators of another domain, such as
onnxruntime's ``com.microsoft`` DynamicQuantizeLSTM, or a Loop's outputs),
:func:`probe_shapes` runs the model with onnxruntime on two different random inputs and
tells the shapes that change with the data (NonZero; :mod:`~libnpu.compiler.dynamic_shapes`
adds those its rule knows). Such a tensor cannot cross between the chip and the host: the
nodes reading it go to the CPU too, into the same host call; it leaves the host only as a
model output made per run (its dims -1 in the host model's output), and a model where it
still crosses (a chip operator or another host call needing it) is refused with a message
saying so.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .ir import IRError

__all__ = ["TensorType", "reads", "group_model", "probe_shapes"]

TensorType = tuple[tuple[int, ...], str]     # (shape, numpy dtype name)


def reads(node: onnx.NodeProto) -> list[str]:
    """The names ``node`` reads: its inputs, then the outer-scope names its subgraphs
    (If branches, Loop and Scan bodies, at any depth) read."""
    names = [n for n in node.input if n]
    for attr in node.attribute:
        for graph in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            names += _outer_reads(graph)
    return list(dict.fromkeys(names))


def _outer_reads(graph: onnx.GraphProto) -> list[str]:
    local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    names = []
    for node in graph.node:
        names += [n for n in reads(node) if n not in local]
        local.update(node.output)
    return names


def group_model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, TensorType],
                outputs: Mapping[str, TensorType], constants: Mapping[str, np.ndarray],
                source: onnx.ModelProto, name: str) -> bytes:
    """``nodes`` (in a valid order) as a model of their own: ``inputs`` and ``outputs``
    (name -> shape and dtype) are its graph inputs and outputs, ``constants`` the
    initializers it carries; opsets and IR version as ``source``'s."""
    def info(n: str, t: TensorType) -> onnx.ValueInfoProto:
        dims = [d if d >= 0 else None for d in t[0]]    # -1: decided per run (compiler.dynamic_shapes)
        return helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(t[1])), dims)
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in constants.items()]
    graph = helper.make_graph(list(nodes), name, [info(n, t) for n, t in inputs.items()],
                              [info(n, t) for n, t in outputs.items()], inits)
    model = helper.make_model(graph, opset_imports=list(source.opset_import), ir_version=source.ir_version)
    return model.SerializeToString()


def probe_shapes(model: onnx.ModelProto, names: Iterable[str], where: str) -> tuple[dict[str, TensorType], set[str]]:
    """The shapes and dtypes of ``names`` in ``model`` (static inputs), found by running
    it with onnxruntime on two random inputs, and those of ``names`` whose shape differs
    between the two (data-dependent: the first run's shape is given); :class:`IRError`
    when onnxruntime is missing or cannot run the model."""
    names = list(dict.fromkeys(names))
    try:
        import onnxruntime  # type: ignore[import-untyped]  # optional, and 0.5 s to import: only when needed
    except ImportError:
        raise IRError(f"{where}: ONNX cannot infer the shape of {', '.join(names)}, and onnxruntime, "
                      "which would find it, is not installed") from None
    probe = onnx.ModelProto.FromString(model.SerializeToString())
    declared = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in declared)
    try:
        session = onnxruntime.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        runs = []
        for seed in (0, 1):
            rng = np.random.default_rng(seed)
            feeds = {i.name: _random_input(rng, i) for i in session.get_inputs()}
            runs.append(session.run(names, feeds))
    except Exception as exc:  # onnxruntime raises its own exception types
        raise IRError(f"{where}: onnxruntime, run to find the shape of {', '.join(names)}, failed: "
                      f"{str(exc).strip().splitlines()[0]}") from exc
    found = {n: (tuple(int(d) for d in np.shape(a)), np.asarray(a).dtype.name) for n, a in zip(names, runs[0])}
    return found, {n for n, a, b in zip(names, *runs) if np.shape(a) != np.shape(b)}


def _random_input(rng: np.random.Generator, arg) -> np.ndarray:
    shape = [d if isinstance(d, int) else 1 for d in arg.shape]
    dtype = helper.tensor_dtype_to_np_dtype(getattr(onnx.TensorProto, _ORT_TYPES.get(arg.type, "FLOAT")))
    return rng.standard_normal(shape).astype(dtype)


_ORT_TYPES = {"tensor(float)": "FLOAT", "tensor(double)": "DOUBLE", "tensor(float16)": "FLOAT16",
              "tensor(int64)": "INT64", "tensor(int32)": "INT32", "tensor(int16)": "INT16", "tensor(uint16)": "UINT16",
              "tensor(int8)": "INT8", "tensor(uint8)": "UINT8",
              "tensor(bool)": "BOOL"}
