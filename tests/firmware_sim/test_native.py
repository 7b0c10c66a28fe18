"""The C kernels: built and cached as promised, and equal to the numpy paths byte for byte
on parameters LiteRT's tests rarely reach (int32 wrap-around, left shifts, huge biases,
per-tensor and per-channel, batches). The LiteRT comparisons run on both paths through the
``kernel_backend`` fixture."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from firmware_sim.errors import InvalidCommand
from firmware_sim.kernels import native
from firmware_sim.kernels.conv import conv2d, depthwise_conv2d, depthwise_conv2d_bound
from firmware_sim.kernels.fully_connected import fully_connected, fully_connected_bound
from npu_hw.ops import PADDING_SAME, conv_geometry
from tests.support.quant_utils import random_int8


def both(fn, *args, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    with native.enabled(True):
        assert native.library() is not None
        fast = fn(*args, **kwargs)
    with native.enabled(False):
        slow = fn(*args, **kwargs)
    return fast, slow


def random_requant(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    size = n if rng.random() < 0.5 else 1
    mult = rng.integers(1 << 30, (1 << 31) - 1, size=size, dtype=np.int64).astype(np.int32)
    # Mostly right shifts as real layers have; sometimes left shifts (scale > 1).
    shift = rng.integers(-31, 1, size=size).astype(np.int32)
    if rng.random() < 0.2:
        shift = rng.integers(0, 8, size=size).astype(np.int32)
    return mult, shift


@pytest.mark.parametrize("seed", range(25))
def test_conv_native_equals_numpy(seed: int) -> None:
    """200 cases: oneDNN's GEMM with the requantization in C against the numpy path: 1x1
    (direct and strided), 3x3, dilated, grouped, batches, filter rows under and over the
    64 bytes im2col moves in one masked store; biases up to the size where a sum could wrap
    int32 (the C path then declines and numpy runs, so both still agree)."""
    assert native.has_dnnl(), f"oneDNN convolution missing: {native.dnnl_missing()}"
    rng = np.random.default_rng(9000 + seed)
    for _ in range(8):
        n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 24)), int(rng.integers(1, 24))
        groups = 1 if rng.random() < 0.7 else int(rng.choice([2, 3, 4]))
        cin_g, cout_g = int(rng.integers(1, 40)), int(rng.integers(1, 24))
        kh, kw = (1, 1) if rng.random() < 0.4 else (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        # Dilated rows with undilated columns too: im2col's one-move path steps rows by it.
        dilation = (1, 1) if rng.random() < 0.6 else (int(rng.integers(1, 4)), int(rng.choice([1, 1, 2])))
        oh, pt = conv_geometry(h, kh, stride[0], dilation[0], PADDING_SAME)
        ow, pl = conv_geometry(w, kw, stride[1], dilation[1], PADDING_SAME)
        if rng.random() < 0.3:
            oh, ow, pt, pl = (h - 1) // stride[0] + 1, (w - 1) // stride[1] + 1, 0, 0
            kh = kw = 1
        cout = cout_g * groups
        x = random_int8(rng, (n, h, w, cin_g * groups))
        wt = random_int8(rng, (cout, kh, kw, cin_g))
        limit = 1 << int(rng.choice([20, 20, 20, 31]))
        bias = rng.integers(-limit, limit, size=cout, dtype=np.int64).astype(np.int32)
        mult, shift = random_requant(rng, cout)
        if rng.random() < 0.7:   # a real layer's scale: outputs spread over int8, not clamped
            shift = rng.integers(-16, -5, size=shift.size).astype(np.int32)
        kw_args = dict(stride=stride, dilation=dilation, padding=(pt, pl), out_hw=(oh, ow),
                       input_zp=int(rng.integers(-128, 128)), output_zp=int(rng.integers(-128, 128)),
                       multiplier=mult, shift=shift, act_min=-128, act_max=int(rng.integers(0, 128)))
        fast, slow = both(conv2d, x, wt, bias if rng.random() < 0.8 else None, **kw_args)
        np.testing.assert_array_equal(fast, slow)


@pytest.mark.parametrize("seed", range(20))
def test_depthwise_native_equals_numpy(seed: int) -> None:
    """200 cases: the C loops (pairs of taps in AVX-512 registers for one output per channel,
    the per-pixel loop for depth multipliers) against numpy, with channel counts below, at
    and across the 32-lane chunk, strides, dilations, batches and wrapping biases."""
    rng = np.random.default_rng(7000 + seed)
    for _ in range(10):
        n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 20)), int(rng.integers(1, 20))
        cin, dm = int(rng.integers(1, 40)), int(rng.choice([1, 1, 2, 4]))
        if rng.random() < 0.25:
            cin = int(rng.choice([48, 64, 96, 100, 130]))
        kh, kw = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        oh, pt = conv_geometry(h, kh, stride[0], dilation[0], PADDING_SAME)
        ow, pl = conv_geometry(w, kw, stride[1], dilation[1], PADDING_SAME)
        x = random_int8(rng, (n, h, w, cin))
        wt = random_int8(rng, (1, kh, kw, cin * dm))
        # Biases near the int32 limits make acc + bias wrap, as TFLite's int32 sum does.
        bias = rng.integers(-(1 << 31), 1 << 31, size=cin * dm, dtype=np.int64).astype(np.int32)
        mult, shift = random_requant(rng, cin * dm)
        kw_args = dict(stride=stride, dilation=dilation, padding=(pt, pl), out_hw=(oh, ow),
                       input_zp=int(rng.integers(-128, 128)), output_zp=int(rng.integers(-128, 128)),
                       multiplier=mult, shift=shift, act_min=-128, act_max=int(rng.integers(0, 128)))
        fast, slow = both(depthwise_conv2d, x, wt, bias if rng.random() < 0.8 else None, **kw_args)
        np.testing.assert_array_equal(fast, slow)


@pytest.mark.parametrize("seed", range(4))
def test_requantization_in_c_equals_numpy_at_the_extremes(seed: int) -> None:
    """The C store loop (AVX-512 lanes, or the scalar loop elsewhere) against numpy's
    gemmlowp arithmetic, 50 cases per seed: 1x1 depthwise layers whose accumulators are the
    bias itself (input at the zero point) or near it, with biases, multipliers (INT32_MIN,
    negative) and shifts over their whole int32 / [-31, 30] ranges, and channel counts
    around the 16-lane width."""
    rng = np.random.default_rng(6100 + seed)
    extremes = np.array([-(1 << 31), (1 << 31) - 1, 0, 1, -1, 1 << 30, -(1 << 30)], np.int64)
    for _ in range(50):
        cin, h, w = int(rng.choice([1, 15, 16, 17, 31, 33, 64, 70])), int(rng.integers(1, 4)), int(rng.integers(1, 5))
        zp = int(rng.integers(-128, 128))
        x = random_int8(rng, (1, h, w, cin))
        if rng.random() < 0.5:
            x[...] = np.int8(zp)                   # every accumulator is its bias
        bias = rng.integers(-(1 << 31), 1 << 31, size=cin, dtype=np.int64)
        mult = rng.integers(-(1 << 31), 1 << 31, size=cin if rng.random() < 0.7 else 1, dtype=np.int64)
        for values in (bias, mult):
            picks = rng.integers(0, values.size, size=max(1, values.size // 3))
            values[picks] = rng.choice(extremes, size=picks.size)
        shift = rng.integers(-31, 31, size=mult.size).astype(np.int32)
        lo = int(rng.integers(-128, 128))
        kw_args = dict(stride=(1, 1), dilation=(1, 1), padding=(0, 0), out_hw=(h, w), input_zp=zp,
                       output_zp=int(rng.integers(-128, 128)), multiplier=mult.astype(np.int32), shift=shift,
                       act_min=lo, act_max=int(rng.integers(lo, 128)))
        fast, slow = both(depthwise_conv2d, x, random_int8(rng, (1, 1, 1, cin)), bias.astype(np.int32), **kw_args)
        np.testing.assert_array_equal(fast, slow)


@pytest.mark.parametrize("seed", range(12))
def test_fully_connected_native_equals_numpy(seed: int) -> None:
    rng = np.random.default_rng(8000 + seed)
    for _ in range(10):
        m, k, n = int(rng.integers(1, 20)), int(rng.integers(1, 3000)), int(rng.integers(1, 80))
        x, w = random_int8(rng, (m, k)), random_int8(rng, (n, k))
        bias = rng.integers(-(1 << 31), 1 << 31, size=n, dtype=np.int64).astype(np.int32)
        mult, shift = random_requant(rng, n)
        scale = mult.astype(np.float64) * np.exp2(shift.astype(np.float64) - 31)
        kw_args = dict(input_zp=int(rng.integers(-128, 128)), output_zp=int(rng.integers(-128, 128)),
                       multiplier=mult, shift=shift, act_min=int(rng.integers(-128, 0)), act_max=127)
        b = bias if rng.random() < 0.8 else None
        for s in (None, scale):
            fast, slow = both(fully_connected, x, w, b, scale=s, **kw_args)
            np.testing.assert_array_equal(fast, slow)


def test_int32_accumulator_wraps_like_tflite() -> None:
    # 70,000 products of 255 * 127 overflow int32: both paths wrap the sum.
    k = 70_000
    x = np.full((1, k), 127, np.int8)
    w = np.full((5, k), 127, np.int8)          # four rows at once, and one more
    kw_args = dict(input_zp=-128, output_zp=0, multiplier=np.array([1 << 30], np.int32),
                   shift=np.array([-20], np.int32))
    fast, slow = both(fully_connected, x, w, None, **kw_args)
    np.testing.assert_array_equal(fast, slow)
    wrapped = np.int64(255 * 127 * k)
    wrapped = (wrapped + (1 << 31)) % (1 << 32) - (1 << 31)
    assert wrapped < 0 and (fast < 0).all()     # the wrapped sum is negative


def test_non_contiguous_inputs_and_outputs() -> None:
    rng = np.random.default_rng(3)
    x = random_int8(rng, (4, 64))[:, ::2]
    w = random_int8(rng, (10, 64))[:, 1::2]
    out = np.zeros((4, 20), np.int8)[:, ::2]
    kw_args = dict(input_zp=5, output_zp=-3, multiplier=np.array([1 << 30], np.int32),
                   shift=np.array([-8], np.int32))
    with native.enabled(True):
        got = fully_connected(x, w, None, out=out, **kw_args)
    assert got is out
    with native.enabled(False):
        np.testing.assert_array_equal(out, fully_connected(x, w, None, **kw_args))


def test_read_only_output_is_refused() -> None:
    x, w = np.zeros((1, 8), np.int8), np.zeros((2, 8), np.int8)
    out = np.zeros((1, 2), np.int8)
    out.flags.writeable = False
    for enabled in (True, False):
        with native.enabled(enabled), pytest.raises(ValueError):
            fully_connected(x, w, None, input_zp=0, output_zp=0, out=out,
                            multiplier=np.array([1 << 30], np.int32), shift=np.array([-3], np.int32))


def test_bad_requantization_parameters_are_refused() -> None:
    x, w = np.zeros((1, 8), np.int8), np.zeros((2, 8), np.int8)
    with native.enabled(True):
        with pytest.raises(ValueError, match="shift"):
            fully_connected(x, w, None, input_zp=0, output_zp=0,
                            multiplier=np.array([1 << 30]), shift=np.array([31]))
        for kernel_shift in (np.array([-32], np.int32), np.array([0, 31], np.int32)):
            with pytest.raises(ValueError, match="shift"):      # checked in C
                fully_connected(x, w, None, input_zp=0, output_zp=0,
                                multiplier=np.full(kernel_shift.shape, 1 << 30, np.int32),
                                shift=kernel_shift)
        xd, wd = np.zeros((1, 3, 3, 2), np.int8), np.zeros((1, 1, 1, 2), np.int8)
        with pytest.raises(ValueError, match="shift"):
            depthwise_conv2d(xd, wd, None, stride=(1, 1), dilation=(1, 1), padding=(0, 0),
                             out_hw=(3, 3), input_zp=0, output_zp=0,
                             multiplier=np.array([1, 1], np.int32),
                             shift=np.array([-3, 40], np.int32))
        with pytest.raises(ValueError, match="multiplier"):
            fully_connected(x, w, None, input_zp=0, output_zp=0,
                            multiplier=np.array([1 << 33]), shift=np.array([0]))


def test_build_is_cached_by_content(tmp_path) -> None:
    env = {**os.environ, "NPU_CACHE_DIR": str(tmp_path)}
    code = "from firmware_sim.kernels.native import build; print(build())"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    built = (tmp_path / "native").iterdir()
    assert [p.name for p in built] == [os.path.basename(first)]
    mtime = os.stat(first).st_mtime_ns
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert again == first and os.stat(first).st_mtime_ns == mtime   # not rebuilt


def test_turned_off_by_environment() -> None:
    code = ("from firmware_sim.kernels import native; "
            "print(native.library() is None)")
    env = {**os.environ, "NPU_NATIVE_KERNELS": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "True"


def test_without_onednn_convolutions_take_the_numpy_path(tmp_path) -> None:
    """A library built without oneDNN (as on a machine without libdnnl-dev) is a separate
    cache entry, says why, and its convolutions still give the same bytes (numpy path).
    The one with oneDNN is the suite's own (the default cache): a second C build of it
    here would check nothing more."""
    code = ("import os\n"
            "import numpy as np\n"
            "from firmware_sim.kernels import native\n"
            "from firmware_sim.kernels.conv import conv2d\n"
            "rng = np.random.default_rng(3)\n"
            "x = rng.integers(-128, 128, (1, 5, 5, 3), dtype=np.int8)\n"
            "w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)\n"
            "y = conv2d(x, w, None, stride=(1, 1), dilation=(1, 1), padding=(1, 1), out_hw=(5, 5),\n"
            "           input_zp=3, output_zp=-2, multiplier=np.array([1 << 30], np.int32),\n"
            "           shift=np.array([-8], np.int32))\n"
            "print(native.has_dnnl(), native.dnnl_missing(), y.tobytes().hex(), os.path.basename(native.build()))\n")
    env = {**os.environ, "NPU_CACHE_DIR": str(tmp_path), "NPU_NATIVE_DNNL": "0"}
    without = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
    assert without[:2] == ["False", "NPU_NATIVE_DNNL=0"]
    env = {k: v for k, v in os.environ.items() if k != "NPU_NATIVE_DNNL"}
    with_dnnl = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, check=True).stdout.split()
    assert with_dnnl[:2] == ["True", "None"] and with_dnnl[2] == without[2]
    assert [p.name for p in (tmp_path / "native").iterdir()] == [without[3]] and without[3] != with_dnnl[3]


def test_bound_calls_rerun_on_the_arrays_current_contents() -> None:
    """A bound call (what the chip keeps per task) computes from the operands' memory at
    each call, and is only offered when no operand had to be copied."""
    rng = np.random.default_rng(5)
    x, w = random_int8(rng, (2, 48)), random_int8(rng, (12, 48))
    bias = rng.integers(-500, 500, 12).astype(np.int32)
    mult, shift = random_requant(rng, 12)
    out = np.zeros((2, 12), np.int8)
    kw_args = dict(input_zp=-4, output_zp=6, act_min=-100, act_max=110)
    with native.enabled(True):
        bound = fully_connected_bound(x, w, bias, multiplier=mult, shift=shift, out=out, **kw_args)
        assert bound is not None and bound.uses((x, w, bias, mult, shift, None, out))
        assert not bound.uses((x.copy(), w, bias, mult, shift, None, out))
        x[:] = random_int8(rng, x.shape)
        mult[:] = mult // 2 + (1 << 29)
        bound()
        expected = fully_connected(x, w, bias, multiplier=mult, shift=shift, **kw_args)
        np.testing.assert_array_equal(out, expected)
        shift[0] = 40                                  # bad data is still refused, in C
        with pytest.raises(ValueError, match="shift"):
            bound()
        shift[0] = -3
        # An operand that must be converted (strided) cannot be bound; the result is right.
        assert fully_connected_bound(x[:, ::2], w[:, ::2], bias, multiplier=mult, shift=shift,
                                     out=out, **kw_args) is None
        np.testing.assert_array_equal(out, fully_connected(x[:, ::2], w[:, ::2], bias,
                                                           multiplier=mult, shift=shift, **kw_args))
        xd, wd = random_int8(rng, (1, 6, 5, 4)), random_int8(rng, (1, 3, 3, 8))
        geometry = dict(stride=(1, 2), dilation=(1, 1), padding=(1, 1), out_hw=(6, 3),
                        input_zp=3, output_zp=-2, multiplier=mult[:8].copy(), shift=shift[:8].copy())
        outd = np.zeros((1, 6, 3, 8), np.int8)
        bound = depthwise_conv2d_bound(xd, wd, None, out=outd, **geometry)
        xd[:] = random_int8(rng, xd.shape)
        bound()
        np.testing.assert_array_equal(outd, depthwise_conv2d(xd, wd, None, **geometry))
    with native.enabled(False):                         # the numpy path binds nothing
        assert fully_connected_bound(x, w, bias, multiplier=mult, shift=shift, out=out,
                                     **kw_args) is None


def test_add_and_mul_reruns_through_their_table_in_c() -> None:
    """The rerun of an ADD / MUL (its 64K table looked up in C) gives the numpy kernel's
    bytes for the operands' new contents."""
    from firmware_sim.kernels import elementwise
    rng = np.random.default_rng(21)
    params = {"add": dict(input1_zp=3, input2_zp=-7, output_zp=1, left_shift=20,
                          input1_multiplier=1 << 30, input1_shift=-1, input2_multiplier=1_500_000_000,
                          input2_shift=-2, output_multiplier=1_800_000_000, output_shift=-18,
                          act_min=-100, act_max=127),
              "mul": dict(input1_zp=3, input2_zp=-7, output_zp=1, multiplier=1_300_000_000, shift=-9,
                          act_min=-128, act_max=127)}
    for kind, kw in params.items():
        a, b = random_int8(rng, (1, 9, 9, 16)), random_int8(rng, (1, 9, 9, 16))
        out = np.empty_like(a)
        rerun = elementwise.binary_bound(kind, a, b, out=out, **kw)     # first use: no table yet
        rerun = rerun or elementwise.binary_bound(kind, a, b, out=out, **kw)
        assert rerun is not None
        for _ in range(3):
            a[...], b[...] = random_int8(rng, a.shape), random_int8(rng, b.shape)
            rerun()
            with native.enabled(False):
                np.testing.assert_array_equal(out, getattr(elementwise, kind)(a, b, **kw))


