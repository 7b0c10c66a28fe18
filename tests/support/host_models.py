"""Models with an operator the chip lacks, for the CPU-fallback tests: built with
``model_builders``' ONNX helper and ``tflite_builder``."""
from __future__ import annotations

import numpy as np
import onnx

from .model_builders import _Builder


def with_cumsum(seed: int = 5) -> onnx.ModelProto:
    """Conv -> CumSum over the channels (an op the chip lacks) -> Relu -> Conv.
    Input [1, 3, 6, 6]."""
    b = _Builder(seed)
    n = b.node
    n("Conv", ["x", b.weight("w1", 4, 3, 3, 3), b.weight("b1", 4, scale=.1)], "c1", pads=[1, 1, 1, 1])
    n("CumSum", ["c1", b.const("axis", np.int64(1))], "cs")
    n("Relu", ["cs"], "r")
    n("Conv", ["r", b.weight("w2", 2, 4, 1, 1), b.weight("b2", 2, scale=.1)], "y")
    return b.model("with_cumsum", {"x": [1, 3, 6, 6]}, {"y": [1, 2, 6, 6]})


def int8_fc_sandwich(middle: int | str, seed: int = 0, *, axis_operand: bool = True) -> bytes:
    """int8 TFLite: FULLY_CONNECTED -> ``middle`` -> FULLY_CONNECTED, input [1, 16] int8.

    ``middle``: a builtin code taking (x, int32 axis [1]) like REVERSE_V2 (or only x
    without ``axis_operand``), or a custom op's code (a string: one input, no options)."""
    import tflite

    from .tflite_builder import OpSpec, TensorSpec, build_model
    rng = np.random.default_rng(seed)

    def fc_options(builder):
        tflite.FullyConnectedOptionsStart(builder)
        return tflite.FullyConnectedOptionsEnd(builder)
    fc = tflite.BuiltinOptions.FullyConnectedOptions
    tensors = [
        TensorSpec((1, 16), np.int8, [0.05], [3], name="x"),
        TensorSpec((8, 16), np.int8, [0.02], [0], data=rng.integers(-127, 128, (8, 16)), name="w1"),
        TensorSpec((8,), np.int32, [0.001], [0], data=rng.integers(-500, 500, 8), name="b1"),
        TensorSpec((1, 8), np.int8, [0.08], [-5], name="h"),
        TensorSpec((1,), np.int32, data=np.array([1]), name="axis"),
        TensorSpec((1, 8), np.int8, [0.08], [-5], name="mid"),
        TensorSpec((4, 8), np.int8, [0.03], [0], data=rng.integers(-127, 128, (4, 8)), name="w2"),
        TensorSpec((4,), np.int32, [0.0024], [0], data=rng.integers(-500, 500, 4), name="b2"),
        TensorSpec((1, 4), np.int8, [0.1], [2], name="y"),
    ]
    if isinstance(middle, str):
        mid = OpSpec(tflite.BuiltinOperator.CUSTOM, [3], [5], custom_code=middle)
    else:
        mid = OpSpec(middle, [3, 4] if axis_operand else [3], [5])
    ops = [OpSpec(tflite.BuiltinOperator.FULLY_CONNECTED, [0, 1, 2], [3], fc, fc_options), mid,
           OpSpec(tflite.BuiltinOperator.FULLY_CONNECTED, [5, 6, 7], [8], fc, fc_options)]
    return build_model(tensors, ops, [0], [8])
