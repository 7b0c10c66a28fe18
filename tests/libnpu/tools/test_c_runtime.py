"""The seed runtime's C API (npu.h, libnpu_runtime.so) on a real device: the C examples
built with the flags `npu capi` prints and run as C programs, and the same library
driven from Python's ctypes."""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from libnpu.tools import c_runtime, faces
from libnpu.tools.c_runtime import Status
from libnpu.tools.vision import iou, resize, ssd_anchors

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# Past the 256-entry command ring more than once (the seed DLL died at frame 128); the
# 1,000-frame run is `python -m benchmarks.capi_faces` (about 30 ms a frame on 2 CPUs).
FRAMES = 300


def npu_cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "libnpu.tools", *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    """The examples, compiled with `npu capi --cflags` / `--libs` (which build the library)."""
    out = tmp_path_factory.mktemp("examples")
    flags = npu_cli("capi", "--cflags", "--libs").split()
    built = {}
    for name in ("face_detect", "run_model"):
        built[name] = out / name
        subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(EXAMPLES / f"{name}.c"), *flags,
                        "-o", str(built[name])], check=True)
    return built


@pytest.fixture(scope="module")
def picture(tmp_path_factory, astronaut) -> tuple[Path, np.ndarray]:
    """scikit-image's astronaut at BlazeFace's input size, as raw RGB bytes."""
    small = np.clip(resize(astronaut, 128, 128) + 0.5, 0, 255).astype(np.uint8)
    path = tmp_path_factory.mktemp("picture") / "astronaut_128.rgb"
    small.tofile(path)
    return path, small


