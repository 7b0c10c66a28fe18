"""int16 tables of float functions for the chip's ``LUT`` descriptor (ours: LiteRT has no
int16 GELU; the formula is docs/hardware.md's): the table against float64, its exact cases
and its clamps. The device running one: ``test_mixed_precision.py::test_our_int16_formulas_on_the_device``."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu.compiler.ops.unary import _gelu64, float_lut_int16


def _index(q: np.ndarray) -> np.ndarray:
    return np.asarray(q, np.int16).view(np.uint16)


def test_an_int16_table_exact_cases_and_clamps() -> None:
    # in_scale 2**-12, out_scale 2**-15: x / 2 is exact; beyond +-1.0 the output saturates
    lut = float_lut_int16(lambda x: x / 2, 2.0 ** -12, 2.0 ** -15)
    x = np.array([0, 4096, -4096, 8191, 8192, -8193, 32767, -32768], np.int16)
    np.testing.assert_array_equal(lut[_index(x)], [0, 16384, -16384, 32764, 32767, -32768, 32767, -32768])
    assert lut.dtype == np.int16 and lut.shape == (65536,)


@pytest.mark.parametrize("approximate", [False, True])
def test_gelus_int16_table_within_half_a_step_of_float64(approximate: bool) -> None:
    rng = np.random.default_rng(4200)
    q = np.arange(-32768, 32768)
    for _ in range(5):
        si = float(np.float32(10 ** rng.uniform(-0.5, 1.5) / 32767))      # inputs up to 0.3-30
        so = float(np.float32(si * rng.uniform(1.0, 2.5)))                 # GELU(x) <= x: within reach
        lut = float_lut_int16(lambda x: _gelu64(x, approximate), si, so)
        exact = _gelu64(q * si, approximate) / so
        err = np.abs(lut[_index(q)].astype(np.float64) - np.clip(exact, -32768, 32767))
        assert err.max() <= 0.5 + 1e-6, (si, so, err.max())
