"""The C int8 BATCH_MATMUL (``npu_matmul8``) against the numpy kernel, byte for byte, and the
chip's BATCH_MATMUL unit replayed as a C call (int8 ran in numpy on every inference: an
attention's context, scores x encoder outputs, in a decoder step)."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim import job_plans
from firmware_sim.executor import run_job
from firmware_sim.kernels import matmul, native
from firmware_sim.kernels.native import int16_calls
from firmware_sim.timing import HardwareProfile
from npu_hw import iommu
from tests.support.chip_memory import ASID, ChipMemory, encode, ranked
from tests.support.quant_utils import random_int8

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C kernels")


def test_int8_batch_matmul_reruns_in_c_as_numpy_computes() -> None:
    """Either operand stored transposed, batch axes broadcast from either side, zero points at
    int8's ends (sums past 2**31 wrap), left and right shifts, the output's zero point, clamps."""
    rng = np.random.default_rng(81)
    for case in range(40):
        rows, depth, cols = (int(v) for v in rng.integers(1, 12, size=3))
        if case % 7 == 0:
            depth = 40000                                   # 255 * 255 * 40000 > 2**31: the int32 sum wraps
        batch = [int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 3)))]
        lhs_batch = [d if rng.random() < 0.6 else 1 for d in batch]
        rhs_batch = [d if rng.random() < 0.6 else 1 for d in batch]
        adj_x, adj_y = bool(case & 1), bool(case & 2)
        lhs = random_int8(rng, (*lhs_batch, *((depth, rows) if adj_x else (rows, depth))))
        rhs = random_int8(rng, (*rhs_batch, *((cols, depth) if adj_y else (depth, cols))))
        if case % 7 == 0:
            lhs[...], rhs[...] = -128, -128
        kw_args = dict(lhs_zp=int(rng.choice([-128, -3, 0, 127])), rhs_zp=int(rng.choice([-128, 0, 9, 127])),
                       output_zp=int(rng.integers(-128, 128)), multiplier=int(rng.choice([0, 1 << 30, (1 << 31) - 1])),
                       shift=int(rng.integers(-31, 8)), adj_x=adj_x, adj_y=adj_y,
                       act_min=int(rng.choice([-128, -20])), act_max=int(rng.choice([127, 30])))
        want = matmul.matmul_int8(lhs, rhs, **kw_args)
        out = np.empty_like(want)
        rerun = int16_calls.bind_matmul8(lhs, rhs, out, **kw_args)
        assert rerun is not None
        rerun()
        np.testing.assert_array_equal(out, want, err_msg=f"{lhs.shape} {rhs.shape} adj {adj_x} {adj_y} {kw_args}")


def test_int8_batch_matmul_unit_replays_as_a_c_call(mem: ChipMemory) -> None:
    rng = np.random.default_rng(82)
    lhs, rhs = random_int8(rng, (1, 1, 32)), random_int8(rng, (1, 32, 48))
    lhs_at, rhs_at, out = mem.put(lhs), mem.put(rhs), mem.alloc(48)
    quant = dict(lhs_zp=-5, rhs_zp=3, output_zp=-9, multiplier=1 << 30, shift=-6, act_min=-128, act_max=127)
    command = encode("BATCH_MATMUL", lhs=lhs_at, rhs=rhs_at, output=out, rank=3, lhs_shape=ranked((1, 1, 32)),
                     rhs_shape=ranked((1, 32, 48)), **quant)
    at = mem.put(np.frombuffer(command, np.uint8))
    for _ in range(job_plans.NATIVE_TRIES + 1):
        assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    plan = job_plans.lookup(mem.dma, ASID, at, np.frombuffer(command, np.uint8))
    assert plan is not None and plan.native is not None, "the task is a C kernel call"
    lhs = random_int8(rng, lhs.shape)
    mem.bytes[lhs_at - iommu.IOVA_BASE:lhs_at - iommu.IOVA_BASE + lhs.nbytes] = lhs.reshape(-1).view(np.uint8)
    assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    np.testing.assert_array_equal(mem.get(out, np.int8, (1, 1, 48)), matmul.matmul_int8(lhs, rhs, **quant))
