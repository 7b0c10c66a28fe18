"""int16 PRELU (``OPF_INT16``; LiteRT has none, the formula is docs/hardware.md's): the
kernel within 1 LSB of a float64 reference, exact integer cases, and the chip's unit
giving what the kernel gives; bad int16 descriptors fail with EINVAL."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim.kernels.binary import prelu
from libnpu.compiler.ops.binary import prelu_params
from npu_hw import ops
from tests.support.chip_memory import ChipMemory, encode, ranked, run_ok
from tests.support.quant_utils import random_int16

I16 = ops.OPF_INT16
ZPS = dict(input1_zp=0, input2_zp=0, output_zp=0)


@pytest.mark.parametrize("seed", range(4))
def test_prelu_int16_within_one_lsb_of_float64(seed: int) -> None:
    rng = np.random.default_rng(3100 + seed)
    for _ in range(50):
        channels = int(rng.integers(1, 9))
        x = random_int16(rng, (2, int(rng.integers(1, 6)), channels))
        alpha = random_int16(rng, (channels,))
        si, sa = (float(np.float32(10 ** rng.uniform(-5, -3))) for _ in range(2))
        so = float(np.float32(si * 10 ** rng.uniform(-0.5, 0.5)))
        got = prelu(x, alpha, **ZPS, **prelu_params(si, sa, so))
        xr = x.astype(np.float64) * si
        real = np.where(xr >= 0, xr, xr * alpha.astype(np.float64) * sa)
        want = np.clip(np.round(real / so), -32768, 32767)
        assert got.dtype == np.int16 and got.shape == x.shape
        assert np.abs(got.astype(np.float64) - want).max() <= 1, (si, sa, so)


def test_prelu_int16_exact_cases() -> None:
    # in/out = 1, in * alpha / out = 2**-4: the positive side copies, the negative side
    # divides x * alpha by 16 rounding half away from zero; int16 bounds saturate.
    x = np.array([0, 1, 32767, -100, -24, -8, -32768, -32768], np.int16)
    alpha = np.array([5, 5, 5, 8, 1, 1, -32768, 32767], np.int16)
    got = prelu(x, alpha, **ZPS, **prelu_params(2.0 ** -10, 2.0 ** -4, 2.0 ** -10))
    np.testing.assert_array_equal(got, [0, 1, 32767, -50, -2, -1, 32767, -32768])


def test_prelu_int16_refuses_zero_points_and_mixed_types() -> None:
    x = np.zeros(4, np.int16)
    params = prelu_params(1e-3, 1e-2, 1e-3)
    with pytest.raises(Exception, match="must be 0"):
        prelu(x, x, **dict(ZPS, input2_zp=3), **params)
    with pytest.raises(TypeError):
        prelu(x, x.astype(np.int8), **ZPS, **params)


def test_prelu_int16_on_the_chip(mem: ChipMemory) -> None:
    rng = np.random.default_rng(31)
    x, alpha = random_int16(rng, (2, 3, 4)), random_int16(rng, (1, 1, 4))
    params = prelu_params(2e-4, 3e-3, 1e-4)
    want = prelu(x, alpha, **ZPS, **params)
    out = mem.alloc(want.nbytes)
    fields = dict(input1=mem.put(x), input2=mem.put(alpha), output=out, rank=3, in1_shape=ranked(x.shape),
                  in2_shape=ranked(alpha.shape), out_shape=ranked(x.shape), **ZPS, **params)
    run_ok(mem, encode("PRELU", I16, **fields))
    np.testing.assert_array_equal(mem.get(out, np.int16, want.shape), want)
    assert mem.run(encode("PRELU", I16, **dict(fields, output_zp=1))).status == -errno.EINVAL
