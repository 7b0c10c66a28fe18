"""Which LiteRT kernels a host call runs on: the reference ones where a grid must match byte
for byte (int8), LiteRT's default ones (XNNPACK, one thread) for a float call, whose
reference kernels took 8.4 ms where the default ones took 0.24 ms (openwakeword's mel
front end kept in float)."""
from __future__ import annotations

import numpy as np
import tflite

from libnpu.host import kernel_for
from libnpu.loadable import HostCall
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model

B = tflite.BuiltinOperator


def _fully_connected(int8: bool) -> bytes:
    rng = np.random.default_rng(3)
    if int8:
        q = dict(scale=[0.05], zero_point=[0])
        tensors = [TensorSpec([1, 16], np.int8, **q),
                   TensorSpec([4, 16], np.int8, scale=[0.01], zero_point=[0],
                              data=rng.integers(-127, 128, (4, 16)).astype(np.int8)),
                   TensorSpec([1, 4], np.int8, scale=[0.1], zero_point=[0])]
    else:
        tensors = [TensorSpec([1, 16], np.float32),
                   TensorSpec([4, 16], np.float32, data=rng.standard_normal((4, 16)).astype(np.float32)),
                   TensorSpec([1, 4], np.float32)]
    return build_model(tensors, [OpSpec(B.FULLY_CONNECTED, [0, 1, -1], [2])], [0], [2])


def test_a_float_host_call_runs_on_the_default_kernels():
    weights = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    kernel = kernel_for(HostCall("tflite", _fully_connected(False), "FULLY_CONNECTED", 0))
    assert not kernel.reference_kernels
    x = np.linspace(-1, 1, 16, dtype=np.float32)[None]
    (got,) = kernel.compute([x])
    np.testing.assert_allclose(got, x @ weights.T, rtol=1e-5, atol=1e-5)


def test_an_int8_host_call_keeps_the_reference_kernels():
    kernel = kernel_for(HostCall("tflite", _fully_connected(True), "FULLY_CONNECTED", 0))
    assert kernel.reference_kernels
