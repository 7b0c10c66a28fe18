"""MAX_POOL_2D, AVERAGE_POOL_2D and MEAN against LiteRT BUILTIN_REF."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels.pooling import avg_pool2d, max_pool2d, mean
from npu_hw.fixedpoint import fused_activation_range, rescale_multiplier
from npu_hw.ops import PADDING_SAME, PADDING_VALID, conv_geometry
from tests.support.quant_utils import ACTIVATIONS, f32, log_uniform, random_int8
from tests.support.tflite_builder import (
    TensorSpec,
    pool2d_options,
    run_reference,
    single_op_model,
)

SEEDS = range(20)
CASES_PER_SEED = 10
OP = tflite.BuiltinOperator


@pytest.mark.parametrize("op", [OP.MAX_POOL_2D, OP.AVERAGE_POOL_2D], ids=["max", "avg"])
@pytest.mark.parametrize("seed", SEEDS)
def test_pool(seed: int, op: int) -> None:
    rng = np.random.default_rng(8000 + seed + op)
    for case_no in range(CASES_PER_SEED):
        n, h, w, c = (int(rng.integers(1, 3)), int(rng.integers(1, 15)),
                      int(rng.integers(1, 15)), int(rng.integers(1, 9)))
        fh, fw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        same = bool(rng.integers(2)) or fh > h or fw > w
        pad = PADDING_SAME if same else PADDING_VALID
        oh, pt = conv_geometry(h, fh, sh, 1, pad)
        ow, pl = conv_geometry(w, fw, sw, 1, pad)
        scale, zp = float(f32(log_uniform(rng, 1e-3, 0.2))), int(rng.integers(-128, 128))
        act = int(rng.choice(ACTIVATIONS))
        options = pool2d_options((fh, fw), (sh, sw), same, act)
        tensors = [TensorSpec((n, h, w, c), np.int8, [scale], [zp]),
                   TensorSpec((n, oh, ow, c), np.int8, [scale], [zp])]
        model = single_op_model(op, tensors, [0], [1], tflite.BuiltinOptions.Pool2DOptions,
                                options)
        x = random_int8(rng, (n, h, w, c))
        (expected,) = run_reference(model, x)
        act_min, act_max = fused_activation_range(act, scale, zp)
        fn = max_pool2d if op == OP.MAX_POOL_2D else avg_pool2d
        got = fn(x, filter_hw=(fh, fw), stride=(sh, sw), padding=(pt, pl), out_hw=(oh, ow),
                 act_min=act_min, act_max=act_max)
        desc = f"seed {seed} case {case_no}: x{x.shape} f=({fh},{fw}) s=({sh},{sw}) same={same}"
        assert got.shape == expected.shape, desc
        assert np.count_nonzero(got != expected) == 0, desc


# Windows that tile the image (the kernels' no-padding fast path): global pooling as in
# classifier heads, 2x2/2, 3x3/3 with rows/columns left over (VALID).
_TILED = [((1, 8, 8, 64), (8, 8)), ((2, 6, 9, 5), (3, 3)), ((1, 7, 7, 3), (2, 2)),
          ((3, 4, 10, 2), (4, 5)), ((1, 1, 1, 4), (1, 1)), ((2, 9, 5, 7), (2, 1))]


@pytest.mark.parametrize("op", [OP.MAX_POOL_2D, OP.AVERAGE_POOL_2D], ids=["max", "avg"])
@pytest.mark.parametrize("case", range(len(_TILED)))
def test_pool_tiled_windows(case: int, op: int) -> None:
    shape, (fh, fw) = _TILED[case]
    rng = np.random.default_rng(8500 + case + op)
    n, h, w, c = shape
    oh, ow = h // fh, w // fw
    fn = max_pool2d if op == OP.MAX_POOL_2D else avg_pool2d
    for act in ACTIVATIONS:
        scale, zp = float(f32(log_uniform(rng, 1e-3, 0.2))), int(rng.integers(-128, 128))
        options = pool2d_options((fh, fw), (fh, fw), False, act)
        tensors = [TensorSpec(shape, np.int8, [scale], [zp]),
                   TensorSpec((n, oh, ow, c), np.int8, [scale], [zp])]
        model = single_op_model(op, tensors, [0], [1], tflite.BuiltinOptions.Pool2DOptions, options)
        for x in (random_int8(rng, shape), np.full(shape, -128, np.int8), np.full(shape, 127, np.int8)):
            (expected,) = run_reference(model, x)
            act_min, act_max = fused_activation_range(act, scale, zp)
            out = np.zeros((n, oh, ow, c, 2), np.int8)[..., 0]  # strided destination
            fn(x, filter_hw=(fh, fw), stride=(fh, fw), padding=(0, 0), out_hw=(oh, ow),
               act_min=act_min, act_max=act_max, out=out)
            assert np.array_equal(out, expected), f"{shape} f=({fh},{fw}) act={act}"


@pytest.mark.parametrize("seed", SEEDS)
def test_mean(seed: int) -> None:
    rng = np.random.default_rng(9000 + seed)
    for case_no in range(CASES_PER_SEED):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(d) for d in rng.integers(1, 12, size=rank))
        if rank == 4 and rng.random() < 0.5:
            axes = (1, 2)  # the spatial reduction of classifier heads
        else:
            k = int(rng.integers(1, rank + 1))
            axes = tuple(sorted(int(a) for a in rng.choice(rank, size=k, replace=False)))
        keep = bool(rng.integers(2))
        qi = (float(f32(log_uniform(rng, 1e-3, 0.2))), int(rng.integers(-128, 128)))
        qo = (float(f32(qi[0] * rng.uniform(0.3, 3))), int(rng.integers(-128, 128)))
        out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
            tuple(d for i, d in enumerate(shape) if i not in axes)

        def options(b):
            tflite.ReducerOptionsStart(b)
            tflite.ReducerOptionsAddKeepDims(b, keep)
            return tflite.ReducerOptionsEnd(b)

        tensors = [TensorSpec(shape, np.int8, [qi[0]], [qi[1]]),
                   TensorSpec((len(axes),), np.int32, data=np.array(axes, np.int32)),
                   TensorSpec(out_shape, np.int8, [qo[0]], [qo[1]])]
        model = single_op_model(OP.MEAN, tensors, [0, 1], [2],
                                tflite.BuiltinOptions.ReducerOptions, options)
        x = random_int8(rng, shape)
        (expected,) = run_reference(model, x)
        m, s = rescale_multiplier(qi[0], qo[0])
        got = mean(x, axes, input_zp=qi[1], output_zp=qo[1], multiplier=m, shift=s,
                   keep_dims=keep)
        desc = f"seed {seed} case {case_no}: {shape} axes={axes} keep={keep} {qi}->{qo}"
        assert got.shape == expected.shape, desc
        assert np.count_nonzero(got != expected) == 0, desc


def test_bad_arguments() -> None:
    x = np.zeros((1, 4, 4, 2), np.int8)
    with pytest.raises(ValueError):
        max_pool2d(x, filter_hw=(0, 2), stride=(1, 1), padding=(0, 0), out_hw=(3, 3))
    with pytest.raises(ValueError):
        avg_pool2d(x.astype(np.int32), filter_hw=(2, 2), stride=(1, 1), padding=(0, 0),
                   out_hw=(3, 3))
    with pytest.raises(ValueError):
        mean(x, (), input_zp=0, output_zp=0, multiplier=1 << 30, shift=1)
