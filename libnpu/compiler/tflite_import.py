"""Import a ``.tflite`` flatbuffer into the graph IR (int8 models as they are, float as float).

The glue only: each operator's import (its options, and the constant operands that
become attributes so the IR ops carry only data inputs) is declared with the operator
(``compiler.ops``); the helpers below are what those declarations share.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tflite

from ..loadable import HostCall
from . import registry
from .complex_tensors import ComplexTensorError, complex_operators, describe, group_keeping_complex_inside
from .input_shapes import InputShapes, fix_tflite_inputs
from .ir import Graph, IRError, Op, QuantParams, SourceOp, Tensor, require_data, same_pads
from .source_index import record_sources
from .tflite_checks import first_bad_index
from .tflite_cut import cut_tflite, is_empty_constant
from .tflite_shape_arith import ANY_DTYPE, FOLDS
from .tflite_sparsity import SparsityError, densify
from .tflite_strings import flatbuffer_text

__all__ = ["TFLiteImportError", "UnsupportedOpError", "SourceOp", "import_tflite", "import_tflite_sources",
           "load_tflite", "options", "builtin_name",
           "activation", "window_pads", "simple"]


class TFLiteImportError(IRError):
    """The file is not a TFLite model we can read."""


class UnsupportedOpError(TFLiteImportError):
    """The model uses an op (or an op option) the NPU does not support."""


_OP_NAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
_TYPES = {
    tflite.TensorType.FLOAT32: "float32", tflite.TensorType.FLOAT16: "float16",
    tflite.TensorType.INT8: "int8", tflite.TensorType.UINT8: "uint8",
    tflite.TensorType.INT16: "int16", tflite.TensorType.INT32: "int32",
    tflite.TensorType.INT64: "int64", tflite.TensorType.BOOL: "bool",
}
# Kept inside host calls, never IR tensors (compiler.complex_tensors).
_COMPLEX = {tflite.TensorType.COMPLEX64: "complex64", tflite.TensorType.COMPLEX128: "complex128"}
_ACT = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6"}


def builtin_code(model: Any, opcode_index: int) -> int:
    """The op's builtin code, as the TFLite runtime reads it.

    Old files store it in ``deprecated_builtin_code`` (int8 field, codes < 127) and
    newer ones in ``builtin_code``; the runtime takes the larger of the two.
    """
    oc = model.OperatorCodes(opcode_index)
    return max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))


def builtin_name(model: Any, opcode_index: int) -> str:
    """The op's builtin name (``BUILTIN_<code>`` for a code this schema does not know)."""
    code = builtin_code(model, opcode_index)
    return _OP_NAMES.get(code, f"BUILTIN_{code}")


def _meaningless_grid(dtype: str, scale: np.ndarray) -> bool:
    """Whether a tensor's quantization parameters mean nothing: on a float tensor (LiteRT
    reads them only for integer types; converters leave zero scales there), or all-zero
    scales on an int32 / int64 tensor that is no bias (a shape, an index)."""
    return dtype in ("float32", "float16") or dtype in ("int32", "int64") and not np.any(scale)


