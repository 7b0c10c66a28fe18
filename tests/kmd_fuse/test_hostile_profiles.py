"""Profiling and the trace against hostile users (docs/security.md): GET_PROFILE answers
only a context's own fences, a context cannot make the driver keep unbounded profiles,
only the device's owner turns the trace on or off, and readers of the trace (anyone)
cannot make the driver hold a copy of it each."""
from __future__ import annotations

import errno
import subprocess
import sys
import time

import pytest

import libnpu
from benchmarks.scratch_device import rss_bytes
from kmd_fuse import paths, pidfile, profiling
from libnpu.tools.profile import set_tracing, trace_file
from tests.support.device import open_to_others, start_npu, stop_npu
from tests.support.shell import NOBODY, attr_dir, sh

NOPS_PER_JOB = 4000


def _profiled_nops(device, count: int = NOPS_PER_JOB):
    cmds = device.command_buffer(8 * count)
    for _ in range(count):
        cmds.add("NOP")
    return device.submit_prepared(device.prepare_submit(cmds, [], wait=True, profile=True))


def test_get_profile_of_another_contexts_fence_is_enoent(session):
    owner, other = session.open(0), session.open(0)
    fence = _profiled_nops(owner, 3)
    assert len(owner.get_profile(fence).tasks) == 3
    with pytest.raises(libnpu.NpuError) as theirs:
        other.get_profile(fence.id)
    assert theirs.value.errno in (errno.ENOENT, errno.EINVAL)
    other.close()
    owner.close()


def test_a_context_keeps_a_bounded_number_of_task_records(device):
    # 256 profiles of 4,094 tasks each were kept per context (~250 MiB of the driver's
    # memory, times the contexts a user may open): the oldest go once the context's
    # records pass PROFILE_TASKS_KEPT.
    jobs = profiling.PROFILE_TASKS_KEPT // NOPS_PER_JOB + 2
    fences = [_profiled_nops(device) for _ in range(jobs)]
    kept = []
    for fence in fences:
        try:
            kept.append(len(device.get_profile(fence).tasks))
        except libnpu.NpuError as exc:
            assert exc.errno == errno.ENOENT
            kept.append(None)
    assert kept[-1] == NOPS_PER_JOB, kept
    assert kept[0] is None, kept
    assert sum(k or 0 for k in kept) <= profiling.PROFILE_TASKS_KEPT, kept


def test_a_user_keeps_a_bounded_number_of_task_records_across_contexts(session):
    """The per-context bound times the contexts a user may open (256) let one user make
    the driver keep ~1 GB of profiles (4 MB a context, measured): the user's records
    together stay within PROFILE_TASKS_PER_USER, the oldest going first, each context's
    newest profile kept."""
    per_context = profiling.PROFILE_TASKS_KEPT // NOPS_PER_JOB
    contexts = profiling.PROFILE_TASKS_PER_USER // (per_context * NOPS_PER_JOB) + 2
    devices = [session.open(0) for _ in range(contexts)]
    fences = {dev: [_profiled_nops(dev) for _ in range(per_context)] for dev in devices}
    kept = 0
    for dev, mine in fences.items():
        for fence in mine:
            try:
                kept += len(dev.get_profile(fence).tasks)
            except libnpu.NpuError as exc:
                assert exc.errno == errno.ENOENT
    assert kept <= profiling.PROFILE_TASKS_PER_USER, kept
    last = devices[-1]
    assert len(last.get_profile(fences[last][-1]).tasks) == NOPS_PER_JOB
    for dev in devices:
        dev.close()


def test_only_the_owner_turns_the_trace_on_or_off(npu):
    open_to_others(attr_dir(npu).parent)
    for value in ("1", "0"):
        refused = sh('echo "$V" > "$T"', V=value, T=str(trace_file(npu.devroot)), uid=NOBODY, check=False)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr
    assert '"recording":false' in trace_file(npu.devroot).read_text().splitlines()[0]


