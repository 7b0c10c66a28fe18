"""The timeout a model's job asks for: from the job's predicted work, within the device's cap.

A model's job went with timeout_ms 0, the device's default (DEFAULT_JOB_TIMEOUT_MS, 5 s of
its core's CPU time): a large model whose job needed longer failed with ETIMEDOUT however
well it ran. The compiler records each task's predicted work (``Loadable.tasks``: ``macs``
and ``bytes_moved``); :func:`npu_hw.regs.work_timeout_ms` turns a job's sums and its number
of tasks (each costs a first run its decoding, whatever its work) into the timeout it asks
for (0, the default, when that covers it), never above the device's MAX_JOB_TIMEOUT_MS, so
a job really stuck still times out, at the cap at worst. The rule and
its figures: docs/runtime.md, "How a model job's timeout is chosen".
"""
from __future__ import annotations

from dataclasses import dataclass

from kmd_fuse.uapi import NpuError
from libnpu.loadable import Loadable
from libnpu.portability import Device
from npu_hw import regs

__all__ = ["TimeoutLimits", "device_limits", "job_timeout_ms"]


@dataclass(frozen=True)
class TimeoutLimits:
    """A device's job timeouts (GET_PARAM), in ms of its chip's time."""
    default_ms: int             # DEFAULT_JOB_TIMEOUT_MS: a job that asks for none
    cap_ms: int                 # MAX_JOB_TIMEOUT_MS: the most a job may ask for


def device_limits(device: Device) -> TimeoutLimits | None:
    """``device``'s job timeouts; None from a driver that does not report them (its
    default then for every job, as before)."""
    try:
        return TimeoutLimits(device.param("DEFAULT_JOB_TIMEOUT_MS"), device.param("MAX_JOB_TIMEOUT_MS"))
    except NpuError:
        return None


def job_timeout_ms(loadable: Loadable, tasks: range | None, limits: TimeoutLimits | None) -> int:
    """The timeout_ms of the job running ``tasks`` of ``loadable`` (None: all of them): 0 (the
    device's default) unless their predicted work needs longer (``regs.work_timeout_ms``)."""
    if limits is None:
        return 0
    chosen = loadable.tasks if tasks is None else loadable.tasks[tasks.start:tasks.stop]
    return regs.work_timeout_ms(sum(t.macs for t in chosen), sum(t.bytes_moved for t in chosen), len(chosen),
                                limits.default_ms, limits.cap_ms)
