"""Write an IR graph as a ``.tflite`` flatbuffer.

Used to check the compiler against an independent implementation: an int8 graph from
the quantizer, written out and run by LiteRT's reference kernels, must give what the
chip gives. Attribute-only operands (RESHAPE's shape, PAD's paddings...) become int32
constant inputs again; explicit conv padding that TFLite's SAME/VALID cannot express
becomes a PAD op in front of a VALID conv. Each operator's export is declared with the
operator (``compiler.ops``); the writer's helpers are what those declarations share.

A stateful graph's states become resource variables as the TFLite converter writes them:
CALL_ONCE of an init subgraph assigning each its initial value, then VAR_HANDLE and
READ_VARIABLE at the start of the main subgraph, and ASSIGN_VARIABLE of each new value at
its end, so LiteRT carries the state between invocations as the chip does.
"""
from __future__ import annotations

import importlib
from typing import Any

import flatbuffers
import numpy as np
import tflite

from . import registry
from .ir import Graph, IRError, Op, Tensor, same_pads
from .scales import bias_scale, symmetric

__all__ = ["TFLiteExportError", "export_tflite", "options_table", "ACT"]


class TFLiteExportError(IRError):
    """The graph uses something a .tflite file cannot express."""


_TYPE = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7, "int8": 9}
_RESOURCE = tflite.TensorType.RESOURCE
ACT = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
_CODES = {k: v for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


def _m(name: str) -> Any:
    # tflite re-exports each table class under its module's name; the builder
    # functions live in the module itself.
    return importlib.import_module(f"tflite.{name}")


def options_table(b: flatbuffers.Builder, cls: str, **fields: Any) -> int:
    """Write flatbuffer table ``cls`` (a tflite schema table: "Tensor", "Conv2DOptions"...) with ``fields``."""
    mod = _m(cls)
    getattr(mod, f"{cls}Start")(b)
    for k, v in fields.items():
        getattr(mod, f"{cls}Add{k}")(b, v)
    return getattr(mod, f"{cls}End")(b)


class _Writer:
    def __init__(self, graph: Graph) -> None:
        self.src = graph
        self.tensors: list[Tensor] = []
        self.index: dict[str, int] = {}
        self.ops: list[tuple[str, list[int], list[int], dict]] = []
        self.resources: set[str] = set()        # tensors of type RESOURCE (variable handles)

    def handle(self, variable: str) -> int:
        """A VAR_HANDLE of ``variable`` and its resource tensor."""
        name = f"{variable}__handle_{len(self.tensors)}"
        self.resources.add(name)
        index = self.tidx(Tensor(name, (), "int32"))
        self.add("VAR_HANDLE", [], [index], {"VarHandleOptions": dict(SharedName=variable)})
        return index

    def tidx(self, t: Tensor) -> int:
        if t.name not in self.index:
            self.index[t.name] = len(self.tensors)
            self.tensors.append(t)
        return self.index[t.name]

    def const_i32(self, base: str, values) -> int:
        data = np.asarray(values, np.int32)
        name = f"{base}__{len(self.tensors)}"
        return self.tidx(Tensor(name, data.shape, "int32", None, data))

    def name(self, n: str) -> int:
        return self.tidx(self.src.tensors[n]) if n else -1

    def bias(self, op: Op, channels: int) -> int:
        """The op's bias, or explicit zeros (LiteRT's conv kernels insist on a bias)."""
        if len(op.inputs) > 2 and op.inputs[2]:
            return self.name(op.inputs[2])
        x, w = self.src.tensors[op.inputs[0]], self.src.tensors[op.inputs[1]]
        name = f"{op.outputs[0]}__zero_bias"
        if x.quant is None:
            return self.tidx(Tensor(name, (channels,), "float32", None, np.zeros(channels, np.float32)))
        scale = bias_scale(x.quant.scale[0], np.broadcast_to(w.quant.scale, (channels,)) if w.quant.per_channel
                           else w.quant.scale)
        dtype = "int64" if x.dtype == "int16" else "int32"  # 16x8 kernels take an int64 bias
        return self.tidx(Tensor(name, (channels,), dtype, symmetric(scale), np.zeros(channels, dtype)))

    def add(self, type_: str, ins: list[int], outs: list[int], opts: dict) -> None:
        self.ops.append((type_, ins, outs, opts))

    # lowering of IR ops to TFLite operators ----------------------------------------
    def padding(self, op: Op, kh: int, kw: int, dil=(1, 1), allow_pad_op: bool = True) -> tuple[int, int]:
        """TFLite padding enum for op.attrs['pads']; may insert a PAD op on the input.

        Returns (padding enum, input tensor index to use).
        """
        x = self.src.tensors[op.inputs[0]]
        pads = tuple(op.attrs["pads"])
        _, h, w, _ = x.shape
        sh, sw = op.attrs["stride"]
        same = (*same_pads(h, kh, sh, dil[0])[1:], *same_pads(w, kw, sw, dil[1])[1:])
        if pads == (0, 0, 0, 0):
            return 1, self.name(op.inputs[0])
        if pads == same:
            return 0, self.name(op.inputs[0])
        if not allow_pad_op:
            raise TFLiteExportError(f"{op.describe()}: padding {pads} is neither SAME nor VALID")
        top, bottom, left, right = pads
        padded = Tensor(f"{x.name}__pad_{len(self.tensors)}",
                        (x.shape[0], h + top + bottom, w + left + right, x.shape[3]), x.dtype, x.quant)
        out = self.tidx(padded)
        self.add("PAD", [self.name(op.inputs[0]),
                         self.const_i32(x.name, [[0, 0], [top, bottom], [left, right], [0, 0]])],
                 [out], {})
        return 1, out

    def lower(self, op: Op) -> None:
        export = registry.get(op.type, "export")
        if export is None:
            raise TFLiteExportError(f"cannot export {op.describe()} to TFLite")
        export(self, op, [self.name(o) for o in op.outputs])

    def simple(self, op: Op, outs: list[int]) -> None:
        """An operator with its data inputs only and no options."""
        self.add(op.type, [self.name(i) for i in op.inputs], outs, {})

    def with_constant(self, op: Op, outs: list[int], values, opts: dict | None = None) -> None:
        """An operator of one data input and one int32 constant operand (shape, axes...)."""
        self.add(op.type, [self.name(op.inputs[0]), self.const_i32(op.outputs[0], values)], outs, opts or {})

    # serialization ------------------------------------------------------------------
    def build(self) -> bytes:
        g = self.src
        inputs = [self.name(n) for n in g.inputs]
        init = None
        if g.states:
            self.add("CALL_ONCE", [], [], {"CallOnceOptions": dict(InitSubgraphIndex=1)})
            handles = [self.handle(s.name) for s in g.states]
            for s, handle in zip(g.states, handles):
                self.add("READ_VARIABLE", [handle], [self.name(s.input)], {})
            init = _Writer(g)
            for s in g.states:
                value = Tensor(f"{s.name}__initial", s.initial.shape, g.tensors[s.input].dtype,
                               g.tensors[s.input].quant, s.initial)
                init.add("ASSIGN_VARIABLE", [init.handle(s.name), init.tidx(value)], [], {})
        for op in g.ops:
            self.lower(op)
        for s, handle in zip(g.states, handles if g.states else []):
            if s.output != s.input:
                self.add("ASSIGN_VARIABLE", [handle, self.name(s.output)], [], {})
        outputs = [self.name(n) for n in g.outputs]
        b = flatbuffers.Builder(1 << 16)
        buffers = [options_table(b, "Buffer")]
        codes: list[str] = []
        subgraphs = [self.subgraph(b, buffers, codes, inputs, outputs, "main")]
        if init is not None:
            subgraphs.append(init.subgraph(b, buffers, codes, [], [], "init"))
        code_offs = []
        for c in codes:
            code = _CODES[c]
            code_offs.append(options_table(b, "OperatorCode", DeprecatedBuiltinCode=min(code, 127), BuiltinCode=code,
                                    Version=_version(c)))
        cvec, svec, bvec = _vector(b, code_offs), _vector(b, subgraphs), _vector(b, buffers)
        desc = b.CreateString(f"npu-emu export of {g.name}")
        model = options_table(b, "Model", Version=3, OperatorCodes=cvec, Subgraphs=svec, Description=desc, Buffers=bvec)
        b.Finish(model, file_identifier=b"TFL3")
        return bytes(b.Output())

    def subgraph(self, b: flatbuffers.Builder, buffers: list[int], codes: list[str],
                 inputs: list[int], outputs: list[int], name: str) -> int:
        """This writer's tensors and ops as one subgraph (constants appended to ``buffers``,
        operator codes to ``codes``)."""
        tensor_offs = []
        for t in self.tensors:
            buf_idx = 0
            if t.is_constant:
                raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
                b.StartVector(1, raw.size, 16)  # 16-byte aligned constant data
                b.head -= raw.size
                b.Bytes[b.head:b.head + raw.size] = raw.tobytes()
                b.vectorNumElems = raw.size
                data_vec = b.EndVector()
                buffers.append(options_table(b, "Buffer", Data=data_vec))
                buf_idx = len(buffers) - 1
            quant = None
            if t.quant is not None:
                sc = b.CreateNumpyVector(t.quant.scale.astype(np.float32))
                zp = b.CreateNumpyVector(t.quant.zero_point.astype(np.int64))
                quant = options_table(b, "QuantizationParameters", Scale=sc, ZeroPoint=zp,
                               QuantizedDimension=int(t.quant.axis))
            tname = b.CreateString(t.name)
            shape = b.CreateNumpyVector(np.asarray(t.shape, np.int32))
            dtype = _RESOURCE if t.name in self.resources else _TYPE[t.dtype]
            fields = dict(Shape=shape, Type=dtype, Buffer=buf_idx, Name=tname)
            if quant is not None:
                fields["Quantization"] = quant
            tensor_offs.append(options_table(b, "Tensor", **fields))

        op_offs = []
        for type_, ins, outs, opts in self.ops:
            if type_ not in codes:
                codes.append(type_)
            opt_fields = {}
            if opts:
                (cls, fields), = opts.items()
                fields = {k: b.CreateString(v) if isinstance(v, str) else v for k, v in fields.items()}
                opt_fields = dict(BuiltinOptionsType=getattr(tflite.BuiltinOptions, cls),
                                  BuiltinOptions=options_table(b, cls, **fields))
            iv = b.CreateNumpyVector(np.asarray(ins, np.int32))
            ov = b.CreateNumpyVector(np.asarray(outs, np.int32))
            op_offs.append(options_table(b, "Operator", OpcodeIndex=codes.index(type_), Inputs=iv, Outputs=ov,
                                  **opt_fields))
        tvec, ovec = _vector(b, tensor_offs), _vector(b, op_offs)
        return options_table(b, "SubGraph", Tensors=tvec, Operators=ovec,
                      Inputs=b.CreateNumpyVector(np.asarray(inputs, np.int32)),
                      Outputs=b.CreateNumpyVector(np.asarray(outputs, np.int32)),
                      Name=b.CreateString(name))


def _vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _version(op_type: str) -> int:
    # The operator version LiteRT expects for its int8 kernel (float kernels accept it too).
    operator = registry.find(op_type)
    return operator.tflite_version if operator is not None else 1


def export_tflite(graph: Graph) -> bytes:
    """Serialize ``graph`` as a TFLite flatbuffer (a stateful graph's states as resource
    variables, with their init subgraph)."""
    graph.validate()
    for op in graph.ops:
        if registry.get(op.type, "weight_axis") is not None and graph.tensors[op.inputs[1]].dtype == "int16":
            raise TFLiteExportError(f"{op.describe()}: int16 weights (a16w16) are the chip's own mode, with no "
                                    "TFLite kernel; export without them (int16_weights none)")
    for t in graph.tensors.values():
        if t.dtype == "int16" and not t.is_constant and t.quant is not None and t.quant.per_channel:
            raise TFLiteExportError(f"tensor {t.name!r}: per-channel int16 activations are the chip's own mode, "
                                    "with no TFLite kernel; export with int16_grid per_tensor")
    return _Writer(graph).build()
