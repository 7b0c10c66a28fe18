"""Activations and elementwise math (PRELU, HARD_SWISH, LEAKY_RELU, ELU, GELU, EXP, LOG,
RSQRT, SQRT, ABS, NEG, SQUARED_DIFFERENCE, SUB, DIV, MAXIMUM, MINIMUM, L2_NORMALIZATION,
LOG_SOFTMAX)
against LiteRT BUILTIN_REF: 200 random cases each."""
from __future__ import annotations

import numpy as np
import pytest
import tflite
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from firmware_sim.kernels import binary, normalization, unary
from firmware_sim.kernels.activations import lut_lookup
from libnpu.compiler.ops import binary as binary_params
from libnpu.compiler.ops import unary as unary_params
from npu_hw import fixedpoint as fp
from npu_hw import tables
from tests.support.quant_utils import f32, log_uniform, random_int8
from tests.support.tflite_builder import TensorSpec, run_reference, single_op_model

SEEDS = range(20)
CASES_PER_SEED = 10  # 200 per op
OP = tflite.BuiltinOperator
OPTS = tflite.BuiltinOptions
ALL_BYTES = np.arange(-128, 128, dtype=np.int8)


def random_shape(rng: np.random.Generator, max_rank: int = 4) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, max_rank + 1))))


def random_q(rng: np.random.Generator, lo: float = 2e-3, hi: float = 0.1) -> tuple[float, int]:
    return float(f32(log_uniform(rng, lo, hi))), int(rng.integers(-128, 128))


def unary_model(op: int, n: int, in_q, out_q, options_type: int = 0, options=None, version: int = 1) -> bytes:
    tensors = [TensorSpec((n,), np.int8, [in_q[0]], [in_q[1]], name="x"),
               TensorSpec((n,), np.int8, [out_q[0]], [out_q[1]], name="y")]
    return single_op_model(op, tensors, [0], [1], options_type, options, version)


def every_byte(rng: np.random.Generator) -> np.ndarray:
    """All 256 input bytes (the whole table is checked) and a random tail."""
    return np.concatenate([ALL_BYTES, random_int8(rng, (int(rng.integers(1, 64)),))])


def check_unary(op: int, seed: int, kernel, *, version: int = 1, options_type: int = 0, options=None,
                in_range=(2e-3, 0.1), out_range=(2e-3, 0.1), valid=None, reference=run_reference) -> None:
    """``kernel(x, in_q, out_q)`` against LiteRT for 10 random quantizations of ``op``."""
    rng = np.random.default_rng(9000 + seed + 101 * op)
    for case_no in range(CASES_PER_SEED):
        in_q, out_q = random_q(rng, *in_range), random_q(rng, *out_range)
        x = every_byte(rng)
        if valid is not None:
            x = x[valid(x, in_q)]
        (expected,) = reference(unary_model(op, x.size, in_q, out_q, options_type, options, version), x)
        got = kernel(x, in_q, out_q)
        assert np.array_equal(got, expected), f"seed {seed} case {case_no}: in={in_q} out={out_q}"


# Unary ops with an integer formula ------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_hard_swish(seed: int) -> None:
    def kernel(x, in_q, out_q):
        return unary.hard_swish(x, **unary_params.hard_swish_params(in_q[0], in_q[1], *out_q))
    # output scale >= input scale / 128 keeps the output multiplier below one, as LiteRT requires
    check_unary(OP.HARD_SWISH, seed, kernel, in_range=(2e-3, 0.2), out_range=(2e-3, 0.2))


@pytest.mark.parametrize("seed", SEEDS)
def test_leaky_relu(seed: int) -> None:
    alpha = float(f32(np.random.default_rng(seed).choice([0.01, 0.1, 0.2, 0.3, 0.7, 1.5, -0.5])))

    def options(b):
        tflite.LeakyReluOptionsStart(b)
        tflite.LeakyReluOptionsAddAlpha(b, alpha)
        return tflite.LeakyReluOptionsEnd(b)

    def kernel(x, in_q, out_q):
        return unary.leaky_relu(x, input_zp=in_q[1], output_zp=out_q[1],
                                **unary_params.leaky_relu_params(in_q[0], alpha, out_q[0]))
    check_unary(OP.LEAKY_RELU, seed, kernel, version=2, options_type=OPTS.LeakyReluOptions, options=options)


