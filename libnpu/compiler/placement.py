"""The placement decision: which operators of a model the chip runs and which the host runs.

Decided once, here, and used by everything that splits a model: the compiler (the
chip's partitions become device tasks, the rest host calls, see :mod:`libnpu.host`),
``npu compile --report`` / ``--strict``, and the LiteRT delegate (the nodes it claims).

An operator goes to the NPU only if the compiler really lowers it: it imports (its
attributes accepted), and the op it becomes passes the int8 rules and gets kernel
parameters and a chip descriptor, checked by running those very stages on a graph of
that one op. A float model's op is first quantized on the values the whole float model
gives it (run on the calibration data, or on random inputs when there is none), as the
compiler would: alone on random inputs, the reciprocal square root of a LayerNorm saw negative variances.
Values no grid holds (NaN, infinities) are the data's doing, not the chip's, and the CPU
would compute them too: they never send an op to the CPU (the compile's calibration
reports them). Everything else goes to the CPU with the first reason found: a custom
op, no NPU operator of that type, an attribute, dtype or shape the import or the
lowering refuses, or an allow-list (``ops``) that leaves it out. Operators folded into
constants at compile time (shape arithmetic, fp16 weight DEQUANTIZE) count as NPU.
"""
from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .descriptors import Lowering, lower_op
from .float_ref import FloatInterpreter
from .frontend import check_int8
from .input_shapes import InputShapes, fix_input_shapes
from .ir import Graph, IRError, Op, SourceOp
from .memplan import plan_memory
from .onnx_import import import_onnx_sources
from .optimize import fold_constants
from .periodic import PERIODIC, periodic_inputs_on_cpu, phase_reason
from .qparams import lowerable
from .quantizer import NonFiniteValuesError, quantize_model, random_dataset
from .selection_keys import selection_placements
from .tflite_import import import_tflite_sources

__all__ = ["Placement", "PlacementPlan", "FallbackRefusedError", "NPU", "CPU", "place_model", "plan_placement",
           "import_with_fallback"]

NPU = "NPU"
CPU = "CPU"


@dataclass(frozen=True)
class Placement:
    """Where one operator of the source model runs."""
    index: int      # the op's index in the source model (TFLite: operator index in subgraph 0; ONNX: node index)
    op: str         # TFLite builtin name (custom ops: "CUSTOM:<code>") / ONNX op type
    device: str     # "NPU" or "CPU"
    reason: str     # "" when NPU; otherwise one line saying why


class FallbackRefusedError(IRError):
    """Strict mode: the model has operators the chip cannot run (all listed)."""


@dataclass
class PlacementPlan:
    """A model's placements, with the model itself (what the compiler needs next)."""
    name: str
    kind: str                     # "tflite" or "onnx"
    data: bytes
    placements: list[Placement] = field(default_factory=list)

    @property
    def cpu(self) -> dict[int, str]:
        """Source index -> reason, for the operators on the CPU."""
        return {p.index: p.reason for p in self.placements if p.device == CPU}

    def partitions(self) -> list[tuple[str, list[Placement]]]:
        """Runs of consecutive operators (source order) on one device."""
        runs: list[tuple[str, list[Placement]]] = []
        for p in self.placements:
            if runs and runs[-1][0] == p.device:
                runs[-1][1].append(p)
            else:
                runs.append((p.device, [p]))
        return runs

    def refuse_fallback(self) -> None:
        """Raise :class:`FallbackRefusedError` listing every CPU operator (strict mode)."""
        cpu = [p for p in self.placements if p.device == CPU]
        if cpu:
            listed = "; ".join(f"{p.op} (op {p.index}): {p.reason}" for p in cpu)
            missing = sorted({p.op for p in cpu})
            raise FallbackRefusedError(f"{self.name}: {len(cpu)} operator(s) cannot run on the NPU "
                                       f"(missing: {', '.join(missing)}) and strict mode refuses CPU fallback: "
                                       f"{listed}")


def _read(model: bytes | str | os.PathLike, kind: str | None) -> tuple[bytes, str, str]:
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        data, name = path.read_bytes(), path.stem
        kind = kind or ("onnx" if path.suffix == ".onnx" else "tflite" if path.suffix == ".tflite" else None)
    else:
        data, name = bytes(model), "model"
    if kind is None:
        kind = "tflite" if data[4:8] == b"TFL3" else "onnx"
    if kind not in ("tflite", "onnx"):
        raise IRError(f"unknown model kind {kind!r} (expected 'tflite' or 'onnx')")
    return data, name, kind


