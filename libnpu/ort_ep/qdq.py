"""QDQ models for a compiler that takes float ones: a QDQ graph's float twin, and the
grid its QuantizeLinear nodes chose.

ORT's quantizer (``quantize_static``, QDQ format) writes an int8 model as a float graph
with ``QuantizeLinear -> DequantizeLinear`` pairs on the activations and a
``DequantizeLinear`` behind each int8 weight. libnpu's compiler imports float models and
quantizes them itself, so the EP hands it the float twin: weight ``DequantizeLinear``
nodes become float constants, each activation's Q -> DQ pair is dropped (its consumers
read the float value), and each input's QuantizeLinear range tells the calibration which
values that input takes. A pair whose range starts at 0 also clamps what it carries (the
quantizer drops the Relu it makes redundant): the twin keeps that clamp as a Relu
(:attr:`Dequantized.clamped`). Every node of the QDQ graph maps to one node of the twin (its
compute node) or to the compute nodes its Q/DQ chain connects (:attr:`Dequantized.neighbours`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Dequantized", "dequantize", "clamped_name", "QDQ_OPS"]

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_LIMITS = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int16): (-32768, 32767),
           np.dtype(np.uint16): (0, 65535)}


@dataclass
class Dequantized:
    """The float twin of a QDQ node list (indices refer to the list given)."""
    compute: list[int]                                   # nodes kept, in order
    constants: dict[str, np.ndarray]                     # new float constants (dequantized weights)
    alias: dict[str, str] = field(default_factory=dict)  # a dropped DQ's output -> the float value it stood for
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)   # float value -> its Q's range
    neighbours: dict[int, set[int]] = field(default_factory=dict)          # dropped node -> compute nodes it serves
    clamped: set[str] = field(default_factory=set)       # float values whose Q -> DQ pair clamps them at 0

    def name(self, value: str) -> str:
        """The twin's name of a value of the QDQ graph (a clamped value's Relu output, read
        through the pair's DQ)."""
        through_pair = value in self.alias
        while value in self.alias:
            value = self.alias[value]
        return clamped_name(value) if through_pair and value in self.clamped else value


def clamped_name(value: str) -> str:
    return f"{value}__relu"


def _per_axis(values: np.ndarray, rank: int, axis: int) -> np.ndarray:
    if values.size <= 1:
        return values.reshape(())
    shape = [1] * rank
    shape[axis % rank] = values.size
    return values.reshape(shape)


def dequantize(nodes: list, constants: dict[str, np.ndarray]) -> Dequantized:
    """The float twin of ``nodes`` (objects with ``op_type``, ``inputs``, ``outputs``,
    ``attributes``), whose constant inputs ``constants`` holds."""
    consumers: dict[str, list[int]] = {}
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            if v:
                consumers.setdefault(v, []).append(i)
        for v in n.outputs:
            producer[v] = i
    out = Dequantized([], {})
    dropped: set[int] = set()

    def axis_of(node) -> int:
        return next((a.i for a in node.attributes if a.name == "axis"), 1)

    def qparams(node) -> tuple[np.ndarray, np.ndarray] | None:
        scale = constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
        zero = constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if scale is None:
            return None
        return scale.astype(np.float32), (zero if zero is not None else np.zeros((), np.uint8))

    for i, n in enumerate(nodes):
        if n.op_type == "DequantizeLinear" and n.inputs[0] in constants and (q := qparams(n)) is not None:
            data = constants[n.inputs[0]]
            scale, zero = (_per_axis(v, data.ndim, axis_of(n)) for v in q)
            out.constants[n.outputs[0]] = ((data.astype(np.float32) - zero.astype(np.float32)) * scale
                                           ).astype(np.float32)
            dropped.add(i)
        elif n.op_type == "QuantizeLinear" and (q := qparams(n)) is not None:
            pairs = consumers.get(n.outputs[0], [])
            if not pairs or any(nodes[c].op_type != "DequantizeLinear" for c in pairs):
                continue           # an int8 value leaves the QDQ pattern: the node stays (the CPU runs it)
            scale, zero = q
            low, high = _LIMITS.get(zero.dtype, (-128, 127))
            source = n.inputs[0]
            out.ranges[source] = (float(np.min(scale * (low - zero.astype(np.float32)))),
                                  float(np.max(scale * (high - zero.astype(np.float32)))))
            if out.ranges[source][0] >= 0:
                out.clamped.add(source)
            dropped.add(i)
            for c in pairs:
                dropped.add(c)
                out.alias[nodes[c].outputs[0]] = source
    out.compute = [i for i in range(len(nodes)) if i not in dropped]
    kept = set(out.compute)
    for i in dropped:                   # the compute nodes each dropped node's Q/DQ chain connects
        seen, todo, found = {i}, [i], set()
        while todo:
            k = todo.pop()
            near = [producer[v] for v in nodes[k].inputs if v in producer]
            near += [c for v in nodes[k].outputs for c in consumers.get(v, [])]
            for m in near:
                if m in kept:
                    found.add(m)
                elif m not in seen:
                    seen.add(m)
                    todo.append(m)
        out.neighbours[i] = found
    return out
