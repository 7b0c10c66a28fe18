"""int16 activations meeting at a same-scale op: a CONCATENATION whose inputs are promoted on
different int16 grids (a TANH's fixed 2**-15, another op's twice its int8 reach) copies bytes,
so mixed precision must put every input on the output's grid first. (In int8 both share the
TANH's grid: the other input fits it, so the join needs no requantization of its own.)"""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto
from onnx import helper as h

from libnpu.compiler.lower import lower
from libnpu.compiler.mixed_precision import promotable, quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from tests.support.chip_memory import ChipMemory, run_loadable


def _concat_of_tanh_and_relu() -> onnx.ModelProto:
    nodes = [h.make_node("Tanh", ["x"], ["t"]), h.make_node("Relu", ["x"], ["r0"]),
             h.make_node("Mul", ["r0", "half"], ["r"]), h.make_node("Concat", ["t", "r"], ["y"], axis=1)]
    graph = h.make_graph(nodes, "join", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])],
                         [onnx.numpy_helper.from_array(np.float32(0.5), "half")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_a_concatenation_of_int16_tensors_on_different_grids_is_right_on_the_chip(mem: ChipMemory) -> None:
    graph = import_onnx(_concat_of_tanh_and_relu())
    rng = np.random.default_rng(0)
    data = [[rng.uniform(-1.5, 1.5, (2, 16)).astype(np.float32)] for _ in range(8)]
    names = [op.outputs[0] for op in optimize(graph).ops if promotable(op)]
    q = quantize_mixed(graph, data, int16=names)
    x = rng.uniform(-1.5, 1.5, (2, 16)).astype(np.float32)
    (got,) = run_loadable(mem, lower(q), [x])
    expected = np.concatenate([np.tanh(x), 0.5 * np.maximum(x, 0)], axis=1)
    step = float(next(t for t in q.tensors.values() if t.dtype == "int16" and not t.is_constant
                      and t.name.startswith("y")).quant.scale[0])
    assert np.abs(got - expected).max() <= 4 * step, np.abs(got - expected).max() / step   # was ~1 (16000 steps)
