"""Dynamically quantized ONNX models (onnxruntime's ``quantize_dynamic``) as the float models they stand for.

``onnxruntime.quantization.quantize_dynamic`` stores a float model's weights in int8 and
quantizes each activation at run time: a ``DynamicQuantizeLinear`` computes a scale and a
zero point from the tensor it is given, then ``MatMulInteger`` / ``ConvInteger`` multiply
the uint8 codes by the int8 weights, a ``Cast`` makes the int32 sums float and a ``Mul``
by the product of the two scales (itself a ``Mul``) gives the float result; an LSTM becomes
``com.microsoft``'s ``DynamicQuantizeLSTM``. Such a model is a float model with int8
weights: the chip cannot compute a scale per run, and left as it is the model runs on the
CPU in pieces, with every join between a host call and the chip quantized to int8 on a
grid calibration chose for values (int32 sums, per-run scales, a per-channel scale
product) that were never meant to be activations.

:func:`dequantize_dynamic` rewrites each recognized pattern as its float operator on the
dequantized weights, ``(w - zero_point) * scale`` with the model's own int8 codes, scales
and zero points (the values onnxruntime multiplies by):

* ``DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W) -> Cast -> Mul(., x_scale * w_scale)``
  becomes ``MatMul(x, W_float)``; ``ConvInteger`` likewise becomes ``Conv`` (its attributes
  kept); the bias ``Add`` after it stays (the optimizer folds it into the convolution);
* ``DynamicQuantizeLSTM`` becomes ``LSTM`` (its weights stored transposed, ``[dirs, input,
  4 * hidden]``, are transposed back);
* codes a ``Gather`` takes from an int8 table (an embedding) feeding a ``MatMulInteger``:
  a float ``Gather`` from ``table - zero_point``, the table's scale going into the weights;
* a ``DequantizeLinear`` of a ``DynamicQuantizeLinear`` output (directly or through a
  ``Transpose`` / ``Reshape`` of the codes, onnxruntime's 8-bit data movement) becomes the
  float value itself, and one of a ``Gather`` from an int8 table a ``Gather`` from the
  dequantized table; codes of a table that every reader dequantizes alike, directly or
  after moves (a BiLSTM's embedding, for its Shape and, transposed, for its LSTM), get the
  float ``Gather`` once, and each move and dequantization follows it.

The nodes left without a reader (the ``DynamicQuantizeLinear``, the scale products) are
dropped. The quantizer then treats the model as any float one (calibration, escalation to
the fidelity target). The float model differs from onnxruntime's run of the quantized file
by onnxruntime's own rounding of the activations to uint8 on each run (the compiler's
reference is the float model). A pattern not recognized (a product of two activations,
as attention's scores are written, or another glue) is left as it is and runs on the CPU,
with the values on a grid chosen on each run (:func:`per_run_values`): the chip, whose
grids calibration fixes, would clip a per-run scale or an int32 sum to the largest it saw.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["DYNAMIC_OPS", "Rewritten", "dequantize_dynamic", "is_dynamic", "per_run_values"]

#: The operators ``quantize_dynamic`` writes (their presence marks a dynamically quantized model).
DYNAMIC_OPS = frozenset({"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM"})

# onnxruntime's 8-bit data movement (quantization.operators.direct_q8): the codes move, the grid stays
_MOVES = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})

_INTEGER_FLOAT = {"MatMulInteger": "MatMul", "ConvInteger": "Conv"}


@dataclass
class Rewritten:
    """A dynamically quantized model as float: the model, and each node's index in the file."""
    model: onnx.ModelProto
    origins: list[int]


@dataclass
class _Codes:
    """A value holding codes: the float value it stands for, and the names of its scale and
    zero point (a DynamicQuantizeLinear's; a table's codes: scale "", the table's scale is in
    the product of scales its readers multiply by)."""
    value: str
    scale: str
    zero: str


