"""Fixtures of the kernel tests."""
from __future__ import annotations

import pytest

from firmware_sim.kernels import native


@pytest.fixture(params=["native", "numpy"])
def kernel_backend(request) -> str:
    """Runs the test once with the C kernels and once with the numpy paths; both must give
    LiteRT's bytes. The C kernels must really be there (bootstrap installs the compiler)."""
    with native.enabled(request.param == "native"):
        if request.param == "native":
            assert native.library() is not None, "the C kernels did not build"
        yield request.param