def run_c(program: Path, *args: str, devroot: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NPU_DEVROOT": str(devroot)}
    return subprocess.run([str(program), *args], capture_output=True, text=True, timeout=300, env=env)


def faces_in(stdout: str) -> list[list[float]]:
    """[score, x0, x1, y0, y1] per 'face score S box x A..B y C..D' line."""
    rows = []
    for line in stdout.splitlines():
        if line.startswith("face score"):
            words = line.split()
            x0, x1 = words[5].split("..")
            y0, y1 = words[7].split("..")
            rows.append([float(words[2]), float(x0), float(x1), float(y0), float(y1)])
    return rows


def test_c_program_detects_the_astronauts_face_frame_after_frame(npu, programs, picture, blazeface_path, litert_ok):
    path, small = picture
    done = run_c(programs["face_detect"], str(blazeface_path), str(path), str(FRAMES), devroot=npu.devroot)
    assert done.returncode == 0, done.stderr
    assert "input 128x128x3" in done.stdout
    assert f"frames {FRAMES} faces 1 ok" in done.stdout          # every frame found the first frame's face
    [(score, x0, x1, y0, y1)] = faces_in(done.stdout)
    reference = faces.detect_normalized(*_float_outputs(blazeface_path, small))
    assert len(reference) == 1
    assert score > 0.8
    assert iou(np.array([x0, y0, x1, y1]) / 128, reference[0].box) > 0.85


def _float_outputs(model: Path, small: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from tests.support.litert import litert_run
    regressors, scores = litert_run(model, [faces.model_input(small)], reference=False)
    return regressors, scores


def test_anchors_from_a_file_give_the_same_faces(npu, programs, picture, blazeface_path, tmp_path):
    path, _ = picture
    anchors = tmp_path / "anchors.bin"
    ssd_anchors().astype("<f4").tofile(anchors)            # float32 [896][4]
    generated = run_c(programs["face_detect"], str(blazeface_path), str(path), "1", devroot=npu.devroot)
    from_file = run_c(programs["face_detect"], str(blazeface_path), str(path), "1", str(anchors),
                      devroot=npu.devroot)
    assert from_file.returncode == 0, from_file.stderr
    assert from_file.stdout == generated.stdout
    shifted = tmp_path / "shifted.bin"
    (ssd_anchors() + np.float32([0.25, 0, 0, 0])).astype("<f4").tofile(shifted)
    moved = run_c(programs["face_detect"], str(blazeface_path), str(path), "1", str(shifted), devroot=npu.devroot)
    [(_, x0, x1, _, _)], [(_, mx0, mx1, _, _)] = faces_in(generated.stdout), faces_in(moved.stdout)
    assert (mx0 - x0, mx1 - x1) == pytest.approx((32, 32), abs=0.11)     # the file is used: boxes move 0.25 * 128


def test_c_program_runs_resnet8_byte_identical_to_litert(npu, programs, resnet8_path, litert, tmp_path):
    rng = np.random.default_rng(14)
    x = rng.integers(-128, 128, (1, 32, 32, 3), dtype=np.int8)
    x.tofile(tmp_path / "input.bin")
    done = run_c(programs["run_model"], str(resnet8_path), str(tmp_path / "out_"), str(tmp_path / "input.bin"),
                 devroot=npu.devroot)
    assert done.returncode == 0, done.stderr
    # the program prints what npu_runtime_input_info / output_info describe
    assert re.search(r"^input 0 '[^']+': int8 \[1, 32, 32, 3\], 3072 bytes, scale [0-9.e-]+ zero point -?\d+$",
                     done.stdout, re.M), done.stdout
    assert re.search(r"^output 0 '[^']+': int8 \[1, 10\], 10 bytes, scale", done.stdout, re.M), done.stdout
    [expected] = litert(resnet8_path, [x])
    assert (tmp_path / "out_0.bin").read_bytes() == expected.tobytes()


def test_c_program_gets_a_status_and_a_message_for_a_missing_model(npu, programs, tmp_path):
    missing = tmp_path / "no_such_model.tflite"
    for program, args in (("run_model", (str(missing), str(tmp_path / "o"))),
                          ("face_detect", (str(missing), str(tmp_path / "o")))):
        (tmp_path / "o").write_bytes(b"\0" * 16)
        done = run_c(programs[program], *args, devroot=npu.devroot)
        assert done.returncode == 1
        assert done.stderr.strip() == f"npu_runtime_init{'_face_ssd' if program == 'face_detect' else ''}: " \
                                      f"status {Status.NOT_FOUND}: {missing}: no such model file (or model-zoo " \
                                      "name: resnet8, kws, vww, anomaly, blazeface, or mp_<name> for 12 mediapipe " \
                                      "models (`npu fetch` lists them))"


def test_no_device_is_a_device_error_naming_the_next_step(programs, resnet8_path, tmp_path):
    done = run_c(programs["run_model"], str(resnet8_path), str(tmp_path / "o"), devroot=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith(f"npu_runtime_init: status {Status.DEVICE_ERROR}: no device {tmp_path}/npu0")
    assert "npu-kmd start --devroot" in done.stderr


# ---- the same library from Python's ctypes ----

class Detection(ctypes.Structure):
    _fields_ = [(name, ctypes.c_float) for name in ("x_min", "y_min", "x_max", "y_max", "score")]


class TensorInfo(ctypes.Structure):
    """npu_tensor_info_t (npu.h)."""
    _fields_ = [("name", ctypes.c_char * 128), ("dtype", ctypes.c_int), ("rank", ctypes.c_uint32),
                ("dims", ctypes.c_int64 * 8), ("bytes", ctypes.c_size_t), ("quantized", ctypes.c_int),
                ("scale", ctypes.c_float), ("zero_point", ctypes.c_int32)]


@pytest.fixture(scope="module")
def capi():
    lib = ctypes.CDLL(str(c_runtime.library()))
    handle_p = ctypes.POINTER(ctypes.c_void_p)
    u32p = ctypes.POINTER(ctypes.c_uint32)
    for name, restype, argtypes in (
            ("npu_runtime_last_error", ctypes.c_char_p, []),
            ("npu_runtime_init", ctypes.c_int, [ctypes.c_char_p, handle_p]),
            ("npu_runtime_init_with_shapes", ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, handle_p]),
            ("npu_runtime_init_face_ssd", ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, handle_p]),
            ("npu_runtime_get_input_size", ctypes.c_int, [ctypes.c_void_p, u32p, u32p, u32p]),
            ("npu_runtime_infer_image", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32,
                                                       ctypes.POINTER(Detection), ctypes.c_uint32, u32p]),
            ("npu_runtime_free", None, [ctypes.c_void_p]),
            ("npu_runtime_num_inputs", ctypes.c_uint32, [ctypes.c_void_p]),
            ("npu_runtime_num_outputs", ctypes.c_uint32, [ctypes.c_void_p]),
            ("npu_runtime_input_bytes", ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_uint32]),
            ("npu_runtime_output_bytes", ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_uint32]),
            ("npu_runtime_infer", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                                 ctypes.POINTER(ctypes.c_void_p)]),
            ("npu_runtime_input_info", ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(TensorInfo)]),
            ("npu_runtime_output_info", ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(TensorInfo)]),
            ("npu_dtype_name", ctypes.c_char_p, [ctypes.c_int])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