def is_dynamic(model: onnx.ModelProto) -> bool:
    """Whether ``model``'s graph has nodes ``quantize_dynamic`` writes."""
    return any(n.op_type in DYNAMIC_OPS for n in model.graph.node)


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    found = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            found[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return found


def _weights(codes: np.ndarray, zero: np.ndarray | None, scale: np.ndarray, axis: int) -> np.ndarray:
    """``(codes - zero) * scale`` in float32, a zero point and scale of one value per
    ``axis`` of ``codes`` (or one in all) broadcast along it."""
    def along(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, np.float32)
        if v.size <= 1:
            return v.reshape(())
        shape = [1] * codes.ndim
        shape[axis] = v.size
        return v.reshape(shape)
    zero_f = along(zero) if zero is not None else np.float32(0)
    return ((codes.astype(np.float32) - zero_f) * along(scale)).astype(np.float32)


class _Rewriter:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.graph = model.graph
        self.consts = _constants(self.graph)
        self.readers: dict[str, list[int]] = {}
        self.producer: dict[str, int] = {}
        for i, n in enumerate(self.graph.node):
            for v in n.input:
                if v:
                    self.readers.setdefault(v, []).append(i)
            self.producer.update((o, i) for o in n.output if o)
        self.finals = {o.name for o in self.graph.output}
        self.codes: dict[str, _Codes] = {}
        self.new_consts: dict[str, np.ndarray] = {}
        self.made: set[str] = set()       # the float values of codes made beside them (dropped if unread)
        # node index -> the nodes replacing it (an empty list: dropped)
        self.replaced: dict[int, list[onnx.NodeProto]] = {}

    def only_reader(self, value: str, op_type: str) -> tuple[int, onnx.NodeProto] | None:
        readers = self.readers.get(value, [])
        if len(readers) != 1 or value in self.finals:
            return None
        node = self.graph.node[readers[0]]
        return (readers[0], node) if node.op_type == op_type else None

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name) if name else None

    def add_const(self, hint: str, data: np.ndarray) -> str:
        name = f"{hint}__dequantized"
        while name in self.consts or name in self.new_consts:
            name += "_"
        self.new_consts[name] = data
        return name

    def run(self) -> None:
        for i, node in enumerate(self.graph.node):
            if node.op_type == "DynamicQuantizeLinear" and len(node.output) == 3:
                self.codes[node.output[0]] = _Codes(node.input[0], node.output[1], node.output[2])
            elif node.op_type == "Gather":
                self.dequantized_table(i, node)
            elif node.op_type in _MOVES and node.input and node.input[0] in self.codes:
                self.move(i, node)
            elif node.op_type in _INTEGER_FLOAT:
                self.integer_op(i, node)
            elif node.op_type == "DynamicQuantizeLSTM":
                self.lstm(i, node)
            elif node.op_type == "DequantizeLinear":
                self.dequantize(i, node)

    def dequantized_table(self, i: int, node: onnx.NodeProto) -> None:
        """Codes ``Gather`` takes from a constant int8 table that its readers dequantize, each
        the same way, directly or through moves of the codes (a BiLSTM's embedding: one
        ``DequantizeLinear`` for its Shape, another after a ``Transpose`` for its LSTM): a
        float ``Gather`` beside it from the dequantized table, so every reader gets the float
        value (rewriting only the direct reader left the moved codes typed as floats)."""
        table = self.const(node.input[0])
        if table is None or table.dtype.kind not in "iu" or len(node.input) < 2:
            return
        grids, pending = set(), [node.output[0]]
        while pending:
            value = pending.pop()
            if value in self.finals:
                return
            for k in self.readers.get(value, []):
                reader = self.graph.node[k]
                if reader.op_type in _MOVES and reader.input[0] == value:
                    pending.append(reader.output[0])
                elif reader.op_type == "DequantizeLinear" and reader.input[0] == value:
                    grids.add((reader.input[1], reader.input[2] if len(reader.input) > 2 else ""))
                elif reader.op_type not in _INTEGER_FLOAT:
                    return
        if len(grids) != 1:
            return
        ((scale_name, zero_name),) = grids
        scale, zero = self.const(scale_name), self.const(zero_name)
        if scale is None or scale.size != 1 or (zero_name and zero is None):
            return
        twin = onnx.NodeProto()
        twin.CopyFrom(node)
        twin.name = f"{node.name or node.output[0]}__float"
        twin.input[0] = self.add_const(node.input[0], _weights(table, zero, scale, 0))
        twin.output[0] = f"{node.output[0]}__float"
        self.made.add(twin.output[0])
        self.replaced[i] = [node, twin]
        self.codes[node.output[0]] = _Codes(twin.output[0], scale_name, zero_name)

    def move(self, i: int, node: onnx.NodeProto) -> None:
        """The same data movement on the float value, beside the codes' (dropped if unread)."""
        source = self.codes[node.input[0]]
        twin = onnx.NodeProto()
        twin.CopyFrom(node)
        twin.name = f"{node.name or node.output[0]}__float"
        twin.input[0] = source.value
        twin.output[0] = f"{node.output[0]}__float"
        self.made.add(twin.output[0])
        self.replaced[i] = [node, twin]
        self.codes[node.output[0]] = _Codes(twin.output[0], source.scale, source.zero)

    def integer_op(self, i: int, node: onnx.NodeProto) -> None:
        inputs = list(node.input) + [""] * (4 - len(node.input))
        codes, weight_zero = self.codes.get(inputs[0]) or self.table_codes(inputs[0], inputs[2]), inputs[3]
        weights = self.const(inputs[1])
        if codes is None or weights is None or inputs[2] != codes.zero or (weight_zero and self.const(weight_zero)
                                                                           is None):
            return
        cast = self.only_reader(node.output[0], "Cast")
        if cast is None or helper.get_node_attr_value(cast[1], "to") != onnx.TensorProto.FLOAT:
            return
        mul = self.only_reader(cast[1].output[0], "Mul")
        if mul is None:
            return
        product = next((v for v in mul[1].input if v != cast[1].output[0]), "")
        weight_scale = self.scale_product(product, codes.scale)
        if weight_scale is None:
            return
        axis = weights.ndim - 1 if node.op_type == "MatMulInteger" else 0
        data = _weights(weights, self.const(weight_zero), weight_scale, axis)
        float_op = helper.make_node(_INTEGER_FLOAT[node.op_type], [codes.value, self.add_const(inputs[1], data)],
                                    [mul[1].output[0]], name=node.name or mul[1].output[0])
        float_op.attribute.extend(node.attribute)
        self.replaced[i] = [float_op]
        self.replaced[cast[0]] = []
        self.replaced[mul[0]] = []
        scales = self.producer.get(product)
        if scales is not None and self.readers.get(product) == [mul[0]] and product not in self.finals:
            self.replaced[scales] = []      # the product of the scales, read by that Mul alone

    def table_codes(self, value: str, zero: str) -> _Codes | None:
        """Codes ``Gather`` takes from a constant int8 table (an embedding ``quantize_dynamic``
        quantized as a weight): a float ``Gather`` beside it, from ``table - zero``; its scale
        is in the product of scales its readers multiply by (``scale`` "")."""
        k = self.producer.get(value)
        gather = self.graph.node[k] if k is not None else None
        table = self.const(gather.input[0]) if gather is not None and gather.op_type == "Gather" else None
        if k is None or gather is None or table is None or table.dtype.kind not in "iu" \
                or (zero and self.const(zero) is None):
            return None
        twin = onnx.NodeProto()
        twin.CopyFrom(gather)
        twin.name = f"{gather.name or value}__float"
        twin.input[0] = self.add_const(gather.input[0], _weights(table, self.const(zero), np.float32(1), 0))
        twin.output[0] = f"{value}__float"
        self.made.add(twin.output[0])
        self.replaced[k] = [gather, twin]
        self.codes[value] = _Codes(twin.output[0], "", zero)
        return self.codes[value]

    def scale_product(self, product: str, scale: str) -> np.ndarray | None:
        """The weight scale of ``product`` = ``Mul(scale, weight scale)`` (either order), or None;
        without ``scale`` (codes of a table) the whole product, a constant."""
        if not scale:
            made = self.graph.node[self.producer[product]] if product in self.producer else None
            if self.const(product) is not None or made is None or made.op_type != "Mul":
                return self.const(product)
            factors = [self.const(v) for v in made.input]
            return None if any(f is None for f in factors) else np.multiply(*factors).astype(np.float32)
        k = next((k for k in self.readers.get(scale, []) if product in self.graph.node[k].output), None)
        if k is None or self.graph.node[k].op_type != "Mul":
            return None
        other = [v for v in self.graph.node[k].input if v != scale]
        return self.const(other[0]) if len(other) == 1 else None

    def lstm(self, i: int, node: onnx.NodeProto) -> None:
        inputs = list(node.input) + [""] * (12 - len(node.input))
        w, r = self.const(inputs[1]), self.const(inputs[2])
        scales = [self.const(v) for v in inputs[8:12]]
        if w is None or r is None or any(s is None for s in scales) or w.ndim != 3 or r.ndim != 3:
            return
        w_scale, w_zero, r_scale, r_zero = scales

        def to_float(codes: np.ndarray, zero: np.ndarray, scale: np.ndarray, name: str) -> str:
            # one scale per direction ([dirs]) or per direction and gate row ([dirs, 4 * hidden])
            scale_b, zero_b = (np.asarray(v, np.float32).reshape((1, 1, 1) if np.size(v) == 1 else
                                                                 (codes.shape[0], 1, -1)) for v in (scale, zero))
            data = ((codes.astype(np.float32) - zero_b) * scale_b).astype(np.float32)
            return self.add_const(name, data.transpose(0, 2, 1).copy())
        float_inputs = [inputs[0], to_float(w, w_zero, w_scale, inputs[1]), to_float(r, r_zero, r_scale, inputs[2]),
                        *inputs[3:8]]
        while float_inputs and not float_inputs[-1]:
            float_inputs.pop()
        lstm = helper.make_node("LSTM", float_inputs, list(node.output), name=node.name or node.output[0])
        lstm.attribute.extend(node.attribute)
        self.replaced[i] = [lstm]

    def dequantize(self, i: int, node: onnx.NodeProto) -> None:
        inputs = list(node.input) + [""] * (3 - len(node.input))
        codes = self.codes.get(inputs[0])
        if codes is not None and inputs[1] == codes.scale and inputs[2] == codes.zero:
            self.replaced[i] = [helper.make_node("Identity", [codes.value], list(node.output),
                                                 name=node.name or node.output[0])]
            return
        gather = self.graph.node[self.producer[inputs[0]]] if inputs[0] in self.producer else None
        table, scale = (self.const(gather.input[0]) if gather is not None and gather.op_type == "Gather" else None,
                        self.const(inputs[1]))
        if table is None or scale is None or scale.size != 1 or (inputs[2] and self.const(inputs[2]) is None):
            return
        assert gather is not None
        data = _weights(table, self.const(inputs[2]), scale, 0)
        float_gather = onnx.NodeProto()
        float_gather.CopyFrom(gather)
        float_gather.input[0] = self.add_const(gather.input[0], data)
        float_gather.output[0] = node.output[0]
        float_gather.name = node.name or node.output[0]
        self.replaced[i] = [float_gather]

    def result(self) -> Rewritten:
        nodes: list[onnx.NodeProto] = []
        origins: list[int] = []
        for i, node in enumerate(self.graph.node):
            made = self.replaced.get(i, [node])
            nodes += made
            origins += [i] * len(made)
        nodes, origins = _without_unread(nodes, origins, self.finals, self.codes, self.made)
        read = {v for n in nodes for v in n.input} | {v for n in nodes for a in n.attribute if a.type == a.GRAPH
                                                      for v in _graph_reads(a.g)}
        out = onnx.ModelProto()
        out.CopyFrom(self.model)
        del out.graph.node[:], out.graph.initializer[:]
        out.graph.node.extend(nodes)
        out.graph.initializer.extend(i for i in self.graph.initializer if i.name in read)
        out.graph.initializer.extend(numpy_helper.from_array(data, name) for name, data in self.new_consts.items()
                                     if name in read)
        made = {v for n in nodes for v in n.output}
        kept = [vi for vi in self.graph.value_info if vi.name in made]
        del out.graph.value_info[:]
        out.graph.value_info.extend(kept)
        return Rewritten(out, origins)


