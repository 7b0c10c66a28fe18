"""Job priorities against a hostile client (docs/security.md): any member of the node's
group may submit at NPU_PRIO_HIGH (MODEL_PRIORITY HIGH), so a flood of high-priority jobs
must not starve other contexts' normal jobs until the flood ends."""
from __future__ import annotations

import pytest

import libnpu
from libnpu.portability import PRIO_HIGH, PRIO_NORMAL
from tests.support.device import start_npu, stop_npu

FLOOD = 1600   # the rings take 255 a core at once; the rest waits in the driver's queue


@pytest.fixture(scope="module")
def paced(tmp_path_factory):
    # Paced, so the flood costs the host sleeping cores rather than CPU.
    mounted = start_npu(tmp_path_factory.mktemp("prio"), extra=("--profile", "edge", "--pacing"))
    yield mounted
    stop_npu(mounted)


def _copy(dev, nbytes: int = 1 << 20):
    src, dst = dev.alloc_mem(nbytes), dev.alloc_mem(nbytes)
    cmds = dev.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=nbytes)   # ~5 ms on the paced edge chip
    return cmds, [src, dst]


def test_a_flood_of_high_priority_jobs_does_not_starve_a_normal_one(paced):
    with libnpu.initialize(paced.devroot) as session:
        flooder, victim = session.open(0), session.open(0)
        flood_cmds, flood_buffers = _copy(flooder)
        job, job_buffers = _copy(victim)
        prepared = flooder.prepare_submit(flood_cmds, flood_buffers, priority=PRIO_HIGH)
        fences = [flooder.submit_prepared(prepared) for _ in range(FLOOD)]
        victim.run(job, job_buffers, priority=PRIO_NORMAL)
        left = flooder.stats()["jobs_submitted"] - flooder.stats()["jobs_completed"]
        # ~4 s of flood on two cores: the normal job used to wait for all of it (left ~0);
        # now it waits STARVATION_NS in the queue, then behind the jobs already on a ring.
        assert left > FLOOD // 3, f"the normal job ran after {FLOOD - left} of {FLOOD} high-priority jobs"
        for fence in fences:
            fence.wait()
        flooder.close()
        victim.close()


def test_one_context_cannot_fill_the_rings_ahead_of_everyone(paced):
    # The driver used to hand the chip up to 255 jobs a core of whoever submitted first;
    # a context that arrived next waited behind all of them whatever the round-robin.
    # Counted from the victim's submission, not from the flood's: on a loaded machine the
    # flood's own submission lets many of its jobs finish first, which is not the point.
    flood, old_ring = 600, 255
    with libnpu.initialize(paced.devroot) as session:
        flooder, victim = session.open(0), session.open(0)
        flood_cmds, flood_buffers = _copy(flooder, 4 << 20)   # ~20 ms each: ~6 s of flood on two cores
        job, job_buffers = _copy(victim)
        prepared = flooder.prepare_submit(flood_cmds, flood_buffers)
        for _ in range(flood):
            flooder.submit_prepared(prepared)
        done_before = flooder.stats()["jobs_completed"]
        victim.run(job, job_buffers)
        ran = flooder.stats()["jobs_completed"] - done_before
        assert flood - done_before > old_ring, f"the flood ended before the test began ({done_before} done)"
        # now: what the flooder may hold on the rings (RING_JOBS_PER_CORE a core) and what ran
        # between the two calls above; before: every ring full of the flood, 255 a core
        assert ran < old_ring, f"the second context's job ran after {ran} more of the first's {flood}"
        victim.close()
        flooder.close()     # its queued jobs are dropped (those on a ring run to completion)
