"""Two jobs in flight run on two cores at the same time (seen in the chip's registers)."""
import mmap
import os
import time

import libnpu
from kmd_fuse import paths
from npu_hw import memory, regs


def chip_registers(devroot) -> regs.RegisterView:
    fd = os.open(memory.regs_path(paths.bus_dir(devroot, 0)), os.O_RDONLY)
    try:
        return regs.RegisterView(mmap.mmap(fd, regs.REGS_SIZE, prot=mmap.PROT_READ))
    finally:
        os.close(fd)


def test_two_jobs_run_on_both_cores_at_once(npu):
    view = chip_registers(npu.devroot)
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        jobs = []
        for _ in range(2):
            a, b = dev.alloc_mem(32 << 20), dev.alloc_mem(32 << 20)
            cmds = dev.command_buffer()
            for _ in range(30):
                cmds.add("DMA_COPY", src=a.address, dst=b.address, length=32 << 20)
            jobs.append((cmds, [a, b]))
        done_before = [view.read64(regs.core_bank(c) + regs.JOBS_DONE) for c in (0, 1)]
        fences = [dev.submit(cmds, bufs) for cmds, bufs in jobs]
        both_busy = False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not both_busy:
            both_busy = all(view.read64(regs.core_bank(c) + regs.CURRENT_JOB) for c in (0, 1))
            if all(f.signalled for f in fences):
                break
        dev.wait(fences, timeout=60)
        assert both_busy, "the two jobs never ran at the same time"
        done_after = [view.read64(regs.core_bank(c) + regs.JOBS_DONE) for c in (0, 1)]
        assert [after - before for before, after in zip(done_before, done_after)] == [1, 1]


def test_context_busy_time_grows_while_its_job_runs(device):
    a, b = device.alloc_mem(32 << 20), device.alloc_mem(32 << 20)
    cmds = device.command_buffer()
    for _ in range(40):
        cmds.add("DMA_COPY", src=a.address, dst=b.address, length=32 << 20)
    before = device.stats()["busy_time_ns"]
    fence = device.submit(cmds, [a, b])
    samples = []
    while not fence.signalled:
        samples.append(device.stats()["busy_time_ns"])
        time.sleep(0.02)                                    # the sampling interval, not a wait
    after = device.stats()["busy_time_ns"]
    assert samples == sorted(samples)                       # never backwards
    assert any(before < s < after for s in samples), "busy time only moved at completion"