def _graph_reads(graph: onnx.GraphProto) -> set[str]:
    reads = {v for n in graph.node for v in n.input}
    for n in graph.node:
        for a in n.attribute:
            if a.type == a.GRAPH:
                reads |= _graph_reads(a.g)
    return reads


def _without_unread(nodes: list[onnx.NodeProto], origins: list[int], finals: set[str],
                    codes: Mapping[str, _Codes], made: set[str]) -> tuple[list[onnx.NodeProto], list[int]]:
    """``nodes`` less those of the quantized world (reading or making codes and their
    scales) and those making the ``made`` float values that nothing reads any more, repeatedly."""
    quantized = set(codes) | {c.scale for c in codes.values()} | {c.zero for c in codes.values()} | made
    changed = True
    while changed:
        changed = False
        read = {v for n in nodes for v in n.input} | finals
        keep = []
        for k, n in enumerate(nodes):
            ours = n.op_type == "DynamicQuantizeLinear" or any(v in quantized for v in [*n.input, *n.output])
            if ours and not any(o in read for o in n.output if o):
                changed = True
                continue
            keep.append(k)
        nodes, origins = [nodes[k] for k in keep], [origins[k] for k in keep]
        quantized |= {o for n in nodes if any(v in quantized for v in n.input) for o in n.output}
    return nodes, origins


