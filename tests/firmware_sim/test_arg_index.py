"""ARG_MAX / ARG_MIN with int32 and int64 outputs: int8 single-op models imported,
lowered and run on the chip, byte-identical to LiteRT BUILTIN_REF (200 random cases
each); ONNX ArgMax / ArgMin compiled from float models agree with onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from libnpu.compiler.lower import lower
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.quantizer import quantize_model
from tests.support.chip_memory import run_loadable
from tests.support.op_check import check_on_chip
from tests.support.quant_utils import random_int8
from tests.support.tflite_builder import TensorSpec, single_op_model

OP = tflite.BuiltinOperator



@pytest.mark.parametrize("kind", ["ARG_MAX", "ARG_MIN"])
def test_arg_index_matches_litert(mem, kind) -> None:
    rng = np.random.default_rng(1000 if kind == "ARG_MAX" else 1001)
    for case in range(200):
        shape = tuple(int(d) for d in rng.integers(1, 7, size=int(rng.integers(1, 5))))
        axis = int(rng.integers(-len(shape), len(shape)))
        out = tuple(d for i, d in enumerate(shape) if i != axis % len(shape))
        wide = bool(rng.integers(2))
        dtype = np.int64 if wide else np.int32
        kind_code = tflite.TensorType.INT64 if wide else tflite.TensorType.INT32
        cls = "ArgMaxOptions" if kind == "ARG_MAX" else "ArgMinOptions"

        def options(b):
            getattr(tflite, f"{cls}Start")(b)
            getattr(tflite, f"{cls}AddOutputType")(b, kind_code)
            return getattr(tflite, f"{cls}End")(b)

        tensors = [TensorSpec(shape, np.int8, [0.05], [3]), TensorSpec((1,), np.int32, data=np.int32([axis])),
                   TensorSpec(out, dtype)]
        model = single_op_model(getattr(OP, kind), tensors, [0, 1], [2], getattr(tflite.BuiltinOptions, cls),
                                options, version=2)
        # Few distinct values, so ties (first index wins) are common.
        x = rng.integers(-3, 3, shape).astype(np.int8) if case % 3 == 0 else random_int8(rng, shape)
        check_on_chip(mem, model, [x], f"case {case}: {shape} axis {axis} {dtype.__name__}", export=case < 5)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keep", [(1, 1), (3, 0), (-1, 1)])
def test_onnx_arg_index(mem, op, axis, keep) -> None:
    import onnxruntime as ort

    from tests.libnpu.compiler.test_onnx_ops import X4, single_node
    out = tuple(1 if i == axis % 4 else d for i, d in enumerate(X4)) if keep else \
        tuple(d for i, d in enumerate(X4) if i != axis % 4)
    model = single_node(op, {"x": X4}, {"y": out}, axis=axis, keepdims=keep)
    model.graph.output[0].type.tensor_type.elem_type = 7   # int64
    q = quantize_model(import_onnx(model), random_count=16)
    ld = lower(q)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    # Values on the input's quantization grid, spaced so the quantized order is the float one.
    grid = np.linspace(-1, 1, 64, dtype=np.float32)
    for _ in range(3):
        x = rng.choice(grid, X4).astype(np.float32)
        (got,) = run_loadable(mem, ld, [x])
        (expected,) = sess.run(None, {"x": x})
        assert got.dtype == np.int64 and got.shape == expected.shape
        assert np.array_equal(got, expected)
