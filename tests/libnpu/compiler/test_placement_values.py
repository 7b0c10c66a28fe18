"""The placement judges an op on the values the model gives it and names the real cause
(compiler.placement); an int8 model's uint8 edges run on the chip. Float results against
float LiteRT, int8 ones byte for byte against LiteRT's reference kernels, on the chip's
job executor."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import tflite

from libnpu.compiler.lower import compile_model
from libnpu.compiler.placement import CPU, NPU, place_model
from libnpu.compiler.quantizer import NonFiniteValuesError
from tests.support.chip_memory import run_loadable
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, int32_const, named_options, run_reference

OP = tflite.BuiltinOperator
F = np.float32
ROWS = (1, 4, 16)


def _layer_norm() -> bytes:
    """A float LayerNorm as TensorFlow converts it: mean, squared difference, mean, + eps, RSQRT."""
    t = [TensorSpec(ROWS, F, name="x"), int32_const([2]), TensorSpec((1, 4, 1), F, name="mean"),
         TensorSpec(ROWS, F, name="sq"), TensorSpec((1, 4, 1), F, name="var"),
         TensorSpec((1,), F, data=np.array([1e-3], F), name="eps"), TensorSpec((1, 4, 1), F, name="var_eps"),
         TensorSpec((1, 4, 1), F, name="inv"), TensorSpec(ROWS, F, name="centred"), TensorSpec(ROWS, F, name="y")]
    keep = named_options("ReducerOptions", KeepDims=True)
    ops = [OpSpec(OP.MEAN, [0, 1], [2], *keep), OpSpec(OP.SQUARED_DIFFERENCE, [0, 2], [3]),
           OpSpec(OP.MEAN, [3, 1], [4], *keep), OpSpec(OP.ADD, [4, 5], [6], *named_options("AddOptions")),
           OpSpec(OP.RSQRT, [6], [7]), OpSpec(OP.SUB, [0, 2], [8], *named_options("SubOptions")),
           OpSpec(OP.MUL, [8, 7], [9], *named_options("MulOptions"))]
    return build_model(t, ops, [0], [9])


def test_layer_norm_rsqrt_is_judged_on_the_variances_the_model_computes(mem):
    # Alone on random inputs in [-1, 1], RSQRT gave NaN and went to the CPU with "calibration:
    # tensor 'inv' has non-finite values", as if the user's data were bad.
    model = _layer_norm()
    placements = place_model(model)
    assert [(p.op, p.device, p.reason) for p in placements if p.op == "RSQRT"] == [("RSQRT", NPU, "")]
    assert all(p.device == NPU for p in placements)
    rng = np.random.default_rng(7)
    loadable = compile_model(model, [[rng.uniform(-1, 1, ROWS).astype(F)] for _ in range(8)], ops=["MEAN", "RSQRT",
                             "SQUARED_DIFFERENCE", "ADD", "SUB", "MUL"])
    assert not loadable.host_steps
    x = rng.uniform(-1, 1, ROWS).astype(F)
    (got,) = run_loadable(mem, loadable, [x])
    (want,) = run_reference(model, x)
    cosine = float((got * want).sum() / np.sqrt((got * got).sum() * (want * want).sum()))
    assert cosine >= 0.99, cosine


def test_values_no_grid_holds_are_the_datas_doing_not_a_reason_for_the_cpu():
    # RSQRT of the input itself: random inputs in [-1, 1] give NaN, positive data does not.
    model = build_model([TensorSpec((1, 8), F, name="x"), TensorSpec((1, 8), F, name="y")],
                        [OpSpec(OP.RSQRT, [0], [1])], [0], [1])
    assert [(p.device, p.reason) for p in place_model(model)] == [(NPU, "")]
    with pytest.raises(NonFiniteValuesError, match=r"tensor 'y' .* on random inputs in \[-1, 1\]"):
        compile_model(model)
    rng = np.random.default_rng(8)
    assert not compile_model(model, [[rng.uniform(0.5, 4, (1, 8)).astype(F)] for _ in range(4)]).host_steps


def _int8_with_uint8_edges(out_scale: float, out_zp: int) -> bytes:
    """uint8 input -> QUANTIZE -> int8 FULLY_CONNECTED -> QUANTIZE -> uint8 output, as
    TensorFlow's converter gives an int8 model uint8 inputs and outputs."""
    rng = np.random.default_rng(9)
    t = [TensorSpec((1, 256), np.uint8, [0.05], [131], name="x"),
         TensorSpec((1, 256), np.int8, [0.05], [3], name="x8"),
         TensorSpec((64, 256), np.int8, [0.002], [0], data=rng.integers(-127, 128, (64, 256)), name="w"),
         TensorSpec((1, 64), np.int8, [0.1], [-5], name="y8"),
         TensorSpec((1, 64), np.uint8, [out_scale], [out_zp], name="y")]
    ops = [OpSpec(OP.QUANTIZE, [0], [1]), OpSpec(OP.FULLY_CONNECTED, [1, 2, -1], [3]), OpSpec(OP.QUANTIZE, [3], [4])]
    return build_model(t, ops, [0], [4])


