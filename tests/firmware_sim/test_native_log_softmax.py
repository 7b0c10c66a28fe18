"""The C int8 LOG_SOFTMAX (``norm_kernels.c``) against the numpy kernel, byte for byte
(input scales from tiny to wide, so rows whose elements fall under ``diff_min`` and rows
whose sum saturates; the edge rows: constant, one element far above the rest, both ends
of int8; in place), and the chip's LOG_SOFTMAX unit replayed as a C call (it ran in numpy
on every inference: ~390 us of a decoder step's ~400 us of chip CPU)."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim import job_plans
from firmware_sim.executor import run_job
from firmware_sim.kernels import native, normalization
from firmware_sim.kernels.native import norm_calls
from firmware_sim.timing import HardwareProfile
from libnpu.compiler.ops.normalization import log_softmax_params
from npu_hw import iommu
from tests.support.chip_memory import ASID, ChipMemory, encode
from tests.support.quant_utils import random_int8

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C kernels")


def _bound(x: np.ndarray, out: np.ndarray, params: dict[str, int]):
    tables = normalization.log_softmax_tables(params["input_multiplier"], params["input_left_shift"],
                                              params["diff_min"])
    return norm_calls.bind_log_softmax(x, out, tables, reverse_scaling_divisor=params["reverse_scaling_divisor"],
                                       reverse_scaling_right_shift=params["reverse_scaling_right_shift"],
                                       diff_min=params["diff_min"])


def test_log_softmax_reruns_in_c_as_numpy_computes() -> None:
    rng = np.random.default_rng(71)
    for case, scale in enumerate(np.geomspace(1e-3, 2.0, 40)):
        params = log_softmax_params(float(np.float32(scale)))
        depth = int(rng.choice([1, 2, 5, 64, 257, 3000]))
        x = random_int8(rng, (int(rng.integers(1, 4)), depth))
        edges = np.stack([np.full(depth, 7), np.full(depth, -128), np.full(depth, 127), np.full(depth, -128)])
        edges[3][0] = 127                                   # one far above the rest
        x = np.concatenate([x, edges]).astype(np.int8)
        want = normalization.log_softmax(x, **params)
        out = np.full_like(x, 99)
        call = _bound(x, out, params)
        assert call is not None
        call()
        np.testing.assert_array_equal(out, want, err_msg=f"{x.shape} scale {scale}")
        if case % 8 == 0:                                   # in place
            in_place = x.copy()
            call = _bound(in_place, in_place, params)
            assert call is not None
            call()
            np.testing.assert_array_equal(in_place, want)
    x = np.zeros((2, 8), np.int8)
    params = log_softmax_params(0.1)
    assert _bound(x.reshape(-1)[1:], x.reshape(-1)[:-1], params) is None       # overlapping, not in place


def test_log_softmax_unit_replays_as_a_c_call(mem: ChipMemory) -> None:
    rng = np.random.default_rng(72)
    params = log_softmax_params(0.0625)
    x = random_int8(rng, (2, 96))
    x_at, out = mem.put(x), mem.alloc(x.nbytes)
    command = encode("LOG_SOFTMAX", input=x_at, output=out, rows=2, depth=96, **params)
    at = mem.put(np.frombuffer(command, np.uint8))
    for _ in range(job_plans.NATIVE_TRIES + 1):
        assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    plan = job_plans.lookup(mem.dma, ASID, at, np.frombuffer(command, np.uint8))
    assert plan is not None and plan.native is not None, "the task is a C kernel call"
    x = random_int8(rng, x.shape)
    mem.bytes[x_at - iommu.IOVA_BASE:x_at - iommu.IOVA_BASE + x.nbytes] = x.reshape(-1).view(np.uint8)
    assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    np.testing.assert_array_equal(mem.get(out, np.int8, x.shape), normalization.log_softmax(x, **params))