@pytest.fixture
def on_device(npu, monkeypatch):
    monkeypatch.setenv("NPU_DEVROOT", str(npu.devroot))


def test_ctypes_generic_calls_match_litert(capi, on_device, resnet8_path, litert):
    handle = ctypes.c_void_p()
    assert capi.npu_runtime_init(str(resnet8_path).encode(), ctypes.byref(handle)) == Status.OK, \
        capi.npu_runtime_last_error()
    try:
        assert (capi.npu_runtime_num_inputs(handle), capi.npu_runtime_num_outputs(handle)) == (1, 1)
        assert (capi.npu_runtime_input_bytes(handle, 0), capi.npu_runtime_output_bytes(handle, 0)) == (3072, 10)
        rng = np.random.default_rng(7)
        for _ in range(3):
            x = rng.integers(-128, 128, (1, 32, 32, 3), dtype=np.int8)
            y = np.zeros(10, np.int8)
            inputs = (ctypes.c_void_p * 1)(x.ctypes.data)
            outputs = (ctypes.c_void_p * 1)(y.ctypes.data)
            assert capi.npu_runtime_infer(handle, inputs, outputs) == Status.OK
            assert capi.npu_runtime_last_error() == b""
            assert y.tobytes() == litert(resnet8_path, [x])[0].tobytes()
        assert capi.npu_runtime_input_bytes(handle, 1) == 0
        assert capi.npu_runtime_last_error() == b"input 1: the model has 1"
        w = ctypes.c_uint32()
        assert capi.npu_runtime_get_input_size(handle, ctypes.byref(w), ctypes.byref(w), ctypes.byref(w)) \
            == Status.INVALID_ARGUMENT
        assert b"no face detector" in capi.npu_runtime_last_error()
        null_inputs = (ctypes.c_void_p * 1)(None)
        assert capi.npu_runtime_infer(handle, null_inputs, outputs) == Status.INVALID_ARGUMENT
        assert capi.npu_runtime_last_error() == b"inputs[0] is NULL"
    finally:
        capi.npu_runtime_free(handle)
    assert capi.npu_runtime_num_inputs(handle) == 0                       # a freed handle is refused
    assert b"unknown handle" in capi.npu_runtime_last_error()


def test_ctypes_face_calls_and_refusals(capi, on_device, blazeface_path, picture):
    _, small = picture
    handle = ctypes.c_void_p()
    assert capi.npu_runtime_init_face_ssd(str(blazeface_path).encode(), None, ctypes.byref(handle)) == Status.OK
    try:
        w, h, c = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint32()
        assert capi.npu_runtime_get_input_size(handle, ctypes.byref(w), ctypes.byref(h), ctypes.byref(c)) == 0
        assert (w.value, h.value, c.value) == (128, 128, 3)
        dets, count = (Detection * 4)(), ctypes.c_uint32(99)
        assert capi.npu_runtime_infer_image(handle, small.tobytes(), small.nbytes, dets, 4, ctypes.byref(count)) == 0
        assert count.value == 1 and dets[0].score > 0.8
        assert 0 < dets[0].x_min < dets[0].x_max < 1 and 0 < dets[0].y_min < dets[0].y_max < 1
        assert capi.npu_runtime_infer_image(handle, small.tobytes(), small.nbytes, None, 0, ctypes.byref(count)) == 0
        assert count.value == 0                                             # max 0: counts none
        short = small.tobytes()[:-1]
        assert capi.npu_runtime_infer_image(handle, short, len(short), dets, 4, ctypes.byref(count)) \
            == Status.INVALID_ARGUMENT
        assert capi.npu_runtime_last_error() == b"image_byte_len 49151: the model takes 128x128x3 = 49152 bytes of RGB"
        assert capi.npu_runtime_infer_image(None, small.tobytes(), small.nbytes, dets, 4, ctypes.byref(count)) \
            == Status.INVALID_ARGUMENT
    finally:
        capi.npu_runtime_free(handle)
    capi.npu_runtime_free(None)                                             # NULL is ignored


