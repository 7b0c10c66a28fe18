"""A job's timeout counts the chip's time, the CPU time its core's process gets, not the
host's wall time (issue 26): a core the host does not run for longer than the timeout
(a loaded host; here, stopped) finishes its job, and a job that burns its timeout of CPU
still fails with ETIMEDOUT."""
from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import libnpu
from npu_hw import regs
from tests.support.device import core_pids, core_registers, start_npu, stop_npu, wait_for, wait_until

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)

WATCHDOG_MS = 400
COPY_BYTES = 8 << 20
COPIES = 40        # 320 MiB copied: ~100-200 ms of a core's CPU, well under WATCHDOG_MS


@pytest.fixture(scope="module")
def watchdog_npu(tmp_path_factory):
    mounted = start_npu(tmp_path_factory.mktemp("watchdog"), extra=("--watchdog-ms", str(WATCHDOG_MS)))
    yield mounted
    stop_npu(mounted)


def copy_job(dev: libnpu.Device, copies: int = COPIES):
    """A job of ``copies`` copies of a COPY_BYTES buffer: its commands, buffers and source."""
    src, dst = dev.alloc_mem(COPY_BYTES), dev.alloc_mem(COPY_BYTES)
    src.view[:] = np.arange(COPY_BYTES, dtype=np.uint8)
    cmds = dev.command_buffer(capacity=64 * copies + 64)
    for _ in range(copies):
        cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=COPY_BYTES)
    return cmds, [src, dst]


def is_stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return True              # gone: nothing left to wait for


def resume(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_a_job_whose_core_gets_no_cpu_past_its_timeout_completes(watchdog_npu):
    """The core's process is stopped while it runs the job until more than the timeout has
    passed on the wall clock: the job then completes (it failed with ETIMEDOUT when the
    watchdog timed jobs on the wall clock)."""
    npu = watchdog_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        cmds, (src, dst) = copy_job(dev)
        for _ in range(20):          # until the cores are stopped while the job is their current one
            fence = dev.submit(cmds, [src, dst])
            wait_for(lambda: any(core_registers(npu.devroot, regs.CURRENT_JOB, 64)) or fence.signalled,
                     "the job on a core")
            pids = core_pids(npu.devroot)
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                wait_for(lambda: all(map(is_stopped, pids)), "the cores stopped")
                running = [(core, job) for core, job in enumerate(core_registers(npu.devroot, regs.CURRENT_JOB, 64))
                           if job]
                if running:
                    core, job = running[0]
                    started = core_registers(npu.devroot, regs.JOB_START_NS, 64)[core]

                    def timed_out_or_failed() -> bool:
                        # Past the timeout on the wall clock (twice it: the watchdog ticks
                        # every 20 ms), or no longer the core's job (the watchdog failed it).
                        return (time.monotonic_ns() - started > 2 * WATCHDOG_MS * 1_000_000
                                or core_registers(npu.devroot, regs.CURRENT_JOB, 64)[core] != job)
                    wait_for(timed_out_or_failed, "the job's timeout to pass on the wall clock")
            finally:
                resume(pids)
            if running:
                break
            fence.wait(timeout=60)   # it finished before the cores stopped: again
        else:
            pytest.fail("the job never ran long enough to be stopped under it")
        fence.wait(timeout=60)
        assert fence.status == 0
        assert np.array_equal(dst.view, src.view)


def test_a_job_that_burns_its_timeout_of_cpu_still_times_out(watchdog_npu):
    npu = watchdog_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        cmds, buffers = copy_job(dev, copies=4000)       # seconds of CPU
        restarts = sum(core_registers(npu.devroot, regs.CORE_RESTARTS))
        with pytest.raises(libnpu.JobError) as late:
            dev.run(cmds, buffers, timeout_ms=50)
        assert late.value.errno == errno.ETIMEDOUT
        assert wait_until(lambda: sum(core_registers(npu.devroot, regs.CORE_RESTARTS)) == restarts + 1)
        dev.run(None)                                    # the restarted core serves again
