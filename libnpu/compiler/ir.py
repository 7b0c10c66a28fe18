"""Graph IR shared by the importers, the quantizer and the lowering to chip tasks.

Conventions (fixed, so that lowering is a straightforward walk):
- Layout is NHWC for 4-D activations. Conv weights are OHWI (``[Cout, KH, KW, Cin/groups]``),
  depthwise weights ``[1, KH, KW, Cin*multiplier]``, fully-connected weights ``[N, K]``.
- Op type names and semantics follow TFLite builtin ops (``CONV_2D``, ``ADD``...). In an
  int8 graph every op means what the TFLite int8 reference kernel computes, given the
  quantization parameters on its tensors. The operators, their attributes and every
  compiler stage's rule for them are declared in ``compiler.ops`` (``compiler.registry``).
- Padding is explicit: ``pads = (top, bottom, left, right)`` (TFLite SAME is resolved
  at import). Fused activations are ``"NONE" | "RELU" | "RELU6" | "RELU_N1_TO_1"``.
- An op input named ``""`` is an absent optional input (e.g. a conv without bias).
- State carried between calls (TFLite resource variables, ONNX state pairs) is a
  :class:`State`: a tensor the graph reads at the start of a call (defined like an input,
  but not one the user feeds) and the tensor whose value it holds for the next call.
"""
from __future__ import annotations

import copy
import heapq
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dynamic_outputs import DYNAMIC_OUTPUTS
from . import registry

__all__ = ["IRError", "EmptyModelError", "require_data", "QuantParams", "Tensor", "Op", "SourceOp", "State", "Graph",
           "DTYPES", "ACTIVATIONS", "SOURCE_OUTPUT_NAMES"]

#: Graph metadata: the source model's output names whose graph output is named otherwise
#: (an ONNX output made by an Identity, or transposed back to NCHW) -> the graph's name.
SOURCE_OUTPUT_NAMES = "source_output_names"
DTYPES = ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


class IRError(ValueError):
    """The graph is malformed or an operation on it is invalid."""


class EmptyModelError(IRError):
    """A model with nothing to run: an empty file, or no operators or no outputs."""


def require_data(data: bytes, name: str) -> None:
    """Refuse an empty model file before a parser reads it as a valid empty message."""
    if not data:
        raise EmptyModelError(f"{name}: empty model file (0 bytes)")


def zero_point_error(dtype: str, zero_point: np.ndarray) -> str:
    """Why ``zero_point`` cannot quantize a ``dtype`` tensor ("" when it can): a zero point
    outside the integer type's range (LiteRT clamps it; the chip refuses the job)."""
    if np.dtype(dtype).kind not in "iu":
        return ""
    info = np.iinfo(dtype)
    zero_point = np.asarray(zero_point)
    outside = zero_point[(zero_point < info.min) | (zero_point > info.max)]
    return f"zero point {int(outside[0])} outside {dtype}'s range [{info.min}, {info.max}]" if outside.size else ""