class _Importer:
    def __init__(self, buf: bytes, name: str, *, fallback: bool = False,
                 force_host: Mapping[int, str] | None = None, input_shapes: InputShapes = None) -> None:
        self.fallback, self.force_host = fallback, dict(force_host or {})
        self.sources: list[SourceOp] = []
        require_data(buf, name)
        if len(buf) < 8 or buf[4:8] != b"TFL3":
            raise TFLiteImportError(f"{name}: not a TFLite flatbuffer (no TFL3 identifier)")
        try:
            problem = first_bad_index(tflite.Model.GetRootAsModel(buf, 0), len(buf))
        except (IndexError, ValueError) as exc:
            raise TFLiteImportError(f"{name}: unreadable flatbuffer: {exc}") from exc
        if problem:     # checked before anything follows an index: flatbuffers read past vectors unchecked
            raise TFLiteImportError(f"{name}: broken TFLite file: {problem}")
        buf = fix_tflite_inputs(buf, input_shapes, name).data   # -1 dims given or refused, never guessed
        self.model = tflite.Model.GetRootAsModel(buf, 0)
        self.buf = buf
        if self.model.SubgraphsLength() < 1:
            raise TFLiteImportError(f"{name}: the model has no subgraph")
        # Subgraph 0 runs; another is read only by an operator naming it (CALL_ONCE's init).
        self.sg = self.model.Subgraphs(0)
        self.written = {int(t) for i in range(self.sg.OperatorsLength()) for t in self.op_io(i)[1]} | \
            {int(t) for t in (self.sg.InputsAsNumpy() if self.sg.InputsLength() else [])}
        self.graph = Graph(name)
        self.names: dict[int, str] = {}
        self.complex = {j: describe(j, _COMPLEX[t.Type()], flatbuffer_text(t.Name()))
                        for j in range(self.sg.TensorsLength()) if (t := self.sg.Tensors(j)).Type() in _COMPLEX}
        self.extensions: dict[str, Any] = {}  # what an operator family keeps during one import

    # tensors ------------------------------------------------------------------------
    def _buffer_data(self, index: int) -> np.ndarray | None:
        if index <= 0 or index >= self.model.BuffersLength():
            return None
        b = self.model.Buffers(index)
        if b.Offset() > 1:  # large-model layout: data lives after the flatbuffer
            raw = np.frombuffer(self.buf, np.uint8, b.Size(), b.Offset())
        elif b.DataLength() > 0:
            raw = b.DataAsNumpy()
        else:
            return None
        return np.asarray(raw, np.uint8)

    def tensor(self, idx: int) -> str:
        if idx in self.names:
            return self.names[idx]
        t = self.sg.Tensors(idx)
        ttype = t.Type()
        if idx in self.complex:
            raise UnsupportedOpError(f"{self.complex[idx]}: the chip has no complex type (the operators "
                                     "reading and writing it run on the CPU, in one host call)")
        if ttype not in _TYPES:
            raise TFLiteImportError(f"tensor {idx} ({flatbuffer_text(t.Name())!r}): unsupported type {ttype}")
        dtype = _TYPES[ttype]
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        quant = None
        q = t.Quantization()
        if q is not None and q.ScaleLength() > 0 and not _meaningless_grid(dtype, q.ScaleAsNumpy()):
            zp = q.ZeroPointAsNumpy() if q.ZeroPointLength() else np.zeros(q.ScaleLength(), np.int64)
            scale = q.ScaleAsNumpy()
            if not np.all((scale > 0) & np.isfinite(scale)):
                raise TFLiteImportError(f"tensor {idx} ({flatbuffer_text(t.Name())!r}): its quantization scale "
                                        f"{scale.min() if scale.size else scale} is not finite and > 0")
            quant = QuantParams(scale, zp, int(q.QuantizedDimension()))
        raw = self._buffer_data(t.Buffer())
        data = None
        if t.Sparsity() is not None and t.Buffer() > 0:
            if raw is None:  # an all-zero sparse constant stores no values
                raw = np.zeros(0, np.uint8)
            try:
                data = densify(t.Sparsity(), shape, raw.view(dtype))
            except SparsityError as exc:
                raise TFLiteImportError(f"tensor {idx} ({flatbuffer_text(t.Name())!r}): bad sparsity parameters: "
                                        f"{exc}") from None
        elif raw is not None:
            data = raw.view(dtype).reshape(shape).copy()
        elif is_empty_constant(shape, idx in self.written):
            data = np.zeros(shape, dtype)
        name = self.graph.unique_name(flatbuffer_text(t.Name()) or f"t{idx}")
        self.graph.add_tensor(Tensor(name, shape, dtype, quant, data))
        self.names[idx] = name
        return name

    def is_resource(self, idx: int) -> bool:
        return int(self.sg.Tensors(idx).Type()) == tflite.TensorType.RESOURCE

    def label(self, idx: int) -> str:
        """Tensor ``idx``'s name for messages, without importing it (it may be a resource)."""
        return self.names.get(idx) or flatbuffer_text(self.sg.Tensors(idx).Name()) or f"t{idx}"

    def const(self, idx: int, what: str, op: str) -> np.ndarray:
        data = self.graph.tensors[self.tensor(idx)].data
        if data is None:
            raise UnsupportedOpError(f"{op}: {what} must be a constant tensor")
        return data

    # ops ----------------------------------------------------------------------------
    def run(self) -> Graph:
        g = self.graph
        g.inputs = [self.tensor(i) for i in self.sg.InputsAsNumpy()]
        pending: list[SourceOp] = []     # a group of operators placed on the CPU: one host call
        count = self.sg.OperatorsLength()
        names = [self.op_name(i) for i in range(count)]
        io = [self.op_io(i) for i in range(count)]
        self.check_complex_io()
        if self.fallback:       # the operators on complex tensors: on the CPU whatever else asks
            self.force_host = {**complex_operators(io, self.complex), **self.force_host}
        # a user's Python function (a custom op) is a call of its own
        groups, joined = group_keeping_complex_inside(
            self.ordered(names, io), {i for i in range(count) if self.fallback and i in self.force_host},
            self.complex, alone=lambda i: names[i].startswith("CUSTOM:"))
        self.force_host.update(joined)
        for i in groups.order:
            op = self.sg.Operators(i)
            opname = names[i]
            ins, outs = io[i]
            # a resource (VAR_HANDLE's output) is no IR tensor: the variables' handlers resolve it
            out_name = (self.label(outs[0]) if self.is_resource(outs[0]) or outs[0] in self.complex
                        else self.tensor(outs[0])) if outs else f"op{i}"
            where = f"{opname} node {i} (output {out_name!r})"
            source = SourceOp(i, opname)
            self.sources.append(source)
            if i in groups.group:
                if pending and groups.group[pending[-1].index] != groups.group[i]:
                    self.host_op(pending)
                source.reason = self.force_host[i]
                pending.append(source)
                continue
            self.host_op(pending)
            before = len(g.ops)
            try:
                # a custom op the registry knows (an alias) reads its raw custom options
                table = (op.CustomOptionsAsNumpy().tobytes() if op.CustomOptionsLength() else b"") \
                    if opname.startswith("CUSTOM:") else op.BuiltinOptions()
                self.import_op(opname, ins, outs, table, where, out_name)
            except UnsupportedOpError as exc:
                if not self.fallback:
                    raise
                del g.ops[before:]
                source.reason = _reason(exc, where)
                self.host_op([source])
            source.ir_ops = g.ops[before:]
        self.host_op(pending)
        self.sources.sort(key=lambda src: src.index)     # in file order, whatever order the groups gave
        record_sources(g, self.sources)
        g.outputs = [self.tensor(i) for i in self.sg.OutputsAsNumpy()]
        g.metadata["source"] = "tflite"
        desc = self.model.Description()
        if desc:
            g.metadata["description"] = desc.decode(errors="replace")
        g.prune()
        g.validate()
        g.check_runnable()
        self.touch_buffers()
        return g

    def check_complex_io(self) -> None:
        """Refuse a complex model input or output: no host call can keep it inside."""
        for what, length, indices in (("input", self.sg.InputsLength(), self.sg.InputsAsNumpy),
                                      ("output", self.sg.OutputsLength(), self.sg.OutputsAsNumpy)):
            for j in (indices() if length else []):
                if int(j) in self.complex:
                    raise ComplexTensorError(f"{self.complex[int(j)]} is a model {what}: the device's buffers have no "
                                             "complex type (a host call keeps a complex tensor inside; give the model "
                                             "real inputs and outputs, e.g. COMPLEX_ABS, REAL or IMAG of it)")

    def op_name(self, i: int) -> str:
        """Operator ``i``'s builtin name (``CUSTOM:<code>`` for a custom op)."""
        code = self.sg.Operators(i).OpcodeIndex()
        opname = builtin_name(self.model, code)
        if opname == "CUSTOM":
            opname = f"CUSTOM:{flatbuffer_text(self.model.OperatorCodes(code).CustomCode())}"
        return opname

    def op_io(self, i: int) -> tuple[list[int], list[int]]:
        """Operator ``i``'s input and output tensor indices (-1: an optional input left out)."""
        op = self.sg.Operators(i)
        return ([int(j) for j in op.InputsAsNumpy()] if op.InputsLength() else [],
                [int(j) for j in op.OutputsAsNumpy()] if op.OutputsLength() else [])

    def ordered(self, names: list[str], io: list[tuple[list[int], list[int]]]) -> list[tuple[list, list]]:
        """The operators' inputs and outputs for grouping, with the operators touching
        variables chained in file order (a read before or after an assign must stay so:
        the variables' import follows the order the operators come in)."""
        deps: list[tuple[list, list]] = [(list(ins), list(outs)) for ins, outs in io]
        previous = None
        for k, (ins, _) in enumerate(io):
            if names[k] in _STATEFUL or any(t >= 0 and self.is_resource(t) for t in ins):
                if previous is not None:
                    deps[k][0].append(("after", previous))
                deps[k][1].append(("after", k))
                previous = k
        return deps

    def import_op(self, opname: str, ins: list[int], outs: list[int], options: Any, where: str,
                  out_name: str) -> None:
        if self.fold(opname, ins, outs, options, where):
            return
        operator = registry.tflite_operator(opname)
        if operator is None and opname.startswith("CUSTOM:"):
            raise UnsupportedOpError(f"custom op {opname[7:]!r}: the chip has no custom operators")
        if operator is None:
            raise UnsupportedOpError(f"unsupported op {where}")
        imported = operator.tflite(self, ins, outs, options, where)
        if imported is None:  # the operator added its ops itself, or folded to a constant
            return
        attrs, data_inputs = imported
        self.graph.add_op(Op(operator.name, [self.tensor(j) if j >= 0 else "" for j in data_inputs],
                             [self.tensor(j) for j in outs], attrs, name=out_name))

    def host_op(self, group: list[SourceOp]) -> None:
        """One HOST op running ``group`` (consecutive source operators; emptied) with LiteRT:
        a model cut from the source holding them, returning what the rest of the graph reads."""
        if not group:
            return
        indices = [src.index for src in group]
        inside = set(indices)
        written = [int(t) for i in indices for t in self.sg.Operators(i).OutputsAsNumpy()]
        read_outside = set(int(t) for t in self.sg.OutputsAsNumpy())
        for k in range(self.sg.OperatorsLength()):
            op = self.sg.Operators(k)
            if k not in inside and op.InputsLength():
                read_outside.update(int(t) for t in op.InputsAsNumpy())
        cut = cut_tflite(self.buf, indices, [t for t in written if t in read_outside] or written)
        reasons = list(dict.fromkeys(src.reason for src in group))
        call = HostCall("tflite", cut.model, "+".join(src.op for src in group), indices[0], "; ".join(reasons))
        outputs = [self.tensor(j) for j in cut.outputs]
        host = self.graph.add_op(Op("HOST", [self.tensor(j) for j in cut.inputs], outputs, {"host": call},
                                    name=outputs[0]))
        for src in group:
            src.ir_ops = [host]
        group.clear()

    def touch_buffers(self) -> None:
        """Read every buffer table, the unused ones too.

        Flatbuffers are read lazily and written back to front: the last bytes of a file
        hold the first buffers, including buffer 0 that no tensor reads, so a file cut
        short there imports without error unless something reads them.
        """
        for i in range(self.model.BuffersLength()):
            b = self.model.Buffers(i)
            b.DataLength(), b.Offset(), b.Size()

    def fold(self, opname: str, ins: list[int], outs: list[int], table: Any, where: str) -> bool:
        """Evaluate integer shape arithmetic (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE's
        shape operand, and :mod:`.tflite_shape_arith`'s) at import time. True if the op's
        output became a constant."""
        if opname not in _FOLDABLE and opname not in FOLDS or len(outs) != 1:
            return False
        out = self.graph.tensors[self.tensor(outs[0])]
        if out.dtype not in ("int32", "int64") and opname not in ANY_DTYPE or out.quant is not None:
            return False
        if opname == "SHAPE":
            value = np.asarray(self.shape(ins[0]))
        else:
            vals = [self.graph.tensors[self.tensor(i)].data for i in ins if i >= 0]
            if any(v is None for v in vals):
                return False
            if opname == "PACK":
                value = np.stack(vals, axis=int(options(table, tflite.PackOptions).Axis()))
            elif opname == "CONCATENATION":
                value = np.concatenate([np.atleast_1d(v) for v in vals],
                                       axis=int(options(table, tflite.ConcatenationOptions).Axis()))
            elif opname in FOLDS:       # the rest of the size arithmetic (tflite_shape_arith)
                value = FOLDS[opname](vals, lambda cls: options(table, cls))
                if value is None:
                    return False
            elif opname == "STRIDED_SLICE":
                attrs, _ = registry.find("STRIDED_SLICE").tflite(self, ins, outs, table, where)
                value = vals[0][tuple(slice(b, None if (e < 0 and st < 0) else e, st) for b, e, st in
                                      zip(attrs["begin"], attrs["end"], attrs["strides"]))]
            else:  # RESHAPE of a constant
                value = vals[0]
        try:
            out.data = np.asarray(value).astype(out.dtype).reshape(out.shape)
        except ValueError as exc:
            raise TFLiteImportError(f"{where}: folded value does not fit {out.shape}: {exc}") from exc
        return True

    def shape(self, idx: int) -> tuple[int, ...]:
        return self.graph.tensors[self.tensor(idx)].shape