def import_with_fallback(data: bytes, kind: str, name: str = "model",
                         force_host: Mapping[int, str] | None = None) -> tuple[Graph, list[SourceOp]]:
    """Import a model with every operator the import refuses (and those in
    ``force_host``) as a HOST op, and what became of each source operator."""
    if kind == "tflite":
        return import_tflite_sources(data, name, fallback=True, force_host=force_host)
    return import_onnx_sources(data, name, fallback=True, force_host=force_host)


# Errors the compiler's stages raise for an op they do not take.
_REFUSALS = (ValueError, KeyError, TypeError, IndexError, ArithmeticError, NotImplementedError)


def _single_op_graph(graph: Graph, op: Op) -> Graph:
    g = Graph(f"{graph.name}:{op.name}")
    for n in dict.fromkeys([*op.inputs, *op.outputs]):
        if n:
            g.add_tensor(copy.copy(graph.tensors[n]))
    g.inputs = [n for n in dict.fromkeys(op.inputs) if n and not g.tensors[n].is_constant]
    g.outputs = list(op.outputs)
    g.ops = [Op(op.type, list(op.inputs), list(op.outputs), copy.deepcopy(op.attrs), op.name)]
    return g


def _lower_all(graph: Graph) -> None:
    """Run the int8 rules, the memory plan, kernel parameters, lowering and descriptor
    encoding for every op of ``graph`` (what :func:`lower.lower` does, without the task list)."""
    for op in graph.ops:
        if not lowerable(op.type):
            raise IRError(f"the chip has no int8 kernel for {op.type}")
    check_int8(graph)
    plan = plan_memory(graph)
    low = Lowering(graph, plan)
    for op in graph.ops:
        lower_op(low, op)


Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]
#: Feeds of the calibration data the placement runs the float model on (the first ones):
#: one, as every tensor's values are kept while the ops are judged (a 640x640 detector's
#: take about a gigabyte, as one calibration run does).
_PLACEMENT_FEEDS = 1


def _model_values(graph: Graph, dataset: Iterable[Feed] | None) -> list[dict[str, np.ndarray]] | None:
    """Every tensor's values in float runs of the whole ``graph`` on the first feeds of
    ``dataset`` (random inputs in [-1, 1] without one): what each op will be calibrated
    on. None when the float model does not run (each op is then judged alone on random
    inputs, and the compile reports why the model does not run)."""
    feeds = list(dataset)[:_PLACEMENT_FEEDS] if dataset is not None else random_dataset(graph, _PLACEMENT_FEEDS)
    try:
        interp = FloatInterpreter(graph)
        return [interp.run(feed, keep=True) for feed in feeds]
    except (*_REFUSALS, RuntimeError):     # RuntimeError: a host kernel (onnxruntime, LiteRT) refusing
        return None


def _refusal(graph: Graph, op: Op, quantized: bool, values: list[dict[str, np.ndarray]] | None = None) -> str:
    """Why the compiler would not lower ``op`` to the chip ("" if it would). ``values``:
    the float model's tensors (:func:`_model_values`) its inputs are calibrated on."""
    if not any(i and not graph.tensors[i].is_constant for i in op.inputs):
        return ""            # constant inputs only: folded at compile time
    if not lowerable(op.type) and quantized:
        return f"the chip has no int8 kernel for {op.type}"
    sub = _single_op_graph(graph, op)
    feeds = None
    if values is not None and all(n in run for run in values for n in sub.inputs):
        feeds = [{n: run[n] for n in sub.inputs} for run in values]
    try:
        if not quantized:
            sub = quantize_model(sub, feeds, random_count=2)
        _lower_all(sub)
    except NonFiniteValuesError:     # the data's doing, not the chip's: judged by its type
        return "" if lowerable(op.type) else f"the chip has no int8 kernel for {op.type}"
    except _REFUSALS as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return text.replace(f"{op.describe()}: ", "")
    return ""


