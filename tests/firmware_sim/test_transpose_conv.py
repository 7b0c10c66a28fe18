"""TRANSPOSE_CONV, int8 with per-channel weights, bias or none, SAME/VALID, fused
activations, and TFLite's 16x8 form (int16 activations, int64 bias): single-op models
imported, lowered and run on the chip, byte-identical to LiteRT BUILTIN_REF (200 random int8
cases, 40 int16)."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from tests.support.op_check import check_on_chip
from tests.support.quant_utils import random_int8
from tests.support.tflite_builder import TensorSpec, single_op_model

OP = tflite.BuiltinOperator



@pytest.mark.parametrize("int16", [False, True], ids=["int8", "int16"])
def test_transpose_conv_matches_litert(mem, int16) -> None:
    rng = np.random.default_rng(801 if int16 else 800)
    act_type, bias_type = (np.int16, np.int64) if int16 else (np.int8, np.int32)
    for case in range(40 if int16 else 200):
        n, h, w = 1, int(rng.integers(1, 6)), int(rng.integers(1, 6))
        cin, cout = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        same = bool(rng.integers(2))
        # The output size TFLite's converter writes: SAME h * s, VALID (h - 1) * s + k.
        oh, ow = (h * sh, w * sw) if same else ((h - 1) * sh + kh, (w - 1) * sw + kw)
        act = int(rng.choice([0, 0, 1, 3]))
        w_scales = rng.uniform(0.002, 0.02, cout)
        q_in = ([float(rng.uniform(0.01, 0.05))], [0 if int16 else int(rng.integers(-20, 21))])
        q_out = ([float(rng.uniform(0.05, 0.4)) / (256 if int16 else 1)], [0 if int16 else int(rng.integers(-20, 21))])
        weights = rng.integers(-127, 128, (cout, kh, kw, cin)).astype(np.int8)
        with_bias = bool(rng.integers(2))
        tensors = [TensorSpec((4,), np.int32, data=np.int32([n, oh, ow, cout])),
                   TensorSpec((cout, kh, kw, cin), np.int8, list(w_scales), [0] * cout, 0, weights),
                   TensorSpec((n, h, w, cin), act_type, *q_in),
                   TensorSpec((n, oh, ow, cout), act_type, *q_out)]
        inputs = [0, 1, 2]
        if with_bias:
            bias = rng.integers(-3000, 3000, cout).astype(bias_type) * (256 if int16 else 1)
            tensors.append(TensorSpec((cout,), bias_type, list(w_scales * q_in[0][0]), [0] * cout, 0, bias))
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
        x = rng.integers(-32768, 32768, (n, h, w, cin)).astype(np.int16) if int16 else random_int8(rng, (n, h, w, cin))
        check_on_chip(mem, model, [x],
                      f"{act_type.__name__} case {case}: in {(h, w, cin)} k {(kh, kw)} s {(sh, sw)} same {same} "
                      f"act {act} bias {with_bias}",
                      export=case < 5)