def test_ctypes_bad_models_and_anchors(capi, on_device, blazeface_path, resnet8_path, tmp_path):
    handle = ctypes.c_void_p(1234)
    assert capi.npu_runtime_init(b"/no/such/model.tflite", ctypes.byref(handle)) == Status.NOT_FOUND
    assert handle.value is None                                              # *out_handle is NULL on failure
    assert capi.npu_runtime_init(None, ctypes.byref(handle)) == Status.INVALID_ARGUMENT
    assert capi.npu_runtime_init(b"x", None) == Status.INVALID_ARGUMENT
    assert capi.npu_runtime_last_error() == b"out_handle is NULL"
    garbage = tmp_path / "garbage.tflite"
    garbage.write_bytes(b"not a flatbuffer at all")
    assert capi.npu_runtime_init(str(garbage).encode(), ctypes.byref(handle)) == Status.UNSUPPORTED_MODEL
    text = tmp_path / "model.txt"
    text.write_text("hello")
    assert capi.npu_runtime_init(str(text).encode(), ctypes.byref(handle)) == Status.UNSUPPORTED_MODEL
    # ResNet-8 is no face detector; anchors files must hold exactly n float32 quadruples
    assert capi.npu_runtime_init_face_ssd(str(resnet8_path).encode(), None, ctypes.byref(handle)) \
        == Status.UNSUPPORTED_MODEL
    assert capi.npu_runtime_last_error() == b"a face detector has two outputs, regressors [1][n][16] and scores " \
                                            b"[1][n][1]; this model has [1, 10]"
    short = tmp_path / "short.bin"
    np.zeros((895, 4), "<f4").tofile(short)
    assert capi.npu_runtime_init_face_ssd(str(blazeface_path).encode(), str(short).encode(), ctypes.byref(handle)) \
        == Status.INVALID_ARGUMENT
    assert capi.npu_runtime_last_error().endswith(b"14336 bytes as float32 [896][4] expected")
    assert capi.npu_runtime_init_face_ssd(str(blazeface_path).encode(), b"/no/anchors.bin", ctypes.byref(handle)) \
        == Status.NOT_FOUND
    assert handle.value is None


def test_last_error_is_per_thread(capi):
    seen = {}

    def fail_here() -> None:
        capi.npu_runtime_init(b"/no/such/model.tflite", ctypes.byref(ctypes.c_void_p()))
        seen["failing"] = capi.npu_runtime_last_error()

    thread = threading.Thread(target=fail_here)
    thread.start()
    thread.join()
    capi.npu_runtime_free(None)                  # a call that succeeds in this thread
    assert capi.npu_runtime_last_error() == b""
    assert seen["failing"].startswith(b"/no/such/model.tflite: no such model file")


def memory_used(devroot: Path) -> int:
    import libnpu
    with libnpu.initialize(devroot) as session:
        return session.open(0).info()["memory_used"]


def test_ctypes_float_model_keeps_float32_io_and_matches_libnpu(capi, npu, on_device, tmp_path):
    import onnx

    import libnpu
    from tests.support.model_builders import small_cnn
    path = tmp_path / "small_cnn.onnx"
    onnx.save(small_cnn(), path)
    before = memory_used(npu.devroot)
    handle = ctypes.c_void_p()
    assert capi.npu_runtime_init(str(path).encode(), ctypes.byref(handle)) == Status.OK, \
        capi.npu_runtime_last_error()
    try:
        assert capi.npu_runtime_input_bytes(handle, 0) == 1 * 3 * 16 * 16 * 4       # float32, as the model
        assert capi.npu_runtime_output_bytes(handle, 0) == 10 * 4
        info = TensorInfo()
        assert capi.npu_runtime_input_info(handle, 0, ctypes.byref(info)) == Status.OK
        assert (capi.npu_dtype_name(info.dtype), list(info.dims[:info.rank]), info.bytes, info.quantized) \
            == (b"float32", [1, 3, 16, 16], 3 * 16 * 16 * 4, 0)
        assert capi.npu_runtime_output_info(handle, 1, ctypes.byref(info)) == Status.INVALID_ARGUMENT
        assert capi.npu_runtime_last_error() == b"output 1: the model has 1"
        assert capi.npu_runtime_input_info(handle, 0, None) == Status.INVALID_ARGUMENT
        assert capi.npu_dtype_name(99) == b"unknown"
        x = np.random.default_rng(3).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
        y = np.zeros(10, np.float32)
        assert capi.npu_runtime_infer(handle, (ctypes.c_void_p * 1)(x.ctypes.data),
                                      (ctypes.c_void_p * 1)(y.ctypes.data)) == Status.OK
        with libnpu.load(path, devroot=npu.devroot) as model:          # the same compile (cache), in Python
            [expected] = model.infer([x])
        assert y.tobytes() == expected.reshape(-1).tobytes()
    finally:
        capi.npu_runtime_free(handle)
    assert memory_used(npu.devroot) == before                              # free gave everything back


