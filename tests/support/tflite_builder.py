"""Build small int8 .tflite models in memory and run them on LiteRT's reference kernels.

Models are written with the flatbuffer builder functions of the ``tflite`` package, so the
golden results come from the very TFLite schema and runtime users have, with no converter
in between. ``run_reference`` uses ``OpResolverType.BUILTIN_REF`` (the reference kernels);
XNNPACK (the default resolver) rounds differently and is never the golden source.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite
from ai_edge_litert.interpreter import Interpreter, OpResolverType

_TENSOR_TYPES = {
    np.dtype(np.float32): tflite.TensorType.FLOAT32,
    np.dtype(np.float16): tflite.TensorType.FLOAT16,
    np.dtype(np.int32): tflite.TensorType.INT32,
    np.dtype(np.uint8): tflite.TensorType.UINT8,
    np.dtype(np.int64): tflite.TensorType.INT64,
    np.dtype(np.int16): tflite.TensorType.INT16,
    np.dtype(np.int8): tflite.TensorType.INT8,
    np.dtype(np.bool_): tflite.TensorType.BOOL,
    np.dtype(np.complex64): tflite.TensorType.COMPLEX64,
}
RESOURCE = "resource"
"""``TensorSpec.dtype`` of a resource handle (VAR_HANDLE's output)."""


@dataclass
class TensorSpec:
    """One tensor: a graph input/output when ``data`` is None, a constant otherwise."""
    shape: Sequence[int]
    dtype: type | np.dtype | str
    scale: Sequence[float] | None = None
    zero_point: Sequence[int] | None = None
    quantized_dimension: int = 0
    data: np.ndarray | None = None
    name: str = ""
    sparsity: Any = None   # tests.support.sparse.Sparsity: ``data`` holds the stored values
    signature: Sequence[int] | None = None   # ``shape_signature``: -1 for a free dimension
    is_variable: bool = False   # a variable tensor (an LSTM's states): kept between invocations


@dataclass
class OpSpec:
    """One operator: builtin code, tensor indices and an optional options-table writer."""
    opcode: int
    inputs: Sequence[int]
    outputs: Sequence[int]
    options_type: int = 0
    options: Callable[[flatbuffers.Builder], int] | None = None
    version: int = 1
    custom_code: str = ""            # for opcode CUSTOM: the custom op's name
    custom_options: bytes = b""      # for opcode CUSTOM: its raw options
    intermediates: Sequence[int] = ()   # tensors the kernel's Prepare reads (integer LSTM's scales)


@dataclass
class SubgraphSpec:
    """A further subgraph (e.g. the init subgraph CALL_ONCE runs); subgraph 0 is the main one."""
    tensors: Sequence[TensorSpec]
    ops: Sequence[OpSpec]
    inputs: Sequence[int] = ()
    outputs: Sequence[int] = ()
    name: str = ""


def _offset_vector(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _quantization(b: flatbuffers.Builder, t: TensorSpec) -> int | None:
    if t.scale is None:
        return None
    scale = b.CreateNumpyVector(np.asarray(t.scale, dtype=np.float32))
    zp_values = t.zero_point if t.zero_point is not None else [0] * len(t.scale)
    zp = b.CreateNumpyVector(np.asarray(zp_values, dtype=np.int64))
    tflite.QuantizationParametersStart(b)
    tflite.QuantizationParametersAddScale(b, scale)
    tflite.QuantizationParametersAddZeroPoint(b, zp)
    tflite.QuantizationParametersAddQuantizedDimension(b, t.quantized_dimension)
    return tflite.QuantizationParametersEnd(b)


def build_model(tensors: Sequence[TensorSpec], ops: Sequence[OpSpec],
                inputs: Sequence[int], outputs: Sequence[int],
                subgraphs: Sequence[SubgraphSpec] = ()) -> bytes:
    """Serialize a TFLite model (schema version 3): the main subgraph, then ``subgraphs``."""
    b = flatbuffers.Builder(1024)
    graphs = [SubgraphSpec(tensors, ops, inputs, outputs, "main"), *subgraphs]
    # Buffer 0 is the empty sentinel; every constant tensor gets its own buffer.
    buffer_data: list[bytes | None] = [None]
    tensor_buffers: list[list[int]] = []
    for graph in graphs:
        tensor_buffers.append([])
        for t in graph.tensors:
            if t.data is None:
                tensor_buffers[-1].append(0)
                continue
            arr = np.array(t.data, dtype=t.dtype, order="C")
            if t.sparsity is None and tuple(arr.shape) != tuple(t.shape):
                raise ValueError(f"tensor {t.name!r}: data shape {arr.shape} != {t.shape}")
            tensor_buffers[-1].append(len(buffer_data))
            buffer_data.append(arr.tobytes())
    buffer_offsets = []
    for raw in buffer_data:
        data_off = None
        if raw is not None:
            b.StartVector(1, len(raw), 16)  # 16-byte aligned payload
            b.head -= len(raw)
            b.Bytes[b.head:b.head + len(raw)] = raw
            data_off = b.EndVector()
        tflite.BufferStart(b)
        if data_off is not None:
            tflite.BufferAddData(b, data_off)
        buffer_offsets.append(tflite.BufferEnd(b))

    codes = sorted({(op.opcode, op.version, op.custom_code) for graph in graphs for op in graph.ops})
    code_offsets = []
    for opcode, version, custom_code in codes:
        custom = b.CreateString(custom_code) if custom_code else None
        tflite.OperatorCodeStart(b)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(opcode, 127))
        tflite.OperatorCodeAddBuiltinCode(b, opcode)
        tflite.OperatorCodeAddVersion(b, version)
        if custom is not None:
            tflite.OperatorCodeAddCustomCode(b, custom)
        code_offsets.append(tflite.OperatorCodeEnd(b))

    subgraph_offsets = [_subgraph(b, graph, buffers, codes) for graph, buffers in zip(graphs, tensor_buffers)]
    subgraphs_vector = _offset_vector(b, subgraph_offsets)
    opcodes = _offset_vector(b, code_offsets)
    buffers_vector = _offset_vector(b, buffer_offsets)
    desc = b.CreateString("npu-emu kernel test")
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, opcodes)
    tflite.ModelAddSubgraphs(b, subgraphs_vector)
    tflite.ModelAddDescription(b, desc)
    tflite.ModelAddBuffers(b, buffers_vector)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _subgraph(b: flatbuffers.Builder, graph: SubgraphSpec, buffers: list[int],
              codes: list[tuple[int, int, str]]) -> int:
    tensor_offsets = []
    for i, t in enumerate(graph.tensors):
        name = b.CreateString(t.name or f"t{i}")
        shape = b.CreateNumpyVector(np.asarray(t.shape, dtype=np.int32))
        quant = _quantization(b, t)
        sparsity = t.sparsity.write(b) if t.sparsity is not None else None
        signature = b.CreateNumpyVector(np.asarray(t.signature, np.int32)) if t.signature is not None else None
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, tflite.TensorType.RESOURCE if t.dtype == RESOURCE
                             else _TENSOR_TYPES[np.dtype(t.dtype)])
        tflite.TensorAddBuffer(b, buffers[i])
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        if sparsity is not None:
            tflite.TensorAddSparsity(b, sparsity)
        if signature is not None:
            tflite.TensorAddShapeSignature(b, signature)
        if t.is_variable:
            tflite.TensorAddIsVariable(b, True)
        tensor_offsets.append(tflite.TensorEnd(b))

    op_offsets = []
    for op in graph.ops:
        ins = b.CreateNumpyVector(np.asarray(op.inputs, dtype=np.int32))
        outs = b.CreateNumpyVector(np.asarray(op.outputs, dtype=np.int32))
        opts = op.options(b) if op.options is not None else None
        inter = b.CreateNumpyVector(np.asarray(op.intermediates, dtype=np.int32)) if op.intermediates else None
        custom = b.CreateNumpyVector(np.frombuffer(op.custom_options, np.uint8)) if op.custom_options else None
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, codes.index((op.opcode, op.version, op.custom_code)))
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if inter is not None:
            tflite.OperatorAddIntermediates(b, inter)
        if custom is not None:
            tflite.OperatorAddCustomOptions(b, custom)
        if opts is not None:
            tflite.OperatorAddBuiltinOptionsType(b, op.options_type)
            tflite.OperatorAddBuiltinOptions(b, opts)
        op_offsets.append(tflite.OperatorEnd(b))

    sg_tensors = _offset_vector(b, tensor_offsets)
    sg_inputs = b.CreateNumpyVector(np.asarray(graph.inputs, dtype=np.int32))
    sg_outputs = b.CreateNumpyVector(np.asarray(graph.outputs, dtype=np.int32))
    sg_ops = _offset_vector(b, op_offsets)
    sg_name = b.CreateString(graph.name or "subgraph")
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, sg_tensors)
    tflite.SubGraphAddInputs(b, sg_inputs)
    tflite.SubGraphAddOutputs(b, sg_outputs)
    tflite.SubGraphAddOperators(b, sg_ops)
    tflite.SubGraphAddName(b, sg_name)
    return tflite.SubGraphEnd(b)


