"""IOTLB invalidations are ring entries that raise no interrupt: when more of them wait
than a ring holds, the driver must keep pushing them until none is left, or every later
job of every client waits behind them forever (issue 11, finding 5)."""
import numpy as np

import libnpu

BUSY_COPIES = 40          # 40 x 64 MiB DMA copies: each core busy for a good fraction of a second


def occupy_both_cores(dev) -> list:
    fences = []
    for _ in range(2):
        a, b = dev.alloc_mem(64 << 20), dev.alloc_mem(64 << 20)
        cmds = dev.command_buffer()
        for _ in range(BUSY_COPIES):
            cmds.add("DMA_COPY", src=a.address, dst=b.address, length=64 << 20)
        fences.append(dev.submit(cmds, [a, b]))
    return fences


def copy_runs(dev) -> None:
    src, dst = dev.alloc_mem(4096), dev.alloc_mem(4096)
    src.view[:] = 5
    cmds = dev.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=4096)
    dev.submit(cmds, [src, dst]).wait(timeout=60)
    assert (dst.view == 5).all()


def test_more_invalidations_than_a_ring_holds_never_block_later_jobs(fresh_npu):
    with libnpu.initialize(fresh_npu.devroot) as session:
        busy, other = session.open(0), session.open(0)
        many = [other.alloc_mem(4096) for _ in range(600)]
        fences = occupy_both_cores(busy)
        for memory in many:              # 600 frees x 2 cores: far more entries than a 256-entry ring
            other.free_mem(memory)
        for fence in fences:
            fence.wait(timeout=60)
        copy_runs(other)
        copy_runs(busy)


def test_closing_a_context_with_thousands_of_buffers_never_blocks_later_jobs(fresh_npu):
    with libnpu.initialize(fresh_npu.devroot) as session:
        busy, survivor = session.open(0), session.open(0)
        closing = session.open(0)
        for _ in range(1500):
            closing.alloc_mem(4096)
        fences = occupy_both_cores(busy)
        session.close(closing)
        for fence in fences:
            fence.wait(timeout=60)
        copy_runs(survivor)
        assert survivor.info()["num_contexts"] == 2
        assert np.all([f.status == 0 for f in fences])
