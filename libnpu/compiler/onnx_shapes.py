"""ONNX shape inference without the weights' bytes.

``onnx.shape_inference.infer_shapes`` serializes the whole model, weights included, hands it
to its C++ pass and parses the result back: on ddddocr-rec (54 MB of weights) each call
cost about 0.9 s, and one compile made seven (the input shapes, each round of constant
folding, the importer's strict pass). Shape inference reads a weight's type and dims,
never its values (data propagation reads small integer shapes; the float operands it
reads, such as Resize's scales, are a few values), so it runs here on a copy of the model
whose float initializers of ``MIN_VALUES`` values or more are emptied: :func:`inferred_shapes`
returns that copy inferred (to read shapes from), :func:`infer_shapes` writes what it
inferred into the model itself.
"""
from __future__ import annotations

import math
from typing import Any

import onnx
from onnx import TensorProto, shape_inference

__all__ = ["MIN_VALUES", "inferred_shapes", "infer_shapes"]

#: Float initializers of this many values or more are emptied in shape inference's copy.
MIN_VALUES = 256
_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)


def inferred_shapes(model: onnx.ModelProto, **options: Any) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(model, **options)`` run on a copy of ``model``
    without its large float weights' values: read the shapes from it, not the weights.
    ``model`` is not changed; onnx's errors are raised as they are."""
    light = onnx.ModelProto()
    light.CopyFrom(model)       # a C copy: ~8x faster than the serialization it spares
    for init in light.graph.initializer:
        if init.data_type in _FLOATS and math.prod(init.dims) >= MIN_VALUES:   # (ByteSize walks the bytes)
            init.ClearField("raw_data")
            for field in ("float_data", "double_data", "int32_data"):    # float16 values live in int32_data
                init.ClearField(field)
    return shape_inference.infer_shapes(light, **options)


def infer_shapes(model: onnx.ModelProto, **options: Any) -> onnx.ModelProto:
    """``model`` with what :func:`inferred_shapes` found written into it (its graph's
    value_info, outputs and nodes, whose subgraphs carry their own), changed in place and
    returned: what ``onnx.shape_inference.infer_shapes`` returns, without its cost."""
    inferred = inferred_shapes(model, **options)
    graph, found = model.graph, inferred.graph
    for field in ("value_info", "output", "node"):
        del getattr(graph, field)[:]
        getattr(graph, field).extend(getattr(found, field))
    return model
