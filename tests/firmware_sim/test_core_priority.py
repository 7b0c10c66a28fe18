"""The chip's core processes take a nice value below the clients' where the host permits it,
and keep what they have where it does not (firmware_sim.priority; docs/security.md, *The
chip's core priority*). Each case runs in a forked child, so the suite's own process keeps
its priority; the cores of a running device are checked in test_core_restart."""
from __future__ import annotations

import json
import os
import resource

import pytest

from firmware_sim import priority

NOBODY = 65534


def _in_child(step):
    """``step()``'s value (JSON: a tuple comes back a list), computed in a forked child (reaped before this returns)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            os.write(w, json.dumps(step()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as reader:
            out = reader.read()
    finally:
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and out, "the child failed"
    return json.loads(out)


def _unprivileged(rlimit_nice: int, nice: int) -> int:
    """raise_core(nice) as a user without CAP_SYS_NICE whose RLIMIT_NICE is ``rlimit_nice``."""
    resource.setrlimit(resource.RLIMIT_NICE, (rlimit_nice, rlimit_nice))
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    return priority.raise_core(nice)


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="changing user and raising a nice needs root")


def _raised_where() -> tuple[int, bool, int | None]:
    """raise_core(RAISED_NICE) here: the nice, whether this process leads a session of its own, its autogroup's nice."""
    nice = priority.raise_core(priority.RAISED_NICE)
    return nice, os.getsid(0) == os.getpid(), priority.autogroup_nice(os.getpid())


@root_only
def test_a_privileged_core_takes_the_nice_it_asks_in_a_group_of_its_own():
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert own > priority.RAISED_NICE, "the suite runs at a nice the cores raise"
    nice, session_leader, group_nice = _in_child(_raised_where)
    assert nice == priority.RAISED_NICE
    if priority.autogroup_nice(os.getpid()) is not None and priority.AUTOGROUP_ENABLED.read_text().strip() == "1":
        # sched_autogroup: a nice weighs only within the session, so the core has a session and group of its own
        assert session_leader and group_nice == priority.RAISED_NICE


def test_a_core_never_lowers_its_priority():
    def step():
        os.nice(3)
        return priority.raise_core(os.getpriority(os.PRIO_PROCESS, 0) + 2)
    assert _in_child(step) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)


@root_only
def test_an_unprivileged_core_keeps_its_nice_and_its_session():
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert _in_child(lambda: (_unprivileged(0, priority.RAISED_NICE), os.getsid(0) == os.getpid())) == [own, False]


@root_only
@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_NICE)[1] not in (resource.RLIM_INFINITY,)
                    and resource.getrlimit(resource.RLIMIT_NICE)[1] < 22,
                    reason="RLIMIT_NICE's hard limit is below 22 here (raising it needs CAP_SYS_RESOURCE)")
def test_a_rootless_core_takes_what_rlimit_nice_allows():
    # RLIMIT_NICE 22 lets an unprivileged process go down to nice -2 (20 - 22), not to -5.
    assert _in_child(lambda: (os.setpriority(os.PRIO_PROCESS, 0, 0), _unprivileged(22, -5))[1]) == -2


def test_the_environment_chooses_the_nice(monkeypatch):
    monkeypatch.setenv("NPU_CORE_NICE", "-2")
    assert priority.default_core_nice() == -2
    monkeypatch.setenv("NPU_CORE_NICE", "high")
    with pytest.raises(SystemExit, match="NPU_CORE_NICE='high': an integer"):
        priority.default_core_nice()
    monkeypatch.delenv("NPU_CORE_NICE")
    assert priority.default_core_nice() == priority.CORE_NICE == 0
