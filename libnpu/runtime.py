"""The runtime: loads a compiled model (a loadable) onto a device and runs it; the names programs import.

Two levels, as users of NVDLA and of OpenVINO / FuriosaAI expect:

- ``Runtime`` (:mod:`libnpu.nvdla_runtime`) mirrors NVDLA's IRuntime: ``load``, count and
  describe the input and output tensors, set descriptors, allocate and bind memory,
  ``submit``, ``unload``.
- ``libnpu.load(model)`` (:mod:`libnpu.inference`) returns a ``CompiledModel`` with
  ``infer(inputs)``, trio's ``await infer_async(inputs)``, and ``InferRequest`` objects
  (``start``, ``wait``, a completion callback) so several inferences can be in flight at
  once; a stateful model's variables are each request's ``VariableState``.

Beneath them: :mod:`libnpu.partitions` runs a model with host steps (CPU fallback) one chip
partition at a time, :mod:`libnpu.tensors` converts tensors (``quantize``, ``dequantize``),
:mod:`libnpu.errors` holds the exception types and :mod:`libnpu.profiling` an inference's
``Timing`` and per-layer profile.  Nothing below imports this module.
"""
from __future__ import annotations

from libnpu.errors import ClosedError, InputError, JobError
from libnpu.inference import CompiledModel, InferRequest, VariableState, load
from libnpu.nvdla_runtime import Runtime
from libnpu.partitions import boundary, host_kernels
from libnpu.profiling import Timing
from libnpu.tensors import ArrayLike, Inputs, dequantize, quantize

__all__ = ["Runtime", "CompiledModel", "InferRequest", "VariableState", "ClosedError", "InputError", "load",
           "quantize", "dequantize", "JobError", "Timing", "Inputs", "ArrayLike", "boundary", "host_kernels"]
