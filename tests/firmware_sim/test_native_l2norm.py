"""The C int8 L2_NORMALIZATION (``norm_kernels.c``) against the numpy kernel, byte for byte
(random rows, the edge rows: all at the zero point, one unit off it, every value at an end of
int8, rows long enough for the sum's scaling loop, in place), and the chip's
L2_NORMALIZATION unit replayed as a C call (it ran in numpy on every inference)."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim import job_plans
from firmware_sim.executor import run_job
from firmware_sim.kernels import native, normalization
from firmware_sim.kernels.native import norm_calls
from firmware_sim.timing import HardwareProfile
from npu_hw import iommu
from tests.support.chip_memory import ASID, ChipMemory, encode
from tests.support.quant_utils import random_int8

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C kernels")


def _rows(rng: np.random.Generator, zp: int) -> np.ndarray:
    """Rows of a random depth: random, the edge rows, and rows near the zero point."""
    depth = int(rng.choice([1, 2, 3, 7, 16, 128, 1000, 12000]))
    x = random_int8(rng, (int(rng.integers(1, 5)), depth))
    edges = [np.full(depth, zp), np.full(depth, -128), np.full(depth, 127), np.full(depth, zp)]
    edges[3][0] = zp + (1 if zp < 127 else -1)                                # one unit off: a sum of 1
    near = np.clip(zp + rng.integers(-2, 3, depth), -128, 127)
    return np.concatenate([x, np.stack(edges), near[None]]).astype(np.int8)


def test_l2_normalization_reruns_in_c_as_numpy_computes() -> None:
    rng = np.random.default_rng(61)
    for case in range(40):
        zp = int(rng.choice([-128, -1, 0, 5, 127]))
        x = _rows(rng, zp)
        want = normalization.l2_normalization(x, input_zp=zp)
        out = np.full_like(x, 99)
        call = norm_calls.bind_l2_normalization(x, out, input_zp=zp)
        assert call is not None
        call()
        np.testing.assert_array_equal(out, want, err_msg=f"{x.shape} zp {zp}")
        if case % 8 == 0:                                   # in place
            in_place = x.copy()
            call = norm_calls.bind_l2_normalization(in_place, in_place, input_zp=zp)
            assert call is not None
            call()
            np.testing.assert_array_equal(in_place, want)
    x = np.zeros((2, 8), np.int8)
    assert norm_calls.bind_l2_normalization(x, x[:, ::2].copy().reshape(2, 4), input_zp=0) is None
    assert norm_calls.bind_l2_normalization(x.reshape(-1)[1:], x.reshape(-1)[:-1], input_zp=0) is None  # overlap


def test_l2_normalization_unit_replays_as_a_c_call(mem: ChipMemory) -> None:
    rng = np.random.default_rng(62)
    x = random_int8(rng, (3, 64))
    x_at, out = mem.put(x), mem.alloc(x.nbytes)
    command = encode("L2_NORMALIZATION", input=x_at, output=out, rows=3, depth=64, input_zp=-3)
    at = mem.put(np.frombuffer(command, np.uint8))
    for _ in range(job_plans.NATIVE_TRIES + 1):
        assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    plan = job_plans.lookup(mem.dma, ASID, at, np.frombuffer(command, np.uint8))
    assert plan is not None and plan.native is not None, "the task is a C kernel call"
    x = random_int8(rng, x.shape)
    mem.bytes[x_at - iommu.IOVA_BASE:x_at - iommu.IOVA_BASE + x.nbytes] = x.reshape(-1).view(np.uint8)
    assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    np.testing.assert_array_equal(mem.get(out, np.int8, x.shape), normalization.l2_normalization(x, input_zp=-3))
