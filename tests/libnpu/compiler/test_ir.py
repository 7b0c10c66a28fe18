import numpy as np
import pytest

from libnpu.compiler.ir import Graph, IRError, Op, QuantParams, Tensor, same_pads


def _chain() -> Graph:
    g = Graph("chain")
    for n in "abcd":
        g.add_tensor(Tensor(n, (1, 4), "float32"))
    g.add_op(Op("RELU", ["a"], ["b"]))
    g.add_op(Op("LOGISTIC", ["b"], ["c"]))
    g.add_op(Op("TANH", ["c"], ["d"]))
    g.inputs, g.outputs = ["a"], ["d"]
    return g


def test_toposort_restores_order_and_detects_cycles():
    g = _chain()
    g.ops.reverse()
    with pytest.raises(IRError, match="used before it is produced"):
        g.validate()
    g.toposort()
    assert [op.type for op in g.ops] == ["RELU", "LOGISTIC", "TANH"]
    g.validate()
    g.ops[0].inputs = ["d"]  # a -> ... -> d -> RELU: cycle
    with pytest.raises(IRError, match="cycle"):
        g.toposort()


def test_validate_catches_bad_graphs():
    g = _chain()
    g.ops[1].attrs = {}
    g.validate()  # LOGISTIC has no attributes
    g.ops[1].type = "SOFTMAX"
    with pytest.raises(IRError, match=r"missing attributes \['beta'\]"):
        g.validate()
    g = _chain()
    g.ops[1].type = "FANCY_OP"
    with pytest.raises(IRError, match="unknown op type"):
        g.validate()
    g = _chain()
    g.outputs = ["zz"]
    with pytest.raises(IRError, match="never produced"):
        g.validate()
    with pytest.raises(IRError, match="duplicate tensor"):
        g.add_tensor(Tensor("a", (1,), "float32"))
    with pytest.raises(IRError, match="unknown tensor"):
        g.add_op(Op("RELU", ["nope"], ["a"]))


def test_prune_drops_dead_ops_and_tensors():
    g = _chain()
    g.add_tensor(Tensor("dead", (1, 4), "float32"))
    g.add_op(Op("RELU6", ["b"], ["dead"]))
    g.add_const("unused", np.zeros(3, np.float32))
    g.prune()
    assert "dead" not in g.tensors and "unused" not in g.tensors
    assert [op.type for op in g.ops] == ["RELU", "LOGISTIC", "TANH"]


def test_quant_params():
    with pytest.raises(IRError, match="scales must be finite and > 0"):
        QuantParams([0.0], [0])
    with pytest.raises(IRError, match="equal length"):
        QuantParams([1.0, 2.0], [0])
    with pytest.raises(IRError, match="3 channel scales"):
        Tensor("w", (4, 3), "int8", QuantParams([1, 1, 1], [0, 0, 0], axis=0))
    qp = QuantParams([0.5, 0.25], [0, 0], axis=1)
    x = np.array([[1.0, 1.0], [-100.0, 0.3]], np.float32)
    q = qp.quantize(x)
    np.testing.assert_array_equal(q, [[2, 4], [-128, 1]])
    np.testing.assert_allclose(qp.dequantize(q), [[1.0, 1.0], [-64.0, 0.25]])


def test_same_pads_matches_tflite():
    assert same_pads(32, 3, 1, 1) == (32, 1, 1)
    assert same_pads(32, 3, 2, 1) == (16, 0, 1)
    assert same_pads(7, 3, 2, 1) == (4, 1, 1)
    assert same_pads(5, 1, 2, 1) == (3, 0, 0)
    assert same_pads(10, 3, 1, 2) == (10, 2, 2)


@pytest.mark.parametrize("dtype, zero_point", [("int8", 1000), ("int8", -129), ("uint8", 256), ("int16", 40000)])
def test_a_zero_point_outside_its_type_is_refused(dtype, zero_point):
    """LiteRT clamps such a zero point; the chip refuses the job (EINVAL): refused at import,
    with the reason, instead of a job failing at every inference."""
    with pytest.raises(IRError, match=f"zero point {zero_point} outside {dtype}'s range"):
        Tensor("t", (1, 8), dtype, QuantParams([0.05], [zero_point]))
    Tensor("t", (1, 8), dtype, QuantParams([0.05], [np.iinfo(dtype).max]))     # the edge is fine


