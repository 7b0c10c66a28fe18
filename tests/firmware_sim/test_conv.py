"""conv2d and depthwise_conv2d against LiteRT BUILTIN_REF on random int8 cases."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels.conv import conv2d, depthwise_conv2d
from npu_hw.fixedpoint import fused_activation_range
from npu_hw.ops import PADDING_SAME, PADDING_VALID, conv_geometry
from tests.support.quant_utils import ACTIVATIONS, conv_multipliers, f32, log_uniform, random_int8
from tests.support.tflite_builder import TensorSpec, run_reference, single_op_model

SEEDS = range(25)
CASES_PER_SEED = 8  # 200 cases per op


def random_quant(rng: np.random.Generator, k: int, n_out: int) -> dict:
    per_channel = bool(rng.integers(2))
    in_scale = float(f32(log_uniform(rng, 1e-3, 0.2)))
    w_scales = f32(log_uniform(rng, 1e-3, 0.05, size=n_out if per_channel else 1))
    acc_scale = float(in_scale * np.max(w_scales))
    if rng.random() < 0.1:
        out_scale = acc_scale / rng.uniform(1.0, 4.0)  # multiplier > 1
    else:
        out_scale = acc_scale * 74 * 74 * np.sqrt(k) / 60 * rng.uniform(0.2, 4.0)
    return dict(in_scale=in_scale, in_zp=int(rng.integers(-128, 128)), w_scales=w_scales,
                out_scale=float(f32(out_scale)), out_zp=int(rng.integers(-128, 128)),
                activation=int(rng.choice(ACTIVATIONS)))


def random_bias(rng: np.random.Generator, k: int, n_out: int,
                optional: bool) -> np.ndarray | None:
    if optional and rng.random() < 0.2:
        return None
    spread = int(74 * 74 * np.sqrt(k))
    return rng.integers(-2 * spread, 2 * spread + 1, size=n_out).astype(np.int32)


def build(depthwise: bool, x_shape, w, bias, q, stride, dilation, padding_tfl, dm, out_shape):
    n_out = w.shape[0] if not depthwise else w.shape[3]
    qdim = 3 if depthwise else 0
    w_scales = list(q["w_scales"])
    tensors = [
        TensorSpec(x_shape, np.int8, [q["in_scale"]], [q["in_zp"]], name="x"),
        TensorSpec(w.shape, np.int8, w_scales, [0] * len(w_scales), qdim, w, "w"),
        TensorSpec(out_shape, np.int8, [q["out_scale"]], [q["out_zp"]], name="y"),
    ]
    inputs = [0, 1]  # no bias: two inputs (LiteRT refuses an absent third one)
    if bias is not None:
        bscales = [float(f32(q["in_scale"]) * f32(s)) for s in w_scales]
        tensors.append(TensorSpec((n_out,), np.int32, bscales, [0] * len(bscales), 0, bias, "b"))
        inputs.append(3)

    def options(b):
        if depthwise:
            tflite.DepthwiseConv2DOptionsStart(b)
            tflite.DepthwiseConv2DOptionsAddPadding(b, padding_tfl)
            tflite.DepthwiseConv2DOptionsAddStrideH(b, stride[0])
            tflite.DepthwiseConv2DOptionsAddStrideW(b, stride[1])
            tflite.DepthwiseConv2DOptionsAddDepthMultiplier(b, dm)
            tflite.DepthwiseConv2DOptionsAddFusedActivationFunction(b, q["activation"])
            tflite.DepthwiseConv2DOptionsAddDilationHFactor(b, dilation[0])
            tflite.DepthwiseConv2DOptionsAddDilationWFactor(b, dilation[1])
            return tflite.DepthwiseConv2DOptionsEnd(b)
        tflite.Conv2DOptionsStart(b)
        tflite.Conv2DOptionsAddPadding(b, padding_tfl)
        tflite.Conv2DOptionsAddStrideH(b, stride[0])
        tflite.Conv2DOptionsAddStrideW(b, stride[1])
        tflite.Conv2DOptionsAddFusedActivationFunction(b, q["activation"])
        tflite.Conv2DOptionsAddDilationHFactor(b, dilation[0])
        tflite.Conv2DOptionsAddDilationWFactor(b, dilation[1])
        return tflite.Conv2DOptionsEnd(b)

    if depthwise:
        op, opt_type = (tflite.BuiltinOperator.DEPTHWISE_CONV_2D,
                        tflite.BuiltinOptions.DepthwiseConv2DOptions)
    else:
        op, opt_type = tflite.BuiltinOperator.CONV_2D, tflite.BuiltinOptions.Conv2DOptions
    return single_op_model(op, tensors, inputs, [2], opt_type, options)


def random_conv_case(rng: np.random.Generator, depthwise: bool) -> dict:
    n = int(rng.integers(1, 3))
    h, w_ = int(rng.integers(1, 14)), int(rng.integers(1, 14))
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    dilation = (1, 1) if rng.random() < 0.6 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    same = bool(rng.integers(2))
    # VALID needs the dilated filter to fit.
    if not same:
        h = max(h, (kh - 1) * dilation[0] + 1)
        w_ = max(w_, (kw - 1) * dilation[1] + 1)
    # LiteRT's int8 CONV_2D insists on a bias; depthwise takes none too.
    if depthwise:
        cin = int(rng.integers(1, 17))
        dm = int(rng.choice([1, 1, 2, 3]))
        cout = cin * dm
        wt = random_int8(rng, (1, kh, kw, cout))
        k = kh * kw
    else:
        groups = 1 if rng.random() < 0.75 else int(rng.choice([2, 3, 4]))
        cin_g = int(rng.integers(1, 9))
        cin, dm = cin_g * groups, 1
        cout = groups * int(rng.integers(1, 9))
        wt = random_int8(rng, (cout, kh, kw, cin_g))
        k = kh * kw * cin_g
    pad = PADDING_SAME if same else PADDING_VALID
    oh, pt = conv_geometry(h, kh, stride[0], dilation[0], pad)
    ow, pl = conv_geometry(w_, kw, stride[1], dilation[1], pad)
    return dict(x=random_int8(rng, (n, h, w_, cin)), w=wt, bias=random_bias(rng, k, cout, depthwise),
                q=random_quant(rng, k, cout), stride=stride, dilation=dilation,
                padding_tfl=0 if same else 1, dm=dm, geometry=((pt, pl), (oh, ow)))


def run_case(c: dict, depthwise: bool) -> tuple[np.ndarray, np.ndarray]:
    x, q = c["x"], c["q"]
    (pt, pl), (oh, ow) = c["geometry"]
    n_out = c["w"].shape[3] if depthwise else c["w"].shape[0]
    out_shape = (x.shape[0], oh, ow, n_out)
    model = build(depthwise, x.shape, c["w"], c["bias"], q, c["stride"], c["dilation"],
                  c["padding_tfl"], c["dm"], out_shape)
    (expected,) = run_reference(model, x)
    mult, shift = conv_multipliers(q["in_scale"], q["w_scales"], q["out_scale"])
    act_min, act_max = fused_activation_range(q["activation"], q["out_scale"], q["out_zp"])
    fn = depthwise_conv2d if depthwise else conv2d
    got = fn(x, c["w"], c["bias"], stride=c["stride"], dilation=c["dilation"],
             padding=(pt, pl), out_hw=(oh, ow), input_zp=q["in_zp"], output_zp=q["out_zp"],
             multiplier=mult, shift=shift, act_min=act_min, act_max=act_max)
    return got, expected


@pytest.mark.parametrize("seed", SEEDS)
def test_conv2d_matches_reference(seed: int, kernel_backend: str) -> None:
    check_against_reference(seed, depthwise=False)   # oneDNN and numpy paths


@pytest.mark.parametrize("seed", SEEDS)
def test_depthwise_matches_reference(seed: int, kernel_backend: str) -> None:
    check_against_reference(seed, depthwise=True)   # C and numpy paths


def check_against_reference(seed: int, depthwise: bool) -> None:
    rng = np.random.default_rng(2000 + seed + (100 if depthwise else 0))
    for case_no in range(CASES_PER_SEED):
        c = random_conv_case(rng, depthwise)
        got, expected = run_case(c, depthwise)
        desc = (f"seed {seed} case {case_no}: x{c['x'].shape} w{c['w'].shape} "
                f"stride={c['stride']} dil={c['dilation']} pad={c['padding_tfl']} "
                f"geom={c['geometry']} bias={c['bias'] is not None} act={c['q']['activation']}")
        assert got.shape == expected.shape, desc
        diff = np.count_nonzero(got != expected)
        assert diff == 0, f"{desc}: {diff} of {got.size} bytes differ"


def test_out_parameter_and_errors() -> None:
    rng = np.random.default_rng(5)
    x, w = random_int8(rng, (1, 6, 6, 4)), random_int8(rng, (3, 3, 3, 4))
    mult, shift = conv_multipliers(0.05, np.full(3, 0.01), 0.5)
    kw = dict(stride=(1, 1), dilation=(1, 1), padding=(1, 1), out_hw=(6, 6), input_zp=-3,
              output_zp=4, multiplier=mult, shift=shift)
    out = np.empty((1, 6, 6, 3), np.int8)
    assert conv2d(x, w, None, out=out, **kw) is out
    np.testing.assert_array_equal(out, conv2d(x, w, None, **kw))
    zero_bias = conv2d(x, w, np.zeros(3, np.int32), **kw)
    np.testing.assert_array_equal(out, zero_bias)
    with pytest.raises(ValueError):
        conv2d(x, random_int8(rng, (3, 3, 3, 3)), None, **kw)  # 4 channels, groups of 3
    with pytest.raises(TypeError):
        conv2d(x.astype(np.int16), w, None, **kw)
    with pytest.raises(ValueError):
        depthwise_conv2d(x, random_int8(rng, (1, 3, 3, 6)), None, **kw)  # 6 % 4 != 0


def test_conv_uses_double_rounding() -> None:
    """Unlike FC, LiteRT's conv requantizes with gemmlowp's double rounding (the default
    ``TFLITE_SINGLE_ROUNDING=0`` build): a 1x1 conv with w=1 hits rounding ties."""
    from firmware_sim.kernels.fixedpoint import (
        multiply_by_quantized_multiplier,
        multiply_by_quantized_multiplier_single_round,
    )
    rng = np.random.default_rng(11)
    cout = 24
    x = random_int8(rng, (1, 8, 8, 1))
    w = np.ones((cout, 1, 1, 1), np.int8)
    bias = rng.integers(-5000, 5000, size=cout).astype(np.int32)
    w_scales = f32(rng.choice([1 / 2**7, 1 / 2**9, 3 / 2**10, 0.00664328], size=cout))
    q = dict(in_scale=0.5, in_zp=0, w_scales=w_scales, out_scale=0.25, out_zp=0, activation=0)
    model = build(False, x.shape, w, bias, q, (1, 1), (1, 1), 1, 1, (1, 8, 8, cout))
    (expected,) = run_reference(model, x)
    mult, shift = conv_multipliers(0.5, w_scales, 0.25)
    acc = x.astype(np.int64) + bias
    double = np.clip(multiply_by_quantized_multiplier(acc, mult, shift), -128, 127)
    single = np.clip(multiply_by_quantized_multiplier_single_round(acc, mult, shift), -128, 127)
    assert np.count_nonzero(double != single) > 0
    np.testing.assert_array_equal(expected, double.astype(np.int8))


def test_non_contiguous_out_is_filled() -> None:
    rng = np.random.default_rng(6)
    x, w = random_int8(rng, (1, 5, 5, 3)), random_int8(rng, (4, 3, 3, 3))
    mult, shift = conv_multipliers(0.05, np.full(4, 0.01), 0.3)
    kw = dict(stride=(1, 1), dilation=(1, 1), padding=(1, 1), out_hw=(5, 5), input_zp=2,
              output_zp=-1, multiplier=mult, shift=shift)
    big = np.zeros((1, 5, 5, 8), np.int8)
    view = big[..., ::2]
    assert conv2d(x, w, None, out=view, **kw) is view
    np.testing.assert_array_equal(view, conv2d(x, w, None, **kw))
    assert not big[..., 1::2].any()
    wd = random_int8(rng, (1, 3, 3, 3))
    kw_dw = {**kw, "multiplier": mult[:3], "shift": shift[:3]}
    res = depthwise_conv2d(x, wd, None, out=big[..., 1:7:2], **kw_dw)
    np.testing.assert_array_equal(res, depthwise_conv2d(x, wd, None, **kw_dw))


@pytest.mark.parametrize("seed", range(3))
def test_long_reductions_match_reference(seed: int) -> None:
    """Reductions long enough that float32 needs K-chunking (conv) or float64 (a 24x24
    depthwise filter) still give LiteRT's bytes."""
    rng = np.random.default_rng(2500 + seed)
    for depthwise in (False, True):
        if depthwise:
            x, kh, cin, dm = random_int8(rng, (1, 26, 26, 3)), 24, 3, 1
            w = random_int8(rng, (1, kh, kh, cin * dm))
            k = kh * kh
        else:
            x, kh, cin = random_int8(rng, (1, 6, 6, 320)), 3, 320
            w = random_int8(rng, (8, kh, kh, cin))
            k = kh * kh * cin
            dm = 1
        q = random_quant(rng, k, w.shape[3] if depthwise else 8)
        q["in_zp"] = -128  # widest |x - zp|
        oh, pt = conv_geometry(x.shape[1], kh, 1, 1, PADDING_VALID)
        c = dict(x=x, w=w, bias=random_bias(rng, k, w.shape[3] if depthwise else 8, False),
                 q=q, stride=(1, 1), dilation=(1, 1), padding_tfl=1, dm=dm,
                 geometry=((pt, pt), (oh, oh)))
        got, expected = run_case(c, depthwise)
        assert np.count_nonzero(got != expected) == 0, f"depthwise={depthwise} seed={seed}"


