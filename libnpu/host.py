"""Host execution of the operators the chip lacks (the CPU side of a partitioned model).

The compiler places each operator of a model on the NPU or the CPU
(:mod:`libnpu.compiler.placement`); a CPU operator becomes a host call
(:class:`libnpu.loadable.HostCall`)
carrying what the host needs to run it:

- ``kind="tflite"``: a sub-model cut from the source ``.tflite`` holding the original
  operators (builtin code, options, custom options; a run of consecutive CPU operators
  makes one), run by LiteRT's own CPU kernels on the reference resolver
  (``BUILTIN_REF``), so an int8 model stays byte-exact;
- ``kind="onnx"``: an ONNX model of the nodes (a run of CPU nodes makes one,
  :mod:`libnpu.compiler.host_groups`), run by the compiler's numpy float reference when
  the compiler imports them all (the chip only lacks a kernel), else by onnxruntime's CPU
  kernels (one session) when onnxruntime is installed; tensors keep their ONNX types
  (an int64 index, a bool condition crosses the boundary as it is);
- either kind, when its operator is a custom op (TFLite ``CUSTOM:<code>``) or an ONNX
  op type with a host implementation registered by :func:`register_host_op`: that
  Python function, on float values (a TFLite custom op without one runs on LiteRT's
  default resolver when it knows the op).

Tensors cross the boundary as the model stores them: a quantized tensor is dequantized
to float for a float kernel and quantized back on the way out (TFLite rounding).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.ir import IRError
from libnpu.loadable import HostCall

# The host's runtimes (LiteRT's interpreter, onnx, onnxruntime, tflite, and the compiler's
# ONNX import, which needs onnx: 0.3-0.7 s each) are imported inside the kernels, when a
# host call of their kind first runs: ``import libnpu`` (which imports this module) stays
# fast for programs without CPU operators.

__all__ = ["HostCall", "HostOpError", "Boundary", "HostKernel", "register_host_op", "unregister_host_op",
           "host_op", "kernel_for", "convert"]


class HostOpError(RuntimeError):
    """The host cannot run an operator placed on the CPU (no implementation, or it failed)."""


@dataclass(frozen=True)
class Boundary:
    """How a tensor is stored on one side of a host call."""
    dtype: str
    scale: float | None = None
    zero_point: int = 0

    @property
    def quantized(self) -> bool:
        return self.scale is not None and np.dtype(self.dtype).kind in "iu"


FLOAT = Boundary("float32")

_HOST_OPS: dict[str, Callable[..., Any]] = {}
_lock = threading.Lock()


def register_host_op(name: str, fn: Callable[..., Any]) -> None:
    """Run operator ``name`` on the host with ``fn`` when the chip lacks it.

    ``name`` is a TFLite custom op's code (``"MyOp"`` for ``CUSTOM:MyOp``) or an ONNX op
    type (``"CumSum"``). ``fn(*inputs, **attributes)`` gets the operator's inputs as
    float32 numpy arrays (dequantized when the model stores them quantized) and, for an
    ONNX node, its attributes by name; it returns one array or a sequence of arrays, one
    per output, which the runtime quantizes to the output tensors' types. Registering a
    name again replaces the function.
    """
    if not callable(fn):
        raise TypeError(f"host op {name!r}: {fn!r} is not callable")
    with _lock:
        _HOST_OPS[name] = fn


def unregister_host_op(name: str) -> None:
    """Forget the implementation registered under ``name`` (nothing if there is none)."""
    with _lock:
        _HOST_OPS.pop(name, None)


def host_op(name: str) -> Callable[..., Any] | None:
    """The function registered under ``name``, or None."""
    return _HOST_OPS.get(name)


_BOUNDS: dict[str, tuple[float, float]] = {}     # an integer dtype's range (np.iinfo costs a few us a call)


def _bounds(dtype: str) -> tuple[float, float]:
    if dtype not in _BOUNDS:
        info = np.iinfo(dtype)
        _BOUNDS[dtype] = (float(info.min), float(info.max))
    return _BOUNDS[dtype]


def convert(value: np.ndarray, src: Boundary, dst: Boundary) -> np.ndarray:
    """``value`` stored as ``src``, stored as ``dst`` (dequantize / quantize as needed).

    A host call's fixed cost on a step model's small tensors is these numpy calls, not
    their arithmetic: one float32 temporary updated in place. TFLite rounds half away from
    zero: ``trunc(t + copysign(0.5, t))`` is ``sign(t) * floor(|t| + 0.5)`` to the bit
    (:func:`libnpu.tensors.quantize`)."""
    if src == dst:
        return value
    if src.quantized:
        real = value.astype(np.float32)
        real -= np.float32(src.zero_point)
        real *= np.float32(src.scale)
    else:
        real = np.asarray(value, np.float32)
    if not dst.quantized:
        return real.astype(dst.dtype)
    assert dst.scale is not None
    scaled = np.divide(real, np.float32(dst.scale), out=np.empty(np.shape(real), np.float32))   # an array at rank 0 too
    scaled += np.copysign(np.float32(0.5), scaled)
    np.trunc(scaled, out=scaled)
    scaled += np.float32(dst.zero_point)
    low, high = _bounds(dst.dtype)
    np.clip(scaled, low, high, out=scaled)
    return scaled.astype(dst.dtype)


class HostKernel:
    """Runs one host call: ``run(values, sources, targets)`` with the values stored as
    ``sources`` (one :class:`Boundary` per input) and results stored as ``targets``."""

    inputs: list[Boundary]
    outputs: list[Boundary]
    reference_kernels = False      # LiteRT's reference kernels (an int8 call, byte for byte)

    def __init__(self, call: HostCall) -> None:
        self.call = call
        self._lock = threading.Lock()

    def compute(self, values: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def run(self, values: Sequence[np.ndarray], sources: Sequence[Boundary],
            targets: Sequence[Boundary]) -> list[np.ndarray]:
        if len(values) != len(self.inputs):
            raise HostOpError(f"{self.call.op}: {len(values)} inputs given, the host call takes {len(self.inputs)}")
        # np.asarray: arithmetic on a rank-0 array gives a numpy scalar, which onnxruntime refuses
        ins = [np.asarray(convert(np.asarray(v), s, b)) for v, s, b in zip(values, sources, self.inputs)]
        with self._lock:   # one interpreter per kernel; requests may run in several threads
            outs = self.compute(ins)
        if len(outs) != len(targets):
            raise HostOpError(f"{self.call.op}: {len(outs)} outputs computed, {len(targets)} expected")
        return [np.asarray(convert(np.asarray(o), b, t)) for o, b, t in zip(outs, self.outputs, targets)]


def _tflite_boundary(detail: dict) -> Boundary:
    scale, zero_point = detail.get("quantization", (0.0, 0))
    dtype = np.dtype(detail["dtype"]).name
    return Boundary(dtype, float(scale), int(zero_point)) if scale else Boundary(dtype)


def _tflite_model(model: bytes) -> Any:
    """The flatbuffer's root table (``tflite`` imported here: see the note on imports above)."""
    import tflite  # type: ignore[import-untyped]
    return tflite.Model.GetRootAsModel(model, 0)