def var_handle(shared_name: str, container: str = "") -> Callable[[flatbuffers.Builder], int]:
    """VAR_HANDLE's options writer (``options_type=tflite.BuiltinOptions.VarHandleOptions``)."""
    def write(b: flatbuffers.Builder) -> int:
        name, box = b.CreateString(shared_name), b.CreateString(container)
        tflite.VarHandleOptionsStart(b)
        tflite.VarHandleOptionsAddContainer(b, box)
        tflite.VarHandleOptionsAddSharedName(b, name)
        return tflite.VarHandleOptionsEnd(b)
    return write


def call_once(init_subgraph: int) -> Callable[[flatbuffers.Builder], int]:
    """CALL_ONCE's options writer (``options_type=tflite.BuiltinOptions.CallOnceOptions``)."""
    def write(b: flatbuffers.Builder) -> int:
        tflite.CallOnceOptionsStart(b)
        tflite.CallOnceOptionsAddInitSubgraphIndex(b, init_subgraph)
        return tflite.CallOnceOptionsEnd(b)
    return write


def named_options(table: str, **fields: Any) -> tuple[int, Callable[[flatbuffers.Builder], int]]:
    """Any operator's options type and writer by the table's name: ``named_options(
    "GatherOptions", Axis=0)`` calls ``tflite.GatherOptionsAddAxis(b, 0)`` between Start and End."""
    def write(b: flatbuffers.Builder) -> int:
        getattr(tflite, f"{table}Start")(b)
        for field_name, value in fields.items():
            getattr(tflite, f"{table}Add{field_name}")(b, value)
        return getattr(tflite, f"{table}End")(b)
    return getattr(tflite.BuiltinOptions, table), write


