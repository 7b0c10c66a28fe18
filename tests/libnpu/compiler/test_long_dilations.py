"""Convolutions whose dilated filter is longer than the chip takes (``MAX_FILTER_EXTENT``):
folded into rows at import (test_conv1d.py runs two on the device), or, where no fold
applies, refused by the lowering and placed on the CPU; never a loadable the chip fails (a
temporal U-Net's kernel 3 at dilation 2,048 failed its first job with EINVAL)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.placement import CPU, plan_placement
from npu_hw.ops import MAX_FILTER_EXTENT
from tests.libnpu.compiler.test_conv1d import CASES


def test_long_dilation_is_folded_into_rows() -> None:
    """PAD to a whole number of rows, RESHAPE [L] -> [R, d], a K x 1 filter at dilation 1,
    RESHAPE back and the valid length sliced: every window within the chip's extent."""
    graph = import_onnx(CASES["kernel 3 at dilation 2048"])
    assert [op.type for op in graph.ops] == ["TRANSPOSE", "RESHAPE", "PAD", "RESHAPE", "CONV_2D", "RESHAPE",
                                             "STRIDED_SLICE", "RESHAPE", "TRANSPOSE"]
    (conv,) = [op for op in graph.ops if op.type == "CONV_2D"]
    assert conv.attrs["dilation"] == (1, 1) and conv.attrs["pads"] == (0, 0, 0, 0)
    assert graph.tensors[conv.inputs[0]].shape == (1, 3, 2048, 2)
    assert graph.tensors[conv.inputs[1]].shape == (3, 3, 1, 2)


def test_unfoldable_long_dilation_goes_to_the_cpu_with_its_reason() -> None:
    """A 3 x 3 filter dilated past the extent on both axes has no fold: the lowering refuses
    it, so placement puts it on the CPU, saying why (it was placed on the NPU, and the
    chip failed the job)."""
    d = MAX_FILTER_EXTENT // 2 + 1
    w = nh.from_array(np.full((2, 1, 3, 3), 0.1, np.float32), "w")
    graph = h.make_graph([h.make_node("Conv", ["x", "w"], ["y"], dilations=[d, d], pads=[d, d, d, d])], "c",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], [w])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    (placement,) = plan_placement(model.SerializeToString()).placements
    assert placement.device == CPU, placement
    assert f"dilated filter height {2 * d + 1} exceeds the chip's {MAX_FILTER_EXTENT}" in placement.reason
