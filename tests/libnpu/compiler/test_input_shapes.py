"""Free input dimensions (ONNX dim_param, TFLite -1): given by the caller, the leading batch
1 by default with a note, any other one an error naming them all; never silently 1."""
from __future__ import annotations

import re

import pytest

from libnpu.compiler.frontend import load_model
from libnpu.compiler.input_shapes import InputShapeError, parse_input_shapes, resolve_input_shapes
from libnpu.compiler.lower import compile_model
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.tflite_import import import_tflite
from tests.support.free_dims_models import audio_onnx, batch_only_onnx, sequence_tflite


def _shapes(graph):
    return {n: graph.tensors[n].shape for n in [*graph.inputs, *graph.outputs]}


def test_free_onnx_dimensions_are_listed_not_pinned_to_1():
    with pytest.raises(InputShapeError) as err:
        import_onnx(audio_onnx(), "audio")
    assert str(err.value) == ("audio: input 'audio' has free dimensions [0:batch, 1:samples]: "
                              "give --input-shape audio=1,<samples>")


def test_given_onnx_shape_is_used_and_inferred_downstream():
    graph = import_onnx(audio_onnx(), "audio", input_shapes={"audio": (1, 16)})
    assert _shapes(graph) == {"audio": (1, 16), "y": (1, 8, 2)}
    assert _shapes(import_onnx(audio_onnx(), input_shapes=[1, 10])) == {"audio": (1, 10), "y": (1, 5, 2)}


def test_a_free_batch_alone_is_1_with_a_note():
    assert _shapes(import_onnx(batch_only_onnx())) == {"x": (1, 4), "y": (1, 4)}
    loadable = compile_model(batch_only_onnx().SerializeToString(), random_count=2)
    assert loadable.metadata["notes"] == [
        "input 'x': free batch dimension 0:N set to 1 (--input-shape x=1,4 to choose)"]
    assert "notes" not in compile_model(batch_only_onnx().SerializeToString(), random_count=2,
                                        input_shapes={"x": (3, 4)}).metadata
    assert [t.shape for t in compile_model(batch_only_onnx().SerializeToString(), random_count=2,
                                           input_shapes={"x": (3, 4)}).inputs()] == [(3, 4)]


@pytest.mark.parametrize("given, message", [
    ({"audo": (1, 16)}, "--input-shape names no input 'audo' (inputs: 'audio')"),
    ({"audio": (1, 2, 16)}, "input 'audio' has 2 dimensions [batch, samples]; --input-shape gives 3 (1,2,16)"),
    ({"audio": (1, 0)}, "--input-shape audio=1,0: dimensions must be positive integers"),
])
def test_a_shape_the_model_cannot_take_is_one_line(given, message):
    with pytest.raises(InputShapeError, match="^audio: " + re.escape(message) + "$"):
        import_onnx(audio_onnx(), "audio", input_shapes=given)


def test_a_fixed_dimension_keeps_its_size():
    with pytest.raises(InputShapeError, match=r"input 'x' dimension 1 is fixed at 4 \[N, 4\]; --input-shape gives 5"):
        import_onnx(batch_only_onnx(), input_shapes={"x": (1, 5)})


def test_the_rule_lists_every_free_dimension_of_every_input():
    declared = {"a": ["batch", "t", 3], "b": [1, None], "c": None, "d": [None, 4]}
    with pytest.raises(InputShapeError) as err:
        resolve_input_shapes(declared, None, "m")
    assert str(err.value) == ("m: input 'a' has free dimensions [0:batch, 1:t]: give --input-shape a=1,<t>,3; "
                              "input 'b' has free dimensions [1]: give --input-shape b=1,<d1>; "
                              "input 'c' has no declared shape: give --input-shape c=D,D,...")
    shapes, notes = resolve_input_shapes(declared, {"a": (2, 5, 3), "b": (1, 7), "c": (4,)}, "m")
    assert shapes == {"a": (2, 5, 3), "b": (1, 7), "c": (4,), "d": (1, 4)}
    assert notes == ["input 'd': free batch dimension 0 set to 1 (--input-shape d=1,4 to choose)"]
    with pytest.raises(InputShapeError, match="for a single-input model; this one has 4 inputs"):
        resolve_input_shapes(declared, (1, 2), "m")


@pytest.mark.parametrize("texts, message", [
    (["x=1,a"], "expected NAME=D,D,..."),
    (["=1,2"], "the input name before '=' is empty"),
    (["x=1,-1"], "dimensions must be positive integers"),
    (["x=1,2", "x=1,3"], "for 'x' given twice"),
    (["1,2", "y=1,3"], "is for a single-input model"),
])
def test_command_line_shapes_are_checked(texts, message):
    with pytest.raises(InputShapeError, match=message):
        parse_input_shapes(texts)


def test_command_line_shapes_parse():
    assert parse_input_shapes(["audio=1,16000", "state:0=2,64"]) == {"audio": (1, 16000), "state:0": (2, 64)}
    assert parse_input_shapes(["1,16000"]) == {None: (1, 16000)}


def test_a_tflite_minus_one_needs_a_shape():
    with pytest.raises(InputShapeError, match=r"^seq: input 'x' has free dimensions \[1\]: give --input-shape "
                                              r"x=1,<d1>$"):
        import_tflite(sequence_tflite(), "seq")


def test_a_tflite_minus_one_takes_the_given_shape_everywhere():
    graph = load_model(sequence_tflite(), input_shapes={"x": (1, 32)})
    assert {n: t.shape for n, t in graph.tensors.items() if not t.is_constant} == {
        "x": (1, 32), "rows": (1, 8, 4), "y": (1, 8, 4)}
    loadable = compile_model(sequence_tflite(), input_shapes=[1, 12])
    assert [t.shape for t in loadable.inputs()] == [(1, 12)]
    assert [t.shape for t in loadable.outputs()] == [(1, 3, 4)]
    with pytest.raises(InputShapeError, match="LiteRT cannot size the model for inputs x=1,6"):
        load_model(sequence_tflite(), input_shapes={"x": (1, 6)})      # 6 values are no rows of 4


def test_a_minus_one_dim_value_is_free_as_paddle_writes_it():
    """Paddle's exporter (PP-OCR's det, rec and cls) writes free dimensions as dim_value -1."""
    import onnx
    model = batch_only_onnx()
    for vi in (*model.graph.input, *model.graph.output):
        vi.type.tensor_type.shape.dim[0].ClearField("dim_param")
        vi.type.tensor_type.shape.dim[0].dim_value = -1
    onnx.checker.check_model(model)
    assert _shapes(import_onnx(model, input_shapes={"x": (2, 4)})) == {"x": (2, 4), "y": (2, 4)}
    assert _shapes(import_onnx(model)) == {"x": (1, 4), "y": (1, 4)}      # a free batch: 1, with a note