@dataclass
class QuantParams:
    """Affine quantization: ``real = scale * (q - zero_point)``.

    ``scale``/``zero_point`` have one entry (per-tensor) or one per slice along ``axis``
    (per-channel).
    """
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0

    def __post_init__(self) -> None:
        self.scale = np.atleast_1d(np.asarray(self.scale, np.float32))
        self.zero_point = np.atleast_1d(np.asarray(self.zero_point, np.int64))
        if self.scale.ndim != 1 or self.scale.shape != self.zero_point.shape:
            raise IRError(f"quantization: scale {self.scale.shape} and zero point "
                          f"{self.zero_point.shape} must be 1-D of equal length")
        if self.scale.size == 0 or not np.all(self.scale > 0) or not np.all(np.isfinite(self.scale)):
            raise IRError("quantization: scales must be finite and > 0")

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1

    def broadcast_shape(self, rank: int) -> tuple[int, ...]:
        """Shape to reshape scale/zero point to so they broadcast over a tensor of ``rank``."""
        if not self.per_channel:
            return (1,) * rank
        return tuple(self.scale.size if d == self.axis else 1 for d in range(rank))

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        shape = self.broadcast_shape(q.ndim)
        return (q.astype(np.float32) - self.zero_point.reshape(shape).astype(np.float32)) \
            * self.scale.reshape(shape)

    def quantize(self, x: np.ndarray, dtype: str = "int8") -> np.ndarray:
        info = np.iinfo(dtype)
        shape = self.broadcast_shape(x.ndim)
        q = np.round(x / self.scale.reshape(shape))
        if q.dtype == np.float32 and info.bits <= 16:
            # in float32, not float64 (a third of the escalation's simulated runs): exact, as an
            # integer under 2**24 plus a zero point is, and a larger one clips alike
            q += self.zero_point.reshape(shape).astype(np.float32)
        else:
            q = q + self.zero_point.reshape(shape)
        return np.clip(q, info.min, info.max).astype(dtype)

    def snap(self, x: np.ndarray, dtype: str = "int8") -> np.ndarray:
        """``dequantize(quantize(x, dtype))``: the value ``x`` stored as ``dtype`` reads back as.
        For float32 ``x`` on a grid of 16 bits or less it stays in float32, in one buffer (the
        float simulation snaps every op output: a few hundred runs an escalating compile),
        the same values: the integers it would store are exact in float32."""
        info = np.iinfo(dtype)
        if x.dtype != np.float32 or info.bits > 16 or not x.ndim:
            return self.dequantize(self.quantize(x, dtype))
        shape = self.broadcast_shape(x.ndim)
        q = np.divide(x, self.scale.reshape(shape))
        np.round(q, out=q)
        zero = self.zero_point.reshape(shape).astype(np.float32)
        q += zero
        np.clip(q, info.min, info.max, out=q)
        if np.isnan(q).any():       # what a NaN stores as is the integer cast's to say
            return self.dequantize(self.quantize(x, dtype))
        q -= zero
        q *= self.scale.reshape(shape)
        return q

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, QuantParams) and self.axis == other.axis
                and np.array_equal(self.scale, other.scale)
                and np.array_equal(self.zero_point, other.zero_point))


@dataclass
class Tensor:
    """A value in the graph: activation (``data is None``) or constant."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    quant: QuantParams | None = None
    data: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        if self.dtype not in DTYPES:
            raise IRError(f"tensor {self.name!r}: unsupported dtype {self.dtype!r}")
        if any(d < 0 for d in self.shape):
            raise IRError(f"tensor {self.name!r}: dynamic or negative shape {self.shape}")
        if self.data is not None:
            self.data = np.asarray(self.data, dtype=self.dtype)
            if self.data.shape != self.shape:
                raise IRError(f"tensor {self.name!r}: data shape {self.data.shape} != {self.shape}")
        if self.quant is not None and (why := zero_point_error(self.dtype, self.quant.zero_point)):
            raise IRError(f"tensor {self.name!r}: {why}")
        if self.quant is not None and self.quant.per_channel:
            if not 0 <= self.quant.axis < len(self.shape) or \
                    self.shape[self.quant.axis] != self.quant.scale.size:
                raise IRError(f"tensor {self.name!r}: {self.quant.scale.size} channel scales "
                              f"do not match axis {self.quant.axis} of shape {self.shape}")

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass
class Op:
    """One operation: TFLite-style ``type``, input/output tensor names, attributes."""
    type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self) -> None:
        self.inputs = list(self.inputs)
        self.outputs = list(self.outputs)
        if not self.name:
            self.name = self.outputs[0] if self.outputs else self.type

    def describe(self) -> str:
        return f"{self.type} node {self.name!r}"


@dataclass
class SourceOp:
    """One operator of the source model and what the import made of it: the IR ops it
    became (none when folded at import time), or why it became a host call."""
    index: int
    op: str
    ir_ops: list[Op] = field(default_factory=list)
    reason: str = ""          # non-empty: not importable for the chip (a HOST op stands in)


@dataclass
class State:
    """A variable kept between calls: the graph reads it as tensor ``input`` (its value at
    the start of a call) and leaves tensor ``output``'s value in it for the next call
    (``output == input``: the call does not change it). ``initial``: its bytes before
    the first call and after a reset, in ``input``'s dtype and shape."""
    name: str
    input: str
    output: str
    initial: np.ndarray



