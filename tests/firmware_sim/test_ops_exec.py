"""The chip-side handlers: descriptors in DMA memory, run by the real job executor, give
exactly what the kernels give (the kernels themselves are checked against LiteRT)."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim.kernels import activations, conv, elementwise, fully_connected, layout, pooling, resize
from npu_hw import iommu, ops, tasks
from npu_hw.fixedpoint import LUT_TANH, activation_lut, add_params, quantize_multiplier_array, softmax_params
from tests.support.chip_memory import ChipMemory, encode, ranked, run_ok
from tests.support.quant_utils import random_int8


@pytest.mark.parametrize("depthwise", [False, True])
def test_conv_handlers(mem: ChipMemory, depthwise: bool) -> None:
    rng = np.random.default_rng(1)
    x = random_int8(rng, (1, 9, 7, 4))
    cout = 8
    w = random_int8(rng, (1, 3, 3, cout) if depthwise else (cout, 3, 3, 2))  # 2 groups
    bias = rng.integers(-3000, 3000, cout).astype(np.int32)
    mult, shift = quantize_multiplier_array(rng.uniform(0.002, 0.01, cout))
    kw = dict(stride=(2, 1), dilation=(1, 2), padding=(1, 2), out_hw=(5, 7), input_zp=-3,
              output_zp=5, multiplier=mult, shift=shift, act_min=-100, act_max=120)
    fn = conv.depthwise_conv2d if depthwise else conv.conv2d
    expected = fn(x, w, bias, **kw)
    out = mem.alloc(expected.nbytes)
    x_at, mult_at = mem.put(x), mem.put(mult)
    desc = encode("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", ops.OPF_PER_CHANNEL,
                  input=x_at, weights=mem.put(w), bias=mem.put(bias), output=out,
                  mult_iova=mult_at, shift_iova=mem.put(shift), in_shape=x.shape,
                  out_shape=expected.shape, filter_hw=(3, 3), stride=(2, 1), dilation=(1, 2),
                  padding=(1, 2), cin_per_group=1 if depthwise else 2, input_zp=-3,
                  output_zp=5, act_min=-100, act_max=120)
    run_ok(mem, desc)
    np.testing.assert_array_equal(mem.get(out, np.int8, expected.shape), expected)
    # The decoded descriptor is remembered, the operands are not: new input data and
    # per-channel multipliers in the same memory give the new result.
    x2 = random_int8(rng, x.shape)
    mult2 = ((mult.astype(np.int64) + (1 << 31)) // 2).astype(np.int32)  # still in [2**30, 2**31)
    for at, data in ((x_at, x2), (mult_at, mult2)):
        off = at - iommu.IOVA_BASE
        mem.bytes[off:off + data.nbytes] = data.reshape(-1).view(np.uint8)
    run_ok(mem, desc)
    np.testing.assert_array_equal(mem.get(out, np.int8, expected.shape),
                                  fn(x2, w, bias, **dict(kw, multiplier=mult2)))


@pytest.mark.parametrize("flags", [0, tasks.FC_PER_CHANNEL | tasks.FC_DOUBLE_SCALE])
def test_fully_connected_handler_reruns_on_new_data(mem: ChipMemory, flags: int) -> None:
    """Like the depthwise handler, FULLY_CONNECTED keeps its C call between jobs; every
    job still computes from what is in memory then."""
    rng = np.random.default_rng(2)
    rows, k, n = 3, 40, 24
    x, w = random_int8(rng, (rows, k)), random_int8(rng, (n, k))
    bias = rng.integers(-3000, 3000, n).astype(np.int32)
    scale = rng.uniform(0.001, 0.01, n if flags else 1)
    mult, shift = quantize_multiplier_array(scale)
    kw = dict(input_zp=7, output_zp=-5, act_min=-120, act_max=100)
    out = mem.alloc(rows * n)
    x_at, scale_at = mem.put(x), mem.put(scale)
    quant = (dict(mult_iova=mem.put(mult), shift_iova=mem.put(shift), scale_iova=scale_at)
             if flags else dict(multiplier=int(mult[0]), shift=int(shift[0])))
    desc = encode("FULLY_CONNECTED", flags, input=x_at, weights=mem.put(w), bias=mem.put(bias),
                  output=out, rows=rows, in_features=k, out_features=n, **quant, **kw)
    for _run in range(3):
        run_ok(mem, desc)
        expected = fully_connected.fully_connected(
            x, w, bias, multiplier=mult, shift=shift, scale=scale if flags else None, **kw)
        np.testing.assert_array_equal(mem.get(out, np.int8, (rows, n)), expected)
        x = random_int8(rng, x.shape)
        if flags:                                  # per-channel scales live in memory too
            scale = scale * 1.5
        for at, data in ((x_at, x), (scale_at, scale)):
            off = at - iommu.IOVA_BASE
            mem.bytes[off:off + data.nbytes] = data.reshape(-1).view(np.uint8)


def test_elementwise_and_activation_handlers(mem: ChipMemory) -> None:
    rng = np.random.default_rng(2)
    a, b = random_int8(rng, (2, 3, 4)), random_int8(rng, (1, 3, 1))
    p = add_params(0.05, 0.03, 0.06)
    exp_add = elementwise.add(a, b, input1_zp=1, input2_zp=-2, output_zp=3, **p)
    exp_mul = elementwise.mul(a, b, input1_zp=1, input2_zp=-2, output_zp=3,
                              multiplier=1 << 30, shift=-6)
    lut = activation_lut(LUT_TANH, 0.05, 2, 1 / 128, 0)
    exp_lut = activations.lut_lookup(a.reshape(-1), lut)
    sm = softmax_params(1.0, 0.1)
    exp_sm = activations.softmax(a.reshape(6, 4), input_beta_multiplier=sm[0],
                                 input_beta_left_shift=sm[1], diff_min=sm[2])
    exp_relu = activations.relu_family(a.reshape(-1), input_zp=1, output_zp=-4,
                                       multiplier=1 << 30, shift=1, act_min=-4, act_max=127)
    xf = rng.standard_normal(24).astype(np.float32)
    exp_q = elementwise.quantize(xf, scale=0.02, zero_point=-7)
    exp_rq = elementwise.requantize(a.reshape(-1), input_zp=1, output_zp=2,
                                    multiplier=1 << 30, shift=0)
    exp_dq = elementwise.dequantize(a.reshape(-1), scale=0.05, zero_point=1)

    ia, ib = mem.put(a), mem.put(b)
    outs = [mem.alloc(64) for _ in range(8)]
    shapes = dict(rank=3, in1_shape=ranked(a.shape), in2_shape=ranked(b.shape),
                  out_shape=ranked(a.shape), input1_zp=1, input2_zp=-2, output_zp=3)
    run_ok(mem,
           encode("ADD", input1=ia, input2=ib, output=outs[0], act_min=-128, act_max=127,
                  **shapes, **p),
           encode("MUL", input1=ia, input2=ib, output=outs[1], multiplier=1 << 30, shift=-6,
                  act_min=-128, act_max=127, **shapes),
           encode("LUT", input=ia, output=outs[2], count=24, lut=mem.put(lut)),
           encode("SOFTMAX", input=ia, output=outs[3], rows=6, depth=4,
                  input_beta_multiplier=sm[0], input_beta_left_shift=sm[1], diff_min=sm[2]),
           encode("RELU", input=ia, output=outs[4], count=24, input_zp=1, output_zp=-4,
                  multiplier=1 << 30, shift=1, act_min=-4, act_max=127),
           encode("QUANTIZE", input=mem.put(xf), output=outs[5], count=24, scale=0.02,
                  zero_point=-7),
           encode("REQUANTIZE", input=ia, output=outs[6], count=24, input_zp=1, output_zp=2,
                  multiplier=1 << 30, shift=0),
           encode("DEQUANTIZE", input=ia, output=outs[7], count=24, scale=0.05, zero_point=1))
    for iova, exp in zip(outs, [exp_add, exp_mul, exp_lut, exp_sm, exp_relu, exp_q, exp_rq,
                                exp_dq]):
        np.testing.assert_array_equal(mem.get(iova, exp.dtype, exp.shape), exp)


def test_pool_mean_resize_handlers(mem: ChipMemory) -> None:
    rng = np.random.default_rng(3)
    x = random_int8(rng, (2, 7, 6, 3))
    pk = dict(filter_hw=(3, 2), stride=(2, 2), padding=(1, 0), out_hw=(4, 3))
    exp_max = pooling.max_pool2d(x, **pk, act_min=-50, act_max=127)
    exp_avg = pooling.avg_pool2d(x, **pk)
    exp_mean = pooling.mean(x, (1, 2), input_zp=3, output_zp=-1, multiplier=1 << 30, shift=1)
    exp_bil = resize.resize_bilinear(x, (11, 4), half_pixel_centers=True)
    exp_nn = resize.resize_nearest(x, (3, 13), align_corners=True)
    ix = mem.put(x)
    outs = [mem.alloc(2048) for _ in range(5)]
    pool = dict(input=ix, in_shape=x.shape, out_shape=(2, 4, 3, 3), filter_hw=(3, 2),
                stride=(2, 2), padding=(1, 0))
    run_ok(mem,
           encode("MAX_POOL_2D", output=outs[0], act_min=-50, act_max=127, **pool),
           encode("AVERAGE_POOL_2D", output=outs[1], act_min=-128, act_max=127, **pool),
           encode("MEAN", input=ix, output=outs[2], rank=4, in_shape=ranked(x.shape),
                  axes_mask=0b0110, input_zp=3, output_zp=-1, multiplier=1 << 30, shift=1),
           encode("RESIZE_BILINEAR", ops.OPF_HALF_PIXEL_CENTERS, input=ix, output=outs[3],
                  in_shape=x.shape, out_hw=(11, 4)),
           encode("RESIZE_NEAREST_NEIGHBOR", ops.OPF_ALIGN_CORNERS, input=ix, output=outs[4],
                  in_shape=x.shape, out_hw=(3, 13)))
    for iova, exp in zip(outs, [exp_max, exp_avg, exp_mean, exp_bil, exp_nn]):
        np.testing.assert_array_equal(mem.get(iova, np.int8, exp.shape), exp)


def test_layout_handlers(mem: ChipMemory) -> None:
    rng = np.random.default_rng(4)
    x = random_int8(rng, (2, 3, 4))
    parts = [random_int8(rng, (2, k, 4)) for k in (1, 3, 2)]
    exp_cat = layout.concat(parts, 1)
    exp_tr = layout.transpose(x, (2, 0, 1))
    exp_pad = layout.pad(x, [(1, 0), (0, 2), (3, 1)], -9)
    sl = dict(begin=[1, -1, 0], end=[2, 0, 4], strides=[1, -1, 2], begin_mask=0, end_mask=0,
              shrink_axis_mask=0b001)
    exp_sl = layout.strided_slice(x, sl["begin"], sl["end"], sl["strides"],
                                  shrink_axis_mask=0b001)
    ix = mem.put(x)
    outs = [mem.alloc(512) for _ in range(5)]
    addrs = np.array([mem.put(p) for p in parts], np.uint64)
    r = ranked
    run_ok(mem,
           encode("CONCATENATION", inputs_iova=mem.put(addrs), sizes_iova=mem.put(np.array([1, 3, 2],
                  np.uint32)), output=outs[0], num_inputs=3, outer=2, inner=4, axis_total=6),
           encode("TRANSPOSE", input=ix, output=outs[1], rank=3, in_shape=r(x.shape),
                  perm=r((2, 0, 1))),
           encode("PAD", input=ix, output=outs[2], rank=3, in_shape=r(x.shape),
                  pad_before=r((1, 0, 3)), pad_after=r((0, 2, 1)), pad_value=-9),
           encode("STRIDED_SLICE", input=ix, output=outs[3], rank=3, in_shape=r(x.shape),
                  begin=r(sl["begin"]), end=r(sl["end"]), strides=r(sl["strides"]),
                  shrink_axis_mask=0b001),
           encode("RESHAPE", input=ix, output=outs[4], count=x.size))
    for iova, exp in zip(outs, [exp_cat, exp_tr, exp_pad, exp_sl, x]):
        np.testing.assert_array_equal(mem.get(iova, np.int8, exp.shape), exp)


def test_bad_descriptors_fail_the_job_cleanly(mem: ChipMemory) -> None:
    ix = mem.put(np.zeros(64, np.int8))
    out = mem.alloc(64)
    bad_rank = encode("TRANSPOSE", input=ix, output=out, rank=7, in_shape=ranked((4,)),
                      perm=ranked((0,)))
    assert mem.run(bad_rank).status == -errno.EINVAL
    bad_perm = encode("TRANSPOSE", input=ix, output=out, rank=2, in_shape=ranked((4, 4)),
                      perm=ranked((0, 0)))
    assert mem.run(bad_perm).status == -errno.EINVAL
    bad_shift = encode("RELU", input=ix, output=out, count=64, multiplier=1 << 30, shift=40,
                       act_min=-128, act_max=127)
    assert mem.run(bad_shift).status == -errno.EINVAL
    unmapped = encode("LUT", input=ix, output=out, count=64, lut=0x10)
    result = mem.run(encode("NOP"), unmapped)
    assert result.status == -errno.EFAULT and result.task_index == 1
    too_big = encode("RELU", input=ix, output=out, count=1 << 40, multiplier=1 << 30,
                     act_min=-128, act_max=127)
    assert mem.run(too_big).status == -errno.EINVAL
    w = mem.put(np.ones((1, 1, 1, 4), np.int8))
    conv = dict(input=ix, weights=w, output=out, in_shape=(1, 4, 4, 4),
                out_shape=(1, 4, 4, 1), filter_hw=(1, 1), stride=(1, 1), dilation=(1, 1),
                cin_per_group=4, multiplier=1 << 30, shift=-8, act_min=-128, act_max=127)
    assert mem.run(encode("CONV_2D", **conv)).status == 0
    for bad in (dict(padding=(1 << 30, 0)), dict(dilation=(1 << 20, 1), filter_hw=(2, 1)),
                dict(out_shape=(1, 1 << 20, 4, 1))):
        assert mem.run(encode("CONV_2D", **{**conv, **bad})).status in (-errno.EINVAL,
                                                                       -errno.EFAULT), bad
