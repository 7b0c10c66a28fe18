"""The LiteRT external delegate, loaded unchanged by ``ai_edge_litert.interpreter.load_delegate``:
the MLPerf-Tiny int8 models byte-identical to LiteRT BUILTIN_REF, whole and split into
partitions by the ``ops`` allow-list; bad options and an absent device raise ValueError;
destroying the delegate before or after its interpreter frees the device memory once."""
from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.support.device import fetch_model

litert = pytest.importorskip("ai_edge_litert.interpreter")
pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")

MODELS = ["resnet8_cifar10", "keyword_spotting", "visual_wake_words", "anomaly_detection"]


@pytest.fixture(scope="module")
def library() -> str:
    from libnpu.delegate import library_path
    return str(library_path())


def model_path(name: str) -> str:
    from libnpu import model_zoo
    return str(fetch_model(getattr(model_zoo, name)))


def interpreter(path: str, delegate=None):
    kw = {"experimental_delegates": [delegate]} if delegate is not None else {}
    it = litert.Interpreter(model_path=path, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF, **kw)
    it.allocate_tensors()
    return it


def random_input(detail: dict, rng: np.random.Generator) -> np.ndarray:
    if detail["dtype"] == np.int8:
        return rng.integers(-128, 128, detail["shape"], dtype=np.int8)
    return rng.uniform(-1, 1, detail["shape"]).astype(detail["dtype"])


def run(it, x: np.ndarray) -> list[np.ndarray]:
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def memory_used(npu) -> int:
    import libnpu
    with libnpu.initialize(npu.devroot) as session:
        return session.open(0).info()["memory_used"]


@pytest.mark.parametrize("ops", [None, "CONV_2D"], ids=["whole", "conv-only"])
@pytest.mark.parametrize("name", MODELS)
def test_mlperf_tiny_byte_identical_to_builtin_ref(npu, library, tmp_path, capfd, name, ops):
    path = model_path(name)
    options = {"devroot": str(npu.devroot), "cache_dir": str(tmp_path / "cache"), "verbose": "true"}
    if ops:
        options["ops"] = ops
    delegate = litert.load_delegate(library, options)
    delegated, reference = interpreter(path, delegate), interpreter(path)
    log = capfd.readouterr().err
    assert "partition(s)" in log, log
    if ops and name != "anomaly_detection":       # convolutions split by the other operators
        assert log.count("NPU partition") >= 2, log
    rng = np.random.default_rng(7)
    for _ in range(3):
        x = random_input(reference.get_input_details()[0], rng)
        for got, want in zip(run(delegated, x), run(reference, x), strict=True):
            assert got.dtype == want.dtype and np.array_equal(got, want)
    del delegated, delegate


def test_claims_only_what_the_allow_list_names(npu, library, tmp_path, capfd):
    delegate = litert.load_delegate(library, {"devroot": str(npu.devroot), "verbose": "1", "ops": "ADD",
                                              "cache_dir": str(tmp_path)})
    interpreter(model_path("resnet8_cifar10"), delegate)
    log = capfd.readouterr().err
    assert "3 of 16 nodes on the NPU in 3 partition(s)" in log
    assert "CPU node 0 CONV_2D: not in the allow-list" in log


def test_partition_options(npu, library, tmp_path, capfd):
    base = {"devroot": str(npu.devroot), "verbose": "1", "ops": "CONV_2D", "cache_dir": str(tmp_path)}
    interpreter(model_path("resnet8_cifar10"), litert.load_delegate(library, dict(base, max_partitions="1")))
    assert "3 of 16 nodes on the NPU in 1 partition(s)" in capfd.readouterr().err
    interpreter(model_path("resnet8_cifar10"), litert.load_delegate(library, dict(base, min_nodes_per_partition="4")))
    assert "0 of 16 nodes on the NPU in 0 partition(s)" in capfd.readouterr().err


