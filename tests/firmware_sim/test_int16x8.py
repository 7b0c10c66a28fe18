"""int16-activation (16x8) kernels against LiteRT BUILTIN_REF on random cases (200 per op)."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels import int16x8, pooling, resize
from npu_hw.fixedpoint import (
    add_params,
    effective_scale,
    fused_activation_range,
    mul_multiplier,
    rescale_multiplier,
)
from npu_hw.ops import PADDING_SAME, PADDING_VALID, conv_geometry
from tests.support.quant_utils import ACTIVATIONS, conv_multipliers, f32, log_uniform, random_int8, random_int16
from tests.support.tflite_builder import (
    TensorSpec,
    pool2d_options,
    resize_options,
    run_reference,
    single_op_model,
)

SEEDS = range(25)
CASES_PER_SEED = 8  # 200 cases per op
OP, OPTIONS = tflite.BuiltinOperator, tflite.BuiltinOptions
I16 = (-32768, 32767)


def act_range(rng: np.random.Generator, scale: float) -> tuple[int, tuple[int, int]]:
    act = int(rng.choice(ACTIVATIONS))
    return act, fused_activation_range(act, scale, 0, *I16)


def scales(rng: np.random.Generator, k: int, n_out: int, per_channel: bool):
    in_scale = float(f32(log_uniform(rng, 1e-5, 1e-3)))
    w_scales = f32(log_uniform(rng, 1e-3, 0.05, size=n_out if per_channel else 1))
    acc_scale = float(in_scale * np.max(w_scales))
    out_scale = float(f32(acc_scale * 18900 * 74 * np.sqrt(k) / 16000 * rng.uniform(0.2, 4.0)))
    return in_scale, w_scales, out_scale


def int64_bias(rng: np.random.Generator, k: int, n_out: int,
               optional: bool = True) -> np.ndarray | None:
    if optional and rng.random() < 0.2:  # LiteRT's CONV_2D requires one
        return None
    spread = int(18900 * 74 * np.sqrt(k))
    return rng.integers(-2 * spread, 2 * spread + 1, size=n_out).astype(np.int64)


def weighted_tensors(x_shape, w, bias, in_scale, w_scales, out_scale, out_shape, qdim):
    w_scales = [float(s) for s in w_scales]
    tensors = [TensorSpec(x_shape, np.int16, [in_scale], [0], name="x"),
               TensorSpec(w.shape, np.int8, w_scales, [0] * len(w_scales), qdim, w, "w"),
               TensorSpec(out_shape, np.int16, [out_scale], [0], name="y")]
    inputs = [0, 1]
    if bias is not None:
        bscales = [float(f32(in_scale) * f32(s)) for s in w_scales]
        tensors.append(TensorSpec(bias.shape, np.int64, bscales, [0] * len(bscales), 0, bias, "b"))
        inputs.append(3)
    return tensors, inputs


def random_conv(rng: np.random.Generator, depthwise: bool) -> tuple[np.ndarray, np.ndarray]:
    n, h, w_ = int(rng.integers(1, 3)), int(rng.integers(1, 12)), int(rng.integers(1, 12))
    kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    dilation = (1, 1) if rng.random() < 0.6 else (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    same = bool(rng.integers(2))
    if not same:
        h, w_ = max(h, (kh - 1) * dilation[0] + 1), max(w_, (kw - 1) * dilation[1] + 1)
    if depthwise:
        cin, dm = int(rng.integers(1, 13)), int(rng.choice([1, 1, 2, 3]))
        cout, k = cin * dm, kh * kw
        wt = random_int8(rng, (1, kh, kw, cout))
    else:
        groups = 1 if rng.random() < 0.75 else int(rng.choice([2, 3]))
        cin_g = int(rng.integers(1, 9))
        cin, cout = cin_g * groups, groups * int(rng.integers(1, 7))
        k = kh * kw * cin_g
        wt = random_int8(rng, (cout, kh, kw, cin_g))
    pad = PADDING_SAME if same else PADDING_VALID
    oh, pt = conv_geometry(h, kh, stride[0], dilation[0], pad)
    ow, pl = conv_geometry(w_, kw, stride[1], dilation[1], pad)
    x = random_int16(rng, (n, h, w_, cin))
    bias = int64_bias(rng, k, cout, optional=depthwise)
    in_s, w_s, out_s = scales(rng, k, cout, per_channel=bool(rng.integers(2)))
    act, (lo, hi) = act_range(rng, out_s)
    tensors, inputs = weighted_tensors(x.shape, wt, bias, in_s, w_s, out_s, (n, oh, ow, cout),
                                       3 if depthwise else 0)

    def options(b):
        if depthwise:
            tflite.DepthwiseConv2DOptionsStart(b)
            tflite.DepthwiseConv2DOptionsAddPadding(b, 0 if same else 1)
            tflite.DepthwiseConv2DOptionsAddStrideH(b, stride[0])
            tflite.DepthwiseConv2DOptionsAddStrideW(b, stride[1])
            tflite.DepthwiseConv2DOptionsAddDepthMultiplier(b, dm)
            tflite.DepthwiseConv2DOptionsAddFusedActivationFunction(b, act)
            tflite.DepthwiseConv2DOptionsAddDilationHFactor(b, dilation[0])
            tflite.DepthwiseConv2DOptionsAddDilationWFactor(b, dilation[1])
            return tflite.DepthwiseConv2DOptionsEnd(b)
        tflite.Conv2DOptionsStart(b)
        tflite.Conv2DOptionsAddPadding(b, 0 if same else 1)
        tflite.Conv2DOptionsAddStrideH(b, stride[0])
        tflite.Conv2DOptionsAddStrideW(b, stride[1])
        tflite.Conv2DOptionsAddFusedActivationFunction(b, act)
        tflite.Conv2DOptionsAddDilationHFactor(b, dilation[0])
        tflite.Conv2DOptionsAddDilationWFactor(b, dilation[1])
        return tflite.Conv2DOptionsEnd(b)

    if depthwise:
        model = single_op_model(OP.DEPTHWISE_CONV_2D, tensors, inputs, [2],
                                OPTIONS.DepthwiseConv2DOptions, options, version=5)
    else:
        model = single_op_model(OP.CONV_2D, tensors, inputs, [2], OPTIONS.Conv2DOptions,
                                options, version=4)
    (expected,) = run_reference(model, x)
    mult, shift = conv_multipliers(in_s, w_s, out_s)
    fn = int16x8.depthwise_conv2d_16x8 if depthwise else int16x8.conv2d_16x8
    got = fn(x, wt, bias, stride=stride, dilation=dilation, padding=(pt, pl), out_hw=(oh, ow),
             multiplier=mult, shift=shift, act_min=lo, act_max=hi)
    return got, expected


def check(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape, what
    diff = np.count_nonzero(got != expected)
    assert diff == 0, f"{what}: {diff} of {got.size} values differ"


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
@pytest.mark.parametrize("seed", SEEDS)
def test_conv_16x8_matches_reference(seed: int, depthwise: bool) -> None:
    rng = np.random.default_rng(16000 + seed + (100 if depthwise else 0))
    for case_no in range(CASES_PER_SEED):
        check(*random_conv(rng, depthwise), f"seed {seed} case {case_no}")


@pytest.mark.parametrize("seed", SEEDS)
def test_fully_connected_16x8_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(16200 + seed)
    for case_no in range(CASES_PER_SEED):
        rows, k, n_out = int(rng.integers(1, 5)), int(rng.integers(1, 64)), int(rng.integers(1, 12))
        x, wt = random_int16(rng, (rows, k)), random_int8(rng, (n_out, k))
        bias = int64_bias(rng, k, n_out)
        in_s, w_s, out_s = scales(rng, k, n_out, per_channel=bool(rng.integers(2)))
        act, (lo, hi) = act_range(rng, out_s)
        tensors, inputs = weighted_tensors(x.shape, wt, bias, in_s, w_s, out_s, (rows, n_out), 0)

        def options(b, act=act):
            tflite.FullyConnectedOptionsStart(b)
            tflite.FullyConnectedOptionsAddFusedActivationFunction(b, act)
            return tflite.FullyConnectedOptionsEnd(b)

        model = single_op_model(OP.FULLY_CONNECTED, tensors, inputs, [2],
                                OPTIONS.FullyConnectedOptions, options, version=7)
        (expected,) = run_reference(model, x)
        got = int16x8.fully_connected_16x8(x, wt, bias, scale=effective_scale(in_s, w_s, out_s),
                                           act_min=lo, act_max=hi)
        check(got, expected, f"seed {seed} case {case_no}")


def broadcast_shapes(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    rank = int(rng.integers(1, 5))
    full = tuple(int(d) for d in rng.integers(1, 7, size=rank))
    other = tuple(1 if rng.random() < 0.5 else d for d in full)[int(rng.integers(0, rank)):]
    return [(full, full), (full, other), (other, full)][int(rng.integers(3))]


@pytest.mark.parametrize("op", [OP.ADD, OP.SUB, OP.MUL], ids=["add", "sub", "mul"])
@pytest.mark.parametrize("seed", SEEDS)
def test_binary_int16_matches_reference(seed: int, op: int) -> None:
    rng = np.random.default_rng(16300 + seed + op)
    for case_no in range(CASES_PER_SEED):
        sa, sb = broadcast_shapes(rng)
        s1, s2 = (float(f32(log_uniform(rng, 1e-5, 1e-2))) for _ in range(2))
        if op in (OP.ADD, OP.SUB):
            so = float(f32(max(s1, s2) * rng.uniform(0.5, 3.0)))
        else:
            so = float(f32(s1 * s2 * 32768 * rng.uniform(0.1, 2.0)))
        act, (lo, hi) = act_range(rng, so)
        a, b = random_int16(rng, sa), random_int16(rng, sb)
        out_shape = np.broadcast_shapes(sa, sb)
        tensors = [TensorSpec(sa, np.int16, [s1], [0], name="a"),
                   TensorSpec(sb, np.int16, [s2], [0], name="b"),
                   TensorSpec(out_shape, np.int16, [so], [0], name="y")]

        def options(fb, act=act):
            if op == OP.SUB:     # LiteRT's general int16 SUB, as the chip's
                tflite.SubOptionsStart(fb)
                tflite.SubOptionsAddFusedActivationFunction(fb, act)
                tflite.SubOptionsAddPotScaleInt16(fb, False)
                return tflite.SubOptionsEnd(fb)
            if op == OP.ADD:
                tflite.AddOptionsStart(fb)
                tflite.AddOptionsAddFusedActivationFunction(fb, act)
                tflite.AddOptionsAddPotScaleInt16(fb, False)
                return tflite.AddOptionsEnd(fb)
            tflite.MulOptionsStart(fb)
            tflite.MulOptionsAddFusedActivationFunction(fb, act)
            return tflite.MulOptionsEnd(fb)

        opt_type = {OP.ADD: OPTIONS.AddOptions, OP.SUB: OPTIONS.SubOptions}.get(op, OPTIONS.MulOptions)
        model = single_op_model(op, tensors, [0, 1], [2], opt_type, options,
                                version={OP.ADD: 3, OP.SUB: 5}.get(op, 4))
        (expected,) = run_reference(model, a, b)
        if op in (OP.ADD, OP.SUB):
            params = add_params(s1, s2, so, left_shift=int16x8.ADD_LEFT_SHIFT_INT16)
            kernel = int16x8.add_int16 if op == OP.ADD else int16x8.sub_int16
            got = kernel(a, b, **params, act_min=lo, act_max=hi)
        else:
            mult, shift = mul_multiplier(s1, s2, so)
            got = int16x8.mul_int16(a, b, multiplier=mult, shift=shift, act_min=lo, act_max=hi)
        check(got, expected, f"seed {seed} case {case_no} {sa} {sb}")


@pytest.mark.parametrize("op", [OP.MAX_POOL_2D, OP.AVERAGE_POOL_2D], ids=["max", "avg"])
@pytest.mark.parametrize("seed", SEEDS)
def test_pool_int16_matches_reference(seed: int, op: int) -> None:
    rng = np.random.default_rng(16400 + seed + op)
    for case_no in range(CASES_PER_SEED):
        n, h, w, c = (int(rng.integers(1, 3)), int(rng.integers(1, 12)),
                      int(rng.integers(1, 12)), int(rng.integers(1, 6)))
        fh, fw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        same = bool(rng.integers(2))
        if not same:
            h, w = max(h, fh), max(w, fw)
        pad = PADDING_SAME if same else PADDING_VALID
        (oh, pt), (ow, pl) = conv_geometry(h, fh, sh, 1, pad), conv_geometry(w, fw, sw, 1, pad)
        scale = float(f32(log_uniform(rng, 1e-4, 1e-2)))
        act, (lo, hi) = act_range(rng, scale)
        x = random_int16(rng, (n, h, w, c))
        tensors = [TensorSpec(x.shape, np.int16, [scale], [0], name="x"),
                   TensorSpec((n, oh, ow, c), np.int16, [scale], [0], name="y")]
        model = single_op_model(op, tensors, [0], [1], OPTIONS.Pool2DOptions,
                                pool2d_options((fh, fw), (sh, sw), same, act), version=3)
        (expected,) = run_reference(model, x)
        fn = pooling.max_pool2d if op == OP.MAX_POOL_2D else pooling.avg_pool2d
        got = fn(x, filter_hw=(fh, fw), stride=(sh, sw), padding=(pt, pl), out_hw=(oh, ow),
                 act_min=lo, act_max=hi)
        check(got, expected, f"seed {seed} case {case_no}")


CONVERSIONS = {"i8>i16": (np.int8, np.int16), "i16>i8": (np.int16, np.int8),
               "i16>i16": (np.int16, np.int16), "f32>i16": (np.float32, np.int16),
               "i16>f32": (np.int16, np.float32)}


@pytest.mark.parametrize("kind", list(CONVERSIONS))
@pytest.mark.parametrize("seed", SEEDS)
def test_conversions_match_reference(seed: int, kind: str) -> None:
    src, dst = CONVERSIONS[kind]
    rng = np.random.default_rng(16500 + seed + 1000 * list(CONVERSIONS).index(kind))
    for case_no in range(CASES_PER_SEED):
        shape = tuple(int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 4))))

        def q(dtype):
            if dtype == np.int8:
                return float(f32(log_uniform(rng, 1e-3, 0.2))), int(rng.integers(-128, 128))
            return float(f32(log_uniform(rng, 1e-5, 1e-2))), 0

        (s_in, zp_in), (s_out, zp_out) = q(src), q(dst)
        if src == np.float32:
            x = (rng.standard_normal(shape) * s_out * 20000 * rng.uniform(0.1, 3)).astype(np.float32)
        elif src == np.int8:
            x = random_int8(rng, shape)
        else:
            x = random_int16(rng, shape)
        if src != np.float32 and dst != np.float32 and rng.random() < 0.7:
            # Realistic boundaries: the two sides cover about the same real range.
            span = s_in * (127 if src == np.int8 else 32767)
            s_out = float(f32(span / (127 if dst == np.int8 else 32767) * rng.uniform(0.8, 1.25)))
        tensors = [TensorSpec(shape, src, None if src == np.float32 else [s_in],
                              None if src == np.float32 else [zp_in], name="x"),
                   TensorSpec(shape, dst, None if dst == np.float32 else [s_out],
                              None if dst == np.float32 else [zp_out], name="y")]
        op = OP.DEQUANTIZE if dst == np.float32 else OP.QUANTIZE
        model = single_op_model(op, tensors, [0], [1], version=4 if op == OP.DEQUANTIZE else 3)
        (expected,) = run_reference(model, x)
        if src == np.float32:
            got = int16x8.quantize_int16(x, scale=s_out, zero_point=zp_out)
        elif dst == np.float32:
            got = int16x8.dequantize_int16(x, scale=s_in, zero_point=zp_in)
        else:
            mult, shift = rescale_multiplier(s_in, s_out)
            got = int16x8.requantize(x, dst, input_zp=zp_in, output_zp=zp_out, multiplier=mult,
                                     shift=shift)
        check(got, expected, f"{kind} seed {seed} case {case_no}")


@pytest.mark.parametrize("op", [OP.RESIZE_BILINEAR, OP.RESIZE_NEAREST_NEIGHBOR],
                         ids=["bilinear", "nearest"])
@pytest.mark.parametrize("seed", SEEDS)
def test_resize_int16_matches_reference(seed: int, op: int) -> None:
    rng = np.random.default_rng(16700 + seed + op)
    for case_no in range(CASES_PER_SEED):
        n, h, w, c = (int(rng.integers(1, 3)), int(rng.integers(1, 9)),
                      int(rng.integers(1, 9)), int(rng.integers(1, 5)))
        oh, ow = int(rng.integers(1, 17)), int(rng.integers(1, 17))
        align, half = [(False, False), (True, False), (False, True)][int(rng.integers(3))]
        x = random_int16(rng, (n, h, w, c))
        size = np.array([oh, ow], np.int32)
        tensors = [TensorSpec(x.shape, np.int16, [0.001], [0], name="x"),
                   TensorSpec((2,), np.int32, data=size, name="size"),
                   TensorSpec((n, oh, ow, c), np.int16, [0.001], [0], name="y")]
        opt_type, options = resize_options(op, align, half)
        model = single_op_model(op, tensors, [0, 1], [2], opt_type, options, version=4)
        (expected,) = run_reference(model, x)
        fn = resize.resize_bilinear if op == OP.RESIZE_BILINEAR else resize.resize_nearest
        check(fn(x, (oh, ow), align_corners=align, half_pixel_centers=half), expected,
              f"seed {seed} case {case_no}")


def test_int16_kernels_refuse_bad_operands() -> None:
    rng = np.random.default_rng(1)
    x, w = random_int16(rng, (1, 4, 4, 2)), random_int8(rng, (3, 3, 3, 2))
    kw = dict(stride=(1, 1), dilation=(1, 1), padding=(1, 1), out_hw=(4, 4),
              multiplier=np.full(3, 1 << 30, np.int32), shift=np.full(3, -10, np.int32))
    assert int16x8.conv2d_16x8(x, w, None, **kw).dtype == np.int16
    with pytest.raises(TypeError):
        int16x8.conv2d_16x8(x.astype(np.int8), w, None, **kw)
    with pytest.raises(ValueError, match="int64"):
        int16x8.conv2d_16x8(x, w, np.zeros(3, np.int32), **kw)
    with pytest.raises(ValueError, match="shift"):
        int16x8.conv2d_16x8(x, w, None, **{**kw, "shift": np.full(3, 20, np.int32)})
    with pytest.raises(ValueError, match="act_min"):
        int16x8.conv2d_16x8(x, w, None, **kw, act_min=-40000)
    with pytest.raises(ValueError, match="does not fit"):
        int16x8.requantize(random_int8(rng, (4,)), np.int16, input_zp=0, output_zp=40000,
                           multiplier=1 << 30, shift=0)
    with pytest.raises(ValueError, match="must be 0"):
        int16x8.check_zero_points(input_zero_point=3)


@pytest.mark.parametrize("seed", SEEDS)
def test_softmax_int16_matches_reference(seed: int) -> None:
    from npu_hw.fixedpoint import softmax_int16_params
    rng = np.random.default_rng(16900 + seed)
    for case_no in range(CASES_PER_SEED):
        rows, depth = int(rng.integers(1, 6)), int(rng.integers(1, 40))
        scale = float(f32(log_uniform(rng, 1e-5, 2e-3)))
        beta = float(f32(rng.choice([1.0, 1.0, rng.uniform(0.3, 2.0)])))
        x = random_int16(rng, (rows, depth))
        if rng.random() < 0.5:  # values that are mostly close to each other
            x = (x // int(rng.integers(1, 200))).astype(np.int16)
        tensors = [TensorSpec(x.shape, np.int16, [scale], [0], name="x"),
                   TensorSpec(x.shape, np.int16, [1.0 / 32768], [0], name="y")]

        def options(b, beta=beta):
            tflite.SoftmaxOptionsStart(b)
            tflite.SoftmaxOptionsAddBeta(b, beta)
            return tflite.SoftmaxOptionsEnd(b)

        model = single_op_model(OP.SOFTMAX, tensors, [0], [1], OPTIONS.SoftmaxOptions, options, version=3)
        (expected,) = run_reference(model, x)
        mult, shift = softmax_int16_params(beta, scale)
        got = int16x8.softmax_int16(x, input_multiplier=mult, input_left_shift=shift)
        check(got, expected, f"seed {seed} case {case_no} scale {scale} beta {beta}")


@pytest.mark.parametrize("seed", SEEDS)
def test_mean_int16_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(17000 + seed)
    for case_no in range(CASES_PER_SEED):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(d) for d in rng.integers(1, 12, size=rank))
        k = int(rng.integers(1, rank + 1))
        axes = (1, 2) if rank == 4 and rng.random() < 0.5 else \
            tuple(sorted(int(a) for a in rng.choice(rank, size=k, replace=False)))
        keep = bool(rng.integers(2))
        si = float(f32(log_uniform(rng, 1e-5, 1e-2)))
        so = float(f32(si * rng.uniform(0.3, 3)))
        out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
            tuple(d for i, d in enumerate(shape) if i not in axes)

        def options(b, keep=keep):
            tflite.ReducerOptionsStart(b)
            tflite.ReducerOptionsAddKeepDims(b, keep)
            return tflite.ReducerOptionsEnd(b)

        tensors = [TensorSpec(shape, np.int16, [si], [0], name="x"),
                   TensorSpec((len(axes),), np.int32, data=np.array(axes, np.int32), name="axes"),
                   TensorSpec(out_shape, np.int16, [so], [0], name="y")]
        model = single_op_model(OP.MEAN, tensors, [0, 1], [2], OPTIONS.ReducerOptions, options)
        x = random_int16(rng, shape)
        (expected,) = run_reference(model, x)
        m, s = rescale_multiplier(si, so)
        got = pooling.mean(x, axes, input_zp=0, output_zp=0, multiplier=m, shift=s, keep_dims=keep)
        check(got, expected, f"seed {seed} case {case_no}: {shape} axes={axes}")


@pytest.mark.parametrize("op", [OP.RELU, OP.RELU6], ids=["relu", "relu6"])  # LiteRT: no int16 RELU_N1_TO_1
@pytest.mark.parametrize("seed", SEEDS)
def test_relu_family_int16_matches_reference(seed: int, op: int) -> None:
    from firmware_sim.kernels.activations import relu_family
    from npu_hw.fixedpoint import ACT_RELU, ACT_RELU6, relu_multiplier
    rng = np.random.default_rng(17100 + seed + op)
    code = {OP.RELU: ACT_RELU, OP.RELU6: ACT_RELU6}[op]
    for case_no in range(CASES_PER_SEED):
        shape = tuple(int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 4))))
        si = float(f32(log_uniform(rng, 1e-5, 1e-3)))
        so = float(f32(si * rng.uniform(0.3, 3)))
        x = random_int16(rng, shape)
        tensors = [TensorSpec(shape, np.int16, [si], [0], name="x"),
                   TensorSpec(shape, np.int16, [so], [0], name="y")]
        (expected,) = run_reference(single_op_model(op, tensors, [0], [1]), x)
        m, s = relu_multiplier(si, so)
        lo, hi = fused_activation_range(code, so, 0, *I16)
        got = relu_family(x, input_zp=0, output_zp=0, multiplier=m, shift=s, act_min=lo, act_max=hi)
        check(got, expected, f"seed {seed} case {case_no}")


@pytest.mark.parametrize("op", ["TRANSPOSE", "PAD", "CONCATENATION", "STRIDED_SLICE"])
@pytest.mark.parametrize("seed", SEEDS)
def test_data_movement_int16_matches_reference(seed: int, op: str) -> None:
    """The layout kernels move int16 elements as LiteRT's int16 kernels do."""
    from firmware_sim.kernels import layout
    rng = np.random.default_rng(17200 + seed + 1000 * len(op))
    for case_no in range(CASES_PER_SEED):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(d) for d in rng.integers(1, 6, size=rank))
        x = random_int16(rng, shape)
        q = ([0.001], [0])
        feeds, extra, opt = [x], [], (0, None)
        if op == "TRANSPOSE":
            perm = [int(p) for p in rng.permutation(rank)]
            got = layout.transpose(x, perm)
            extra = [TensorSpec((rank,), np.int32, data=np.array(perm, np.int32), name="perm")]
        elif op == "PAD":
            pads = rng.integers(0, 3, size=(rank, 2))
            got = layout.pad(x, pads.tolist(), 0)
            extra = [TensorSpec((rank, 2), np.int32, data=pads.astype(np.int32), name="pads")]
        elif op == "CONCATENATION":
            axis = int(rng.integers(rank))
            other = list(shape)
            other[axis] = int(rng.integers(1, 4))
            y = random_int16(rng, other)
            got = layout.concat([x, y], axis)
            feeds = [x, y]

            def concat_options(b, axis=axis):
                tflite.ConcatenationOptionsStart(b)
                tflite.ConcatenationOptionsAddAxis(b, axis)
                return tflite.ConcatenationOptionsEnd(b)
            opt = (OPTIONS.ConcatenationOptions, concat_options)
        else:
            begin = [int(rng.integers(0, d)) for d in shape]
            end = [int(rng.integers(b + 1, d + 1)) for b, d in zip(begin, shape)]
            strides = [int(rng.integers(1, 3)) for _ in shape]
            got = layout.strided_slice(x, begin, end, strides)
            extra = [TensorSpec((rank,), np.int32, data=np.array(v, np.int32), name=n)
                     for v, n in ((begin, "b"), (end, "e"), (strides, "s"))]

            def slice_options(b):
                tflite.StridedSliceOptionsStart(b)
                return tflite.StridedSliceOptionsEnd(b)
            opt = (OPTIONS.StridedSliceOptions, slice_options)
        tensors = [TensorSpec(f.shape, np.int16, *q, name=f"in{k}") for k, f in enumerate(feeds)]
        tensors += extra
        tensors.append(TensorSpec(got.shape, np.int16, *q, name="out"))
        op_inputs = list(range(len(tensors) - 1))
        model = single_op_model(getattr(OP, op), tensors, op_inputs, [len(tensors) - 1], *opt)
        (expected,) = run_reference(model, *feeds)
        check(got, expected, f"{op} seed {seed} case {case_no} {shape}")
