"""BATCH_MATMUL of two int8 activations (adjoint flags, broadcast batch axes; a constant
right-hand side in a quarter of the cases), and of two int16 activations (LiteRT's int16
kernel: zero points 0, int64 sums): single-op models imported, lowered and run on the
chip, byte-identical to LiteRT BUILTIN_REF (200 and 60 random cases)."""
from __future__ import annotations

import errno

import numpy as np
import pytest
import tflite

from firmware_sim.kernels.matmul import matmul_shape
from npu_hw import ops
from tests.support.chip_memory import encode, ranked, run_ok
from tests.support.op_check import check_on_chip
from tests.support.quant_utils import random_int8, random_int16
from tests.support.tflite_builder import TensorSpec, single_op_model

OP = tflite.BuiltinOperator
KINDS = {np.int8: (200, 31, random_int8), np.int16: (60, 0, random_int16)}  # cases, zero point reach, values


@pytest.mark.parametrize("dtype", [np.int8, np.int16], ids=["int8", "int16"])
def test_batch_matmul_matches_litert(mem, dtype) -> None:
    cases, zp, values = KINDS[dtype]
    rng = np.random.default_rng(700)
    for case in range(cases):
        batch_rank = int(rng.integers(0, 3))
        batch = [int(d) for d in rng.integers(1, 4, size=batch_rank)]
        lb = [d if rng.random() < 0.7 else 1 for d in batch]
        rb = [d if rng.random() < 0.7 else 1 for d in batch]
        rows, depth, cols = (int(v) for v in rng.integers(1, 17, size=3))
        adj_x, adj_y = bool(rng.integers(2)), bool(rng.integers(2))
        lhs = (*lb, *((depth, rows) if adj_x else (rows, depth)))
        rhs = (*rb, *((cols, depth) if adj_y else (depth, cols)))
        out = matmul_shape(lhs, rhs, adj_x, adj_y)
        q = [([float(rng.uniform(0.005, 0.05))], [int(rng.integers(-zp, zp + 1))]) for _ in range(2)]
        # int16 products reach 2**30 (int8: 2**14) and the output 2**15 (2**7): a step 2**8 coarser
        reach = 1.0 if dtype == np.int8 else 256.0
        qo = ([float(rng.uniform(0.05, 0.5)) * np.sqrt(depth) * reach], [int(rng.integers(-zp, zp + 1))])

        def options(b):
            tflite.BatchMatMulOptionsStart(b)
            tflite.BatchMatMulOptionsAddAdjX(b, adj_x)
            tflite.BatchMatMulOptionsAddAdjY(b, adj_y)
            return tflite.BatchMatMulOptionsEnd(b)

        rhs_data = values(rng, rhs) if case % 4 == 3 else None   # a constant right-hand side
        tensors = [TensorSpec(lhs, dtype, *q[0]), TensorSpec(rhs, dtype, *q[1], data=rhs_data),
                   TensorSpec(out, dtype, *qo)]
        model = single_op_model(OP.BATCH_MATMUL, tensors, [0, 1], [2], tflite.BuiltinOptions.BatchMatMulOptions,
                                options, version=2 if dtype == np.int8 else 3)
        feeds = [values(rng, lhs)] + ([values(rng, rhs)] if rhs_data is None else [])
        check_on_chip(mem, model, feeds,
                      f"case {case}: {lhs} x {rhs} adj {adj_x},{adj_y} {q} -> {qo}", export=case < 5)


def test_batch_matmul_int16_needs_zero_points_0(mem) -> None:
    """An int16 BATCH_MATMUL descriptor with a nonzero zero point fails its job (EINVAL)."""
    lhs, rhs = np.ones((2, 3), np.int16), np.ones((3, 4), np.int16)
    fields = dict(lhs=mem.put(lhs), rhs=mem.put(rhs), output=mem.alloc(16), rank=2, lhs_shape=ranked(lhs.shape),
                  rhs_shape=ranked(rhs.shape), multiplier=1 << 30, shift=0, act_min=-32768, act_max=32767)
    run_ok(mem, encode("BATCH_MATMUL", ops.OPF_INT16, **fields))
    np.testing.assert_array_equal(mem.get(fields["output"], np.int16, (2, 4)), np.full((2, 4), 2, np.int16))
    for zp in ("lhs_zp", "rhs_zp", "output_zp"):
        assert mem.run(encode("BATCH_MATMUL", ops.OPF_INT16, **fields, **{zp: 1})).status == -errno.EINVAL
