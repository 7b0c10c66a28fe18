"""1-D convolutions on the chip: ONNX Conv / ConvTranspose (and MaxPool, AveragePool,
GlobalAveragePool) over [N, C, L] run as the 2-D kernels of height 1, and TFLite's conv1d
as TF exports it (EXPAND_DIMS, CONV_2D or DEPTHWISE_CONV_2D, SQUEEZE). Each model is
compiled with the default options, placed entirely on the NPU, and run on a real device:
float ONNX models against onnxruntime (cosine >= 0.98 and issue 13's bars: 5% of the
largest magnitude for one operator, 10% for a chain), int8 TFLite models byte-identical
to LiteRT's BUILTIN_REF kernels."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import tflite
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

import libnpu
from libnpu.compiler.lower import compile_model
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.placement import NPU, plan_placement
from tests.support import model_builders
from tests.support.litert import litert_run
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, int32_const, named_options, squeeze_options

ort = pytest.importorskip("onnxruntime")


def conv1d(op: str, x: tuple[int, ...], w: tuple[int, int, int] | None = None, bias: bool = True,
           seed: int = 0, **attrs) -> onnx.ModelProto:
    """A one-node ONNX ``op`` (Conv or ConvTranspose with weights of shape ``w``, or a pool)
    over input ``x``; the output's shape as ONNX infers it (as a user's model declares it)."""
    rng = np.random.default_rng(seed)
    inits = []
    if w is not None:
        inits.append(nh.from_array((rng.standard_normal(w) / np.sqrt(w[1] * w[2])).astype(np.float32), "w"))
    if w is not None and bias:
        cout = w[0] if op == "Conv" else w[1] * attrs.get("group", 1)
        inits.append(nh.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), "b"))
    graph = h.make_graph([h.make_node(op, ["x", *(i.name for i in inits)], ["y"], **attrs)], op,
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_all_on_npu(data: bytes) -> None:
    placements = plan_placement(data).placements
    assert placements and all(p.device == NPU for p in placements), \
        [(p.op, p.device, p.reason) for p in placements if p.device != NPU]


def check_on_device(npu, tmp_path, model: onnx.ModelProto, bar: float) -> None:
    """Compile ``model`` int8 only (``recipe="fast"``), calibrated on 256 inputs in [-1, 1] (enough
    to see the outputs' tails: the bar judges the lowering, not a grid that clips an unseen
    extreme), run it on the device on 3 other inputs: cosine >= 0.98 and max |err| <=
    ``bar`` * max |ref|."""
    data = model.SerializeToString()
    assert_all_on_npu(data)
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    rng = np.random.default_rng(7)
    calibration = [[rng.uniform(-1, 1, shape).astype(np.float32)] for _ in range(256)]
    compiled = libnpu.load(data, devroot=npu.devroot, calibration=calibration, cache_dir=tmp_path / "cache",
                           recipe="fast")
    try:
        assert compiled.loadable is not None and not compiled.loadable.host_steps
        sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        for _ in range(3):
            x = rng.uniform(-1, 1, shape).astype(np.float32)
            (got,), (ref,) = compiled.infer([x], dequantized=True), sess.run(None, {"x": x})
            assert got.shape == ref.shape
            assert cosine(got, ref) >= 0.98
            assert float(np.abs(got - ref).max()) <= bar * float(np.abs(ref).max())
    finally:
        compiled.close()


X = (1, 8, 24)
CASES = {
    "kernel 1": conv1d("Conv", X, (12, 8, 1)),
    "kernel 3, pads 1": conv1d("Conv", X, (12, 8, 3), pads=[1, 1]),
    "kernel 5, no pads": conv1d("Conv", X, (12, 8, 5)),
    "stride 2": conv1d("Conv", X, (12, 8, 3), strides=[2], pads=[1, 1]),
    "dilation 2": conv1d("Conv", X, (12, 8, 3), dilations=[2], pads=[2, 2]),
    "asymmetric pads": conv1d("Conv", X, (12, 8, 4), pads=[3, 0]),
    "no bias": conv1d("Conv", X, (12, 8, 3), bias=False),
    "depthwise": conv1d("Conv", X, (8, 1, 5), group=8, pads=[2, 2]),
    "depthwise x2, stride 2, dilation 2": conv1d("Conv", X, (16, 1, 3), group=8, strides=[2], dilations=[2],
                                                 pads=[1, 2], bias=False),
    "grouped": conv1d("Conv", X, (12, 4, 3), group=2, pads=[1, 1]),
    "SAME_UPPER, stride 2": conv1d("Conv", X, (12, 8, 4), strides=[2], auto_pad="SAME_UPPER"),
    "SAME_LOWER": conv1d("Conv", X, (12, 8, 4), auto_pad="SAME_LOWER"),
    "VALID": conv1d("Conv", X, (12, 8, 5), auto_pad="VALID"),
    "one input channel (raw audio)": conv1d("Conv", (1, 1, 64), (8, 1, 9), strides=[4], pads=[4, 4]),
    "ConvTranspose stride 2": conv1d("ConvTranspose", X, (8, 6, 4), strides=[2], pads=[1, 1]),
    "ConvTranspose grouped, dilated": conv1d("ConvTranspose", X, (8, 3, 3), group=2, dilations=[2]),
    "ConvTranspose SAME_UPPER": conv1d("ConvTranspose", X, (8, 6, 3), strides=[2], auto_pad="SAME_UPPER",
                                       bias=False),
    "MaxPool stride 2": conv1d("MaxPool", X, kernel_shape=[3], strides=[2], pads=[1, 0]),
    "MaxPool ceil_mode": conv1d("MaxPool", X, kernel_shape=[3], strides=[2], ceil_mode=1),
    "AveragePool SAME_UPPER": conv1d("AveragePool", X, kernel_shape=[4], strides=[2], auto_pad="SAME_UPPER"),
    "GlobalAveragePool": conv1d("GlobalAveragePool", X),
    # past the chip's dilated filter extent (4096): folded into rows (test_long_dilations.py)
    "kernel 3 at dilation 2048": conv1d("Conv", (1, 2, 5000), (3, 2, 3), dilations=[2048]),
    "depthwise, causal pads, dilation 4200": conv1d("Conv", (1, 4, 4500), (4, 1, 2), group=4, dilations=[4200],
                                                    pads=[4200, 0]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_onnx_conv1d_runs_on_the_npu(npu, tmp_path, name) -> None:
    check_on_device(npu, tmp_path, CASES[name], bar=0.05)


def test_onnx_conv1d_is_the_2d_kernel_on_a_view() -> None:
    """No new chip operator: a 1-D Conv is CONV_2D on [N, 1, L, C], reached by a TRANSPOSE and
    a RESHAPE (and left the same way); with one channel the TRANSPOSE is a RESHAPE too."""
    graph = import_onnx(CASES["stride 2"])
    assert [op.type for op in graph.ops] == ["TRANSPOSE", "RESHAPE", "CONV_2D", "RESHAPE", "TRANSPOSE"]
    (conv,) = [op for op in graph.ops if op.type == "CONV_2D"]
    assert graph.tensors[conv.inputs[0]].shape == (1, 1, 24, 8)
    assert graph.tensors[conv.inputs[1]].shape == (12, 1, 3, 8)
    assert graph.tensors[conv.outputs[0]].shape == (1, 1, 12, 12)
    assert conv.attrs["stride"] == (1, 2) and conv.attrs["pads"] == (0, 0, 1, 1)
    graph = import_onnx(CASES["one input channel (raw audio)"])
    assert [op.type for op in graph.ops] == ["RESHAPE", "RESHAPE", "CONV_2D", "RESHAPE", "TRANSPOSE"]


def test_activations_fuse_across_the_view() -> None:
    """Conv1d + Relu + Conv1d: each Relu fuses into its CONV_2D across the view's RESHAPE and
    TRANSPOSE, and the moves between the two kernels cancel (15 ops without the fusion
    across moves, 4 of them copying TRANSPOSEs; 9 with it)."""
    graph = optimize(import_onnx(model_builders.audio_encoder()))
    assert [op.type for op in graph.ops] == ["TRANSPOSE", "RESHAPE", "CONV_2D", "CONV_2D", "RESHAPE", "TRANSPOSE",
                                             "MEAN", "RESHAPE", "FULLY_CONNECTED"]
    assert [op.attrs["activation"] for op in graph.ops if op.type == "CONV_2D"] == ["RELU", "RELU"]


def test_an_activation_whose_input_is_also_read_elsewhere_stays_apart() -> None:
    """The conv's [N, C, L] result is a graph output too: it must stay without the Relu."""
    model = conv1d("Conv", X, (12, 8, 3), pads=[1, 1])
    model.graph.node.append(h.make_node("Relu", ["y"], ["r"]))
    model.graph.output.append(h.make_tensor_value_info("r", TensorProto.FLOAT, [1, 12, 24]))
    graph = optimize(import_onnx(model))
    assert [op.type for op in graph.ops] == ["TRANSPOSE", "RESHAPE", "CONV_2D", "RESHAPE", "TRANSPOSE", "RELU"]
    assert graph.ops[2].attrs["activation"] == "NONE"