def _all_float(model: bytes) -> bool:
    """Whether a LiteRT model has no quantized tensor in any subgraph (a float host call:
    escalation's CPU front end, a float model's fallback ops), read from the flatbuffer
    before any interpreter is built."""
    m = _tflite_model(model)
    for g in range(m.SubgraphsLength()):
        sg = m.Subgraphs(g)
        for t in range(sg.TensorsLength()):
            q = sg.Tensors(t).Quantization()
            if q is not None and q.ScaleLength() and q.ScaleAsNumpy().any():
                return False
    return True


class _LiteRTKernel(HostKernel):
    def __init__(self, call: HostCall) -> None:
        super().__init__(call)
        from ai_edge_litert.interpreter import Interpreter, OpResolverType  # type: ignore[import-untyped]
        failure = None
        # A quantized call: the reference kernels first (int8 byte-exact). A float one: no grid
        # to match byte for byte, LiteRT's default kernels (XNNPACK; the reference ones took
        # 8.4 ms for openwakeword's mel front end kept in float, 2.2M MACs, the default ones
        # 0.24 ms). Either way the other resolver next: the default one has more kernels
        # (e.g. mediapipe's Convolution2DTransposeBias custom op), the reference one prepares
        # what XNNPACK may refuse. One thread, as the chip's own host work.
        floats = _all_float(call.model)
        resolvers = (OpResolverType.AUTO, OpResolverType.BUILTIN_REF) if floats \
            else (OpResolverType.BUILTIN_REF, OpResolverType.AUTO)
        for resolver in resolvers:
            try:
                self.interpreter = Interpreter(model_content=call.model, num_threads=1,
                                               experimental_op_resolver_type=resolver)
                self.interpreter.allocate_tensors()
                break
            except (RuntimeError, ValueError) as exc:
                failure = failure or exc
        else:
            raise HostOpError(f"{call.op} (operator {call.source}): LiteRT cannot run it on the CPU: "
                              f"{str(failure).strip().splitlines()[0]}") from failure
        self.reference_kernels = resolver == OpResolverType.BUILTIN_REF and not floats
        self._in = self.interpreter.get_input_details()
        self._out = self.interpreter.get_output_details()
        self.inputs = [_tflite_boundary(d) for d in self._in]
        self.outputs = [_tflite_boundary(d) for d in self._out]

    def compute(self, values: list[np.ndarray]) -> list[np.ndarray]:
        it = self.interpreter
        for detail, value in zip(self._in, values):
            it.set_tensor(detail["index"], np.ascontiguousarray(value).reshape(detail["shape"]))
        it.invoke()
        return [it.get_tensor(d["index"]).copy() for d in self._out]


