"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR against LiteRT BUILTIN_REF."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels.resize import resize_bilinear, resize_nearest
from tests.support.quant_utils import random_int8
from tests.support.tflite_builder import (
    TensorSpec,
    resize_options,
    run_reference,
    single_op_model,
)

SEEDS = range(20)
CASES_PER_SEED = 10
OP = tflite.BuiltinOperator


@pytest.mark.parametrize("op", [OP.RESIZE_BILINEAR, OP.RESIZE_NEAREST_NEIGHBOR],
                         ids=["bilinear", "nearest"])
@pytest.mark.parametrize("seed", SEEDS)
def test_resize(seed: int, op: int) -> None:
    rng = np.random.default_rng(14000 + seed + op)
    for case_no in range(CASES_PER_SEED):
        n, h, w, c = (int(rng.integers(1, 3)), int(rng.integers(1, 10)),
                      int(rng.integers(1, 10)), int(rng.integers(1, 5)))
        oh, ow = int(rng.integers(1, 21)), int(rng.integers(1, 21))
        mode = int(rng.integers(3))  # plain, align_corners, half_pixel_centers
        align, half = mode == 1, mode == 2
        opt_type, options = resize_options(op, align, half)
        tensors = [TensorSpec((n, h, w, c), np.int8, [0.02], [-5]),
                   TensorSpec((2,), np.int32, data=np.array([oh, ow], np.int32)),
                   TensorSpec((n, oh, ow, c), np.int8, [0.02], [-5])]
        model = single_op_model(op, tensors, [0, 1], [2], opt_type, options)
        x = random_int8(rng, (n, h, w, c))
        (expected,) = run_reference(model, x)
        fn = resize_bilinear if op == OP.RESIZE_BILINEAR else resize_nearest
        got = fn(x, (oh, ow), align_corners=align, half_pixel_centers=half)
        desc = f"seed {seed} case {case_no}: {x.shape} -> {(oh, ow)} align={align} half={half}"
        assert got.shape == expected.shape, desc
        assert np.count_nonzero(got != expected) == 0, desc


def test_bad_arguments() -> None:
    x = np.zeros((1, 4, 4, 2), np.int8)
    with pytest.raises(ValueError):
        resize_bilinear(x, (0, 3))
    with pytest.raises(ValueError):
        resize_nearest(x, (3, 3), align_corners=True, half_pixel_centers=True)
    with pytest.raises(ValueError):
        resize_bilinear(np.zeros((1, 0, 4, 2), np.int8), (3, 3))
