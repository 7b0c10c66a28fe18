"""The C int16 x int8 kernels (``native/int16_kernels.c``) against ``kernels.int16x8``'s numpy
kernels, byte for byte, rerun on new contents: convolutions (grouped, strided, dilated,
padded), depthwise (depth multipliers), fully connected; int16 and int8 extremes, int64
biases large enough to wrap, multipliers at and past 0x7FFF0000, every shift."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim.kernels import int16x8, native
from firmware_sim.kernels.native import int16_calls
from npu_hw.ops import PADDING_SAME, PADDING_VALID, conv_geometry
from tests.support.quant_utils import random_int8, random_int16

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C kernels")


def _requant(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    size = n if rng.random() < 0.6 else 1
    mult = rng.integers(0, 1 << 31, size=size, dtype=np.int64)
    mult[: min(size, 2)] = [0x7FFF0000, (1 << 31) - 1][: min(size, 2)]
    return mult.astype(np.int32), rng.integers(-31, 15, size=size).astype(np.int32)


def _bias(rng: np.random.Generator, n: int) -> np.ndarray | None:
    if rng.random() < 0.2:
        return None
    reach = int(rng.choice([1 << 20, 1 << 20, 1 << 40, 1 << 62]))     # sometimes enough to wrap int64
    return rng.integers(-reach, reach, size=n, dtype=np.int64)


def _extremes(x: np.ndarray, values) -> np.ndarray:
    x.reshape(-1)[: len(values)] = values[: x.size]
    return x


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_conv16x8_reruns_in_c_as_numpy_computes(depthwise: bool) -> None:
    rng = np.random.default_rng(40 + depthwise)
    for _ in range(40):
        n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 12)), int(rng.integers(1, 12))
        cin = int(rng.integers(1, 20))
        kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        mode = PADDING_SAME if rng.random() < 0.7 else PADDING_VALID
        oh, pt = conv_geometry(h, kh, stride[0], dilation[0], mode)
        ow, pl = conv_geometry(w, kw, stride[1], dilation[1], mode)
        if oh < 1 or ow < 1:
            continue
        if depthwise:
            cout = cin * int(rng.choice([1, 1, 2, 3]))
            wt = random_int8(rng, (1, kh, kw, cout))
        else:
            groups = int(rng.choice([g for g in (1, 2, 3) if cin % g == 0]))
            cout = groups * int(rng.integers(1, 6))
            wt = random_int8(rng, (cout, kh, kw, cin // groups))
        x = _extremes(random_int16(rng, (n, h, w, cin)), [-32768, 32767, -32768])
        _extremes(wt, [-128, 127, -128])
        bias = _bias(rng, cout)
        mult, shift = _requant(rng, cout)
        act_min = int(rng.choice([-32768, -1000]))
        kw_args = dict(stride=stride, dilation=dilation, padding=(pt, pl), out_hw=(oh, ow),
                       multiplier=mult, shift=shift, act_min=act_min, act_max=int(rng.choice([32767, 500])))
        fn = int16x8.depthwise_conv2d_16x8 if depthwise else int16x8.conv2d_16x8
        out = np.empty((n, oh, ow, cout), np.int16)
        fn(x, wt, bias, out=out, **kw_args)
        rerun = int16_calls.bind_conv16(x, wt, bias, depthwise=depthwise, out=out, **kw_args)
        assert rerun is not None
        x[...] = _extremes(random_int16(rng, x.shape), [32767, -32768])
        rerun()
        np.testing.assert_array_equal(out, fn(x, wt, bias, **kw_args))


def test_fully_connected16x8_reruns_in_c_as_numpy_computes() -> None:
    rng = np.random.default_rng(42)
    for _ in range(40):
        m, k, n = int(rng.integers(1, 5)), int(rng.integers(1, 700)), int(rng.integers(1, 40))
        x = _extremes(random_int16(rng, (m, k)), [-32768] * 600)      # long runs of extremes: big sums
        w = _extremes(random_int8(rng, (n, k)), [-128] * 600)
        bias = _bias(rng, n)
        scale = rng.uniform(1e-7, 1e-5, size=n if rng.random() < 0.5 else 1)    # sums past 2**31 stay in range
        kw_args = dict(scale=scale, act_min=-32768, act_max=int(rng.choice([32767, 100])))
        out = np.empty((m, n), np.int16)
        int16x8.fully_connected_16x8(x, w, bias, out=out, **kw_args)
        rerun = int16_calls.bind_fully_connected16(x, w, bias, out=out, **kw_args)
        assert rerun is not None
        x[...] = _extremes(random_int16(rng, x.shape), [-32768] * 600)
        rerun()
        np.testing.assert_array_equal(out, int16x8.fully_connected_16x8(x, w, bias, **kw_args))


def test_fully_connected16x8_rounds_ties_and_refits_new_weights() -> None:
    """The VNNI path (x split in its high and low bytes, the packed filter kept between
    calls): products at half-way (ties round away from zero), values past int32 (INT32_MIN,
    then the clamp), rows past a tile of 4, more than 16 outputs, and weights rewritten after
    binding (packed afresh, not read from the kept copy)."""
    rng = np.random.default_rng(43)
    for case in range(12):
        m, k, n = int(rng.integers(1, 10)), int(rng.integers(1, 300)), int(rng.integers(1, 70))
        x, w = random_int16(rng, (m, k)), random_int8(rng, (n, k))
        x.reshape(-1)[:2] = [-32768, 32767][: x.size]
        bias = _bias(rng, n)
        if case % 4 < 2:            # small sums whose scaled values fall on halves
            x[...] = rng.integers(-3, 4, size=x.shape)
            bias = rng.integers(-9, 10, size=n, dtype=np.int64)
        scale = [np.full(1, 0.5), np.full(n, 2.0 ** -3), rng.uniform(1e-7, 1e-5, n), np.full(1, 1e3)][case % 4]
        kw_args = dict(scale=scale, act_min=-32768, act_max=int(rng.choice([32767, 100])))
        out = np.empty((m, n), np.int16)
        int16x8.fully_connected_16x8(x, w, bias, out=out, **kw_args)
        rerun = int16_calls.bind_fully_connected16(x, w, bias, out=out, **kw_args)
        assert rerun is not None
        for _ in range(2):
            w[...] = random_int8(rng, w.shape)
            rerun()
            np.testing.assert_array_equal(out, int16x8.fully_connected_16x8(x, w, bias, **kw_args))


def test_a_shift_out_of_range_fails_the_rerun() -> None:
    """A per-channel shift rewritten past 14 after binding: the C kernel refuses it (EINVAL
    for the job), as the numpy kernel does."""
    from firmware_sim.errors import InvalidCommand
    x, wt = np.ones((1, 2, 2, 2), np.int16), np.ones((3, 1, 1, 2), np.int8)
    mult, shift = np.full(3, 1 << 30, np.int32), np.full(3, -3, np.int32)
    kw_args = dict(stride=(1, 1), dilation=(1, 1), padding=(0, 0), out_hw=(2, 2), multiplier=mult, shift=shift,
                   act_min=-32768, act_max=32767)
    out = np.empty((1, 2, 2, 3), np.int16)
    rerun = int16_calls.bind_conv16(x, wt, None, depthwise=False, out=out, **kw_args)
    assert rerun is not None
    shift[1] = 15
    with pytest.raises(InvalidCommand):
        rerun()
    with pytest.raises(InvalidCommand):
        int16x8.conv2d_16x8(x, wt, None, **kw_args)


def _broadcast_shapes(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    rank = int(rng.integers(1, 7))
    full = tuple(int(v) for v in rng.integers(1, 6, size=rank))
    a = tuple(d if rng.random() < 0.6 else 1 for d in full)
    b = tuple(d if rng.random() < 0.6 else 1 for d in full)[int(rng.integers(0, rank)):]
    return a, b


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "add per channel"])
def test_int16_add_and_mul_rerun_in_c_as_numpy_computes(kind: str) -> None:
    """Broadcast shapes up to rank 6, int16 extremes, every right shift (ADD, SUB) and left and
    right shifts (MUL), one requantization per output channel (ADD16_PER_CHANNEL). SUB's numpy
    kernel is LiteRT's (tests/firmware_sim/test_int16x8.py); it ran in numpy alone before."""
    rng = np.random.default_rng(43 + len(kind))
    for _ in range(40):
        sa, sb = _broadcast_shapes(rng)
        shape = np.broadcast_shapes(sa, sb)
        a = _extremes(random_int16(rng, sa), [-32768, 32767])
        b = _extremes(random_int16(rng, sb), [-32768, -32768])
        out = np.empty(shape, np.int16)
        clamp = dict(act_min=int(rng.choice([-32768, -2000])), act_max=int(rng.choice([32767, 3000])))
        rows = shape[-1] if kind == "add per channel" else 1
        mult = rng.integers(0, 1 << 31, size=(rows, 3), dtype=np.int64)
        shift = rng.integers(-31, 1, size=(rows, 3))
        params = np.stack([mult[:, 0], shift[:, 0], mult[:, 1], shift[:, 1], mult[:, 2], shift[:, 2]], 1)
        params = params.astype(np.int32)
        if kind == "mul":
            kw = dict(multiplier=int(mult[0, 0]), shift=int(rng.integers(-31, 31)), **clamp)
            params = np.array([[kw["multiplier"], kw["shift"]]], np.int32)
            fn = int16x8.mul_int16
            rerun_args: dict = dict(clamp)
        elif kind in ("add", "sub"):
            kw = dict(left_shift=15, input1_multiplier=int(params[0, 0]), input1_shift=int(params[0, 1]),
                      input2_multiplier=int(params[0, 2]), input2_shift=int(params[0, 3]),
                      output_multiplier=int(params[0, 4]), output_shift=int(params[0, 5]), **clamp)
            fn = int16x8.add_int16 if kind == "add" else int16x8.sub_int16
            rerun_args = dict(left_shift=15, **clamp)
        else:
            kw = dict(left_shift=int(rng.integers(0, 17)), params=params, **clamp)
            fn = int16x8.add_int16_per_channel
            rerun_args = dict(left_shift=kw["left_shift"], **clamp)
        fn(a, b, out=out, **kw)
        rerun = int16_calls.bind_binary16(kind.split()[0], a, b, out, params, **rerun_args)
        assert rerun is not None
        a[...] = random_int16(rng, sa)
        b[...] = _extremes(random_int16(rng, sb), [32767])
        rerun()
        np.testing.assert_array_equal(out, fn(a, b, **kw))