def squeeze_options(dims: Sequence[int]) -> tuple[int, Callable[[flatbuffers.Builder], int]]:
    """SQUEEZE's options type and writer, squeezing axes ``dims``."""
    def write(b: flatbuffers.Builder) -> int:
        vector = b.CreateNumpyVector(np.asarray(dims, np.int32))
        tflite.SqueezeOptionsStart(b)
        tflite.SqueezeOptionsAddSqueezeDims(b, vector)
        return tflite.SqueezeOptionsEnd(b)
    return tflite.BuiltinOptions.SqueezeOptions, write


def int32_const(values: Any) -> TensorSpec:
    """A constant int32 tensor (axes, sizes, paddings) holding ``values``."""
    a = np.asarray(values, np.int32)
    return TensorSpec(a.shape, np.int32, data=a)


def pool2d_options(filter_hw: tuple[int, int], stride: tuple[int, int], same: bool,
                   activation: int = 0) -> Callable[[flatbuffers.Builder], int]:
    """MAX/AVERAGE_POOL_2D's options writer (``options_type=tflite.BuiltinOptions.Pool2DOptions``)."""
    def write(b: flatbuffers.Builder) -> int:
        tflite.Pool2DOptionsStart(b)
        tflite.Pool2DOptionsAddPadding(b, tflite.Padding.SAME if same else tflite.Padding.VALID)
        tflite.Pool2DOptionsAddStrideH(b, stride[0])
        tflite.Pool2DOptionsAddStrideW(b, stride[1])
        tflite.Pool2DOptionsAddFilterHeight(b, filter_hw[0])
        tflite.Pool2DOptionsAddFilterWidth(b, filter_hw[1])
        tflite.Pool2DOptionsAddFusedActivationFunction(b, activation)
        return tflite.Pool2DOptionsEnd(b)
    return write