def test_prune_keeps_every_output_of_an_op_it_keeps():
    # A host op writes all its outputs, the ones nobody reads too ("unknown output" before).
    from libnpu.loadable import HostCall
    g = Graph("two_outputs")
    for n in ("x", "used", "unread", "y"):
        g.add_tensor(Tensor(n, (1, 4), "float32"))
    g.add_op(Op("HOST", ["x"], ["used", "unread"], {"host": HostCall("onnx", b"", "LSTM", 0, "")}))
    g.add_op(Op("RELU", ["used"], ["y"]))
    g.inputs, g.outputs = ["x"], ["y"]
    g.prune()
    assert "unread" in g.tensors
    g.validate()


@pytest.mark.parametrize("dtype, zero_point", [("int8", -3), ("uint8", 128), ("int16", 0)])
def test_quantize_in_float32_gives_the_float64_formulas_integers(dtype: str, zero_point: int) -> None:
    """QuantParams.quantize adds the zero point in float32 (every simulated op output goes
    through it): the same integers as in float64, at the grid's edges, halves and far past it."""
    qp = QuantParams([0.0137], [zero_point])
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4096) * 200 * 0.0137).astype(np.float32)
    edges = np.array([1e30, -1e30, 2.0 ** 24, -2.0 ** 24, 2.0 ** 24 - 255, 0.5 * 0.0137, -0.5 * 0.0137,
                      127.5 * 0.0137, -128.5 * 0.0137, 32767.5 * 0.0137, 0.0], np.float32)
    x = np.concatenate([x, edges, edges * np.float32(0.0137)])
    info = np.iinfo(dtype)
    want = np.clip(np.round(x / qp.scale).astype(np.float64) + zero_point, info.min, info.max).astype(dtype)
    np.testing.assert_array_equal(qp.quantize(x, dtype), want)


def test_snap_gives_dequantize_of_quantize_bit_for_bit() -> None:
    """QuantParams.snap (the float simulation's rounding of every op output) stays in float32:
    the same bits as dequantize(quantize(x)), signed zeros, infinities and NaN included."""
    rng = np.random.default_rng(5)
    for dtype, zero_point, scale in (("int8", -3, [0.0137]), ("uint8", 128, [0.02]), ("int16", 0, [1e-4]),
                                     ("int8", 0, [0.01, 0.02, 0.5])):
        qp = QuantParams(scale, [zero_point] * len(scale), axis=3)
        x = (rng.standard_normal((2, 8, 8, len(scale))) * 3).astype(np.float32)
        x.flat[:8] = [1e30, -1e30, np.inf, -np.inf, 0.0, -0.0, -1e-9, 2.0 ** 24]
        with_nan = x.copy()
        with_nan.flat[8] = np.nan
        for values in (x, with_nan):
            with np.errstate(invalid="ignore"):
                want, got = qp.dequantize(qp.quantize(values, dtype)), qp.snap(values, dtype)
            assert got.dtype == want.dtype == np.float32
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_op_lookup_by_output_prefix_and_name() -> None:
    g = Graph("lookup")
    for n in ("x", "gru/t0/h", "gru/t1/h", "gru/t1/z", "y"):
        g.add_tensor(Tensor(n, (1, 4), "float32"))
    ops = [g.add_op(Op("TANH", ["x"], ["gru/t0/h"])), g.add_op(Op("TANH", ["gru/t0/h"], ["gru/t1/h"], name="cell")),
           g.add_op(Op("LOGISTIC", ["gru/t1/h"], ["gru/t1/z"], name="cell")), g.add_op(Op("RELU", ["gru/t1/z"], ["y"]))]
    outputs, prefixes, named = g.op_lookup()
    assert outputs["gru/t1/h"] == [ops[1]] and "gru/t1" not in outputs
    assert prefixes["gru"] == ops[:3] and prefixes["gru/t1"] == ops[1:3] and "y" not in prefixes
    assert named["cell"] == ops[1:3] and named["y"] == [ops[3]]
