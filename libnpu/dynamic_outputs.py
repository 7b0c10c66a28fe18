"""Model outputs whose shape is decided per run (a decoder's tokens, NonZero's indices, the boxes NMS keeps).

A host call may give a model output whose shape depends on the data
(:mod:`libnpu.compiler.dynamic_shapes` says which). Its :class:`~libnpu.loadable.TensorDesc`
then carries a ``shape_signature``, its dims with -1 where each run decides (as ONNX's
``dim_param`` and TFLite's ``shape_signature``), and a ``max_shape`` when the operator
bounds it (else None); its ``shape`` is the one a probe run gave, a placeholder. The host
returns such an output as a new array each run instead of writing it into the request's
memory (:mod:`libnpu.partitions`), and ``InferRequest.outputs()`` gives that array.

The loadable stores the two in its META section under ``"dynamic_outputs"`` (output
name -> signature and bound); a file with any has format version 1.3, which older readers
refuse rather than give the placeholder. A hostile or buggy host call cannot make the
runtime hold a huge output: :func:`check_dynamic_output` refuses a value whose rank or
fixed dims differ from the signature, that exceeds ``max_shape``, or that is larger than
``MAX_DYNAMIC_OUTPUT_BYTES``.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from libnpu.loadable_layout import FormatError

__all__ = ["DYNAMIC_OUTPUTS", "MAX_DYNAMIC_OUTPUT_BYTES", "DynamicOutputError", "encode_dynamic_outputs",
           "decode_dynamic_outputs", "check_dynamic_output", "signature_text"]

DYNAMIC_OUTPUTS = "dynamic_outputs"

MAX_DYNAMIC_OUTPUT_BYTES = 256 << 20
"""The most one output shaped per run may hold (a bound the operator gives is tighter)."""


class DynamicOutputError(ValueError):
    """A host call gave an output whose shape its signature or bound does not allow."""


class _Desc(Protocol):     # libnpu.loadable.TensorDesc, which imports this module
    name: str
    shape: tuple[int, ...]
    dtype: str
    shape_signature: tuple[int, ...] | None
    max_shape: tuple[int, ...] | None


def encode_dynamic_outputs(tensors: Iterable[_Desc]) -> dict[str, dict[str, Any]]:
    """The META entry for the tensors with a shape signature (empty when none has one)."""
    return {t.name: {"signature": list(t.shape_signature),
                     "bound": None if t.max_shape is None else list(t.max_shape)}
            for t in tensors if t.shape_signature is not None}


def decode_dynamic_outputs(entries: Any, tensors: Iterable[_Desc]) -> None:
    """Set the signature and bound of each of ``tensors`` (a model's outputs) that ``entries``
    (the META entry) names; :class:`~libnpu.loadable_layout.FormatError` for a malformed
    entry or one naming no output."""
    if not isinstance(entries, dict):
        raise FormatError(f"META {DYNAMIC_OUTPUTS}: not a mapping")
    by_name = {t.name: t for t in tensors}
    for name, entry in entries.items():
        what = f"META {DYNAMIC_OUTPUTS} {name!r}"
        if name not in by_name:
            raise FormatError(f"{what}: no such output")
        try:
            signature = tuple(int(d) for d in entry["signature"])
            bound = None if entry["bound"] is None else tuple(int(d) for d in entry["bound"])
        except (KeyError, TypeError, ValueError):
            raise FormatError(f"{what}: needs a signature (a list of dims) and a bound (a list or null)") from None
        t = by_name[name]
        if len(signature) != len(t.shape) or any(d < -1 for d in signature) or \
                (bound is not None and (len(bound) != len(signature) or any(b < 0 for b in bound))):
            raise FormatError(f"{what}: signature {list(signature)} or bound {bound and list(bound)} does not "
                              f"fit shape {list(t.shape)}")
        t.shape_signature, t.max_shape = signature, bound


def check_dynamic_output(desc: _Desc, value: np.ndarray, step: str) -> np.ndarray:
    """``value``, which host step ``step`` gave for output ``desc``, if its signature and
    bound allow its shape; else :class:`DynamicOutputError`."""
    signature = desc.shape_signature or desc.shape
    fits = value.ndim == len(signature) and all(s < 0 or s == d for s, d in zip(signature, value.shape))
    if not fits:
        raise DynamicOutputError(f"host step {step}: output {desc.name} has shape {list(value.shape)}, its "
                                 f"signature is {signature_text(desc)}")
    if desc.max_shape is not None and any(d > b for d, b in zip(value.shape, desc.max_shape)):
        raise DynamicOutputError(f"host step {step}: output {desc.name} has shape {list(value.shape)}, over its "
                                 f"bound {list(desc.max_shape)}")
    if value.nbytes > MAX_DYNAMIC_OUTPUT_BYTES:
        raise DynamicOutputError(f"host step {step}: output {desc.name} is {value.nbytes:,} bytes, over the "
                                 f"{MAX_DYNAMIC_OUTPUT_BYTES:,} an output shaped per run may hold")
    return np.ascontiguousarray(value, desc.dtype)


def signature_text(desc: _Desc) -> str:
    """``[-1, 1, 4] (at most [16, 1, 4])``: the dims as a user reads them."""
    signature = list(desc.shape_signature or desc.shape)
    return f"{signature}" + (f" (at most {list(desc.max_shape)})" if desc.max_shape is not None else " (unbounded)")
