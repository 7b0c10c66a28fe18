import numpy as np
import pytest

from libnpu.compiler.ir import Graph, IRError, Op, QuantParams, Tensor
from libnpu.compiler.optimize import optimize
from libnpu.compiler.qparams import op_params
from libnpu.compiler.tflite_import import load_tflite


def test_resnet8_parameters(resnet8_path):
    g = load_tflite(resnet8_path)
    conv = g.ops[0]
    p = op_params(g, conv)
    assert p["padding"] == (1, 1) and p["out_hw"] == (32, 32) and p["stride"] == (1, 1)
    assert p["multiplier"].dtype == np.int32 and p["multiplier"].shape == (16,)
    assert p["act_min"] == p["output_zp"]  # fused RELU clamps at the zero point
    fc = next(op for op in g.ops if op.type == "FULLY_CONNECTED")
    assert op_params(g, fc)["scale"].dtype == np.float64
    add = next(op for op in g.ops if op.type == "ADD")
    assert op_params(g, add)["left_shift"] == 20
    sm = op_params(g, g.ops[-1])
    assert set(sm) == {"input_beta_multiplier", "input_beta_left_shift", "diff_min"}


def test_unsupported_op_is_named():
    g = Graph("sin")
    q = QuantParams(0.1, 0)
    for n in "ac":
        g.add_tensor(Tensor(n, (1, 4), "int8", q))
    g.add_op(Op("SIN", ["a"], ["c"]))
    with pytest.raises(IRError, match="no int8 kernel parameters for SIN node 'c'"):
        op_params(g, g.ops[0])


def test_sub_of_constant_becomes_add():
    g = Graph("sub")
    g.add_tensor(Tensor("x", (1, 4), "float32"))
    g.add_const("c", np.array([1, 2, 3, 4], np.float32))
    g.add_tensor(Tensor("y", (1, 4), "float32"))
    g.add_op(Op("SUB", ["x", "c"], ["y"], {"activation": "NONE"}))
    g.inputs, g.outputs = ["x"], ["y"]
    o = optimize(g)
    (op,) = o.ops
    assert op.type == "ADD"
    np.testing.assert_array_equal(o.tensors[op.inputs[1]].data, [-1, -2, -3, -4])