@pytest.mark.parametrize("shape,stride,cout", [((1, 16, 16, 32), (2, 2), 64), ((2, 9, 7, 5), (2, 3), 6),
                                               ((1, 5, 5, 8), (3, 1), 4), ((1, 32, 32, 16), (1, 1), 32)])
def test_pointwise_strided_reads_input_directly(shape, stride, cout) -> None:
    """1x1 convolutions (ResNet shortcuts: 1x1/2) take the direct path; SAME and VALID
    both mean no padding for them."""
    rng = np.random.default_rng(sum(shape) + cout)
    x, w = random_int8(rng, shape), random_int8(rng, (cout, 1, 1, shape[3]))
    bias = rng.integers(-5000, 5000, size=cout).astype(np.int32)
    w_scales = f32(rng.uniform(0.002, 0.02, cout))
    q = dict(in_scale=0.05, in_zp=-7, w_scales=w_scales, out_scale=0.1, out_zp=3, activation=0)
    oh, ow = -(-shape[1] // stride[0]), -(-shape[2] // stride[1])
    model = build(False, shape, w, bias, q, stride, (1, 1), 0, 1, (shape[0], oh, ow, cout))
    (expected,) = run_reference(model, x)
    mult, shift = conv_multipliers(0.05, w_scales, 0.1)
    got = conv2d(x, w, bias, stride=stride, dilation=(1, 1), padding=(0, 0), out_hw=(oh, ow),
                 input_zp=-7, output_zp=3, multiplier=mult, shift=shift)
    np.testing.assert_array_equal(got, expected)