def dequantize_dynamic(model: onnx.ModelProto) -> Rewritten:
    """``model`` (not changed) with onnxruntime's dynamic-quantization patterns rewritten as
    float operators on the dequantized weights (module docstring); ``origins`` gives each
    node's index in ``model``."""
    rewriter = _Rewriter(model)
    rewriter.run()
    return rewriter.result()


def per_run_values(graph: onnx.GraphProto) -> set[str]:
    """The values of ``graph`` (nodes in order) on a grid a DynamicQuantizeLinear chooses
    on each run: its codes, scale and zero point and what is computed from them (integer
    products, their Casts, products of scales), up to the ``Mul`` giving a Cast integer
    product its scale or a ``DequantizeLinear``, whose outputs are real numbers again."""
    per_run: set[str] = set()
    sums: set[str] = set()        # Casts of integer products
    made_by = {o: n.op_type for n in graph.node for o in n.output}
    for node in graph.node:
        if node.op_type == "DynamicQuantizeLinear":
            per_run.update(node.output)
        elif any(v in per_run for v in node.input) and node.op_type != "DequantizeLinear" \
                and not (node.op_type == "Mul" and any(v in sums for v in node.input)):
            per_run.update(o for o in node.output if o)
            if node.op_type == "Cast" and made_by.get(node.input[0]) in _INTEGER_FLOAT:
                sums.add(node.output[0])
    return per_run
