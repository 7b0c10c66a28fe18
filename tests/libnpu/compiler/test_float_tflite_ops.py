"""Float TFLite models of the layout, reduction, matmul and transposed-conv operators go
through the quantizer (random calibration in [-1, 1]) and, run on the chip, match float
LiteRT within 5% of the largest output magnitude (ARG_MAX: exactly, on well-separated
values)."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from libnpu.compiler.lower import lower
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_import import import_tflite
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.tflite_builder import TensorSpec, run_reference, single_op_model
from tests.support.tflite_builder import int32_const as _i32  # short: the case tables below are wide
from tests.support.tflite_builder import named_options as _opts

OP = tflite.BuiltinOperator
F = np.float32
X = (1, 6, 6, 8)


@pytest.fixture(scope="module")
def mem(tmp_path_factory) -> ChipMemory:
    return ChipMemory(tmp_path_factory.mktemp("chip"), size=8 << 20)


def _model(opcode, tensors, ins, outs, options=None, version: int = 1) -> bytes:
    otype, write = options if options else (0, None)
    return single_op_model(opcode, tensors, ins, outs, otype, write, version)


_W = (np.random.default_rng(3).standard_normal((4, 3, 3, 8)) * 0.3).astype(F)
MODELS = {
    "SPLIT": _model(OP.SPLIT, [_i32([3]), TensorSpec(X, F), TensorSpec((1, 6, 6, 4), F), TensorSpec((1, 6, 6, 4), F)],
                    [0, 1], [2, 3], _opts("SplitOptions", NumSplits=2)),
    "SPLIT_V": _model(OP.SPLIT_V, [TensorSpec(X, F), _i32([1, -1]), _i32([1]), TensorSpec((1, 1, 6, 8), F),
                                   TensorSpec((1, 5, 6, 8), F)], [0, 1, 2], [3, 4],
                      _opts("SplitVOptions", NumSplits=2)),
    "UNPACK": _model(OP.UNPACK, [TensorSpec((3, 5), F)] + [TensorSpec((5,), F)] * 3, [0], [1, 2, 3],
                     _opts("UnpackOptions", Num=3, Axis=0)),
    "SLICE": _model(OP.SLICE, [TensorSpec(X, F), _i32([0, 1, 2, 3]), _i32([1, 4, -1, 5]), TensorSpec((1, 4, 4, 5), F)],
                    [0, 1, 2], [3]),
    "PACK": _model(OP.PACK, [TensorSpec((4, 5), F), TensorSpec((4, 5), F), TensorSpec((4, 2, 5), F)], [0, 1], [2],
                   _opts("PackOptions", ValuesCount=2, Axis=1)),
    "DEPTH_TO_SPACE": _model(OP.DEPTH_TO_SPACE, [TensorSpec(X, F), TensorSpec((1, 12, 12, 2), F)], [0], [1],
                             _opts("DepthToSpaceOptions", BlockSize=2)),
    "SPACE_TO_DEPTH": _model(OP.SPACE_TO_DEPTH, [TensorSpec(X, F), TensorSpec((1, 3, 3, 32), F)], [0], [1],
                             _opts("SpaceToDepthOptions", BlockSize=2)),
    "TRANSPOSE_CONV": _model(OP.TRANSPOSE_CONV, [_i32([1, 12, 12, 4]), TensorSpec(_W.shape, F, data=_W),
                                                 TensorSpec(X, F), TensorSpec((1, 12, 12, 4), F)], [0, 1, 2], [3],
                             _opts("TransposeConvOptions", Padding=0, StrideH=2, StrideW=2)),
    "BATCH_MATMUL": _model(OP.BATCH_MATMUL, [TensorSpec((2, 4, 8), F), TensorSpec((1, 8, 3), F),
                                             TensorSpec((2, 4, 3), F)], [0, 1], [2]),
    "SUM": _model(OP.SUM, [TensorSpec(X, F), _i32([1, 2]), TensorSpec((1, 8), F)], [0, 1], [2],
                  _opts("ReducerOptions", KeepDims=False)),
    "REDUCE_MAX": _model(OP.REDUCE_MAX, [TensorSpec(X, F), _i32([3]), TensorSpec((1, 6, 6, 1), F)], [0, 1], [2],
                         _opts("ReducerOptions", KeepDims=True)),
    "REDUCE_MIN": _model(OP.REDUCE_MIN, [TensorSpec(X, F), _i32([0, 2]), TensorSpec((6, 8), F)], [0, 1], [2],
                         _opts("ReducerOptions", KeepDims=False)),
    "MEAN": _model(OP.MEAN, [TensorSpec(X, F), _i32([3, 1]), TensorSpec((1, 6), F)], [0, 1], [2],
                   _opts("ReducerOptions", KeepDims=False)),
    "GATHER": _model(OP.GATHER, [TensorSpec(X, F), _i32([[7, 0], [3, 3]]), TensorSpec((1, 6, 6, 2, 2), F)], [0, 1],
                     [2], _opts("GatherOptions", Axis=3)),
    "MIRROR_PAD": _model(OP.MIRROR_PAD, [TensorSpec(X, F), _i32([[0, 0], [2, 1], [0, 3], [0, 0]]),
                                         TensorSpec((1, 9, 9, 8), F)], [0, 1], [2], _opts("MirrorPadOptions", Mode=0)),
    "BROADCAST_TO": _model(OP.BROADCAST_TO, [TensorSpec((1, 6, 1, 8), F), _i32([2, 6, 5, 8]),
                                             TensorSpec((2, 6, 5, 8), F)], [0, 1], [2], version=2),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_float_model_through_the_quantizer(mem, name) -> None:
    model = MODELS[name]
    g = import_tflite(model)
    ld = lower(quantize_model(g, random_count=64))
    rng = np.random.default_rng(4)
    for _ in range(3):
        feeds = [rng.uniform(-1, 1, g.tensors[n].shape).astype(F) for n in g.inputs]
        for k, (a, b) in enumerate(zip(run_loadable(mem, ld, feeds), run_reference(model, *feeds), strict=True)):
            bound = 0.05 * float(np.abs(b).max())
            assert a.shape == b.shape and float(np.abs(a - b).max()) <= bound + 1e-6, f"{name}: output {k}"


def test_float_arg_max(mem) -> None:
    model = _model(OP.ARG_MAX, [TensorSpec(X, F), _i32([3]), TensorSpec((1, 6, 6), np.int64)], [0, 1], [2],
                   _opts("ArgMaxOptions", OutputType=tflite.TensorType.INT64))
    g = import_tflite(model)
    ld = lower(quantize_model(g, random_count=16))
    rng = np.random.default_rng(5)
    x = rng.choice(np.linspace(-1, 1, 32, dtype=F), X)
    (got,) = run_loadable(mem, ld, [x])
    assert np.array_equal(got, run_reference(model, x)[0])
