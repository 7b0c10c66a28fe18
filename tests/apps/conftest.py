"""Fixtures for the application tests."""
from __future__ import annotations

import pytest

# resnet8_path, blazeface_path and astronaut come from tests/conftest.py


@pytest.fixture(scope="session")
def litert_ok() -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
