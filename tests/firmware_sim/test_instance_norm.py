"""INSTANCE_NORM's formula (docs/hardware.md; LiteRT has no such kernel): exact integer
plane sums, then float64 one step at a time, pinned element by element; a plane far
narrower than the grid normalized as well as a wide one; bad operands refused."""
from __future__ import annotations

import math

import numpy as np
import pytest

from firmware_sim.errors import InvalidCommand
from firmware_sim.kernels.instance_norm import instance_norm

PARAMS = dict(input_scale=0.02, gamma_scale=0.01, beta_scale=0.03, output_scale=0.05, epsilon=1e-5)


def _by_element(x, gamma, beta, *, input_zp, gamma_zp, beta_zp, output_zp, act_min, act_max, input_scale,
                gamma_scale, beta_scale, output_scale, epsilon):
    batch, pixels, channels = x.shape
    out = np.empty_like(x)
    for i in range(batch):
        for c in range(channels):
            q = [int(v) - input_zp for v in x[i, :, c]]
            s1, s2 = sum(q), sum(v * v for v in q)
            mean, var = s1 / pixels, (pixels * s2 - s1 * s1) / (pixels * pixels)
            g = (int(gamma[c % gamma.size]) - gamma_zp) * gamma_scale
            b = (int(beta[c % beta.size]) - beta_zp) * beta_scale
            k = input_scale * g / math.sqrt(var * (input_scale * input_scale) + epsilon)
            for p in range(pixels):
                y = ((q[p] - mean) * k + b) / output_scale
                out[i, p, c] = min(max(round(y) + output_zp, act_min), act_max)   # round: ties to even
    return out


@pytest.mark.parametrize("dtype,zps", [(np.int8, (5, -3, 7, -10)), (np.int16, (0, 0, 0, 0))])
def test_the_formula_element_by_element(dtype, zps) -> None:
    rng = np.random.default_rng(0)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 30, 5)).astype(dtype)
    x[:, :, 1] = x[:, :, 1] // 64                      # a narrow channel
    x[:, :, 2] = zps[0]                                # a constant plane: var 0, the output is beta
    gamma, beta = rng.integers(-100, 100, 5).astype(dtype), rng.integers(-100, 100, 1).astype(dtype)
    p = dict(PARAMS, input_zp=zps[0], gamma_zp=zps[1], beta_zp=zps[2], output_zp=zps[3],
             act_min=int(info.min) + 3, act_max=int(info.max))
    got = instance_norm(x, gamma, beta, **p)
    assert got.dtype == dtype and np.array_equal(got, _by_element(x, gamma, beta, **p))


def test_a_narrow_plane_is_normalized_as_a_wide_one() -> None:
    rng = np.random.default_rng(1)
    wide = rng.normal(0, 8000, 256)
    x = np.stack([wide, wide / 100], axis=-1).round().astype(np.int16)[None]
    p = dict(PARAMS, input_zp=0, gamma_zp=0, beta_zp=0, output_zp=0, act_min=-32768, act_max=32767,
             output_scale=1e-3, gamma_scale=1.0 / 100)
    y = instance_norm(x, np.array([100], np.int16), np.array([0], np.int16), **p).astype(np.float64) * 1e-3
    assert np.corrcoef(y[0, :, 0], y[0, :, 1])[0, 1] > 0.9999
    assert abs(y[0, :, 1].std() - 1) < 0.01


def test_bad_operands_are_refused() -> None:
    x = np.zeros((1, 4, 3), np.int8)
    p = dict(PARAMS, input_zp=0, gamma_zp=0, beta_zp=0, output_zp=0, act_min=-128, act_max=127)
    with pytest.raises(InvalidCommand, match="gamma holds 2 values for 3 channels"):
        instance_norm(x, np.zeros(2, np.int8), np.zeros(3, np.int8), **p)
    with pytest.raises(InvalidCommand, match="scales"):
        instance_norm(x, np.zeros(3, np.int8), np.zeros(3, np.int8), **dict(p, output_scale=0.0))
