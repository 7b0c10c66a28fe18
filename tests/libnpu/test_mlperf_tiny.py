"""The other MLPerf-Tiny models through the whole stack, byte for byte against LiteRT's
BUILTIN_REF kernels (ResNet-8 is in test_runtime.py): VWW (MobileNetV1: depthwise and
pointwise convolutions) and KWS (DS-CNN: strided 10x4 first convolution, average pool,
FC, softmax). They exercise the chip's C kernels (oneDNN convolutions) on real layers."""
import numpy as np
import pytest

import libnpu

litert = pytest.importorskip("ai_edge_litert.interpreter")


def reference_runner(path):
    interp = litert.Interpreter(model_path=str(path),
                                experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]

    def run(x):
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        return interp.get_tensor(out["index"]).copy()
    return run, tuple(inp["shape"]), np.dtype(inp["dtype"])


@pytest.mark.parametrize("name", ["vww", "kws"])
def test_byte_identical_to_builtin_ref(name, request, npu, tmp_path):
    path = request.getfixturevalue(f"{name}_path")
    reference, shape, dtype = reference_runner(path)
    model = libnpu.load(path, devroot=npu.devroot, cache_dir=tmp_path)
    try:
        rng = np.random.default_rng(15)
        for i in range(12):        # the first run decodes the job, the later ones reuse it
            x = (rng.integers(-128, 128, shape, dtype=np.int8) if dtype == np.int8
                 else rng.uniform(-2, 2, shape).astype(dtype))     # the models quantize a float input
            assert np.array_equal(model.infer([x])[0], reference(x)), f"{name} input {i}"
    finally:
        model.close()