HOLD_READERS = """
import errno, os, sys
fds = []
try:
    for _ in range(64):
        fds.append(os.open(sys.argv[1], os.O_RDONLY))
        os.read(fds[-1], 1)   # the handle has its text made now
except OSError as exc:
    assert exc.errno == errno.EMFILE, exc
print(len(fds), flush=True)
sys.stdin.read()              # hold them until the test is done
"""


def test_readers_of_the_trace_share_one_rendering(npu, session):
    # Anyone may read the trace. Each open handle used to render every event into a text
    # of its own (~150 bytes an event, up to 200,000 events: ~30 MiB a handle, held while
    # open): a user without access to the node could make the driver hold gigabytes, and
    # spend seconds of its only thread per open. Now one shared snapshot, rendered lines
    # joined, and at most TRACE_READERS_PER_USER open trace files per user.
    path = trace_file(npu.devroot)
    device = session.open(0)
    set_tracing(path, True)
    try:
        for _ in range(12):
            _profiled_nops(device)              # ~48,000 task events
        size = len(path.read_bytes())
        assert size > 4 << 20
        pid = pidfile.running_pid(paths.pid_file(npu.devroot, 0))
        before = rss_bytes(pid)
        open_to_others(attr_dir(npu).parent)
        holder = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                                   sys.executable, "-c", HOLD_READERS, str(path)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            readers = holder.stdout.readline().strip()
            grown = rss_bytes(pid) - before
        finally:
            holder.communicate("", timeout=30)
        assert readers == str(profiling.TRACE_READERS_PER_USER)      # then EMFILE
        assert grown < 2 * size, f"{readers} readers of a {size >> 20} MiB trace: the driver grew {grown >> 20} MiB"
        assert path.read_bytes()[:1] == b"{"     # the owner (another user) still reads it
    finally:
        set_tracing(path, False)
        device.close()


@pytest.fixture(scope="module")
def edge_paced(tmp_path_factory):
    mounted = start_npu(tmp_path_factory.mktemp("edge"), extra=("--profile", "edge", "--pacing"))
    yield mounted
    stop_npu(mounted)


def test_pacing_past_the_jobs_timeout_fails_it_without_restarting_the_core(edge_paced):
    # A paced core slept until the modeled end however far that was; past the job's timeout
    # the watchdog killed and restarted the core (a reset, a uevent) for any client that
    # asked for a job longer than its timeout. The core now fails the job itself.
    with libnpu.initialize(edge_paced.devroot) as session:
        dev = session.open(0)
        nbytes = 4 << 20        # 2 M cycles at 100 MHz: ~21 ms modeled, a few ms emulated
        src, dst = dev.alloc_mem(nbytes), dev.alloc_mem(nbytes)
        cmds = dev.command_buffer()
        cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=nbytes)
        started = time.monotonic_ns()
        fence = dev.run(cmds, [src, dst], timeout_ms=1000)     # in time: paced to the model
        assert time.monotonic_ns() - started >= fence.device_time_ns > 20_000_000
        resets = dev.info()["reset_count"]
        for _ in range(3):
            with pytest.raises(libnpu.JobError) as late:
                dev.run(cmds, [src, dst], timeout_ms=15)
            assert late.value.errno == errno.ETIMEDOUT
        assert dev.info()["reset_count"] == resets


def test_a_job_too_big_for_the_profile_queue_is_reported_incomplete(device):
    # 4,095 tasks + the job's record overflow a core's 4,096-entry profile queue (one
    # slot stays empty): the chip drops the job's records, the driver says so, and the
    # next profiled job is whole again.
    huge = device.get_profile(_profiled_nops(device, 4095))
    assert huge.tasks == [] and not huge.complete and huge.status == 0
    small = device.get_profile(_profiled_nops(device, 5))
    assert len(small.tasks) == 5 and small.complete