@pytest.mark.parametrize("seed", range(4))
def test_table_lookup_in_c_equals_numpy(seed: int) -> None:
    """The C lookup of a binary op's 64K table (AVX-512 gathers, then the scalar tail)
    against numpy's, 50 cases per seed: random tables, sizes around the 16-lane width and
    operands that hit the table's first and last entries."""
    from firmware_sim.kernels import binary_table
    from firmware_sim.kernels.native import calls
    rng = np.random.default_rng(3300 + seed)
    for _ in range(50):
        n = int(rng.choice([1, 15, 16, 17, 31, 33, 1000, int(rng.integers(1, 20000))]))
        a, b = random_int8(rng, (n,)), random_int8(rng, (n,))
        a[: min(n, 2)] = b[: min(n, 2)] = [0, -1][: min(n, 2)]      # entries 0 and 0xFFFF
        table = random_int8(rng, (1 << 16,))
        out = np.empty(n, np.int8)
        rerun = calls.bind_table2(a, b, table, out)
        assert rerun is not None
        rerun()
        np.testing.assert_array_equal(out, binary_table.lookup(table, a, b, (n,)))


@pytest.mark.parametrize("seed", range(4))
def test_max_pool_reruns_in_c_as_numpy_computes(seed: int) -> None:
    """MAX_POOL_2D's C rerun against the numpy kernel on new operand contents, 50 cases per
    seed: padded and overlapping windows, strides, activation clamps, batches; a window
    outside the image fails in C as in numpy."""
    from firmware_sim.kernels import pooling
    rng = np.random.default_rng(8800 + seed)
    for _ in range(50):
        fh, fw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        h, w = int(rng.integers(fh, 14)), int(rng.integers(fw, 14))
        pt, pl = int(rng.integers(0, fh)), int(rng.integers(0, fw))
        oh, ow = (h + 2 * pt - fh) // sh + 1, (w + 2 * pl - fw) // sw + 1
        lo = int(rng.integers(-128, 0))
        kw = dict(filter_hw=(fh, fw), stride=(sh, sw), padding=(pt, pl), out_hw=(oh, ow), act_min=lo,
                  act_max=int(rng.integers(lo, 128)))
        x = random_int8(rng, (int(rng.integers(1, 3)), h, w, int(rng.choice([1, 3, 16, 33]))))
        out = np.empty((x.shape[0], oh, ow, x.shape[3]), np.int8)
        rerun = pooling.max_pool2d_bound(x, out=out, **kw)
        assert rerun is not None
        x[...] = random_int8(rng, x.shape)
        out[...] = 0
        rerun()
        np.testing.assert_array_equal(out, pooling.max_pool2d(x, **kw))
    # A window past the image (the unit's geometry checks refuse it first): C refuses it too.
    from firmware_sim.kernels.native import calls
    outside = calls.bind_pool("max", random_int8(rng, (1, 4, 4, 2)), np.empty((1, 1, 1, 2), np.int8),
                              (2, 2), (9, 9), (-8, -8), -128, 127)
    assert outside is not None
    with pytest.raises(InvalidCommand):
        outside()


