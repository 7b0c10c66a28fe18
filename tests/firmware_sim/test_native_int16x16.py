"""The C int16 x int16 kernels and int16 pooling (``native/int16x16_kernels.c``) against
``kernels.int16x16``'s and ``kernels.pooling``'s numpy kernels, byte for byte, rerun on new
contents: convolutions (grouped, strided, dilated, padded), depthwise (depth multipliers),
fully connected, average and max pooling; int16 extremes, sums saturated at 2**47, biases
past 2**62; a weight of -32768 written after binding is refused as numpy refuses it."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim.errors import InvalidCommand
from firmware_sim.kernels import int16x16, native, pooling
from firmware_sim.kernels.native import int16_calls
from npu_hw.ops import PADDING_SAME, PADDING_VALID, conv_geometry
from tests.support.quant_utils import random_int16

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C kernels")


def _weights(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    w = rng.integers(-32767, 32768, size=shape).astype(np.int16)
    w.reshape(-1)[:3] = [32767, -32767, 32767][: w.size]
    return w


def _requant(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    size = n if rng.random() < 0.6 else 1
    mult = rng.integers(0, 1 << 31, size=size, dtype=np.int64)
    mult[:1] = 0x7FFF0000
    return mult.astype(np.int32), rng.integers(-31, 15, size=size).astype(np.int32)


def _bias(rng: np.random.Generator, n: int) -> np.ndarray | None:
    if rng.random() < 0.2:
        return None
    reach = int(rng.choice([1 << 20, 1 << 46, 1 << 48, (1 << 63) - 1]))   # under, at and past the clips
    return rng.integers(-reach, reach, size=n, dtype=np.int64)


def _input(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = random_int16(rng, shape)
    x.reshape(-1)[:2] = [-32768, 32767][: x.size]
    return x


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_conv16x16_reruns_in_c_as_numpy_computes(depthwise: bool) -> None:
    rng = np.random.default_rng(60 + depthwise)
    for _ in range(25):
        n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
        cin = int(rng.integers(1, 40))
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        mode = PADDING_SAME if rng.random() < 0.7 else PADDING_VALID
        oh, pt = conv_geometry(h, kh, stride[0], dilation[0], mode)
        ow, pl = conv_geometry(w, kw, stride[1], dilation[1], mode)
        if oh < 1 or ow < 1:
            continue
        if depthwise:
            cout = cin * int(rng.choice([1, 1, 2]))
            wt = _weights(rng, (1, kh, kw, cout))
            fn = int16x16.depthwise_conv2d_16x16
        else:
            groups = int(rng.choice([g for g in (1, 2, 3) if cin % g == 0]))
            cout = groups * int(rng.integers(1, 6))
            wt = _weights(rng, (cout, kh, kw, cin // groups))
            fn = int16x16.conv2d_16x16
        x, bias = _input(rng, (n, h, w, cin)), _bias(rng, cout)
        mult, shift = _requant(rng, cout)
        kw_args = dict(stride=stride, dilation=dilation, padding=(pt, pl), out_hw=(oh, ow), multiplier=mult,
                       shift=shift, act_min=int(rng.choice([-32768, -1000])), act_max=int(rng.choice([32767, 500])))
        out = np.empty((n, oh, ow, cout), np.int16)
        fn(x, wt, bias, out=out, **kw_args)
        rerun = int16_calls.bind_conv16(x, wt, bias, depthwise=depthwise, out=out, **kw_args)
        assert rerun is not None
        x[...] = _input(rng, x.shape)
        wt[...] = _weights(rng, wt.shape)
        rerun()
        np.testing.assert_array_equal(out, fn(x, wt, bias, **kw_args))


def test_fully_connected16x16_reruns_in_c_as_numpy_computes() -> None:
    rng = np.random.default_rng(62)
    for _ in range(25):
        m, k, n = int(rng.integers(1, 4)), int(rng.integers(1, 300)), int(rng.integers(1, 30))
        x, w, bias = _input(rng, (m, k)), _weights(rng, (n, k)), _bias(rng, n)
        x[:, : k // 2] = -32768                 # long runs of extreme products: sums near 2**47
        w[:, : k // 2] = -32767
        scale = rng.uniform(1e-12, 1e-8, size=n if rng.random() < 0.5 else 1)
        kw_args = dict(scale=scale, act_min=-32768, act_max=int(rng.choice([32767, 100])))
        out = np.empty((m, n), np.int16)
        int16x16.fully_connected_16x16(x, w, bias, out=out, **kw_args)
        rerun = int16_calls.bind_fully_connected16(x, w, bias, out=out, **kw_args)
        assert rerun is not None
        x[...] = _input(rng, x.shape)
        rerun()
        np.testing.assert_array_equal(out, int16x16.fully_connected_16x16(x, w, bias, **kw_args))


def test_a_weight_of_minus_32768_fails_the_rerun() -> None:
    x, wt = np.ones((1, 2, 2, 2), np.int16), np.ones((3, 1, 1, 2), np.int16)
    kw_args = dict(stride=(1, 1), dilation=(1, 1), padding=(0, 0), out_hw=(2, 2),
                   multiplier=np.full(3, 1 << 30, np.int32), shift=np.full(3, -3, np.int32),
                   act_min=-32768, act_max=32767)
    out = np.empty((1, 2, 2, 3), np.int16)
    rerun = int16_calls.bind_conv16(x, wt, None, depthwise=False, out=out, **kw_args)
    assert rerun is not None
    wt[1, 0, 0, 1] = -32768
    with pytest.raises(InvalidCommand, match="symmetric"):
        rerun()
    with pytest.raises(InvalidCommand, match="symmetric"):
        int16x16.conv2d_16x16(x, wt, None, **kw_args)


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_int16_pooling_reruns_in_c_as_numpy_computes(kind: str) -> None:
    """Windows clipped by padding (the average over the in-image part), global pools,
    int16 extremes and clamps."""
    fn = pooling.avg_pool2d if kind == "avg" else pooling.max_pool2d
    rng = np.random.default_rng(64 + len(kind))
    for _ in range(30):
        n, c = int(rng.integers(1, 3)), int(rng.integers(1, 20))
        h, w = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        if rng.random() < 0.3:
            fh, fw, stride = h, w, (1, 1)
        else:
            fh, fw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        oh, pt = conv_geometry(h, fh, stride[0], 1, PADDING_SAME)
        ow, pl = conv_geometry(w, fw, stride[1], 1, PADDING_SAME)
        x = _input(rng, (n, h, w, c))
        kw_args = dict(filter_hw=(fh, fw), stride=stride, padding=(pt, pl), out_hw=(oh, ow),
                       act_min=int(rng.choice([-32768, -300])), act_max=int(rng.choice([32767, 400])))
        out = np.empty((n, oh, ow, c), np.int16)
        fn(x, out=out, **kw_args)
        rerun = int16_calls.bind_pool16(kind, x, out, kw_args["filter_hw"], stride, (pt, pl),
                                        kw_args["act_min"], kw_args["act_max"])
        assert rerun is not None
        x[...] = _input(rng, x.shape)
        rerun()
        np.testing.assert_array_equal(out, fn(x, **kw_args))


def test_int16_quantize_and_dequantize_rerun_in_c_as_numpy_computes() -> None:
    """Ties, quotients past int16 and int32, NaN and infinities, zero points at both ends."""
    from firmware_sim.kernels import int16x8
    from firmware_sim.kernels.native import calls
    rng = np.random.default_rng(66)
    for _ in range(20):
        n, scale, zp = int(rng.integers(1, 300)), float(rng.choice([1e-4, 0.5, 3.0])), int(rng.choice([-32768, 0, 77]))
        x = (rng.standard_normal(n) * rng.choice([1.0, 1e3, 1e12])).astype(np.float32)
        x[: min(n, 6)] = np.array([0.5, -2.5, np.nan, np.inf, -np.inf, 1e30], np.float32)[: min(n, 6)] * scale
        q = np.empty(n, np.int16)
        int16x8.quantize_int16(x, scale=scale, zero_point=zp, out=q)
        rerun = calls.bind_convert(x, q, scale, zp)
        assert rerun is not None
        x[...] = (rng.standard_normal(n) * 4e4 * scale).astype(np.float32)
        x[-min(n, 6):] = np.array([0.5, -2.5, np.nan, np.inf, -np.inf, 1e30], np.float32)[: min(n, 6)] * scale
        rerun()
        np.testing.assert_array_equal(q, int16x8.quantize_int16(x, scale=scale, zero_point=zp))
        f = np.empty(n, np.float32)
        int16x8.dequantize_int16(q, scale=scale, zero_point=zp, out=f)
        rerun = calls.bind_convert(q, f, scale, zp)
        assert rerun is not None
        q[...] = _input(rng, q.shape)
        rerun()
        np.testing.assert_array_equal(f, int16x8.dequantize_int16(q, scale=scale, zero_point=zp))


def test_int16_mul_lanes_rerun_as_numpy_computes() -> None:
    """The 8-lane per-tensor MUL of contiguous operands (``mul16_lanes``) and its scalar
    tail: every shift, multipliers at INT32_MIN, 0 and INT32_MAX, extreme products, clamps."""
    from firmware_sim.kernels import int16x8
    rng = np.random.default_rng(67)
    for case in range(40):
        n = int(rng.integers(1, 200))
        a, b = _input(rng, (n,)), _input(rng, (n,))
        a[: n // 3], b[: n // 3] = -32768, -32768                 # products of 2**30
        mult = int([-(1 << 31), 0, (1 << 31) - 1][case % 3]) if case < 9 else int(rng.integers(-(1 << 31), 1 << 31))
        shift = int(rng.integers(-31, 31))
        if case % 2:        # small products and shifts: outputs in range, halves to round away from zero
            a[n // 3:], b[n // 3:] = rng.integers(-9, 10, size=(2, n - n // 3))
            mult, shift = int(rng.choice([1 << 30, 3 << 29, -(1 << 30)])), int(rng.integers(-3, 2))
        clamp = dict(act_min=int(rng.choice([-32768, -2000])), act_max=int(rng.choice([32767, 3000])))
        out = np.empty(n, np.int16)
        int16x8.mul_int16(a, b, multiplier=mult, shift=shift, out=out, **clamp)
        rerun = int16_calls.bind_binary16("mul", a, b, out, np.array([[mult, shift]], np.int32), **clamp)
        assert rerun is not None
        a[n // 3:] = rng.permutation(a[n // 3:])
        rerun()
        np.testing.assert_array_equal(out, int16x8.mul_int16(a, b, multiplier=mult, shift=shift, **clamp),
                                      err_msg=f"m {mult} s {shift}")


def _split_extremes(w: np.ndarray) -> np.ndarray:
    """Weights whose high and low bytes reach their ends (w = 256 * hi + lo: hi -128 and 127,
    lo 0 and 255) beside random ones."""
    flat = w.reshape(-1)
    ends = np.array([-32767, 32767, -1, 255, 256, -256, -32513, 32512, 0], np.int16)
    flat[: min(flat.size, ends.size)] = ends[: flat.size]
    return w


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_conv16x16_lanes_compute_what_numpy_computes(depthwise: bool) -> None:
    """The AVX-512 paths (the filter split in high and low bytes, summed in int32 lanes):
    more than 16 output channels, depths past the int32 flush (> 256 products) and odd, 1x1
    stride-1 layers read in place, windows across the border or four in a row inside it, sums
    and biases that reach the 2**47 clip (the saturating requantization) or stay far from it
    (the folded one)."""
    rng = np.random.default_rng(68 + depthwise)
    done = 0
    while done < 24:
        kh = kw = int(rng.choice([1, 1, 3, 5]))
        wide = depthwise and kh == 5 and done % 2 == 0     # rows of 4 windows inside the image
        h, w = (int(rng.integers(5, 9)), int(rng.integers(9, 14))) if wide else rng.integers(1, 9, 2).tolist()
        stride = (1, 1) if (kh == 1 and rng.random() < 0.5) or wide else (int(rng.integers(1, 3)),) * 2
        dilation = (int(rng.choice([1, 1, 2])),) * 2
        mode = PADDING_SAME if rng.random() < 0.7 else PADDING_VALID
        oh, pt = conv_geometry(h, kh, stride[0], dilation[0], mode)
        ow, pl = conv_geometry(w, kw, stride[1], dilation[1], mode)
        if oh < 1 or ow < 1 or oh * ow < 4:         # fewer pixels take per-channel dot products
            continue
        if depthwise:
            cout = cin = int(rng.choice([16, 17, 40, 70]))
            wt = _split_extremes(_weights(rng, (1, kh, kw, cout)))
            fn = int16x16.depthwise_conv2d_16x16
        else:
            cin = int(rng.choice([3, 16, 33, 300]) if kh == 1 else rng.choice([3, 7, 16]))
            cout = int(rng.choice([1, 16, 17, 40]))
            wt = _split_extremes(_weights(rng, (cout, kh, kw, cin)))
            fn = int16x16.conv2d_16x16
        x = _input(rng, (1, h, w, cin))
        if rng.random() < 0.3:                      # long runs of extreme products
            x[...], wt[...] = -32768, -32767
        reach = int(rng.choice([1 << 20, (1 << 47) - (1 << 38), 1 << 62]))
        bias = None if rng.random() < 0.2 else rng.integers(-reach, reach, size=cout, dtype=np.int64)
        mult, shift = _requant(rng, cout)
        kw_args = dict(stride=stride, dilation=dilation, padding=(pt, pl), out_hw=(oh, ow), multiplier=mult,
                       shift=shift, act_min=int(rng.choice([-32768, -1000])), act_max=int(rng.choice([32767, 500])))
        want = fn(x, wt, bias, **kw_args)
        out = np.empty_like(want)
        rerun = int16_calls.bind_conv16(x, wt, bias, depthwise=depthwise, out=out, **kw_args)
        assert rerun is not None
        rerun()
        np.testing.assert_array_equal(out, want, err_msg=f"{x.shape} {wt.shape} {stride} {dilation}")
        done += 1


def test_int16_batch_matmul_reruns_in_c_as_numpy_computes() -> None:
    """Either operand stored transposed, batch axes broadcast from either side, products of
    -32768 squared summed past 2**31, per-tensor requantization at its extremes, clamps."""
    from firmware_sim.kernels import matmul
    rng = np.random.default_rng(69)
    for case in range(30):
        rows, depth, cols = (int(v) for v in rng.integers(1, 12, size=3))
        batch = [int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 3)))]
        lhs_batch = [d if rng.random() < 0.6 else 1 for d in batch]
        rhs_batch = [d if rng.random() < 0.6 else 1 for d in batch]
        adj_x, adj_y = bool(case & 1), bool(case & 2)
        lhs = _input(rng, (*lhs_batch, *((depth, rows) if adj_x else (rows, depth))))
        rhs = _input(rng, (*rhs_batch, *((cols, depth) if adj_y else (depth, cols))))
        if case % 5 == 0:
            lhs[...], rhs[...] = -32768, -32768
        multiplier = int(rng.choice([0, 1 << 30, 0x7FFF0000, (1 << 31) - 1]))
        kw_args = dict(multiplier=multiplier, shift=int(rng.integers(-31, 15)), adj_x=adj_x, adj_y=adj_y,
                       act_min=int(rng.choice([-32768, -700])), act_max=int(rng.choice([32767, 900])))
        want = matmul.matmul_int16(lhs, rhs, **kw_args)
        out = np.empty_like(want)
        rerun = int16_calls.bind_matmul16(lhs, rhs, out, **kw_args)
        assert rerun is not None
        rerun()
        np.testing.assert_array_equal(out, want, err_msg=f"{lhs.shape} {rhs.shape} adj {adj_x} {adj_y}")
