"""TFLite flatbuffers at the edges of the schema: what LiteRT reads, the importer reads too;
what LiteRT refuses, the importer refuses naming the field and its table's byte offset."""
from __future__ import annotations

from collections.abc import Callable

import flatbuffers
import numpy as np
import pytest
import tflite
from ai_edge_litert import schema_py_generated as schema

from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.frontend import load_model
from libnpu.compiler.tflite_import import TFLiteImportError, import_tflite
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, int32_const, named_options, run_reference

_X = np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)


def _fc() -> bytes:
    """x [1, 4] -> FULLY_CONNECTED (weights w, no bias) -> y [1, 3], float."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    tensors = [TensorSpec((1, 4), np.float32, name="x"), TensorSpec((3, 4), np.float32, data=w, name="w"),
               TensorSpec((1, 3), np.float32, name="y")]
    return build_model(tensors, [OpSpec(tflite.BuiltinOperator.FULLY_CONNECTED, [0, 1, -1], [2])], [0], [2])


def _edited(edit: Callable[[schema.ModelT], None], model: bytes | None = None) -> bytes:
    m = schema.ModelT.InitFromPackedBuf(bytearray(model or _fc()), 0)
    edit(m)
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _after_the_flatbuffer(extra: int = 0) -> bytes:
    """The large-model layout (buffers' data after the flatbuffer, by ``offset`` and
    ``size``), the weights' ``size`` overstated by ``extra`` bytes."""
    m = schema.ModelT.InitFromPackedBuf(bytearray(_fc()), 0)
    data = bytes(m.buffers[1].data)
    m.buffers[1].data, m.buffers[1].size = None, len(data) + extra
    m.buffers[1].offset = 1 << 12          # a placeholder as wide as the final offset
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    head = bytes(b.Output())
    m.buffers[1].offset = (len(head) + 15) // 16 * 16
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    head = bytes(b.Output())
    return head + bytes(m.buffers[1].offset - len(head)) + data


def _no_name(m: schema.ModelT) -> None:
    m.subgraphs[0].tensors[1].name = None          # vtable entry 0: the field is absent


def _unused_string_tensor(m: schema.ModelT) -> None:
    t = schema.TensorT()
    t.shape, t.type, t.name = [2], schema.TensorType.STRING, b"unused"
    m.subgraphs[0].tensors.append(t)


def _newer_fields(m: schema.ModelT) -> None:
    variant = schema.VariantSubTypeT()
    variant.shape = [1]
    x, w, y = m.subgraphs[0].tensors
    x.shapeSignature, y.shapeSignature, y.variantTensors = [1, 4], [1, 3], [variant]


def _shared_name(model: bytes) -> bytes:
    """Tensors 0 and 2 named by one string, as a builder deduplicating strings writes it."""
    m = tflite.Model.GetRootAsModel(model, 0)
    sg = m.Subgraphs(0)
    buf = bytearray(model)
    x, y = sg.Tensors(0), sg.Tensors(2)
    x_field, y_field = x._tab.Offset(10) + x._tab.Pos, y._tab.Offset(10) + y._tab.Pos    # name: field 3
    target = x_field + int.from_bytes(buf[x_field:x_field + 4], "little")
    buf[y_field:y_field + 4] = (target - y_field).to_bytes(4, "little")
    return bytes(buf)


@pytest.mark.parametrize("model", [
    pytest.param(lambda: _edited(_no_name), id="no-name"),
    pytest.param(lambda: _shared_name(_fc()), id="shared-name-string"),
    pytest.param(lambda: _edited(_unused_string_tensor), id="unused-tensor-of-another-type"),
    pytest.param(lambda: _edited(_newer_fields), id="shape-signature-variant-tensors"),
    pytest.param(_after_the_flatbuffer, id="buffer-after-the-flatbuffer"),
])
def test_what_litert_reads_imports(model):
    data = model()
    want = run_reference(data, _X)[0]
    graph = import_tflite(data, "m")
    assert len(set(graph.tensors)) == 3
    got = FloatInterpreter(graph).run({graph.inputs[0]: _X})[graph.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _set(path: str, value) -> Callable[[schema.ModelT], None]:
    def edit(m: schema.ModelT) -> None:
        *parents, last = path.split(".")
        obj = m
        for p in parents:
            obj = obj[int(p)] if p.isdigit() else getattr(obj, p)
        setattr(obj, last, value)
    return edit


@pytest.mark.parametrize("edit, message", [
    (_set("subgraphs.0.operators.0.inputs", [0, 7, -1]),
     r"subgraph 0 operator 0 \(table at byte \d+\): inputs\[1\] is tensor 7, out of range "
     r"\(the subgraph has 3 tensors\)"),
    (_set("subgraphs.0.outputs", [9]),
     r"subgraph 0 \(table at byte \d+\): outputs\[0\] is tensor 9, out of range"),
    (_set("subgraphs.0.tensors.1.buffer", 9),
     r"subgraph 0 tensor 1 \(table at byte \d+\): buffer 9 is out of range \(the model has 2 buffers\)"),
    (_set("subgraphs.0.operators.0.opcodeIndex", 5),
     r"subgraph 0 operator 0 \(table at byte \d+\): opcode_index 5 is out of range"),
], ids=["operator-input", "subgraph-output", "tensor-buffer", "opcode-index"])
def test_an_index_past_its_vector_is_named(edit, message):
    """LiteRT refuses these files ("Invalid tensor index 7 in node inputs"); the importer
    read the bytes past the vector as a table (a name of flatbuffer bytes, an input "used
    before it is produced", a low-level error)."""
    data = _edited(edit)
    with pytest.raises((RuntimeError, ValueError)):
        run_reference(data, _X)
    with pytest.raises(TFLiteImportError, match=f"^m: broken TFLite file: {message}"):
        import_tflite(data, "m")


def test_data_past_the_end_of_the_file_is_named():
    with pytest.raises(TFLiteImportError, match=r"^m: broken TFLite file: buffer 1 \(table at byte \d+\): its data "
                                                r"\(offset \d+, size 1048\) ends past the file's \d+ bytes"):
        import_tflite(_after_the_flatbuffer(1000), "m")


def test_a_free_dimension_beside_kernel_temporaries():
    """LiteRT lists the temporaries its kernels add (MEAN's three) after the file's tensors;
    sizing the model for its input shapes read them as tensors of the flatbuffer, past
    its vector ("corrupted or truncated TFLite file"; in a larger file, "tensor 49
    ('\\x0b\\x00...') changes rank")."""
    tensors = [TensorSpec((1, 4, 3), np.float32, name="x", signature=(1, -1, 3)), int32_const([1]),
               TensorSpec((1, 3), np.float32, name="y")]
    kind, options = named_options("ReducerOptions", KeepDims=False)
    model = build_model(tensors, [OpSpec(tflite.BuiltinOperator.MEAN, [0, 1], [2], kind, options)], [0], [2])
    graph = load_model(model, input_shapes={"x": (1, 8, 3)})
    assert graph.tensors["x"].shape == (1, 8, 3) and graph.tensors["y"].shape == (1, 3)
