"""The chip's int16 mode (``OPF_INT16``): descriptors in DMA memory, run by the real job
executor, give exactly what the int16x8 kernels give (those are checked against LiteRT
in test_int16x8.py); bad int16 descriptors fail the job with EINVAL."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim.executor import run_job
from firmware_sim.kernels import int16x8, layout, pooling, resize
from firmware_sim.timing import HardwareProfile
from npu_hw import iommu, ops, sigmoid16, tasks
from npu_hw.fixedpoint import (
    ADD_LEFT_SHIFT_INT16,
    LUT_LOGISTIC,
    LUT_TANH,
    add_params,
    mul_multiplier,
    quantize_multiplier_array,
    rescale_multiplier,
)
from tests.support.chip_memory import ASID, ChipMemory, encode, ranked, run_ok
from tests.support.quant_utils import random_int8, random_int16

I16 = ops.OPF_INT16



@pytest.mark.parametrize("depthwise", [False, True])
def test_conv_int16(mem: ChipMemory, depthwise: bool) -> None:
    rng = np.random.default_rng(1)
    x = random_int16(rng, (1, 9, 7, 4))
    cout = 8
    w = random_int8(rng, (1, 3, 3, cout) if depthwise else (cout, 3, 3, 2))
    bias = rng.integers(-10 ** 8, 10 ** 8, cout).astype(np.int64)
    mult, shift = quantize_multiplier_array(rng.uniform(1e-5, 1e-4, cout))
    kw = dict(stride=(2, 1), dilation=(1, 2), padding=(1, 2), out_hw=(5, 7), multiplier=mult,
              shift=shift, act_min=-30000, act_max=32000)
    fn = int16x8.depthwise_conv2d_16x8 if depthwise else int16x8.conv2d_16x8
    expected = fn(x, w, bias, **kw)
    out = mem.alloc(expected.nbytes)
    fields = dict(input=mem.put(x), weights=mem.put(w), bias=mem.put(bias), output=out,
                  mult_iova=mem.put(mult), shift_iova=mem.put(shift), in_shape=x.shape,
                  out_shape=expected.shape, filter_hw=(3, 3), stride=(2, 1), dilation=(1, 2),
                  padding=(1, 2), cin_per_group=1 if depthwise else 2, act_min=-30000,
                  act_max=32000)
    name = "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"
    run_ok(mem, encode(name, ops.OPF_PER_CHANNEL | I16, **fields))
    np.testing.assert_array_equal(mem.get(out, np.int16, expected.shape), expected)
    bad = encode(name, ops.OPF_PER_CHANNEL | I16, **fields, input_zp=3)
    assert mem.run(bad).status == -errno.EINVAL


@pytest.mark.parametrize("per_channel", [False, True])
def test_fully_connected_int16(mem: ChipMemory, per_channel: bool) -> None:
    rng = np.random.default_rng(2)
    rows, k, n = 3, 40, 12
    x, w = random_int16(rng, (rows, k)), random_int8(rng, (n, k))
    bias = rng.integers(-10 ** 8, 10 ** 8, n).astype(np.int64)
    scale = rng.uniform(1e-5, 1e-4, n if per_channel else 1)
    expected = int16x8.fully_connected_16x8(x, w, bias, scale=scale, act_min=-32000, act_max=30000)
    out = mem.alloc(expected.nbytes)
    quant = (dict(scale_iova=mem.put(scale), mult_iova=mem.put(np.zeros(n, np.int32)),
                  shift_iova=mem.put(np.zeros(n, np.int32)))
             if per_channel else dict(scale=float(scale[0])))
    flags = tasks.FC_DOUBLE_SCALE | I16 | (tasks.FC_PER_CHANNEL if per_channel else 0)
    fields = dict(input=mem.put(x), weights=mem.put(w), bias=mem.put(bias), output=out, rows=rows,
                  in_features=k, out_features=n, act_min=-32000, act_max=30000, **quant)
    run_ok(mem, encode("FULLY_CONNECTED", flags, **fields))
    np.testing.assert_array_equal(mem.get(out, np.int16, expected.shape), expected)
    no_double = encode("FULLY_CONNECTED", flags & ~tasks.FC_DOUBLE_SCALE, **fields)
    assert mem.run(no_double).status == -errno.EINVAL


def test_add_mul_int16(mem: ChipMemory) -> None:
    rng = np.random.default_rng(3)
    a, b = random_int16(rng, (2, 5, 6)), random_int16(rng, (5, 1))
    shape = (2, 5, 6)
    add_p = add_params(0.001, 0.002, 0.003, left_shift=ADD_LEFT_SHIFT_INT16)
    mult, shift = mul_multiplier(0.001, 0.002, 0.05)
    want_add = int16x8.add_int16(a, b, **add_p)
    want_mul = int16x8.mul_int16(a, b, multiplier=mult, shift=shift)
    a_at, b_at = mem.put(a), mem.put(b)
    shapes = dict(rank=3, in1_shape=ranked(a.shape), in2_shape=ranked((1,) + b.shape),
                  out_shape=ranked(shape))
    out_add, out_mul = mem.alloc(want_add.nbytes), mem.alloc(want_mul.nbytes)
    run_ok(mem, encode("ADD", I16, input1=a_at, input2=b_at, output=out_add, **shapes, **add_p,
                       act_min=-32768, act_max=32767),
           encode("MUL", I16, input1=a_at, input2=b_at, output=out_mul, **shapes, multiplier=mult,
                  shift=shift, act_min=-32768, act_max=32767))
    np.testing.assert_array_equal(mem.get(out_add, np.int16, shape), want_add)
    np.testing.assert_array_equal(mem.get(out_mul, np.int16, shape), want_mul)
    bad = encode("MUL", I16, input1=a_at, input2=b_at, output=out_mul, **shapes, input2_zp=1,
                 multiplier=mult, shift=shift, act_min=-32768, act_max=32767)
    assert mem.run(bad).status == -errno.EINVAL


def test_pool_resize_int16(mem: ChipMemory) -> None:
    rng = np.random.default_rng(4)
    x = random_int16(rng, (1, 7, 6, 3))
    x_at = mem.put(x)
    geo = dict(filter_hw=(3, 2), stride=(2, 2), padding=(1, 0), out_hw=(4, 3))
    want_max = pooling.max_pool2d(x, **geo, act_min=-32768, act_max=32767)
    want_avg = pooling.avg_pool2d(x, **geo, act_min=-1000, act_max=32767)
    want_bil = resize.resize_bilinear(x, (11, 5), half_pixel_centers=True)
    outs = [mem.alloc(a.nbytes) for a in (want_max, want_avg, want_bil)]
    pool = dict(input=x_at, in_shape=x.shape, out_shape=want_max.shape, filter_hw=(3, 2),
                stride=(2, 2), padding=(1, 0), act_max=32767)
    run_ok(mem, encode("MAX_POOL_2D", I16, output=outs[0], act_min=-32768, **pool),
           encode("AVERAGE_POOL_2D", I16, output=outs[1], act_min=-1000, **pool),
           encode("RESIZE_BILINEAR", I16 | ops.OPF_HALF_PIXEL_CENTERS, input=x_at,
                  output=outs[2], in_shape=x.shape, out_hw=(11, 5)))
    for at, want in zip(outs, (want_max, want_avg, want_bil)):
        np.testing.assert_array_equal(mem.get(at, np.int16, want.shape), want)


def test_data_movement_int16(mem: ChipMemory) -> None:
    rng = np.random.default_rng(5)
    x = random_int16(rng, (2, 3, 4))
    x_at = mem.put(x)
    want_t = layout.transpose(x, (2, 0, 1))
    want_p = layout.pad(x, [(0, 1), (2, 0), (1, 1)], -20000)
    want_s = layout.strided_slice(x, [0, 2, 3], [2, 0, 0], [1, -1, -2])
    # Concat reads each input from its start: the second (2, 1, 4) input is x's first 8.
    want_c = np.concatenate([x, x.reshape(-1)[:8].reshape(2, 1, 4)], axis=1)
    outs = [mem.alloc(a.nbytes) for a in (want_t, want_p, want_s, want_c, x)]
    r = ranked
    run_ok(mem,
           encode("TRANSPOSE", I16, input=x_at, output=outs[0], rank=3, in_shape=r(x.shape),
                  perm=r((2, 0, 1))),
           encode("PAD", I16, input=x_at, output=outs[1], rank=3, in_shape=r(x.shape),
                  pad_before=r((0, 2, 1)), pad_after=r((1, 0, 1)), pad_value=-20000),
           encode("STRIDED_SLICE", I16, input=x_at, output=outs[2], rank=3, in_shape=r(x.shape),
                  begin=r((0, 2, 3)), end=r((2, 0, 0)), strides=r((1, -1, -2))),
           # CONCATENATION and RESHAPE count bytes: an int16 element is two.
           encode("CONCATENATION", inputs_iova=mem.put(np.array([x_at, x_at], np.uint64)),
                  sizes_iova=mem.put(np.array([3, 1], np.uint32)), output=outs[3], num_inputs=2,
                  outer=2, inner=4 * 2, axis_total=4),
           encode("RESHAPE", input=x_at, output=outs[4], count=x.nbytes))
    for at, want in zip(outs, (want_t, want_p, want_s, want_c, x)):
        np.testing.assert_array_equal(mem.get(at, np.int16, want.shape), want)
    assert mem.run(encode("PAD", I16, input=x_at, output=outs[1], rank=3, in_shape=r(x.shape),
                          pad_before=r((0, 2, 1)), pad_after=r((1, 0, 1)),
                          pad_value=40000)).status == -errno.EINVAL


def test_mean_int16(mem: ChipMemory) -> None:
    from firmware_sim.kernels.pooling import mean
    rng = np.random.default_rng(8)
    x = random_int16(rng, (2, 5, 4, 3))
    mult, shift = rescale_multiplier(0.001, 0.0007)
    want = mean(x, (1, 2), input_zp=0, output_zp=0, multiplier=mult, shift=shift)
    out = mem.alloc(want.nbytes)
    fields = dict(input=mem.put(x), output=out, rank=4, in_shape=ranked(x.shape), axes_mask=0b110,
                  multiplier=mult, shift=shift)
    run_ok(mem, encode("MEAN", I16, **fields))
    np.testing.assert_array_equal(mem.get(out, np.int16, want.shape), want)
    assert mem.run(encode("MEAN", I16, **fields, output_zp=2)).status == -errno.EINVAL


def test_relu_int16(mem: ChipMemory) -> None:
    from firmware_sim.kernels.activations import relu_family
    from npu_hw.fixedpoint import relu_multiplier
    rng = np.random.default_rng(9)
    x = random_int16(rng, (50,))
    mult, shift = relu_multiplier(0.001, 0.002)
    want = relu_family(x, input_zp=0, output_zp=0, multiplier=mult, shift=shift, act_min=0, act_max=3000)
    out = mem.alloc(want.nbytes)
    fields = dict(input=mem.put(x), output=out, count=50, multiplier=mult, shift=shift, act_min=0, act_max=3000)
    run_ok(mem, encode("RELU", I16, **fields))
    np.testing.assert_array_equal(mem.get(out, np.int16, want.shape), want)
    assert mem.run(encode("RELU", I16, **fields, input_zp=1)).status == -errno.EINVAL


def test_softmax_int16(mem: ChipMemory) -> None:
    from npu_hw.fixedpoint import softmax_int16_params
    rng = np.random.default_rng(7)
    x = random_int16(rng, (3, 17))
    mult, shift = softmax_int16_params(1.0, 0.0005)
    want = int16x8.softmax_int16(x, input_multiplier=mult, input_left_shift=shift)
    out = mem.alloc(want.nbytes)
    run_ok(mem, encode("SOFTMAX", I16, input=mem.put(x), output=out, rows=3, depth=17,
                       input_beta_multiplier=mult, input_beta_left_shift=shift))
    np.testing.assert_array_equal(mem.get(out, np.int16, want.shape), want)


def test_conversions_int16(mem: ChipMemory) -> None:
    rng = np.random.default_rng(6)
    f = (rng.standard_normal(64) * 3).astype(np.float32)
    x8, x16 = random_int8(rng, (64,)), random_int16(rng, (64,))
    m_up, s_up = rescale_multiplier(0.05, 0.05 * 127 / 32767)
    m_down, s_down = rescale_multiplier(0.001, 0.001 * 32767 / 127)
    m_same, s_same = rescale_multiplier(0.001, 0.0013)
    want = [int16x8.quantize_int16(f, scale=0.0004),
            int16x8.requantize(x8, np.int16, input_zp=-7, output_zp=0, multiplier=m_up, shift=s_up),
            int16x8.requantize(x16, np.int8, input_zp=0, output_zp=3, multiplier=m_down,
                               shift=s_down),
            int16x8.requantize(x16, np.int16, input_zp=0, output_zp=0, multiplier=m_same,
                               shift=s_same),
            int16x8.dequantize_int16(x16, scale=0.0004)]
    outs = [mem.alloc(a.nbytes) for a in want]
    f_at, x8_at, x16_at = mem.put(f), mem.put(x8), mem.put(x16)
    run_ok(mem,
           encode("QUANTIZE", I16, input=f_at, output=outs[0], count=64, scale=0.0004),
           encode("REQUANTIZE", I16, input=x8_at, output=outs[1], count=64, input_zp=-7,
                  multiplier=m_up, shift=s_up),
           encode("REQUANTIZE", ops.OPF_INT16_INPUT, input=x16_at, output=outs[2], count=64,
                  output_zp=3, multiplier=m_down, shift=s_down),
           encode("REQUANTIZE", I16 | ops.OPF_INT16_INPUT, input=x16_at, output=outs[3],
                  count=64, multiplier=m_same, shift=s_same),
           encode("DEQUANTIZE", I16, input=x16_at, output=outs[4], count=64, scale=0.0004))
    for at, w in zip(outs, want):
        np.testing.assert_array_equal(mem.get(at, w.dtype, w.shape), w)


@pytest.mark.parametrize("kind", [LUT_LOGISTIC, LUT_TANH], ids=["logistic", "tanh"])
def test_lut_int16(mem: ChipMemory, kind: int) -> None:
    """LUT with OPF_INT16 looks int16 inputs up in a 65536-entry int16 table (the int16
    LOGISTIC / TANH tables, checked against LiteRT in test_int16_logistic_tanh.py)."""
    rng = np.random.default_rng(9 + kind)
    x = random_int16(rng, (3, 50))
    x[0, :4] = (-32768, -1, 0, 32767)
    table = sigmoid16.activation_lut_int16(kind, 3e-4)
    out = mem.alloc(x.nbytes)
    run_ok(mem, encode("LUT", I16, input=mem.put(x), output=out, count=x.size, lut=mem.put(table)))
    np.testing.assert_array_equal(mem.get(out, np.int16, x.shape), table[x.view(np.uint16)])
    fn = sigmoid16.logistic_int16 if kind == LUT_LOGISTIC else sigmoid16.tanh_int16
    np.testing.assert_array_equal(mem.get(out, np.int16, x.shape), fn(x, *sigmoid16.input_scaling(kind, 3e-4)))


def test_lut_int16_reads_the_whole_table(mem: ChipMemory) -> None:
    """An int16 LUT's table is 128 KiB: one that runs past mapped memory faults the job."""
    x = mem.put(np.zeros(8, np.int16))
    short_table = iommu.IOVA_BASE + mem.size - 1024
    assert mem.run(encode("LUT", I16, input=x, output=x, count=8, lut=short_table)).status == -errno.EFAULT
    assert mem.run(encode("LUT", 0, input=x, output=x, count=8, lut=short_table)).status == 0


