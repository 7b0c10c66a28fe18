"""The arithmetic of TFLite shape computations, evaluated at import time when its operands are constants.

TF's converter keeps a graph's size arithmetic when an input dimension was free: how
``tf.signal.frame`` counts an audio clip's frames is SHAPE -> REDUCE_PROD -> FLOOR_DIV ->
ADD / MUL -> PACK, ending in the ``size`` of a SLICE, the shape of a RESHAPE and the
dims of a FILL (the zeros a frame is padded with). With the inputs' shapes fixed these
are constants; the importer (``tflite_import``: SHAPE, PACK, STRIDED_SLICE, RESHAPE,
CONCATENATION) folds them so that the operators they feed see constant operands, as they
must to run on the chip. :data:`FOLDS` are the rest: each takes the operands' values and a
reader of the operator's options table, and gives the value, or None when the operator
is not plain arithmetic (a fused activation, a division by zero): it is then imported
as it is.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tflite

__all__ = ["FOLDS", "ANY_DTYPE"]

Options = Callable[[type], Any]      # the operator's options table read as a given class (None: none)


def _plain(options: Options, cls: type) -> bool:
    """Whether the binary operator fuses no activation (a RELU would clip a size: not folded)."""
    o = options(cls)
    return o is None or o.FusedActivationFunction() == 0


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], cls: type | None = None,
            divides: bool = False) -> Callable[[Sequence[np.ndarray], Options], np.ndarray | None]:
    def fold(values: Sequence[np.ndarray], options: Options) -> np.ndarray | None:
        if len(values) != 2 or (cls is not None and not _plain(options, cls)) or (divides and not np.all(values[1])):
            return None
        return fn(values[0], values[1])
    return fold


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[[Sequence[np.ndarray], Options], np.ndarray | None]:
    def fold(values: Sequence[np.ndarray], options: Options) -> np.ndarray | None:
        if len(values) != 2 or values[0].ndim == 0:
            return None
        o = options(tflite.ReducerOptions)
        axes = tuple(int(a) % max(values[0].ndim, 1) for a in np.atleast_1d(values[1]))
        return fn(values[0], axis=axes, keepdims=bool(o is not None and o.KeepDims()))
    return fold


def _fill(values: Sequence[np.ndarray], options: Options) -> np.ndarray | None:
    if len(values) != 2 or np.asarray(values[1]).size != 1:
        return None
    return np.full(tuple(int(d) for d in np.atleast_1d(values[0])), np.asarray(values[1]).reshape(()))


#: Operator name -> its evaluation on constant operands (see the module docstring).
FOLDS: dict[str, Callable[[Sequence[np.ndarray], Options], np.ndarray | None]] = {
    "ADD": _binary(np.add, tflite.AddOptions),
    "SUB": _binary(np.subtract, tflite.SubOptions),
    "MUL": _binary(np.multiply, tflite.MulOptions),
    "FLOOR_DIV": _binary(np.floor_divide, divides=True),
    "FLOOR_MOD": _binary(np.mod, divides=True),
    "MAXIMUM": _binary(np.maximum),
    "MINIMUM": _binary(np.minimum),
    "REDUCE_PROD": _reduce(np.prod),
    "SUM": _reduce(np.sum),
    "FILL": _fill,
}

#: The folds whose output may be any type (FILL's zeros are float): the others fold integers only.
ANY_DTYPE = ("FILL",)