def _signature(graph: Graph, op: Op) -> tuple:
    """Everything :func:`_refusal` judges ``op`` on (its one-op graph, but for the names):
    type, attributes, and each operand's shape, dtype, grid and constant bytes. An unrolled
    recurrence repeats one step's ops hundreds of times (a 16-step bidirectional OCR LSTM:
    640 ops, 26 s of placement judged one by one); an op equal to one the chip took is
    taken too. The calibrated values are left out: a step's values differ from the last
    one's, and what they decide (a grid) is the compile's, on every step's values at once."""
    def value(v: Any) -> Any:        # arrays by their bytes (a repr would elide the middle)
        if isinstance(v, np.ndarray):
            return (v.shape, str(v.dtype), hashlib.blake2b(np.ascontiguousarray(v).tobytes()).digest())
        if isinstance(v, (list, tuple)):
            return tuple(value(x) for x in v)
        if isinstance(v, dict):
            return tuple(sorted((k, value(x)) for k, x in v.items()))
        return repr(v)

    def operand(n: str) -> tuple:
        if not n:
            return ()
        t = graph.tensors[n]
        q = () if t.quant is None else (value(t.quant.scale), value(t.quant.zero_point), t.quant.axis)
        return (t.shape, t.dtype, q, None if t.data is None else value(t.data))
    return (op.type, value(op.attrs), tuple(operand(n) for n in op.inputs), tuple(operand(n) for n in op.outputs))


def _is_quantized(graph: Graph) -> bool:
    return any(t.quant is not None for t in graph.tensors.values() if not t.is_constant)


def plan_placement(model: bytes | str | os.PathLike, *, ops: Collection[str] | None = None,
                   kind: str | None = None, input_shapes: InputShapes = None,
                   dataset: Iterable[Feed] | None = None) -> PlacementPlan:
    """:func:`place_model`, keeping the model's bytes (its inputs made static) for the compiler.
    ``dataset``: the calibration data of a float model (feeds of its inputs), which its ops
    are judged on."""
    data, name, kind = _read(model, kind)
    fixed, _, _ = fix_input_shapes(data, kind, input_shapes, name)
    data = bytes(fixed)        # type: ignore[arg-type]   # bytes given, bytes back
    graph, sources = import_with_fallback(data, kind, name)
    quantized = _is_quantized(graph)
    same: dict[int, Op] = {id(op): op for op in graph.ops}
    if not quantized:
        # As the quantizer does first: fold constant subgraphs (fp16 weights behind
        # DEQUANTIZE), so each op is judged with the constants it will really get.
        memo: dict[int, Any] = {}
        folded = copy.deepcopy(graph, memo)      # memo: id of each original object -> its copy
        fold_constants(folded)
        same = {i: memo[i] for i in same}
        graph = folded
    values = None if quantized else _model_values(graph, dataset)
    live = {id(op) for op in graph.ops}          # ops pruned or folded at compile time need no device
    phase: dict[int, float] = {}                 # ops making a sine's input no grid holds (periodic)
    if values is not None:
        sines = [same[id(op)] for src in sources if src.op in PERIODIC for op in src.ir_ops if id(op) in same]
        phase = periodic_inputs_on_cpu(graph, sines, values)
    allowed = None if ops is None else set(ops)
    plan = PlacementPlan(name, kind, data)
    accepted: set[tuple] = set()                 # signatures of ops the chip took (_signature)
    for src in sources:
        reason = src.reason
        if not reason and allowed is not None and src.op not in allowed:
            reason = "not in the allow-list"
        steps = [phase[id(same[id(op)])] for op in src.ir_ops if id(op) in same and id(same[id(op)]) in phase]
        if not reason and steps:
            reason = phase_reason(max(steps))
        if not reason:
            for op in (same[id(op)] for op in src.ir_ops if id(op) in same):
                if id(op) in live and op.type != "HOST":
                    signature = _signature(graph, op)
                    if signature in accepted:
                        continue
                    reason = _refusal(graph, op, quantized, values)
                    if reason:
                        break
                    accepted.add(signature)
        plan.placements.append(Placement(src.index, src.op, CPU if reason else NPU, reason))
    if not quantized:      # a float model's selections decided in float (selection_keys)
        moved = selection_placements(graph, [SourceOp(s.index, s.op, [same[id(o)] for o in s.ir_ops if id(o) in same],
                                                      s.reason) for s in sources])
        plan.placements = [Placement(p.index, p.op, CPU, moved[p.index]) if p.device == NPU and p.index in moved
                           else p for p in plan.placements]
    return plan


def place_model(model: bytes | os.PathLike, *, ops: Collection[str] | None = None,
                input_shapes: InputShapes = None) -> list[Placement]:
    """Where each operator of ``model`` (a .tflite or .onnx file, path or bytes) runs;
    ``input_shapes`` for inputs with free dimensions (:mod:`libnpu.compiler.input_shapes`).

    ``ops``: an allow-list of the op names the chip may run (TFLite builtin names, ONNX op
    types); the others go to the CPU with the reason "not in the allow-list". One
    :class:`Placement` per source operator, in source order.
    """
    return plan_placement(model, ops=ops, input_shapes=input_shapes).placements
