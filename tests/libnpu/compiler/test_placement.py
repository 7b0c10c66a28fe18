"""The placement decision (compiler.placement): NPU or CPU for every source operator, and why."""
from __future__ import annotations

import pytest
import tflite

from libnpu.compiler.placement import CPU, NPU, FallbackRefusedError, Placement, place_model, plan_placement
from tests.support import host_models, model_builders

REVERSE_V2 = tflite.BuiltinOperator.REVERSE_V2


def test_tflite_op_the_chip_lacks_goes_to_the_cpu():
    placements = place_model(host_models.int8_fc_sandwich(REVERSE_V2))
    assert placements == [
        Placement(0, "FULLY_CONNECTED", NPU, ""),
        Placement(1, "REVERSE_V2", CPU, "no NPU operator of this type"),
        Placement(2, "FULLY_CONNECTED", NPU, ""),
    ]


def test_custom_op_is_named_by_its_code():
    placements = place_model(host_models.int8_fc_sandwich("MyOp"))
    assert [(p.op, p.device) for p in placements] == [("FULLY_CONNECTED", NPU), ("CUSTOM:MyOp", CPU),
                                                       ("FULLY_CONNECTED", NPU)]
    assert "custom op 'MyOp'" in placements[1].reason


def test_allow_list_moves_the_rest_to_the_cpu(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(host_models.int8_fc_sandwich(REVERSE_V2))
    placements = place_model(path, ops=["REVERSE_V2"])
    assert [p.device for p in placements] == [CPU, CPU, CPU]
    assert placements[0].reason == "not in the allow-list"
    assert placements[1].reason == "no NPU operator of this type"   # allowed, but the chip still lacks it


def test_refusal_comes_from_the_lowering_not_a_name_lookup():
    # A per-channel int8 activation imports as FULLY_CONNECTED but the int8 rules refuse it.
    import numpy as np

    from tests.support.tflite_builder import OpSpec, TensorSpec, build_model
    rng = np.random.default_rng(0)
    tensors = [TensorSpec((1, 8), np.int8, [0.05], [0], name="x"),
               TensorSpec((4, 8), np.int8, [0.02], [0], data=rng.integers(-127, 128, (4, 8)), name="w"),
               TensorSpec((1, 4), np.int8, [0.1, 0.2, 0.1, 0.1], [0, 0, 0, 0], quantized_dimension=1, name="y")]
    model = build_model(tensors, [OpSpec(tflite.BuiltinOperator.FULLY_CONNECTED, [0, 1, -1], [2])], [0], [2])
    (placement,) = place_model(model)
    assert placement.device == CPU and "per-channel" in placement.reason


def test_onnx_node_indices_and_reasons():
    model = host_models.with_cumsum()
    placements = place_model(model.SerializeToString())
    assert [(p.index, p.op, p.device) for p in placements] == [
        (0, "Conv", NPU), (1, "CumSum", CPU), (2, "Relu", NPU), (3, "Conv", NPU)]
    assert placements[1].reason == "no NPU operator of this type"


def test_strict_lists_every_missing_operator():
    plan = plan_placement(host_models.int8_fc_sandwich(REVERSE_V2))
    with pytest.raises(FallbackRefusedError, match=r"missing: REVERSE_V2\).*REVERSE_V2 \(op 1\)"):
        plan.refuse_fallback()
    plan_placement(model_builders.small_cnn().SerializeToString()).refuse_fallback()   # all on the NPU


def test_onnx_custom_domain_op_is_named_custom():
    from onnx import TensorProto
    from onnx import helper as h
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("MyOp", ["r"], ["m"], domain="my.ops"),
             h.make_node("Relu", ["m"], ["y"])]
    graph = h.make_graph(nodes, "custom", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                         value_info=[h.make_tensor_value_info("m", TensorProto.FLOAT, [1, 4])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13), h.make_opsetid("my.ops", 1)])
    placements = place_model(model.SerializeToString())
    assert [p.device for p in placements] == [NPU, CPU, NPU]
    assert placements[1].reason == "custom op 'MyOp' (domain my.ops): the chip has no custom operators"


def test_a_selection_its_keys_and_the_rows_it_gathers_go_to_the_cpu():
    # ultralytics' end-to-end head: on the chip its scores were a sigmoid's int8 grid (near
    # ties all equal, TopK took the lowest indices) and its rows one concatenation's grid
    placements = plan_placement(model_builders.end_to_end_head(model_builders.yolo_head(), 3, 4)
                                .SerializeToString()).placements
    assert [(p.op, p.device) for p in placements[:5]] == [("Conv", NPU), ("Relu", NPU), ("Conv", NPU), ("Conv", NPU),
                                                         ("Sigmoid", CPU)]
    assert all(p.device == CPU for p in placements[4:])
    moved = {p.op for p in placements if p.reason.startswith("decides or carries a data-dependent selection (TopK)")}
    assert moved >= {"Sigmoid", "Concat", "ReduceMax", "Reshape", "Transpose", "Split"}
