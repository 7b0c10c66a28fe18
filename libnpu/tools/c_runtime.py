"""The seed runtime's C API (``npu.h``): ``libnpu_runtime.so`` and the Python behind it.

``library()`` builds the shared library with :func:`libnpu.capi.embedding.build_embedded`:
``libnpu/capi/npu_runtime.c`` holds the public C calls (pointer checks, the thread-local
error message) and calls the ``npu_py_*`` functions defined here, which run in the
caller's thread with the GIL held. A handle is a number in :data:`_handles` cast to a
pointer, never reused: a freed or forged handle is refused, not dereferenced.

It lives among the tools, not in the library, because the face calls reuse the
BlazeFace pre- and post-processing of :mod:`libnpu.tools.faces` and the model-zoo names
of :mod:`libnpu.tools.models` (what ``npu run`` accepts).

Status codes: arguments are validated explicitly (INVALID_ARGUMENT, NOT_FOUND,
UNSUPPORTED_MODEL for a model that is not what the call needs); then each stage maps the
errors the library documents for it: the compiler's and the loadable's ``ValueError``
subclasses (UNSUPPORTED_MODEL), device requests' ``OSError`` by errno (TIMEOUT,
OUT_OF_MEMORY, else DEVICE_ERROR, with the next step for a missing or dead driver). Any
other exception is a bug: INTERNAL_ERROR, its traceback logged to stderr.
"""
from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import libnpu
from libnpu import model_zoo
from libnpu.capi import SOURCE_DIR
from libnpu.capi.embedding import build_embedded
from libnpu.compiler.cache import compile_cached
from libnpu.compiler.input_shapes import InputShapeError, parse_input_shapes
from libnpu.compiler.ir import IRError
from libnpu.dynamic_outputs import signature_text
from libnpu.loadable import Loadable, LoadableError, TensorDesc
from libnpu.model_zoo import ModelZooError
from libnpu.portability import default_devroot
from libnpu.runtime import ClosedError, dequantize
from libnpu.tools import faces
from libnpu.tools.errors import device_hint
from libnpu.tools.models import ModelSpecError, resolve
from libnpu.tools.vision import BLAZEFACE_SHORT_RANGE, AnchorOptions, ssd_anchors
from libnpu.visible_devices import DeviceChoiceError, default_index, node_number

__all__ = ["LIBRARY_NAME", "HEADER", "library", "Status"]

log = logging.getLogger("libnpu.capi")

LIBRARY_NAME = "libnpu_runtime"
HEADER = SOURCE_DIR / "npu.h"
_C_SOURCE = SOURCE_DIR / "npu_runtime.c"
_API_SLOT = "/* @NPU_PY_API@"


class Status:
    """npu_status_t (npu.h)."""
    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    UNSUPPORTED_MODEL = 3
    DEVICE_ERROR = 4
    TIMEOUT = 5
    OUT_OF_MEMORY = 6
    INTERNAL_ERROR = 7


_CDEF = """
typedef struct npu_runtime *npu_handle_t;
typedef struct npu_detection { float x_min, y_min, x_max, y_max, score; } npu_detection_t;
typedef enum npu_dtype { NPU_DTYPE_FLOAT32 = 0, NPU_DTYPE_INT8 = 1, NPU_DTYPE_UINT8 = 2, NPU_DTYPE_INT16 = 3,
                         NPU_DTYPE_INT32 = 4, NPU_DTYPE_INT64 = 5, NPU_DTYPE_FLOAT16 = 6,
                         NPU_DTYPE_BOOL = 7 } npu_dtype_t;
typedef struct npu_tensor_info {
    char name[128]; npu_dtype_t dtype; uint32_t rank; int64_t dims[8]; size_t bytes;
    int quantized; float scale; int32_t zero_point;
} npu_tensor_info_t;
void npu_capi_set_error(const char *message);
"""

_API = """
void npu_py_init(const char *model, const char *anchors, int face, const char *shapes, npu_handle_t *out,
                 int *status);
void npu_py_input_size(npu_handle_t h, uint32_t *whc, int *status);
void npu_py_infer_image(npu_handle_t h, const uint8_t *image, uint32_t length, npu_detection_t *dets,
                        uint32_t max, uint32_t *count, int *status);
void npu_py_free(npu_handle_t h);
void npu_py_tensor_count(npu_handle_t h, int outputs, uint32_t *count, int *status);
void npu_py_tensor_bytes(npu_handle_t h, int outputs, uint32_t index, size_t *bytes, int *status);
void npu_py_infer(npu_handle_t h, const void *const *inputs, void *const *outputs, int *status);
void npu_py_tensor_info(npu_handle_t h, int outputs, uint32_t index, npu_tensor_info_t *info, int *status);
"""