@pytest.mark.parametrize("seed", SEEDS)
def test_rsqrt(seed: int) -> None:
    def kernel(x, in_q, out_q):
        return unary.rsqrt(x, input_zp=in_q[1], output_zp=out_q[1], **unary_params.rsqrt_params(in_q[0], out_q[0]))
    # LiteRT refuses inputs below the zero point
    check_unary(OP.RSQRT, seed, kernel, version=2, in_range=(1e-3, 0.1), out_range=(0.02, 0.5),
                valid=lambda x, q: x >= q[1])


@pytest.mark.parametrize("seed", SEEDS)
def test_abs(seed: int) -> None:
    def kernel(x, in_q, out_q):
        return unary.abs_(x, input_zp=in_q[1], output_zp=out_q[1], **unary_params.abs_params(in_q[0], out_q[0]))
    check_unary(OP.ABS, seed, kernel, version=2)


def test_abs_same_scale() -> None:
    x = ALL_BYTES
    (expected,) = run_reference(unary_model(OP.ABS, x.size, (0.05, 3), (0.05, -100), version=2), x)
    assert np.array_equal(unary.abs_(x, input_zp=3, output_zp=-100, **unary_params.abs_params(0.05, 0.05)), expected)


# Unary ops whose LiteRT kernel is a table built from float --------------------------------------


def _lut_kernel(fn):
    return lambda x, in_q, out_q: lut_lookup(x, tables.float_lut(fn, *in_q, *out_q))


