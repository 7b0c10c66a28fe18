"""The C reruns of the operators that ran in numpy on every inference of the work half's float
models (RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR, int16 SOFTMAX, int16 MAXIMUM / MINIMUM,
REDUCE_L2, TRANSPOSE_CONV) against their numpy kernels, byte for byte: random shapes and parameters, the
extreme values, new inputs written under a bound call; and the chip's units of one job
replayed as one C call."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim import job_plans
from firmware_sim.errors import InvalidCommand
from firmware_sim.executor import run_job
from firmware_sim.kernels import binary, int16x8, native, reduce, resize, transpose_conv
from firmware_sim.kernels.native import data_calls, int16_calls
from firmware_sim.timing import HardwareProfile
from npu_hw import iommu, ops
from npu_hw.fixedpoint import add_params, softmax_int16_params
from tests.support.chip_memory import ASID, ChipMemory, encode, ranked
from tests.support.quant_utils import random_int16

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C kernels")


def _random(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    """Values over the whole range of ``dtype``, its two extremes first."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, size=shape).astype(dtype)
    x.reshape(-1)[:2] = [info.min, info.max][:x.size]
    return x


def test_resize_reruns_in_c_as_numpy_computes() -> None:
    rng = np.random.default_rng(81)
    for case in range(80):
        dtype = (np.int8, np.int16)[case % 2]
        kind = ("bilinear", "nearest")[case // 2 % 2]
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 20)))
        out_hw = (int(rng.integers(1, 19)), int(rng.integers(1, 19)))
        corners = bool(rng.integers(0, 2))
        options = dict(align_corners=corners, half_pixel_centers=not corners and bool(rng.integers(0, 2)))
        x = _random(rng, dtype, shape)
        out = np.empty((shape[0], *out_hw, shape[3]), dtype)
        rerun = resize.resize_bound(kind, x, out_hw, out=out, **options)
        assert rerun is not None
        x[...] = _random(rng, dtype, shape)
        rerun()
        kernel = resize.resize_bilinear if kind == "bilinear" else resize.resize_nearest
        np.testing.assert_array_equal(out, kernel(x, out_hw, **options), err_msg=f"{kind} {shape} {out_hw} {options}")


def test_int16_softmax_reruns_in_c_as_numpy_computes() -> None:
    rng = np.random.default_rng(82)
    for case in range(60):
        rows, depth = int(rng.integers(1, 6)), int(rng.integers(1, 80))
        beta = float(np.exp(rng.uniform(-2, 2)))
        mult, shift = softmax_int16_params(beta, float(np.exp(rng.uniform(-12, -4))))
        x = _random(rng, np.int16, (rows, depth))
        out = np.empty_like(x)
        rerun = int16x8.softmax_int16_bound(x, input_multiplier=mult, input_left_shift=shift, out=out)
        assert rerun is not None
        x[...] = _random(rng, np.int16, x.shape) if case % 3 else rng.integers(-40, 40, size=x.shape)
        rerun()
        np.testing.assert_array_equal(out, int16x8.softmax_int16(x, input_multiplier=mult, input_left_shift=shift),
                                      err_msg=f"{x.shape} beta {beta}")


def test_an_int16_softmax_whose_exps_sum_to_zero_fails_before_writing() -> None:
    """Exps that wrap int32 (a row of 70000 equal values) fail the rerun with numpy's error,
    and no row is written."""
    x = np.full((2, 70000), -32768, np.int16)
    x[:, 0] = 32767
    out = np.empty_like(x)
    rerun = int16x8.softmax_int16_bound(x, input_multiplier=1 << 30, input_left_shift=0, out=out)
    x[1] = 5
    out[...] = 7
    with pytest.raises(InvalidCommand, match="sum to zero"):
        int16x8.softmax_int16(x, input_multiplier=1 << 30, input_left_shift=0)
    with pytest.raises(InvalidCommand, match="sum to zero"):
        rerun()
    assert (out == 7).all()