_INIT = "import libnpu.tools.c_runtime as _runtime\n_runtime.bind(ffi, lib)\n"


def _c_source() -> str:
    """npu_runtime.c with the prototypes of the Python-implemented functions (``_API``) in their slot."""
    text = _C_SOURCE.read_text()
    if _API_SLOT not in text:
        raise RuntimeError(f"{_C_SOURCE} lost its {_API_SLOT} slot")
    return text.replace(_API_SLOT, _API + _API_SLOT, 1)


def library() -> Path:
    """Build ``libnpu_runtime.so`` unless cached; its absolute path."""
    return build_embedded(LIBRARY_NAME, api=_API, cdef=_CDEF, c_source=_c_source(), init_code=_INIT,
                          include_dirs=[SOURCE_DIR], depends=[HEADER, _C_SOURCE])


# ---------------------------------------------------------------------------------------
# The Python side: one object per handle.

class CApiError(Exception):
    """A failure with the status the C caller gets."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class _Loaded:
    model: libnpu.CompiledModel
    face: _Face | None = None


@dataclass
class _Face:
    width: int
    height: int
    channels: int
    anchors: np.ndarray
    regressors: int          # output indices
    scores: int


_handles: dict[int, _Loaded] = {}
_handles_lock = threading.Lock()
_next_handle = itertools.count(1)


def _check_model_path(spec: str) -> Path:
    """The model file for ``spec`` (a path or a model-zoo name), validated."""
    if spec in model_zoo.model_names() and not Path(spec).exists():
        try:
            return resolve(spec)
        except ModelZooError as exc:
            raise CApiError(Status.NOT_FOUND, f"model-zoo model {spec!r} cannot be fetched: {exc}") from exc
    path = Path(spec)
    if not path.exists():
        raise CApiError(Status.NOT_FOUND, f"{spec}: no such model file (or model-zoo name: "
                                          f"{model_zoo.describe_names()})")
    if not path.is_file() or not os.access(path, os.R_OK):
        raise CApiError(Status.INVALID_ARGUMENT, f"{spec}: not a readable file")
    try:
        return resolve(path)
    except ModelSpecError as exc:
        raise CApiError(Status.UNSUPPORTED_MODEL, str(exc)) from exc


def _device_index() -> int:
    """$NPU_DEVICE (else 0), checked against NPU_VISIBLE_DEVICES now: a bad value is the
    caller's INVALID_ARGUMENT, not a device error (``libnpu.visible_devices``)."""
    try:
        index = default_index()
        node_number(index)
    except DeviceChoiceError as exc:
        raise CApiError(Status.INVALID_ARGUMENT, exc.strerror) from exc
    return index


def _device_error(exc: OSError, what: str) -> CApiError:
    status = {errno.ETIMEDOUT: Status.TIMEOUT, errno.ENOMEM: Status.OUT_OF_MEMORY}.get(exc.errno or 0,
                                                                                         Status.DEVICE_ERROR)
    return CApiError(status, device_hint(exc, default_devroot()) or f"{what}: {exc}")


def _input_shapes(text: str | None) -> dict[str | None, tuple[int, ...]]:
    """``"NAME=D,D;NAME=D,D"`` (npu_runtime_init_with_shapes) as the compiler takes it."""
    try:
        return parse_input_shapes(part for part in (text or "").split(";") if part.strip())
    except InputShapeError as exc:
        raise CApiError(Status.INVALID_ARGUMENT, str(exc).replace("--input-shape", "input shape")) from exc


def _load(path: Path, calibration: list[list[np.ndarray]] | None,
          shapes: dict[str | None, tuple[int, ...]] | None = None, **options: Any) -> libnpu.CompiledModel:
    device = _device_index()
    shaped = {"input_shapes": shapes} if shapes else {}     # unset: the cache key npu run and libnpu.load use
    try:
        # Compiles through the cache (a loadable is read as is), then opens the device.
        loadable = Loadable.load(path) if path.suffix == ".nlb" else \
            compile_cached(path, calibration, **shaped, **options)[0]
        loadable.check_runnable()
    except InputShapeError as exc:
        raise CApiError(Status.INVALID_ARGUMENT, f"{path}: {exc}") from exc
    except (IRError, LoadableError) as exc:
        raise CApiError(Status.UNSUPPORTED_MODEL, f"{path}: {exc}") from exc
    try:
        return libnpu.load(loadable, device, devroot=default_devroot())
    except OSError as exc:
        raise _device_error(exc, f"loading {path.name} on the device") from exc


