"""Sub-models cut from a .tflite (what the host runs with LiteRT)."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from libnpu.compiler.ir import IRError
from libnpu.compiler.tflite_cut import cut_tflite
from tests.support import host_models
from tests.support.litert import litert_run
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model

BO = tflite.BuiltinOperator


def test_a_cut_operator_runs_as_in_its_model():
    model = host_models.int8_fc_sandwich(BO.REVERSE_V2)
    cut = cut_tflite(model, [1])
    assert (cut.inputs, cut.outputs) == ((3,), (5,))      # h -> mid; the axis stays a constant inside
    h = np.arange(-4, 4, dtype=np.int8).reshape(1, 8)
    assert np.array_equal(litert_run(cut.model, [h])[0], h[:, ::-1])
    whole = cut_tflite(model, [0, 1, 2], outputs=[8])
    x = np.random.default_rng(0).integers(-128, 128, (1, 16), dtype=np.int8)
    assert np.array_equal(litert_run(whole.model, [x])[0], litert_run(model, [x])[0])


def test_producers_of_constant_inputs_come_along():
    w = np.linspace(-1, 1, 4).astype(np.float16)
    tensors = [TensorSpec((1, 4), np.float32, name="x"), TensorSpec((4,), np.float16, data=w, name="w16"),
               TensorSpec((4,), np.float32, name="w"), TensorSpec((1, 4), np.float32, name="y")]
    model = build_model(tensors, [OpSpec(BO.DEQUANTIZE, [1], [2]), OpSpec(BO.ADD, [0, 2], [3])], [0], [3])
    cut = cut_tflite(model, [1])
    assert cut.inputs == (0,) and cut.outputs == (3,)     # the DEQUANTIZE of the fp16 weights is inside
    x = np.ones((1, 4), np.float32)
    assert np.allclose(litert_run(cut.model, [x])[0], x + w.astype(np.float32))


def test_operators_that_do_not_exist_are_refused():
    with pytest.raises(IRError, match="not all in the model's subgraph 0"):
        cut_tflite(host_models.int8_fc_sandwich(BO.REVERSE_V2), [3])


def test_intermediate_tensors_come_along():
    # An int8 LSTM keeps its gates' quantization in intermediate tensors; the cut dropped them.
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema
    src = schema.ModelT.InitFromPackedBuf(bytearray(host_models.int8_fc_sandwich(BO.REVERSE_V2)), 0)
    graph = src.subgraphs[0]
    gate = schema.TensorT()
    gate.name, gate.shape, gate.type, gate.buffer = b"gate_scale", [1], tflite.TensorType.INT16, 0
    graph.tensors.append(gate)
    graph.operators[1].intermediates = [len(graph.tensors) - 1]
    builder = flatbuffers.Builder(1024)
    builder.Finish(src.Pack(builder), file_identifier=b"TFL3")
    cut = schema.ModelT.InitFromPackedBuf(bytearray(cut_tflite(bytes(builder.Output()), [1]).model), 0)
    (op,) = cut.subgraphs[0].operators
    assert [cut.subgraphs[0].tensors[t].name for t in op.intermediates] == [b"gate_scale"]