def options(table: Any, cls: type) -> Any:
    """The op's builtin options table as ``cls`` (None when the op has none)."""
    o = cls()
    if table is None:
        return None
    o.Init(table.Bytes, table.Pos)
    return o


def activation(code: int, where: str) -> str:
    """The IR name of a TFLite fused activation code."""
    if code not in _ACT:
        raise UnsupportedOpError(f"{where}: fused activation {code} is not supported")
    return _ACT[code]


def window_pads(im: _Importer, ins: list[int], padding: int, kh: int, kw: int,
                sh: int, sw: int, dh: int, dw: int) -> tuple[int, int, int, int]:
    """Explicit ``(top, bottom, left, right)`` pads of a windowed op on input ``ins[0]``."""
    _, h, w, _ = im.shape(ins[0])
    if padding == tflite.Padding.VALID:
        return (0, 0, 0, 0)
    _, top, bottom = same_pads(h, kh, sh, dh)
    _, left, right = same_pads(w, kw, sw, dw)
    return (top, bottom, left, right)


def simple(im, ins, outs, table, where):
    """Import of an op with no options and only data inputs."""
    return {}, ins


# Operators with effects beyond their outputs (variables), kept in file order.
_STATEFUL = ("CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE")

# Integer ops evaluated at import time when their inputs are known (shape arithmetic).
_FOLDABLE = ("SHAPE", "STRIDED_SLICE", "PACK", "CONCATENATION", "RESHAPE")

