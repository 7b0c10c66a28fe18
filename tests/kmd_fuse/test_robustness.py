"""Clients that die, jobs that hang, a chip that dies, resets: the device keeps
serving everyone else and nothing leaks."""
import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import libnpu
from kmd_fuse import paths
from npu_hw import regs
from tests.support.device import (
    core_pids,
    core_registers,
    open_to_others,
    set_fault_injection,
    start_npu,
    stop_npu,
    wait_for,
    wait_until,
    wait_until_hung,
)

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)

LONG_JOB = textwrap.dedent("""
    import sys, time, libnpu
    with libnpu.initialize(sys.argv[1]) as s:
        d = s.open(0)
        a, b = d.alloc_mem(64 << 20), d.alloc_mem(64 << 20)
        for _ in range(3):
            d.alloc_mem(1 << 20)
        c = d.command_buffer()
        for _ in range(40):
            c.add("DMA_COPY", src=a.address, dst=b.address, length=64 << 20)
        fence = d.submit(c, [a, b])
        print("submitted", flush=True)
        if sys.argv[2] == "wait":
            fence.wait()
        time.sleep(60)     # not a wait of the test: the client idles until it is killed
""")


@pytest.mark.parametrize("blocked_in", ["sleep", "wait"])
def test_client_killed_mid_job_is_reclaimed(npu, blocked_in):
    bus = paths.bus_dir(npu.devroot, 0)
    with libnpu.initialize(npu.devroot) as session:
        watcher = session.open(0)
        base = watcher.info()
        files = set(os.listdir(bus))
        child = subprocess.Popen([sys.executable, "-c", LONG_JOB, str(npu.devroot), blocked_in],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "submitted"
        assert watcher.info()["memory_used"] >= base["memory_used"] + (128 << 20)
        wait_for(lambda: regs.CORE_BUSY in core_registers(npu.devroot, regs.CORE_STATE), "the job on a core")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)                       # never stuck in D state
        child.stdout.close()
        assert wait_until(lambda: watcher.info()["num_contexts"] == base["num_contexts"])
        assert wait_until(lambda: watcher.info()["memory_used"] == base["memory_used"])
        assert wait_until(lambda: set(os.listdir(bus)) == files), set(os.listdir(bus)) ^ files
        src, dst = watcher.alloc_mem(4096), watcher.alloc_mem(4096)
        src.view[:] = 9
        cmds = watcher.command_buffer()
        cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=4096)
        watcher.run(cmds, [src, dst])
        assert (dst.view == 9).all()




@pytest.fixture
def fast_watchdog_npu(tmp_path):
    mounted = start_npu(tmp_path, extra=("--watchdog-ms", "300"))
    yield mounted
    stop_npu(mounted)


def test_hung_job_is_killed_by_the_watchdog(fast_watchdog_npu):
    npu = fast_watchdog_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        nop = dev.command_buffer()
        nop.add("NOP")
        set_fault_injection(npu.devroot, regs.FAULT_HANG)
        fence = dev.submit(nop)
        with pytest.raises(libnpu.JobError) as exc:
            fence.wait(timeout=60)
        set_fault_injection(npu.devroot, 0)
        assert exc.value.errno == errno.ETIMEDOUT
        assert dev.info()["jobs_failed"] >= 1
        for _ in range(20):                             # the restarted core serves again
            dev.run(nop)


def test_dma_error_and_lost_interrupt_injection(fresh_npu):
    npu = fresh_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        src, dst = dev.alloc_mem(4096), dev.alloc_mem(4096)
        cmds = dev.command_buffer()
        cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=4096)
        set_fault_injection(npu.devroot, regs.FAULT_DMA_ERROR)
        with pytest.raises(libnpu.JobError) as exc:
            dev.run(cmds, [src, dst])
        assert exc.value.errno == errno.EIO
        set_fault_injection(npu.devroot, regs.FAULT_LOST_IRQ)
        dev.run(cmds, [src, dst])                       # found by the driver's completion poll
        src.view[:] = 0x0F
        set_fault_injection(npu.devroot, regs.FAULT_BIT_FLIP)
        dev.run(cmds, [src, dst])
        flipped = np.unpackbits(dst.view ^ src.view).sum()
        assert flipped == 1                             # silent data corruption, exactly one bit
        set_fault_injection(npu.devroot, 0)
        dev.run(cmds, [src, dst])
        assert (dst.view == 0x0F).all()