class _PythonKernel(HostKernel):
    def __init__(self, call: HostCall, fn: Callable[..., Any], arity: tuple[int, int],
                 attrs: dict[str, Any], constants: dict[int, np.ndarray] | None = None) -> None:
        super().__init__(call)
        self.fn, self.attrs, self.constants = fn, attrs, constants or {}
        self.inputs = [FLOAT] * arity[0]
        self.outputs = [FLOAT] * arity[1]

    def compute(self, values: list[np.ndarray]) -> list[np.ndarray]:
        args, feed = [], iter(values)
        for position in range(len(values) + len(self.constants)):   # constant operands at their places
            args.append(self.constants[position] if position in self.constants else next(feed))
        try:
            result = self.fn(*args, **self.attrs)
        except Exception as exc:
            raise HostOpError(f"host op {self.call.custom_name!r} raised {type(exc).__name__}: {exc}") from exc
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        return [np.asarray(o, np.float32) for o in outs]


class _FloatReferenceKernel(HostKernel):
    """An ONNX node the compiler imports but the chip cannot run: numpy float reference."""

    def __init__(self, call: HostCall, graph: Any) -> None:
        super().__init__(call)
        self.graph = graph
        self.interpreter = FloatInterpreter(graph)
        self.inputs = [FLOAT] * len(graph.inputs)
        self.outputs = [FLOAT] * len(graph.outputs)

    def compute(self, values: list[np.ndarray]) -> list[np.ndarray]:
        result = self.interpreter.run(dict(zip(self.graph.inputs, values)))
        return [result[n] for n in self.graph.outputs]


class _ConstantKernel(HostKernel):
    """An ONNX host model without inputs (a model output folded to a constant at import):
    evaluated once by onnx's reference evaluator, its values given on every run. Not
    imported for the float reference, whose import of it would make the same call again."""

    def __init__(self, call: HostCall, model: Any) -> None:
        super().__init__(call)
        from onnx.reference import ReferenceEvaluator  # lazy: it imports onnx (see above)
        self.values = [np.asarray(v) for v in ReferenceEvaluator(model).run(None, {})]
        self.inputs = []
        self.outputs = _onnx_boundaries(model.graph.output)

    def compute(self, values: list[np.ndarray]) -> list[np.ndarray]:
        return [v.copy() for v in self.values]


def _onnx_boundaries(values: Any) -> list[Boundary]:
    import onnx
    return [Boundary(onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name) for v in values]


def _onnx_kernel(call: HostCall) -> HostKernel:
    import onnx
    model = onnx.load_model_from_string(call.model)
    if not model.graph.input:
        return _ConstantKernel(call, model)
    if len(model.graph.node) > 1 and any(host_op(n.op_type) for n in model.graph.node):
        return _SplitKernel(call, model)
    node = model.graph.node[0]
    arity = (len([i for i in model.graph.input]), len(model.graph.output))
    fn = host_op(call.op) if len(model.graph.node) == 1 else None
    if fn is not None:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        initializers = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
        constants = {k: initializers[n] for k, n in enumerate(node.input) if n in initializers}
        return _PythonKernel(call, fn, arity, attrs, constants)
    from libnpu.compiler.onnx_import import import_onnx  # lazy: it imports onnx (see above)
    edges = [*model.graph.input, *model.graph.output]
    why = "some of its tensors have no static shape"
    if all(e.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in e.type.tensor_type.shape.dim)
           for e in edges):     # the float reference needs them
        try:
            graph = import_onnx(model, f"host:{call.op}")
            return _FloatReferenceKernel(call, graph)
        except IRError as exc:
            why = str(exc)
    try:
        return _OnnxRuntimeKernel(call, _onnx_boundaries(model.graph.input), _onnx_boundaries(model.graph.output))
    except ImportError:
        why += "; onnxruntime is not installed"
    raise HostOpError(f"{call.op} (node {call.source}) runs on the CPU, but the host has no implementation "
                      f"({why}); register one with libnpu.register_host_op({call.op!r}, fn)")