def test_uint8_edges_of_an_int8_model_run_on_the_chip_byte_exact(mem):
    # They ran on the CPU with the reason "quantize the model first".
    model = _int8_with_uint8_edges(0.1, 123)
    assert [(p.op, p.device) for p in place_model(model)] == [("QUANTIZE", NPU), ("FULLY_CONNECTED", NPU),
                                                              ("QUANTIZE", NPU)]
    loadable = compile_model(model)
    assert not loadable.host_steps
    x = np.random.default_rng(10).permutation(256).astype(np.uint8).reshape(1, 256)    # every input byte
    (got,) = run_loadable(mem, loadable, [x])
    (want,) = run_reference(model, x)
    assert got.dtype == np.uint8 and np.array_equal(got, want)
    assert len(np.unique(want)) > 16                                                    # many output bytes


@pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed (the delegate's library)")
def test_uint8_edges_of_an_int8_model_run_on_the_chip_through_the_delegate(npu, tmp_path, capfd):
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    from libnpu.delegate import library_path
    model = _int8_with_uint8_edges(0.1, 123)
    delegate = litert.load_delegate(str(library_path()), {"devroot": str(npu.devroot), "verbose": "true",
                                                          "cache_dir": str(tmp_path)})
    kw = {"experimental_op_resolver_type": litert.OpResolverType.BUILTIN_REF}
    delegated = litert.Interpreter(model_content=model, experimental_delegates=[delegate], **kw)
    assert "3 of 3 nodes on the NPU" in capfd.readouterr().err
    x = np.random.default_rng(11).permutation(256).astype(np.uint8).reshape(1, 256)
    delegated.allocate_tensors()
    delegated.set_tensor(delegated.get_input_details()[0]["index"], x)
    delegated.invoke()
    got = delegated.get_tensor(delegated.get_output_details()[0]["index"])
    assert got.dtype == np.uint8 and np.array_equal(got, run_reference(model, x)[0])
    del delegated, delegate


def test_uint8_requantization_that_rescales_says_why_it_stays_on_the_cpu():
    placements = place_model(_int8_with_uint8_edges(0.07, 120))
    assert [p.device for p in placements] == [NPU, NPU, CPU]
    assert placements[2].reason == ("the chip converts between int8 and uint8 only at one scale with zero points "
                                    "128 apart (a sign-bit flip); this one rescales (scale 0.1, zero point -5 -> "
                                    "scale 0.07, zero point 120)")
    # A uint8 model (no int8 side) is not the chip's, and not for want of quantization.
    uint8_only = build_model([TensorSpec((1, 8), np.uint8, [0.05], [131]), TensorSpec((1, 8), np.uint8, [0.1], [3])],
                             [OpSpec(OP.QUANTIZE, [0], [1])], [0], [1])
    (placement,) = place_model(uint8_only)
    assert placement.device == CPU and "uint8 only at an int8 model's edges" in placement.reason
