"""Fixed-point primitives against straightforward Python-int versions of TFLite's C code."""
from __future__ import annotations

import math

import numpy as np
import pytest

from firmware_sim.kernels import fixedpoint as fp
from firmware_sim.kernels.gemm import int_matmul
from npu_hw.fixedpoint import (
    effective_scale,
    fused_activation_range,
    quantize_multiplier,
    quantize_multiplier_array,
)

EDGE = [fp.INT32_MIN, fp.INT32_MIN + 1, -(1 << 30), -12345, -1, 0, 1, 7, 12345, 1 << 30,
        fp.INT32_MAX]


def c_div(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def py_srdhm(a: int, b: int) -> int:
    if a == b == fp.INT32_MIN:
        return fp.INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return c_div(ab + nudge, 1 << 31)


def py_rdbpot(x: int, e: int) -> int:
    mask = (1 << e) - 1
    return (x >> e) + ((x & mask) > (mask >> 1) + (1 if x < 0 else 0))


def test_srdhm_and_rdbpot_match_c_semantics() -> None:
    rng = np.random.default_rng(0)
    a = np.array(EDGE + list(rng.integers(fp.INT32_MIN, fp.INT32_MAX, 300)), dtype=np.int64)
    b = np.array(EDGE[::-1] + list(rng.integers(fp.INT32_MIN, fp.INT32_MAX, 300)), dtype=np.int64)
    got = fp.saturating_rounding_doubling_high_mul(a, b)
    assert got.tolist() == [py_srdhm(int(x), int(y)) for x, y in zip(a, b)]
    for e in (0, 1, 5, 17, 31):
        got = fp.rounding_divide_by_pot(a, e)
        assert got.tolist() == [py_rdbpot(int(x), e) for x in a]
    with pytest.raises(ValueError):
        fp.rounding_divide_by_pot(a, 32)


def test_multiplier_variants_match_python_ints() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(-(1 << 24), 1 << 24, 500)
    m = rng.integers(1 << 30, fp.INT32_MAX, 500)
    s = rng.integers(-31, 3, 500)
    double = fp.multiply_by_quantized_multiplier(x, m, s)
    single = fp.multiply_by_quantized_multiplier_single_round(x, m, s)
    away = fp.multiply_by_quantized_multiplier_round_away(x, m, s)
    for i in range(500):
        xi, mi, si = int(x[i]), int(m[i]), int(s[i])
        left, right = max(si, 0), max(-si, 0)
        shifted = ((xi << left) + (1 << 31)) % (1 << 32) - (1 << 31)
        assert double[i] == py_rdbpot(py_srdhm(shifted, mi), right)
        t = 31 - si
        assert single[i] == (xi * mi + (1 << (t - 1))) >> t
        mag = (abs(xi * mi) + (1 << (t - 1))) >> t
        assert away[i] == (-mag if xi * mi < 0 else mag)


def test_round_half_away_is_exact() -> None:
    v = np.array([0.5, -0.5, 1.5, -2.5, 0.49999999999999994, -0.49999999999999994, 2.0, 3.7])
    assert fp.round_half_away(v).tolist() == [1, -1, 2, -3, 0, -0, 2, 4]
    big = fp.requantize_double(np.array([1 << 30]), np.array([4.0]))
    assert big.tolist() == [fp.INT32_MIN]


@pytest.mark.parametrize("real", [1e-12, 2.0 ** -32, 1e-6, 0.000123, 0.25, 0.5, 0.7071,
                                  0.99999999999, 1.0, 1.5, 3.0, 1234.5, -0.3])
def test_quantize_multiplier(real: float) -> None:
    q, s = quantize_multiplier(real)
    qa, sa = quantize_multiplier_array(np.array([real]))
    assert (int(qa[0]), int(sa[0])) == (q, s)
    if abs(real) < 2.0 ** -32:
        assert (q, s) == (0, 0)
        return
    assert (1 << 30) <= abs(q) < (1 << 31)
    assert math.isclose(q * 2.0 ** (s - 31), real, rel_tol=2 ** -30)


def test_quantize_multiplier_rounds_up_to_next_power() -> None:
    # 0.99999999999 rounds to 2**31 in Q31: TFLite halves it and bumps the shift.
    assert quantize_multiplier(0.99999999999) == (1 << 30, 1)
    with pytest.raises(ValueError):
        quantize_multiplier(float("nan"))


def test_effective_scale_and_activation_range() -> None:
    s = effective_scale(0.1, np.array([0.02, 0.5]), 0.3)
    expected = [float(np.float32(0.1)) * float(np.float32(f)) / float(np.float32(0.3))
                for f in (0.02, 0.5)]
    assert s.tolist() == expected
    assert fused_activation_range(0, 0.1, 5) == (-128, 127)
    assert fused_activation_range(1, 0.1, 5) == (5, 127)
    assert fused_activation_range(3, 0.1, -128) == (-128, -68)
    assert fused_activation_range(2, 0.01, 0) == (-100, 100)
    with pytest.raises(ValueError):
        fused_activation_range(4, 0.1, 0)


@pytest.mark.parametrize("k, dtype", [(100, np.int8), (5000, np.int8), (40000, np.int32)])
def test_int_matmul_is_exact_on_every_path(k: int, dtype: type) -> None:
    rng = np.random.default_rng(k)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=(2, k), endpoint=True).astype(dtype)
    b = rng.integers(-128, 128, size=(3, k)).astype(np.int8)
    got = int_matmul(a, b, 7 if dtype == np.int8 else 0)
    ref = (a.astype(object) + (7 if dtype == np.int8 else 0)) @ b.astype(object).T
    assert got.dtype == np.int64
    assert got.tolist() == ref.tolist()


