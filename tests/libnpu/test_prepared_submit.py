"""A SUBMIT prepared once and sent many times (``Device.prepare_submit``), and the
driver's polling of short jobs (on by default, ``NPU_KMD_READ_SPIN_US=0`` turns it off):
same results, same checks, either way."""
from __future__ import annotations

import errno

import pytest

import libnpu
from kmd_fuse.uapi import NpuError
from tests.support.device import start_npu, stop_npu


def copy_job(device, length: int = 4096):
    src, dst = device.alloc_mem(length), device.alloc_mem(length)
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=length)
    return src, dst, cmds


def test_prepared_submit_runs_again_with_new_inputs(device):
    src, dst, cmds = copy_job(device)
    prepared = device.prepare_submit(cmds, [src, dst], wait=True)
    fences = []
    for value in range(1, 6):
        src.view[:] = value
        fences.append(device.run_prepared(prepared))
        assert (dst.view == value).all()
    assert [f.id for f in fences] == list(range(fences[0].id, fences[0].id + 5))
    assert all(f.status == 0 and f.device_time_ns > 0 for f in fences)


def test_prepared_submit_without_wait_gives_fences_to_wait_on(device):
    src, dst, cmds = copy_job(device)
    src.view[:] = 9
    prepared = device.prepare_submit(cmds, [src, dst])
    fences = [device.submit_prepared(prepared) for _ in range(3)]
    assert device.wait(fences, timeout=10) == 3
    assert (dst.view == 9).all()
    with pytest.raises(ValueError, match="wait=True"):
        device.run_prepared(prepared)


def test_prepared_submit_is_checked_again_each_time(device):
    """The driver does not trust a request because it was valid before: a buffer freed
    since is refused (ENOENT) and nothing runs."""
    src, dst, cmds = copy_job(device)
    prepared = device.prepare_submit(cmds, [src, dst], wait=True)
    device.run_prepared(prepared)
    device.free_mem(src)
    with pytest.raises(NpuError) as exc:
        device.run_prepared(prepared)
    assert exc.value.errno == errno.ENOENT


def test_prepared_submit_of_a_faulting_job_fails_every_time(device):
    src, dst, _ = copy_job(device)
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=0x10, length=64)  # the NULL page never maps
    prepared = device.prepare_submit(cmds, [src, dst], wait=True)
    for _ in range(2):
        with pytest.raises(libnpu.JobError) as exc:
            device.run_prepared(prepared)
        assert exc.value.errno == errno.EFAULT


@pytest.mark.parametrize("spin_us", ["0", "250"])
def test_short_and_long_jobs_with_and_without_read_polling(tmp_path, monkeypatch, spin_us):
    """Short jobs (polled for when on), a long one (always the interrupt), and a failing
    one, from one thread: every reply arrives and matches its job."""
    monkeypatch.setenv("NPU_KMD_READ_SPIN_US", spin_us)
    npu = start_npu(tmp_path)
    try:
        with libnpu.initialize(npu.devroot) as session, session.open(0) as device:
            src, dst, cmds = copy_job(device)
            big_src, big_dst = device.alloc_mem(64 << 20), device.alloc_mem(64 << 20)
            big = device.command_buffer()
            big.add("DMA_COPY", src=big_src.address, dst=big_dst.address, length=64 << 20)
            big_src.view[::4096] = 7
            for round_no in range(20):
                src.view[:] = round_no
                device.run(cmds, [src, dst])
                assert (dst.view == round_no).all()
                if round_no % 5 == 4:
                    device.run(big, [big_src, big_dst])
                    assert (big_dst.view[::4096] == 7).all()
            bad = device.command_buffer()
            bad.add("DMA_COPY", src=src.address, dst=0x10, length=8)
            with pytest.raises(libnpu.JobError):
                device.run(bad, [src])
            assert device.stats()["jobs_failed"] == 1
    finally:
        stop_npu(npu)