def resize_options(opcode: int, align_corners: bool,
                   half_pixel_centers: bool) -> tuple[int, Callable[[flatbuffers.Builder], int]]:
    """RESIZE_BILINEAR's or RESIZE_NEAREST_NEIGHBOR's options type and writer."""
    if opcode == tflite.BuiltinOperator.RESIZE_BILINEAR:
        def bilinear(b: flatbuffers.Builder) -> int:
            tflite.ResizeBilinearOptionsStart(b)
            tflite.ResizeBilinearOptionsAddAlignCorners(b, align_corners)
            tflite.ResizeBilinearOptionsAddHalfPixelCenters(b, half_pixel_centers)
            return tflite.ResizeBilinearOptionsEnd(b)
        return tflite.BuiltinOptions.ResizeBilinearOptions, bilinear

    def nearest(b: flatbuffers.Builder) -> int:
        tflite.ResizeNearestNeighborOptionsStart(b)
        tflite.ResizeNearestNeighborOptionsAddAlignCorners(b, align_corners)
        tflite.ResizeNearestNeighborOptionsAddHalfPixelCenters(b, half_pixel_centers)
        return tflite.ResizeNearestNeighborOptionsEnd(b)
    return tflite.BuiltinOptions.ResizeNearestNeighborOptions, nearest


def single_op_model(opcode: int, tensors: Sequence[TensorSpec], op_inputs: Sequence[int],
                    op_outputs: Sequence[int], options_type: int = 0,
                    options: Callable[[flatbuffers.Builder], int] | None = None,
                    version: int = 1) -> bytes:
    """A model with one operator; its non-constant inputs become the graph inputs."""
    graph_inputs = [i for i in op_inputs if i >= 0 and tensors[i].data is None]
    op = OpSpec(opcode, op_inputs, op_outputs, options_type, options, version)
    return build_model(tensors, [op], graph_inputs, op_outputs)


@dataclass
class ReferenceRunner:
    """A LiteRT interpreter on the reference kernels, reusable across many invocations."""
    model: bytes
    interpreter: Interpreter = field(init=False)

    def __post_init__(self) -> None:
        self.interpreter = Interpreter(
            model_content=self.model,
            experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        self.interpreter.allocate_tensors()

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        it = self.interpreter
        details = it.get_input_details()
        if len(details) != len(inputs):
            raise ValueError(f"model takes {len(details)} inputs, got {len(inputs)}")
        for d, x in zip(details, inputs):
            if tuple(d["shape"]) != x.shape:
                it.resize_tensor_input(d["index"], x.shape)
                it.allocate_tensors()
        for d, x in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], x)
        it.invoke()
        return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def run_reference(model: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    """Run ``model`` once on LiteRT BUILTIN_REF and return copies of its outputs."""
    return ReferenceRunner(model)(*inputs)
