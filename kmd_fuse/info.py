"""Device facts as the driver reports them: GET_INFO, GET_STATS and GET_PARAM.

GET_INFO's struct is frozen in content (new fields only ever appended); a new fact
is a new NPU_PARAM_* id in the header and one line in ``PARAMS`` here (the import
fails if the header names a parameter this table lacks).
"""
from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable

from kmd_fuse import uapi
from kmd_fuse.context import MAX_OUTSTANDING, Context
from kmd_fuse.device import Device
from kmd_fuse.errors import KmdError
from npu_hw import iommu, queues, regs

MODEL_NAME = "npu-emu"


def fill_info(device: Device, ctx: Context, info) -> None:
    """A struct npu_get_info for ``ctx`` (context_id 0 for a caller without one)."""
    info.abi_version = uapi.NPU_ABI_VERSION
    info.device_id = device.index
    info.hw_version = device.hw.regs.read32(regs.HW_VERSION)
    info.num_cores = device.hw.num_cores
    info.clock_mhz = device.hw.clock_mhz
    info.ring_entries = device.hw.entries
    info.page_size = iommu.PAGE_SIZE
    info.num_contexts = len(device.contexts)
    info.memory_total = device.memory.total
    info.memory_used = device.memory.used
    info.context_id = ctx.context_id
    queue_done, queue_failed = device.queues.device_counters()
    info.jobs_completed = device.jobs_completed + queue_done - queue_failed
    info.jobs_failed = device.jobs_failed + queue_failed
    info.busy_time_ns = device.hw.busy_ns()
    info.reset_count = device.reset_count
    info.model = MODEL_NAME.encode()


def context_busy_ns(device: Device, ctx: Context) -> int:
    """Chip time of the context's jobs, counting the ones running now (never decreases)."""
    total = ctx.stats.busy_time_ns + device.queues.context_counters(ctx).busy_ns
    for job_id, elapsed in device.hw.running():
        job = device.scheduler.in_flight.get(job_id)
        if job is not None and job.ctx is ctx:
            total += elapsed
    ctx.stats.busy_reported = max(ctx.stats.busy_reported, total)
    return ctx.stats.busy_reported


def fill_stats(device: Device, ctx: Context, stats) -> None:
    """A struct npu_get_stats for ``ctx``."""
    s = ctx.stats
    stats.context_id = ctx.context_id
    stats.memory_allocated = ctx.memory_allocated
    stats.memory_peak = s.memory_peak
    stats.buffers = len(ctx.buffers)
    queued = device.queues.context_counters(ctx)      # user-queue jobs: counted by the chip
    stats.jobs_submitted = s.jobs_submitted + queued.done
    stats.jobs_completed = s.jobs_completed + queued.done - queued.failed
    stats.jobs_failed = s.jobs_failed + queued.failed
    stats.busy_time_ns = context_busy_ns(device, ctx)
    stats.jobs_queued = sum(1 for j in ctx.pending.values() if j.core < 0)
    stats.jobs_running = sum(1 for j in ctx.pending.values() if j.core >= 0)


def device_uuid(device: Device) -> uuid.UUID:
    """The device's identity: the same for the same device (machine, devroot, index)
    across restarts of the driver, different for any other."""
    try:
        with open("/etc/machine-id", encoding="ascii") as f:
            machine = f.read().strip()
    except OSError:
        machine = os.uname().nodename
    return uuid.uuid5(uuid.NAMESPACE_URL, f"npu-emu://{machine}{os.path.realpath(device.hw.bus)}")


def _uuid_half(device: Device, high: bool) -> int:
    raw = device_uuid(device).bytes
    return int.from_bytes(raw[8:] if high else raw[:8], "little")


PARAMS: dict[str, Callable[[Device, Context], int]] = {
    "ABI_VERSION": lambda device, ctx: uapi.NPU_ABI_VERSION,
    "DEVICE_ID": lambda device, ctx: device.index,
    "HW_VERSION": lambda device, ctx: device.hw.regs.read32(regs.HW_VERSION),
    "NUM_CORES": lambda device, ctx: device.hw.num_cores,
    "CLOCK_MHZ": lambda device, ctx: device.hw.clock_mhz,
    "RING_ENTRIES": lambda device, ctx: device.hw.entries,
    "PAGE_SIZE": lambda device, ctx: iommu.PAGE_SIZE,
    "MEMORY_TOTAL": lambda device, ctx: device.memory.total,
    "MEMORY_USED": lambda device, ctx: device.memory.used,
    "RESET_COUNT": lambda device, ctx: device.reset_count,
    "DEFAULT_JOB_TIMEOUT_MS": lambda device, ctx: regs.job_timeout_ms(0, device.hw.config.watchdog_ms,
                                                                      device.hw.config.max_job_timeout_ms),
    "MAX_JOB_TIMEOUT_MS": lambda device, ctx: device.hw.config.max_job_timeout_ms,
    "MAX_SUBMIT_BOS": lambda device, ctx: uapi.NPU_MAX_SUBMIT_BOS,
    "MAX_WAIT_FENCES": lambda device, ctx: uapi.NPU_MAX_WAIT_FENCES,
    "MAX_OUTSTANDING": lambda device, ctx: MAX_OUTSTANDING,
    "MAX_BATCH_JOBS": lambda device, ctx: uapi.NPU_MAX_BATCH_JOBS,
    "PROFILE": lambda device, ctx: device.hw.regs.read32(regs.PROFILE_ID),
    "MACS_PER_CYCLE": lambda device, ctx: device.hw.regs.read32(regs.MACS_PER_CYCLE),
    "DMA_BYTES_PER_CYCLE": lambda device, ctx: device.hw.regs.read32(regs.DMA_BYTES_PER_CYCLE),
    "SRAM_BYTES": lambda device, ctx: device.hw.regs.read32(regs.SRAM_KB) << 10,
    "TASK_OVERHEAD_CYCLES": lambda device, ctx: device.hw.regs.read32(regs.TASK_OVERHEAD_CYCLES),
    "PACING": lambda device, ctx: int(bool(device.hw.regs.read32(regs.PACING) & regs.PACING_ON)),
    "UUID_LO": lambda device, ctx: _uuid_half(device, high=False),
    "UUID_HI": lambda device, ctx: _uuid_half(device, high=True),
    "MAX_QUEUES_PER_CONTEXT": lambda device, ctx: device.quotas.limits.max_queues_per_context,
    "QUEUE_SLOTS": lambda device, ctx: queues.QUEUE_SLOTS,
    "QUEUE_WAKEUPS": lambda device, ctx: queues.WAKEUPS if queues.futex_supported() else queues.WAIT_LINE,
}
if set(PARAMS) != set(uapi.PARAMS.values()):
    raise ImportError(f"info.PARAMS and npu_uapi.h's NPU_PARAM_* differ: "
                      f"{sorted(set(PARAMS) ^ set(uapi.PARAMS.values()))}")


def get_param(device: Device, ctx: Context, param: int) -> int:
    """The value of parameter ``param`` (an NPU_PARAM_* id); EINVAL for an id this driver lacks."""
    name = uapi.PARAMS.get(param)
    if name is None:
        raise KmdError(errno.EINVAL, f"unknown parameter {param} (this driver knows 0..{max(uapi.PARAMS)})")
    return PARAMS[name](device, ctx)
