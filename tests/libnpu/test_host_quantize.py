"""The runtime's host quantization of float inputs: byte-identical to TFLite's formula
(round half away from zero, add the zero point, saturate), ties and extremes included."""
import numpy as np
import pytest

from libnpu.loadable import TensorDesc
from libnpu.runtime import quantize


def _formula(values: np.ndarray, desc: TensorDesc) -> np.ndarray:
    """The readable reference: sign(t) * floor(|t| + 0.5) + zero point, clipped."""
    assert desc.scale is not None and desc.zero_point is not None
    info = np.iinfo(desc.dtype)
    t = np.asarray(values, np.float32) / desc.scale[0]
    q = np.sign(t) * np.floor(np.abs(t) + 0.5) + desc.zero_point[0]
    return np.clip(q, info.min, info.max).astype(desc.dtype)


def _desc(dtype: str, scale: np.ndarray, zero_point: int, shape: tuple[int, ...]) -> TensorDesc:
    return TensorDesc(name="x", dtype=dtype, shape=shape, strides=tuple(np.empty(shape, dtype).strides),
                      region=0, offset=0, scale=scale, zero_point=np.array([zero_point], np.int64))


@pytest.mark.parametrize("dtype,zero_point", [("int8", -3), ("int8", 0), ("uint8", 128), ("int16", 0)])
@pytest.mark.parametrize("scale_type", [np.float32, np.float64])
def test_quantize_is_byte_identical_to_the_formula(dtype, zero_point, scale_type):
    rng = np.random.default_rng(7)
    scale = np.array([rng.uniform(1e-4, 0.05)], scale_type)
    s = float(scale[0])
    ties = (np.arange(-40000, 40000) + 0.5) * s          # exact halves: the rounding's hard cases
    values = np.concatenate([
        rng.uniform(-300, 300, 20000) * s, ties, np.arange(-400, 400) * s,
        [np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-45, -1e-45, np.nan]]).astype(np.float32)
    desc = _desc(dtype, scale, zero_point, values.shape)
    with np.errstate(invalid="ignore"):                  # NaN's cast, the same in both
        want = _formula(values, desc)
        got = quantize(values, desc)
        into = np.full(values.shape, 5, dtype)
        returned = quantize(values, desc, out=into)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert returned is into and into.tobytes() == want.tobytes()


def test_quantize_into_a_strided_view_of_another_shape():
    desc = _desc("int8", np.array([0.02], np.float32), 1, (1, 4, 4, 3))
    values = np.random.default_rng(3).uniform(-3, 3, (48,)).astype(np.float32)
    memory = np.zeros(200, np.int8)
    view = np.lib.stride_tricks.as_strided(memory[8:].view(np.int8), (1, 4, 4, 3), (48, 12, 3, 1))
    quantize(values, desc, out=view)
    assert view.tobytes() == _formula(values, desc).reshape(1, 4, 4, 3).tobytes()
    assert not memory[:8].any() and not memory[56:].any()      # nothing written outside the tensor