def stable_order(deps: list[set[int]]) -> tuple[list[int], list[int], list[list[int]]]:
    """Kahn's order of items ``0..n-1``, each after the items in ``deps[i]``, the given order
    kept where the dependencies allow (a heap of the ready ones, lowest index first): the
    order, each item's count of dependencies never met (non-zero only on or behind a
    cycle, which leaves the order short) and each item's readers."""
    pending = [len(d) for d in deps]
    readers: list[list[int]] = [[] for _ in deps]
    for index, d in enumerate(deps):
        for before in d:
            readers[before].append(index)
    ready = [i for i, n in enumerate(pending) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for reader in readers[i]:
            pending[reader] -= 1
            if pending[reader] == 0:
                heapq.heappush(ready, reader)
    return order, pending, readers

class Graph:
    """A dataflow graph: tensors by name, ops (kept in topological order), I/O names."""

    def __init__(self, name: str = "model") -> None:
        self.name = name
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.states: list[State] = []
        self.metadata: dict[str, Any] = {}

    # construction -------------------------------------------------------------------
    def add_tensor(self, tensor: Tensor) -> Tensor:
        if tensor.name in self.tensors:
            raise IRError(f"duplicate tensor name {tensor.name!r}")
        self.tensors[tensor.name] = tensor
        return tensor

    def add_const(self, name: str, data: np.ndarray, quant: QuantParams | None = None) -> Tensor:
        data = np.asarray(data)
        return self.add_tensor(Tensor(self.unique_name(name), data.shape, str(data.dtype), quant, data))

    def add_op(self, op: Op) -> Op:
        for n in op.inputs + op.outputs:
            if n and n not in self.tensors:
                raise IRError(f"{op.describe()}: unknown tensor {n!r}")
        self.ops.append(op)
        return op

    def unique_name(self, base: str) -> str:
        if base not in self.tensors:
            return base
        i = 1
        while f"{base}_{i}" in self.tensors:
            i += 1
        return f"{base}_{i}"

    # queries ------------------------------------------------------------------------
    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise IRError(f"unknown tensor {name!r}") from None

    def producers(self) -> dict[str, Op]:
        return {o: op for op in self.ops for o in op.outputs}

    def op_lookup(self) -> tuple[dict[str, list[Op]], dict[str, list[Op]], dict[str, list[Op]]]:
        """The ops by each of their outputs, by each ``"<prefix>/"`` an output starts with,
        and by name (lists in op order), in one walk: a search of the ops for each of many
        names is quadratic (an unrolled RNN's thousands of layers)."""
        outputs: dict[str, list[Op]] = defaultdict(list)
        prefixes: dict[str, list[Op]] = defaultdict(list)
        named: dict[str, list[Op]] = defaultdict(list)
        for op in self.ops:
            named[op.name].append(op)
            for o in dict.fromkeys(op.outputs):
                outputs[o].append(op)
            for p in dict.fromkeys(o[:i] for o in op.outputs for i, c in enumerate(o) if c == "/"):
                prefixes[p].append(op)
        return dict(outputs), dict(prefixes), dict(named)

    def consumers(self) -> dict[str, list[Op]]:
        result: dict[str, list[Op]] = defaultdict(list)
        for op in self.ops:
            for i in op.inputs:
                if i:
                    result[i].append(op)
        return result

    def results(self) -> set[str]:
        """Tensors whose values leave a call: the outputs and the states' new values
        (a rewrite must keep them)."""
        return set(self.outputs) | {s.output for s in self.states}

    def make_stateful(self, pairs: dict[str, str]) -> None:
        """Turn input/output pairs into states (as OpenVINO's MakeStateful does): for each
        ``input -> output``, the input is no longer fed by the user but holds the output's
        value from the previous call, and the output is no longer returned. Each state
        starts (and resets) at zero: the zero point of a quantized tensor. ``output`` may be
        the source model's name of the output (:data:`SOURCE_OUTPUT_NAMES`)."""
        aliases = self.metadata.get(SOURCE_OUTPUT_NAMES, {})
        for source, result in pairs.items():
            result = result if result in self.outputs else aliases.get(result, result)
            if source not in self.inputs:
                raise IRError(f"state {source!r}: not a graph input (inputs: {self.inputs})")
            if result not in self.outputs:
                raise IRError(f"state {source!r}: {result!r} is not a graph output (outputs: {self.outputs})")
            t = self.tensors[source]
            initial = np.zeros(t.shape, t.dtype)
            if t.quant is not None:
                initial[...] = t.quant.zero_point[0]
            self.inputs.remove(source)
            self.outputs.remove(result)
            self.states.append(State(source, source, result, initial))
        self.validate()

    def stateless(self) -> Graph:
        """A copy whose states are plain inputs and outputs again (after the others, in
        state order): one call of it is one step, the caller carries the state."""
        g = self.copy()
        g.inputs += [s.input for s in g.states]
        g.outputs += [s.output for s in g.states if s.output not in g.outputs]
        g.states = []
        g.validate()
        return g

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for op in self.ops:
            counts[op.type] += 1
        return dict(counts)

    def op_macs(self, op: Op) -> int:
        """Multiply-accumulates of one op (as its operator counts them; 0 if it does not)."""
        macs = registry.get(op.type, "macs")
        return int(macs(self, op)) if macs is not None else 0

    def macs(self) -> int:
        """Total multiply-accumulates of one inference."""
        return sum(self.op_macs(op) for op in self.ops)

    def constants(self) -> Iterator[Tensor]:
        return (t for t in self.tensors.values() if t.is_constant)

    # maintenance --------------------------------------------------------------------
    def toposort(self) -> None:
        """Reorder ``ops`` topologically (stable: keeps the given order where it can)."""
        producer = {}
        for idx, op in enumerate(self.ops):
            for o in op.outputs:
                if o in producer:
                    raise IRError(f"tensor {o!r} produced by two ops")
                producer[o] = idx
        deps = [{producer[i] for i in op.inputs if i in producer} for op in self.ops]
        order, pending, _ = stable_order(deps)
        if len(order) != len(self.ops):
            stuck = [self.ops[i].describe() for i, n in enumerate(pending) if n > 0][:3]
            raise IRError(f"graph has a cycle through {stuck}")
        self.ops = [self.ops[i] for i in order]

    def prune(self) -> None:
        """Drop ops whose outputs nobody uses and tensors no op or I/O references (a kept
        op keeps all its outputs: a host op writes the ones nobody reads too)."""
        live = set(self.outputs) | {s.output for s in self.states}
        kept = []
        for op in reversed(self.ops):
            if any(o in live for o in op.outputs):
                kept.append(op)
                live.update(i for i in op.inputs if i)
                live.update(op.outputs)
        self.ops = kept[::-1]
        live.update(self.inputs)
        live.update(s.input for s in self.states)
        self.tensors = {n: t for n, t in self.tensors.items() if n in live}

    def replace_uses(self, old: str, new: str) -> None:
        """Make every consumer (and graph output) of ``old`` read ``new`` instead."""
        for op in self.ops:
            op.inputs = [new if i == old else i for i in op.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]
        for s in self.states:
            s.output = new if s.output == old else s.output

    def validate(self) -> None:
        """Check references, single producers, topological order and I/O sanity."""
        defined = set(self.inputs) | {s.input for s in self.states} | {t.name for t in self.constants()}
        for n in self.inputs:
            t = self.tensor(n)
            if t.is_constant:
                raise IRError(f"graph input {n!r} is a constant")
        self._validate_states()
        for op in self.ops:
            operator = registry.find(op.type)
            if operator is None:
                raise IRError(f"{op.describe()}: unknown op type")
            missing = [a for a in operator.attrs if a not in op.attrs]
            if missing:
                raise IRError(f"{op.describe()}: missing attributes {missing}")
            for i in op.inputs:
                if i and i not in defined:
                    if i in self.tensors:
                        raise IRError(f"{op.describe()}: input {i!r} used before it is produced")
                    raise IRError(f"{op.describe()}: unknown input {i!r}")
            for o in op.outputs:
                if o in defined:
                    raise IRError(f"{op.describe()}: output {o!r} already defined")
                if o not in self.tensors:
                    raise IRError(f"{op.describe()}: unknown output {o!r}")
                defined.add(o)
        for n in self.outputs:
            if n not in defined:
                raise IRError(f"graph output {n!r} is never produced")
        for s in self.states:
            if s.output not in defined:
                raise IRError(f"state {s.name!r}: its new value {s.output!r} is never produced")

    def _validate_states(self) -> None:
        names, inputs = set(), set(self.inputs)
        for s in self.states:
            t = self.tensor(s.input)
            if s.name in names:
                raise IRError(f"state {s.name!r} declared twice")
            names.add(s.name)
            if s.input in inputs or t.is_constant:
                raise IRError(f"state {s.name!r}: tensor {s.input!r} is also a graph input or a constant")
            inputs.add(s.input)
            out = self.tensor(s.output)
            if (out.shape, out.dtype) != (t.shape, t.dtype):
                raise IRError(f"state {s.name!r}: new value {s.output!r} is {out.shape} {out.dtype}, "
                              f"the state is {t.shape} {t.dtype}")
            if s.initial.dtype != np.dtype(t.dtype) or s.initial.shape != t.shape:
                raise IRError(f"state {s.name!r}: initial value is {s.initial.shape} {s.initial.dtype}, "
                              f"the state is {t.shape} {t.dtype}")

    def check_runnable(self) -> None:
        """Raise :class:`EmptyModelError` unless the graph has operators and outputs.

        An empty or truncated ONNX file parses as a valid message with neither, and would
        otherwise compile to a loadable that runs nothing and "succeeds".
        """
        missing = [what for what, present in (("operators", self.ops), ("outputs", self.outputs)) if not present]
        if missing:
            raise EmptyModelError(f"{self.name}: the model has no {' and no '.join(missing)} "
                                  "(empty or truncated file?)")

    def copy(self) -> Graph:
        """Deep copy (constant arrays included)."""
        return copy.deepcopy(self)

    def summary(self) -> str:
        lines = [f"graph {self.name}: {len(self.ops)} ops, {len(self.tensors)} tensors"]
        for n in self.inputs:
            t = self.tensors[n]
            lines.append(f"  input  {n} {list(t.shape)} {t.dtype}")
        for op in self.ops:
            outs = ", ".join(f"{o}{list(self.tensors[o].shape)}" for o in op.outputs)
            lines.append(f"  {op.type:<20} -> {outs}")
        dynamic = self.metadata.get(DYNAMIC_OUTPUTS, {})      # -1: each run decides (compiler.dynamic_shapes)
        for n in self.outputs:
            t = self.tensors[n]
            lines.append(f"  output {n} {dynamic[n]['signature'] if n in dynamic else list(t.shape)} {t.dtype}")
        for s in self.states:
            t = self.tensors[s.input]
            lines.append(f"  state  {s.name} {list(t.shape)} {t.dtype}: {s.input} -> {s.output}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self.ops)} ops {self.op_counts()}>"


def same_pads(in_size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int, int]:
    """TFLite SAME padding: (output size, pad before, pad after) along one axis."""
    eff = (kernel - 1) * dilation + 1
    out = (in_size + stride - 1) // stride
    total = max((out - 1) * stride + eff - in_size, 0)
    return out, total // 2, total - total // 2


def strided_slice_masks(attrs: dict[str, Any]) -> tuple[int, int]:
    """``(end_mask, shrink_axis_mask)`` that make TFLite's STRIDED_SLICE, given the IR's
    resolved ``begin``/``end``/``strides``, produce ``new_shape``: the end mask marks
    "through index 0" ends, the shrink mask the length-1 axes ``new_shape`` drops."""
    begin, end, strides = attrs["begin"], attrs["end"], attrs["strides"]
    end_mask = sum(1 << d for d, (e, s) in enumerate(zip(end, strides)) if e < 0 and s < 0)
    lengths = [len(range(b, e, s)) if not (e < 0 and s < 0) else b // -s + 1
               for b, e, s in zip(begin, end, strides)]
    new_shape, shrink, j = list(attrs["new_shape"]), 0, 0
    for d, n in enumerate(lengths):
        if j < len(new_shape) and new_shape[j] == n:
            j += 1
        elif n == 1:
            shrink |= 1 << d
        else:
            break
    else:
        if j == len(new_shape):
            return end_mask, shrink
    raise IRError(f"output shape {tuple(new_shape)} does not match the slice lengths {lengths}")