def _face_layout(model: libnpu.CompiledModel, anchors_path: str | None) -> _Face:
    inputs, outputs = model.inputs, model.outputs
    if len(inputs) != 1 or len(inputs[0].shape) != 4 or inputs[0].shape[0] != 1 or inputs[0].shape[3] != 3:
        raise CApiError(Status.UNSUPPORTED_MODEL, "a face detector takes one [1][h][w][3] input; this model takes "
                                                  + ", ".join(str(list(d.shape)) for d in inputs))
    by_width = {d.shape[-1]: i for i, d in enumerate(outputs) if len(d.shape) == 3 and d.shape[0] == 1}
    if len(outputs) != 2 or set(by_width) != {16, 1} or outputs[0].shape[1] != outputs[1].shape[1]:
        raise CApiError(Status.UNSUPPORTED_MODEL, "a face detector has two outputs, regressors [1][n][16] and scores "
                                                  "[1][n][1]; this model has " +
                                                  ", ".join(str(list(d.shape)) for d in outputs))
    _, height, width, channels = inputs[0].shape
    count = outputs[0].shape[1]
    if anchors_path is None:
        options = AnchorOptions(**{**BLAZEFACE_SHORT_RANGE.__dict__, "input_height": height, "input_width": width})
        anchors = ssd_anchors(options)
        if len(anchors) != count:
            raise CApiError(Status.UNSUPPORTED_MODEL, f"the model has {count} anchors, BlazeFace short range's layout "
                                                      f"{len(anchors)}: pass an anchors file")
    else:
        anchors = _read_anchors(anchors_path, count)
    return _Face(width, height, channels, anchors, by_width[16], by_width[1])


def _read_anchors(path: str, count: int) -> np.ndarray:
    file = Path(path)
    if not file.exists():
        raise CApiError(Status.NOT_FOUND, f"{path}: no such anchors file")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise CApiError(Status.INVALID_ARGUMENT, f"{path}: cannot read the anchors file ({exc.strerror})") from exc
    if len(data) != count * 16:
        raise CApiError(Status.INVALID_ARGUMENT, f"{path}: {len(data)} bytes; the model has {count} anchors, "
                                                 f"{count * 16} bytes as float32 [{count}][4] expected")
    anchors = np.frombuffer(data, "<f4").reshape(count, 4).astype(np.float32)
    if not np.isfinite(anchors).all():
        raise CApiError(Status.INVALID_ARGUMENT, f"{path}: the anchors hold a NaN or infinity")
    return anchors


def _init(model_spec: str, anchors_path: str | None, face: bool, shapes: str | None = None) -> int:
    given = _input_shapes(shapes)
    path = _check_model_path(model_spec)
    calibration = faces.calibration_set() if face and path.suffix in (".tflite", ".onnx") else None
    model = _load(path, calibration, given, **({"recipe": faces.DETECTOR_RECIPE} if calibration is not None else {}))
    try:
        loaded = _Loaded(model, _face_layout(model, anchors_path) if face else None)
    except BaseException:
        model.close()
        raise
    with _handles_lock:
        key = next(_next_handle)
        _handles[key] = loaded
    return key


def _lookup(ffi: Any, handle: Any) -> _Loaded:
    key = int(ffi.cast("uintptr_t", handle))
    with _handles_lock:
        loaded = _handles.get(key)
    if loaded is None:
        raise CApiError(Status.INVALID_ARGUMENT, f"unknown handle {key:#x} (never returned by an init call, or freed)")
    return loaded


def _face_of(loaded: _Loaded) -> _Face:
    if loaded.face is None:
        raise CApiError(Status.INVALID_ARGUMENT,
                        "this handle is no face detector (npu_runtime_init_face_ssd makes one)")
    return loaded.face


