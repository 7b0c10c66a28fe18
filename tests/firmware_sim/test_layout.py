"""CONCATENATION, RESHAPE, TRANSPOSE, PAD/PADV2, STRIDED_SLICE against LiteRT BUILTIN_REF."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels.layout import concat, pad, reshape, strided_slice, strided_slice_shape, transpose
from tests.support.quant_utils import random_int8
from tests.support.tflite_builder import TensorSpec, run_reference, single_op_model

SEEDS = range(20)
CASES_PER_SEED = 10
OP = tflite.BuiltinOperator
Q = ([0.05], [3])  # data movement keeps one quantization


def rshape(rng: np.random.Generator, lo: int = 1, hi: int = 5) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, 7, size=int(rng.integers(lo, hi))))


def i32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


def check(got: np.ndarray, expected: np.ndarray, desc: str) -> None:
    assert got.shape == expected.shape, desc
    assert got.tobytes() == expected.tobytes(), desc


@pytest.mark.parametrize("seed", SEEDS)
def test_concat(seed: int) -> None:
    rng = np.random.default_rng(10000 + seed)
    for case_no in range(CASES_PER_SEED):
        base = rshape(rng)
        axis = int(rng.integers(-len(base), len(base)))
        k = int(rng.integers(1, 5))
        shapes = []
        for _ in range(k):
            s = list(base)
            s[axis] = int(rng.integers(1, 5))
            shapes.append(tuple(s))
        xs = [random_int8(rng, s) for s in shapes]
        out_shape = list(base)
        out_shape[axis] = sum(s[axis] for s in shapes)

        def options(b):
            tflite.ConcatenationOptionsStart(b)
            tflite.ConcatenationOptionsAddAxis(b, axis)
            return tflite.ConcatenationOptionsEnd(b)

        tensors = [TensorSpec(s, np.int8, *Q) for s in shapes]
        tensors.append(TensorSpec(tuple(out_shape), np.int8, *Q))
        model = single_op_model(OP.CONCATENATION, tensors, list(range(k)), [k],
                                tflite.BuiltinOptions.ConcatenationOptions, options)
        (expected,) = run_reference(model, *xs)
        check(concat(xs, axis), expected, f"seed {seed} case {case_no}: {shapes} axis={axis}")


@pytest.mark.parametrize("seed", SEEDS)
def test_reshape_transpose(seed: int) -> None:
    rng = np.random.default_rng(11000 + seed)
    for case_no in range(CASES_PER_SEED):
        shape = rshape(rng, 1, 6)
        x = random_int8(rng, shape)
        new_shape = tuple(int(d) for d in rng.permutation(shape))
        tensors = [TensorSpec(shape, np.int8, *Q),
                   TensorSpec((len(new_shape),), np.int32, data=i32(new_shape)),
                   TensorSpec(new_shape, np.int8, *Q)]
        model = single_op_model(OP.RESHAPE, tensors, [0, 1], [2])
        (expected,) = run_reference(model, x)
        check(reshape(x, new_shape), expected, f"reshape seed {seed} case {case_no}")

        perm = tuple(int(p) for p in rng.permutation(len(shape)))
        out_shape = tuple(shape[p] for p in perm)
        tensors = [TensorSpec(shape, np.int8, *Q),
                   TensorSpec((len(perm),), np.int32, data=i32(perm)),
                   TensorSpec(out_shape, np.int8, *Q)]
        model = single_op_model(OP.TRANSPOSE, tensors, [0, 1], [2])
        (expected,) = run_reference(model, x)
        check(transpose(x, perm), expected, f"transpose seed {seed} case {case_no}: {perm}")


@pytest.mark.parametrize("seed", SEEDS)
def test_pad(seed: int) -> None:
    rng = np.random.default_rng(12000 + seed)
    for case_no in range(CASES_PER_SEED):
        shape = rshape(rng)
        pads = rng.integers(0, 4, size=(len(shape), 2)).astype(np.int32)
        out_shape = tuple(int(d + a + b) for d, (a, b) in zip(shape, pads))
        x = random_int8(rng, shape)
        v2 = bool(rng.integers(2))
        tensors = [TensorSpec(shape, np.int8, *Q),
                   TensorSpec(pads.shape, np.int32, data=pads),
                   TensorSpec(out_shape, np.int8, *Q)]
        inputs = [0, 1]
        value = Q[1][0]
        if v2:
            value = int(rng.integers(-128, 128))
            tensors.append(TensorSpec((), np.int8, *Q, data=np.array(value, np.int8)))
            inputs.append(3)
        model = single_op_model(OP.PADV2 if v2 else OP.PAD, tensors, inputs, [2])
        (expected,) = run_reference(model, x)
        check(pad(x, pads, value), expected,
              f"seed {seed} case {case_no}: {shape} {pads.tolist()} v2={v2}")


@pytest.mark.parametrize("seed", SEEDS)
def test_strided_slice(seed: int) -> None:
    rng = np.random.default_rng(13000 + seed)
    for case_no in range(CASES_PER_SEED):
        shape = rshape(rng, 1, 5)
        n = len(shape)
        begin = [int(rng.integers(-d - 1, d + 2)) for d in shape]
        end = [int(rng.integers(-d - 1, d + 2)) for d in shape]
        strides = [int(rng.choice([1, 1, 2, 3, -1, -2])) for _ in shape]
        begin_mask, end_mask = int(rng.integers(0, 1 << n)), int(rng.integers(0, 1 << n))
        shrink = 0
        for i, d in enumerate(shape):
            if rng.random() < 0.2:
                shrink |= 1 << i
                begin[i] = int(rng.integers(-d, d))
                end[i], strides[i] = begin[i] + 1, 1
                begin_mask &= ~(1 << i)
        out_shape = strided_slice_shape(shape, begin, end, strides, begin_mask=begin_mask,
                                        end_mask=end_mask, shrink_axis_mask=shrink)

        def options(b):
            tflite.StridedSliceOptionsStart(b)
            tflite.StridedSliceOptionsAddBeginMask(b, begin_mask)
            tflite.StridedSliceOptionsAddEndMask(b, end_mask)
            tflite.StridedSliceOptionsAddShrinkAxisMask(b, shrink)
            return tflite.StridedSliceOptionsEnd(b)

        tensors = [TensorSpec(shape, np.int8, *Q),
                   TensorSpec((n,), np.int32, data=i32(begin)),
                   TensorSpec((n,), np.int32, data=i32(end)),
                   TensorSpec((n,), np.int32, data=i32(strides)),
                   TensorSpec(out_shape, np.int8, *Q)]
        model = single_op_model(OP.STRIDED_SLICE, tensors, [0, 1, 2, 3], [4],
                                tflite.BuiltinOptions.StridedSliceOptions, options)
        x = random_int8(rng, shape)
        (expected,) = run_reference(model, x)
        got = strided_slice(x, begin, end, strides, begin_mask=begin_mask, end_mask=end_mask,
                            shrink_axis_mask=shrink)
        check(got, expected, f"seed {seed} case {case_no}: {shape} b={begin} e={end} "
                             f"s={strides} masks={begin_mask},{end_mask},{shrink}")


def test_bad_arguments() -> None:
    x = np.zeros((2, 3), np.int8)
    with pytest.raises(ValueError):
        reshape(x, (4, 2))
    with pytest.raises(ValueError):
        transpose(x, (0, 0))
    with pytest.raises(ValueError):
        pad(x, [(1, 1)], 0)
    with pytest.raises(ValueError):
        strided_slice(x, [0, 0], [2, 3], [1, 0])
    with pytest.raises(ValueError):
        concat([x, np.zeros((3, 3), np.int8)], 1)
