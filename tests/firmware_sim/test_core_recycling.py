"""A core that grew retires when its last context is gone and the chip starts a fresh one
(issue 15: memory back to the idle figure), without losing, failing or repeating a job.

The policy is tested on its own; on a device, ``NPU_CORE_RECYCLE_KB=0`` (inherited by the
daemon and its chip) makes every core that ends up empty after a context's close retire,
so each close replaces the cores while other jobs keep coming."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest

import libnpu
from firmware_sim import chip as chip_top
from firmware_sim.recycling import Recycling
from firmware_sim.timing import HardwareProfile
from kmd_fuse import paths
from npu_hw import memory, regs, ring
from tests.support.device import start_npu, stop_npu, wait_for, wait_until
from tests.support.model_builders import small_cnn

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)


def test_a_core_retires_only_after_a_close_left_it_empty_and_grown() -> None:
    recycling = Recycling(0)
    recycling.started()
    assert not recycling.due(holds_anything=False)          # no context closed since the last look
    recycling.context_closed()
    assert not recycling.due(holds_anything=True)           # another context's state is still there
    assert recycling.due(holds_anything=False)              # the close stays pending until the core is empty
    assert not recycling.due(holds_anything=False)          # asked once per close
    recycling.context_closed()
    assert recycling.due(holds_anything=False)
    never, huge = Recycling(-1), Recycling(1 << 30)
    for policy in (never, huge):
        policy.started()
        policy.context_closed()
        assert not policy.due(holds_anything=False)


# ---- the hand-over, driven through the chip's own watchdog on a one-core bus ----

ENTRIES = 8
BANK = regs.core_bank(0)


@pytest.fixture
def one_core(tmp_path):
    """A one-core chip (recycling on) whose core and successors are real forked processes."""
    for path, size in ((memory.regs_path(tmp_path), regs.REGS_SIZE),
                       (memory.ring_path(tmp_path, 0), ENTRIES * ring.RING_ENTRY.itemsize),
                       (memory.cq_path(tmp_path, 0), ENTRIES * ring.COMPLETION.itemsize)):
        path.write_bytes(bytes(size))
    doorbell = os.eventfd(0, os.EFD_CLOEXEC)
    irq = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    top = chip_top.Chip(tmp_path, [doorbell], irq, HardwareProfile(), ENTRIES, recycle_kb=0)
    top.regs.write32(regs.RING_ENTRIES, ENTRIES)
    top.start_core(0)
    try:
        yield top
    finally:
        top.stop_core(0)
        os.close(doorbell)
        os.close(irq)


def _watch_until(top: chip_top.Chip, predicate, what: str) -> None:
    """Run the chip's watchdog, as its main loop does, until ``predicate`` holds."""
    wait_for(lambda: (top.watchdog(), predicate())[1], what)


def _run_nop(top: chip_top.Chip, job_id: int) -> int:
    """Queue an empty job as the driver does, ring the doorbell; its completion status."""
    tail = top.regs.read32(BANK + regs.RING_TAIL)
    ring.RING_ENTRY_STRUCT.pack_into(top.rings[0], tail * ring.RING_ENTRY.itemsize, ring.OP_JOB, 1, job_id,
                                     0, 0, 0, 0, 0)
    top.regs.write32(BANK + regs.RING_TAIL, ring.ring_next(tail, ENTRIES))
    os.eventfd_write(top.doorbell_fds[0], 1)
    _watch_until(top, lambda: top.regs.read32(BANK + regs.CQ_TAIL) != tail, "the job's completion")
    posted, status = ring.COMPLETION_STRUCT.unpack_from(top.cqs[0], tail * ring.COMPLETION.itemsize)[:2]
    assert posted == job_id
    top.regs.write32(BANK + regs.CQ_HEAD, ring.ring_next(tail, ENTRIES))
    return status


def test_a_ready_successor_takes_over_once_the_old_core_is_gone(one_core):
    top = one_core
    assert _run_nop(top, 1) == 0
    old = top.pids[0]
    top.start_successor(0)                      # what a core's request makes the watchdog do
    successor = top.successors[0]
    assert successor is not None
    # It warms up, announces itself; the old core exits.
    _watch_until(top, lambda: top.pids[0] != old, "the hand-over to the successor")
    assert top.pids[0] == successor[0] and top.successors[0] is None
    assert _run_nop(top, 2) == 0                 # the successor serves the ring
    assert top.regs.read32(BANK + regs.CORE_RESTARTS) == 0
    assert top.regs.read32(BANK + regs.RING_HEAD) == top.regs.read32(BANK + regs.RING_TAIL)


