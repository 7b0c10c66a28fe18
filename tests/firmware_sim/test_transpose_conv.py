"""TRANSPOSE_CONV, int8 with per-channel weights, bias or none, SAME/VALID, fused
activations: single-op models imported, lowered and run on the chip, byte-identical to
LiteRT BUILTIN_REF (200 random cases)."""
from __future__ import annotations

import numpy as np
import tflite

from tests.support.op_check import check_on_chip
from tests.support.quant_utils import random_int8
from tests.support.tflite_builder import TensorSpec, single_op_model

OP = tflite.BuiltinOperator



def test_transpose_conv_matches_litert(mem) -> None:
    rng = np.random.default_rng(800)
    for case in range(200):
        n, h, w = 1, int(rng.integers(1, 6)), int(rng.integers(1, 6))
        cin, cout = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        same = bool(rng.integers(2))
        # The output size TFLite's converter writes: SAME h * s, VALID (h - 1) * s + k.
        oh, ow = (h * sh, w * sw) if same else ((h - 1) * sh + kh, (w - 1) * sw + kw)
        act = int(rng.choice([0, 0, 1, 3]))
        w_scales = rng.uniform(0.002, 0.02, cout)
        q_in = ([float(rng.uniform(0.01, 0.05))], [int(rng.integers(-20, 21))])
        q_out = ([float(rng.uniform(0.05, 0.4))], [int(rng.integers(-20, 21))])
        weights = rng.integers(-127, 128, (cout, kh, kw, cin)).astype(np.int8)
        with_bias = bool(rng.integers(2))
        tensors = [TensorSpec((4,), np.int32, data=np.int32([n, oh, ow, cout])),
                   TensorSpec((cout, kh, kw, cin), np.int8, list(w_scales), [0] * cout, 0, weights),
                   TensorSpec((n, h, w, cin), np.int8, *q_in),
                   TensorSpec((n, oh, ow, cout), np.int8, *q_out)]
        inputs = [0, 1, 2]
        if with_bias:
            bias = rng.integers(-3000, 3000, cout).astype(np.int32)
            tensors.append(TensorSpec((cout,), np.int32, list(w_scales * q_in[0][0]), [0] * cout, 0, bias))
            inputs.append(4)

        def options(b):
            tflite.TransposeConvOptionsStart(b)
            tflite.TransposeConvOptionsAddPadding(b, 0 if same else 1)
            tflite.TransposeConvOptionsAddStrideH(b, sh)
            tflite.TransposeConvOptionsAddStrideW(b, sw)
            tflite.TransposeConvOptionsAddFusedActivationFunction(b, act)
            return tflite.TransposeConvOptionsEnd(b)

        model = single_op_model(OP.TRANSPOSE_CONV, tensors, inputs, [3], tflite.BuiltinOptions.TransposeConvOptions,
                                options, version=4 if act else 3)
        check_on_chip(mem, model, [random_int8(rng, (n, h, w, cin))],
                      f"case {case}: in {(h, w, cin)} k {(kh, kw)} s {(sh, sw)} same {same} act {act} bias {with_bias}",
                      export=case < 5)
