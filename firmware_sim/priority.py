"""The core processes' scheduling priority: a nice value below the clients', where the host lets the chip take it.

A core is emulated hardware: while its clients' jobs keep coming, its poll and its jobs are
what every client waits on, and on a host with fewer CPUs than clients + cores a client that
preempts the core delays everyone's next job (issue 27: four NOP clients on 2 vCPUs).
So each core process asks for ``CORE_NICE`` when it starts (``raise_core``): an ordinary
time-sharing priority (SCHED_OTHER), never a real-time class, so the host's scheduler still
gives every other task its weighted share (a nice -5 task weighs about 3x a nice-0 one: it
gets at most 3/4 of a CPU it shares with one of them) and a core that has nothing to do
sleeps (its idle poll is bounded: ``idle_poll``). docs/security.md, *The chip's core
priority*, says why that is bounded.

Only the privileged may lower a nice value (CAP_SYS_NICE, or RLIMIT_NICE): a rootless
driver's cores stay at the nice they were started with, and the chip serves as before.
``NPU_CORE_NICE`` in the chip's environment, or ``python -m firmware_sim --core-nice``,
sets another value (0: the clients' priority).
"""
from __future__ import annotations

import os
import resource

__all__ = ["CORE_NICE", "default_core_nice", "raise_core"]

CORE_NICE = -5


ENVIRONMENT = "NPU_CORE_NICE"


def default_core_nice() -> int:
    """``NPU_CORE_NICE`` if set, else CORE_NICE."""
    value = os.environ.get(ENVIRONMENT, "")
    try:
        return int(value) if value.strip() else CORE_NICE
    except ValueError:
        raise SystemExit(f"{ENVIRONMENT}={value!r}: an integer (a nice value, -20..19) expected") from None


def raise_core(nice: int) -> int:
    """Make this process's nice ``nice`` if that raises it and the host permits (never lowers
    it: a chip started at a higher priority keeps it); the nice it runs at."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    floor = _rlimit_floor()
    for target in (nice, None if floor is None else max(nice, floor)):   # all of it, else what RLIMIT_NICE allows
        if target is None or target >= current:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, 0, target)
            break
        except PermissionError:     # rootless without RLIMIT_NICE: it keeps what it has
            continue
    return os.getpriority(os.PRIO_PROCESS, 0)


def _rlimit_floor() -> int | None:
    """The lowest nice RLIMIT_NICE lets an unprivileged process take (its soft limit r means
    20 - r), or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return None if soft == resource.RLIM_INFINITY else 20 - soft
