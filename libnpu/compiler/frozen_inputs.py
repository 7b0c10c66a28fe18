"""Frozen inputs: a model input replaced by a constant before import, so what it drives folds.

OpenVINO's model conversion freezes an input to a value (``ovc --input "sr[]->16000"``);
here ``npu compile --freeze-input sr=16000`` and ``libnpu.load(..., freeze_inputs={"sr":
16000})`` do the same. The input leaves the model's inputs and becomes an initializer of
its declared dtype and shape, before the importer folds constants: a Silero VAD export's
``If`` on ``Equal(sr, 16000)`` then folds to the branch taken, as if the model had been
exported for that rate. ONNX models only (a TFLite input is refused with the reason).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .ir import IRError

__all__ = ["FreezeInputError", "FrozenInputs", "parse_freeze_inputs", "frozen_key", "freeze_onnx_inputs",
           "freeze_model_inputs"]

#: What a caller gives: ``{input name: value}`` (a number, a nested list or an array).
FrozenInputs = Mapping[str, Any] | None


class FreezeInputError(IRError):
    """A frozen input the model does not have, or a value its input cannot take."""


def parse_freeze_inputs(texts: Iterable[str]) -> dict[str, tuple[float, ...]]:
    """``--freeze-input NAME=V[,V,...]`` values as ``{name: values}`` (the input's declared
    shape and dtype are applied when the model is read)."""
    frozen: dict[str, tuple[float, ...]] = {}
    for text in texts:
        name, sep, values = text.partition("=")
        if not sep or not name or not values:
            raise FreezeInputError(f"--freeze-input {text!r}: expected NAME=VALUE[,VALUE...], e.g. sr=16000")
        try:
            numbers = tuple(float(v) for v in values.split(","))
        except ValueError:
            raise FreezeInputError(f"--freeze-input {text!r}: the values must be numbers") from None
        if name in frozen:
            raise FreezeInputError(f"--freeze-input {name!r} given twice")
        frozen[name] = numbers
    return frozen


def frozen_key(frozen: FrozenInputs) -> dict[str, list[Any]] | None:
    """``frozen`` as plain lists (a compile cache key's form: arrays printed in full)."""
    return None if frozen is None else {str(k): np.asarray(v).tolist() for k, v in frozen.items()}


def _value_for(name: str, given: Any, dtype: np.dtype, shape: Sequence[int | None], model: str) -> np.ndarray:
    """``given`` as the input's dtype and declared shape, or FreezeInputError saying why not."""
    values = np.asarray(given)
    if values.dtype.kind not in "biuf":
        raise FreezeInputError(f"{model}: --freeze-input {name}: the value must be numeric, not {values.dtype}")
    if any(d is None for d in shape):
        raise FreezeInputError(f"{model}: --freeze-input {name}: the input has free dimensions "
                               f"{list(shape)}; freeze inputs of a static shape")
    shape = tuple(int(d) for d in shape)        # type: ignore[arg-type]
    size = int(np.prod(shape, dtype=np.int64))
    if values.size != size:
        raise FreezeInputError(f"{model}: --freeze-input {name}: {values.size} value(s) given, the input "
                               f"{list(shape)} takes {size}")
    if dtype.kind in "iub":
        if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
            raise FreezeInputError(f"{model}: --freeze-input {name}: the input is {dtype}; {given!r} is not "
                                   "a whole number")
        if dtype.kind != "b":
            info = np.iinfo(dtype)
            if np.any(values < info.min) or np.any(values > info.max):
                raise FreezeInputError(f"{model}: --freeze-input {name}: {given!r} is outside {dtype}'s range")
    return values.astype(dtype).reshape(shape)


def freeze_onnx_inputs(model: Any, frozen: Mapping[str, Any], name: str = "model") -> Any:
    """``model`` (an ``onnx.ModelProto``, changed in place and returned) with each input of
    ``frozen`` turned into an initializer of its declared dtype and shape."""
    # Lazy: onnx takes ~0.5 s to import, and the CLI imports this module for its errors.
    from onnx import helper, numpy_helper
    initializers = {i.name for i in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in initializers}
    unknown = [n for n in frozen if n not in inputs]
    if unknown:
        raise FreezeInputError(f"{name}: --freeze-input names no input {', '.join(map(repr, unknown))} "
                               f"(inputs: {', '.join(map(repr, inputs)) or 'none'})")
    if len(frozen) == len(inputs):
        raise FreezeInputError(f"{name}: --freeze-input would freeze every input; the model must keep one")
    for input_name, given in frozen.items():
        vi = inputs[input_name]
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise FreezeInputError(f"{name}: --freeze-input {input_name}: the input declares no shape")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        shape = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        value = _value_for(input_name, given, dtype, shape, name)
        model.graph.input.remove(vi)
        model.graph.initializer.append(numpy_helper.from_array(value, input_name))
    return model


def freeze_model_inputs(model: str | os.PathLike | bytes, kind: str | None,
                        frozen: FrozenInputs) -> tuple[str | os.PathLike | bytes, str | None]:
    """``model`` (a path or bytes) with ``frozen`` inputs made constants, for the compiler's
    entry points: ``(model, kind)``, the model as it was when nothing is frozen, else bytes."""
    if not frozen:
        return model, kind
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        data, name = path.read_bytes(), path.stem
        kind = kind or {".onnx": "onnx", ".tflite": "tflite"}.get(path.suffix)
    else:
        data, name = bytes(model), "model"
    if kind == "tflite" or (kind is None and data[4:8] == b"TFL3"):
        raise FreezeInputError(f"{name}: --freeze-input takes ONNX models; a TFLite model's inputs cannot be "
                               "frozen (convert it with the value fixed)")
    import onnx  # lazy: see freeze_onnx_inputs
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as exc:  # onnx raises protobuf's DecodeError and others
        raise FreezeInputError(f"{name}: not a readable ONNX model: {exc}") from exc
    return freeze_onnx_inputs(proto, frozen, name).SerializeToString(), "onnx"
