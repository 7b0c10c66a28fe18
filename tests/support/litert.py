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