def test_pooling_over_3d_windows_falls_back_to_the_cpu() -> None:
    """A pool over [N, C, D, H, W] is no 2-D window: the CPU runs it, with that reason (it
    used to give "float reference: ... too many values to unpack"; 1-D pooling crashed
    placement with an IndexError, GlobalAveragePool over [N, C, L] with a ValueError)."""
    model = conv1d("MaxPool", (1, 2, 4, 6, 6), kernel_shape=[2, 2, 2])
    (placement,) = plan_placement(model.SerializeToString()).placements
    assert placement.device != NPU and placement.reason == "only 1-D and 2-D pooling is supported"


def test_batch_norm_after_conv1d_runs_on_the_npu(npu, tmp_path) -> None:
    """BatchNorm1d over [N, C, L] (per-channel MUL + ADD broadcast along L) went to the CPU
    ("batch normalization of a rank-3 tensor is not supported")."""
    model = conv1d("Conv", X, (12, 8, 3), pads=[1, 1])
    rng = np.random.default_rng(3)
    stats = {"s": rng.uniform(0.5, 1.5, 12), "t": rng.normal(0, .1, 12), "m": rng.normal(0, .1, 12),
             "v": rng.uniform(0.5, 1.5, 12)}
    model.graph.initializer.extend(nh.from_array(v.astype(np.float32), k) for k, v in stats.items())
    model.graph.node.extend([h.make_node("BatchNormalization", ["y", *stats], ["n"]),
                             h.make_node("Relu", ["n"], ["r"])])
    model.graph.output[0].CopyFrom(h.make_tensor_value_info("r", TensorProto.FLOAT, [1, 12, 24]))
    check_on_device(npu, tmp_path, model, bar=0.10)


