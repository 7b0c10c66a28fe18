"""GATHER (constant indices), MIRROR_PAD and BROADCAST_TO, run on the chip's GATHER
descriptor one axis at a time: byte-identical to LiteRT BUILTIN_REF (200 random cases
each); a bad index table fails the job with EINVAL."""
from __future__ import annotations

import errno

import numpy as np
import pytest
import tflite

from tests.support.chip_memory import encode
from tests.support.op_check import check_on_chip
from tests.support.quant_utils import random_int8
from tests.support.tflite_builder import TensorSpec, single_op_model

OP = tflite.BuiltinOperator
CASES = 200
Q = ([0.05], [3])



def rshape(rng, lo=1, hi=5) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, 7, size=int(rng.integers(lo, hi))))


def test_gather(mem) -> None:
    rng = np.random.default_rng(900)
    for case in range(CASES):
        shape = rshape(rng)
        axis = int(rng.integers(-len(shape), len(shape)))
        idx_shape = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        idx = rng.integers(0, shape[axis], idx_shape).astype(np.int32)
        out = shape[:axis % len(shape)] + idx_shape + shape[axis % len(shape) + 1:]

        def options(b):
            tflite.GatherOptionsStart(b)
            tflite.GatherOptionsAddAxis(b, axis)
            return tflite.GatherOptionsEnd(b)

        tensors = [TensorSpec(shape, np.int8, *Q), TensorSpec(idx_shape, np.int32, data=idx),
                   TensorSpec(out, np.int8, *Q)]
        model = single_op_model(OP.GATHER, tensors, [0, 1], [2], tflite.BuiltinOptions.GatherOptions, options,
                                version=2)
        check_on_chip(mem, model, [random_int8(rng, shape)], f"case {case}: {shape} axis {axis} idx {idx.tolist()}",
                      export=case < 5)


def test_mirror_pad(mem) -> None:
    rng = np.random.default_rng(901)
    for case in range(CASES):
        shape = rshape(rng)
        symmetric = bool(rng.integers(2))
        top = [d if symmetric else d - 1 for d in shape]
        pads = np.asarray([[int(rng.integers(0, t + 1)), int(rng.integers(0, t + 1))] for t in top], np.int32)
        out = tuple(int(d + a + b) for d, (a, b) in zip(shape, pads))

        def options(b):
            tflite.MirrorPadOptionsStart(b)
            tflite.MirrorPadOptionsAddMode(b, int(symmetric))
            return tflite.MirrorPadOptionsEnd(b)

        tensors = [TensorSpec(shape, np.int8, *Q), TensorSpec(pads.shape, np.int32, data=pads),
                   TensorSpec(out, np.int8, *Q)]
        model = single_op_model(OP.MIRROR_PAD, tensors, [0, 1], [2], tflite.BuiltinOptions.MirrorPadOptions,
                                options, version=2)
        check_on_chip(mem, model, [random_int8(rng, shape)],
                      f"case {case}: {shape} {pads.tolist()} symmetric {symmetric}", export=case < 5)


def test_broadcast_to(mem) -> None:
    rng = np.random.default_rng(902)
    for case in range(CASES):
        out = rshape(rng, 1, 5)
        rank = int(rng.integers(1, len(out) + 1))
        shape = tuple(d if rng.random() < 0.5 else 1 for d in out[len(out) - rank:])
        tensors = [TensorSpec(shape, np.int8, *Q), TensorSpec((len(out),), np.int32, data=np.int32(out)),
                   TensorSpec(out, np.int8, *Q)]
        model = single_op_model(OP.BROADCAST_TO, tensors, [0, 1], [2], version=2)
        check_on_chip(mem, model, [random_int8(rng, shape)], f"case {case}: {shape} -> {out}", export=case < 5)


