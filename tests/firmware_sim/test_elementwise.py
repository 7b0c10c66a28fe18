"""ADD, MUL, QUANTIZE, DEQUANTIZE against LiteRT BUILTIN_REF."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels.elementwise import add, dequantize, mul, quantize, requantize
from npu_hw.fixedpoint import add_params, fused_activation_range, mul_multiplier, rescale_multiplier
from tests.support.quant_utils import ACTIVATIONS, f32, log_uniform, random_int8
from tests.support.tflite_builder import TensorSpec, run_reference, single_op_model

SEEDS = range(20)
CASES_PER_SEED = 10
OP = tflite.BuiltinOperator


def broadcast_shapes(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    rank = int(rng.integers(1, 5))
    full = tuple(int(d) for d in rng.integers(1, 7, size=rank))
    mode = rng.integers(3)
    if mode == 0:
        return full, full
    other = tuple(1 if rng.random() < 0.5 else d for d in full)
    other = other[int(rng.integers(0, rank)):]  # lower rank broadcasts too
    return (full, other) if mode == 1 else (other, full)


def random_q(rng: np.random.Generator) -> tuple[float, int]:
    return float(f32(log_uniform(rng, 1e-3, 0.3))), int(rng.integers(-128, 128))


@pytest.mark.parametrize("op", [OP.ADD, OP.MUL], ids=["add", "mul"])
@pytest.mark.parametrize("seed", SEEDS)
def test_binary(seed: int, op: int) -> None:
    rng = np.random.default_rng(6000 + seed + op)
    for case_no in range(CASES_PER_SEED):
        sa, sb = broadcast_shapes(rng)
        q1, q2 = random_q(rng), random_q(rng)
        act = int(rng.choice(ACTIVATIONS))
        if op == OP.ADD:
            qo = (float(f32(max(q1[0], q2[0]) * rng.uniform(0.5, 3.0))), int(rng.integers(-128, 128)))
        else:
            qo = (float(f32(q1[0] * q2[0] * 128 * rng.uniform(0.1, 2.0))), int(rng.integers(-128, 128)))
        out_shape = np.broadcast_shapes(sa, sb)
        tensors = [TensorSpec(sa, np.int8, [q1[0]], [q1[1]], name="a"),
                   TensorSpec(sb, np.int8, [q2[0]], [q2[1]], name="b"),
                   TensorSpec(out_shape, np.int8, [qo[0]], [qo[1]], name="y")]

        def options(b, act=act):
            if op == OP.ADD:
                tflite.AddOptionsStart(b)
                tflite.AddOptionsAddFusedActivationFunction(b, act)
                return tflite.AddOptionsEnd(b)
            tflite.MulOptionsStart(b)
            tflite.MulOptionsAddFusedActivationFunction(b, act)
            return tflite.MulOptionsEnd(b)

        opt_type = (tflite.BuiltinOptions.AddOptions if op == OP.ADD
                    else tflite.BuiltinOptions.MulOptions)
        model = single_op_model(op, tensors, [0, 1], [2], opt_type, options)
        a, b = random_int8(rng, sa), random_int8(rng, sb)
        (expected,) = run_reference(model, a, b)
        act_min, act_max = fused_activation_range(act, qo[0], qo[1])
        if op == OP.ADD:
            params = dict(input1_zp=q1[1], input2_zp=q2[1], output_zp=qo[1], act_min=act_min,
                          act_max=act_max, **add_params(q1[0], q2[0], qo[0]))
            fn = add
        else:
            m, s = mul_multiplier(q1[0], q2[0], qo[0])
            params = dict(input1_zp=q1[1], input2_zp=q2[1], output_zp=qo[1], multiplier=m,
                          shift=s, act_min=act_min, act_max=act_max)
            fn = mul
        desc = f"seed {seed} case {case_no}: {sa} {sb} q={q1} {q2} {qo} act={act}"
        # First use of a parameter set computes directly; the second goes through its
        # 256 x 256 table (binary_table): both must match, also into a strided ``out``.
        for path in ("direct", "table"):
            got = fn(a, b, **params)
            assert got.shape == expected.shape, desc
            assert np.count_nonzero(got != expected) == 0, f"{path}: {desc}"
        strided = np.zeros(expected.shape + (2,), np.int8)[..., 0]
        fn(a, b, **params, out=strided)
        assert np.array_equal(strided, expected), f"table into strided out: {desc}"


@pytest.mark.parametrize("seed", SEEDS)
def test_quantize_dequantize(seed: int) -> None:
    rng = np.random.default_rng(7000 + seed)
    for case_no in range(CASES_PER_SEED):
        shape = tuple(int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 4))))
        qi, qo = random_q(rng), random_q(rng)
        # float32 -> int8, with values on and around rounding ties and out of range.
        xf = (rng.standard_normal(shape) * 80 * qo[0]).astype(np.float32)
        xf.flat[0] = np.float32(qo[0]) * np.float32(2.5)
        if xf.size > 2:
            xf.flat[1], xf.flat[2] = np.float32(1e30), -np.float32(np.inf)
        model = single_op_model(OP.QUANTIZE, [TensorSpec(shape, np.float32, name="x"),
                                              TensorSpec(shape, np.int8, [qo[0]], [qo[1]])],
                                [0], [1])
        (expected,) = run_reference(model, xf)
        got = quantize(xf, scale=qo[0], zero_point=qo[1])
        desc = f"seed {seed} case {case_no}: {shape} {qi} -> {qo}"
        assert np.count_nonzero(got != expected) == 0, "quantize " + desc
        # int8 -> int8 requantize.
        x8 = random_int8(rng, shape)
        model = single_op_model(OP.QUANTIZE, [TensorSpec(shape, np.int8, [qi[0]], [qi[1]]),
                                              TensorSpec(shape, np.int8, [qo[0]], [qo[1]])],
                                [0], [1])
        (expected,) = run_reference(model, x8)
        m, s = rescale_multiplier(qi[0], qo[0])
        got = requantize(x8, input_zp=qi[1], output_zp=qo[1], multiplier=m, shift=s)
        assert np.count_nonzero(got != expected) == 0, "requantize " + desc
        # int8 -> float32.
        model = single_op_model(OP.DEQUANTIZE, [TensorSpec(shape, np.int8, [qi[0]], [qi[1]]),
                                                TensorSpec(shape, np.float32)], [0], [1])
        (expected,) = run_reference(model, x8)
        got = dequantize(x8, scale=qi[0], zero_point=qi[1])
        assert got.dtype == np.float32
        assert got.tobytes() == expected.tobytes(), "dequantize " + desc


def test_bad_arguments() -> None:
    a = np.zeros((2, 3), np.int8)
    p = add_params(0.1, 0.1, 0.2)
    with pytest.raises(ValueError):
        add(a, np.zeros((4,), np.int8), input1_zp=0, input2_zp=0, output_zp=0, **p)
    with pytest.raises(TypeError):
        mul(a, a.astype(np.int32), input1_zp=0, input2_zp=0, output_zp=0, multiplier=1 << 30,
            shift=0)
    with pytest.raises(TypeError):
        quantize(np.zeros(3, np.float64), scale=0.1, zero_point=0)