def test_avg_pool_and_conversions_rerun_in_c_as_numpy_computes() -> None:
    """AVERAGE_POOL_2D, QUANTIZE and DEQUANTIZE reruns (C) against the numpy kernels, on new
    operand contents: padded windows, negative sums, ties, NaN/huge floats, zero points."""
    from firmware_sim.kernels import elementwise, pooling
    rng = np.random.default_rng(31)
    for filt, stride, pad, hw in [((3, 3), (2, 2), (1, 1), (9, 9)), ((5, 5), (5, 5), (0, 0), (10, 10)),
                                  ((2, 3), (1, 2), (1, 1), (6, 7))]:
        oh = (hw[0] + 2 * pad[0] - filt[0]) // stride[0] + 1
        ow = (hw[1] + 2 * pad[1] - filt[1]) // stride[1] + 1
        x = random_int8(rng, (2, *hw, 5))
        out = np.empty((2, oh, ow, 5), np.int8)
        kw = dict(filter_hw=filt, stride=stride, padding=pad, out_hw=(oh, ow), act_min=-100, act_max=120)
        rerun = pooling.avg_pool2d_bound(x, out=out, **kw)
        assert rerun is not None
        for _ in range(3):
            x[...] = random_int8(rng, x.shape)
            rerun()
            np.testing.assert_array_equal(out, pooling.avg_pool2d(x, **kw))
    f = rng.normal(0, 40, 4096).astype(np.float32)
    f[:6] = [np.nan, np.inf, -np.inf, 3e9, -3e9, 2.5]
    q = np.empty(f.shape, np.int8)
    for scale, zp in [(0.5, -5), (0.37, 3), (1e-3, -128)]:
        rerun = elementwise.convert_bound(f, scale=scale, zero_point=zp, out=q)
        rerun()
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(q, elementwise.quantize(f, scale=scale, zero_point=zp))
        d = np.empty(q.shape, np.float32)
        elementwise.convert_bound(q, scale=scale, zero_point=zp, out=d)()
        np.testing.assert_array_equal(d, elementwise.dequantize(q, scale=scale, zero_point=zp))


