"""The model compiler.

Pipeline::

    .tflite (int8)  --tflite_import-->  int8 IR  ------------------------------+
    .tflite (float) --tflite_import-->  float IR --quantizer (optimize,         |
    .onnx   (float) --onnx_import---->  float IR    calibrate, quantize)--> int8 IR
                                                                               |
                  memplan (weights, activation arena, I/O regions)             v
                  qparams (TFLite Prepare arithmetic) + lower (chip task descriptors,
                  relocations, dependencies)  -->  loadable file

``frontend.to_int8_graph`` runs the top half in one call, ``lower.compile_model`` all of
it (``cache.compile_cached`` through the cache), each taking a ``progress`` callback
(``progress``). Modules: ``ir`` (graph IR), ``tflite_import``, ``onnx_import``,
``float_ref`` (numpy float reference interpreter), ``optimize``, ``quantizer`` (with ``calibration``,
``weight_rounding``, ``equalization``, ``bias_correction``; ``accuracy``: per-layer error vs float),
``scales`` (every scale the compiler picks), ``tflite_export`` (IR back to .tflite, to check against
LiteRT), ``memplan``, ``qparams``, ``descriptors`` (one op -> one chip task descriptor), ``lower``, ``cache``
(compiled models by content hash), ``frontend``. The names below are imported lazily, so
``import libnpu.compiler`` pulls in neither onnx nor tflite until they are used.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Graph": "ir", "Tensor": "ir", "Op": "ir", "QuantParams": "ir", "IRError": "ir",
    "load_tflite": "tflite_import", "import_tflite": "tflite_import",
    "load_onnx": "onnx_import", "import_onnx": "onnx_import",
    "FloatInterpreter": "float_ref", "run_float": "float_ref",
    "quantize_model": "quantizer", "calibrate": "quantizer", "quantize": "quantizer",
    "export_tflite": "tflite_export",
    "plan_memory": "memplan", "MemoryPlan": "memplan",
    "CompileCache": "cache", "cache_key": "cache", "compile_cached": "cache",
    "load_model": "frontend", "to_int8_graph": "frontend", "check_int8": "frontend",
    "compile_model": "lower", "Progress": "progress",
    "place_model": "placement", "Placement": "placement", "FallbackRefusedError": "placement",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