@pytest.mark.parametrize("kind", ["maximum", "minimum"])
def test_int16_maximum_and_minimum_rerun_in_c_as_numpy_computes(kind: str) -> None:
    rng = np.random.default_rng(83 + len(kind))
    for case in range(60):
        shape = tuple(int(v) for v in rng.integers(1, 7, size=int(rng.integers(1, 5))))
        other = tuple(1 if rng.random() < 0.4 else d for d in shape)
        a, b = _random(rng, np.int16, shape), _random(rng, np.int16, other)
        if case % 2:
            a, b = b, a
        out = np.empty(np.broadcast_shapes(a.shape, b.shape), np.int16)
        getattr(binary, kind)(a, b, out=out)
        rerun = int16_calls.bind_binary16(kind, a, b, out, np.zeros((1, 0), np.int32), act_min=-32768,
                                          act_max=32767)
        assert rerun is not None
        a[...], b[...] = _random(rng, np.int16, a.shape), _random(rng, np.int16, b.shape)
        rerun()
        np.testing.assert_array_equal(out, getattr(binary, kind)(a, b), err_msg=f"{a.shape} {b.shape}")


def test_reduce_l2_reruns_in_c_as_numpy_computes() -> None:
    rng = np.random.default_rng(85)
    for case in range(60):
        dtype = (np.int8, np.int16)[case % 2]
        shape = tuple(int(v) for v in rng.integers(1, 6, size=int(rng.integers(1, 5))))
        axes = tuple(sorted({int(a) for a in rng.integers(0, len(shape), size=int(rng.integers(1, len(shape) + 1)))}))
        zp, output_zp = (int(rng.integers(-128, 128)), int(rng.integers(-128, 128))) if dtype == np.int8 else (0, 0)
        scale = 0.5 if case % 5 == 0 else float(np.exp(rng.uniform(-12, 2)))   # 0.5: exact halves to round
        x = _random(rng, dtype, shape)
        if case % 5 == 0:
            x[...] = rng.integers(-2, 3, size=shape) + zp
        out = np.empty(tuple(1 if i in axes else d for i, d in enumerate(shape)), dtype)
        reduce.reduce_l2(x, axes, input_zp=zp, output_zp=output_zp, scale=scale, out=out)
        info = np.iinfo(dtype)
        rerun = data_calls.bind_mean(x, axes, out, reduce="l2", input_zp=zp, output_zp=output_zp, scale=scale,
                                     act_min=int(info.min), act_max=int(info.max))
        assert rerun is not None
        x[...] = _random(rng, dtype, shape)
        rerun()
        np.testing.assert_array_equal(out, reduce.reduce_l2(x, axes, input_zp=zp, output_zp=output_zp, scale=scale),
                                      err_msg=f"{dtype} {shape} {axes} scale {scale}")


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_transpose_conv_reruns_in_c_as_numpy_computes(dtype) -> None:
    """Both of the C kernel's loop orders (input rows under 16 output channels, else rows of
    output channels), strides past the filter, padding, outputs larger and smaller than the
    scatter reaches, int32 biases that wrap; int16 (int64 biases) with the deep input rows
    (512 channels and more: int64 row sums) too."""
    rng = np.random.default_rng(87 if dtype == np.int8 else 88)
    wide = dtype == np.int16
    for case in range(40):
        n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 7)), int(rng.integers(1, 7))
        cin = 600 if wide and case % 10 == 3 else int(rng.integers(1, 20))
        cout, kh, kw = int(rng.choice([1, 5, 16, 24, 37])), int(rng.integers(1, 5)), int(rng.integers(1, 5))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pt, pl = int(rng.integers(0, kh)), int(rng.integers(0, kw))
        out_hw = (max(1, (h - 1) * sh + kh - 2 * pt + int(rng.integers(-1, 2))),
                  max(1, (w - 1) * sw + kw - 2 * pl + int(rng.integers(-1, 2))))
        x, wt = _random(rng, dtype, (n, h, w, cin)), _random(rng, np.int8, (cout, kh, kw, cin))
        bias = None if case % 4 == 0 else (rng.integers(-(1 << 40), 1 << 40, size=cout) if wide else
                                           rng.integers(-(1 << 31), 1 << 31, size=cout).astype(np.int32))
        size = cout if case % 2 else 1
        zps = (0, 0) if wide else (int(rng.integers(-128, 128)), int(rng.integers(-128, 128)))
        top = np.iinfo(dtype).max
        params = dict(stride=(sh, sw), padding=(pt, pl), out_hw=out_hw, input_zp=zps[0], output_zp=zps[1],
                      multiplier=rng.integers(1 << 29, 1 << 31, size=size).astype(np.int32),
                      shift=rng.integers(-30 if wide else -20, 2, size=size).astype(np.int32),
                      act_min=-top - 1, act_max=int(rng.choice([top, 50])))
        out = np.empty((n, *out_hw, cout), dtype)
        rerun = transpose_conv.transpose_conv2d_bound(x, wt, bias, out=out, **params)
        assert rerun is not None
        x[...], wt[...] = _random(rng, dtype, x.shape), _random(rng, np.int8, wt.shape)
        rerun()
        np.testing.assert_array_equal(out, transpose_conv.transpose_conv2d(x, wt, bias, **params),
                                      err_msg=f"{x.shape} {wt.shape} {params['stride']} {params['padding']}")