@pytest.mark.parametrize("seed", range(4))
def test_quantize_in_c_equals_numpy_on_ties_and_extremes(seed: int) -> None:
    """QUANTIZE's vectorized C loop (roundf done as truncation plus a half test) against the
    numpy kernel, 50 cases per seed: scales from 1e-6 to 1e3, every zero point, values on
    exact ties (powers-of-two scales), at the int32 limits, infinities, NaN and denormals."""
    from firmware_sim.kernels import elementwise
    rng = np.random.default_rng(5200 + seed)
    for _ in range(50):
        n = int(rng.integers(1, 3000))
        if rng.random() < 0.3:
            scale = float(2.0 ** int(rng.integers(-8, 4)))    # x / scale exact: ties stay ties
            f = (rng.integers(-600, 600, n) * 0.5 * scale).astype(np.float32)
        else:
            scale = float(10 ** rng.uniform(-6, 3))
            f = (rng.normal(0, 1, n) * 10 ** rng.uniform(-3, 4) * scale).astype(np.float32)
        picks = rng.integers(0, n, size=min(n, 8))
        f[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf, 2.1e9 * scale, -2.2e9 * scale,
                                        3e38, 1e-45, -0.0], np.float32), size=picks.size)
        zp = int(rng.integers(-128, 128))
        q = np.empty(f.shape, np.int8)
        rerun = elementwise.convert_bound(f, scale=scale, zero_point=zp, out=q)
        assert rerun is not None
        q[...] = 0
        rerun()
        with np.errstate(invalid="ignore", over="ignore"):
            np.testing.assert_array_equal(q, elementwise.quantize(f, scale=scale, zero_point=zp))


