"""Model files by name or path, calibration data from files, and LiteRT reference runs."""
from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from libnpu import model_zoo

__all__ = ["ModelSpecError", "resolve", "load_npy", "load_calibration", "preprocess_picture",
           "litert_available", "LiteRT"]


class ModelSpecError(ValueError):
    """A model name, file or calibration source that cannot be used."""


SUFFIXES = (".tflite", ".onnx", ".nlb")


def resolve(spec: str | os.PathLike) -> Path:
    """A model path for ``spec``: an existing .tflite/.onnx/.nlb file or a model-zoo name
    (``npu fetch`` lists them)."""
    if str(spec) in model_zoo.model_names() and not Path(spec).exists():
        return model_zoo.model_file(str(spec))
    path = Path(spec)
    if not path.is_file():
        raise ModelSpecError(f"{spec}: no such model file (or model-zoo name: {model_zoo.describe_names()})")
    if path.suffix not in SUFFIXES:
        raise ModelSpecError(f"{spec}: unknown model type {path.suffix!r} (expected {', '.join(SUFFIXES)})")
    return path


_NPY_MAGIC = b"\x93NUMPY"


def load_npy(path: str | os.PathLike) -> np.ndarray:
    """The numeric (or bool: a mask input) array a .npy file holds (``numpy.save``'s format), or ModelSpecError
    saying what the file is instead: missing, a directory, another kind of file (text,
    a picture, a pickle...), truncated, or an array of Python objects (never unpickled)."""
    try:
        with open(path, "rb") as f:
            if f.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                array = None
            else:
                f.seek(0)
                array = np.load(f, allow_pickle=False)
    except FileNotFoundError:
        raise ModelSpecError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ModelSpecError(f"{path}: a directory, not a .npy file") from None
    except OSError as exc:
        raise ModelSpecError(f"{path}: cannot read it ({exc.strerror})") from None
    except (ValueError, EOFError) as exc:      # a damaged header or data, or an object array
        if "allow_pickle" in str(exc):          # numpy refuses to unpickle an object array
            raise ModelSpecError(f"{path}: a .npy file of Python objects (never unpickled): save a numeric "
                                 "array") from None
        raise ModelSpecError(f"{path}: a damaged .npy file ({exc})") from None
    if array is None:
        raise ModelSpecError(f"{path}: not a .npy file (write arrays with numpy.save)")
    if not isinstance(array, np.ndarray) or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise ModelSpecError(f"{path}: dtype {getattr(array, 'dtype', type(array).__name__)} is not numeric "
                             "(nor bool, as a mask input is)")
    return array


def _samples_from_array(array: np.ndarray, shape: tuple[int, ...], source: str) -> list[np.ndarray]:
    size = int(np.prod(shape))
    if array.size % size:
        raise ModelSpecError(f"{source}: {array.shape} does not split into samples of shape {shape}")
    dtype = array.dtype if array.dtype.kind in "iub" else np.float32    # integer ids as they are
    return [s.reshape(shape) for s in array.astype(dtype).reshape(-1, *shape)]


