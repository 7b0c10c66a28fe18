"""An int8 model's PAD in front of a convolution (MobileNetV2's before each strided
depthwise layer) folds into the convolution's padding: one task less, and outputs still
byte-identical to LiteRT's reference kernels, on the first run (numpy) and on replays (C).
A PAD between two different grids stays a PAD."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from libnpu.compiler.lower import compile_model
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, int32_const, named_options, run_reference


def _pad_conv_model(depthwise: bool, stride: int, pads: tuple[tuple[int, int], tuple[int, int]],
                    pad_out_zp: int = -3) -> tuple[bytes, tuple[int, ...]]:
    """x [1, 9, 10, 4] -> PAD (height/width) -> 3x3 conv or depthwise (VALID, ``stride``) -> y."""
    rng = np.random.default_rng(stride + len(pads) + int(depthwise))
    h, w, cin, cout = 9, 10, 4, 8
    ph, pw = h + sum(pads[0]), w + sum(pads[1])
    oh, ow = (ph - 3) // stride + 1, (pw - 3) // stride + 1
    weights = rng.integers(-127, 128, (1, 3, 3, cout) if depthwise else (cout, 3, 3, cin), dtype=np.int8)
    w_scales = [0.01 + 0.002 * i for i in range(cout)]
    bias = rng.integers(-500, 500, cout).astype(np.int32)
    tensors = [
        TensorSpec((1, h, w, cin), np.int8, [0.05], [-3], name="x"),
        int32_const([[0, 0], list(pads[0]), list(pads[1]), [0, 0]]),
        TensorSpec((1, ph, pw, cin), np.int8, [0.05], [pad_out_zp], name="padded"),
        TensorSpec(weights.shape, np.int8, w_scales, [0] * cout, 3 if depthwise else 0, weights, "w"),
        TensorSpec((cout,), np.int32, [0.05 * s for s in w_scales], [0] * cout, 0, bias, "b"),
        TensorSpec((1, oh, ow, cout), np.int8, [0.12], [5], name="y"),
    ]
    window = dict(Padding=tflite.Padding.VALID, StrideH=stride, StrideW=stride)
    if depthwise:
        conv = OpSpec(tflite.BuiltinOperator.DEPTHWISE_CONV_2D, [2, 3, 4], [5],
                      *named_options("DepthwiseConv2DOptions", DepthMultiplier=cout // cin, **window), version=3)
    else:
        conv = OpSpec(tflite.BuiltinOperator.CONV_2D, [2, 3, 4], [5], *named_options("Conv2DOptions", **window),
                      version=3)
    return build_model(tensors, [OpSpec(tflite.BuiltinOperator.PAD, [0, 1], [2]), conv], [0], [5]), (1, h, w, cin)


@pytest.mark.parametrize("depthwise, stride, pads, pad_out_zp, folded", [
    (True, 2, ((0, 1), (0, 1)), -3, True),
    (True, 2, ((1, 1), (1, 1)), -3, True),
    (False, 2, ((1, 0), (0, 1)), -3, True),
    (True, 1, ((1, 1), (2, 2)), -3, True),
    (True, 2, ((0, 1), (0, 1)), 7, False),          # the PAD changes the zero point: kept
], ids=["depthwise x2 bottom-right", "depthwise x2 all sides", "conv x2", "depthwise x1 wide", "two grids"])
def test_int8_pad_folds_into_the_convolution(tmp_path, depthwise, stride, pads, pad_out_zp, folded) -> None:
    data, shape = _pad_conv_model(depthwise, stride, pads, pad_out_zp)
    loadable = compile_model(data)
    assert len(loadable.tasks) == (1 if folded else 2), [t.name for t in loadable.tasks]
    mem = ChipMemory(tmp_path)
    rng = np.random.default_rng(1)
    for _ in range(3):      # the first run decodes (numpy), the others replay (C)
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        x.reshape(-1)[:2] = [-128, 127]
        (got,) = run_loadable(mem, loadable, [x])
        (want,) = run_reference(data, x)
        np.testing.assert_array_equal(got, want)