@pytest.mark.parametrize("options, message", [
    ({"colour": "blue"}, "unknown option 'colour'"),
    ({"device": "one"}, "device='one' is not an integer"),
    ({"max_partitions": "-1"}, "max_partitions='-1' must be >= 0"),
    ({"ops": "CONV_2D,NOT_AN_OP"}, "unknown TFLite operators: NOT_AN_OP"),
    ({"verbose": "maybe"}, "not a boolean"),
    ({"priority": "urgent"}, "priority='urgent' must be one of LOW, MEDIUM, HIGH"),
])
def test_bad_options_raise_value_error(npu, library, options, message):
    with pytest.raises(ValueError, match=message):
        litert.load_delegate(library, dict(options, devroot=str(npu.devroot)))


def test_absent_device_raises_value_error(library, tmp_path):
    with pytest.raises(ValueError, match="npu delegate"):
        litert.load_delegate(library, {"devroot": str(tmp_path)})


def test_no_device_instance_raises_value_error(npu, library):
    """The ValueError's message names the node and the devices there, not a raw FileNotFoundError."""
    node = npu.devroot / "npu7"
    with pytest.raises(ValueError, match=f"npu delegate: {node}: no such device \\(devices there: npu0\\)"):
        litert.load_delegate(library, {"devroot": str(npu.devroot), "device": "7"})


@pytest.mark.parametrize("order", ["interpreter-first", "delegate-first"])
def test_destroy_order_frees_device_memory(npu, library, tmp_path, order):
    path = model_path("resnet8_cifar10")
    before = memory_used(npu)
    delegate = litert.load_delegate(library, {"devroot": str(npu.devroot), "cache_dir": str(tmp_path)})
    it = interpreter(path, delegate)
    x = random_input(it.get_input_details()[0], np.random.default_rng(1))
    expected = run(interpreter(path), x)
    assert np.array_equal(run(it, x)[0], expected[0])
    assert memory_used(npu) > before
    if order == "delegate-first":
        delegate.__del__()                       # what a C program destroying it first does
        assert np.array_equal(run(it, x)[0], expected[0])   # the partitions keep what they need
        del it
    else:
        del it
        delegate.__del__()
    del delegate
    gc.collect()
    assert memory_used(npu) == before