def test_index_outside_the_axis_fails_the_job(mem) -> None:
    x = mem.put(np.arange(12, dtype=np.int8))
    table = mem.put(np.int32([0, 5]))
    out = mem.alloc(8)
    result = mem.run(encode("GATHER", input=x, output=out, indices_iova=table, outer=3, axis_size=4, inner=1,
                            count=2))
    assert result.status == -errno.EINVAL
    table = mem.put(np.int32([3, 0]))
    assert mem.run(encode("GATHER", input=x, output=out, indices_iova=table, outer=3, axis_size=4, inner=1,
                          count=2)).status == 0
    assert mem.get(out, np.int8, (6,)).tolist() == [3, 0, 7, 4, 11, 8]


def test_tile(mem) -> None:
    rng = np.random.default_rng(903)
    for case in range(CASES):
        shape = rshape(rng, 1, 4)
        multiples = [int(m) for m in rng.integers(1, 4, size=len(shape))]
        out = tuple(d * m for d, m in zip(shape, multiples))
        tensors = [TensorSpec(shape, np.int8, *Q), TensorSpec((len(shape),), np.int32, data=np.int32(multiples)),
                   TensorSpec(out, np.int8, *Q)]
        model = single_op_model(OP.TILE, tensors, [0, 1], [2], version=2)
        check_on_chip(mem, model, [random_int8(rng, shape)], f"case {case}: {shape} x {multiples}", export=case < 5)


def test_expand_dims(mem) -> None:
    rng = np.random.default_rng(904)
    for case in range(20):
        shape = rshape(rng, 1, 4)
        axis = int(rng.integers(-len(shape) - 1, len(shape) + 1))
        out = list(shape)
        out.insert(axis % (len(shape) + 1), 1)
        tensors = [TensorSpec(shape, np.int8, *Q), TensorSpec((1,), np.int32, data=np.int32([axis])),
                   TensorSpec(tuple(out), np.int8, *Q)]
        model = single_op_model(OP.EXPAND_DIMS, tensors, [0, 1], [2])
        check_on_chip(mem, model, [random_int8(rng, shape)], f"case {case}: {shape} axis {axis}")


def test_gather_by_run_time_indices(mem) -> None:
    """An embedding lookup: int32 ids are a model input, the table a constant or an activation."""
    rng = np.random.default_rng(905)
    for case in range(CASES):
        shape = rshape(rng, 1, 4)
        axis = int(rng.integers(0, len(shape)))
        idx_shape = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(1, 3))))
        out = shape[:axis] + idx_shape + shape[axis + 1:]
        constant_table = bool(rng.integers(2))
        table = random_int8(rng, shape)

        def options(b):
            tflite.GatherOptionsStart(b)
            tflite.GatherOptionsAddAxis(b, axis)
            return tflite.GatherOptionsEnd(b)

        tensors = [TensorSpec(shape, np.int8, *Q, data=table if constant_table else None),
                   TensorSpec(idx_shape, np.int32), TensorSpec(out, np.int8, *Q)]
        model = single_op_model(OP.GATHER, tensors, [0, 1], [2], tflite.BuiltinOptions.GatherOptions, options,
                                version=2)
        ids = rng.integers(0, shape[axis], idx_shape).astype(np.int32)
        feeds = [ids] if constant_table else [table, ids]
        check_on_chip(mem, model, feeds, f"case {case}: {shape} axis {axis} ids {ids.tolist()} "
                      f"constant table {constant_table}", export=case < 5)


def test_run_time_index_outside_the_table_fails_the_job(mem, tmp_path) -> None:
    from libnpu.compiler.lower import lower
    from libnpu.compiler.tflite_import import import_tflite
    from tests.support.chip_memory import run_loadable

    def options(b):
        tflite.GatherOptionsStart(b)
        return tflite.GatherOptionsEnd(b)

    tensors = [TensorSpec((4, 3), np.int8, *Q, data=np.zeros((4, 3), np.int8)), TensorSpec((2,), np.int32),
               TensorSpec((2, 3), np.int8, *Q)]
    ld = lower(import_tflite(single_op_model(OP.GATHER, tensors, [0, 1], [2], tflite.BuiltinOptions.GatherOptions,
                                             options, version=2)))
    with pytest.raises(AssertionError, match="status=-22"):
        run_loadable(mem, ld, [np.int32([1, 4])])
    (got,) = run_loadable(mem, ld, [np.int32([3, 0])])
    assert got.shape == (2, 3)
