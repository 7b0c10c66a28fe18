"""int16 ADD and PRELU with one requantization per output channel (``ADD16_PER_CHANNEL``,
``PRELU16_PER_CHANNEL``; LiteRT has neither, the formula is docs/hardware.md's): channel c
is the per-tensor int16 kernel with channel c's parameters, byte for byte; with every
channel's parameters equal it is the per-tensor kernel; within 1 LSB of float64; the chip's
units give what the kernels give, and bad descriptors fail with the usual task fault."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim.kernels.binary import prelu, prelu_int16_per_channel
from firmware_sim.kernels.int16x8 import ADD_LEFT_SHIFT_INT16, add_int16, add_int16_per_channel
from libnpu.compiler.ops.binary import prelu_params
from npu_hw import iommu, ops
from npu_hw.fixedpoint import add_params
from tests.support.chip_memory import ChipMemory, encode, ranked, run_ok
from tests.support.quant_utils import random_int16

ZPS = dict(input1_zp=0, input2_zp=0, output_zp=0)
CASES = 200


def _scale(rng: np.random.Generator, low: float = -5, high: float = -3) -> float:
    return float(np.float32(10 ** rng.uniform(low, high)))


def _add_rows(s1: list[float], s2: list[float], so: list[float]) -> np.ndarray:
    rows = [add_params(a, b, o, ADD_LEFT_SHIFT_INT16) for a, b, o in zip(s1, s2, so, strict=True)]
    return np.array([[r[k] for k in ops.ADD16_CHANNEL_PARAMS] for r in rows], np.int32)


def _prelu_rows(si: list[float], sa: float, so: list[float]) -> np.ndarray:
    rows = [prelu_params(a, sa, o) for a, o in zip(si, so, strict=True)]
    return np.array([[r[k] for k in ops.PRELU16_CHANNEL_PARAMS] for r in rows], np.int32)


def _operands(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Two int16 operands broadcasting to ``[..., channels]`` (the second sometimes [channels]
    or [..., 1]), and the channel count."""
    channels = int(rng.integers(1, 9))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 5)), channels)
    other = [shape, (channels,), shape[:-1] + (1,)][int(rng.integers(0, 3))]
    return random_int16(rng, shape), random_int16(rng, other), channels


def test_add_per_channel_is_each_channels_add() -> None:
    rng = np.random.default_rng(6000)
    for _ in range(CASES):
        a, b, c = _operands(rng)
        s1, s2 = [_scale(rng) for _ in range(c)], [_scale(rng) for _ in range(c)]
        so = [float(np.float32(max(x, y) * 10 ** rng.uniform(0, 0.7))) for x, y in zip(s1, s2)]
        lo, hi = sorted(int(v) for v in rng.integers(-32768, 32768, 2))
        got = add_int16_per_channel(a, b, left_shift=ADD_LEFT_SHIFT_INT16, params=_add_rows(s1, s2, so),
                                    act_min=lo, act_max=hi)
        shape = np.broadcast_shapes(a.shape, b.shape)
        aa, bb = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
        for k in range(c):
            want = add_int16(np.ascontiguousarray(aa[..., k]), np.ascontiguousarray(bb[..., k]),
                             **add_params(s1[k], s2[k], so[k], ADD_LEFT_SHIFT_INT16), act_min=lo, act_max=hi)
            np.testing.assert_array_equal(got[..., k], want)
        real = aa.astype(np.float64) * s1 + bb.astype(np.float64) * s2
        exact = np.clip(np.round(real / np.array(so)), lo, hi)
        assert np.abs(got.astype(np.float64) - exact).max() <= 1


def test_add_per_channel_with_equal_rows_is_the_per_tensor_add() -> None:
    rng = np.random.default_rng(6001)
    for _ in range(CASES):
        a, b, c = _operands(rng)
        s1, s2 = _scale(rng), _scale(rng)
        so = float(np.float32(max(s1, s2) * 10 ** rng.uniform(0, 0.7)))
        per_tensor = add_int16(a, b, **add_params(s1, s2, so, ADD_LEFT_SHIFT_INT16))
        rows = _add_rows([s1] * c, [s2] * c, [so] * c)
        got = add_int16_per_channel(a, b, left_shift=ADD_LEFT_SHIFT_INT16, params=rows)
        assert got.tobytes() == per_tensor.tobytes()


def test_prelu_per_channel_is_each_channels_prelu() -> None:
    rng = np.random.default_rng(6002)
    for _ in range(CASES):
        x, alpha, c = _operands(rng)
        si, sa = [_scale(rng) for _ in range(c)], _scale(rng, -5, -2)
        so = [float(np.float32(s * 10 ** rng.uniform(-0.5, 0.5))) for s in si]
        got = prelu_int16_per_channel(x, alpha, params=_prelu_rows(si, sa, so))
        shape = np.broadcast_shapes(x.shape, alpha.shape)
        xx, aa = np.broadcast_to(x, shape), np.broadcast_to(alpha, shape)
        for k in range(c):
            want = prelu(np.ascontiguousarray(xx[..., k]), np.ascontiguousarray(aa[..., k]), **ZPS,
                         **prelu_params(si[k], sa, so[k]))
            np.testing.assert_array_equal(got[..., k], want)
        xr = xx.astype(np.float64) * si
        real = np.where(xr >= 0, xr, xr * aa.astype(np.float64) * sa)
        assert np.abs(got.astype(np.float64) - np.clip(np.round(real / np.array(so)), -32768, 32767)).max() <= 1