def run_builtin(model: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    """LiteRT's builtin kernels without XNNPACK: BUILTIN_REF has no ELU, and the builtin
    int8 ELU is the same table lookup."""
    it = Interpreter(model_content=model,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


@pytest.mark.parametrize("seed", SEEDS)
def test_elu(seed: int) -> None:
    check_unary(OP.ELU, seed, _lut_kernel(unary_params.elu_transform(dict(alpha=1.0))), reference=run_builtin)


@pytest.mark.parametrize("approximate", [False, True], ids=["erf", "tanh"])
@pytest.mark.parametrize("seed", SEEDS[:10])
def test_gelu(seed: int, approximate: bool) -> None:
    def options(b):
        tflite.GeluOptionsStart(b)
        tflite.GeluOptionsAddApproximate(b, approximate)
        return tflite.GeluOptionsEnd(b)
    check_unary(OP.GELU, seed, _lut_kernel(unary_params.gelu_transform(approximate)), options_type=OPTS.GeluOptions,
                options=options)


@pytest.mark.parametrize("seed", SEEDS)
def test_exp(seed: int) -> None:
    check_unary(OP.EXP, seed, _lut_kernel(lambda v: f32(tables.libm().expf(float(v)))), version=2,
                in_range=(2e-3, 0.03), out_range=(0.01, 0.5))


@pytest.mark.parametrize("seed", SEEDS)
def test_log(seed: int) -> None:
    def kernel(x, in_q, out_q):
        return lut_lookup(x, tables.float_lut(unary_params.log_transform(*out_q), *in_q, *out_q))
    check_unary(OP.LOG, seed, kernel, version=2, in_range=(0.01, 0.5), out_range=(0.01, 0.1))


@pytest.mark.parametrize("seed", SEEDS)
def test_sqrt(seed: int) -> None:
    def kernel(x, in_q, out_q):
        return lut_lookup(x, unary_params.sqrt_lut(*in_q, *out_q))
    check_unary(OP.SQRT, seed, kernel, version=2, in_range=(1e-3, 0.5), out_range=(1e-3, 0.1),
                valid=lambda x, q: x >= q[1])


def test_neg() -> None:
    rng = np.random.default_rng(77)
    for _ in range(200):
        x = every_byte(rng)
        in_q, out_q = random_q(rng), random_q(rng)
        (expected,) = run_reference(unary_model(OP.NEG, x.size, in_q, out_q), x)
        assert np.array_equal(lut_lookup(x, unary_params.neg_lut()), expected)


# Binary ops -----------------------------------------------------------------------------------


def broadcast_pair(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    out = random_shape(rng)
    other = tuple(d if rng.random() < 0.5 else 1 for d in out)
    other = other[int(rng.integers(0, len(other))):] or (1,)
    return (out, other) if rng.random() < 0.5 else (other, out)


def binary_model(op: int, s1, s2, q1, q2, qo, options_type: int = 0, options=None, version: int = 1,
                 const2: np.ndarray | None = None) -> bytes:
    out = np.broadcast_shapes(s1, s2)
    tensors = [TensorSpec(s1, np.int8, [q1[0]], [q1[1]], name="a"),
               TensorSpec(s2, np.int8, [q2[0]], [q2[1]], data=const2, name="b"),
               TensorSpec(out, np.int8, [qo[0]], [qo[1]], name="y")]
    return single_op_model(op, tensors, [0, 1], [2], options_type, options, version)


def check_binary(op: int, seed: int, kernel, *, version: int = 1, options_type: int = 0, options=None,
                 shapes=broadcast_pair, quants=None, valid=None) -> None:
    rng = np.random.default_rng(11000 + seed + 101 * op)
    for case_no in range(CASES_PER_SEED):
        s1, s2 = shapes(rng)
        q1, q2, qo = quants(rng) if quants else (random_q(rng), random_q(rng), random_q(rng))
        a, b = random_int8(rng, s1), random_int8(rng, s2)
        if valid is not None:
            b = valid(b, q2)
        (expected,) = run_reference(binary_model(op, s1, s2, q1, q2, qo, options_type, options, version), a, b)
        got = kernel(a, b, q1, q2, qo)
        assert np.array_equal(got, expected), f"seed {seed} case {case_no}: {s1} {s2} {q1} {q2} {qo}"


@pytest.mark.parametrize("seed", SEEDS)
def test_prelu(seed: int) -> None:
    def shapes(rng):  # alpha broadcasts to x (TFLite: the output has x's shape)
        x = random_shape(rng)
        alpha = tuple(d if rng.random() < 0.5 else 1 for d in x)[int(rng.integers(0, len(x))):] or (1,)
        return x, alpha

    def kernel(a, b, q1, q2, qo):
        return binary.prelu(a, b, input1_zp=q1[1], input2_zp=q2[1], output_zp=qo[1],
                            **binary_params.prelu_params(q1[0], q2[0], qo[0]))
    check_binary(OP.PRELU, seed, kernel, shapes=shapes)


@pytest.mark.parametrize("seed", SEEDS)
def test_squared_difference(seed: int) -> None:
    def quants(rng):
        q1, q2 = random_q(rng, 2e-3, 0.05), random_q(rng, 2e-3, 0.05)
        return q1, q2, random_q(rng, 0.2, 2.0)

    def kernel(a, b, q1, q2, qo):
        return binary.squared_difference(a, b, input1_zp=q1[1], input2_zp=q2[1], output_zp=qo[1],
                                         **binary_params.squared_difference_params(q1[0], q2[0], qo[0]))
    check_binary(OP.SQUARED_DIFFERENCE, seed, kernel, version=2, quants=quants)


@pytest.mark.parametrize("seed", SEEDS)
def test_sub(seed: int) -> None:
    act = int(np.random.default_rng(seed).choice([0, 1, 3]))

    def options(b):
        tflite.SubOptionsStart(b)
        tflite.SubOptionsAddFusedActivationFunction(b, act)
        return tflite.SubOptionsEnd(b)

    def kernel(a, b, q1, q2, qo):
        lo, hi = fp.fused_activation_range(act, *qo)
        return binary.sub(a, b, input1_zp=q1[1], input2_zp=q2[1], output_zp=qo[1], act_min=lo, act_max=hi,
                          **fp.add_params(q1[0], q2[0], qo[0]))
    check_binary(OP.SUB, seed, kernel, version=2, options_type=OPTS.SubOptions, options=options)


@pytest.mark.parametrize("op", [OP.MAXIMUM, OP.MINIMUM], ids=["maximum", "minimum"])
@pytest.mark.parametrize("seed", SEEDS)
def test_maximum_minimum(seed: int, op: int) -> None:
    def quants(rng):
        q = random_q(rng)
        return q, q, q
    fn = binary.maximum if op == OP.MAXIMUM else binary.minimum
    check_binary(op, seed, lambda a, b, *q: fn(a, b), version=2, quants=quants)


def _div_shift_defined(a: np.ndarray, b: np.ndarray, q1, q2, output_shift: int) -> np.ndarray:
    """Where LiteRT's int8 DIV stays defined: its final right shift
    (recip bits + dividend headroom - output shift) is at most 30."""
    v1, v2 = np.broadcast_arrays(a.astype(np.int64) - q1[1], b.astype(np.int64) - q2[1])
    v1 = np.abs(np.where(v2 < 0, -v1, v1))
    bits = lambda v: np.frexp(v.astype(np.float64))[1].astype(np.int64)  # noqa: E731 (bit length)
    recip_shift = bits(np.abs(v2)) - 1
    headroom = 31 - bits(v1)
    return recip_shift + headroom - output_shift <= 30


@pytest.mark.parametrize("seed", SEEDS)
def test_div(seed: int) -> None:
    """Byte-identical to LiteRT where its arithmetic is defined. LiteRT 2.3.0's int8 DIV
    shifts right by 31 bits or more (undefined in C; garbage on x86, e.g. 0.44 comes out
    as 127) when the dividend is small against the divisor: there the chip's kernel clamps
    the shift, and the result is pinned to the exact quotient (within one output step)."""
    rng = np.random.default_rng(12000 + seed)
    for case_no in range(CASES_PER_SEED):
        s1, s2 = broadcast_pair(rng)
        q1, q2, qo = random_q(rng, 0.01, 0.1), random_q(rng, 0.01, 0.1), random_q(rng, 0.02, 0.5)
        a, b = random_int8(rng, s1), random_int8(rng, s2)
        b = np.where(b == q2[1], np.int8(q2[1] + 1 if q2[1] < 127 else q2[1] - 1), b).astype(np.int8)
        params = binary_params.div_params(q1[0], q2[0], qo[0])
        got = binary.div(a, b, input1_zp=q1[1], input2_zp=q2[1], output_zp=qo[1], **params)
        (expected,) = run_reference(binary_model(OP.DIV, s1, s2, q1, q2, qo, version=2), a, b)
        defined = _div_shift_defined(a, b, q1, q2, params["output_shift"])
        desc = f"seed {seed} case {case_no}: {q1} {q2} {qo}"
        assert np.array_equal(got[defined], expected[defined]), desc
        real = (q1[0] * (a.astype(np.float64) - q1[1])) / (q2[0] * (b.astype(np.float64) - q2[1]))
        exact = np.clip(real / qo[0] + qo[1], -128, 127)
        assert np.abs(got - exact).max() <= 1.0, desc


def test_div_by_the_zero_point_saturates() -> None:
    a = np.array([-5, 0, 5], np.int8)
    b = np.zeros(3, np.int8)
    got = binary.div(a, b, input1_zp=0, input2_zp=0, output_zp=3, **binary_params.div_params(0.1, 0.1, 0.1))
    assert got.tolist() == [-128, 3, 127]


# Row ops ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_l2_normalization(seed: int) -> None:
    rng = np.random.default_rng(13000 + seed)
    for case_no in range(CASES_PER_SEED):
        shape = random_shape(rng)[:-1] + (int(rng.integers(1, 70)),)
        in_q = random_q(rng)
        x = random_int8(rng, shape)
        tensors = [TensorSpec(shape, np.int8, [in_q[0]], [in_q[1]], name="x"),
                   TensorSpec(shape, np.int8, [1 / 128], [0], name="y")]
        (expected,) = run_reference(single_op_model(OP.L2_NORMALIZATION, tensors, [0], [1], version=2), x)
        got = normalization.l2_normalization(x, input_zp=in_q[1])
        assert np.array_equal(got, expected), f"seed {seed} case {case_no}: {shape} {in_q}"


@pytest.mark.parametrize("seed", SEEDS)
def test_log_softmax(seed: int) -> None:
    from libnpu.compiler.ops.normalization import log_softmax_params
    rng = np.random.default_rng(14000 + seed)
    for case_no in range(CASES_PER_SEED):
        shape = random_shape(rng)[:-1] + (int(rng.integers(1, 70)),)
        in_q = (float(f32(log_uniform(rng, 5e-3, 0.5))), int(rng.integers(-128, 128)))
        x = random_int8(rng, shape)
        tensors = [TensorSpec(shape, np.int8, [in_q[0]], [in_q[1]], name="x"),
                   TensorSpec(shape, np.int8, [16 / 256], [127], name="y")]
        (expected,) = run_reference(single_op_model(OP.LOG_SOFTMAX, tensors, [0], [1], version=2), x)
        got = normalization.log_softmax(x, **log_softmax_params(in_q[0]))
        assert np.array_equal(got, expected), f"seed {seed} case {case_no}: {shape} {in_q}"


@pytest.mark.parametrize("scales", [(0.01, 0.01), (0.01, 0.023), (0.05, 0.004)])
def test_abs_int16(scales) -> None:
    """int16 ABS (zero points 0) on every int16 value, rescaled or not: LiteRT's int16 kernel."""
    x = np.arange(-32768, 32768, dtype=np.int16)
    tensors = [TensorSpec((x.size,), np.int16, [scales[0]], [0], name="x"),
               TensorSpec((x.size,), np.int16, [scales[1]], [0], name="y")]
    (expected,) = run_reference(single_op_model(OP.ABS, tensors, [0], [1], 0, None, 3), x)
    got = unary.abs_(x, input_zp=0, output_zp=0, **unary_params.abs_params(*scales))
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, expected)