def test_audio_encoder_runs_on_the_npu(npu, tmp_path) -> None:
    check_on_device(npu, tmp_path, model_builders.audio_encoder(), bar=0.10)


# TFLite: conv1d as TF exports it --------------------------------------------------------------


def tf_conv1d(depthwise: bool, length: int, cin: int, cout: int, k: int, stride: int, dilation: int,
              same: bool, seed: int) -> tuple[bytes, tuple[int, int, int]]:
    """An int8 conv1d as TF's converter writes it: EXPAND_DIMS (axis 1) of [1, L, C] to
    [1, 1, L, C], CONV_2D (or DEPTHWISE_CONV_2D) of height 1 with a fused RELU, SQUEEZE
    (axis 1). Per-channel weights, int32 bias. Returns the model and its input shape."""
    rng = np.random.default_rng(seed)
    in_scale, in_zp = 0.02, 3
    w_scales = rng.uniform(0.002, 0.006, cout)
    w = rng.integers(-127, 128, (1, 1, k, cout) if depthwise else (cout, 1, k, cin), dtype=np.int8)
    bias = rng.integers(-2000, 2001, cout).astype(np.int32)
    span = (k - 1) * dilation + 1
    out_len = -(-length // stride) if same else (length - span) // stride + 1
    taps = k if depthwise else k * cin
    out_scale = 3 * np.sqrt(taps) * 73 * in_scale * 73 * float(w_scales.mean()) / 127
    tensors = [
        TensorSpec((1, length, cin), np.int8, [in_scale], [in_zp], name="x"),
        int32_const([1]),
        TensorSpec((1, 1, length, cin), np.int8, [in_scale], [in_zp], name="x4"),
        TensorSpec(w.shape, np.int8, list(w_scales), [0] * cout, 3 if depthwise else 0, w, "w"),
        TensorSpec((cout,), np.int32, [in_scale * s for s in w_scales], [0] * cout, 0, bias, "b"),
        TensorSpec((1, 1, out_len, cout), np.int8, [out_scale], [-128], name="y4"),
        TensorSpec((1, out_len, cout), np.int8, [out_scale], [-128], name="y"),
    ]
    window = dict(Padding=tflite.Padding.SAME if same else tflite.Padding.VALID, StrideH=1, StrideW=stride,
                  DilationHFactor=1, DilationWFactor=dilation,
                  FusedActivationFunction=tflite.ActivationFunctionType.RELU)
    if depthwise:
        conv = OpSpec(tflite.BuiltinOperator.DEPTHWISE_CONV_2D, [2, 3, 4], [5],
                      *named_options("DepthwiseConv2DOptions", DepthMultiplier=cout // cin, **window), version=3)
    else:
        conv = OpSpec(tflite.BuiltinOperator.CONV_2D, [2, 3, 4], [5], *named_options("Conv2DOptions", **window),
                      version=3)
    ops = [OpSpec(tflite.BuiltinOperator.EXPAND_DIMS, [0, 1], [2]), conv,
           OpSpec(tflite.BuiltinOperator.SQUEEZE, [5], [6], *squeeze_options([1]))]
    return build_model(tensors, ops, [0], [6]), (1, length, cin)


@pytest.mark.parametrize("depthwise,length,cin,cout,k,stride,dilation,same", [
    (False, 40, 8, 16, 3, 1, 1, True),
    (False, 33, 6, 10, 5, 2, 1, False),
    (False, 30, 4, 8, 3, 1, 2, True),
    (True, 40, 8, 8, 5, 1, 1, True),
    (True, 31, 4, 8, 3, 2, 2, False),
], ids=["conv k3 SAME", "conv k5 stride 2 VALID", "conv dilation 2", "depthwise k5", "depthwise x2 stride 2"])
def test_tflite_conv1d_is_byte_identical_to_litert(npu, depthwise, length, cin, cout, k, stride, dilation,
                                                   same) -> None:
    data, shape = tf_conv1d(depthwise, length, cin, cout, k, stride, dilation, same, seed=length + cout)
    assert_all_on_npu(data)
    loadable = compile_model(data)
    assert not loadable.host_steps
    model = libnpu.load(loadable, devroot=npu.devroot)
    try:
        rng = np.random.default_rng(length)
        for _ in range(10):
            x = rng.integers(-128, 128, shape, dtype=np.int8)
            (ref,) = litert_run(data, [x])
            (got,) = model.infer([x])
            assert got.dtype == np.int8 and np.array_equal(got, ref)
    finally:
        model.close()
