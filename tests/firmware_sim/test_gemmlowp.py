"""gemmlowp's GetReciprocal: the scalar path for a few values equals the vectorized one."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import gemmlowp


def test_scalar_reciprocal_matches_vectorized() -> None:
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.integers(1, 1 << 31, 20000), 1 << np.arange(31), (1 << np.arange(1, 32)) - 1,
        [1, 2, 3, 4095, 4096, 4097, (1 << 31) - 1]]).astype(np.int64)
    step = gemmlowp._SCALAR_MAX
    assert values.size > step
    for digits in (0, 5, 12):
        scale, bits = gemmlowp.get_reciprocal(values, digits)           # vectorized
        for start in range(0, values.size, step):
            chunk = values[start:start + step].reshape(-1, 1)
            s, b = gemmlowp.get_reciprocal(chunk, digits)               # Python integers
            assert s.shape == b.shape == chunk.shape
            np.testing.assert_array_equal(s[:, 0], scale[start:start + step])
            np.testing.assert_array_equal(b[:, 0], bits[start:start + step])
