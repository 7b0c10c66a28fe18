"""int16 HARD_SIGMOID (ours: TFLite has no HARD_SIGMOID; the formula is docs/hardware.md's):
the table the compiler builds for the chip's ``LUT`` descriptor against float64, its exact
cases and its clamps. The device running it: ``test_mixed_precision.py::test_our_int16_formulas_on_the_device``."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu.compiler.ops.unary import hard_sigmoid_lut_int16


def _index(q: np.ndarray) -> np.ndarray:
    return np.asarray(q, np.int16).view(np.uint16)


def test_hard_sigmoid_int16_exact_cases() -> None:
    # in_scale 2**-12 (2.5 is 10240), out_scale 2**-15 (0.5 is 16384): ONNX's alpha 0.2, beta 0.5
    lut = hard_sigmoid_lut_int16(0.2, 0.5, 2.0 ** -12, 2.0 ** -15)
    x = np.array([0, 10240, -10240, 32767, -32768, 5120, -5120], np.int16)
    np.testing.assert_array_equal(lut[_index(x)], [16384, 32767, 0, 32767, 0, 24576, 8192])
    assert lut.dtype == np.int16 and lut.shape == (65536,)


@pytest.mark.parametrize("alpha,beta", [(0.2, 0.5), (1 / 6, 0.5), (0.3, 0.4)])
def test_hard_sigmoid_int16_within_half_a_step_of_float64(alpha: float, beta: float) -> None:
    rng = np.random.default_rng(4200)
    for _ in range(20):
        si = float(np.float32(10 ** rng.uniform(-0.5, 1.5) / 32767))    # inputs up to 0.3-30
        so = float(np.float32(rng.uniform(1.0, 2.5) / 32767))            # 1.0 within reach, or not
        lut = hard_sigmoid_lut_int16(alpha, beta, si, so)
        q = np.arange(-32768, 32768)
        exact = np.clip(np.float32(alpha) * (q * si) + np.float32(beta), 0, 1) / so
        err = np.abs(lut[_index(q)].astype(np.float64) - np.minimum(exact, 32767))
        assert err.max() <= 0.5 + 1e-6, (si, so, err.max())
        assert 0 <= lut.min() and lut.max() <= min(32767, round(1 / so))
