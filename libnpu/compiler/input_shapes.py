"""Input shapes: a model's free input dimensions fixed before import, and every shape after them.

A model may leave dimensions of its inputs free: ONNX ``dim_param`` (``"batch"``,
``"samples"``) or no ``dim_value`` at all, TFLite ``-1`` in a tensor's ``shape_signature``
(e.g. ``[1, -1]``). The chip runs static shapes only, so each free dimension gets a value
before the import: the one the user gives (``npu ... --input-shape NAME=D,D``,
``libnpu.load(..., input_shapes={NAME: (D, D)})``), else, for the leading (batch)
dimension of an input of rank 2 or more, 1 (said in a note); any other free dimension
without a shape is an error listing them all, by input and position, with the option
that fixes it. Nothing is ever guessed silently.

After the inputs, every other shape follows from them, computed by the format's own
library: ONNX's shape inference (``onnx.shape_inference``, not strict: what it cannot
infer is left to the importer's own checks), and for TFLite LiteRT itself
(``Interpreter.resize_tensor_input`` + ``allocate_tensors`` run every operator's
Prepare), whose shapes are written back into the flatbuffer in place, so the importer
and the host's cut-out sub-models see the model as if it had been converted with them.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .ir import IRError
from .tflite_checks import first_bad_index
from .tflite_run_shapes import dynamic_tensor_shapes, placeholder_tensors
from .tflite_strings import flatbuffer_text

__all__ = ["InputShapeError", "InputShapes", "ShapedModel", "parse_input_shape", "parse_input_shapes",
           "resolve_input_shapes", "fix_onnx_inputs", "fix_tflite_inputs", "fix_input_shapes"]

#: What a caller gives: ``{input name: dims}``, or the dims alone for a single-input model.
InputShapes = Mapping[str | None, Sequence[int]] | Sequence[int] | None

_HOW = "give --input-shape"   # the option named in messages (``input_shapes=`` in Python)


class InputShapeError(IRError):
    """A given input shape the model cannot take, or free dimensions left without one."""


# parsing the command line's form --------------------------------------------------------

def parse_input_shape(text: str) -> tuple[str | None, tuple[int, ...]]:
    """``"NAME=D,D,..."`` (or ``"D,D,..."`` for a single-input model) as (name or None, dims)."""
    name, sep, dims_text = text.rpartition("=")
    if sep and not name:
        raise InputShapeError(f"--input-shape {text!r}: the input name before '=' is empty")
    try:
        dims = tuple(int(d) for d in dims_text.split(","))
    except ValueError:
        raise InputShapeError(f"--input-shape {text!r}: expected NAME=D,D,... (positive integers), "
                              f"e.g. audio=1,16000") from None
    _check_positive(name or None, dims)
    return (name or None), dims


def parse_input_shapes(texts: Iterable[str]) -> dict[str | None, tuple[int, ...]]:
    """Several ``--input-shape`` values as one mapping (None: the bare form, single-input models)."""
    shapes: dict[str | None, tuple[int, ...]] = {}
    for text in texts:
        name, dims = parse_input_shape(text)
        if name in shapes:
            raise InputShapeError(f"--input-shape {'for ' + repr(name) if name else 'without a name'} "
                                  "given twice")
        shapes[name] = dims
    if None in shapes and len(shapes) > 1:
        raise InputShapeError("--input-shape D,D,... (without a name) is for a single-input model; "
                              "name every input: NAME=D,D,...")
    return shapes


def _check_positive(name: str | None, dims: Sequence[int], model: str | None = None) -> None:
    if not dims or any(int(d) < 1 for d in dims):
        what = f"{name}=" if name else ""
        raise InputShapeError(f"{model + ': ' if model else ''}--input-shape {what}{','.join(str(d) for d in dims)}: "
                              "dimensions must be positive integers")


# the rule -------------------------------------------------------------------------------

Declared = Sequence[int | str | None]    # per dimension: a fixed size, or the free dimension's name (or None)


@dataclass
class ShapedModel:
    """A model with static input shapes: its bytes, the shapes chosen and the notes to show."""
    data: bytes
    shapes: dict[str, tuple[int, ...]]
    notes: list[str]
    changed: bool      # whether ``data`` differs from the model given


def _normalized(given: InputShapes, names: Sequence[str], model: str) -> dict[str, tuple[int, ...]]:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        given = {None: tuple(given)}
    shapes: dict[str, tuple[int, ...]] = {}
    for name, dims in given.items():
        dims = tuple(int(d) for d in dims)
        _check_positive(name, dims, model)
        if name is None:
            if len(names) != 1:
                raise InputShapeError(f"{model}: a shape without an input name is for a single-input model; this "
                                      f"one has {len(names)} inputs ({_listed(names)}): give NAME=D,D,...")
            name = names[0]
        elif name not in names:
            raise InputShapeError(f"{model}: --input-shape names no input {name!r} (inputs: {_listed(names)})")
        shapes[name] = dims
    return shapes


def _listed(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names) or "none"


def resolve_input_shapes(declared: Mapping[str, Declared | None], given: InputShapes,
                         model: str = "model") -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """Each input's static shape from its declared dims (an int is fixed, a str or None is
    free; None instead of a list: no shape declared) and the shapes given; with the
    notes saying which defaults were taken. Raises :class:`InputShapeError` for a shape
    that does not fit (unknown input, rank, a fixed dimension given another size) and,
    listing them all, for free dimensions left without a value."""
    shapes = _normalized(given, list(declared), model)
    resolved: dict[str, tuple[int, ...]] = {}
    notes: list[str] = []
    missing: list[str] = []
    for name, dims in declared.items():
        if name in shapes:
            wanted = shapes[name]
            if dims is None:
                resolved[name] = wanted
                continue
            if len(wanted) != len(dims):
                raise InputShapeError(f"{model}: input {name!r} has {len(dims)} dimensions {_shown(dims)}; "
                                      f"--input-shape gives {len(wanted)} ({','.join(map(str, wanted))})")
            for i, (d, w) in enumerate(zip(dims, wanted)):
                if isinstance(d, int) and d != w:
                    raise InputShapeError(f"{model}: input {name!r} dimension {i} is fixed at {d} "
                                          f"{_shown(dims)}; --input-shape gives {w}")
            resolved[name] = wanted
            continue
        if dims is None:
            missing.append(f"input {name!r} has no declared shape: {_HOW} {name}=D,D,...")
            continue
        free = [i for i, d in enumerate(dims) if not isinstance(d, int)]
        if not free:
            resolved[name] = tuple(int(d) for d in dims)    # type: ignore[arg-type]
            continue
        if free == [0] and len(dims) >= 2:
            resolved[name] = (1, *(int(d) for d in dims[1:]))    # type: ignore[arg-type]
            notes.append(f"input {name!r}: free batch dimension {_dim(dims, 0)} set to 1 "
                         f"(--input-shape {name}={','.join(map(str, resolved[name]))} to choose)")
            continue
        listed = ", ".join(_dim(dims, i) for i in free)
        template = ",".join(("1" if i == 0 and len(dims) >= 2 else _placeholder(d, i)) if i in free else str(d)
                            for i, d in enumerate(dims))
        missing.append(f"input {name!r} has free dimensions [{listed}]: {_HOW} {name}={template}")
    if missing:
        raise InputShapeError(f"{model}: " + "; ".join(missing))
    return resolved, notes


def _dim(dims: Declared, i: int) -> str:
    return f"{i}:{dims[i]}" if dims[i] else str(i)


def _placeholder(d: int | str | None, i: int) -> str:
    return f"<{d}>" if d else f"<d{i}>"


def _shown(dims: Declared) -> str:
    return "[" + ", ".join(str(d) if d is not None else "?" for d in dims) + "]"


# ONNX -----------------------------------------------------------------------------------

def fix_onnx_inputs(model: Any, given: InputShapes, name: str = "model") -> tuple[Any, list[str]]:
    """``model`` (an ``onnx.ModelProto``, changed in place) with every input dimension set,
    then ONNX shape inference run (not strict) so the shapes after them are known;
    returns the inferred model (``model`` itself) and the notes. A model whose inputs are all static and
    given no shapes is returned as it is."""
    # Lazy: onnx takes ~0.5 s to import, and the CLI imports this module for its errors.
    from .onnx_shapes import infer_shapes
    initializers = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in initializers]
    declared: dict[str, Declared | None] = {}
    for vi in inputs:
        tt = vi.type.tensor_type
        # Paddle's exporter writes a free dimension as dim_value -1: free, as a dim_param is
        declared[vi.name] = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or None)
                             for d in tt.shape.dim] if tt.HasField("shape") else None
    shapes, notes = resolve_input_shapes(declared, given, name)
    changed = False
    for vi in inputs:
        wanted = shapes[vi.name]
        shape = vi.type.tensor_type.shape
        if [d.dim_value if d.HasField("dim_value") else None for d in shape.dim] == list(wanted):
            continue
        changed = True
        del shape.dim[:]
        for d in wanted:
            shape.dim.add().dim_value = d
    if not changed:
        return model, notes
    try:
        return infer_shapes(model, strict_mode=False), notes
    except Exception as exc:  # onnx raises its own InferenceError types
        raise InputShapeError(f"{name}: ONNX shape inference with inputs {_shapes_text(shapes)} failed: "
                              f"{' '.join(str(exc).split())}") from exc


def _shapes_text(shapes: Mapping[str, Sequence[int]]) -> str:
    return ", ".join(f"{n}={','.join(map(str, s))}" for n, s in shapes.items())


# TFLite ---------------------------------------------------------------------------------

def _tflite_inputs(data: bytes) -> tuple[Any, dict[str, int], dict[str, Declared]] | None:
    """Subgraph 0 of a flatbuffer, its inputs by name (tensor index) and their declared dims;
    None for a file that is no readable TFLite model (the importer says what is wrong)."""
    import tflite  # type: ignore[import-untyped]   # lazy: see fix_onnx_inputs
    if len(data) < 8 or data[4:8] != b"TFL3":
        return None
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        if first_bad_index(model, len(data)):
            return None         # the importer names the broken index
        return _read_tflite_inputs(model)
    except (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError):
        return None     # flatbuffers reads lazily: damage shows up as low-level errors anywhere


def _read_tflite_inputs(model: Any) -> tuple[Any, dict[str, int], dict[str, Declared]] | None:
    if model.SubgraphsLength() < 1:
        return None
    sg = model.Subgraphs(0)
    indices: dict[str, int] = {}
    declared: dict[str, Declared] = {}
    for idx in (sg.InputsAsNumpy() if sg.InputsLength() else []):
        t = sg.Tensors(int(idx))
        label = flatbuffer_text(t.Name()) or f"t{int(idx)}"
        shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        signature = [int(d) for d in t.ShapeSignatureAsNumpy()] if t.ShapeSignatureLength() else shape
        indices[label] = int(idx)
        declared[label] = [None if s < 0 else s for s in signature]
    return sg, indices, declared


def fix_tflite_inputs(data: bytes, given: InputShapes, name: str = "model") -> ShapedModel:
    """A ``.tflite`` whose inputs have the shapes chosen (see the module docstring) and every
    tensor of subgraph 0 the shape LiteRT computes from them (shape and shape_signature
    written in place: the file keeps its size and layout). Unchanged when the stored
    shapes already are those."""
    read = _tflite_inputs(data)
    if read is None:
        return ShapedModel(data, {}, [], False)
    sg, indices, declared = read
    shapes, notes = resolve_input_shapes(declared, given, name)
    stored = {label: tuple(int(d) for d in sg.Tensors(i).ShapeAsNumpy()) if sg.Tensors(i).ShapeLength() else ()
              for label, i in indices.items()}
    import tflite  # lazy: see fix_onnx_inputs
    try:
        placeholders = placeholder_tensors(tflite.Model.GetRootAsModel(data, 0))   # sized by a run: tflite_run_shapes
    except (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError):
        placeholders = []       # a damaged file: the importer names what is wrong
    same = all(stored[label] == shapes[label] for label in indices)
    if same and not placeholders:
        return ShapedModel(data, shapes, notes, False)
    try:
        resized = _resized_tflite(data, indices, shapes, name, placeholders)
    except InputShapeError:
        if not same:
            raise
        return ShapedModel(data, shapes, notes, False)     # the inputs are as given: the importer says what is wrong
    return ShapedModel(resized, shapes, notes, resized != data)


def _resized_tflite(data: bytes, indices: Mapping[str, int], shapes: Mapping[str, tuple[int, ...]],
                    name: str, placeholders: Sequence[int] = ()) -> bytes:
    """``data`` with subgraph 0's tensor shapes as LiteRT computes them for the input
    ``shapes``; the ``placeholders`` (free dimensions) a kernel sizes only when it runs, as a
    run gives them (:mod:`~libnpu.compiler.tflite_run_shapes`)."""
    import tflite  # lazy: see fix_onnx_inputs
    from ai_edge_litert.interpreter import (  # type: ignore[import-untyped]   # lazy: LiteRT takes ~0.5 s to import
        Interpreter,
        OpResolverType,
    )
    try:
        interp = Interpreter(model_content=bytes(data), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        for label, index in indices.items():
            interp.resize_tensor_input(index, list(shapes[label]), strict=False)
        interp.allocate_tensors()
        details = interp.get_tensor_details()
    except (RuntimeError, ValueError) as exc:
        raise InputShapeError(f"{name}: LiteRT cannot size the model for inputs {_shapes_text(shapes)}: "
                              f"{' '.join(str(exc).split())}") from exc
    buf = bytearray(data)
    sg = tflite.Model.GetRootAsModel(buf, 0).Subgraphs(0)
    # the file's tensors only: LiteRT lists after them the temporaries its kernels add
    # (MEAN's, BATCH_MATMUL's, an LSTM's), which have no table in the flatbuffer
    computed = {d["index"]: tuple(int(x) for x in d["shape"]) for d in details if d["index"] < sg.TensorsLength()}
    if placeholders:
        computed.update(dynamic_tensor_shapes(data, {indices[label]: shapes[label] for label in indices}, placeholders))
    for index, shape in computed.items():
        t = sg.Tensors(index)
        for length, vector in ((t.ShapeLength(), t.ShapeAsNumpy), (t.ShapeSignatureLength(), t.ShapeSignatureAsNumpy)):
            if not length:
                continue
            if length != len(shape):
                raise InputShapeError(f"{name}: tensor {index} ({flatbuffer_text(t.Name())!r}) changes rank with "
                                      f"inputs {_shapes_text(shapes)} ({length} -> {len(shape)} dimensions): "
                                      "not supported")
            view = vector()            # a view of ``buf``: written in place
            view[:] = np.asarray(shape, np.int32)
    return bytes(buf)


# any model ------------------------------------------------------------------------------

def fix_input_shapes(model: str | os.PathLike | bytes, kind: str | None, given: InputShapes,
                     name: str | None = None) -> tuple[str | os.PathLike | bytes, str | None, list[str]]:
    """``model`` (a path or bytes, ``kind`` "onnx"/"tflite" or None to guess) with static
    inputs, for the compiler's entry points: ``(model, kind, notes)``, the model given back
    as it was when nothing changes, else as bytes."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        data = path.read_bytes()
        name = name or path.stem
        kind = kind or {".onnx": "onnx", ".tflite": "tflite"}.get(path.suffix)
    else:
        data = bytes(model)
        name = name or "model"
    if kind is None:
        kind = "tflite" if data[4:8] == b"TFL3" else "onnx"
    if kind == "tflite":
        shaped = fix_tflite_inputs(data, given, name)
        return (shaped.data if shaped.changed else model), kind, shaped.notes
    if kind != "onnx":
        return model, kind, []          # the importer names the unknown kind
    import onnx  # lazy: see fix_onnx_inputs
    try:
        proto = onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - not an ONNX model: the importer says so, with its own words
        return model, kind, []
    declared = [vi.SerializeToString() for vi in proto.graph.input]
    fixed, notes = fix_onnx_inputs(proto, given, name)     # in place: the inputs say whether it changed
    unchanged = [vi.SerializeToString() for vi in fixed.graph.input] == declared
    return (model if unchanged else fixed.SerializeToString()), kind, notes