@pytest.mark.parametrize("seed", range(4))
def test_softmax_reruns_in_c_as_numpy_computes(seed: int) -> None:
    """Softmax's C rerun (gemmlowp reciprocal in C) against the numpy kernel: random
    betas and input scales, rows from 1 to 64 of depths 1 to 256, random and flat rows;
    a row whose sum passes 2**8 fails in C as in numpy (TFLite aborts there)."""
    from firmware_sim.kernels import activations
    from npu_hw.fixedpoint import softmax_params
    rng = np.random.default_rng(4100 + seed)
    for _ in range(12):
        rows, depth = int(rng.integers(1, 65)), int(rng.choice([1, 2, 10, 100, 256]))
        mult, shift, diff_min = softmax_params(float(rng.uniform(0.1, 4)), float(rng.uniform(0.005, 0.5)))
        kw = dict(input_beta_multiplier=mult, input_beta_left_shift=shift, diff_min=diff_min)
        x = random_int8(rng, (rows, depth))
        out = np.empty_like(x)
        rerun = activations.softmax_bound(x, out=out, **kw)
        assert rerun is not None
        for _ in range(2):
            x[...] = random_int8(rng, x.shape) if rng.random() < 0.5 else np.int8(rng.integers(-128, 128))
            rerun()
            np.testing.assert_array_equal(out, activations.softmax(x, **kw))
    mult, shift, diff_min = softmax_params(1.0, 0.1)
    kw = dict(input_beta_multiplier=mult, input_beta_left_shift=shift, diff_min=diff_min)
    x = np.full((2, 1045), -128, np.int8)
    x[:, 0] = 127                                     # one peak: the sum is about 1
    rerun = activations.softmax_bound(x, out=np.empty_like(x), **kw)
    x[...] = 0                                        # 1045 equal logits: the sum is too large
    with pytest.raises(InvalidCommand):
        rerun()
    with pytest.raises(InvalidCommand):
        activations.softmax(x, **kw)


