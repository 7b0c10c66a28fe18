"""CPU fallback that never breaks: any node the host can run runs on the CPU, whatever its
outputs and their types, control flow and onnxruntime's own operators included, and
adjacent CPU nodes make one host call. Each model runs on the device and is compared with
onnxruntime / LiteRT on the model itself."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import tflite
from onnx import TensorProto, helper, numpy_helper

import libnpu
from libnpu.compiler.lower import compile_model
from libnpu.loadable import Loadable
from libnpu.portability import MEM_RW
from tests.support import dynamic_models, dynamic_quant_models, host_models, log_mel_models, model_builders
from tests.support.litert import litert_run
from tests.support.rnn_models import cosine
from tests.support.step_models import gru_attention_step, step_feeds
from tests.support.tflite_builder import OpSpec, SubgraphSpec, TensorSpec, build_model, named_options

B = tflite.BuiltinOperator


def _feeds(shape: tuple[int, ...], count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(count)]


def _check_onnx(npu, model, calibration: list[np.ndarray], **options) -> libnpu.Loadable:
    """Compile ``model``, run it on the device on inputs calibration never saw, compare with
    onnxruntime; the loadable, for the test to look at its host steps."""
    data = model.SerializeToString()
    loadable = compile_model(data, [[x] for x in calibration], **options)
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in _feeds(calibration[0].shape, 3, seed=99):
            (got,) = compiled.infer([x], dequantized=True)
            (want,) = session.run(None, {name: x})
            _close(got, want)
    return loadable


def _close(got: np.ndarray, want: np.ndarray, bar: float = 0.99) -> None:
    """The device's output follows the reference as the issue's bar asks (int8 on the chip)."""
    assert got.shape == want.shape
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    assert g @ w / (np.linalg.norm(g) * np.linalg.norm(w) + 1e-12) >= bar


def _host_ops(loadable) -> list[str]:
    return [step.op for step in loadable.host_steps]


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_a_host_rnn_whose_states_nobody_reads(npu, cell):
    # The allow-list keeps the RNN on the CPU even where the chip has a kernel for it.
    model = host_models.lstm_unused_states(cell=cell)
    loadable = _check_onnx(npu, model, _feeds((5, 1, 8), 8, seed=1), ops=["MatMul", "Relu"])
    assert _host_ops(loadable) == [cell]
    (step,) = loadable.host_steps
    assert len(step.outputs) == 1           # Y leaves the host call; Y_h and Y_c do not


def test_topk_whose_int64_indices_nobody_reads(npu):
    loadable = _check_onnx(npu, host_models.topk_values(), _feeds((4, 8), 8, seed=2))
    assert _host_ops(loadable) == ["TopK+Relu"]     # the Relu of the values it selects with it (selection_keys)


def test_int64_indices_between_two_host_calls_stay_integers(npu):
    # They were quantized to int8 like an activation: wrong elements gathered.
    model = host_models.topk_indices_across_the_chip()
    calibration = _feeds((4, 8), 8, seed=11)
    loadable = _check_onnx(npu, model, calibration, recipe="fast",   # run on calibration samples: all calibrate
                           min_npu_partition=0)     # the MatMul between the calls stays on the chip
    assert _host_ops(loadable) == ["TopK", "Concat+GatherElements+Add"]
    assert [t.dtype for t in loadable.tensors if t.name == "i"] == ["int64"]
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in calibration[:3]:
            (got,) = compiled.infer([x], dequantized=True)
            (want,) = session.run(None, {"x": x})
            assert np.abs(got - want).max() <= 0.1 * np.abs(want).max()


def test_integer_arithmetic_on_host_results_stays_on_the_host(npu):
    loadable = _check_onnx(npu, host_models.topk_indices_arithmetic(), _feeds((4, 8), 8, seed=12), recipe="fast")
    assert _host_ops(loadable) == ["TopK+Add+Cast+Add"]


def test_onnxruntime_dynamic_quantization_ops_make_one_host_call(npu):
    # uint8 codes, an int32 accumulator: types the chip never sees, inside one host call, with
    # the Muls by the run's scales (on the chip, values past calibration's largest were clipped:
    # 10.1 for 15.1). A product of two activations: a weight's patterns import as float
    # (compiler.dynamic_quant).
    loadable = _check_onnx(npu, dynamic_quant_models.integer_product_of_activations(), _feeds((4, 8), 8, seed=3))
    assert _host_ops(loadable) == ["DynamicQuantizeLinear+DynamicQuantizeLinear+MatMulInteger+Cast+Mul+Mul"]


def test_a_com_microsoft_op_whose_shapes_onnx_cannot_infer(npu):
    # The FusedMatMul before it is lowered to the chip (compiler.onnx_ms_ops): the whole
    # MatMul+FusedMatMul+Attention ran on the CPU before
    loadable = _check_onnx(npu, host_models.com_microsoft_attention(), _feeds((1, 4, 8), 8, seed=4))
    assert _host_ops(loadable) == ["Attention"]


@pytest.mark.parametrize("build, ops", [(host_models.if_on_data, ["Greater+If"]),
                                        (host_models.loop_three_times, ["Loop"])])
def test_onnx_control_flow_reading_the_outer_scope(npu, build, ops):
    loadable = _check_onnx(npu, build(), _feeds((4, 8), 8, seed=5), recipe="fast")
    assert _host_ops(loadable) == ops


def test_an_integer_model_input_read_on_the_host(npu):
    # A sample rate choosing a branch: "only float32 inputs are supported" before.
    model = host_models.if_on_an_integer_input()
    xs = _feeds((4, 8), 8, seed=13)
    loadable = compile_model(model.SerializeToString(), [[x, np.int64(16000)] for x in xs])
    assert _host_ops(loadable) == ["Equal+If"]
    assert [t.dtype for t in loadable.tensors if t.name == "sr"] == ["int64"]
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x, rate in zip(xs[:4], (16000, 8000, 16000, 8000)):
            (got,) = compiled.infer([x, np.int64(rate)], dequantized=True)
            (want,) = session.run(None, {"x": x, "sr": np.array(rate, np.int64)})
            _close(got, want)


def test_float_ids_cast_to_integers_reach_their_lookup_as_integers(npu):
    # DeepCut: float ids -> Cast(int32) -> Gather. The Cast was taken for a no-op (ids the
    # chip narrows), so the Gathers' host call got the float input where onnxruntime wants
    # int32 indices, and the compile failed ("Type 'tensor(float)' of input parameter").
    model = host_models.float_ids_embeddings()
    rng = np.random.default_rng(14)
    ids = [[rng.integers(0, 12, (1, 6)).astype(np.float32) for _ in "ab"] for _ in range(6)]
    loadable = compile_model(model.SerializeToString(), ids[:4], recipe="fast")
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for a, b in ids[4:]:
            (got,) = compiled.infer([a, b], dequantized=True)
            (want,) = session.run(None, {"a": a, "b": b})
            _close(got, want)


def test_a_shape_that_depends_on_the_data_stays_inside_one_host_call(npu):
    loadable = _check_onnx(npu, host_models.nonzero_count(), _feeds((4, 8), 8, seed=6), recipe="fast")
    assert _host_ops(loadable) == ["NonZero+Cast+ReduceSum"]


def test_a_shape_that_depends_on_the_data_leaves_the_host_as_a_model_output():
    # "the shape of 'nz' depends on the input data, and the host call must ... return it as
    # an output, which need static shapes" before
    model = host_models.nonzero_count()
    del model.graph.node[3:]                              # the NonZero's output is the model's output
    del model.graph.output[:]
    model.graph.output.append(onnx.helper.make_tensor_value_info("nz", onnx.TensorProto.INT64, None))
    (nz,) = compile_model(model.SerializeToString(), recipe="fast").outputs()
    assert (nz.shape_signature, nz.max_shape) == ((2, -1), (2, 32))


def _images(count: int, seed: int, scale: float = 1.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.uniform(-1, 1, (1, 3, 8, 8)) * scale).astype(np.float32) for _ in range(count)]


def _loop_alone(model: onnx.ModelProto) -> onnxruntime.InferenceSession:
    """onnxruntime on the decoder's Loop alone, fed the encoder's features."""
    part = onnx.utils.Extractor(model).extract_model(["feat"], ["seq"])
    return onnxruntime.InferenceSession(part.SerializeToString(), providers=["CPUExecutionProvider"])


def test_a_loop_decoder_whose_trip_count_the_data_decides(npu):
    # "the shape of 'seq' depends on the input data, and the host call must ... return it as
    # an output, which need static shapes" before: the whole model refused.
    model = dynamic_models.conv_loop_decoder()
    loadable = Loadable.from_bytes(compile_model(model.SerializeToString(), [[x] for x in _images(8, 1)],
                                                recipe="fast").to_bytes())
    feat, seq = loadable.outputs()
    assert not feat.dynamic and seq.shape_signature == (-1, 1, 4) and seq.max_shape == (16, 1, 4)
    assert [s.op for s in loadable.host_steps] == ["Loop"] and loadable.tasks        # the encoder on the chip
    whole = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    loop = _loop_alone(model)
    steps = set()
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in [*_images(2, 7, .3), *_images(2, 8)]:
            got_feat, got_seq = compiled.infer([x])
            want_feat, want_seq = whole.run(None, {"x": x})
            _close(got_feat, want_feat)                         # the chip's part: the usual bar
            _close(got_seq, want_seq)                           # the same number of steps, first
            (exact,) = loop.run(None, {"feat": got_feat})       # the CPU's part: exactly
            assert np.array_equal(got_seq, exact)
            steps.add(got_seq.shape[0])
        assert len(steps) > 1                   # the trip count did change with the data
        with pytest.raises(ValueError, match=r"decided per run \[-1, 1, 4\] \(at most \[16, 1, 4\]\)"):
            compiled.runtime.bind_output_tensor(1, compiled.device.alloc_mem(4096, MEM_RW))


def test_nonzero_indices_of_the_chip_features(npu):
    model = dynamic_models.conv_nonzero()
    loadable = compile_model(model.SerializeToString(), [[x] for x in _images(8, 2)], recipe="fast")
    assert [(d.shape_signature, d.max_shape) for d in loadable.outputs()] == [(None, None), ((4, -1), (4, 256))]
    assert "idx [4, -1] (at most [4, 256]) int64" in loadable.summary()
    counts = set()
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in _images(3, 9):
            features, idx = compiled.infer([x])
            assert idx.dtype == np.int64 and np.array_equal(idx, np.array(np.nonzero(features > .5)))
            counts.add(idx.shape[1])
    assert len(counts) > 1


def test_cpu_nodes_group_across_branches_into_one_host_call(npu):
    # Six CPU nodes in two runs, separated in the file by the other branch's Conv: one call.
    loadable = _check_onnx(npu, host_models.cpu_runs(), _feeds((1, 3, 6, 6), 8, seed=7))
    assert _host_ops(loadable) == ["CumSum+Sin+Cos+CumSum+Sin+Cos"]
    assert [len(tasks) > 0 for tasks, _ in loadable.partitions()] == [True, True]


def test_a_registered_function_inside_a_grouped_host_call(npu):
    calls = []

    def sin(x):
        calls.append(x.shape)
        return np.sin(x)
    libnpu.register_host_op("Sin", sin)
    try:
        loadable = _check_onnx(npu, host_models.cpu_runs(), _feeds((1, 3, 6, 6), 8, seed=7))
    finally:
        libnpu.unregister_host_op("Sin")
    assert _host_ops(loadable) == ["CumSum+Sin+Cos+CumSum+Sin+Cos"]
    assert calls and set(calls) == {(1, 4, 6, 6)}      # our Sin ran, onnxruntime the nodes around it


# TFLite control flow: LiteRT runs IF and WHILE with the subgraphs they name.

def _branch(factor: float, name: str) -> SubgraphSpec:
    return SubgraphSpec([TensorSpec((1, 4), np.float32, name="in"),
                         TensorSpec((), np.float32, data=np.float32(factor), name="factor"),
                         TensorSpec((1, 4), np.float32, name="out")],
                        [OpSpec(B.MUL, [0, 1], [2], *named_options("MulOptions"))], [0], [2], name)


def _fc_around(middle: list[OpSpec], middle_tensors: list[TensorSpec], subgraphs: list[SubgraphSpec]) -> bytes:
    """FULLY_CONNECTED -> ``middle`` (reading tensor 2, writing tensor 5 + len(middle_tensors) - 1)
    -> FULLY_CONNECTED, float, input [1, 8]."""
    rng = np.random.default_rng(8)
    tensors = [TensorSpec((1, 8), np.float32, name="x"),
               TensorSpec((4, 8), np.float32, data=rng.uniform(-1, 1, (4, 8)).astype(np.float32), name="w"),
               TensorSpec((1, 4), np.float32, name="h"),
               TensorSpec((4, 4), np.float32, data=rng.uniform(-1, 1, (4, 4)).astype(np.float32), name="w2"),
               TensorSpec((1, 4), np.float32, name="y"),
               *middle_tensors]
    last = len(tensors) - 1
    ops = [OpSpec(B.FULLY_CONNECTED, [0, 1, -1], [2]), *middle, OpSpec(B.FULLY_CONNECTED, [last, 3, -1], [4])]
    return build_model(tensors, ops, [0], [4], subgraphs)


def _if_model() -> bytes:
    middle = [TensorSpec((2,), np.int32, data=np.array([0, 1], np.int32), name="axes"),   # 5
              TensorSpec((), np.float32, name="sum"), TensorSpec((), np.float32, data=np.float32(0), name="zero"),
              TensorSpec((), np.bool_, name="cond"), TensorSpec((1, 4), np.float32, name="chosen")]
    return _fc_around([OpSpec(B.SUM, [2, 5], [6], *named_options("ReducerOptions", KeepDims=False)),
                       OpSpec(B.GREATER, [6, 7], [8]),
                       OpSpec(B.IF, [8, 2], [9], *named_options("IfOptions", ThenSubgraphIndex=1,
                                                                ElseSubgraphIndex=2))],
                      middle, [_branch(2.0, "then"), _branch(-1.0, "else")])


def _while_model() -> bytes:
    """WHILE i < 3: (i + 1, v * 0.5)."""
    i32 = np.int32
    cond = SubgraphSpec([TensorSpec((), i32, name="i"), TensorSpec((1, 4), np.float32, name="v"),
                         TensorSpec((), i32, data=i32(3), name="three"), TensorSpec((), np.bool_, name="go")],
                        [OpSpec(B.LESS, [0, 2], [3])], [0, 1], [3], "cond")
    body = SubgraphSpec([TensorSpec((), i32, name="i"), TensorSpec((1, 4), np.float32, name="v"),
                         TensorSpec((), i32, data=i32(1), name="one"),
                         TensorSpec((), np.float32, data=np.float32(.5), name="half"),
                         TensorSpec((), i32, name="i2"), TensorSpec((1, 4), np.float32, name="v2")],
                        [OpSpec(B.ADD, [0, 2], [4], *named_options("AddOptions")),
                         OpSpec(B.MUL, [1, 3], [5], *named_options("MulOptions"))], [0, 1], [4, 5], "body")
    middle = [TensorSpec((), i32, data=i32(0), name="start"),            # 5
              TensorSpec((), i32, name="count"), TensorSpec((1, 4), np.float32, name="looped")]
    return _fc_around([OpSpec(B.WHILE, [5, 2], [6, 7], *named_options("WhileOptions", CondSubgraphIndex=1,
                                                                       BodySubgraphIndex=2))],
                      middle, [cond, body])


@pytest.mark.parametrize("build, ops", [(_if_model, "GREATER+IF"), (_while_model, "WHILE")])
def test_tflite_control_flow_on_litert(npu, build, ops):
    data = build()
    calibration = _feeds((1, 8), 8, seed=9)
    loadable = compile_model(data, [[x] for x in calibration], recipe="fast")   # the point is the control flow
    assert _host_ops(loadable) == [ops]
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in _feeds((1, 8), 4, seed=10):
            (got,) = compiled.infer([x], dequantized=True)
            (want,) = litert_run(data, [x], reference=False)
            _close(got, want)


def test_a_product_of_scalars_runs_on_the_chip(npu):
    # A scale computed at run time (DynamicQuantizeLinear's) times a constant one: rank 0,
    # which the binary descriptor took as no shape at all (the job failed with EINVAL).
    f = onnx.TensorProto.FLOAT
    graph = onnx.helper.make_graph([onnx.helper.make_node("Mul", ["x", "c"], ["y"])], "scalars",
                                   [onnx.helper.make_tensor_value_info("x", f, [])],
                                   [onnx.helper.make_tensor_value_info("y", f, [])],
                                   [onnx.numpy_helper.from_array(np.float32(.5), "c")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    calibration = [[np.float32(v)] for v in np.linspace(-1, 1, 9)]
    with libnpu.load(compile_model(model.SerializeToString(), calibration), devroot=npu.devroot) as compiled:
        for x in (-.8, .3, .9):
            (got,) = compiled.infer([np.float32(x)], dequantized=True)
            assert got.shape == () and abs(float(got) - x / 2) <= 0.01


# Escalation's last resort (libnpu.compiler.cpu_float): a layer no integer grid can hold is
# kept in float on the CPU when the int16 steps still miss the target; --recipe fast keeps it on the chip.
def _log_magnitude() -> onnx.ModelProto:
    """``log(1 + 2^20 |x|)`` feeding a classifier layer: the log front end of Silero VAD v4.
    The small values of ``x`` carry the result, and no int16 grid spanning the large ones keeps them."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 4)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Mul", ["a", "k"], ["m"]),
             helper.make_node("Add", ["m", "one"], ["p"]), helper.make_node("Log", ["p"], ["l"]),
             helper.make_node("MatMul", ["l", "w"], ["y"])]
    graph = helper.make_graph(nodes, "log_magnitude", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.array(2.0 ** 20, np.float32), "k"),
                               numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                               numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _samples(count: int, seed: int) -> list[np.ndarray]:
    """Values from 1e-6 to 1 (quiet and loud audio)."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((1, 16)) * 10.0 ** rng.uniform(-6, 0, (1, 16))).astype(np.float32)
            for _ in range(count)]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def test_a_layer_no_integer_grid_holds_runs_in_float_on_the_cpu(npu):
    model = _log_magnitude().SerializeToString()
    calibration = [[x] for x in _samples(20, 1)]
    loadable = compile_model(model, calibration)
    fidelity = loadable.metadata["fidelity"]
    # the log magnifies its input grid's error: its front end goes to the CPU right after int8
    assert fidelity["chosen"].endswith(" + CPU front end") and not fidelity["missed"]
    assert all(s["scores"]["y"] < 0.99 for s in fidelity["steps"] if "CPU" not in s["step"])
    assert [layer.split()[0] for layer in fidelity["cpu_float"]["layers"]] == ["ABS", "MUL", "ADD", "LOG"]
    (step,) = loadable.host_steps
    assert step.reason.startswith("kept in float on the CPU: int8 error") and "target 0.99" in step.reason
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in _samples(4, 99):          # inputs calibration never saw
            (got,) = compiled.infer([x], dequantized=True)
            assert _cosine(got, session.run(None, {"x": x})[0]) >= 0.99
    fast = compile_model(model, calibration, recipe="fast")
    assert not fast.host_steps and "fidelity" not in fast.metadata


def test_a_model_that_is_all_front_end_runs_in_float_on_the_cpu(npu):
    # A log-mel spectrogram whose log is its output: the whole model is the front end no
    # grid holds (0.24 at int8); it runs as one float host call and matches float LiteRT.
    model = log_mel_models.log_mel_tflite(decibels=False)
    loadable = compile_model(model, log_mel_models.audio(12, 24 * 64, 1))
    fidelity = loadable.metadata["fidelity"]
    assert fidelity["chosen"] == "int8 + CPU front end" and not fidelity["missed"], fidelity
    (step,) = loadable.host_steps
    assert step.reason.startswith("kept in float on the CPU: int8 error")
    assert "the front end is the model" in step.reason
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for (x,) in log_mel_models.audio(3, 24 * 64, 99):          # audio calibration never saw
            (got,) = compiled.infer([x], dequantized=True)
            (want,) = litert_run(model, [x], reference=False)
            assert _cosine(got, want) >= 0.99


# Host fallback order and raw inputs

def _if_on_a_squeezed_condition() -> bytes:
    """The IF of a TF model converted through onnx-tf: its condition a RESHAPE to a scalar
    whose shape operand is an int32 [0] tensor with an empty buffer (pyopen-wakeword's heads)."""
    middle = [TensorSpec((1,), np.int32, data=np.array([1], np.int32), name="axis"),              # 5
              TensorSpec((1, 1), np.float32, name="sum"), TensorSpec((), np.float32, data=np.float32(0), name="zero"),
              TensorSpec((1, 1), np.bool_, name="cond"),
              TensorSpec((0,), np.int32, data=np.zeros(0, np.int32), name="no_dims"),              # 9: empty buffer
              TensorSpec((), np.bool_, name="scalar_cond"), TensorSpec((1, 4), np.float32, name="chosen")]
    return _fc_around([OpSpec(B.SUM, [2, 5], [6], *named_options("ReducerOptions", KeepDims=True)),
                       OpSpec(B.GREATER, [6, 7], [8]),
                       OpSpec(B.RESHAPE, [8, 9], [10]),
                       OpSpec(B.IF, [10, 2], [11], *named_options("IfOptions", ThenSubgraphIndex=1,
                                                                  ElseSubgraphIndex=2))],
                      middle, [_branch(2.0, "then"), _branch(-1.0, "else")])


def test_an_empty_constant_is_no_input_of_a_host_call(npu):
    # A zero-element tensor nobody writes is an empty constant, as LiteRT reads it: it was
    # taken for a run-time input of the host call, which nothing produced ("used before it
    # is produced").
    data = _if_on_a_squeezed_condition()
    loadable = compile_model(data, [[x] for x in _feeds((1, 8), 8, seed=9)], recipe="fast")
    assert "IF" in _host_ops(loadable)[-1]
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in _feeds((1, 8), 4, seed=10):
            (got,) = compiled.infer([x], dequantized=True)
            (want,) = litert_run(data, [x], reference=False)
            _close(got, want)


def _bytes_one_hot() -> onnx.ModelProto:
    """magika v1's front: float byte values (0..256) -> Cast to int32 -> OneHot(257) -> MatMul."""
    f = TensorProto.FLOAT
    w = np.random.default_rng(3).uniform(-1, 1, (257, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["bytes"], ["ids"], to=TensorProto.INT32),
         helper.make_node("OneHot", ["ids", "depth", "off_on"], ["hot"], axis=-1),
         helper.make_node("MatMul", ["hot", "w"], ["y"])],
        "bytes_one_hot", [helper.make_tensor_value_info("bytes", f, [1, 16])],
        [helper.make_tensor_value_info("y", f, [1, 16, 4])],
        [numpy_helper.from_array(np.array(257, np.int32), "depth"),
         numpy_helper.from_array(np.array([0, 1], np.float32), "off_on"), numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_float_input_only_host_ops_read_reaches_them_as_given(npu):
    # The input was quantized to the chip's grid before the host's Cast, which truncates:
    # a byte value came back one lower wherever the grid's point fell below the integer.
    data = _bytes_one_hot().SerializeToString()
    rng = np.random.default_rng(4)
    feeds = [rng.integers(0, 257, (1, 16)).astype(np.float32) for _ in range(12)]
    loadable = compile_model(data, [[x] for x in feeds[:8]], recipe="fast")
    assert _host_ops(loadable) == ["Cast+OneHot"]
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in feeds[8:]:
            (got,) = compiled.infer([x], dequantized=True)
            (want,) = session.run(None, {"bytes": x})
            np.testing.assert_allclose(got, want, atol=0.02)   # each byte's row of w, on an int8 grid


def test_a_top_k_head_decides_in_float_and_its_rows_leave_on_no_grid(npu):
    # Before: the scores' int8 sigmoid grid tied the best anchors (TopK took the lowest
    # indices) and the [4, 6] rows left on one int8 grid of the pixels: scores 0.99 read
    # 0.0 or 1.5, class 1 read 1.5; cosine 0.18-0.73.
    model = model_builders.end_to_end_head(model_builders.yolo_head(score_gain=1.0), 3, 4).SerializeToString()
    loadable = compile_model(model, [[x] for x in _feeds((1, 3, 8, 8), 10, seed=4)], recipe="fast")
    (step,) = loadable.host_steps      # one host call, from the convs' outputs to the rows
    assert step.op.startswith("Sigmoid+") and "TopK" in step.op and step.reason.startswith("decides or carries")
    (dets,) = loadable.outputs()
    assert dets.dtype == "float32" and dets.scale is None
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in _feeds((1, 3, 8, 8), 4, seed=99):
            (got,) = compiled.infer([x], dequantized=True)
            (want,) = session.run(None, {"x": x})
            # near-tied anchors may swap (the chip's grid is coarser than their gap), but
            # the scores taken are the reference's, the classes whole, the best box its
            np.testing.assert_allclose(got[0, :, 4], want[0, :, 4], atol=0.02)
            assert np.array_equal(got[0, :, 5], np.round(got[0, :, 5]))
            np.testing.assert_allclose(got[0, 0, :4], want[0, 0, :4], atol=0.02 * np.ptp(want[0, :, :4]))


# A per-token decoder step (tests/support/step_models.py): its fixed costs are what it pays, so
# its chip work is one job: the int64 token's lookup on the chip, and a beam search's TopK on
# the host after that job writing its float output itself (an output DEQUANTIZE after it was
# a second job).
def test_a_beam_step_is_one_chip_job_then_its_topk_on_the_host(npu):
    model = gru_attention_step(hidden=32, positions=8, vocab=16, beam=3)
    names = [i.name for i in model.graph.input]
    feeds = step_feeds(model, 24)
    loadable = compile_model(model.SerializeToString(), [[f[n] for n in names] for f in feeds], recipe="fast")
    jobs = [tasks for tasks, _ in loadable.partitions() if len(tasks)]
    (step,) = loadable.host_steps       # the TopK with its keys (selection_keys: they decide in float)
    assert len(jobs) == 1 and step.op.endswith("TopK")
    assert loadable.host_steps[0].after_task == len(loadable.tasks)
    assert [(t.name, t.dtype) for t in loadable.inputs()][0] == ("token", "int32")
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for feed in step_feeds(model, 3, seed=7):
            got = dict(zip([d.name for d in compiled.outputs], compiled.infer([feed[n] for n in names])))
            want = dict(zip([o.name for o in model.graph.output], session.run(None, feed)))
            for name in ("logp", "hidden_out", "top_v"):
                assert got[name].dtype == np.float32 and cosine(got[name], want[name]) > 0.98, name
            assert got["top_i"].dtype == np.int64
        request = compiled.create_request()       # its job again on the queue it ran on, the wait hinted
        for feed in step_feeds(model, 3, seed=8):
            request.infer([feed[n] for n in names])
        (job,) = [segment.job for segment in request._partitions._segments if segment.job is not None]
        assert job.queue is not None and job.expected_ns > 0
        request.release()
