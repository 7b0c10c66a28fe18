"""The device's interrupt handler and its housekeeping poll, the two tasks that run
for the daemon's lifetime (``daemon.serve`` starts them in its nursery)."""
from __future__ import annotations

import logging
import time

import trio

from kmd_fuse import jobs, profiling, recovery
from kmd_fuse.device import Device

log = logging.getLogger("kmd_fuse.irq")

LOST_IRQ_POLL_S = 0.1      # completions are also collected this often, in case an interrupt was lost


async def serve_interrupts(device: Device) -> None:
    while True:
        await trio.lowlevel.wait_readable(device.hw.irq_fd)
        try:
            if device.trace.enabled:
                device.trace.interrupt(time.monotonic_ns())
            device.hw.ack_irq()
            jobs.service_completions(device)
            recovery.account_core_restarts(device)
        except Exception:
            log.exception("interrupt handler failed")


async def housekeeping(device: Device) -> None:
    """Collect completions whose interrupt was lost, notice a dead chip or a stuck watchdog."""
    while True:
        await trio.sleep(LOST_IRQ_POLL_S)
        try:
            if device.hw.process.poll() is not None and not device.resetting:
                log.error("chip died (status %s): restarting it", device.hw.process.returncode)
                device.spawn(recovery.recover_chip, device)
            elif not device.resetting:
                jobs.service_completions(device)
                # User-queue jobs raise no interrupt: their records (trace, GET_PROFILE) are taken here.
                if device.trace.enabled or any(device.queues.slots):
                    profiling.collect(device, [])
                recovery.account_core_restarts(device)
                recovery.check_chip_watchdog(device)
        except Exception:
            log.exception("housekeeping failed")


async def run(device: Device, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Both tasks, for the daemon's lifetime."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_interrupts, device)
        nursery.start_soon(housekeeping, device)
        task_status.started()
