"""fully_connected against LiteRT BUILTIN_REF on random int8 cases."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels.fixedpoint import (
    multiply_by_quantized_multiplier,
    multiply_by_quantized_multiplier_single_round,
    requantize_double,
)
from firmware_sim.kernels.fully_connected import fully_connected
from npu_hw.fixedpoint import effective_scale, fused_activation_range
from tests.support.quant_utils import ACTIVATIONS, conv_multipliers, f32, log_uniform, random_int8
from tests.support.tflite_builder import TensorSpec, run_reference, single_op_model

CASES_PER_SEED = 10
SEEDS = range(25)  # 250 random cases


def fc_model(w: np.ndarray, bias: np.ndarray | None, m: int, in_scale: float, in_zp: int,
             w_scales: np.ndarray, out_scale: float, out_zp: int, activation: int) -> bytes:
    n, k = w.shape
    tensors = [
        TensorSpec((m, k), np.int8, [in_scale], [in_zp], name="x"),
        TensorSpec((n, k), np.int8, list(w_scales), [0] * len(w_scales), 0, w, "w"),
        TensorSpec((m, n), np.int8, [out_scale], [out_zp], name="y"),
    ]
    inputs = [0, 1, -1]
    if bias is not None:
        bias_scales = [float(f32(in_scale) * f32(s)) for s in w_scales]
        tensors.append(TensorSpec((n,), np.int32, bias_scales, [0] * len(bias_scales), 0, bias, "b"))
        inputs[2] = 3

    def options(b):
        tflite.FullyConnectedOptionsStart(b)
        tflite.FullyConnectedOptionsAddFusedActivationFunction(b, activation)
        return tflite.FullyConnectedOptionsEnd(b)

    return single_op_model(tflite.BuiltinOperator.FULLY_CONNECTED, tensors, inputs, [2],
                           tflite.BuiltinOptions.FullyConnectedOptions, options)


def random_case(rng: np.random.Generator) -> dict:
    m = int(rng.integers(1, 9))
    k = int(rng.choice([rng.integers(1, 64), rng.integers(64, 600), rng.integers(600, 2100)]))
    n = int(rng.integers(1, 48))
    per_channel = bool(rng.integers(2))
    in_scale = float(f32(log_uniform(rng, 1e-3, 0.2)))
    in_zp = int(rng.integers(-128, 128))
    w_scales = f32(log_uniform(rng, 1e-3, 0.05, size=n if per_channel else 1))
    x = random_int8(rng, (m, k))
    w = random_int8(rng, (n, k))
    if rng.random() < 0.2:
        w[:, : k // 2] = 0  # sparse-ish rows change the accumulator range
    # Typical accumulator spread is ~74 * 74 * sqrt(k); aim the output scale near it,
    # and now and then make the multiplier larger than one (exercises the left shift).
    acc_scale = float(in_scale * np.max(w_scales))
    if rng.random() < 0.12:
        out_scale = acc_scale / rng.uniform(1.0, 6.0)
    else:
        out_scale = acc_scale * 74 * 74 * np.sqrt(k) / 60 * rng.uniform(0.2, 4.0)
    out_scale = float(f32(out_scale))
    out_zp = int(rng.integers(-128, 128))
    bias = None
    if rng.random() < 0.75:
        spread = int(74 * 74 * np.sqrt(k))
        bias = rng.integers(-2 * spread, 2 * spread + 1, size=n).astype(np.int32)
    return dict(x=x, w=w, bias=bias, in_scale=in_scale, in_zp=in_zp, w_scales=w_scales,
                out_scale=out_scale, out_zp=out_zp, activation=int(rng.choice(ACTIVATIONS)))


@pytest.mark.parametrize("seed", SEEDS)
def test_fully_connected_matches_reference(seed: int, kernel_backend: str) -> None:
    rng = np.random.default_rng(1000 + seed)
    for case_no in range(CASES_PER_SEED):
        c = random_case(rng)
        m, _ = c["x"].shape
        model = fc_model(c["w"], c["bias"], m, c["in_scale"], c["in_zp"], c["w_scales"],
                         c["out_scale"], c["out_zp"], c["activation"])
        (expected,) = run_reference(model, c["x"])
        mult, shift = conv_multipliers(c["in_scale"], c["w_scales"], c["out_scale"])
        act_min, act_max = fused_activation_range(c["activation"], c["out_scale"], c["out_zp"])
        scale = effective_scale(c["in_scale"], c["w_scales"], c["out_scale"])
        kwargs = dict(input_zp=c["in_zp"], output_zp=c["out_zp"], multiplier=mult,
                      shift=shift, act_min=act_min, act_max=act_max)
        got = fully_connected(c["x"], c["w"], c["bias"], scale=scale, **kwargs)
        fixed = fully_connected(c["x"], c["w"], c["bias"], **kwargs)
        desc = (f"seed {seed} case {case_no}: x{c['x'].shape} w{c['w'].shape} "
                f"bias={c['bias'] is not None} per_channel={len(c['w_scales']) > 1} "
                f"act={c['activation']} mult={mult[:3]} shift={shift[:3]}")
        assert got.dtype == np.int8 and got.shape == expected.shape, desc
        diff = np.count_nonzero(got != expected)
        assert diff == 0, f"{desc}: {diff} of {got.size} bytes differ"
        # The fixed-point path may differ only by an LSB, only next to a rounding tie.
        off = np.abs(fixed.astype(np.int16) - expected)
        assert off.max() <= 1 and np.count_nonzero(off) <= max(1, off.size // 10000), desc
        # The output is informative: not every value sits on a clamp bound (unless the
        # fused activation leaves a single value, e.g. RELU_N1_TO_1 on a coarse scale).
        if case_no == 0 and act_min < act_max:
            assert np.unique(expected).size > 1 or expected.size == 1, desc


def test_out_parameter_is_filled_in_place() -> None:
    rng = np.random.default_rng(7)
    x, w = random_int8(rng, (3, 40)), random_int8(rng, (5, 40))
    mult, shift = conv_multipliers(0.05, np.full(5, 0.01), 1.0)
    out = np.zeros((3, 5), dtype=np.int8)
    ret = fully_connected(x, w, None, input_zp=3, output_zp=-2, multiplier=mult,
                          shift=shift, out=out)
    assert ret is out
    ref = fully_connected(x, w, None, input_zp=3, output_zp=-2, multiplier=mult, shift=shift)
    np.testing.assert_array_equal(out, ref)
    assert np.unique(out).size > 1


def test_litert_fc_requantizes_in_double() -> None:
    """LiteRT's FC reference scales in double, ties away from zero; neither fixed-point
    build of MultiplyByQuantizedMultiplier reproduces it.

    K=1, w=1 makes each accumulator an exact chosen value; power-of-two scales put many
    of them exactly on rounding ties, other scales near them.
    """
    rng = np.random.default_rng(3)
    n, m = 32, 64
    w = np.ones((n, 1), dtype=np.int8)
    bias = rng.integers(-5000, 5000, size=n).astype(np.int32)
    x = rng.integers(-128, 128, size=(m, 1), dtype=np.int8)
    in_scale, out_scale = 0.5, 0.25
    w_scales = f32(rng.choice([1 / 2**7, 1 / 2**9, 3 / 2**10, 5 / 2**12, 0.00664328], size=n))
    model = fc_model(w, bias, m, in_scale, 0, w_scales, out_scale, 0, 0)
    (expected,) = run_reference(model, x)
    mult, shift = conv_multipliers(in_scale, w_scales, out_scale)
    acc = x.astype(np.int64) + bias

    def clip8(v: np.ndarray) -> np.ndarray:
        return np.clip(v, -128, 127).astype(np.int8)

    exact = clip8(requantize_double(acc, effective_scale(in_scale, w_scales, out_scale)))
    np.testing.assert_array_equal(expected, exact)
    assert np.any(clip8(multiply_by_quantized_multiplier(acc, mult, shift)) != expected)
    assert np.any(clip8(multiply_by_quantized_multiplier_single_round(acc, mult, shift))
                  != expected)


@pytest.mark.parametrize("kwargs, error", [
    (dict(x=np.zeros((2, 3), np.int16)), TypeError),
    (dict(w=np.zeros((4, 5), np.int8)), ValueError),
    (dict(bias=np.zeros(4, np.int64)), ValueError),
    (dict(multiplier=np.ones(3, np.int32)), ValueError),
    (dict(input_zp=200), ValueError),
    (dict(act_min=10, act_max=5), ValueError),
    (dict(out=np.zeros((2, 5), np.int8)), ValueError),
])
def test_bad_arguments_are_rejected(kwargs: dict, error: type) -> None:
    args = dict(x=np.zeros((2, 3), np.int8), w=np.zeros((4, 3), np.int8),
                bias=np.zeros(4, np.int32), input_zp=0, output_zp=0,
                multiplier=np.full(4, 1 << 30, np.int32), shift=np.zeros(4, np.int32))
    args.update(kwargs)
    x, w, bias = args.pop("x"), args.pop("w"), args.pop("bias")
    with pytest.raises(error):
        fully_connected(x, w, bias, **args)