def _infer(loaded: _Loaded, inputs: list[np.ndarray]) -> list[np.ndarray]:
    try:
        return loaded.model.infer(inputs)
    except ClosedError as exc:
        raise CApiError(Status.INVALID_ARGUMENT, f"the handle was freed during the call ({exc})") from exc
    except OSError as exc:
        raise _device_error(exc, "inference") from exc


def _detect(ffi: Any, loaded: _Loaded, pixels: Any, length: int) -> list[faces.Detection]:
    face = _face_of(loaded)
    expected = face.width * face.height * face.channels
    if length != expected:          # checked before reading: the caller's buffer holds length bytes
        raise CApiError(Status.INVALID_ARGUMENT, f"image_byte_len {length}: the model takes {face.width}x"
                                                 f"{face.height}x{face.channels} = {expected} bytes of RGB")
    image = np.frombuffer(ffi.buffer(pixels, length), np.uint8).reshape(face.height, face.width, face.channels)
    outputs = loaded.model.outputs
    raw = _infer(loaded, [faces.model_input(image)])
    regressors, scores = (_dequantized(raw[i], outputs[i]) for i in (face.regressors, face.scores))
    return faces.detect_normalized(regressors, scores, face.anchors, input_size=(face.width, face.height),
                                   threshold=0.5, iou_threshold=0.3)


def _dequantized(value: np.ndarray, desc: TensorDesc) -> np.ndarray:
    if desc.scale is not None and value.dtype.kind in "iu":
        return dequantize(value, desc)
    return value


def _tensors(loaded: _Loaded, outputs: int) -> list[TensorDesc]:
    return loaded.model.outputs if outputs else loaded.model.inputs


def _dense_bytes(desc: TensorDesc) -> int:
    if desc.dynamic:      # the caller's buffers have a size fixed in advance; the host's array has not
        raise CApiError(Status.UNSUPPORTED_MODEL, f"output {desc.name}: its shape is decided per run "
                                                  f"{signature_text(desc)}; the C API fills buffers of a fixed "
                                                  "size: run this model with libnpu.load (Python)")
    return int(np.prod(desc.shape)) * np.dtype(desc.dtype).itemsize


#: npu_dtype_t (npu.h) by numpy dtype name.
DTYPES = {"float32": 0, "int8": 1, "uint8": 2, "int16": 3, "int32": 4, "int64": 5, "float16": 6, "bool": 7}
MAX_DIMS, MAX_NAME = 8, 128


def _tensor(loaded: _Loaded, outputs: int, index: int) -> TensorDesc:
    tensors = _tensors(loaded, outputs)
    if index >= len(tensors):
        raise CApiError(Status.INVALID_ARGUMENT, f"{'output' if outputs else 'input'} {index}: the model has "
                                                 f"{len(tensors)}")
    return tensors[index]


def _describe(ffi: Any, desc: TensorDesc, info: Any) -> None:
    """Fill an npu_tensor_info_t from ``desc``."""
    dtype = np.dtype(desc.dtype).name
    if dtype not in DTYPES or len(desc.shape) > MAX_DIMS:
        raise CApiError(Status.UNSUPPORTED_MODEL, f"tensor {desc.name}: {dtype} of rank {len(desc.shape)} has no "
                                                  f"npu_tensor_info_t (dtypes: {', '.join(DTYPES)}; rank <= 8)")
    name = desc.name.encode(errors="replace")[:MAX_NAME - 1]
    ffi.memmove(info.name, name + b"\0", len(name) + 1)
    info.dtype, info.rank, info.bytes = DTYPES[dtype], len(desc.shape), 0 if desc.dynamic else _dense_bytes(desc)
    for axis, size in enumerate(desc.shape_signature or desc.shape):     # -1: decided per run
        info.dims[axis] = size
    if desc.scale is not None and np.size(desc.scale):
        info.quantized = 1
        info.scale = float(np.ravel(desc.scale)[0])
        info.zero_point = int(np.ravel(desc.zero_point)[0]) if desc.zero_point is not None else 0


def _run_generic(ffi: Any, loaded: _Loaded, inputs: Any, outputs: Any) -> None:
    arrays = []
    for i, desc in enumerate(loaded.model.inputs):
        if inputs[i] == ffi.NULL:
            raise CApiError(Status.INVALID_ARGUMENT, f"inputs[{i}] is NULL")
        data = ffi.buffer(inputs[i], _dense_bytes(desc))
        arrays.append(np.frombuffer(data, desc.dtype).reshape(desc.shape))
    targets = []
    for i, desc in enumerate(loaded.model.outputs):
        _dense_bytes(desc)        # refuses an output shaped per run before anything runs
        if outputs[i] == ffi.NULL:
            raise CApiError(Status.INVALID_ARGUMENT, f"outputs[{i}] is NULL")
        targets.append(outputs[i])
    for target, value in zip(targets, _infer(loaded, arrays)):
        ffi.memmove(target, np.ascontiguousarray(value), value.nbytes)


