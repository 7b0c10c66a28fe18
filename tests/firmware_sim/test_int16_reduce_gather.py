"""REDUCE_L2 and GATHER with int16 activations (``OPF_INT16``): the L2 norm of an STFT's
real and imaginary parts (Silero VAD's magnitude) and a recurrent state's halves picked by
GATHER stay on int16 grids. REDUCE_L2 is pinned to its documented formula with Python
integers; GATHER copies int16 elements; a nonzero int16 zero point fails the job."""
from __future__ import annotations

import errno
import math

import numpy as np

from npu_hw import ops
from tests.support.chip_memory import ChipMemory, encode, ranked, run_ok
from tests.support.quant_utils import random_int16


def _l2_int16(x: np.ndarray, axis: int, scale: float) -> np.ndarray:
    """``clamp(round_half_away(sqrt(sum x^2) * scale))`` per row, with Python numbers."""
    rows = np.moveaxis(x.astype(np.int64), axis, -1)
    out = np.empty(rows.shape[:-1], np.int64)
    for idx in np.ndindex(out.shape):
        val = math.sqrt(sum(int(v) ** 2 for v in rows[idx])) * scale
        out[idx] = min(max(math.floor(val) + (1 if val - math.floor(val) >= 0.5 else 0), -32768), 32767)
    return np.expand_dims(out, axis).astype(np.int16)


def test_reduce_l2_int16_formula(mem: ChipMemory) -> None:
    rng = np.random.default_rng(26)
    for scale, shape, axis in ((0.7, (2, 1, 5, 3), 0), (0.01, (4, 6), 1), (3.0, (3, 2), 0)):
        x = random_int16(rng, shape)
        x.flat[:3] = (0, 1, -1)               # the small values a grid of squares would lose
        expected = _l2_int16(x, axis, scale)
        out = mem.alloc(expected.nbytes)
        fields = dict(input=mem.put(x), output=out, rank=len(shape), in_shape=ranked(shape),
                      axes_mask=1 << axis, input_zp=0, output_zp=0, scale=scale)
        run_ok(mem, encode("REDUCE_L2", ops.OPF_INT16, **fields))
        np.testing.assert_array_equal(mem.get(out, np.int16, expected.shape), expected)
        bad = encode("REDUCE_L2", ops.OPF_INT16, **dict(fields, output_zp=1))
        assert mem.run(bad).status == -errno.EINVAL


def test_gather_int16_copies_elements(mem: ChipMemory) -> None:
    rng = np.random.default_rng(27)
    x = random_int16(rng, (2, 3, 4))         # (outer, axis, inner)
    indices = np.array([2, 0, 2], np.int32)
    expected = x[:, indices, :]
    out = mem.alloc(expected.nbytes)
    run_ok(mem, encode("GATHER", ops.OPF_INT16, input=mem.put(x), output=out, indices_iova=mem.put(indices),
                       outer=2, axis_size=3, inner=4, count=3))
    np.testing.assert_array_equal(mem.get(out, np.int16, expected.shape), expected)