def _reason(exc: Exception, where: str) -> str:
    """The one-line reason an import failure gives, without the op's own location."""
    text = str(exc).replace(f"unsupported op {where}", "no NPU operator of this type")
    return text.replace(f"{where}: ", "").splitlines()[0] if text else type(exc).__name__


def import_tflite(data: bytes, name: str = "model", *, input_shapes: InputShapes = None) -> Graph:
    """Build an IR graph from the bytes of a ``.tflite`` file."""
    return import_tflite_sources(data, name, input_shapes=input_shapes)[0]


def import_tflite_sources(data: bytes, name: str = "model", *, fallback: bool = False,
                          force_host: Mapping[int, str] | None = None,
                          input_shapes: InputShapes = None) -> tuple[Graph, list[SourceOp]]:
    """Import, also returning what became of each source operator.

    ``fallback``: an operator the import cannot take for the chip becomes a HOST op (run
    by LiteRT on the host) instead of an error; ``force_host`` maps more operator indices
    to the reason they go to the host. ``input_shapes``: shapes for inputs with ``-1``
    dimensions (:mod:`libnpu.compiler.input_shapes`: a free leading batch dimension is 1
    by default, any other free dimension needs one).
    """
    try:
        importer = _Importer(bytes(data), name, fallback=fallback, force_host=force_host, input_shapes=input_shapes)
        graph = importer.run()
    except IRError:
        raise
    except (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        # flatbuffers reads lazily: damage shows up as low-level errors anywhere
        raise TFLiteImportError(f"{name}: corrupted or truncated TFLite file "
                                f"({type(exc).__name__}: {exc})") from exc
    return graph, importer.sources


def load_tflite(path: str | os.PathLike) -> Graph:
    """Read and import a ``.tflite`` file; the graph is named after the file."""
    p = Path(path)
    return import_tflite(p.read_bytes(), p.name.removesuffix(".tflite"))
