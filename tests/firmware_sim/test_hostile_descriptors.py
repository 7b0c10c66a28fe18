"""Hostile descriptors of the newer opcodes (0x30..0x3B, 0x50..0x58): a job fails with
EINVAL or EFAULT, never EIO, and no descriptor makes the chip allocate far more than its
operands (docs/security.md, "Descriptors"). The acceptance run is
``benchmarks.fuzz_descriptors``; here a short representative run of it."""
from __future__ import annotations

import errno
import tracemalloc

import numpy as np
import pytest

from benchmarks import fuzz_descriptors
from firmware_sim.kernels.fixedpoint import multiply_by_quantized_multiplier, wrap_int32
from firmware_sim.kernels.transpose_conv import transpose_conv2d
from npu_hw import ops
from tests.support.chip_memory import ChipMemory, encode

MIB = 1 << 20


@pytest.fixture
def mem(tmp_path) -> ChipMemory:
    return ChipMemory(tmp_path, size=4 << 20)


def _peak_of(run) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _transpose_conv(mem: ChipMemory, x: np.ndarray, w: np.ndarray, stride, padding, out_hw) -> bytes:
    n, _, _, cin = x.shape
    cout, kh, kw, _ = w.shape
    output = mem.alloc(n * out_hw[0] * out_hw[1] * cout)
    return encode("TRANSPOSE_CONV", input=mem.put(x), weights=mem.put(w), output=output,
                  in_shape=x.shape, out_shape=(n, *out_hw, cout), filter_hw=(kh, kw), stride=stride,
                  dilation=(1, 1), padding=padding, cin_per_group=cin, multiplier=1 << 30, act_min=-128,
                  act_max=127)


def test_transpose_conv_working_memory_follows_the_output_not_input_times_filter(mem) -> None:
    # 4 KiB of input and 4 KiB of weights, a 16-byte output: the kernel used to form every
    # tap of every input pixel (64 * 64 * 16 * 16 * 16 float64 = 128 MiB) before cropping.
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 64, 64, 1), dtype=np.int8)
    w = rng.integers(-127, 128, (16, 16, 16, 1), dtype=np.int8)
    desc = _transpose_conv(mem, x, w, (1, 1), (0, 0), (1, 1))
    result, peak = _peak_of(lambda: mem.run(desc))
    assert result.status == 0
    assert peak < 8 * MIB, f"{peak / MIB:.0f} MiB of working memory for a 16-byte output"


def test_transpose_conv_huge_stride_or_padding_allocates_nothing_huge(mem) -> None:
    # A stride or padding near 2^32 made the kernel size its accumulator (n, stride * h, ...)
    # in float64: hundreds of GiB asked for (EINVAL when the host refused, gigabytes of
    # address space when it did not). Only the output's rows can receive anything.
    rng = np.random.default_rng(6)
    x = rng.integers(-128, 128, (1, 3, 3, 2), dtype=np.int8)
    w = rng.integers(-127, 128, (3, 2, 2, 2), dtype=np.int8)
    for stride, padding in [((1 << 31, 1), (0, 0)), ((1, (1 << 32) - 1), (0, 0)), ((2, 2), ((1 << 32) - 1, 0))]:
        desc = _transpose_conv(mem, x, w, stride, padding, (6, 6))
        result, peak = _peak_of(lambda: mem.run(desc))
        assert result.status == 0, (stride, padding, result)
        assert peak < 4 * MIB, (stride, padding, peak)


def test_int16_transpose_conv_refuses_zero_points_and_int16_weights(mem) -> None:
    x = mem.put(np.arange(2 * 2 * 3, dtype=np.int16).reshape(1, 2, 2, 3))
    w = mem.put(np.ones((2, 2, 2, 3), np.int8))
    fields = dict(input=x, weights=w, output=mem.alloc(4 * 4 * 2 * 2), in_shape=(1, 2, 2, 3),
                  out_shape=(1, 4, 4, 2), filter_hw=(2, 2), stride=(2, 2), dilation=(1, 1), padding=(0, 0),
                  cin_per_group=3, multiplier=1 << 30, act_min=-32768, act_max=32767)
    assert mem.run(encode("TRANSPOSE_CONV", ops.OPF_INT16, **fields)).status == 0
    assert mem.run(encode("TRANSPOSE_CONV", ops.OPF_INT16, **fields, input_zp=3)).status == -errno.EINVAL
    assert mem.run(encode("TRANSPOSE_CONV", ops.OPF_INT16, **fields, output_zp=-1)).status == -errno.EINVAL
    assert mem.run(encode("TRANSPOSE_CONV", ops.OPF_INT16 | ops.OPF_WEIGHTS16, **fields)).status == -errno.EINVAL


def test_transpose_conv_crop_matches_the_full_scatter() -> None:
    # The cropped computation against a direct scatter of every tap (small sizes), with
    # output windows that start before, inside and beyond the full result.
    rng = np.random.default_rng(7)
    for _ in range(60):
        n, h, wd, cin, cout = 1, *(int(v) for v in rng.integers(1, 5, 2)), *(int(v) for v in rng.integers(1, 4, 2))
        kh, kw, sh, sw = (int(v) for v in rng.integers(1, 4, 4))
        pt, pl = (int(v) for v in rng.integers(0, 4, 2))
        oh, ow = (int(v) for v in rng.integers(1, 12, 2))
        x = rng.integers(-128, 128, (n, h, wd, cin), dtype=np.int8)
        w = rng.integers(-127, 128, (cout, kh, kw, cin), dtype=np.int8)
        bias = rng.integers(-5000, 5000, cout).astype(np.int32)
        zp = int(rng.integers(-10, 10))
        full = np.zeros((n, (h - 1) * sh + kh + pt + oh, (wd - 1) * sw + kw + pl + ow, cout), np.int64)
        for y in range(h):
            for xx in range(wd):
                for ky in range(kh):
                    for kx in range(kw):
                        full[:, y * sh + ky, xx * sw + kx] += (x[:, y, xx].astype(np.int64) - zp) @ \
                            w[:, ky, kx].astype(np.int64).T
        acc = wrap_int32(full[:, pt:pt + oh, pl:pl + ow] + bias)
        expected = np.clip(multiply_by_quantized_multiplier(acc, 1 << 30, 0), -128, 127).astype(np.int8)
        got = transpose_conv2d(x, w, bias, stride=(sh, sw), padding=(pt, pl), out_hw=(oh, ow), input_zp=zp,
                               output_zp=0, multiplier=np.int32([1 << 30]), shift=np.int32([0]))
        assert np.array_equal(got, expected)


def test_a_short_descriptor_fuzz_run_holds_every_check() -> None:
    summary = fuzz_descriptors.run(jobs=220, seed=3, work_limit_mib=64)     # 10 per opcode
    assert summary["failures"] == []
    assert set(summary["statuses"]) == {fuzz_descriptors.tasks.TASK_TYPES[op].name
                                        for op in fuzz_descriptors.OPCODES}
    assert all(counts.get("OK", 0) + counts.get("EINVAL", 0) + counts.get("EFAULT", 0) == 10
               for counts in summary["statuses"].values())
