"""int16 weights ("16x16", ``OPF_WEIGHTS16``): our own formula (docs/hardware.md), as LiteRT
has no 16x16 convolution. The kernels are pinned against an independent reference written
here: exact integer sums (Python / numpy int64, no float), the requantization in Python
integers from its definition, and within one output step of the float64 value; then the
chip's units run the descriptors through the real job executor."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim.errors import InvalidCommand
from firmware_sim.kernels.int16x16 import (
    ACC_MAX,
    ACC_MIN,
    conv2d_16x16,
    depthwise_conv2d_16x16,
    fully_connected_16x16,
    saturate_accumulator,
)
from npu_hw import ops, tasks
from npu_hw.fixedpoint import quantize_multiplier_array
from tests.support.chip_memory import ChipMemory, encode, run_ok
from tests.support.quant_utils import log_uniform, random_int16

CASES = 200
W16 = ops.OPF_INT16 | ops.OPF_WEIGHTS16


def _weights(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-32767, 32768, size=shape, dtype=np.int16)


def _requantize(acc: int, multiplier: int, shift: int) -> int:
    """The definition, in Python integers: saturate to 48 bits, the Q31 multiplier rounded
    to Q15, one rounding (ties up), wrapped to int32."""
    acc = min(max(acc, ACC_MIN), ACC_MAX)
    m15 = 0x7FFF if multiplier >= 0x7FFF0000 else (multiplier + (1 << 15)) >> 16
    total = 15 - shift
    v = (acc * m15 + (1 << (total - 1))) >> total
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def _conv_sums(x: np.ndarray, w: np.ndarray, stride, dilation, padding, out_hw, depthwise: bool) -> np.ndarray:
    """Exact int64 sums by explicit taps (an output tap outside the input reads 0)."""
    n, h, wd, cin = x.shape
    oh, ow = out_hw
    if depthwise:
        _, kh, kw, cout = w.shape
    else:
        cout, kh, kw, cin_g = w.shape
    acc = np.zeros((n, oh, ow, cout), np.int64)
    xi = x.astype(np.int64)
    for i in range(kh):
        for j in range(kw):
            ys = np.arange(oh) * stride[0] - padding[0] + i * dilation[0]
            xs = np.arange(ow) * stride[1] - padding[1] + j * dilation[1]
            valid = ((ys >= 0) & (ys < h))[:, None] & ((xs >= 0) & (xs < wd))[None, :]
            taps = xi[:, np.clip(ys, 0, h - 1)][:, :, np.clip(xs, 0, wd - 1)] * valid[None, :, :, None]
            if depthwise:
                acc += np.repeat(taps, cout // cin, axis=3) * w[0, i, j].astype(np.int64)
            else:
                groups = cin // cin_g
                per = cout // groups
                for g in range(groups):
                    part = taps[..., g * cin_g:(g + 1) * cin_g]
                    acc[..., g * per:(g + 1) * per] += part @ w[g * per:(g + 1) * per, i, j].astype(np.int64).T
    return acc


def _finish_reference(acc: np.ndarray, bias, mult, shift, act_min: int, act_max: int) -> np.ndarray:
    cout = acc.shape[-1]
    m = np.broadcast_to(mult, (cout,))
    s = np.broadcast_to(shift, (cout,))
    out = np.empty(acc.shape, np.int16)
    flat, res = acc.reshape(-1, cout), out.reshape(-1, cout)
    for c in range(cout):
        b = int(bias[c]) if bias is not None else 0
        res[:, c] = [min(max(_requantize(int(a) + b, int(m[c]), int(s[c])), act_min), act_max) for a in flat[:, c]]
    return out


def _random_conv(rng: np.random.Generator, depthwise: bool) -> tuple:
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 8)), int(rng.integers(1, 8))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    eff_h, eff_w = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    padding = (int(rng.integers(0, eff_h)), int(rng.integers(0, eff_w)))
    oh = max(1, (h + 2 * padding[0] - eff_h) // stride[0] + 1)
    ow = max(1, (w + 2 * padding[1] - eff_w) // stride[1] + 1)
    h, w = max(h, (oh - 1) * stride[0] + eff_h - 2 * padding[0]), max(w, (ow - 1) * stride[1] + eff_w - 2 * padding[1])
    if depthwise:
        cin, dm = int(rng.integers(1, 5)), int(rng.integers(1, 3))
        cout, wshape = cin * dm, (1, kh, kw, cin * dm)
    else:
        groups, cin_g, per = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
        cin, cout, wshape = groups * cin_g, groups * per, (groups * per, kh, kw, cin_g)
    x = random_int16(rng, (n, h, w, cin))
    wt = _weights(rng, wshape)
    depth = kh * kw * (1 if depthwise else wshape[3])
    # real multipliers that put a typical sum near the int16 range, sometimes beyond it
    # (no lower than 2**-31, the smallest multiplier the descriptor's Q31 + shift can hold)
    real = np.maximum(log_uniform(rng, 0.3, 30.0, cout) / (2.0 ** 30 * np.sqrt(depth) / 3), 2.0 ** -31)
    mult, shift = quantize_multiplier_array(real)
    bias = rng.integers(-2 ** 40, 2 ** 40, cout).astype(np.int64) if rng.random() < 0.8 else None
    lo = int(rng.integers(-32768, -1000)) if rng.random() < 0.3 else -32768
    hi = int(rng.integers(1000, 32768)) if rng.random() < 0.3 else 32767
    kw_args = dict(stride=stride, dilation=dilation, padding=padding, out_hw=(oh, ow),
                   multiplier=mult, shift=shift, act_min=lo, act_max=hi)
    return x, wt, bias, kw_args, real


@pytest.mark.parametrize("depthwise", [False, True])
def test_convolutions_follow_the_integer_definition(depthwise: bool) -> None:
    rng = np.random.default_rng(16 + depthwise)
    fn = depthwise_conv2d_16x16 if depthwise else conv2d_16x16
    for _ in range(CASES):
        x, w, bias, kw, real = _random_conv(rng, depthwise)
        got = fn(x, w, bias, **kw)
        acc = _conv_sums(x, w, kw["stride"], kw["dilation"], kw["padding"], kw["out_hw"], depthwise)
        want = _finish_reference(acc, bias, kw["multiplier"], kw["shift"], kw["act_min"], kw["act_max"])
        np.testing.assert_array_equal(got, want)
        # ...and within one step of the float64 value (multiplier rounded to Q15: 2**-15 relative)
        exact = (acc + (0 if bias is None else bias)).astype(np.float64) * real
        clipped = np.clip(exact, kw["act_min"], kw["act_max"])
        assert np.all(np.abs(got - clipped) <= 1 + np.abs(clipped) * 2.0 ** -14)


def test_fully_connected_follows_the_integer_definition() -> None:
    rng = np.random.default_rng(161)
    for _ in range(CASES):
        m, k, n = int(rng.integers(1, 5)), int(rng.integers(1, 300)), int(rng.integers(1, 9))
        x, w = random_int16(rng, (m, k)), _weights(rng, (n, k))
        bias = rng.integers(-2 ** 40, 2 ** 40, n).astype(np.int64) if rng.random() < 0.8 else None
        scale = log_uniform(rng, 0.3, 30.0, n if rng.random() < 0.5 else 1) / (2.0 ** 30 * np.sqrt(k) / 3)
        got = fully_connected_16x16(x, w, bias, scale=scale)
        acc = x.astype(np.int64) @ w.astype(np.int64).T + (0 if bias is None else bias)
        acc = np.clip(acc, ACC_MIN, ACC_MAX)
        # round(acc * scale), ties away from zero, in float64, then the int16 clamp
        v = acc.astype(np.float64) * np.broadcast_to(scale, (n,))
        want = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -32768, 32767).astype(np.int16)
        np.testing.assert_array_equal(got, want)


def test_accumulators_saturate_at_48_bits() -> None:
    sums = np.array([0.0, 32767.0 ** 2, -(32767.0 ** 2)])
    bias = np.array([2 ** 63 - 1, 2 ** 62, -(2 ** 63)], np.int64)
    np.testing.assert_array_equal(saturate_accumulator(sums, bias), [ACC_MAX, ACC_MAX, ACC_MIN])
    # Through a kernel: a wrapped accumulator would come out with the wrong sign.
    x = np.full((1, 1, 1, 1), 32767, np.int16)
    w = np.full((1, 1, 1, 1), 32767, np.int16)
    mult, shift = quantize_multiplier_array(np.array([2.0 ** -31]))
    kw = dict(stride=(1, 1), dilation=(1, 1), padding=(0, 0), out_hw=(1, 1), multiplier=mult, shift=shift)
    assert _requantize(ACC_MAX, int(mult[0]), int(shift[0])) == 1 << 16
    assert int(conv2d_16x16(x, w, bias[1:2], **kw)[0, 0, 0, 0]) == 32767
    assert int(conv2d_16x16(-x, w, bias[2:3], **kw)[0, 0, 0, 0]) == -32768


def test_bad_operands_are_refused() -> None:
    x = np.zeros((1, 2, 2, 1), np.int16)
    kw = dict(stride=(1, 1), dilation=(1, 1), padding=(0, 0), out_hw=(2, 2),
              multiplier=np.array([1 << 30], np.int32), shift=np.array([0], np.int32))
    with pytest.raises(TypeError, match="int16"):
        conv2d_16x16(x, np.zeros((1, 1, 1, 1), np.int8), None, **kw)
    with pytest.raises(InvalidCommand, match="symmetric"):
        conv2d_16x16(x, np.full((1, 1, 1, 1), -32768, np.int16), None, **kw)
    with pytest.raises(InvalidCommand, match="bias must be int64"):
        depthwise_conv2d_16x16(x, np.ones((1, 1, 1, 1), np.int16), np.zeros(1, np.int32), **kw)
    with pytest.raises(InvalidCommand, match="scale"):
        fully_connected_16x16(np.zeros((1, 3), np.int16), np.ones((2, 3), np.int16), None,
                              scale=np.array([np.inf, 1.0]))


# the units, through the job executor ------------------------------------------------------

@pytest.mark.parametrize("depthwise", [False, True])
def test_conv_units_with_int16_weights(mem: ChipMemory, depthwise: bool) -> None:
    rng = np.random.default_rng(7)
    x = random_int16(rng, (1, 9, 7, 4))
    cout = 8
    w = _weights(rng, (1, 3, 3, cout) if depthwise else (cout, 3, 3, 2))
    bias = rng.integers(-10 ** 12, 10 ** 12, cout).astype(np.int64)
    mult, shift = quantize_multiplier_array(rng.uniform(1e-7, 1e-6, cout))
    kw = dict(stride=(2, 1), dilation=(1, 2), padding=(1, 2), out_hw=(5, 7), multiplier=mult,
              shift=shift, act_min=-30000, act_max=32000)
    expected = (depthwise_conv2d_16x16 if depthwise else conv2d_16x16)(x, w, bias, **kw)
    out = mem.alloc(expected.nbytes)
    fields = dict(input=mem.put(x), weights=mem.put(w), bias=mem.put(bias), output=out,
                  mult_iova=mem.put(mult), shift_iova=mem.put(shift), in_shape=x.shape,
                  out_shape=expected.shape, filter_hw=(3, 3), stride=(2, 1), dilation=(1, 2),
                  padding=(1, 2), cin_per_group=1 if depthwise else 2, act_min=-30000, act_max=32000)
    name = "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"
    run_ok(mem, encode(name, ops.OPF_PER_CHANNEL | W16, **fields))
    np.testing.assert_array_equal(mem.get(out, np.int16, expected.shape), expected)
    no_int16 = encode(name, ops.OPF_PER_CHANNEL | ops.OPF_WEIGHTS16, **fields)
    assert mem.run(no_int16).status == -errno.EINVAL


@pytest.mark.parametrize("per_channel", [False, True])
def test_fully_connected_unit_with_int16_weights(mem: ChipMemory, per_channel: bool) -> None:
    rng = np.random.default_rng(8)
    rows, k, n = 3, 40, 12
    x, w = random_int16(rng, (rows, k)), _weights(rng, (n, k))
    bias = rng.integers(-10 ** 12, 10 ** 12, n).astype(np.int64)
    scale = rng.uniform(1e-7, 1e-6, n if per_channel else 1)
    expected = fully_connected_16x16(x, w, bias, scale=scale, act_min=-32000, act_max=30000)
    out = mem.alloc(expected.nbytes)
    quant = (dict(scale_iova=mem.put(scale), mult_iova=mem.put(np.zeros(n, np.int32)),
                  shift_iova=mem.put(np.zeros(n, np.int32)))
             if per_channel else dict(scale=float(scale[0])))
    flags = tasks.FC_DOUBLE_SCALE | W16 | (tasks.FC_PER_CHANNEL if per_channel else 0)
    fields = dict(input=mem.put(x), weights=mem.put(w), bias=mem.put(bias), output=out, rows=rows,
                  in_features=k, out_features=n, act_min=-32000, act_max=30000, **quant)
    run_ok(mem, encode("FULLY_CONNECTED", flags, **fields))
    np.testing.assert_array_equal(mem.get(out, np.int16, expected.shape), expected)
    assert mem.run(encode("FULLY_CONNECTED", flags & ~ops.OPF_INT16, **fields)).status == -errno.EINVAL
