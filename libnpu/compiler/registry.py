"""The compiler's registry of operators; the operators themselves are declared in the
modules of ``compiler.ops``, one per operator or small family.

An operator module declares everything the compiler knows about its operators in one
:class:`Operator` each: the IR attributes, the TFLite import, the float reference, the
quantization rule, the int8 kernel parameters, the lowering to chip descriptors and the
TFLite export; ONNX node types are declared beside them with :func:`onnx`. The pipeline
modules (``tflite_import``, ``onnx_import``, ``float_ref``, ``optimize``, ``quantizer``,
``qparams``, ``descriptors``, ``lower``, ``tflite_export``) are the glue, written once: they look
operators up here and keep no per-operator tables. Operator names are TFLite's builtin
names, shared with the chip's descriptors (``npu_hw``) and the docs.

Every module of ``compiler.ops`` is loaded the first time the registry is consulted, so
a new family is a new module and nothing else (see docs/contributing.md). The registry
sits below everything: the pipeline modules consult it, the operator modules fill it.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Operator", "register", "onnx", "find", "get", "operators", "onnx_handler",
           "tflite_operator", "tflite_options", "tflite_options_table"]


@dataclass(frozen=True)
class Operator:
    """One IR operator and every stage's rule for it (None: the stage does not apply).

    - ``attrs``: the attributes an op of this type carries (all required).
    - ``tflite``: ``(importer, ins, outs, options, where) -> (attrs, data input indices)``,
      or None when it added the ops itself (an operator imported as others, e.g. SPLIT as
      STRIDED_SLICEs) or folded its output to a constant (DENSIFY); ``tflite_aliases``:
      other TFLite builtins imported as this operator.
    - ``float_ref``: ``(op, input values, output tensor) -> value`` in float32.
    - ``same_scale``: inputs and output share one quantization (data movement);
      ``fixed_output``: the output's ``(scale, zero_point)`` is fixed by the int8 spec;
      ``weight_axis``: input 1 is a weight quantized per channel along this axis (input
      2 the bias); ``fc_weights``: per-tensor unless per-channel FC is asked for.
    - ``index_inputs``: positions of inputs that hold int32 indices computed by the model
      (GATHER's ids in an embedding lookup): never quantized.
    - ``index_output``: the output is an int32/int64 tensor of positions (an arg max), never
      quantized.
    - ``fused_activation``: the TFLite kernel applies a fused RELU/RELU6/RELU_N1_TO_1.
    - ``params``: ``(graph, op) -> kernel parameters`` (int8 only);
      ``lower``: ``(lowering, op, params) -> Emitted | None`` (chip descriptors).
    - ``export``: ``(writer, op, output indices) -> None`` (TFLite export);
      ``tflite_version``: the operator version written.
    - ``macs``: ``(graph, op) -> multiply-accumulates`` for the reports.
    - ``graph_op``: False for an operator the importer resolves into the graph's
      structure (resource variables become :class:`ir.State`; its ``tflite`` handler
      edits the graph and returns None): it never appears as an IR op, so it has no float
      reference or export.
    - ``int16``: the chip also runs it with int16 activations (TFLite's 16x8 scheme:
      symmetric int16, int8 weights, int64 bias), so mixed precision may promote it.
    - ``int8_weights_only``: with int16 activations its weights stay int8 (the chip has no
      a16w16 kernel of it), so mixed precision never gives it int16 weights.
    - ``q15_requant``: with int16 activations the chip requantizes its int64 sums through a
      Q15 multiplier (TFLite's int64 ``MultiplyByQuantizedMultiplier``), whose factor the
      float simulation applies (:mod:`libnpu.compiler.requant_gains`).
    - ``channel_grid``: how the operator takes part in per-channel int16 grids
      (:mod:`libnpu.compiler.channel_grids`): ``"rescale"``, its output may get a grid of its
      own and it reads per-channel inputs as ``channel_reader`` says; ``"move"``, its output
      holds some of its input's channels and keeps their scales; None, neither.
    - ``channel_reader``: ``(graph, op, tensor name, int16 weights) -> bool`` for a
      ``"rescale"`` operator: whether it can read that input on a per-channel grid.
    """
    name: str
    attrs: tuple[str, ...] = ()
    rewrite: Callable | None = None   # (float graph) -> rewrites made: patterns the optimizer turns into this op
    tflite: Callable | None = None
    tflite_aliases: tuple[str, ...] = ()
    float_ref: Callable | None = None
    same_scale: bool = False
    fixed_output: tuple[float, int] | None = None
    weight_axis: int | None = None
    fc_weights: bool = False
    fused_activation: bool = False
    index_output: bool = False
    index_inputs: tuple[int, ...] = ()
    params: Callable | None = None
    lower: Callable | None = None
    export: Callable | None = None
    tflite_version: int = 1
    macs: Callable | None = None
    graph_op: bool = True
    int16: bool = False
    int8_weights_only: bool = False
    q15_requant: bool = False
    channel_grid: str | None = None
    channel_reader: Callable | None = None


_OPERATORS: dict[str, Operator] = {}
_TFLITE: dict[str, str] = {}
_ONNX: dict[str, Callable] = {}
_TFLITE_OPTIONS: dict[str, str | None] = {}
_loaded = False


def register(operator: Operator) -> Operator:
    """Add ``operator`` to the registry (called by the operator modules)."""
    if operator.name in _OPERATORS:
        raise ValueError(f"operator {operator.name} registered twice")
    _OPERATORS[operator.name] = operator
    for builtin in (operator.name, *operator.tflite_aliases):
        if operator.tflite is not None:
            _TFLITE[builtin] = operator.name
    return operator


def onnx(*op_types: str) -> Callable[[Callable], Callable]:
    """Declare an ONNX node handler ``(importer, node, attrs, where)`` (a decorator)."""
    def declare(handler: Callable) -> Callable:
        for op_type in op_types:
            if op_type in _ONNX:
                raise ValueError(f"ONNX {op_type} handled twice")
            _ONNX[op_type] = handler
        return handler
    return declare


def tflite_options(**tables: str | None) -> None:
    """Declare the options table (schema name, e.g. "Conv2DOptions"; None: it has none) that
    each TFLite builtin carries, by builtin name: what the LiteRT delegate reads back from
    the interpreter's ``builtin_data`` (``libnpu/delegate``)."""
    for builtin, table in tables.items():
        if builtin in _TFLITE_OPTIONS:
            raise ValueError(f"TFLite options of {builtin} declared twice")
        _TFLITE_OPTIONS[builtin] = table


def tflite_options_table(builtin: str) -> tuple[bool, str | None]:
    """(declared, options table) for a TFLite builtin: undeclared builtins' options are unknown."""
    _load()
    return builtin in _TFLITE_OPTIONS, _TFLITE_OPTIONS.get(builtin)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    package = importlib.import_module(f"{__package__}.ops")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def find(name: str) -> Operator | None:
    """The operator called ``name``, or None."""
    _load()
    return _OPERATORS.get(name)


def get(name: str, stage: str) -> Any:
    """``name``'s rule for ``stage`` (an :class:`Operator` field), or None."""
    op = find(name)
    return None if op is None else getattr(op, stage)


def operators() -> dict[str, Operator]:
    """Every operator, by name."""
    _load()
    return dict(_OPERATORS)


def onnx_handler(op_type: str) -> Callable | None:
    """The handler of ONNX node type ``op_type``, or None."""
    _load()
    return _ONNX.get(op_type)


def tflite_operator(builtin: str) -> Operator | None:
    """The operator a TFLite builtin imports as (its own name or an alias), or None."""
    _load()
    name = _TFLITE.get(builtin)
    return None if name is None else _OPERATORS[name]
