"""A job's first run calls the C kernels of int16 convolutions, fully connected layers, ADD
and MUL, pools and table lookups directly (the numpy kernels stay the reference): it gives
the numpy kernels' bytes and still refuses what they refuse (EINVAL), now that only their
checks run before the C call (``int16x8.check_conv_16x8``, ``int16x16.check_conv_16x16``,
``pooling.check_pool2d``, the fully connected, ADD and MUL ones)."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim.kernels import int16x8, int16x16, pooling
from npu_hw import ops, tasks
from npu_hw.fixedpoint import ADD_LEFT_SHIFT_INT16, add_params, mul_multiplier, quantize_multiplier_array
from tests.support.chip_memory import ChipMemory, encode, ranked, run_ok
from tests.support.quant_utils import random_int8, random_int16

I16 = ops.OPF_INT16


def _conv(mem: ChipMemory, depthwise: bool, weights16: bool, **changes):
    """An int16 convolution's descriptor (``changes`` to its fields), its expected output by
    the numpy kernel (None when ``changes`` are given) and the output's address."""
    rng = np.random.default_rng(7)
    x = random_int16(rng, (1, 12, 10, 4))
    cout = 8
    shape = (1, 3, 3, cout) if depthwise else (cout, 3, 3, 4)
    w = (rng.integers(-32767, 32768, shape).astype(np.int16) if weights16 else random_int8(rng, shape))
    bias = rng.integers(-10 ** 6, 10 ** 6, cout).astype(np.int64)
    mult, shift = quantize_multiplier_array(rng.uniform(1e-5, 1e-4, cout) / (300 if weights16 else 1))
    geo = dict(stride=(1, 2), dilation=(1, 1), padding=(1, 1), out_hw=(12, 5))
    kernels = {(False, False): int16x8.conv2d_16x8, (True, False): int16x8.depthwise_conv2d_16x8,
               (False, True): int16x16.conv2d_16x16, (True, True): int16x16.depthwise_conv2d_16x16}
    expected = kernels[depthwise, weights16](x, w, bias, multiplier=mult, shift=shift, act_min=-32000,
                                             act_max=32000, **geo)
    out = mem.alloc(expected.nbytes)
    fields = dict(input=mem.put(x), weights=mem.put(w), bias=mem.put(bias), output=out,
                  mult_iova=mem.put(mult), shift_iova=mem.put(shift), in_shape=x.shape,
                  out_shape=expected.shape, filter_hw=(3, 3), cin_per_group=1 if depthwise else 4,
                  act_min=-32000, act_max=32000, stride=geo["stride"], dilation=geo["dilation"],
                  padding=geo["padding"])
    flags = ops.OPF_PER_CHANNEL | I16 | (ops.OPF_WEIGHTS16 if weights16 else 0)
    name = "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"
    return encode(name, flags, **{**fields, **changes}), expected, out


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("weights16", [False, True])
def test_an_int16_convolutions_first_run_is_the_numpy_kernels_bytes(mem: ChipMemory, depthwise: bool,
                                                                    weights16: bool) -> None:
    desc, expected, out = _conv(mem, depthwise, weights16)
    run_ok(mem, desc)
    np.testing.assert_array_equal(mem.get(out, np.int16, expected.shape), expected)


@pytest.mark.parametrize("weights16", [False, True])
@pytest.mark.parametrize("bad", [
    dict(padding=(3, 1)),                       # padding as large as the filter
    dict(stride=(0, 1)),
    dict(out_shape=(1, 20, 5, 8)),              # more rows than the padded input has
    dict(act_min=100, act_max=-100),
])
def test_an_int16_convolution_the_numpy_kernel_refuses_fails_on_its_first_run(mem: ChipMemory, weights16: bool,
                                                                             bad: dict) -> None:
    desc, _, _ = _conv(mem, False, weights16, **bad)
    assert mem.run(desc).status == -errno.EINVAL


def test_a_negative_requantization_multiplier_fails_on_the_first_run(mem: ChipMemory) -> None:
    desc, _, _ = _conv(mem, False, False)
    bad = mem.put(np.full(8, -5, np.int32))
    assert mem.run(_conv(mem, False, False, mult_iova=bad)[0]).status == -errno.EINVAL
    assert mem.run(_conv(mem, False, False, shift_iova=mem.put(np.full(8, 20, np.int32)))[0]).status \
        == -errno.EINVAL
    run_ok(mem, desc)


