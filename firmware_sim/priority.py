"""The core processes' scheduling priority: a nice value below the clients', where the host lets the chip take it.

A core is emulated hardware: while its clients' jobs keep coming, its poll and its jobs are
what every client waits on, and on a host with fewer CPUs than clients + cores a client that
preempts the core delays everyone's next job (issue 27: four NOP clients on 2 vCPUs).
So each core process asks for ``CORE_NICE`` when it starts (``raise_core``): an ordinary
time-sharing priority (SCHED_OTHER), never a real-time class, so the host's scheduler still
gives every other task its weighted share (a nice -2 task weighs about 1.5x a nice-0 one:
it gets at most 3/5 of a CPU it shares with one of them) and a core that has nothing to do
sleeps (its idle poll is bounded: ``idle_poll``). docs/security.md, *The chip's core
priority*, says why that is bounded. Measured against -5 and 0 (``benchmarks.nop_scaling
--variants unraised,nice --core-nice ...``, docs/hardware.md, *The cores' priority*): -2 kept
most of -5's rate and CPU per job for four NOP clients and less of its unfairness; with shared
service (branch nop6: one core polls for every queue) -2 lost to 0 at load average 3-4 on rate
and CPU per job, so ``CORE_NICE`` is 0 (nothing is raised) and ``NPU_CORE_NICE=-2`` asks for it.

Where the kernel groups tasks by session (``sched_autogroup``, on by default on most
desktop kernels and on this VM), a process's nice weighs only against its own session's
processes: the driver's session holds its daemon and the chip, the clients are in theirs,
and each session gets an equal share whatever its processes' nice. So a core first becomes
a session of its own (``setsid``: nothing else of the chip uses its session or process
group; it still dies with the chip, PR_SET_PDEATHSIG) and gives that group the same nice
(``/proc/self/autogroup``).

Only the privileged may lower a nice value (CAP_SYS_NICE, or as far as RLIMIT_NICE allows):
a rootless driver's cores keep the nice they were started with, and the chip serves as
before. ``NPU_CORE_NICE`` in the chip's environment, or ``python -m firmware_sim
--core-nice``, sets another value (0: the clients' priority).
"""
from __future__ import annotations

import os
import resource
from pathlib import Path

__all__ = ["CORE_NICE", "ENVIRONMENT", "default_core_nice", "raise_core", "autogroup_nice"]

CORE_NICE = 0          # by default the clients' priority: with shared service the raise no longer paid (below)
RAISED_NICE = -2       # branch nop5's default, what NPU_CORE_NICE=-2 asks (benchmarks.nop_scaling --variants raised)
ENVIRONMENT = "NPU_CORE_NICE"
AUTOGROUP_ENABLED = Path("/proc/sys/kernel/sched_autogroup_enabled")


def default_core_nice() -> int:
    """``NPU_CORE_NICE`` if set, else CORE_NICE."""
    value = os.environ.get(ENVIRONMENT, "")
    try:
        return int(value) if value.strip() else CORE_NICE
    except ValueError:
        raise SystemExit(f"{ENVIRONMENT}={value!r}: an integer (a nice value, -20..19) expected") from None


def raise_core(nice: int) -> int:
    """Make this process's nice ``nice`` if that raises it, or as close as the host permits
    (never lowers it: a chip started at a higher priority keeps it); once raised, in a session
    of its own whose autogroup takes the same nice where the kernel groups by session. The
    nice it runs at."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    floor = _rlimit_floor()
    for target in (nice, None if floor is None else max(nice, floor)):   # all of it, else what RLIMIT_NICE allows
        if target is None or target >= current:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, 0, target)
        except PermissionError:     # rootless without RLIMIT_NICE: it keeps what it has, where it is
            continue
        if _autogroups():
            os.setsid()             # a group of its own, not a share of the driver's session's
            try:
                Path("/proc/self/autogroup").write_text(str(target))
            except OSError:         # permitted for the process, so for its group; kept as it is if not
                pass
        break
    return os.getpriority(os.PRIO_PROCESS, 0)


def _rlimit_floor() -> int | None:
    """The lowest nice RLIMIT_NICE lets an unprivileged process take (its soft limit r means
    20 - r), or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return None if soft == resource.RLIM_INFINITY else 20 - soft


def _autogroups() -> bool:
    """Whether the kernel schedules sessions as groups (sched_autogroup)."""
    try:
        return AUTOGROUP_ENABLED.read_text().strip() == "1" and Path("/proc/self/autogroup").exists()
    except OSError:
        return False


def autogroup_nice(pid: int) -> int | None:
    """The nice of ``pid``'s autogroup ("/autogroup-N nice V"), None without one."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None