def test_warm_up_runs_every_c_kernel_and_leaves_no_cache_entry() -> None:
    """A core's start-up warm-up (the C kernels, then the self-test job through the
    executor): runs, twice, and leaves no job plan, decoded descriptor or table behind
    that a model could pick up: the self-test's state leaves by the invalidation path."""
    from firmware_sim import caches, job_plans
    from firmware_sim.kernels import binary_table
    from firmware_sim.kernels.warm_up import warm_up
    from firmware_sim.units import common
    caches.clear()                      # as in a starting core
    warm_up()
    warm_up()
    assert not common._PLANS and not binary_table._tables and not job_plans._PLANS


def test_a_self_test_killed_midway_leaves_nothing_for_its_successor(tmp_path) -> None:
    """A chip killed during its self-test leaves its directory in the bus; the next chip's
    self-test removes it (the chaos test's shm leak after chip kills), and leaves none itself."""
    from firmware_sim.self_test import PREFIX, self_test
    stale = tmp_path / f"{PREFIX}dead"
    stale.mkdir()
    (stale / "bo1").write_bytes(b"\0" * 4096)
    other = tmp_path / "bo7"             # the bus's other files are not the self-test's
    other.write_bytes(b"")
    assert all(r.status == 0 for r in self_test(scratch=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bo7"]


def test_the_self_test_job_runs_every_task_decoded_and_replayed() -> None:
    from firmware_sim.self_test import self_test
    first, replayed = self_test()
    assert first.status == replayed.status == 0
    assert first.task_index == replayed.task_index == 10