def test_the_units_replay_as_one_c_call(mem: ChipMemory) -> None:
    """int16 RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, SOFTMAX, MAXIMUM, REDUCE_L2 and SUB (a
    LayerNorm's ``x - mean`` once escalation promotes it: 2 of oww-hey-marvin's 24 tasks were
    most of its chip time, in numpy) in one job: after its first runs the plan is one C call,
    which computes the numpy kernels' bytes on the input's new contents."""
    rng = np.random.default_rng(86)
    x = random_int16(rng, (1, 5, 4, 6))
    i16 = ops.OPF_INT16
    mult, shift = softmax_int16_params(1.0, 3e-4)
    x_at = mem.put(x)
    outs = [mem.alloc(2 * n) for n in (9 * 7 * 6, 3 * 8 * 6, x.size, x.size, 5 * 4, x.size)]
    mean = random_int16(rng, (1, 5, 4, 1))
    sub_p = add_params(3e-4, 2e-4, 5e-4, left_shift=int16x8.ADD_LEFT_SHIFT_INT16)
    command = (encode("RESIZE_BILINEAR", i16 | ops.OPF_HALF_PIXEL_CENTERS, input=x_at, output=outs[0],
                      in_shape=x.shape, out_hw=(9, 7))
               + encode("RESIZE_NEAREST_NEIGHBOR", i16, input=x_at, output=outs[1], in_shape=x.shape, out_hw=(3, 8))
               + encode("SOFTMAX", i16, input=x_at, output=outs[2], rows=20, depth=6, input_beta_multiplier=mult,
                        input_beta_left_shift=shift)
               + encode("MAXIMUM", i16, input1=x_at, input2=mem.put(np.array([-7], np.int16)), output=outs[3],
                        rank=4, in1_shape=ranked(x.shape), in2_shape=ranked((1, 1, 1, 1)),
                        out_shape=ranked(x.shape), input1_zp=0, input2_zp=0, output_zp=0)
               + encode("REDUCE_L2", i16, input=x_at, output=outs[4], rank=4, in_shape=ranked(x.shape), axes_mask=8,
                        input_zp=0, output_zp=0, scale=0.01)
               + encode("SUB", i16, input1=x_at, input2=mem.put(mean), output=outs[5], rank=4,
                        in1_shape=ranked(x.shape), in2_shape=ranked(mean.shape), out_shape=ranked(x.shape),
                        input1_zp=0, input2_zp=0, output_zp=0, **sub_p, act_min=-32768, act_max=32767))
    at = mem.put(np.frombuffer(command, np.uint8))
    for _ in range(job_plans.NATIVE_TRIES + 1):
        assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    plan = job_plans.lookup(mem.dma, ASID, at, np.frombuffer(command, np.uint8))
    assert plan is not None and plan.native is not None, "every task is a C kernel call"
    x = random_int16(rng, x.shape)
    mem.bytes[x_at - iommu.IOVA_BASE:x_at - iommu.IOVA_BASE + x.nbytes] = x.reshape(-1).view(np.uint8)
    assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    wants = (resize.resize_bilinear(x, (9, 7), half_pixel_centers=True), resize.resize_nearest(x, (3, 8)),
             int16x8.softmax_int16(x.reshape(20, 6), input_multiplier=mult, input_left_shift=shift),
             binary.maximum(x, np.array([[[[-7]]]], np.int16)),
             reduce.reduce_l2(x, (3,), input_zp=0, output_zp=0, scale=0.01),
             int16x8.sub_int16(x, mean, **sub_p))
    for out, want in zip(outs, wants):
        np.testing.assert_array_equal(mem.get(out, np.int16, want.shape), want)
