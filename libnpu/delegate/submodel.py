"""Cut a TFLite model out of an interpreter's context: the nodes a delegate looks at,
rebuilt as a ``.tflite`` flatbuffer that libnpu's compiler takes as it takes a file.

The interpreter hands a delegate its graph as C structures, not as the model file: each
node's builtin code, version, operands and ``builtin_data`` (its options as a C struct),
each tensor's type, shape, quantization and, for weights, data. This module reads them
(``tflite_c`` declares the layouts) into :class:`Node` / :class:`TensorInfo` records and
writes those back as a flatbuffer. Tensors are named ``t<index>`` after their index in
the interpreter, so a compiled partition's inputs and outputs map back to it by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import flatbuffers  # type: ignore[import-untyped]
import numpy as np
import tflite  # type: ignore[import-untyped]

from libnpu.compiler import registry
from libnpu.compiler.tflite_export import options_table

from .tflite_c import ALLOCATION_CONSTANT, LAYOUTS, TYPES

__all__ = ["TensorInfo", "Node", "read_tensor", "read_node", "write_model", "tensor_name", "BUILTIN_NAMES"]

BUILTIN_NAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
_SCHEMA_TYPE = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7, "int8": 9}


def tensor_name(index: int) -> str:
    return f"t{index}"


@dataclass
class TensorInfo:
    """One interpreter tensor as the sub-model needs it."""
    index: int
    dtype: str | None                        # None: a type no chip partition carries
    shape: tuple[int, ...]
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    axis: int = 0
    data: bytes | None = None                # constants only

    @property
    def constant(self) -> bool:
        return self.data is not None


@dataclass
class Node:
    """One interpreter node: its builtin, options and operands."""
    index: int
    op: str                                  # builtin name, "CUSTOM:<name>" or "DELEGATE"
    version: int
    inputs: list[int]
    outputs: list[int]
    options: tuple[str, dict[str, Any]] | None = None    # (options table, fields)
    unreadable: str = ""                     # why the delegate cannot rebuild it ("" when it can)


def _int_array(array: Any) -> list[int]:
    return [] if array == 0 else [int(array.data[i]) for i in range(array.size)]


def read_tensor(ffi: Any, context: Any, index: int) -> TensorInfo:
    """Tensor ``index`` of ``context``, with its data when it is a constant."""
    t = context.tensors[index]
    dtype = TYPES.get(int(t.type))
    shape = tuple(_int_array(t.dims)) if t.dims != ffi.NULL else ()
    info = TensorInfo(index, dtype, shape)
    if int(t.quantization.type) == 1 and t.quantization.params != ffi.NULL:
        affine = ffi.cast("TfLiteAffineQuantization*", t.quantization.params)
        if affine.scale != ffi.NULL and affine.scale.size > 0:
            info.scale = np.array([affine.scale.data[i] for i in range(affine.scale.size)], np.float32)
            info.zero_point = np.array(_int_array(affine.zero_point) if affine.zero_point != ffi.NULL
                                       else [0] * info.scale.size, np.int64)
            info.axis = int(affine.quantized_dimension)
    elif float(t.params.scale) != 0.0:
        info.scale = np.array([t.params.scale], np.float32)
        info.zero_point = np.array([t.params.zero_point], np.int64)
    if int(t.allocation_type) in ALLOCATION_CONSTANT and t.data != ffi.NULL:
        info.data = bytes(ffi.buffer(t.data, t.bytes))
    return info


def read_node(ffi: Any, context: Any, index: int) -> Node:
    """Node ``index`` of ``context`` (``unreadable`` says why the delegate must leave it)."""
    node_p, reg_p = ffi.new("TfLiteNode**"), ffi.new("TfLiteRegistration**")
    if context.GetNodeAndRegistration(context, index, node_p, reg_p) != 0:
        return Node(index, "UNKNOWN", 1, [], [], unreadable="the interpreter did not describe it")
    node, reg = node_p[0], reg_p[0]
    inputs, outputs = _int_array(node.inputs), _int_array(node.outputs)
    code = int(reg.builtin_code)
    if node.delegate != ffi.NULL:
        return Node(index, "DELEGATE", 1, inputs, outputs, unreadable="already delegated")
    if code == 32:     # BuiltinOperator.CUSTOM
        name = ffi.string(reg.custom_name).decode(errors="replace") if reg.custom_name != ffi.NULL else "?"
        return Node(index, f"CUSTOM:{name}", int(reg.version), inputs, outputs, unreadable="a custom operator")
    op = BUILTIN_NAMES.get(code, f"BUILTIN_{code}")
    found = Node(index, op, int(reg.version), inputs, outputs)
    declared, table = registry.tflite_options_table(op)
    layout = LAYOUTS.get(table) if table else None
    if not declared or (table and layout is None):
        found.unreadable = "the delegate does not read this operator's options"
    elif layout is not None:
        if node.builtin_data == ffi.NULL:
            found.unreadable = "its options are missing"
        else:
            try:
                found.options = (layout.table, layout.read(ffi, node.builtin_data))
            except ValueError as exc:
                found.unreadable = str(exc)
    return found


def write_model(tensors: dict[int, TensorInfo], nodes: list[Node], inputs: list[int], outputs: list[int],
                name: str = "delegate partition") -> bytes:
    """A single-subgraph ``.tflite`` of ``nodes`` (in order) over ``tensors``."""
    b = flatbuffers.Builder(1 << 16)
    order = sorted(tensors)
    position = {index: i for i, index in enumerate(order)}
    buffers = [options_table(b, "Buffer")]
    tensor_offsets = []
    for index in order:
        t = tensors[index]
        buffer = 0
        if t.data is not None:
            raw = np.frombuffer(t.data, np.uint8)
            b.StartVector(1, raw.size, 16)
            b.head -= raw.size
            b.Bytes[b.head:b.head + raw.size] = t.data
            b.vectorNumElems = raw.size
            buffers.append(options_table(b, "Buffer", Data=b.EndVector()))
            buffer = len(buffers) - 1
        fields: dict[str, Any] = {}
        if t.scale is not None and t.zero_point is not None:
            fields["Quantization"] = options_table(b, "QuantizationParameters", Scale=b.CreateNumpyVector(t.scale),
                                            ZeroPoint=b.CreateNumpyVector(t.zero_point),
                                            QuantizedDimension=int(t.axis))
        tensor_offsets.append(options_table(b, "Tensor", Shape=b.CreateNumpyVector(np.asarray(t.shape, np.int32)),
                                     Type=_SCHEMA_TYPE[t.dtype or "float32"], Buffer=buffer,
                                     Name=b.CreateString(tensor_name(index)), **fields))
    codes: list[tuple[str, int]] = []
    op_offsets = []
    for node in nodes:
        key = (node.op, node.version)
        if key not in codes:
            codes.append(key)
        extra: dict[str, Any] = {}
        if node.options is not None:
            table, values = node.options
            extra = dict(BuiltinOptionsType=getattr(tflite.BuiltinOptions, table),
                         BuiltinOptions=options_table(b, table, **values))
        op_offsets.append(options_table(
            b, "Operator", OpcodeIndex=codes.index(key),
            Inputs=b.CreateNumpyVector(np.asarray([position.get(i, -1) for i in node.inputs], np.int32)),
            Outputs=b.CreateNumpyVector(np.asarray([position[i] for i in node.outputs], np.int32)), **extra))

    def vector(offsets: list[int]) -> int:
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    subgraph = options_table(b, "SubGraph", Tensors=vector(tensor_offsets), Operators=vector(op_offsets),
                      Inputs=b.CreateNumpyVector(np.asarray([position[i] for i in inputs], np.int32)),
                      Outputs=b.CreateNumpyVector(np.asarray([position[i] for i in outputs], np.int32)),
                      Name=b.CreateString("main"))
    code_offsets = []
    for op, version in codes:
        code = getattr(tflite.BuiltinOperator, op)
        code_offsets.append(options_table(b, "OperatorCode", DeprecatedBuiltinCode=min(code, 127), BuiltinCode=code,
                                   Version=version))
    model = options_table(b, "Model", Version=3, OperatorCodes=vector(code_offsets), Subgraphs=vector([subgraph]),
                   Description=b.CreateString(name), Buffers=vector(buffers))
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())
