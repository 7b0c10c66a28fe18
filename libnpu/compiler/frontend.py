"""One entry point from a model file to the int8 IR the chip runs.

* int8 ``.tflite``: imported as it is;
* float ``.tflite`` (e.g. fp16 weights behind DEQUANTIZE) and float ``.onnx``: imported,
  then quantized post-training (calibration data given, or random data).

:func:`check_int8` states what "the chip can run it" means for a graph.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import registry
from .blas_threads import one_blas_thread
from .cpu_float import KEPT_IN_FLOAT, float_on_cpu, kept_in_float
from .escalation import DEFAULT_TARGET, ESCALATION_BUDGET, quantize_to_target
from .folding import takes_channel_grids
from .input_shapes import InputShapes, fix_input_shapes
from .ir import Graph, IRError
from .mixed_precision import quantize_mixed
from .onnx_import import import_onnx
from .optimize import fold_pad_into_conv
from .progress import Progress, stage
from .qdq_import import QDQ_RANGES, float_front_end, range_feeds
from .qparams import lowerable
from .quantizer import quantize_model
from .recipes import RecipeError, apply_recipe, escalates
from .small_islands import MIN_NPU_PARTITION
from .tflite_import import import_tflite

__all__ = ["NotInt8Error", "check_int8", "is_int8", "load_model", "to_int8_graph"]

_EDGE_FLOAT = {"QUANTIZE": 0, "DEQUANTIZE": 1}  # op type -> which side may be float32


class NotInt8Error(IRError):
    """The graph has an op the int8 chip cannot run."""


def check_int8(graph: Graph) -> None:
    """Raise :class:`NotInt8Error` naming the first op that is not int8 end to end.

    Every op must have an int8 kernel on the chip, and every activation must be int8 with
    per-tensor quantization, except the float side of QUANTIZE (input) and DEQUANTIZE
    (output) ops at the graph's edges, and int16 activations (symmetric, per tensor) of
    the operators the chip also runs in int16 (mixed precision, TFLite's 16x8 scheme).
    """
    for op in graph.ops:
        if op.type == "HOST":
            continue         # not the chip's: the host runs it, on whatever types its operator takes
        if not lowerable(op.type):
            raise NotInt8Error(f"{op.describe()}: the chip has no int8 kernel for {op.type}")
        names = [n for n in op.inputs if n and not graph.tensors[n].is_constant] + op.outputs
        for n in names:
            t = graph.tensors[n]
            float_ok = (op.type == "QUANTIZE" and n in op.inputs) or (op.type == "DEQUANTIZE" and n in op.outputs)
            if float_ok and t.dtype == "float32":
                continue
            if op.type == "QUANTIZE" and t.dtype == "uint8" and t.quant is not None and not t.quant.per_channel \
                    and graph.tensors[op.outputs[0] if n in op.inputs else op.inputs[0]].dtype == "int8":
                continue     # an int8 model's uint8 edge (ops.quantize: a sign-bit flip)
            if n in op.outputs and t.dtype in ("int32", "int64") and t.quant is None \
                    and registry.get(op.type, "index_output"):
                continue
            if t.dtype == "int16" and registry.get(op.type, "int16"):
                # per channel (last axis) only inside the graph, around the ops that take it
                channel_grid = t.quant is not None and t.quant.per_channel and takes_channel_grids(op.type) \
                    and t.quant.axis == len(t.shape) - 1 and n not in graph.inputs and n not in graph.outputs
                if t.quant is None or (t.quant.per_channel and not channel_grid) or np.any(t.quant.zero_point != 0):
                    raise NotInt8Error(f"{op.describe()}: int16 tensor {n!r} must be quantized "
                                       "per tensor with zero point 0")
                continue
            if t.dtype == "int32" and t.quant is None and n in op.inputs \
                    and op.inputs.index(n) in registry.get(op.type, "index_inputs"):
                continue
            if t.dtype != "int8" or t.quant is None or t.quant.per_channel:
                raise NotInt8Error(f"{op.describe()}: tensor {n!r} is {t.dtype}"
                                   f"{'' if t.quant is None else ' per-channel' if t.quant.per_channel else ''}"
                                   f"{' without quantization' if t.quant is None else ''}; "
                                   "the chip runs int8 tensors only ("
                                   + ("uint8 only at an int8 model's edges, a QUANTIZE from or to int8)"
                                      if t.dtype == "uint8" and t.quant is not None else "quantize the model first)"))


def is_int8(graph: Graph) -> bool:
    try:
        check_int8(graph)
    except NotInt8Error:
        return False
    return True


def load_model(model: str | os.PathLike | bytes, *, kind: str | None = None, name: str = "model",
               input_shapes: InputShapes = None) -> Graph:
    """Import a model file (path or bytes) as it is; ``kind`` is "tflite" or "onnx"
    (guessed from the suffix or the TFLite file identifier when omitted); ``input_shapes``
    for inputs with free dimensions (:mod:`libnpu.compiler.input_shapes`)."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        data = path.read_bytes()
        name = path.stem
        kind = kind or ("onnx" if path.suffix == ".onnx" else "tflite" if path.suffix == ".tflite" else None)
    else:
        data = bytes(model)
    if kind is None:
        kind = "tflite" if data[4:8] == b"TFL3" else "onnx"
    if kind == "tflite":
        return import_tflite(data, name, input_shapes=input_shapes)
    if kind == "onnx":
        return import_onnx(data, name, input_shapes=input_shapes)
    raise IRError(f"unknown model kind {kind!r} (expected 'tflite' or 'onnx')")


@one_blas_thread()   # its own entry point too (tests and the Python API call it directly)
def to_int8_graph(model: str | os.PathLike | bytes | Graph,
                  dataset: Iterable[Mapping[str, np.ndarray] | Sequence[np.ndarray]] | None = None, *,
                  kind: str | None = None, progress: Progress | None = None,
                  states: Mapping[str, str] | None = None, input_shapes: InputShapes = None,
                  **quantize_options: Any) -> Graph:
    """The int8 graph for ``model``: int8 models as they are, float ones quantized.

    ``quantize_options`` go to :func:`libnpu.compiler.quantizer.quantize_model`
    (``method``, ``random_count``, ``io_dtype``, ``fc_per_channel``, ``seed``), and
    ``int16`` ("none", "auto" or op names), ``int16_target``, ``max_int16_layers``,
    ``int16_weights`` ("none", "auto" or op names) and ``int16_weights_target`` to
    :func:`libnpu.compiler.mixed_precision.quantize_mixed` (int16 activations, and int16
    weights on some of those layers, where needed);
    ``kind`` as for :func:`load_model`; ``progress`` hears the stages (see :mod:`libnpu.compiler.progress`);
    ``recipe`` names a set of those options (:mod:`libnpu.compiler.recipes`, e.g. "accurate"),
    the ones given explicitly winning; without one (or ``"default"``) a float model is
    quantized until each output reaches ``target`` (cosine 0.99 by default) on held-out
    calibration samples (:mod:`libnpu.compiler.escalation`), ``"fast"`` is int8 only.
    ``states`` marks input -> output pairs whose value the model carries from one call to
    the next (:meth:`Graph.make_stateful`); a calibration dataset is then one stream.
    A QDQ ONNX model is quantized int8 on its own grids (:mod:`libnpu.compiler.qdq_import`),
    whatever the recipe; without a ``dataset`` its inputs' feeds span their QuantizeLinear ranges.
    ``input_shapes``: shapes for inputs with free dimensions (:mod:`libnpu.compiler.input_shapes`;
    the notes on the defaults taken go to the graph's metadata, ``"notes"``).
    """
    escalate = escalates(quantize_options)
    target = quantize_options.pop("target", None)
    if target is not None and not escalate:
        raise RecipeError("a fidelity target goes with the default recipe (the one that escalates), "
                          f"not --recipe {quantize_options.get('recipe')}")
    budget = quantize_options.pop("escalation_budget", None)   # the cap on escalating (0: none)
    if budget is not None and not escalate:
        raise RecipeError("an escalation budget goes with the default recipe (the one that escalates), "
                          f"not --recipe {quantize_options.get('recipe')}")
    quantize_options = apply_recipe(quantize_options)
    if isinstance(model, Graph):
        if input_shapes is not None:
            raise IRError("input_shapes: the graph is imported already; give them to its import")
        graph = model          # imported already (compile_model's import stage places its operators)
    else:
        with stage(progress, "import"):
            model, kind, notes = fix_input_shapes(model, kind, input_shapes)
            graph = load_model(model, kind=kind)
            if notes:
                graph.metadata["notes"] = notes
    if states:
        graph = graph.copy()
        graph.make_stateful(dict(states))
    if is_int8(graph):
        if any(op.type == "PAD" for op in graph.ops):    # MobileNetV2's PADs before strided convolutions
            graph = graph.copy()
            fold_pad_into_conv(graph)
        return graph
    if any(t.quant is not None for t in graph.tensors.values() if not t.is_constant):
        check_int8(graph)  # partly quantized: report the offending op rather than re-quantize
    qdq = graph.metadata.get(QDQ_RANGES)
    if qdq is not None:     # a QDQ model: int8 on the grids its pairs chose (nothing to escalate)
        escalate = False
        quantize_options["int16"] = "none"
        if dataset is None and all(graph.tensors[n].dtype == "float32" for n in graph.inputs):
            dataset = range_feeds({n: (graph.tensors[n].shape, np.float32) for n in graph.inputs}, qdq)
        graph, front = _qdq_float_front_end(graph, qdq)
    limit = quantize_options.pop("min_npu_partition", MIN_NPU_PARTITION)    # for the CPU front end's islands
    if escalate:
        q = quantize_to_target(graph, dataset, target=DEFAULT_TARGET if target is None else target,
                               budget=ESCALATION_BUDGET if budget is None else budget, progress=progress,
                               min_npu_partition=limit, **quantize_options)
    elif quantize_options.get("int16", "none") not in (None, "none"):
        q = quantize_mixed(graph, dataset, progress=progress, **quantize_options)
    else:
        options = {k: v for k, v in quantize_options.items()
                   if k not in ("int16", "int16_target", "max_int16_layers", "int16_weights",
                                "int16_weights_target", "int16_headroom", "int16_grid",
                                "int16_channel_spread", "int16_channel_margin")}
        q = quantize_model(graph, dataset, progress=progress, **options)
    if qdq is not None and front:
        q.metadata["cpu_float"] = front
    check_int8(q)
    return q


#: Why a QDQ file's float front end runs on the CPU (:func:`_qdq_float_front_end`).
QDQ_FLOAT_REASON = (f"{KEPT_IN_FLOAT}: the QDQ file computes it in float (no QuantizeLinear between "
                    "the model's input and it), as onnxruntime runs it")


def _qdq_float_front_end(graph: Graph, ranges: Mapping[str, Any]) -> tuple[Graph, dict[str, Any]]:
    """``graph`` with what its QDQ file computes in float before its first pair on the CPU
    in float (:func:`libnpu.compiler.qdq_import.float_front_end`), and the ``cpu_float``
    metadata saying so. On int8 grids calibration chose, wakehubert-int8's STFT power
    spectrum and its log (the file's float front end) scored cosine 0.35-0.79 against
    onnxruntime's float ones, and its features 0.71. A chain the host cannot run in float
    (no .tflite expresses it) stays on the chip."""
    chain = float_front_end(graph, ranges)
    if not chain:
        return graph, {}
    try:
        moved = float_on_cpu(graph, chain, QDQ_FLOAT_REASON)
    except IRError:
        return graph, {}
    return moved, kept_in_float(graph, chain, QDQ_FLOAT_REASON)
