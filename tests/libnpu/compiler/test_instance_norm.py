"""Style-transfer networks (tests/support/style_models): conditional instance norm spelled
as TensorFlow and PyTorch export it, with gamma and beta from a style vector at run time,
ONNX InstanceNormalization, and a channels-last Resize; all of them on the chip, and
channels far narrower than the widest normalized as well as it; an int8 QDQ model's
instance norm (tf2onnx's spelling, Q/DQ pairs between its steps) is one op too."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.lower import compile_model, lower
from libnpu.compiler.mixed_precision import promotable, quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.placement import plan_placement
from libnpu.compiler.tflite_export import export_tflite
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.style_models import feeds, qdq_style_norm, style_transfer

SIZE = 16


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("form,nhwc", [("onnx", False), ("tf", True)])
def test_instance_norms_and_a_channels_last_resize_run_on_the_chip(form: str, nhwc: bool) -> None:
    # ONNX InstanceNormalization had no NPU operator (6 ops on the CPU); tf2onnx's NHWC
    # Resize (scales 1, 2, 2, 1) went to the CPU: "only spatial (H, W) resizing".
    model = style_transfer(size=SIZE, form=form, nhwc=nhwc)
    plan = plan_placement(model.SerializeToString(), dataset=feeds(2, SIZE, style=form != "onnx", nhwc=nhwc))
    assert plan.cpu == {}


@pytest.mark.parametrize("form", ["tf", "centred"])
def test_conditional_instance_norm_is_one_op(form: str) -> None:
    graph = optimize(import_onnx(style_transfer(size=SIZE, form=form)))
    types = [op.type for op in graph.ops]
    assert types.count("INSTANCE_NORM") == 6
    assert not {"MEAN", "RSQRT", "MUL", "SUB"} & set(types)


def test_narrow_channels_are_normalized_as_well_as_wide_ones(mem: ChipMemory) -> None:
    # Each conv's output channels 1 .. 100x apart: op by op, the narrow channels' squares
    # fell under one step of the squares' grid (cosine 0.886 at int8, 0.988 all int16);
    # their statistics now come from exact sums on the chip.
    model = style_transfer(size=SIZE, spread=100, eps=1e-5)
    graph = import_onnx(model)
    calibration, unseen = feeds(8, SIZE, seed=1), feeds(3, SIZE, seed=2)
    fast = to_int8_graph(graph, calibration, recipe="fast")
    assert output_scores(optimize(graph), fast, unseen)["stylized__nchw"] >= 0.95
    q = quantize_mixed(graph, calibration, int16=[op.outputs[0] for op in optimize(graph).ops if promotable(op)])
    assert output_scores(optimize(graph), q, unseen)["stylized__nchw"] >= 0.999
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    loadable = lower(q)
    for feed in unseen:
        (got,) = run_loadable(mem, loadable, [feed["content"], feed["style"]])
        (want,) = session.run(None, feed)
        assert _cosine(got.reshape(want.shape), want) >= 0.999


def test_a_qdq_models_instance_norm_is_one_op_and_matches_onnxruntime(mem: ChipMemory) -> None:
    # tf2onnx's QDQ spelling: GlobalAveragePool means (AVERAGE_POOL_2D), the int8 mean moved
    # by a Reshape and a Transpose, RELUs from the pairs on the squares and the variance.
    # Not matched before, the variance's pool shared the squares' grid (several times
    # coarser than the variance's own pair): cosine 0.93-0.96 against onnxruntime.
    model = qdq_style_norm()
    types = [op.type for op in optimize(import_onnx(model)).ops]
    assert types.count("INSTANCE_NORM") == 1 and "AVERAGE_POOL_2D" not in types
    data = model.SerializeToString()
    loadable = compile_model(data, kind="onnx")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for feed in feeds(3, 16, seed=7, style=False):
        (got,) = run_loadable(mem, loadable, [feed["content"]])
        (want,) = session.run(None, feed)
        assert _cosine(got.reshape(want.shape), want) >= 0.99


def test_the_float_export_computes_what_onnxruntime_does() -> None:
    # what a layer kept in float on the CPU runs (cpu_float): TFLite has no instance norm
    from ai_edge_litert import interpreter as litert  # 0.5 s to import: only this test needs it
    model = style_transfer(size=SIZE, nhwc=True, spread=100, eps=1e-5)
    interpreter = litert.Interpreter(model_content=export_tflite(optimize(import_onnx(model))))
    interpreter.allocate_tensors()
    feed = feeds(1, SIZE, seed=3, nhwc=True)[0]
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], feed[detail["name"]])
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    assert np.abs(got.reshape(want.shape) - want).max() < 1e-4