def test_fast_requantize_equals_step_by_step() -> None:
    rng = np.random.default_rng(9)
    x = np.concatenate([np.array(EDGE, np.int64), rng.integers(fp.INT32_MIN, fp.INT32_MAX, 4000),
                        rng.integers(-3000, 3000, 3999)]).reshape(-1, 9)
    cases = [
        (np.array([1 << 30]), np.array([-5])),                      # power-of-two ties
        (rng.integers(1 << 30, fp.INT32_MAX, 9), rng.integers(-31, 1, 9)),  # incl. e = 0
        (rng.integers(1 << 30, fp.INT32_MAX, 9), rng.integers(-20, 4, 9)),  # left shifts
        (np.array([fp.INT32_MIN]), np.array([0])),                  # saturation case
        (rng.integers(0, fp.INT32_MAX, 9), np.full(9, -31)),
    ]
    for mult, shift in cases:
        for addend in (0, -128, 77):
            ref = fp.multiply_by_quantized_multiplier(x, mult, shift) + addend
            got = fp.requantize_fixed_inplace(x.copy(), mult, shift, addend)
            assert got.tolist() == ref.tolist(), (mult[:2], shift[:2], addend)


def test_folded_f64_requant_equals_step_by_step() -> None:
    rng = np.random.default_rng(12)
    for mult, shift in [(np.array([1 << 30]), np.array([-5])),
                        (rng.integers(1 << 30, fp.INT32_MAX, 9), rng.integers(-20, 1, 9)),
                        (rng.integers(1 << 30, fp.INT32_MAX, 9), np.full(9, -1))]:
        for bias in (None, rng.integers(-50000, 50000, mult.size)):
            for addend in (0, -128, 127):
                plan = fp.F64Requant(mult, shift, bias, addend)
                assert plan.limit > 2 ** 20
                bound = int(plan.limit)
                acc = np.concatenate([rng.integers(-bound, bound, 2700), [-bound, bound, -1, 0],
                                      np.arange(-64, 64)]).astype(np.int64)
                acc = acc[: acc.size // 9 * 9].reshape(-1, 9)
                total = acc + (0 if bias is None else bias)
                ref = fp.multiply_by_quantized_multiplier(total, mult, shift) + addend
                got = plan.apply(acc.astype(np.float64))
                assert got.astype(np.int64).tolist() == ref.tolist()
    assert fp.F64Requant(np.array([1 << 30]), np.array([3]), None).limit == 0.0


@pytest.mark.parametrize("channels,rows", [(16, 1024), (146, 63), (511, 4), (7, 33), (32, 1008), (3, 1)])
def test_f64_requant_regrouped_rows(channels: int, rows: int) -> None:
    """Short channel axes are processed as regrouped rows against tiled constants; the
    result must not depend on that, for contiguous and transposed accumulators alike."""
    rng = np.random.default_rng(channels + rows)
    mult = rng.integers(1 << 30, fp.INT32_MAX, channels)
    shift = rng.integers(-12, 1, channels)
    bias = rng.integers(-50000, 50000, channels)
    plan = fp.F64Requant(mult, shift, bias, -7)
    acc = rng.integers(-(1 << 20), 1 << 20, (rows, channels))
    ref = fp.multiply_by_quantized_multiplier(acc + bias, mult, shift) - 7
    for a in (acc.astype(np.float32), np.asfortranarray(acc.astype(np.float32)),
              acc.astype(np.float64).reshape(1, rows, channels)):
        got = plan.apply(a).reshape(rows, channels)
        assert got.astype(np.int64).tolist() == ref.tolist()
