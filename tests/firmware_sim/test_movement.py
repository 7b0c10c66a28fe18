"""SPLIT, SPLIT_V, UNPACK, SLICE, DEPTH_TO_SPACE, SPACE_TO_DEPTH, PACK: int8 single-op
models imported, lowered and run on the chip, byte-identical to LiteRT BUILTIN_REF
(200 random cases each)."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from tests.support.op_check import check_on_chip
from tests.support.quant_utils import random_int8
from tests.support.tflite_builder import TensorSpec, named_options, single_op_model

OP = tflite.BuiltinOperator
CASES = 200
Q = ([0.05], [3])



def rshape(rng, lo=1, hi=5, top=6) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, top + 1, size=int(rng.integers(lo, hi))))


def i32(v) -> np.ndarray:
    return np.asarray(v, np.int32)


def test_split(mem) -> None:
    rng = np.random.default_rng(500)
    for case in range(CASES):
        shape = list(rshape(rng))
        axis = int(rng.integers(-len(shape), len(shape)))
        n = int(rng.integers(1, 4))
        shape[axis] *= n
        out = list(shape)
        out[axis] //= n
        tensors = [TensorSpec((1,), np.int32, data=i32([axis])), TensorSpec(tuple(shape), np.int8, *Q)]
        tensors += [TensorSpec(tuple(out), np.int8, *Q) for _ in range(n)]
        model = single_op_model(OP.SPLIT, tensors, [0, 1], list(range(2, 2 + n)),
                                *named_options("SplitOptions", NumSplits=n))
        check_on_chip(mem, model, [random_int8(rng, tuple(shape))], f"case {case}: {shape} axis {axis} n {n}",
                      export=case < 5)


def test_split_v(mem) -> None:
    rng = np.random.default_rng(501)
    for case in range(CASES):
        shape = list(rshape(rng))
        axis = int(rng.integers(-len(shape), len(shape)))
        n = int(rng.integers(1, 4))
        sizes = [int(s) for s in rng.integers(0 if n > 1 else 1, 4, size=n)]
        if sum(sizes) == 0:
            sizes[0] = 1
        shape[axis] = sum(sizes)
        given = list(sizes)
        if rng.random() < 0.3:
            given[int(rng.integers(n))] = -1
        outs = []
        for s in sizes:
            o = list(shape)
            o[axis] = s
            outs.append(TensorSpec(tuple(o), np.int8, *Q))
        tensors = [TensorSpec(tuple(shape), np.int8, *Q), TensorSpec((n,), np.int32, data=i32(given)),
                   TensorSpec((1,), np.int32, data=i32([axis])), *outs]
        model = single_op_model(OP.SPLIT_V, tensors, [0, 1, 2], list(range(3, 3 + n)),
                                *named_options("SplitVOptions", NumSplits=n))
        check_on_chip(mem, model, [random_int8(rng, tuple(shape))], f"case {case}: {shape} axis {axis} {given}")


def test_unpack(mem) -> None:
    rng = np.random.default_rng(502)
    for case in range(CASES):
        shape = rshape(rng, 2, 5)
        axis = int(rng.integers(-len(shape), len(shape)))
        n = shape[axis]
        out = tuple(d for i, d in enumerate(shape) if i != axis % len(shape))
        tensors = [TensorSpec(shape, np.int8, *Q)] + [TensorSpec(out, np.int8, *Q) for _ in range(n)]
        model = single_op_model(OP.UNPACK, tensors, [0], list(range(1, 1 + n)),
                                *named_options("UnpackOptions", Num=n, Axis=axis))
        check_on_chip(mem, model, [random_int8(rng, shape)], f"case {case}: {shape} axis {axis}", export=case < 5)


def test_slice(mem) -> None:
    rng = np.random.default_rng(503)
    for case in range(CASES):
        shape = rshape(rng)
        begin = [int(rng.integers(0, d)) for d in shape]
        size = [int(rng.integers(1, d - b + 1)) if rng.random() < 0.8 else -1 for b, d in zip(begin, shape)]
        out = tuple(d - b if s == -1 else s for b, s, d in zip(begin, size, shape))
        tensors = [TensorSpec(shape, np.int8, *Q), TensorSpec((len(shape),), np.int32, data=i32(begin)),
                   TensorSpec((len(shape),), np.int32, data=i32(size)), TensorSpec(out, np.int8, *Q)]
        model = single_op_model(OP.SLICE, tensors, [0, 1, 2], [3])
        check_on_chip(mem, model, [random_int8(rng, shape)], f"case {case}: {shape} {begin} {size}",
                      export=case < 5)


@pytest.mark.parametrize("kind", ["DEPTH_TO_SPACE", "SPACE_TO_DEPTH"])
def test_depth_space(mem, kind) -> None:
    rng = np.random.default_rng(504 if kind == "DEPTH_TO_SPACE" else 505)
    for case in range(CASES):
        b = int(rng.integers(1, 4))
        n, h, w, c = (int(v) for v in rng.integers(1, 5, size=4))
        if kind == "DEPTH_TO_SPACE":
            shape, out = (n, h, w, c * b * b), (n, h * b, w * b, c)
            otype, opts = named_options("DepthToSpaceOptions", BlockSize=b)
        else:
            shape, out = (n, h * b, w * b, c), (n, h, w, c * b * b)
            otype, opts = named_options("SpaceToDepthOptions", BlockSize=b)
        tensors = [TensorSpec(shape, np.int8, *Q), TensorSpec(out, np.int8, *Q)]
        model = single_op_model(getattr(OP, kind), tensors, [0], [1], otype, opts)
        check_on_chip(mem, model, [random_int8(rng, shape)], f"case {case}: {shape} block {b}", export=case < 5)


def test_pack(mem) -> None:
    rng = np.random.default_rng(506)
    for case in range(CASES):
        shape = rshape(rng, 1, 4)
        k = int(rng.integers(1, 5))
        axis = int(rng.integers(-len(shape) - 1, len(shape) + 1))
        out = list(shape)
        out.insert(axis % (len(shape) + 1), k)
        tensors = [TensorSpec(shape, np.int8, *Q) for _ in range(k)] + [TensorSpec(tuple(out), np.int8, *Q)]
        model = single_op_model(OP.PACK, tensors, list(range(k)), [k],
                                *named_options("PackOptions", ValuesCount=k, Axis=axis), version=2)
        check_on_chip(mem, model, [random_int8(rng, shape) for _ in range(k)], f"case {case}: {k}x{shape} axis {axis}",
                      export=case < 5)


def test_strided_slice_with_ellipsis_and_new_axes(mem) -> None:
    rng = np.random.default_rng(507)
    done = 0
    for case in range(CASES):
        shape = rshape(rng, 1, 5)
        entries, ellipsis, new_axis, shrink, begin_mask, end_mask = [], 0, 0, 0, 0, 0
        used_ellipsis = False
        dims = list(shape)
        while dims or (rng.random() < 0.3 and len(entries) < 6):
            i = len(entries)
            r = rng.random()
            if r < 0.15 and not used_ellipsis and dims:
                ellipsis |= 1 << i
                used_ellipsis = True
                take = int(rng.integers(1, len(dims) + 1)) if dims else 0
                dims = dims[take:]
                entries.append((0, 0, 1))
            elif r < 0.3 or not dims:
                new_axis |= 1 << i
                entries.append((0, 0, 1))
            else:
                d = dims.pop(0)
                b, e = int(rng.integers(-d, d)), int(rng.integers(-d, d + 1))
                st = int(rng.choice([1, 1, 2, -1]))
                if rng.random() < 0.2:
                    shrink |= 1 << i
                    e, st = b + 1, 1
                begin_mask |= int(rng.random() < 0.3) << i
                end_mask |= int(rng.random() < 0.3) << i
                entries.append((b, e, st))
            if len(entries) >= 6:
                break
        if not (ellipsis or new_axis) or len(entries) > 6:
            continue
        begin, end, strides = (np.int32([e[k] for e in entries]) for k in range(3))
        probe = np.arange(int(np.prod(shape))).reshape(shape)
        index = []
        for i, (b, e, st) in enumerate(entries):
            if (ellipsis >> i) & 1:
                index.append(Ellipsis)
            elif (new_axis >> i) & 1:
                index.append(None)
            elif (shrink >> i) & 1:
                index.append(b)
            else:
                index.append(slice(None if (begin_mask >> i) & 1 else b, None if (end_mask >> i) & 1 else e, st))
        try:
            out_shape = probe[tuple(index)].shape
        except IndexError:
            continue
        if 0 in out_shape or len(out_shape) > 6:
            continue

        def options(bld):
            tflite.StridedSliceOptionsStart(bld)
            tflite.StridedSliceOptionsAddBeginMask(bld, begin_mask)
            tflite.StridedSliceOptionsAddEndMask(bld, end_mask)
            tflite.StridedSliceOptionsAddEllipsisMask(bld, ellipsis)
            tflite.StridedSliceOptionsAddNewAxisMask(bld, new_axis)
            tflite.StridedSliceOptionsAddShrinkAxisMask(bld, shrink)
            return tflite.StridedSliceOptionsEnd(bld)

        n = len(entries)
        tensors = [TensorSpec(shape, np.int8, *Q), TensorSpec((n,), np.int32, data=begin),
                   TensorSpec((n,), np.int32, data=end), TensorSpec((n,), np.int32, data=strides),
                   TensorSpec(out_shape, np.int8, *Q)]
        model = single_op_model(OP.STRIDED_SLICE, tensors, [0, 1, 2, 3], [4],
                                tflite.BuiltinOptions.StridedSliceOptions, options, version=4)
        check_on_chip(mem, model, [random_int8(rng, shape)],
                      f"case {case}: {shape} {entries} ellipsis {ellipsis:b} new {new_axis:b} shrink {shrink:b} "
                      f"masks {begin_mask:b},{end_mask:b}")
        done += 1
    assert done >= 50


def test_an_ellipsis_for_no_axis_is_refused() -> None:
    from libnpu.compiler.tflite_import import UnsupportedOpError, import_tflite

    def options(bld):
        tflite.StridedSliceOptionsStart(bld)
        tflite.StridedSliceOptionsAddEllipsisMask(bld, 0b10)
        return tflite.StridedSliceOptionsEnd(bld)

    tensors = [TensorSpec((3, 3), np.int8, *Q)] + [TensorSpec((3,), np.int32, data=i32(v))
                                                    for v in ([0, 0, 1], [2, 0, 3], [1, 1, 1])]
    tensors.append(TensorSpec((2, 2), np.int8, *Q))
    model = single_op_model(OP.STRIDED_SLICE, tensors, [0, 1, 2, 3], [4], tflite.BuiltinOptions.StridedSliceOptions,
                            options, version=4)
    with pytest.raises(UnsupportedOpError, match="ellipsis standing for no axis"):
        import_tflite(model)