@pytest.mark.parametrize("name", ["MAX_POOL_2D", "AVERAGE_POOL_2D"])
@pytest.mark.parametrize("flags, dtype", [(I16, np.int16), (0, np.int8)])
def test_a_pool_window_wholly_outside_the_input_fails_on_the_first_run(mem: ChipMemory, name: str, flags: int,
                                                                       dtype) -> None:
    x = np.arange(2 * 3 * 2, dtype=dtype).reshape(1, 2, 3, 2)
    fn = pooling.max_pool2d if name == "MAX_POOL_2D" else pooling.avg_pool2d
    lo, hi = (-32768, 32767) if dtype is np.int16 else (-128, 127)
    good = dict(filter_hw=(2, 2), stride=(1, 1), padding=(1, 1), out_hw=(3, 4))
    want = fn(x, **good, act_min=lo, act_max=hi)
    fields = dict(input=mem.put(x), output=mem.alloc(want.nbytes), in_shape=x.shape, out_shape=want.shape,
                  filter_hw=(2, 2), padding=(1, 1), act_min=lo, act_max=hi)
    run_ok(mem, encode(name, flags, stride=(1, 1), **fields))
    np.testing.assert_array_equal(mem.get(fields["output"], dtype, want.shape), want)
    # Stride 3 from padding 1: the third row of windows starts past the input's two rows.
    assert mem.run(encode(name, flags, stride=(3, 1), **fields)).status == -errno.EINVAL


@pytest.mark.parametrize("weights16", [False, True])
def test_an_int16_fully_connected_first_run_is_the_numpy_kernels_bytes(mem: ChipMemory, weights16: bool) -> None:
    rng = np.random.default_rng(8)
    rows, k, n = 3, 40, 12
    x = random_int16(rng, (rows, k))
    w = rng.integers(-32767, 32768, (n, k)).astype(np.int16) if weights16 else random_int8(rng, (n, k))
    bias = rng.integers(-10 ** 8, 10 ** 8, n).astype(np.int64)
    scale = rng.uniform(1e-5, 1e-4, n) / (300 if weights16 else 1)
    kernel = int16x16.fully_connected_16x16 if weights16 else int16x8.fully_connected_16x8
    expected = kernel(x, w, bias, scale=scale, act_min=-32000, act_max=30000)
    out = mem.alloc(expected.nbytes)
    flags = (tasks.FC_DOUBLE_SCALE | tasks.FC_PER_CHANNEL | I16 | (ops.OPF_WEIGHTS16 if weights16 else 0))
    fields = dict(input=mem.put(x), weights=mem.put(w), bias=mem.put(bias), output=out, rows=rows, in_features=k,
                  out_features=n, act_min=-32000, act_max=30000, mult_iova=mem.put(np.zeros(n, np.int32)),
                  shift_iova=mem.put(np.zeros(n, np.int32)))
    run_ok(mem, encode("FULLY_CONNECTED", flags, scale_iova=mem.put(scale), **fields))
    np.testing.assert_array_equal(mem.get(out, np.int16, expected.shape), expected)
    infinite = mem.put(np.full(n, np.inf))
    assert mem.run(encode("FULLY_CONNECTED", flags, scale_iova=infinite, **fields)).status == -errno.EINVAL


def test_an_int16_add_or_mul_the_numpy_kernel_refuses_fails_on_its_first_run(mem: ChipMemory) -> None:
    """(Their bytes on a first run: test_int16_units.py::test_add_mul_int16.)"""
    rng = np.random.default_rng(9)
    a, b = random_int16(rng, (2, 5, 6)), random_int16(rng, (5, 1))
    shapes = dict(rank=3, in1_shape=ranked(a.shape), in2_shape=ranked((1,) + b.shape), out_shape=ranked(a.shape),
                  input1=mem.put(a), input2=mem.put(b), output=mem.alloc(a.nbytes), act_min=-32768, act_max=32767)
    add_p = add_params(0.001, 0.002, 0.003, left_shift=ADD_LEFT_SHIFT_INT16)
    mult, shift = mul_multiplier(0.001, 0.002, 0.05)
    run_ok(mem, encode("ADD", I16, **shapes, **add_p), encode("MUL", I16, **shapes, multiplier=mult, shift=shift))
    for bad in (dict(left_shift=17), dict(output_shift=3), dict(input1_multiplier=-5), dict(input2_shift=-40)):
        assert mem.run(encode("ADD", I16, **shapes, **{**add_p, **bad})).status == -errno.EINVAL, bad
    assert mem.run(encode("MUL", I16, **shapes, multiplier=mult, shift=31)).status == -errno.EINVAL
    wrong = {**shapes, "out_shape": ranked((2, 5, 5))}          # not the shape the inputs broadcast to
    assert mem.run(encode("ADD", I16, **wrong, **add_p)).status == -errno.EINVAL
