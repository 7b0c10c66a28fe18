"""Standalone activations (ReLU family, tanh, logistic, softmax) against LiteRT BUILTIN_REF."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels.activations import lut_lookup, relu_family, softmax
from npu_hw.fixedpoint import (
    LUT_LOGISTIC,
    LUT_TANH,
    activation_lut,
    fused_activation_range,
    relu_multiplier,
    softmax_params,
)
from tests.support.quant_utils import f32, log_uniform, random_int8
from tests.support.tflite_builder import TensorSpec, run_reference, single_op_model

SEEDS = range(20)
CASES_PER_SEED = 10  # 200 per op
OP = tflite.BuiltinOperator
RELU_OPS = {OP.RELU: 1, OP.RELU6: 3, OP.RELU_N1_TO_1: 2}  # op -> fused-activation code


def random_shape(rng: np.random.Generator) -> tuple[int, ...]:
    rank = int(rng.integers(1, 5))
    return tuple(int(d) for d in rng.integers(1, 9, size=rank))


def unary_model(op: int, shape, in_q, out_q, options_type=0, options=None) -> bytes:
    tensors = [TensorSpec(shape, np.int8, [in_q[0]], [in_q[1]], name="x"),
               TensorSpec(shape, np.int8, [out_q[0]], [out_q[1]], name="y")]
    return single_op_model(op, tensors, [0], [1], options_type, options)


@pytest.mark.parametrize("op", list(RELU_OPS), ids=["relu", "relu6", "relu_n1_to_1"])
@pytest.mark.parametrize("seed", SEEDS)
def test_relu_family(seed: int, op: int) -> None:
    rng = np.random.default_rng(3000 + seed + 100 * op)
    for case_no in range(CASES_PER_SEED):
        shape = random_shape(rng)
        in_s = float(f32(log_uniform(rng, 1e-3, 0.1)))
        out_s = float(f32(in_s * rng.uniform(0.3, 3.0)))
        in_zp, out_zp = (int(v) for v in rng.integers(-128, 128, 2))
        x = random_int8(rng, shape)
        (expected,) = run_reference(unary_model(op, shape, (in_s, in_zp), (out_s, out_zp)), x)
        mult, shift = relu_multiplier(in_s, out_s)
        act_min, act_max = fused_activation_range(RELU_OPS[op], out_s, out_zp)
        got = relu_family(x, input_zp=in_zp, output_zp=out_zp, multiplier=mult, shift=shift,
                          act_min=act_min, act_max=act_max)
        desc = f"seed {seed} case {case_no}: {shape} in=({in_s}, {in_zp}) out=({out_s}, {out_zp})"
        assert np.count_nonzero(got != expected) == 0, desc


@pytest.mark.parametrize("kind", [LUT_TANH, LUT_LOGISTIC], ids=["tanh", "logistic"])
@pytest.mark.parametrize("seed", SEEDS)
def test_lut_activations(seed: int, kind: int) -> None:
    rng = np.random.default_rng(4000 + seed + 100 * kind)
    op = OP.TANH if kind == LUT_TANH else OP.LOGISTIC
    for case_no in range(CASES_PER_SEED):
        shape = random_shape(rng)
        in_s = float(f32(log_uniform(rng, 2e-3, 0.2)))
        in_zp = int(rng.integers(-128, 128))
        out_q = (1 / 128, 0) if kind == LUT_TANH else (1 / 256, -128)
        # Every input byte appears, so the whole table is checked.
        x = np.concatenate([np.arange(-128, 128, dtype=np.int8),
                            random_int8(rng, (int(np.prod(shape)),))])
        (expected,) = run_reference(unary_model(op, x.shape, (in_s, in_zp), out_q), x)
        lut = activation_lut(kind, in_s, in_zp, *out_q)
        got = lut_lookup(x, lut)
        desc = f"seed {seed} case {case_no}: in=({in_s}, {in_zp})"
        assert np.count_nonzero(got != expected) == 0, desc
        assert np.unique(expected).size > 2, desc


@pytest.mark.parametrize("seed", SEEDS)
def test_softmax(seed: int) -> None:
    rng = np.random.default_rng(5000 + seed)
    for case_no in range(CASES_PER_SEED):
        shape = random_shape(rng)
        # Rows up to 256 long: a longer row of near-equal values overflows the reference
        # kernel's reciprocal (LiteRT aborts the process; see test_softmax_sum_overflow).
        shape = shape[:-1] + (int(rng.integers(1, 257 if case_no == 0 else 40)),)
        in_s = float(f32(log_uniform(rng, 5e-3, 0.5)))
        in_zp = int(rng.integers(-128, 128))
        beta = float(f32(rng.choice([1.0, 1.0, rng.uniform(0.1, 3.0)])))

        def options(b, beta=beta):
            tflite.SoftmaxOptionsStart(b)
            tflite.SoftmaxOptionsAddBeta(b, beta)
            return tflite.SoftmaxOptionsEnd(b)

        x = random_int8(rng, shape)
        model = unary_model(OP.SOFTMAX, shape, (in_s, in_zp), (1 / 256, -128),
                            tflite.BuiltinOptions.SoftmaxOptions, options)
        (expected,) = run_reference(model, x)
        mult, shift, diff_min = softmax_params(beta, in_s)
        got = softmax(x, input_beta_multiplier=mult, input_beta_left_shift=shift,
                      diff_min=diff_min)
        desc = f"seed {seed} case {case_no}: {shape} in=({in_s}, {in_zp}) beta={beta}"
        assert np.count_nonzero(got != expected) == 0, desc


def test_softmax_sum_overflow_is_an_error() -> None:
    """1045 equal logits sum to 1045 > 2**8: TFLite's TFLITE_CHECK on the reciprocal
    exponent aborts; the kernel raises instead (the chip fails the job)."""
    mult, shift, diff_min = softmax_params(1.0, 0.0067)
    with pytest.raises(ValueError):
        softmax(np.zeros((2, 1045), np.int8), input_beta_multiplier=mult,
                input_beta_left_shift=shift, diff_min=diff_min)
    ok = softmax(np.zeros((2, 256), np.int8), input_beta_multiplier=mult,
                 input_beta_left_shift=shift, diff_min=diff_min)
    assert (ok == -127).all()  # 1/256 each: 1 quantum above the zero point


def test_bad_arguments() -> None:
    x = np.zeros((2, 3), np.int8)
    with pytest.raises(ValueError):
        lut_lookup(x, np.zeros(255, np.int8))
    with pytest.raises(TypeError):
        softmax(x.astype(np.int16), input_beta_multiplier=1 << 30, input_beta_left_shift=20,
                diff_min=-100)
    with pytest.raises(ValueError):
        relu_family(x, input_zp=300, output_zp=0, multiplier=1 << 30, shift=1,
                    act_min=0, act_max=127)
    with pytest.raises(ValueError):
        activation_lut(7, 0.1, 0, 1 / 256, -128)
