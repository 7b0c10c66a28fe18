"""BATCH_MATMUL of two int8 activations (adjoint flags, broadcast batch axes; a constant
right-hand side in a quarter of the cases): single-op
models imported, lowered and run on the chip, byte-identical to LiteRT BUILTIN_REF
(200 random cases)."""
from __future__ import annotations

import numpy as np
import tflite

from firmware_sim.kernels.matmul import matmul_shape
from tests.support.op_check import check_on_chip
from tests.support.quant_utils import random_int8
from tests.support.tflite_builder import TensorSpec, single_op_model

OP = tflite.BuiltinOperator



def test_batch_matmul_matches_litert(mem) -> None:
    rng = np.random.default_rng(700)
    for case in range(200):
        batch_rank = int(rng.integers(0, 3))
        batch = [int(d) for d in rng.integers(1, 4, size=batch_rank)]
        lb = [d if rng.random() < 0.7 else 1 for d in batch]
        rb = [d if rng.random() < 0.7 else 1 for d in batch]
        rows, depth, cols = (int(v) for v in rng.integers(1, 17, size=3))
        adj_x, adj_y = bool(rng.integers(2)), bool(rng.integers(2))
        lhs = (*lb, *((depth, rows) if adj_x else (rows, depth)))
        rhs = (*rb, *((cols, depth) if adj_y else (depth, cols)))
        out = matmul_shape(lhs, rhs, adj_x, adj_y)
        q = [([float(rng.uniform(0.005, 0.05))], [int(rng.integers(-30, 31))]) for _ in range(2)]
        qo = ([float(rng.uniform(0.05, 0.5)) * np.sqrt(depth)], [int(rng.integers(-30, 31))])

        def options(b):
            tflite.BatchMatMulOptionsStart(b)
            tflite.BatchMatMulOptionsAddAdjX(b, adj_x)
            tflite.BatchMatMulOptionsAddAdjY(b, adj_y)
            return tflite.BatchMatMulOptionsEnd(b)

        rhs_data = random_int8(rng, rhs) if case % 4 == 3 else None   # a constant right-hand side
        tensors = [TensorSpec(lhs, np.int8, *q[0]), TensorSpec(rhs, np.int8, *q[1], data=rhs_data),
                   TensorSpec(out, np.int8, *qo)]
        model = single_op_model(OP.BATCH_MATMUL, tensors, [0, 1], [2], tflite.BuiltinOptions.BatchMatMulOptions,
                                options, version=2)
        feeds = [random_int8(rng, lhs)] + ([random_int8(rng, rhs)] if rhs_data is None else [])
        check_on_chip(mem, model, feeds,
                      f"case {case}: {lhs} x {rhs} adj {adj_x},{adj_y} {q} -> {qo}", export=case < 5)
