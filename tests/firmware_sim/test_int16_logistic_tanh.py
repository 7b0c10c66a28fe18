"""int16 LOGISTIC and TANH (``spec.sigmoid16``, run by the LUT descriptor's int16 mode)
against LiteRT BUILTIN_REF: 200 random cases per op, every one of the 65536 inputs at the
power-of-two scales the kernels special-case, and the table's own properties."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels.activations import lut_lookup
from npu_hw import sigmoid16
from npu_hw.fixedpoint import LUT_LOGISTIC, LUT_TANH
from tests.support.quant_utils import f32, log_uniform, random_int16
from tests.support.tflite_builder import TensorSpec, run_reference, single_op_model

SEEDS = range(25)
CASES_PER_SEED = 8  # 200 cases per op
OP = tflite.BuiltinOperator
KINDS = {"logistic": (OP.LOGISTIC, LUT_LOGISTIC), "tanh": (OP.TANH, LUT_TANH)}


def reference(op: int, x: np.ndarray, input_scale: float) -> np.ndarray:
    tensors = [TensorSpec(x.shape, np.int16, [input_scale], [0], name="x"),
               TensorSpec(x.shape, np.int16, [sigmoid16.OUTPUT_SCALE], [0], name="y")]
    (expected,) = run_reference(single_op_model(op, tensors, [0], [1], version=3), x)
    return expected


def random_scale(rng: np.random.Generator) -> float:
    """Mostly the scales calibration gives int16 tensors; sometimes a power of two (the
    kernels' special case) or a value next to one."""
    pick = rng.random()
    if pick < 0.15:
        return 2.0 ** int(rng.integers(-16, -8))
    if pick < 0.25:
        return float(f32(2.0 ** int(rng.integers(-13, -10)) * (1 + rng.choice([-1, 1]) * rng.uniform(0, 2e-3))))
    return float(f32(log_uniform(rng, 1e-6, 5e-2)))


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_int16_matches_reference(seed: int, name: str) -> None:
    op, kind = KINDS[name]
    rng = np.random.default_rng(18100 + seed + 100 * kind)
    for case_no in range(CASES_PER_SEED):
        shape = tuple(int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 4))))
        scale = random_scale(rng)
        x = random_int16(rng, shape)
        if rng.random() < 0.5:  # most values in the interpolated (unsaturated) range
            x = (x // int(rng.integers(1, 300))).astype(np.int16)
        expected = reference(op, x, scale)
        got = lut_lookup(x, sigmoid16.activation_lut_int16(kind, scale))
        assert got.dtype == np.int16
        np.testing.assert_array_equal(got, expected, err_msg=f"seed {seed} case {case_no} scale {scale}")


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("scale", [2.0 ** -12, 2.0 ** -11, 2.0 ** -15, 1e-4, 0.5])
def test_every_input_matches_reference(name: str, scale: float) -> None:
    op, kind = KINDS[name]
    x = np.arange(1 << 16, dtype=np.uint16).view(np.int16).reshape(256, 256)
    np.testing.assert_array_equal(lut_lookup(x, sigmoid16.activation_lut_int16(kind, scale)),
                                  reference(op, x, scale))


def test_table_is_the_corrected_sigmoid() -> None:
    table = sigmoid16.sigmoid_table().astype(np.int64)
    assert table.shape == (256,) and table[0] == 32768 and table[-1] == 0xFFFF
    assert np.all(np.diff(table) >= 0)
    exact = 65536 / (1 + np.exp(-np.arange(256) / 24))
    # each sample sits at most half a chord error (under 1) plus rounding above the curve
    assert np.all(table[:-1] - exact[:-1] > -0.5) and np.all(table[:-1] - exact[:-1] < 1.5)


@pytest.mark.parametrize("name", KINDS)
def test_outputs_follow_the_function(name: str) -> None:
    """LiteRT's interpolation stays within 1.5 output steps of float64 for LOGISTIC and 3
    for TANH (``2 * sigmoid(2x) - 1`` doubles the table's error)."""
    _, kind = KINDS[name]
    scale = 1e-4
    x = np.arange(-32768, 32768, dtype=np.int64)
    got = sigmoid16.activation_lut_int16(kind, scale)[x.astype(np.int16).view(np.uint16)]
    real = x * scale
    want = 1 / (1 + np.exp(-real)) if kind == LUT_LOGISTIC else np.tanh(real)
    assert np.abs(got - want * 32768).max() < (1.5 if kind == LUT_LOGISTIC else 3.0)


def test_bad_scales_are_refused() -> None:
    with pytest.raises(ValueError, match="output scale 2\\*\\*-15"):
        sigmoid16.input_scaling(LUT_LOGISTIC, 1e-3, 1 / 256)
    with pytest.raises(ValueError, match="output scale"):
        sigmoid16.input_scaling(LUT_TANH, 1e-3, 1 / 128)
    with pytest.raises(ValueError, match="too large"):
        sigmoid16.input_scaling(LUT_TANH, 8.0)
    with pytest.raises(ValueError, match="positive"):
        sigmoid16.input_scaling(LUT_TANH, 0.0)
    with pytest.raises(ValueError, match="unknown"):
        sigmoid16.input_scaling(7, 1e-3)
    with pytest.raises(ValueError, match="out of range"):
        sigmoid16.logistic_int16(np.zeros(2, np.int16), 1 << 20, 3)
