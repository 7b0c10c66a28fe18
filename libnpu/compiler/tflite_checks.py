"""Check the indices a TFLite flatbuffer's tables hold before anything follows them.

Flatbuffers are read lazily and without bounds: ``SubGraph.Tensors(j)`` for a ``j``
past the tensors vector reads whatever bytes lie there as a tensor table, so an
operator naming tensor 49 of 45 made the import report a name of flatbuffer bytes
(``tensor 49 ('\\x0b\\x00\\x00...')``) or an input "used before it is produced". LiteRT's
interpreter refuses such a file when it builds its graph (``Invalid tensor index 7 in
node inputs``, ``Tensor 1 specifies out of range buffer 9``); :func:`first_bad_index`
applies the same rules up front and names the field, its table's byte offset and the
range the index had to be in.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["first_bad_index"]


def _vector(length: int, as_numpy: Any) -> np.ndarray:
    """A flatbuffer int vector as an array (the generated code returns 0 for an absent one)."""
    return np.asarray(as_numpy(), np.int64) if length else np.zeros(0, np.int64)


def _out_of_range(values: np.ndarray, count: int, optional: bool) -> int | None:
    """The position of the first value outside ``[0, count)`` (-1 allowed when ``optional``)."""
    bad = (values >= count) | (values < (-1 if optional else 0))
    return int(np.argmax(bad)) if bad.any() else None


def first_bad_index(model: Any, size: int) -> str | None:
    """What is wrong with the first out-of-range index of ``model`` (a ``tflite.Model``
    read from a file of ``size`` bytes), or None when every index points into its vector:
    subgraph inputs and outputs, operators' tensors (-1 allowed for an optional input or
    an intermediate) and operator code, tensors' buffers, and large-model buffers' data
    (``offset`` + ``size``) within the file."""
    codes, buffers = model.OperatorCodesLength(), model.BuffersLength()
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        count = sg.TensorsLength()
        where = f"subgraph {s}"
        have = f"the subgraph has {count} tensors"
        for field, values in (("inputs", _vector(sg.InputsLength(), sg.InputsAsNumpy)),
                              ("outputs", _vector(sg.OutputsLength(), sg.OutputsAsNumpy))):
            k = _out_of_range(values, count, False)
            if k is not None:
                return (f"{where} (table at byte {sg._tab.Pos}): {field}[{k}] is tensor {values[k]}, "
                        f"out of range ({have})")
        for i in range(sg.OperatorsLength()):
            op = sg.Operators(i)
            at = f"{where} operator {i} (table at byte {op._tab.Pos})"
            if not 0 <= op.OpcodeIndex() < codes:
                return f"{at}: opcode_index {op.OpcodeIndex()} is out of range (the model has {codes} operator codes)"
            for field, values, optional in (
                    ("inputs", _vector(op.InputsLength(), op.InputsAsNumpy), True),
                    ("outputs", _vector(op.OutputsLength(), op.OutputsAsNumpy), False),
                    ("intermediates", _vector(op.IntermediatesLength(), op.IntermediatesAsNumpy), True)):
                k = _out_of_range(values, count, optional)
                if k is not None:
                    return f"{at}: {field}[{k}] is tensor {values[k]}, out of range ({have})"
        for j in range(count):
            t = sg.Tensors(j)
            if not 0 <= t.Buffer() < buffers:
                return (f"{where} tensor {j} (table at byte {t._tab.Pos}): buffer {t.Buffer()} is out of range "
                        f"(the model has {buffers} buffers)")
    for b in range(buffers):
        buf = model.Buffers(b)
        if buf.Offset() > 1 and buf.Offset() + buf.Size() > size:
            return (f"buffer {b} (table at byte {buf._tab.Pos}): its data (offset {buf.Offset()}, size {buf.Size()}) "
                    f"ends past the file's {size} bytes")
    return None