def test_int16_jobs_replay_with_new_inputs(mem: ChipMemory) -> None:
    """The same command buffer run again replays its job plan (``job_plans``); int16 tasks
    have no C rerun, so their handlers run again and read the inputs written in between."""
    rng = np.random.default_rng(8)
    a, b = random_int16(rng, (4, 6)), random_int16(rng, (4, 6))
    x = random_int16(rng, (1, 7, 6, 3))
    add_p = add_params(0.001, 0.002, 0.003, left_shift=ADD_LEFT_SHIFT_INT16)
    geo = dict(filter_hw=(3, 2), stride=(2, 2), padding=(1, 0), out_hw=(4, 3))
    a_at, b_at, x_at = mem.put(a), mem.put(b), mem.put(x)
    out_add, out_avg = mem.alloc(a.nbytes), mem.alloc(4 * 3 * 3 * 2)
    shapes = dict(rank=2, in1_shape=ranked(a.shape), in2_shape=ranked(b.shape), out_shape=ranked(a.shape))
    cmd = (encode("ADD", I16, input1=a_at, input2=b_at, output=out_add, **shapes, **add_p,
                  act_min=-32768, act_max=32767)
           + encode("AVERAGE_POOL_2D", I16, input=x_at, output=out_avg, in_shape=x.shape,
                    out_shape=(1, 4, 3, 3), filter_hw=(3, 2), stride=(2, 2), padding=(1, 0),
                    act_min=-1000, act_max=32767))
    cmd_at = mem.put(np.frombuffer(cmd, np.uint8))
    for _ in range(3):
        for at, array in ((a_at, a), (b_at, b), (x_at, x)):
            array[...] = random_int16(rng, array.shape)
            offset = at - iommu.IOVA_BASE
            mem.bytes[offset:offset + array.nbytes] = array.reshape(-1).view(np.uint8)
        result = run_job(mem.dma, ASID, cmd_at, len(cmd), HardwareProfile())
        assert result.status == 0 and result.task_index == 2, result
        np.testing.assert_array_equal(mem.get(out_add, np.int16, a.shape), int16x8.add_int16(a, b, **add_p))
        np.testing.assert_array_equal(mem.get(out_avg, np.int16, (1, 4, 3, 3)),
                                      pooling.avg_pool2d(x, **geo, act_min=-1000, act_max=32767))
