"""The LiteRT runner the benchmarks compare with (libnpu.tools.models.LiteRT) on models with
free input dimensions."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from libnpu.tools.models import LiteRT
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, int32_const


@pytest.mark.parametrize("kernels", ["reference", "default"])
def test_a_free_dimension_is_sized_by_the_first_inputs(tmp_path, kernels) -> None:
    """A model whose declared size of a free dimension cannot be prepared (pyopen-wakeword's
    mel front end is declared [1, 1] and XNNPACK cannot prepare its STFT at that length): the
    runner sized it at construction and failed there ("failed to prepare"); it now sizes it
    by the first inputs it is given."""
    tensors = [TensorSpec((1, 1), np.float32, name="x", signature=(1, -1)), int32_const([-1, 4]),
               TensorSpec((2, 4), np.float32, name="y")]
    path = tmp_path / "free.tflite"
    path.write_bytes(build_model(tensors, [OpSpec(tflite.BuiltinOperator.RESHAPE, [0, 1], [2])], [0], [2]))
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    (y,) = LiteRT(path, kernels, threads=1).run([x])
    np.testing.assert_array_equal(y, x.reshape(2, 4))