class _SplitKernel(HostKernel):
    """A host call of several ONNX nodes, some with a registered Python function: those
    run alone, each run of the other nodes as one model (one onnxruntime session)."""

    def __init__(self, call: HostCall, model: Any) -> None:
        super().__init__(call)
        import onnx
        graph = onnx.shape_inference.infer_shapes(model).graph
        known = {v.name: v for v in [*graph.value_info, *graph.input, *graph.output]}      # types and shapes
        self.names = [i.name for i in model.graph.input]
        self.inputs, self.outputs = _onnx_boundaries(model.graph.input), _onnx_boundaries(model.graph.output)
        self.results = [o.name for o in model.graph.output]
        runs: list[list[Any]] = []
        for node in model.graph.node:
            if host_op(node.op_type) or not runs or host_op(runs[-1][-1].op_type):
                runs.append([])
            runs[-1].append(node)
        constants = {i.name: i for i in model.graph.initializer}
        self.steps: list[tuple[HostKernel, list[str], list[str]]] = []
        for k, nodes in enumerate(runs):
            made = [o for n in nodes for o in n.output if o]
            later = {i for run in runs[k + 1:] for n in run for i in n.input} | set(self.results)
            ins = [i for i in dict.fromkeys(i for n in nodes for i in n.input) if i and i not in made
                   and i not in constants]
            outs = [o for o in made if o in later]

            def info(name: str) -> Any:
                return known.get(name) or onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
            sub = onnx.helper.make_graph(nodes, f"{graph.name}_{k}", [info(i) for i in ins], [info(o) for o in outs],
                                         [constants[i] for n in nodes for i in n.input if i in constants])
            part = onnx.helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)
            kernel = _onnx_kernel(HostCall("onnx", part.SerializeToString(), "+".join(n.op_type for n in nodes),
                                           call.source, call.reason))
            self.steps.append((kernel, ins, outs))

    def compute(self, values: list[np.ndarray]) -> list[np.ndarray]:
        env = dict(zip(self.names, zip(values, self.inputs)))      # name -> (value, how it is stored)
        for kernel, ins, outs in self.steps:
            results = kernel.run([env[i][0] for i in ins], [env[i][1] for i in ins], kernel.outputs)
            env.update(zip(outs, zip(results, kernel.outputs)))
        return [convert(env[n][0], env[n][1], b) for n, b in zip(self.results, self.outputs)]


class _OnnxRuntimeKernel(HostKernel):
    """ONNX nodes the compiler does not know: onnxruntime's CPU kernels, when installed."""

    def __init__(self, call: HostCall, inputs: list[Boundary], outputs: list[Boundary]) -> None:
        super().__init__(call)
        import onnxruntime  # type: ignore[import-untyped]
        try:
            self.session = onnxruntime.InferenceSession(call.model, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise HostOpError(f"{call.op} (node {call.source}): onnxruntime cannot run it: "
                              f"{str(exc).splitlines()[0]}") from exc
        self.names = [i.name for i in self.session.get_inputs()]
        self.inputs, self.outputs = inputs, outputs

    def compute(self, values: list[np.ndarray]) -> list[np.ndarray]:
        feeds = {n: np.asarray(v, b.dtype) for n, v, b in zip(self.names, values, self.inputs)}
        return [np.asarray(o) for o in self.session.run(None, feeds)]


def _tflite_kernel(call: HostCall) -> HostKernel:
    if not call.op.startswith("CUSTOM:"):
        return _LiteRTKernel(call)
    fn = host_op(call.custom_name)
    if fn is None:
        try:
            return _LiteRTKernel(call)       # LiteRT's default resolver knows some custom ops
        except HostOpError:
            raise HostOpError(f"custom op {call.custom_name!r} (operator {call.source}) runs on the CPU, but no "
                              f"host implementation is registered: libnpu.register_host_op({call.custom_name!r}, "
                              "fn)") from None
    m = _tflite_model(call.model)
    sg = m.Subgraphs(0)
    op = sg.Operators(0)
    attrs: dict[str, Any] = {}
    if op.CustomOptionsLength():
        attrs["custom_options"] = op.CustomOptionsAsNumpy().tobytes()
    return _PythonKernel(call, fn, (sg.InputsLength(), sg.OutputsLength()), attrs)


def kernel_for(call: HostCall) -> HostKernel:
    """A ready-to-run kernel for ``call`` (:class:`HostOpError` if the host cannot run it)."""
    if call.kind == "tflite":
        return _tflite_kernel(call)
    if call.kind == "onnx":
        return _onnx_kernel(call)
    raise HostOpError(f"{call.op}: unknown host call kind {call.kind!r}")
