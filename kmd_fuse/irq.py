"""The device's interrupt handler and its housekeeping, the two tasks that run for the
daemon's lifetime (``daemon.serve`` starts them in its nursery).

Housekeeping polls every LOST_IRQ_POLL_S only while something is outstanding (a job
queued or on a ring, a user queue, the trace recording, a chip being restarted); an
idle device's daemon sleeps until the chip's process exits (its pidfd) or work comes
(``Device.kick_housekeeping``, from ``Device.pump`` and a queue's creation)."""
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


def outstanding(device: Device) -> bool:
    """Whether the housekeeping must poll: work the chip may finish without an interrupt
    (a lost one: a job; never one: a user queue's records), a trace, a chip coming back."""
    scheduler = device.scheduler
    return bool(scheduler.in_flight or scheduler.queued or scheduler.control_backlog() or device.resetting
                or device.trace.enabled or any(device.queues.slots) or device.hw.process.poll() is not None)


async def next_round(device: Device) -> None:
    """Sleep until the next housekeeping round: LOST_IRQ_POLL_S while something is
    outstanding, else until the chip exits or work comes."""
    if outstanding(device):
        # A plain timer: kicks are ignored (every submission kicks; a round per kick cost
        # each SUBMIT a housekeeping round: 200 prepared submits took 0.78 s, not 0.15).
        await trio.sleep(LOST_IRQ_POLL_S)
        return
    kicked = device.housekeeping_kick = trio.Event()     # set from now on by work coming
    chip_fd = device.hw.process_fd
    async with trio.open_nursery() as nursery:
        async def until_kicked() -> None:
            await kicked.wait()
            nursery.cancel_scope.cancel()

        async def until_chip_exits() -> None:
            await trio.lowlevel.wait_readable(chip_fd)
            nursery.cancel_scope.cancel()
        nursery.start_soon(until_kicked)
        if chip_fd >= 0:
            nursery.start_soon(until_chip_exits)


async def housekeeping(device: Device) -> None:
    """Collect completions whose interrupt was lost, notice a dead chip or a stuck watchdog."""
    while True:
        await next_round(device)
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