def _free(key: int) -> None:
    with _handles_lock:
        loaded = _handles.pop(key, None)
    if loaded is not None:
        try:
            loaded.model.close()
        except OSError as exc:
            raise _device_error(exc, "freeing the model") from exc


# ---------------------------------------------------------------------------------------
# The embedding API: each function reports through its status pointer, never raises.

def _report(ffi: Any, lib: Any, status_ptr: Any, call: Any) -> None:
    """Run ``call()``; store its status (and the failure's message for npu_runtime_last_error)."""
    try:
        call()
        status = Status.OK
    except CApiError as exc:
        status = exc.status
        lib.npu_capi_set_error(str(exc).encode(errors="replace"))
    except MemoryError:
        status = Status.OUT_OF_MEMORY
        lib.npu_capi_set_error(b"out of host memory")
    except Exception as exc:
        log.exception("libnpu_runtime: internal error")
        status = Status.INTERNAL_ERROR
        lib.npu_capi_set_error(f"internal error: {type(exc).__name__}: {exc}".encode(errors="replace"))
    if status_ptr != ffi.NULL:
        status_ptr[0] = status


def bind(ffi: Any, lib: Any) -> None:
    """Register the ``npu_py_*`` functions with the library's ``ffi`` (its init code calls this)."""
    def text(ptr: Any) -> str:
        return ffi.string(ptr).decode("utf-8", errors="surrogateescape")

    @ffi.def_extern()
    def npu_py_init(model: Any, anchors: Any, face: int, shapes: Any, out: Any, status: Any) -> None:
        def call() -> None:
            key = _init(text(model), None if anchors == ffi.NULL else text(anchors), bool(face),
                        None if shapes == ffi.NULL else text(shapes))
            out[0] = ffi.cast("npu_handle_t", key)
        _report(ffi, lib, status, call)

    @ffi.def_extern()
    def npu_py_input_size(handle: Any, whc: Any, status: Any) -> None:
        def call() -> None:
            face = _face_of(_lookup(ffi, handle))
            whc[0], whc[1], whc[2] = face.width, face.height, face.channels
        _report(ffi, lib, status, call)

    @ffi.def_extern()
    def npu_py_infer_image(handle: Any, image: Any, length: int, dets: Any, limit: int, count: Any,
                           status: Any) -> None:
        def call() -> None:
            found = _detect(ffi, _lookup(ffi, handle), image, length)
            for i, d in enumerate(found[:limit]):
                dets[i].x_min, dets[i].y_min, dets[i].x_max, dets[i].y_max = (float(v) for v in d.box)
                dets[i].score = d.score
            count[0] = min(len(found), limit)
        _report(ffi, lib, status, call)

    @ffi.def_extern()
    def npu_py_free(handle: Any) -> None:
        _report(ffi, lib, ffi.NULL, lambda: _free(int(ffi.cast("uintptr_t", handle))))

    @ffi.def_extern()
    def npu_py_tensor_count(handle: Any, outputs: int, count: Any, status: Any) -> None:
        def call() -> None:
            count[0] = len(_tensors(_lookup(ffi, handle), outputs))
        _report(ffi, lib, status, call)

    @ffi.def_extern()
    def npu_py_tensor_bytes(handle: Any, outputs: int, index: int, size: Any, status: Any) -> None:
        def call() -> None:
            size[0] = _dense_bytes(_tensor(_lookup(ffi, handle), outputs, index))
        _report(ffi, lib, status, call)

    @ffi.def_extern()
    def npu_py_tensor_info(handle: Any, outputs: int, index: int, info: Any, status: Any) -> None:
        _report(ffi, lib, status, lambda: _describe(ffi, _tensor(_lookup(ffi, handle), outputs, index), info))

    @ffi.def_extern()
    def npu_py_infer(handle: Any, inputs: Any, outputs: Any, status: Any) -> None:
        _report(ffi, lib, status, lambda: _run_generic(ffi, _lookup(ffi, handle), inputs, outputs))
