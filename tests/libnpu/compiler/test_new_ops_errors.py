"""What the new operators cannot express is refused at import with one message naming
the node and the reason."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from libnpu.compiler.onnx_import import ONNXImportError, import_onnx
from libnpu.compiler.tflite_import import UnsupportedOpError, import_tflite
from tests.libnpu.compiler.test_onnx_ops import X4, single_node
from tests.support.tflite_builder import TensorSpec, single_op_model
from tests.support.tflite_builder import int32_const as _i32  # short: the case tables below are wide
from tests.support.tflite_builder import named_options as _opts

OP = tflite.BuiltinOperator
Q = ([0.05], [3])


@pytest.mark.parametrize("model,match", [
    (single_op_model(OP.GATHER, [TensorSpec((4, 3), np.int8, *Q), _i32([1, 4]), TensorSpec((2, 3), np.int8, *Q)],
                     [0, 1], [2], *_opts("GatherOptions", Axis=0)), r"GATHER node 0 .*index lies outside axis 0"),
    (single_op_model(OP.MIRROR_PAD, [TensorSpec((2, 3), np.int8, *Q), _i32([[0, 0], [3, 0]]),
                                     TensorSpec((2, 6), np.int8, *Q)], [0, 1], [2], *_opts("MirrorPadOptions", Mode=0)),
     r"MIRROR_PAD node 0 .*REFLECT padding \(3, 0\) is too large for size 3"),
    (single_op_model(OP.SPLIT, [_i32([1]), TensorSpec((2, 5), np.int8, *Q), TensorSpec((2, 2), np.int8, *Q),
                                TensorSpec((2, 2), np.int8, *Q)], [0, 1], [2, 3], *_opts("SplitOptions", NumSplits=2)),
     r"SPLIT node 0 .*5 does not split into 2 equal parts"),
    (single_op_model(OP.SPLIT_V, [TensorSpec((2, 5), np.int8, *Q), _i32([-1, -1]), _i32([1]),
                                  TensorSpec((2, 2), np.int8, *Q), TensorSpec((2, 3), np.int8, *Q)], [0, 1, 2], [3, 4],
                     *_opts("SplitVOptions", NumSplits=2)), r"SPLIT_V node 0 .*bad split sizes \[-1, -1\]"),
    (single_op_model(OP.TILE, [TensorSpec((2, 5), np.int8, *Q), _i32([2]), TensorSpec((4, 5), np.int8, *Q)],
                     [0, 1], [2], version=2), r"TILE node 0 .*multiples \[2\] for shape \(2, 5\)"),
], ids=["gather", "mirror_pad", "split", "split_v", "tile"])
def test_tflite_refusals(model, match) -> None:
    with pytest.raises(UnsupportedOpError, match=match):
        import_tflite(model)


@pytest.mark.parametrize("model,match", [
    (single_node("Gather", {"x": X4}, {"y": (1, 1, 6, 6)}, {"i": np.int64([8])}, axis=1), "index lies outside axis 1"),
    (single_node("ReduceSum", {"x": X4}, {"y": X4}, {"a": np.zeros(0, np.int64)}, noop_with_empty_axes=1),
     "noop_with_empty_axes"),
    (single_node("ArgMax", {"x": X4}, {"y": (1, 1, 6, 6)}, axis=1, select_last_index=1), "select_last_index"),
    (single_node("Pad", {"x": X4}, {"y": (1, 8, 13, 6)}, {"p": np.int64([0, 0, 7, 0, 0, 0, 0, 0])}, mode="reflect"),
     "REFLECT padding \\(7, 0\\) is too large for size 6"),
], ids=["gather", "reduce_noop", "argmax_last", "pad_reflect"])
def test_onnx_refusals(model, match) -> None:
    if model.graph.node[0].op_type == "ArgMax":
        model.graph.output[0].type.tensor_type.elem_type = 7
    with pytest.raises(ONNXImportError, match=match):
        import_onnx(model)
