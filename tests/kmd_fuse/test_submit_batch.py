"""SUBMIT_BATCH (ABI 2.2): several jobs queued in one request, all or nothing; its entries
may ask for NPU_SUBMIT_PROFILE (2.3) as a SUBMIT may."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from kmd_fuse import uapi
from libnpu.portability import NpuError


def copy_job(device, src, dst, value: int):
    src.view[:64] = value
    cmds = device.command_buffer(capacity=64)
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=64)
    return cmds, device.prepare_submit(cmds, [src, dst])


def test_a_batch_queues_its_jobs_in_order_and_each_completes(device) -> None:
    pairs = [(device.alloc_mem(4096), device.alloc_mem(4096)) for _ in range(11)]
    jobs = [copy_job(device, src, dst, i + 1) for i, (src, dst) in enumerate(pairs)]
    before = device.stats()["jobs_submitted"]
    fences = device.submit_batch([prepared for _, prepared in jobs])   # 8 + 3: two requests
    assert len(fences) == 11 and [f.id for f in fences] == sorted(f.id for f in fences)
    device.wait(fences)
    assert all(f.status == 0 for f in fences)
    for i, (_, dst) in enumerate(pairs):
        assert np.all(dst.view[:64] == i + 1)
    assert device.stats()["jobs_submitted"] == before + 11
    assert device.param("MAX_BATCH_JOBS") == uapi.NPU_MAX_BATCH_JOBS == 8


def test_one_refused_job_queues_none(device) -> None:
    src, dst, gone = device.alloc_mem(4096), device.alloc_mem(4096), device.alloc_mem(4096)
    _, good = copy_job(device, src, dst, 7)
    _, bad = copy_job(device, gone, dst, 9)
    device.free_mem(gone)                                   # its handle is unknown now
    before = device.stats()["jobs_submitted"]
    with pytest.raises(NpuError) as refused:
        device.submit_batch([good, good, bad])
    assert refused.value.errno == errno.ENOENT
    assert device.stats()["jobs_submitted"] == before


def raw_batch(device, count: int, flags: int = 0, entry_flags: int = 0, prepared=None):
    batch = uapi.new_payload(uapi.NPU_CMD_SUBMIT_BATCH)
    batch.count, batch.flags = count, flags
    for i in range(min(count, uapi.NPU_MAX_BATCH_JOBS)):
        if prepared is not None:
            uapi.ffi.memmove(uapi.ffi.addressof(batch.jobs[i]), prepared.body, len(prepared.body))
        batch.jobs[i].flags = entry_flags
    return device.file.request(uapi.NPU_CMD_SUBMIT_BATCH, batch)


@pytest.mark.parametrize("count, flags, entry_flags", [
    (0, 0, 0), (uapi.NPU_MAX_BATCH_JOBS + 1, 0, 0), (1, 0x4, 0), (2, 0, uapi.NPU_SUBMIT_WAIT)])
def test_bad_batches_are_einval(device, count: int, flags: int, entry_flags: int) -> None:
    src, dst = device.alloc_mem(4096), device.alloc_mem(4096)
    _, prepared = copy_job(device, src, dst, 1)
    with pytest.raises(NpuError) as refused:
        raw_batch(device, count, flags, entry_flags, prepared)
    assert refused.value.errno == errno.EINVAL


def test_batched_jobs_may_be_profiled(device) -> None:
    pairs = [(device.alloc_mem(4096), device.alloc_mem(4096)) for _ in range(3)]
    prepared = []
    for i, (src, dst) in enumerate(pairs):
        cmds, _ = copy_job(device, src, dst, i + 1)
        prepared.append(device.prepare_submit(cmds, [src, dst], profile=i != 1))
    fences = device.submit_batch(prepared)
    device.wait(fences)
    assert all(f.status == 0 for f in fences)
    for i in (0, 2):
        timing = device.get_profile(fences[i])
        assert timing.complete and [t.index for t in timing.tasks] == [0] and timing.cycles > 0
    with pytest.raises(NpuError) as not_profiled:
        device.get_profile(fences[1])
    assert not_profiled.value.errno == errno.ENOENT


def test_jobs_prepared_to_wait_are_not_batched(device) -> None:
    src, dst = device.alloc_mem(4096), device.alloc_mem(4096)
    cmds, _ = copy_job(device, src, dst, 1)
    with pytest.raises(ValueError):
        device.submit_batch([device.prepare_submit(cmds, [src, dst], wait=True)])