def preprocess_picture(pixels: np.ndarray, shape: Sequence[int], image_range: tuple[float, float] = (-1.0, 1.0),
                       mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> np.ndarray:
    """A uint8 picture (H, W, C) as one sample of an NHWC input ``shape``, preprocessed as the
    model expects: resized, then pixels 0..255 mapped linearly to ``image_range`` or, if
    ``mean`` is given, ``(pixel - mean) / std`` per channel (pixel units, as TFLite's
    normalization metadata states them)."""
    from libnpu.tools.vision import resize
    if len(shape) != 4 or shape[-1] not in (1, 3):
        raise ModelSpecError(f"pictures need an NHWC input with 1 or 3 channels, not {tuple(shape)}")
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    if pixels.shape[-1] < shape[-1]:  # a grey picture for a colour model
        pixels = np.repeat(pixels[..., :1], shape[-1], axis=-1)
    x = resize(pixels[..., :shape[-1]], shape[1], shape[2]).astype(np.float32)
    if mean is not None:
        m = np.asarray(mean, np.float32)
        s = np.asarray(std if std is not None else (1.0,), np.float32)
        for name, v in (("mean", m), ("std", s)):
            if v.size not in (1, shape[-1]):
                raise ModelSpecError(f"{name} has {v.size} values; the input has {shape[-1]} channels")
        if np.any(s == 0):
            raise ModelSpecError("std must not be 0")
        return ((x - m) / s)[None].astype(np.float32)
    lo, hi = image_range
    return (x / 255.0 * (hi - lo) + lo)[None].astype(np.float32)


def load_calibration(source: str | os.PathLike,
                     input_shapes: Mapping[str, tuple[int, ...]] | Sequence[tuple[int, ...]],
                     image_range: tuple[float, float] = (-1.0, 1.0), *, mean: Sequence[float] | None = None,
                     std: Sequence[float] | None = None) -> list[list[np.ndarray]]:
    """Calibration feeds from a .npy or .npz file or a directory, one feed per sample.

    ``input_shapes``: the inputs calibration feeds, by name in the model's order (a plain
    sequence of shapes for a single-input model). A single-input model takes a .npy file
    (samples along the first axis) or a directory of .npy files (each one or more samples)
    and .png pictures, preprocessed by :func:`preprocess_picture` (``image_range``, or
    ``mean``/``std``: use the model's own preprocessing, e.g. [0, 1] for mediapipe models).
    Any model takes an .npz file of arrays named as its inputs, samples on the first axis
    (``numpy.savez(path, name=samples, ...)``), or a directory of such files; each feed is
    then the inputs' samples in the model's input order.
    """
    shapes = dict(input_shapes) if isinstance(input_shapes, Mapping) else \
        {f"input {i}": tuple(s) for i, s in enumerate(input_shapes)}
    path = Path(source)
    if not path.exists():
        raise ModelSpecError(f"{source}: no such calibration file or directory")
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    if any(f.suffix == ".npz" for f in files):
        feeds: list[list[np.ndarray]] = []
        for item in files:
            if item.suffix == ".npz":
                feeds += _feeds_from_npz(item, shapes)
            elif item.suffix in (".npy", ".png"):
                raise ModelSpecError(f"{item}: a directory of .npz files takes no {item.suffix} file beside them")
        return feeds
    if len(shapes) != 1:
        listed = ", ".join(map(repr, shapes))
        raise ModelSpecError(f"{source}: this model has {len(shapes)} inputs ({listed}): give an .npz file of "
                             "arrays named as its inputs (numpy.savez), samples on the first axis")
    shape = tuple(next(iter(shapes.values())))
    if path.is_file():
        if path.suffix != ".npy":
            raise ModelSpecError(f"{source}: calibration file must be .npy, .npz (or a directory)")
        samples = _samples_from_array(load_npy(path), shape, str(path))
    else:
        samples = []
        for item in files:
            if item.suffix == ".npy":
                samples += _samples_from_array(load_npy(item), shape, str(item))
            elif item.suffix == ".png":
                try:
                    samples.append(preprocess_picture(model_zoo.load_png(item), shape, image_range, mean, std))
                except ModelSpecError as exc:
                    raise ModelSpecError(f"{item}: {exc}") from None
    if not samples:
        raise ModelSpecError(f"{source}: no calibration samples (.npy, .npz or .png) found")
    return [[s] for s in samples]


def _feeds_from_npz(path: Path, shapes: Mapping[str, tuple[int, ...]]) -> list[list[np.ndarray]]:
    """One feed per sample of an .npz file holding one array per input (by name, samples on
    the first axis, the same count for each); integer inputs keep their dtype."""
    if not zipfile.is_zipfile(path):        # np.load would take it for a pickle, and refuse that
        raise ModelSpecError(f"{path}: not a readable .npz file (write arrays with numpy.savez)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        if "allow_pickle" in str(exc):
            raise ModelSpecError(f"{path}: an .npz file of Python objects (never unpickled): save numeric "
                                 "arrays") from None
        raise ModelSpecError(f"{path}: not a readable .npz file ({exc})") from None
    missing = [n for n in shapes if n not in arrays]
    extra = [n for n in arrays if n not in shapes]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"no array for input{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
        if extra:
            plural = len(extra) > 1
            parts.append(f"arra{'ys' if plural else 'y'} {', '.join(map(repr, extra))} name{'' if plural else 's'} "
                         "no input calibrated")
        raise ModelSpecError(f"{path}: {'; '.join(parts)} (inputs calibrated: {', '.join(map(repr, shapes))}; "
                             "--state and frozen inputs take none)")
    samples: dict[str, list[np.ndarray]] = {}
    for name, shape in shapes.items():
        array = arrays[name]
        if not np.issubdtype(array.dtype, np.number) and array.dtype != np.bool_:
            raise ModelSpecError(f"{path}: array {name!r} has dtype {array.dtype}, not numeric")
        if array.ndim != len(shape) + 1 or tuple(array.shape[1:]) != tuple(shape):
            raise ModelSpecError(f"{path}: array {name!r} is {array.shape}; input {name!r} takes samples of "
                                 f"shape {tuple(shape)} stacked on a first axis: {('N', *shape)}")
        dtype = array.dtype if array.dtype.kind in "iub" else np.float32
        samples[name] = [np.asarray(s, dtype) for s in array]
    counts = {name: len(s) for name, s in samples.items()}
    if len(set(counts.values())) > 1:
        raise ModelSpecError(f"{path}: inputs have different sample counts "
                             f"({', '.join(f'{n} {c}' for n, c in counts.items())}): one sample per input each")
    if not next(iter(counts.values()), 0):
        raise ModelSpecError(f"{path}: no calibration samples (the arrays' first axis is 0)")
    return [[samples[name][i] for name in shapes] for i in range(next(iter(counts.values())))]


def litert_available() -> bool:
    try:
        import ai_edge_litert.interpreter  # noqa: F401
    except ImportError:
        return False
    return True


class LiteRT:
    """A LiteRT interpreter for a .tflite model: ``kernels`` "reference" (BUILTIN_REF),
    "default" (XNNPACK and the optimized builtins) or "delegate" (our external delegate,
    loaded with ``delegate_options``, the rest on BUILTIN_REF)."""

    def __init__(self, model: str | os.PathLike, kernels: str = "reference", threads: int | None = None,
                 delegate_options: dict[str, str] | None = None) -> None:
        from ai_edge_litert import interpreter as litert
        if kernels not in ("reference", "default", "delegate"):
            raise ValueError(f"kernels must be 'reference', 'default' or 'delegate', not {kernels!r}")
        options: dict[str, Any] = {}
        if kernels in ("reference", "delegate"):
            options["experimental_op_resolver_type"] = litert.OpResolverType.BUILTIN_REF
        if kernels == "delegate":
            from libnpu.delegate import library_path
            options["experimental_delegates"] = [litert.load_delegate(str(library_path()), delegate_options or {})]
        self.interpreter = litert.Interpreter(model_path=str(model), num_threads=threads, **options)
        self.input_details = self.interpreter.get_input_details()
        # A free input dimension is sized by the first inputs run() is given: its declared
        # size may be one the kernels cannot prepare (a mel front end declared [1, 1]).
        self._sized = not any(-1 in d.get("shape_signature", ()) for d in self.input_details)
        if self._sized:
            self.interpreter.allocate_tensors()
        self.output_details = self.interpreter.get_output_details()

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Outputs for ``inputs`` (given in the model's input order, in its input dtypes)."""
        if len(inputs) != len(self.input_details):
            raise ValueError(f"model takes {len(self.input_details)} inputs, got {len(inputs)}")
        resized = False
        for detail, value in zip(self.input_details, inputs):
            if np.size(value) != int(np.prod(detail["shape"])):   # a free dimension (-1) given a size
                self.interpreter.resize_tensor_input(detail["index"], list(np.shape(value)))
                resized = True
        if resized or not self._sized:
            self.interpreter.allocate_tensors()
            self._sized = True
            self.input_details = self.interpreter.get_input_details()
            self.output_details = self.interpreter.get_output_details()
        for detail, value in zip(self.input_details, inputs):
            self.interpreter.set_tensor(detail["index"], np.asarray(value, detail["dtype"]).reshape(detail["shape"]))
        self.interpreter.invoke()
        return [self.interpreter.get_tensor(d["index"]).copy() for d in self.output_details]