def test_a_successor_that_dies_warming_up_leaves_the_old_core_serving(one_core):
    top = one_core
    old = top.pids[0]
    top.start_successor(0)
    successor = top.successors[0]
    assert successor is not None
    os.kill(successor[0], signal.SIGKILL)
    _watch_until(top, lambda: top.successors[0] is None, "the dead successor forgotten")
    assert top.pids[0] == old
    assert _run_nop(top, 3) == 0
    assert top.pids[0] == old and top.regs.read32(BANK + regs.CORE_RESTARTS) == 0


def test_an_old_core_dying_before_the_hand_over_hands_over_to_its_successor(one_core):
    """The watchdog recovers the dead core (a restart, counted) and starts the successor
    in its place instead of forking yet another core."""
    top = one_core
    top.start_successor(0)
    successor = top.successors[0]
    assert successor is not None
    os.kill(top.pids[0], signal.SIGKILL)
    _watch_until(top, lambda: top.pids[0] == successor[0], "the successor in the dead core's place")
    assert top.regs.read32(BANK + regs.CORE_RESTARTS) == 1
    assert _run_nop(top, 4) == 0
    assert top.pids[0] == successor[0]           # it did not exit at its first sleep


def _core_pids(devroot: Path) -> set[int]:
    """The chip's core processes: the children of its top-level process."""
    bus = paths.bus_dir(devroot, 0)
    matched = {int(p) for p in subprocess.run(["pgrep", "-f", f"firmware_sim --bus {bus}"],
                                              capture_output=True, text=True).stdout.split()}
    cores = set()
    for pid in matched:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) in matched and stat.rsplit(")", 1)[1].split()[0] != "Z":
            cores.add(pid)
    return cores


@pytest.fixture
def recycling_npu(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_CORE_RECYCLE_KB", "0")
    mounted = start_npu(tmp_path)
    yield mounted
    stop_npu(mounted)


@pytest.fixture
def model_path(tmp_path) -> Path:
    path = tmp_path / "small_cnn.onnx"
    onnx.save(small_cnn(), path)
    return path


def _feeds() -> list[np.ndarray]:
    return [np.random.default_rng(5).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)]


def test_closing_the_last_context_replaces_the_cores_quietly(recycling_npu, model_path):
    npu = recycling_npu
    with libnpu.initialize(npu.devroot) as session:
        info = session.open(0).info
        resets = info()["reset_count"]
        assert wait_until(lambda: len(_core_pids(npu.devroot)) == 2)
        before = _core_pids(npu.devroot)
        with libnpu.load(model_path, devroot=npu.devroot) as model:
            [expected] = model.infer(_feeds())
        # The session's own context never ran a job with a command buffer: the cores hold nothing.
        assert wait_until(lambda: len(_core_pids(npu.devroot) - before) == 2), (before, _core_pids(npu.devroot))
        assert wait_until(lambda: len(_core_pids(npu.devroot)) == 2)
        assert info()["reset_count"] == resets            # a retirement is no restart: nothing announced
        with libnpu.load(model_path, devroot=npu.devroot) as model:
            [again] = model.infer(_feeds())
        assert again.tobytes() == expected.tobytes()


def test_jobs_that_come_while_the_cores_retire_all_run_once(recycling_npu, model_path):
    """NOPs keep coming from another context (they bind no address space, so the cores
    still retire) while models are loaded, run and closed back to back: each close
    retires the cores as the next model's queue and jobs arrive."""
    npu = recycling_npu
    stop, failures, done = threading.Event(), [], [0]

    def submit_nops() -> None:
        with libnpu.initialize(npu.devroot) as session:
            dev = session.open(0)
            while not stop.is_set():
                fences = [dev.submit(None) for _ in range(4)]
                dev.wait(fences, timeout=60)
                failures.extend(f.status for f in fences if f.status)
                done[0] += len(fences)

    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        resets = dev.info()["reset_count"]
        first = _core_pids(npu.devroot)
        nops = threading.Thread(target=submit_nops)
        nops.start()
        try:
            outputs = []
            for _ in range(6):
                with libnpu.load(model_path, devroot=npu.devroot) as model:
                    outputs += [out.tobytes() for _ in range(3) for out in model.infer(_feeds())]
        finally:
            stop.set()
            nops.join(120)
        assert not nops.is_alive()
        assert failures == [] and done[0] > 0
        assert len(set(outputs)) == 1
        assert not first & _core_pids(npu.devroot)        # the cores were replaced meanwhile
        assert dev.info()["reset_count"] == resets


def test_recycling_off_keeps_the_cores(tmp_path, monkeypatch, model_path):
    monkeypatch.setenv("NPU_CORE_RECYCLE_KB", "-1")
    npu = start_npu(tmp_path)
    try:
        assert wait_until(lambda: len(_core_pids(npu.devroot)) == 2)
        before = _core_pids(npu.devroot)
        with libnpu.load(model_path, devroot=npu.devroot) as model:
            model.infer(_feeds())
        assert not wait_until(lambda: _core_pids(npu.devroot) != before, 1.0)
    finally:
        stop_npu(npu)
