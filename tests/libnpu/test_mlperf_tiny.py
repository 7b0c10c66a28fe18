"""The other MLPerf-Tiny models through the whole stack, byte for byte against LiteRT's
BUILTIN_REF kernels (ResNet-8 is in test_runtime.py): VWW (MobileNetV1: depthwise and
pointwise convolutions) and KWS (DS-CNN: strided 10x4 first convolution, average pool,
FC, softmax). They exercise the chip's C kernels (oneDNN convolutions) on real layers."""
import numpy as np
import pytest

import libnpu
from tests.support.litert import ReferenceModel

pytest.importorskip("ai_edge_litert.interpreter")


@pytest.mark.parametrize("name", ["vww", "kws"])
def test_byte_identical_to_builtin_ref(name, request, npu, tmp_path):
    path = request.getfixturevalue(f"{name}_path")
    reference = ReferenceModel(path)
    shape, dtype = reference.shape, reference.dtype
    model = libnpu.load(path, devroot=npu.devroot, cache_dir=tmp_path)
    try:
        rng = np.random.default_rng(15)
        for i in range(12):        # the first run decodes the job, the later ones reuse it
            x = (rng.integers(-128, 128, shape, dtype=np.int8) if dtype == np.int8
                 else rng.uniform(-2, 2, shape).astype(dtype))     # the models quantize a float input
            assert np.array_equal(model.infer([x])[0], reference(x)), f"{name} input {i}"
    finally:
        model.close()
