"""One device shared by threads and by trio tasks."""
import threading

import numpy as np
import trio

import libnpu


def test_eight_threads_three_rounds_on_one_device(device):
    errors = []

    def worker(index):
        try:
            src, dst = device.alloc_mem(8192), device.alloc_mem(8192)
            cmds = device.command_buffer()
            cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=8192)
            for round_ in range(3):
                for i in range(40):
                    src.view[:] = (index * 31 + round_ * 7 + i) % 256
                    if i % 2:
                        device.run(cmds, [src, dst])
                    else:
                        device.submit(cmds, [src, dst]).wait(timeout=30)
                    assert (dst.view == src.view[0]).all()
            device.free_mem(src)
            device.free_mem(dst)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    before = device.stats()["jobs_completed"]
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert device.stats()["jobs_completed"] - before == 8 * 3 * 40


async def test_trio_tasks_share_a_device(device):
    src = device.alloc_mem(4096)
    src.view[:] = 3
    results = []

    async def task(n):
        dst = device.alloc_mem(4096)
        cmds = device.command_buffer()
        cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=4096)
        fence = device.submit(cmds, [src, dst])
        await fence.wait_async(timeout=30)
        await device.run_async(cmds, [src, dst])
        results.append(bool((dst.view == 3).all()))

    async with trio.open_nursery() as nursery:
        for n in range(6):
            nursery.start_soon(task, n)
    assert results == [True] * 6


async def test_a_job_failure_reaches_the_awaiting_task(device):
    src = device.alloc_mem(4096)
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=16, length=16)
    try:
        await device.run_async(cmds, [src])
    except libnpu.JobError as exc:
        assert exc.errno == 14   # EFAULT
    else:
        raise AssertionError("the IOMMU fault was not reported")
    assert np.all(src.view == 0)


def test_a_thread_waiting_on_a_long_job_does_not_hold_up_the_others(device):
    a, b = device.alloc_mem(32 << 20), device.alloc_mem(32 << 20)
    long_job = device.command_buffer()
    for _ in range(40):
        long_job.add("DMA_COPY", src=a.address, dst=b.address, length=32 << 20)
    fence = device.submit(long_job, [a, b])
    waiter = threading.Thread(target=fence.wait, kwargs={"timeout": 60})
    waiter.start()
    nop = device.command_buffer()
    nop.add("NOP")
    for _ in range(50):             # on the other core, while the waiter sits in WAIT
        device.run(nop)
    assert fence.status is None, "the long job finished before the NOPs: make it longer"
    waiter.join(60)
    assert fence.status == 0
