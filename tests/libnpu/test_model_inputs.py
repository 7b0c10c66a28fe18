"""Model inputs as users' models have them: frozen to a value (``--freeze-input``), integer
inputs taken in their own dtype, and rank-0 tensors, on the real device against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import tflite
from onnx import TensorProto, helper

import libnpu
from libnpu.compiler.frozen_inputs import FreezeInputError
from libnpu.compiler.lower import compile_model
from libnpu.compiler.onnx_host import probe_shapes
from libnpu.errors import InputError
from libnpu.loadable import Loadable
from libnpu.tools.cli import main
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, run_reference


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _rate_scaled() -> onnx.ModelProto:
    """y = x * (Cast(sr) / 16000 + 1): an int64 scalar rate driving constant arithmetic,
    as audio models take their sample rate."""
    nodes = [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["srf", "rate"], ["ratio"]),
             helper.make_node("Add", ["ratio", "one"], ["gain"]),
             helper.make_node("Mul", ["x", "gain"], ["y"])]
    graph = helper.make_graph(
        nodes, "rate", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16]),
                        helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor("rate", TensorProto.FLOAT, [], [16000.0]),
         helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_frozen_input_leaves_the_model_and_its_arithmetic_folds(npu, tmp_path, capsys):
    model = _rate_scaled()
    path = tmp_path / "rate.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / "rate.nlb"
    assert main(["compile", str(path), "-o", str(out), "--freeze-input", "sr=8000", "--no-progress",
                 "--cache-dir", str(tmp_path / "cache"), "--random-calibration", "4"]) == 0
    loadable = Loadable.load(out)
    assert [t.name for t in loadable.inputs()] == ["x"] and not loadable.host_steps
    x = np.linspace(-1, 1, 16, dtype=np.float32)[None]
    for rate in (8000, 16000):
        with libnpu.load(path, devroot=npu.devroot, freeze_inputs={"sr": rate},
                         cache_dir=tmp_path / "cache") as compiled:
            got = compiled.infer([x])[0]
        want = _ort(model, {"x": x, "sr": np.array(rate, np.int64)})[0]
        np.testing.assert_allclose(got, want, atol=2 * np.abs(want).max() / 127)


@pytest.mark.parametrize("given, message", [
    ({"rate": 1}, "--freeze-input names no input 'rate' (inputs: 'x', 'sr')"),
    ({"sr": 1.5}, "the input is int64; 1.5 is not a whole number"),
    ({"sr": [1, 2]}, "2 value(s) given, the input [] takes 1"),
    ({"sr": 1, "x": np.zeros(16)}, "would freeze every input"),
])
def test_a_value_the_input_cannot_take_is_refused(given, message):
    with pytest.raises(FreezeInputError, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        compile_model(_rate_scaled().SerializeToString(), freeze_inputs=given)


def test_freeze_input_on_the_command_line_says_what_is_wrong(tmp_path, capsys):
    path = tmp_path / "rate.onnx"
    path.write_bytes(_rate_scaled().SerializeToString())
    common = ["-o", str(tmp_path / "r.nlb"), "--no-progress", "--cache-dir", str(tmp_path / "cache")]
    assert main(["compile", str(path), "--freeze-input", "sr", *common]) == 2
    assert "expected NAME=VALUE[,VALUE...], e.g. sr=16000" in capsys.readouterr().err
    assert main(["compile", str(path), "--freeze-input", "sr=-1e30", *common]) == 2
    assert "outside int64's range" in capsys.readouterr().err


def _byte_embedding(ids: int = TensorProto.INT32) -> onnx.ModelProto:
    """magika-style: integer byte ids -> Gather from an embedding table -> mean -> MatMul."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["table", "bytes"], ["emb"], axis=0),
             helper.make_node("ReduceMean", ["emb"], ["pooled"], axes=[1], keepdims=0),
             helper.make_node("MatMul", ["pooled", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "bytes", [helper.make_tensor_value_info("bytes", ids, [1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("table", TensorProto.FLOAT, [257, 8], rng.standard_normal(257 * 8).tolist()),
         helper.make_tensor("w", TensorProto.FLOAT, [8, 4], rng.standard_normal(32).tolist())])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _close(got: np.ndarray, want: np.ndarray) -> None:
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine > 0.99, (cosine, got, want)


def test_int32_ids_feed_the_chips_gather_as_they_are(npu, tmp_path):
    model = _byte_embedding()
    rng = np.random.default_rng(1)
    calibration = [[rng.integers(0, 257, (1, 32), dtype=np.int32)] for _ in range(64)]
    loadable = compile_model(model.SerializeToString(), calibration)
    assert [(t.name, t.dtype) for t in loadable.inputs()] == [("bytes", "int32")]
    assert not loadable.host_steps and "GATHER" in [t.op for t in loadable.tasks]
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for _ in range(3):
            ids = rng.integers(0, 257, (1, 32), dtype=np.int32)
            _close(compiled.infer([ids])[0], _ort(model, {"bytes": ids})[0])
            request = compiled.create_request()
            request.set_inputs([ids])
            request.start()
            request.wait(30)
            _close(request.outputs()[0], _ort(model, {"bytes": ids})[0])


@pytest.mark.parametrize("long", [False, True])
def test_int64_ids_that_only_index_feed_the_chips_gather_as_int32(npu, long):
    """PyTorch exports token ids in int64: an input read only as Gather's indices (``long``:
    through ``.long()``'s Cast to int64 and an Identity) is taken as int32 (the caller's
    int64 narrowed, one that does not fit refused), not looked up on the CPU between two
    chip jobs."""
    model = _byte_embedding(TensorProto.INT64)
    if long:
        model.graph.node[0].input[1] = "ids"
        model.graph.node.insert(0, helper.make_node("Identity", ["as_long"], ["ids"]))
        model.graph.node.insert(0, helper.make_node("Cast", ["bytes"], ["as_long"], to=TensorProto.INT64))
    rng = np.random.default_rng(1)
    calibration = [[rng.integers(0, 257, (1, 32), dtype=np.int64)] for _ in range(64)]
    loadable = compile_model(model.SerializeToString(), calibration)
    assert [(t.name, t.dtype) for t in loadable.inputs()] == [("bytes", "int32")]
    assert not loadable.host_steps and "GATHER" in [t.op for t in loadable.tasks]
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        ids = rng.integers(0, 257, (1, 32), dtype=np.int64)
        _close(compiled.infer([ids])[0], _ort(model, {"bytes": ids})[0])
        ids[0, 3] = 2 ** 40
        with pytest.raises(InputError, match="do not fit int32"):
            compiled.infer([ids])


def test_int64_operands_the_chip_cannot_read_run_on_the_cpu_with_the_reason(npu, tmp_path):
    rate = _rate_scaled()           # not frozen: the int64 rate goes to Cast on the CPU, the rest to the chip
    loadable = compile_model(rate.SerializeToString())
    assert [(t.name, t.dtype) for t in loadable.inputs()] == [("x", "float32"), ("sr", "int64")]
    (step,) = loadable.host_steps
    assert step.op == "Cast" and "'sr' is int64 computed at run time" in step.reason
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (1, 16)).astype(np.float32)
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        sr = np.array(1, np.int64)       # in the random calibration's range (0, 1)
        _close(compiled.infer([x, sr])[0], _ort(rate, {"x": x, "sr": sr})[0])


def _floor_below_peak(clamp: str = "Max") -> onnx.ModelProto:
    """A log-mel front end's dynamic range clamp: max(x, ReduceMax(x) - 80), ReduceMax with
    keepdims=0 over every axis: a rank-0 tensor between two chip ops (``clamp="Clip"``: into
    a Clip with a run-time bound, as openWakeWord's melspectrogram has it: MAXIMUM on the chip too)."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0),
             helper.make_node("Sub", ["peak", "range"], ["floor"]),
             helper.make_node(clamp, ["x", "floor"], ["y"])]
    graph = helper.make_graph(
        nodes, "floor", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor("range", TensorProto.FLOAT, [], [80.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("clamp", ["Max", "Clip"])
def test_a_rank_0_tensor_runs_on_the_chip_as_a_1_vector(npu, clamp):
    model = _floor_below_peak(clamp)
    rng = np.random.default_rng(3)
    calibration = [[rng.uniform(-120, 20, (1, 4, 8)).astype(np.float32)] for _ in range(16)]
    loadable = compile_model(model.SerializeToString(), calibration)
    assert not loadable.host_steps
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in (rng.uniform(-120, 20, (1, 4, 8)).astype(np.float32) for _ in range(3)):
            want = _ort(model, {"x": x})[0]
            np.testing.assert_allclose(compiled.infer([x])[0], want, atol=140 / 255 * 1.5)


def _masked_tflite() -> bytes:
    """A float TFLite graph with a bool mask, as TensorFlow writes div_no_nan:
    out = SELECT_V2(EQUAL(x, 0), 0, x * 2) + 1."""
    f32 = np.float32
    tensors = [TensorSpec([1, 8], f32, name="x"), TensorSpec([], f32, data=np.array(0, f32), name="zero"),
               TensorSpec([], f32, data=np.array(2, f32), name="two"),
               TensorSpec([], f32, data=np.array(1, f32), name="one"),
               TensorSpec([1, 8], np.bool_, name="mask"), TensorSpec([1, 8], f32, name="twice"),
               TensorSpec([1, 8], f32, name="kept"), TensorSpec([1, 8], f32, name="out")]
    op = tflite.BuiltinOperator
    ops = [OpSpec(op.EQUAL, [0, 1], [4]), OpSpec(op.MUL, [0, 2], [5]), OpSpec(op.SELECT_V2, [4, 1, 5], [6]),
           OpSpec(op.ADD, [6, 3], [7])]
    return build_model(tensors, ops, [0], [7])


def test_a_bool_tensor_in_a_float_tflite_graph_is_not_quantized(npu):
    model = _masked_tflite()
    rng = np.random.default_rng(4)
    loadable = compile_model(model)
    assert {op for s in loadable.host_steps for op in s.op.split("+")} == {"EQUAL", "SELECT_V2"}   # grouped or not
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for _ in range(3):
            x = rng.uniform(-1, 1, (1, 8)).astype(np.float32)
            x[0, ::3] = 0
            want = run_reference(model, x)[0]
            np.testing.assert_allclose(want, np.where(x == 0, 0, x * 2) + 1, rtol=1e-6)
            np.testing.assert_allclose(compiled.infer([x])[0], want, atol=4 / 255 * 1.5)


def _rate_branch() -> onnx.ModelProto:
    """Silero VAD's pattern: If(Equal(sr, 16000)) picks the branch for the sample rate, its
    branches reading the outer input x."""
    def branch(name: str, factor: float) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Mul", ["x", f"{name}_k"], [f"{name}_y"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, 16])],
                                 [helper.make_tensor(f"{name}_k", TensorProto.FLOAT, [], [factor])])
    nodes = [helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["y"], then_branch=branch("at16k", 2.0),
                              else_branch=branch("other", -3.0))]
    graph = helper.make_graph(
        nodes, "branch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16]),
                          helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor("rate", TensorProto.INT64, [], [16000])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_frozen_rate_folds_the_if_it_drives(npu):
    model = _rate_branch()
    x = np.linspace(-1, 1, 16, dtype=np.float32)[None]
    for rate in (16000, 8000):
        loadable = compile_model(model.SerializeToString(), freeze_inputs={"sr": rate})
        assert [t.name for t in loadable.inputs()] == ["x"] and not loadable.host_steps
        with libnpu.load(loadable, devroot=npu.devroot) as compiled:
            want = _ort(model, {"x": x, "sr": np.array(rate, np.int64)})[0]
            np.testing.assert_allclose(compiled.infer([x])[0], want, atol=2 * np.abs(want).max() / 127)


def _pcm_scaled() -> onnx.ModelProto:
    """An audio model taking 16-bit PCM as it is: Cast to float, scaled by 1/32768, into a
    MatMul (how VAD and denoiser exports take ``int16`` samples)."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Cast", ["audio"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "s"], ["x"]),
             helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("Relu", ["y"], ["out"])]
    graph = helper.make_graph(
        nodes, "pcm", [helper.make_tensor_value_info("audio", TensorProto.INT16, [1, 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8])],
        [onnx.numpy_helper.from_array(rng.normal(0, 0.1, (64, 8)).astype(np.float32), "w"),
         onnx.numpy_helper.from_array(np.array(1 / 32768, np.float32), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_int16_pcm_samples_are_taken_as_they_are_and_cast_on_the_cpu(npu):
    """A float model with an int16 input (PCM samples) compiles: the input keeps its dtype,
    its Cast runs on the CPU with the reason, the rest on the chip (before, the import
    refused it: "inputs are float32, int32, int64 or bool, not int16")."""
    model = _pcm_scaled()
    rng = np.random.default_rng(5)
    calibration = [[rng.integers(-8000, 8000, (1, 64)).astype(np.int16)] for _ in range(32)]
    loadable = compile_model(model.SerializeToString(), calibration, recipe="fast")
    assert [(t.name, t.dtype) for t in loadable.inputs()] == [("audio", "int16")]
    (step,) = loadable.host_steps
    assert step.op == "Cast" and "'audio' is int16 computed at run time" in step.reason
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for _ in range(2):
            pcm = rng.integers(-8000, 8000, (1, 64)).astype(np.int16)
            _close(compiled.infer([pcm])[0], _ort(model, {"audio": pcm})[0])


def test_shapes_onnx_cannot_infer_are_probed_with_int16_inputs_in_their_dtype():
    """The shape probe feeds onnxruntime each input in its own dtype: an int16 input was fed
    as float32, and onnxruntime refused the run ("run to find the shape ... failed")."""
    model = _pcm_scaled()
    found, varying = probe_shapes(model, ["x"], "test")
    assert found == {"x": ((1, 64), "float32")} and not varying