def test_ctypes_input_shapes_for_a_minus_one_tflite_input(capi, on_device, tmp_path):
    from tests.support.free_dims_models import sequence_tflite
    from tests.support.tflite_builder import ReferenceRunner
    path = tmp_path / "sequence.tflite"
    path.write_bytes(sequence_tflite())
    handle = ctypes.c_void_p()
    assert capi.npu_runtime_init(str(path).encode(), ctypes.byref(handle)) == Status.INVALID_ARGUMENT
    assert capi.npu_runtime_last_error().endswith(b"input 'x' has free dimensions [1]: give --input-shape x=1,<d1>")
    assert capi.npu_runtime_init_with_shapes(str(path).encode(), b"y=1,8", ctypes.byref(handle)) \
        == Status.INVALID_ARGUMENT
    assert b"names no input 'y' (inputs: 'x')" in capi.npu_runtime_last_error()
    assert capi.npu_runtime_init_with_shapes(str(path).encode(), b"x=1,0", ctypes.byref(handle)) \
        == Status.INVALID_ARGUMENT
    assert capi.npu_runtime_last_error() == b"input shape x=1,0: dimensions must be positive integers"
    assert capi.npu_runtime_init_with_shapes(str(path).encode(), b"x=1,24", ctypes.byref(handle)) == Status.OK, \
        capi.npu_runtime_last_error()
    try:
        assert (capi.npu_runtime_input_bytes(handle, 0), capi.npu_runtime_output_bytes(handle, 0)) == (24, 24)
        x = np.random.default_rng(4).integers(-128, 128, (1, 24), dtype=np.int8)
        y = np.zeros((1, 6, 4), np.int8)
        assert capi.npu_runtime_infer(handle, (ctypes.c_void_p * 1)(x.ctypes.data),
                                      (ctypes.c_void_p * 1)(y.ctypes.data)) == Status.OK
        np.testing.assert_array_equal(y, ReferenceRunner(sequence_tflite())(x)[0])   # LiteRT resized the same
    finally:
        capi.npu_runtime_free(handle)


def test_ctypes_threads_share_one_handle(capi, on_device, resnet8_path, litert):
    handle = ctypes.c_void_p()
    assert capi.npu_runtime_init(str(resnet8_path).encode(), ctypes.byref(handle)) == Status.OK
    rng = np.random.default_rng(11)
    inputs = [rng.integers(-128, 128, (1, 32, 32, 3), dtype=np.int8) for _ in range(4)]
    expected = [litert(resnet8_path, [x])[0].tobytes() for x in inputs]
    wrong: list[str] = []

    def infer_many(x: np.ndarray, want: bytes) -> None:
        y = np.zeros(10, np.int8)
        for _ in range(10):
            status = capi.npu_runtime_infer(handle, (ctypes.c_void_p * 1)(x.ctypes.data),
                                            (ctypes.c_void_p * 1)(y.ctypes.data))
            if status != Status.OK or y.tobytes() != want:
                wrong.append(f"status {status}: {capi.npu_runtime_last_error()}")

    threads = [threading.Thread(target=infer_many, args=pair) for pair in zip(inputs, expected)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        capi.npu_runtime_free(handle)
    assert wrong == []


def test_npu_capi_lists_both_libraries(capsys):
    from libnpu.tools.cli import main
    assert main(["capi"]) == 0
    out = capsys.readouterr().out
    assert "npu.h:" in out and "nvdla_port.h:" in out and "-lnpu_runtime" in out and "-lnvdla_port" in out
    assert main(["capi", "--path"]) == 0
    assert Path(capsys.readouterr().out.strip()) == c_runtime.library()


def test_python_that_cannot_start_is_an_internal_error_not_a_crash(programs, resnet8_path, tmp_path):
    broken = tmp_path / "shadow" / "libnpu"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('a libnpu that cannot be imported')\n")
    env = {**os.environ, "PYTHONPATH": str(broken.parent), "NPU_DEVROOT": str(tmp_path)}
    done = subprocess.run([str(programs["run_model"]), str(resnet8_path), str(tmp_path / "o")], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 1
    assert f"npu_runtime_init: status {Status.INTERNAL_ERROR}: libnpu's Python runtime could not start " \
           "(its traceback is on stderr)" in done.stderr
    assert "a libnpu that cannot be imported" in done.stderr          # cffi printed the init code's traceback
