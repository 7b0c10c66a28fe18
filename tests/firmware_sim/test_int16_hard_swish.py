"""int16 HARD_SWISH (``OPF_INT16``; LiteRT has none, the formula is docs/hardware.md's):
the kernel against a float64 reference within the documented bound, exact cases, and the
chip's unit giving what the kernel gives; bad int16 descriptors fail with EINVAL."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim.kernels.unary import hard_swish
from libnpu.compiler.ops.unary import hard_swish_int16_params
from npu_hw import ops
from tests.support.chip_memory import ChipMemory, encode, run_ok
from tests.support.quant_utils import random_int16

I16 = ops.OPF_INT16


def _float64(x: np.ndarray, si: float, so: float) -> np.ndarray:
    r = x.astype(np.float64) * si
    return np.clip(np.round(r * np.clip(r + 3, 0, 6) / 6 / so), -32768, 32767)


def _run(x: np.ndarray, si: float, so: float) -> np.ndarray:
    return hard_swish(x, **hard_swish_int16_params(si, so))


@pytest.mark.parametrize("seed", range(4))
def test_hard_swish_int16_within_the_documented_bound_of_float64(seed: int) -> None:
    rng = np.random.default_rng(4100 + seed)
    worst = 0.0
    for _ in range(50):
        reach = 10 ** rng.uniform(-0.5, 1.5)           # inputs in [-reach, reach]
        si = float(np.float32(reach / 32767))
        top = reach * min(max(reach + 3, 0), 6) / 6      # the largest output
        so = float(np.float32(max(top, 0.375) / 32767 * rng.uniform(1, 1.5)))
        x = random_int16(rng, (int(rng.integers(1, 300)),))
        err = np.abs(_run(x, si, so).astype(np.float64) - _float64(x, si, so))
        # docs/hardware.md bounds the error by 1 + 3 / (so * 2**15) steps; at the scales
        # calibration gives a tensor (its range on the int16 grid) it stays within one step.
        assert err.max() <= min(1, 1 + 3 / (so * 2 ** 15)), (si, so, err.max())
        worst = max(worst, float(err.max()))
    assert worst >= 1  # the bound is not vacuous: some cases are off by one step


def test_hard_swish_int16_exact_cases() -> None:
    # in_scale 2**-12 (3.0 is 12288), out_scale 2**-12: x >= 3 passes through, x <= -3 gives 0,
    # -1.5 gives -0.375 exactly (-1536), 0 gives 0; 32767 and -32768 saturate nothing.
    x = np.array([0, 12288, 32767, -12288, -32768, -6144, 4096], np.int16)
    got = _run(x, 2.0 ** -12, 2.0 ** -12)
    np.testing.assert_array_equal(got, [0, 12288, 32767, 0, 0, -1536, _float64(x[6:], 2.0 ** -12, 2.0 ** -12)[0]])
    assert got.dtype == np.int16


def test_hard_swish_int16_on_the_chip(mem: ChipMemory) -> None:
    rng = np.random.default_rng(41)
    x = random_int16(rng, (64,))
    params = hard_swish_int16_params(3e-4, 2e-4)
    want = hard_swish(x, **params)
    out = mem.alloc(want.nbytes)
    fields = dict(input=mem.put(x), output=out, count=64, **params)
    run_ok(mem, encode("HARD_SWISH", I16, **fields))
    np.testing.assert_array_equal(mem.get(out, np.int16, want.shape), want)
    for bad in (dict(input_zp=1), dict(output_shift=1), dict(reluish_shift=16), dict(output_multiplier=-1)):
        assert mem.run(encode("HARD_SWISH", I16, **dict(fields, **bad))).status == -errno.EINVAL