def test_reset_fails_jobs_in_flight_and_counts(fresh_npu):
    npu = fresh_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        count = dev.info()["reset_count"]
        a, b = dev.alloc_mem(64 << 20), dev.alloc_mem(64 << 20)
        cmds = dev.command_buffer()
        for _ in range(30):
            cmds.add("DMA_COPY", src=a.address, dst=b.address, length=64 << 20)
        set_fault_injection(npu.devroot, regs.FAULT_HANG)          # on the chip until the reset
        fence = dev.submit(cmds, [a, b])
        wait_until_hung(npu.devroot)
        set_fault_injection(npu.devroot, 0)
        other = session.open(0)
        assert other.reset() == count + 1
        with pytest.raises(libnpu.JobError) as exc:
            fence.wait(timeout=60)
        assert exc.value.errno == errno.EIO
        assert dev.info()["reset_count"] == count + 1
        dev.run(None)


def test_reset_is_refused_to_non_root(fresh_npu):
    npu = fresh_npu
    os.chmod(npu.node, 0o666)
    open_to_others(npu.devroot)                     # let 'nobody' reach the node inside pytest's tmp dirs
    code = textwrap.dedent(f"""
        import os, errno, libnpu
        os.setgid(65534); os.setuid(65534)
        with libnpu.initialize({str(npu.devroot)!r}) as s:
            d = s.open(0)
            try:
                d.reset()
            except libnpu.NpuError as e:
                print(errno.errorcode[e.errno])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "EPERM", out.stderr


def test_chip_death_is_recovered(fresh_npu):
    npu = fresh_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        count = dev.info()["reset_count"]
        chip = subprocess.run(["pgrep", "-f", f"firmware_sim --bus {paths.bus_dir(npu.devroot, 0)}"],
                              capture_output=True, text=True).stdout.split()
        assert chip
        for pid in chip:
            os.kill(int(pid), signal.SIGKILL)
        assert wait_until(lambda: dev.info()["reset_count"] == count + 1)
        dev.run(None)
        nop = dev.command_buffer()
        nop.add("NOP")
        dev.run(nop)


def test_a_context_cannot_queue_unbounded_jobs(fast_watchdog_npu):
    """With both cores hung, jobs pile up; past the per-context limit SUBMIT says EAGAIN,
    another context is unaffected, and everything drains once the fault is gone."""
    npu = fast_watchdog_npu
    with libnpu.initialize(npu.devroot) as session:
        dev, other = session.open(0), session.open(0)
        set_fault_injection(npu.devroot, regs.FAULT_HANG)
        fences = []
        with pytest.raises(libnpu.NpuError) as exc:
            for _ in range(5000):
                fences.append(dev.submit(None))
        assert exc.value.errno == errno.EAGAIN
        assert len(fences) >= 4096               # (a few hung jobs were retired by the watchdog meanwhile)
        late = other.submit(None)                  # the limit is per context
        set_fault_injection(npu.devroot, 0)
        for i in range(0, len(fences), 64):
            dev.wait(fences[i:i + 64], timeout=60)
        other.wait([late], timeout=60)
        assert dev.stats()["jobs_queued"] == 0
        dev.run(None)


# ---- a job's timeout counts the chip's time, its core's CPU time (issue 26) ----

JOB_TIMEOUT_MS = 400      # the jobs' own timeout (SUBMIT's), on the module's device
COPY_BYTES = 8 << 20
COPIES = 40        # 320 MiB copied: ~100-200 ms of a core's CPU, well under JOB_TIMEOUT_MS


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


def test_a_job_whose_core_gets_no_cpu_past_its_timeout_completes(npu):
    """The core's process is stopped while it runs the job until more than the timeout has
    passed on the wall clock: the job then completes (it failed with ETIMEDOUT when the
    watchdog timed jobs on the wall clock; issue 26)."""
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        cmds, (src, dst) = copy_job(dev)
        for _ in range(20):          # until the cores are stopped while the job is their current one
            fence = dev.submit(cmds, [src, dst], timeout_ms=JOB_TIMEOUT_MS)
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
                        return (time.monotonic_ns() - started > 2 * JOB_TIMEOUT_MS * 1_000_000
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


def test_a_job_that_burns_its_timeout_of_cpu_still_times_out(npu):
    """The chip's time is its cores' CPU time: a job that uses its timeout of it fails."""
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        cmds, buffers = copy_job(dev, copies=4000)       # seconds of CPU
        restarts = sum(core_registers(npu.devroot, regs.CORE_RESTARTS))
        with pytest.raises(libnpu.JobError) as late:
            dev.run(cmds, buffers, timeout_ms=50)
        assert late.value.errno == errno.ETIMEDOUT
        assert wait_until(lambda: sum(core_registers(npu.devroot, regs.CORE_RESTARTS)) == restarts + 1)
        dev.run(None)                                    # the restarted core serves again
