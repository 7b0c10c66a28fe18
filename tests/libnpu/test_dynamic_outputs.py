"""Model outputs whose shape the data decides (a decoder Loop that stops on its own,
NonZero, NonMaxSuppression): they compile, the host's array is checked against the
output's signature and bound, and every place that describes an output says -1 for such a
dim (the runs on the device: tests/libnpu/test_host_fallback.py)."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from benchmarks.corpus import judge
from libnpu.compiler.dynamic_shapes import data_dependent
from libnpu.compiler.escalation import FidelityWarning
from libnpu.compiler.float_ref import run_float
from libnpu.compiler.lower import compile_model
from libnpu.compiler.onnx_import import import_onnx_sources
from libnpu.dynamic_outputs import DynamicOutputError, check_dynamic_output
from libnpu.loadable import FormatError, Loadable, TensorDesc
from libnpu.tools.c_runtime import CApiError, _dense_bytes
from tests.support import dynamic_models, host_models


def _inputs(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(count)]


@pytest.fixture(scope="module")
def nms() -> Loadable:
    """The detector head with NMS, compiled with the defaults."""
    with warnings.catch_warnings():     # the kept boxes' indices, scored by cosine, under the target
        warnings.simplefilter("ignore", FidelityWarning)
        return compile_model(dynamic_models.conv_nms().SerializeToString(), [[x] for x in _inputs(4, 3)])


def test_nms_after_a_detector_head_compiles_with_the_boxes_it_keeps_bounded(nms):
    # The probe on random inputs kept the maximum (16 boxes) twice: taken as static, the
    # float reference then failed on calibration data ("produced shape (14, 3)").
    selected = nms.outputs()[1]
    assert (selected.shape_signature, selected.max_shape) == ((-1, 3), (16, 3))
    with pytest.raises(CApiError, match=r"output selected: its shape is decided per run \[-1, 3\]"):
        _dense_bytes(selected)       # what npu_runtime_output_bytes and npu_runtime_infer say


def _desc(signature, bound=None) -> TensorDesc:
    return TensorDesc("seq", (2, 4), "float32", 0, shape_signature=signature, max_shape=bound)


def test_a_host_output_outside_its_signature_or_bound_is_refused():
    check_dynamic_output(_desc((-1, 4), (16, 4)), np.zeros((16, 4), np.float32), "Loop")
    with pytest.raises(DynamicOutputError, match=r"shape \[3, 5\], its signature is \[-1, 4\]"):
        check_dynamic_output(_desc((-1, 4)), np.zeros((3, 5), np.float32), "Loop")
    with pytest.raises(DynamicOutputError, match=r"over its bound \[16, 4\]"):
        check_dynamic_output(_desc((-1, 4), (16, 4)), np.zeros((17, 4), np.float32), "Loop")
    huge = np.broadcast_to(np.zeros(1, np.float32), (80_000_000, 4))     # 1.3 GB it never allocates
    with pytest.raises(DynamicOutputError, match="over the 268,435,456 an output shaped per run may hold"):
        check_dynamic_output(_desc((-1, 4)), huge, "Loop")


def test_a_malformed_signature_in_the_loadable_is_a_format_error(nms):
    loadable = Loadable.from_bytes(nms.to_bytes())
    selected = loadable.outputs()[1]
    selected.shape_signature = (-1, 3, 1)          # another rank than the tensor's
    with pytest.raises(FormatError, match=r"signature \[-1, 3, 1\] or bound \[16, 3\] does not fit shape"):
        Loadable.from_bytes(loadable.to_bytes())
    selected.shape_signature, loadable.inputs()[0].shape_signature = (-1, 3), (-1, 3, 8, 8)
    with pytest.raises(FormatError, match="'x': no such output"):     # the host returns outputs only
        Loadable.from_bytes(loadable.to_bytes())


def test_the_corpus_judge_compares_shapes_first():
    want = [np.ones((6, 1, 4)), np.ones((3, 1, 4))]
    assert judge("seq", [np.ones((6, 1, 4)), np.ones((3, 4))], want, None).passed       # same values, laid out
    check = judge("seq", [np.ones((5, 1, 4)), np.ones((3, 1, 4))], want, None)
    assert not check.passed and check.text() == "shape [5, 1, 4] where the reference has [6, 1, 4] (input 0)"


def test_which_operators_make_a_shape_the_data_decides():
    # A TopK whose k is computed and what reads it; a Loop with a fixed trip count is static.
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Neg", ["v"], ["s"])],
                             "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                      helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("s", TensorProto.FLOAT, [4])])
    graph = helper.make_graph([helper.make_node("ArgMax", ["x"], ["k"], keepdims=1),
                               helper.make_node("TopK", ["x", "k"], ["v", "i"]), helper.make_node("Relu", ["v"], ["r"]),
                               helper.make_node("Loop", ["three", "yes"], ["rows"], body=body)],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], [])
    shapes = {"x": ((4,), "float32"), "k": ((1,), "int64"), "v": ((-1,), "float32"), "i": ((-1,), "int64"),
              "r": ((-1,), "float32"), "rows": ((-1, 4), "float32")}
    consts = {"three": np.array(3), "yes": np.array(True)}
    assert data_dependent(graph, shapes, consts) == {"v": None, "i": None, "r": None}
    del consts["yes"]           # a Loop whose condition the data gives: as many rows as it runs, at most 3
    assert data_dependent(graph, shapes, consts)["rows"] == (3, 4)


def test_a_map_fn_loop_runs_as_many_times_whatever_the_data():
    # tf2onnx's map_fn: a counter against the batch from a static shape, not a condition the
    # data gives. Its frames' shape was taken for data-dependent, so the Conv after it went
    # to the CPU ("the shape of input 'framed' depends on the data").
    model = host_models.map_fn_frames()
    graph, sources = import_onnx_sources(model, fallback=True)
    assert {s.op: s.reason for s in sources if s.reason} == {"Loop": "no NPU operator of this type"}
    x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_allclose(run_float(graph, [x])[graph.outputs[0]], want, rtol=1e-5, atol=1e-5)
    # the same count against a length the data gives: as many rows as it runs
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    consts = {"trips": np.array(np.iinfo(np.int64).max), "go": np.array(True), "zero": np.array(0)}
    shapes = {"framed": ((-1, 4, 4), "float32")}
    assert list(data_dependent(onnx.helper.make_graph([loop], "g", [], []), shapes, consts)) == ["framed"]
    consts["rows"] = np.array(2)
    assert data_dependent(onnx.helper.make_graph([loop], "g", [], []), shapes, consts) == {}