def test_a_resized_minus_one_input_compiles_again_with_the_interpreters_shapes(npu, library, tmp_path):
    from tests.support.free_dims_models import sequence_tflite
    from tests.support.tflite_builder import ReferenceRunner
    delegate = litert.load_delegate(library, {"devroot": str(npu.devroot), "cache_dir": str(tmp_path)})
    it = litert.Interpreter(model_content=sequence_tflite(), experimental_delegates=[delegate],
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()                         # the stored shape [1, 4] for shape_signature [1, -1]
    rng = np.random.default_rng(5)
    for length in (40, 12):
        it.resize_tensor_input(it.get_input_details()[0]["index"], [1, length])
        it.allocate_tensors()
        x = rng.integers(-128, 128, (1, length), dtype=np.int8)
        [y] = run(it, x)
        assert y.shape == (1, length // 4, 4)
        np.testing.assert_array_equal(y, ReferenceRunner(sequence_tflite())(x)[0])


def test_cli_prints_the_library_path(library):
    done = subprocess.run([sys.executable, "-m", "libnpu.tools", "delegate", "--path"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == library


def test_priority_option_sets_the_partitions_job_priority(npu, library, tmp_path):
    path = model_path("resnet8_cifar10")
    delegate = litert.load_delegate(library, {"devroot": str(npu.devroot), "priority": "high",
                                              "cache_dir": str(tmp_path)})
    it = interpreter(path, delegate)
    x = random_input(it.get_input_details()[0], np.random.default_rng(3))
    assert np.array_equal(run(it, x)[0], run(interpreter(path), x)[0])
    from libnpu.delegate import plugin
    partitions = [entry[1] for entry in plugin._live.values() if isinstance(entry, tuple)]
    assert partitions and all(p.model.get_property("MODEL_PRIORITY") == "HIGH" for p in partitions)


# What a LiteRT program does after the device's driver went away under it, run as its own
# process (stderr is what its user sees): invoke fails, teardown is quiet.
_DRIVER_GONE_PROGRAM = """
import sys
import numpy as np
from ai_edge_litert import interpreter as litert
library, model, devroot = sys.argv[1:]
delegate = litert.load_delegate(library, {"devroot": devroot})
it = litert.Interpreter(model_path=model, experimental_delegates=[delegate])
it.allocate_tensors()
detail = it.get_input_details()[0]
it.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
it.invoke()
print("ready", flush=True)
sys.stdin.readline()
try:
    it.invoke()
    print("invoked")
except RuntimeError as exc:
    print("refused")
del it, delegate
print("done")
"""


def test_teardown_after_the_driver_stopped_is_quiet(fresh_npu, library, tmp_path):
    env = {**os.environ, "NPU_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER_GONE_PROGRAM, library, model_path("resnet8_cifar10"),
                             str(fresh_npu.devroot)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline() == "ready\n", proc.communicate()[1]
        fresh_npu.kmd("stop")
        out, err = proc.communicate("go\n", timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.split() == ["refused", "done"]
    assert "Traceback" not in err and "Exception ignored" not in err
    [line] = [line for line in err.splitlines() if line.startswith("npu delegate")]     # the invoke's report
    assert "the device's driver is gone" in line and str(fresh_npu.node) in line


# ---- hostile models and options (docs/security.md, "Round 3 attacks") ----

def _add_model(shape=(1, 8), zero_point=0) -> bytes:
    import tflite

    from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, named_options
    q = dict(scale=[0.05], zero_point=[0])
    tensors = [TensorSpec(shape, np.int8, scale=[0.05], zero_point=[zero_point]), TensorSpec(shape, np.int8, **q),
               TensorSpec(shape, np.int8, **q)]
    return build_model(tensors, [OpSpec(tflite.BuiltinOperator.ADD, [0, 1], [2], *named_options("AddOptions"))],
                       [0, 1], [2])


@pytest.mark.parametrize("model, why", [
    (_add_model(zero_point=1000), "zero point 1000 outside int8's range"),      # LiteRT clamps, the chip refuses
    (_add_model(shape=(0, 8)), "an empty tensor"),                              # the chip runs no empty tensor
], ids=["zero-point-out-of-range", "empty-tensor"])
def test_a_model_the_chip_cannot_run_stays_on_the_cpu_and_runs(npu, library, tmp_path, capfd, model, why):
    delegate = litert.load_delegate(library, {"devroot": str(npu.devroot), "cache_dir": str(tmp_path),
                                              "verbose": "true"})
    kw = {"experimental_op_resolver_type": litert.OpResolverType.BUILTIN_REF}
    delegated = litert.Interpreter(model_content=model, experimental_delegates=[delegate], **kw)
    reference = litert.Interpreter(model_content=model, **kw)
    outputs = []
    for it in (delegated, reference):
        it.allocate_tensors()
        for detail in it.get_input_details():
            it.set_tensor(detail["index"], np.full(detail["shape"], 3, np.int8))
        it.invoke()
        outputs.append(it.get_tensor(it.get_output_details()[0]["index"]))
    assert np.array_equal(outputs[0], outputs[1])
    assert why in capfd.readouterr().err
    del delegated, delegate


@pytest.mark.parametrize("option", ["device", "verbose", "priority", "max_partitions"])
def test_a_huge_option_value_gives_a_short_message(npu, library, option):
    with pytest.raises(ValueError) as refused:
        litert.load_delegate(library, {"devroot": str(npu.devroot), option: "9x" * 500_000})
    message = str(refused.value)
    assert f"option {option}=" in message and "(1000000 characters)" in message and len(message) < 300