def test_prelu_per_channel_with_equal_rows_is_the_per_tensor_prelu() -> None:
    rng = np.random.default_rng(6003)
    for _ in range(CASES):
        x, alpha, c = _operands(rng)
        si, sa = _scale(rng), _scale(rng, -5, -2)
        so = float(np.float32(si * 10 ** rng.uniform(-0.5, 0.5)))
        per_tensor = prelu(x, alpha, **ZPS, **prelu_params(si, sa, so))
        got = prelu_int16_per_channel(x, alpha, params=_prelu_rows([si] * c, sa, [so] * c))
        assert got.tobytes() == per_tensor.tobytes()


def test_per_channel_kernels_refuse_bad_parameter_arrays() -> None:
    x = np.zeros((2, 3), np.int16)
    rows = _add_rows([1e-3] * 3, [1e-3] * 3, [2e-3] * 3)
    with pytest.raises(Exception, match="per-channel parameters"):
        add_int16_per_channel(x, x, left_shift=15, params=rows[:2])
    with pytest.raises(Exception, match="per-channel parameters"):
        add_int16_per_channel(x, x, left_shift=15, params=rows.astype(np.int64))
    bad = rows.copy()
    bad[1, 1] = 3     # a left shift on input1 of channel 1
    with pytest.raises(Exception, match="shifts must be <= 0"):
        add_int16_per_channel(x, x, left_shift=15, params=bad)
    prelu_rows = _prelu_rows([1e-3] * 3, 1e-2, [1e-3] * 3)
    with pytest.raises(Exception, match="per-channel parameters"):
        prelu_int16_per_channel(x, x, params=prelu_rows[:1])
    with pytest.raises(Exception, match="must be 0"):
        prelu_int16_per_channel(x, x, params=prelu_rows, output_zp=2)


def _add_fields(mem: ChipMemory, a: np.ndarray, b: np.ndarray, out: int) -> dict:
    return dict(input1=mem.put(a), input2=mem.put(b), output=out, rank=a.ndim, in1_shape=ranked(a.shape),
                in2_shape=ranked((1,) * (a.ndim - b.ndim) + b.shape), out_shape=ranked(a.shape), **ZPS)


def test_add_and_prelu_per_channel_on_the_chip(mem: ChipMemory) -> None:
    rng = np.random.default_rng(62)
    a, b = random_int16(rng, (2, 3, 5)), random_int16(rng, (5,))
    s1, s2 = [_scale(rng) for _ in range(5)], [_scale(rng) for _ in range(5)]
    so = [2.5 * max(x, y) for x, y in zip(s1, s2)]
    add_rows = _add_rows(s1, s2, so)
    prelu_rows = _prelu_rows(s1, 3e-3, so)
    want_add = add_int16_per_channel(a, b, left_shift=15, params=add_rows, act_min=-1000, act_max=30000)
    want_prelu = prelu_int16_per_channel(a, b, params=prelu_rows)
    out_add, out_prelu = mem.alloc(want_add.nbytes), mem.alloc(want_prelu.nbytes)
    add = dict(_add_fields(mem, a, b, out_add), params=mem.put(add_rows), channels=5, left_shift=15,
               act_min=-1000, act_max=30000)
    pre = dict(_add_fields(mem, a, b, out_prelu), params=mem.put(prelu_rows), channels=5)
    run_ok(mem, encode("ADD16_PER_CHANNEL", ops.OPF_INT16, **add), encode("PRELU16_PER_CHANNEL", ops.OPF_INT16, **pre))
    np.testing.assert_array_equal(mem.get(out_add, np.int16, a.shape), want_add)
    np.testing.assert_array_equal(mem.get(out_prelu, np.int16, a.shape), want_prelu)

    end = iommu.IOVA_BASE + mem.size   # the context's memory ends here
    for name, fields in (("ADD16_PER_CHANNEL", add), ("PRELU16_PER_CHANNEL", pre)):
        for change, status in ((dict(channels=4), -errno.EINVAL),        # not the output's channel count
                               (dict(output_zp=1), -errno.EINVAL),       # int16 grids are symmetric
                               (dict(params=end - 16), -errno.EFAULT),   # the array runs past the memory
                               (dict(params=0), -errno.EFAULT)):         # no array at all
            result = mem.run(encode(name, ops.OPF_INT16, **dict(fields, **change)))
            assert result.status == status, (name, change, result)
    assert mem.run(encode("ADD16_PER_CHANNEL", ops.OPF_INT16, **dict(add, left_shift=17))).status == -errno.EINVAL
