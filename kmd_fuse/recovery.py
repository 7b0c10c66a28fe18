"""Reset and recovery: a full reset on request, a chip that died, a core the chip
restarted, a chip whose own watchdog is stuck.

Every way ends the same (``_after_reset``): the reset is counted and announced
(reset hooks: a "change" uevent), jobs that were on the chip fail with EIO, and
queued jobs run on the chip that came back.
"""
from __future__ import annotations

import errno
import logging
import time

import trio

from kmd_fuse import jobs
from kmd_fuse.device import Device
from kmd_fuse.errors import KmdError
from npu_hw import regs

log = logging.getLogger("kmd_fuse.recovery")

RESET_TIMEOUT_S = 10.0
STUCK_JOB_GRACE_MS = 1000  # past the chip's stuck-core limit (STUCK_FACTOR timeouts) and this: its watchdog is stuck


async def reset(device: Device, reason: str) -> None:
    """Full device reset: jobs on the chip fail with EIO, queued jobs run afterwards."""
    if device.resetting:
        raise KmdError(errno.EBUSY, "a reset is already in progress")
    device.resetting = True
    device.scheduler.halted = True
    device.queues.disable_all(-errno.ECANCELED)    # clients see why their queue stopped
    try:
        request = device.hw.request_reset()
        deadline = time.monotonic() + RESET_TIMEOUT_S
        while not device.hw.reset_done(request):
            if time.monotonic() > deadline:
                raise KmdError(errno.EIO, "the chip did not acknowledge the reset")
            await trio.sleep(0.005)
        _after_reset(device, reason)
    finally:
        device.resetting = False
        device.scheduler.halted = False
        device.pump()


def _count_reset(device: Device, reason: str) -> None:
    device.reset_count += 1
    log.warning("device reset #%d (%s)", device.reset_count, reason)
    for hook in device.reset_hooks:
        hook(device.reset_count)


def _after_reset(device: Device, reason: str) -> None:
    device.hw.after_reset()
    device.queues.after_reset()
    _count_reset(device, reason)
    touched = set()
    for job in device.scheduler.abort_in_flight():
        job.status = -errno.EIO
        jobs.finish(device, job)
        touched.add(job.ctx)
    jobs.settle(device, touched)


def account_core_restarts(device: Device) -> None:
    """The chip restarted a core that died or hung: each restart is a reset (counted and
    announced with a "change" uevent); the job it cost has already failed through the
    completion queue, and the core's queued jobs run on the new core."""
    if device.resetting:
        return
    for _ in range(device.hw.core_restarts()):
        _count_reset(device, "the chip restarted a core that died or hung")


def check_chip_watchdog(device: Device) -> None:
    """The driver's own safety net, as drm_sched's timeout handler is one: a job still on
    a core far past its timeout means the chip's watchdog itself is stuck (on the wall
    clock, past the chip's own limit for a core that gets no CPU, ``regs.STUCK_FACTOR``
    timeouts: the chip counts a timeout in its core's CPU time).  Kill the chip; the
    housekeeping poll then restarts it (jobs on it fail with EIO, queued ones run after)."""
    for job_id, elapsed_ns in device.hw.running():
        job = device.scheduler.in_flight.get(job_id)
        if job is not None and elapsed_ns > (regs.STUCK_FACTOR * job.timeout_ms + STUCK_JOB_GRACE_MS) * 1_000_000:
            log.error("job %d has run %.1f s, its timeout is %d ms: the chip's watchdog is stuck, "
                      "restarting the chip", job_id, elapsed_ns / 1e9, job.timeout_ms)
            device.hw.process.kill()
            return


async def recover_chip(device: Device) -> None:
    """Restart a chip that died; jobs that were on it fail with EIO."""
    device.resetting = True
    device.scheduler.halted = True
    device.queues.disable_all(-errno.ECANCELED)
    try:
        device.hw.restart_chip()
        deadline = time.monotonic() + RESET_TIMEOUT_S
        while not device.hw.ready():
            if time.monotonic() > deadline or device.hw.process.poll() is not None:
                log.error("the chip did not come back; jobs stay queued")
                return
            await trio.sleep(0.01)
        _after_reset(device, "chip died")
    finally:
        device.resetting = False
        device.scheduler.halted = False
        device.pump()
