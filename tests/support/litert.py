"""Golden outputs: run a .tflite model with LiteRT's reference kernels."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def litert_run(model: Path | bytes, feeds: list[np.ndarray], *, reference: bool = True) -> list[np.ndarray]:
    """Run a .tflite model with LiteRT (BUILTIN_REF kernels by default); outputs in order."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    kw = {"experimental_op_resolver_type": litert.OpResolverType.BUILTIN_REF} if reference else {}
    if isinstance(model, (bytes, bytearray)):
        it = litert.Interpreter(model_content=bytes(model), **kw)
    else:
        it = litert.Interpreter(model_path=str(model), **kw)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


class ReferenceModel:
    """A one-input, one-output .tflite model on LiteRT's BUILTIN_REF kernels, one interpreter
    kept for many runs: ``reference(x)`` is the output; ``shape``/``dtype`` the input's."""

    def __init__(self, path: Path) -> None:
        litert = pytest.importorskip("ai_edge_litert.interpreter")
        self._it = litert.Interpreter(model_path=str(path),
                                      experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
        self._it.allocate_tensors()
        self._in, self._out = self._it.get_input_details()[0], self._it.get_output_details()[0]
        self.shape: tuple[int, ...] = tuple(self._in["shape"])
        self.dtype = np.dtype(self._in["dtype"])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self._it.set_tensor(self._in["index"], x)
        self._it.invoke()
        return self._it.get_tensor(self._out["index"]).copy()
