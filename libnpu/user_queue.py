"""User-mode submission queues, the client's side (``Device.create_queue``; docs/abi.md,
"User queues").

A job goes into the queue memory the driver mapped here and the core reads through the
IOMMU: the entry, then the tail, then the doorbell (skipped while the serving core says
it polls). Its completion comes back in the same memory; ``wait`` spins briefly on it,
then sleeps on the queue's completion line (a pipe), which the chip writes only when the
header says someone waits. No request to the driver on the way: the job path is client
-> core -> client.

The chip checks everything (an entry is only a command buffer address and size in this
context's own address space); this side only keeps the ring from overflowing its own
completions: at most ``entries`` jobs in flight.

Submit and wait run in C (``libnpu/capi/queue_client.c``, through cffi) when the library
builds: the Python steps below cost about 18 us of CPU per NOP job, which on a 2-CPU
machine is what four clients share with the cores. The Python path stays as the readable
reference and the fallback (``NPU_QUEUE_NATIVE=0``, no C compiler); both follow the same
protocol, and the tests run both.

Any number of threads of one process may submit and wait on one queue. A forked child does
not inherit the parent's queues: in the child they read as closed (EBADF: the waiters' and
submitters' state is the parent's, and a child sleeping on the same completion line would
take the parent's wake-ups); the child makes its own (``Device.create_queue``; the runtime's
``Device.shared_queue`` does so by itself).
"""
from __future__ import annotations

import array
import errno
import fcntl
import mmap
import os
import select
import signal
import termios
import threading
import time
import weakref
from collections.abc import Callable

from kmd_fuse.uapi import NpuError
from libnpu.capi import queue_native
from libnpu.job_faults import queue_job_error
from npu_hw import queues

LET_WAITERS_OUT_S = 5.0   # close(): how long other threads' waits may take to see their jobs done
SPIN_S = float(os.environ.get("NPU_QUEUE_SPIN_US", "200")) / 1e6   # polling before sleeping on the completion line
CONTENDED_SPIN_S = float(os.environ.get("NPU_QUEUE_CONTENDED_SPIN_US", "0")) / 1e6   # ... while the CPUs are all wanted
SLEEP_SLICE_MS = 1000   # a sleeping waiter re-checks this often: a safety net only (no wake-up is lost)
LOAD_CHECK_S = 0.005    # how often the spin looks at the machine's run queue
# RepeatedJob's hinted wait (a job expected to be long slept through on a timer): on unless 0.
SLEEP_AHEAD = os.environ.get("NPU_QUEUE_SLEEP_AHEAD", "1") != "0"


class SpinWindow:
    """How long a waiter polls its completion before sleeping: the whole SPIN_S while the
    machine has a CPU to spare, none while more tasks want to run than there are CPUs
    (then a spinning client only takes the CPU from the core that would complete its job,
    or from another client: measured on 2 vCPUs, 4 processes of NOPs made 15.5 k jobs/s
    with a 1 ms spin, 36-41 k with none or 30 us, against 53 k for one process spinning)."""

    def __init__(self) -> None:
        self.cpus = os.cpu_count() or 1
        self._checked = 0.0
        self._spin = SPIN_S
        self.forced: float | None = None     # set_wait_mode: a fixed spin, whatever the load

    def seconds(self) -> float:
        if self.forced is not None:
            return self.forced
        now = time.monotonic()
        if now - self._checked >= LOAD_CHECK_S:
            self._checked = now
            self._spin = CONTENDED_SPIN_S if _runnable_others() >= self.cpus else SPIN_S
        return self._spin


def _runnable_others() -> int:
    """Runnable tasks on the machine besides this one (/proc/loadavg's 4th field)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0]) - 1
    except (OSError, IndexError, ValueError):
        return 0


_SPIN = SpinWindow()
_LIVE: weakref.WeakSet[UserQueue] = weakref.WeakSet()   # this process's open queues (for fork)


def _forget_inherited() -> None:
    """In a forked child: the parent's queues read as closed (their lines' copies closed)."""
    for queue in list(_LIVE):
        queue._inherited()


os.register_at_fork(after_in_child=_forget_inherited)


def set_wait_mode(mode: str) -> None:
    """How this process's waiters poll their completion before sleeping: ``adaptive`` (the
    default: SpinWindow), ``spin`` (SPIN_S whatever the load) or ``sleep`` (no spin: straight
    to the completion line). For benchmarks that compare the modes."""
    spins = {"adaptive": None, "spin": SPIN_S, "sleep": 0.0}
    if mode not in spins:
        raise ValueError(f"wait mode {mode!r}: one of {', '.join(spins)}")
    _SPIN.forced = spins[mode]


def set_sleep_ahead(on: bool) -> None:
    """Whether ``UserQueue.run_repeated`` sleeps through a job expected to be long
    (``NPU_QUEUE_SLEEP_AHEAD``, default on); for benchmarks that compare."""
    global SLEEP_AHEAD
    SLEEP_AHEAD = on


class NotQueued(NpuError):
    """The queue stopped or was closed before the job went in: nothing of it will run, the
    caller may submit it another way (SUBMIT)."""

    @classmethod
    def from_error(cls, exc: NpuError) -> NotQueued:
        error = cls(exc.errno or errno.EIO, exc.command)
        error.strerror = exc.strerror       # the same message
        return error


def _write_no_sigpipe(fd: int, data: bytes) -> int:
    """``os.write`` that raises no SIGPIPE when nobody reads the pipe (BrokenPipeError only):
    Python ignores SIGPIPE, but a C program hosting libnpu_runtime.so keeps its default
    action, which would kill it (queue_client.c's write_no_sigpipe does the same). Where
    Python ignores SIGPIPE (a Python program) the write is plain: the mask costs three
    system calls a ring."""
    if signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN:
        return os.write(fd, data)
    already = signal.SIGPIPE in signal.sigpending()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
    try:
        return os.write(fd, data)
    except BrokenPipeError:
        if not already:
            signal.sigtimedwait({signal.SIGPIPE}, 0)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _drain(fd: int) -> None:
    """Empty the completion pipe: only the bytes it holds (FIONREAD), so a read never waits."""
    buffered = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buffered)
        if buffered[0] > 0:
            os.read(fd, buffered[0])
    except (BlockingIOError, OSError):
        pass



def _fill(fence: QueueFence, record) -> None:
    """A fence's status, device time and the core's time from its completion record (6 u64
    from C: seq, status | core << 32, cycles, device_time_ns, fault_iova, exec_ns)."""
    status = record[1] & 0xFFFFFFFF
    fence.status = status - (1 << 32) if status & 0x80000000 else status
    fence.device_time_ns, fence.exec_ns = record[3], record[5]
    if record[0] != fence.id:            # overwritten by a later job of this queue: it completed
        fence.status, fence.device_time_ns, fence.exec_ns = 0, 0, 0


class QueueFence:
    """The completion of one job of a user queue; used like ``portability.Fence``."""

    def __init__(self, queue: UserQueue, seq: int):
        self.queue, self.id = queue, seq
        self.status: int | None = None
        self.device_time_ns = 0
        self.exec_ns = 0        # the core's own wall time for the job (its clock, start to completion)

    def wait(self, timeout: float | None = None) -> QueueFence:
        """Block until the job is done; raises JobError if it failed, TimeoutError on timeout,
        NpuError if the queue stopped (the device was reset, the context closed)."""
        try:
            self.queue.wait(self, timeout)
        except NpuError as exc:
            if self.status is None:
                self.status = -exc.errno      # it never runs: signalled, failed (the request is free again)
            raise
        if self.status:
            raise queue_job_error(self.queue.header, self.queue.id, self.id, self.status)
        return self

    async def wait_async(self, timeout: float | None = None) -> QueueFence:
        import anyio  # only async programs call this: a plain `import libnpu` does not load anyio
        return await anyio.to_thread.run_sync(self.wait, timeout)

    @property
    def signalled(self) -> bool:
        if self.status is None:
            self.queue.collect(self)
        return self.status is not None

    def __repr__(self) -> str:
        return f"<QueueFence {self.queue.id}:{self.id} status={self.status}>"


class RepeatedJob:
    """A request's command buffer run again and again, one job at a time (``UserQueue.run_repeated``):
    the C call's buffers, made once, the job's expected time on the core, which hints the wait
    (``npu_uq_run_hinted``), the queue it last ran on and its ``timeout_ms`` (0: the default)."""

    __slots__ = ("cmd_iova", "cmd_size", "timeout_ms", "hint", "record", "seq", "queue")

    def __init__(self, cmd_iova: int, cmd_size: int, timeout_ms: int = 0):
        self.cmd_iova, self.cmd_size, self.timeout_ms = cmd_iova, cmd_size, timeout_ms
        self.queue: UserQueue | None = None       # set by the caller once a job ran on it
        self.hint = queue_native.ffi.new("struct npu_uq_hint *")   # the recent exec times (zeroed)
        self.record = queue_native.ffi.new("unsigned long long[6]")
        self.seq = queue_native.ffi.new("unsigned long long *")

    @property
    def expected_ns(self) -> int:
        """The job's expected time on the core, which the wait sleeps towards (0: not known yet)."""
        return int(self.hint.expected_ns)

    def run(self) -> QueueFence | None:
        """Run to its end on ``queue`` (``UserQueue.run_repeated``); None when there is none or
        it is busy or stopped (then forgotten: the caller takes a queue another way)."""
        queue = self.queue
        fence = queue.run_repeated(self) if queue is not None else None
        if fence is None:
            self.queue = None
        return fence


class UserQueue:
    """One user-mode submission queue of a device (thread-safe)."""

    def __init__(self, memory_fd: int, size: int, doorbell_fd: int, completion_fd: int, *, queue_id: int,
                 entries: int, iova: int, core: int, timeout_cap_ms: int, futex: bool = False):
        self.id, self.entries, self.address, self.core = queue_id, entries, iova, core
        self.timeout_cap_ms = timeout_cap_ms
        self.mem = mmap.mmap(memory_fd, size)
        self.header = queues.Header(self.mem)
        self.doorbell_fd, self.completion_fd = doorbell_fd, completion_fd
        if self.header.read32(queues.HDR_MAGIC) != queues.QUEUE_MAGIC or \
                self.header.read32(queues.HDR_ENTRIES) != entries:
            self.header.release()
            self.mem.close()
            raise NpuError(errno.EPROTO, "QUEUE_CREATE", "the queue memory has no queue header")
        self._tail = self.header.read64(queues.HDR_TAIL)
        self._lock = threading.Lock()            # submitters (the Python path)
        self._waiting_lock = threading.Lock()    # HDR_WAITING, set while any thread sleeps; and:
        self._waiters = 0
        self._watched = False     # a waiter sleeps on the completion line (the others on _woken)
        self._wake_ups = 0        # the watcher's wake-ups so far
        self._followers = 0
        self._woken = threading.Condition(self._waiting_lock)   # notified after each of them
        self._late_wakeups = 0    # waits the safety-net timeout ended with the job done or the queue stopped
        self._waits = [0, 0, 0]   # the Python path's waits: at once, ended in the spin, slept
        self.closed = False
        self.destroyer: Callable[[UserQueue, bool], None] | None = None   # QUEUE_DESTROY (set by Device)
        self.node: str | None = None     # the device node (set by Device), named when the driver is gone
        self._released = False
        self._in_c = 0            # threads inside a C call: close() leaves the memory to the last one out
        self._in_c_lock = threading.Lock()
        self._lib = queue_native.library()
        self._native = None
        futex = futex and queue_native.FUTEX_WAKEUPS   # the C waiter sleeps on HDR_DONE (ABI 2.8), not the line
        if self._lib is not None:
            self._mem_pointer = queue_native.ffi.from_buffer(self.mem)
            self._native = self._lib.npu_uq_open(self._mem_pointer, entries, doorbell_fd, completion_fd, self._tail,
                                                 queues.WAIT_FUTEX if futex else queues.WAIT_LINE)
            if self._native == queue_native.ffi.NULL:
                queue_native.ffi.release(self._mem_pointer)
                self._native = None
        self.wakeup = "futex" if self._native is not None and futex else "line"   # how its waiter sleeps
        self.pid = os.getpid()
        _LIVE.add(self)

    @property
    def tail(self) -> int:
        """Seq of the last entry this client wrote."""
        if self._native is not None and not self._released:
            return self._lib.npu_uq_tail(self._native)
        return self._tail

    @tail.setter
    def tail(self, seq: int) -> None:
        """For an entry written by hand (tests, tools): the next submit writes seq + 1."""
        self._tail = seq
        if self._native is not None and not self._released:
            self._lib.npu_uq_set_tail(self._native, seq)

    @property
    def native(self) -> bool:
        """Whether submit and wait run in C."""
        return self._native is not None

    @property
    def late_wakeups(self) -> int:
        """Waits the safety-net timeout ended with the job done or the queue stopped (a lost signal: should stay 0)."""
        if self._native is not None and not self._released:
            return self._late_wakeups + self._lib.npu_uq_late_wakeups(self._native)
        return self._late_wakeups

    def wait_counts(self) -> dict[str, int]:
        """How the waits ended so far: ``at_once`` (done before any wait), ``spun`` (done
        within the spin), ``slept`` (on the completion line): which mode the client was in."""
        counts = list(self._waits)
        if self._native is not None and not self._released:
            native = queue_native.ffi.new("unsigned long long[3]")
            self._lib.npu_uq_wait_counts(self._native, native)
            counts = [a + b for a, b in zip(counts, native)]
        return dict(zip(("at_once", "spun", "slept"), counts))

    # ---- submission ----
    def submit(self, cmd_iova: int, cmd_size: int, timeout_ms: int = 0, flags: int = 0) -> QueueFence:
        """Queue a job (its command buffer's device address and size); returns its fence.
        Blocks while ``entries`` jobs are in flight. ``flags``: 0, or queues.ENTRY_PROFILE to
        have the chip time its tasks (``Device.get_profile(fence)``)."""
        if self._native is not None:
            return self._submit_native(cmd_iova, cmd_size, timeout_ms, flags)
        with self._lock:
            try:
                self._check_open()
                while self._tail - self.done() >= self.entries:
                    self._wait_seq(self._tail - self.entries + 1, None)
            except NpuError as exc:
                raise NotQueued.from_error(exc) from None
            seq = self._tail + 1
            at = queues.entries_offset() + (seq & (self.entries - 1)) * queues.ENTRY_STRUCT.size
            queues.ENTRY_STRUCT.pack_into(self.mem, at, seq, cmd_iova, cmd_size, timeout_ms, flags, 0)
            self.header.write64(queues.HDR_TAIL, seq)
            self._tail = seq
            queues.store_load_fence()    # the tail visible before the flag is read (spec.queues)
            if not self.header.read32(queues.HDR_POLLING):
                self.ring()
        return QueueFence(self, seq)

    def _submit_native(self, cmd_iova: int, cmd_size: int, timeout_ms: int, flags: int) -> QueueFence:
        self._enter_c(NotQueued)
        try:
            while (seq := self._lib.npu_uq_submit(self._native, cmd_iova, cmd_size, timeout_ms,
                                                  flags)) == -errno.EAGAIN:
                self._wait_for_room()
        finally:
            self._leave_c()
        if seq < 0:
            self._raise_stopped(seq, self.tail + 1, NotQueued)
        return QueueFence(self, seq)

    def _wait_for_room(self) -> None:
        """Until one more job fits (C path); NotQueued if the queue stops meanwhile."""
        try:
            self._wait_in_c(self.tail - self.entries + 1, None)
        except NpuError as exc:
            raise NotQueued.from_error(exc) from None

    def run(self, cmd_iova: int, cmd_size: int, timeout_ms: int = 0, timeout: float | None = None,
            flags: int = 0) -> QueueFence:
        """``submit`` and ``QueueFence.wait`` in one call (one C call when the queue runs in C).
        Raises ``NotQueued`` (an NpuError) when the job could not go in: nothing of it runs."""
        if self._native is None:
            return self.submit(cmd_iova, cmd_size, timeout_ms, flags).wait(timeout)
        record = queue_native.ffi.new("unsigned long long[7]")    # the completion record, then the seq
        self._enter_c(NotQueued)
        try:
            while (result := self._lib.npu_uq_run(
                    self._native, cmd_iova, cmd_size, timeout_ms, flags, int(_SPIN.seconds() * 1e9),
                    -1 if timeout is None else max(0, int(timeout * 1e9)), SLEEP_SLICE_MS, record,
                    record + 6)) == -errno.EAGAIN and record[6] == 0:
                self._wait_for_room()
        finally:
            self._leave_c()
        seq = record[6]
        if result == -errno.ETIMEDOUT and seq:
            raise TimeoutError(f"queue {self.id} job {seq} not done after {timeout} s")
        if result:
            self._raise_stopped(result, seq or self.tail + 1, NpuError if seq else NotQueued)
        fence = QueueFence(self, seq)
        _fill(fence, record)
        if fence.status:
            raise queue_job_error(self.header, self.id, seq, fence.status)
        return fence

    def run_repeated(self, job: RepeatedJob, flags: int = 0) -> QueueFence | None:
        """``run`` of ``job`` in one C call, its wait hinted by the job's expected time; None
        when the queue runs in Python, has jobs in flight (this call takes an idle queue only)
        or stopped before the job went in: the caller takes a queue the usual way
        (``Device.shared_queue``, ``try_submit``). A job that went in raises as ``run``."""
        if self._native is None or self.closed:
            return None
        try:
            self._enter_c(NotQueued)
        except NotQueued:
            return None
        try:
            result = self._lib.npu_uq_run_hinted(self._native, job.cmd_iova, job.cmd_size, job.timeout_ms, flags,
                                                 int(_SPIN.seconds() * 1e9), -1, SLEEP_SLICE_MS,
                                                 job.hint if SLEEP_AHEAD else queue_native.ffi.NULL, job.record,
                                                 job.seq)
        finally:
            self._leave_c()
        seq = job.seq[0]
        if result and not seq:
            return None                  # -EBUSY, -EAGAIN, or stopped: nothing of it runs
        if result:
            self._raise_stopped(result, seq)
        fence = QueueFence(self, seq)
        _fill(fence, job.record)
        if fence.status:
            raise queue_job_error(self.header, self.id, seq, fence.status)
        return fence

    def try_submit(self, cmd_iova: int, cmd_size: int, *, wait: bool = False, flags: int = 0,
                   timeout_ms: int = 0) -> QueueFence | None:
        """The job on this queue for a caller that has another way to run it (the runtime:
        SUBMIT): ``run`` with ``wait``, else ``submit``. None when the queue stopped (a reset)
        or was closed before the job went in: the caller runs it the other way (and gets a
        new queue next time). A job that went in and failed raises as ``run`` does."""
        # run: only a job that never went in may go another way (NotQueued); a failed one raises
        put, refused = (self.run, NotQueued) if wait else (self.submit, NpuError)
        try:
            return put(cmd_iova, cmd_size, timeout_ms=timeout_ms, flags=flags)
        except refused as exc:
            if exc.errno not in (errno.ECANCELED, errno.EBADF, errno.ENODEV):
                raise
            return None

    def ring(self) -> None:
        """Wake the serving core (the doorbell is a pipe: a full one has a wake-up pending)."""
        try:
            _write_no_sigpipe(self.doorbell_fd, b"\x01")
        except BlockingIOError:
            pass
        except BrokenPipeError:        # nobody holds the other end: the driver and the chip are gone
            raise NpuError(errno.ENODEV, "QUEUE", f"user queue {self.id}: the device's driver stopped",
                           node=self.node) from None

    def in_flight(self) -> int:
        """Jobs submitted here and not completed yet."""
        return max(0, self.tail - self.done())

    def done(self) -> int:
        """Seq of the last job completed."""
        return self.header.read64(queues.HDR_DONE)

    def error(self) -> int:
        """0, or -errno: why the queue stopped. The driver gives a stopped queue's memory
        back (it reads as zeros then): no magic means ECANCELED too."""
        error = self.header.error()
        if not error and self.header.read32(queues.HDR_MAGIC) != queues.QUEUE_MAGIC:
            return -errno.ECANCELED
        return error

    # ---- completion ----
    def collect(self, fence: QueueFence) -> bool:
        """Fill the fence in if its job is done, or will never run (the queue stopped: its
        status is the queue's error); True then."""
        if self.closed:
            return False
        if self.done() < fence.id:
            error = self.error()
            if not error:
                return False
            fence.status, fence.device_time_ns = error, 0
            return True
        at = queues.completions_offset(self.entries) + (fence.id & (self.entries - 1)) * queues.COMPLETION_STRUCT.size
        seq, status, _, _, device_ns, _, exec_ns = queues.COMPLETION_STRUCT.unpack_from(self.mem, at)
        if seq != fence.id:
            # Overwritten by a later job of this queue: the fence was waited on too late. It completed.
            fence.status, fence.device_time_ns = 0, 0
        else:
            fence.status, fence.device_time_ns, fence.exec_ns = status, device_ns, exec_ns
        return True

    def wait(self, fence: QueueFence, timeout: float | None = None) -> None:
        """Block until ``fence`` signals; TimeoutError, or NpuError if the queue stopped first."""
        if self._native is not None:
            _fill(fence, self._wait_native(fence.id, timeout))
            return
        if self.collect(fence):
            self._waits[0] += 1
        else:
            self._wait_seq(fence.id, timeout)
            self.collect(fence)
        if fence.status and self.done() < fence.id:
            self._check_error(fence.id)     # it never ran: the queue stopped (NpuError, not JobError)

    def _wait_native(self, seq: int, timeout: float | None):
        """The C wait: the job's completion record (as 6 u64), or the Python path's exceptions."""
        self._enter_c()
        try:
            return self._wait_in_c(seq, timeout)
        finally:
            self._leave_c()

    def _wait_in_c(self, seq: int, timeout: float | None):
        record = queue_native.ffi.new("unsigned long long[6]")
        result = self._lib.npu_uq_wait(self._native, seq, int(_SPIN.seconds() * 1e9),
                                       -1 if timeout is None else max(0, int(timeout * 1e9)), SLEEP_SLICE_MS, record)
        if result == -errno.ETIMEDOUT:
            raise TimeoutError(f"queue {self.id} job {seq} not done after {timeout} s")
        if result:
            self._raise_stopped(result, seq)
        return record

    def _raise_stopped(self, result: int, seq: int, error: type[NpuError] = NpuError) -> None:
        """The exception the Python path raises for a C call's -errno."""
        if result in (-errno.ENODEV, -errno.EPIPE):     # nobody holds the lines' other ends
            raise error(errno.ENODEV, "QUEUE", f"user queue {self.id}: the device's driver stopped"
                                               + (f" before job {seq} ran" if result == -errno.EPIPE else ""),
                        node=self.node)
        raise error(-result, "QUEUE", f"user queue {self.id} stopped before job {seq} ran"
                                         + (": the device was reset or the context closed"
                                            if result == -errno.ECANCELED else ""), node=self.node)

    def _enter_c(self, error: type[NpuError] = NpuError) -> None:
        with self._in_c_lock:
            if self.closed:
                raise error(errno.EBADF, "QUEUE", self._closed_why())
            self._in_c += 1

    def _leave_c(self) -> None:
        with self._in_c_lock:
            self._in_c -= 1
            last = self.closed and self._in_c == 0
        if last:
            self._release()

    def _wait_seq(self, seq: int, timeout: float | None) -> None:
        self._check_open()
        deadline = None if timeout is None else time.monotonic() + timeout
        spin = _SPIN.seconds()
        spin_until = time.monotonic() + (spin if timeout is None else min(spin, timeout))
        if self.done() >= seq:
            self._waits[0] += 1
            return
        while spin > 0 and self.done() < seq:    # no spin: straight to sleep (a job done
            self._check_error(seq)               # in between is not counted as spun)
            if time.monotonic() >= spin_until:
                break
            os.sched_yield()
        else:
            if spin > 0:
                self._waits[1] += 1
                return
        self._waits[2] += 1
        self._set_waiting(+1)
        try:
            poller = select.poll()
            poller.register(self.completion_fd, select.POLLIN)
            while self.done() < seq:
                self._check_error(seq)
                left_ms = SLEEP_SLICE_MS
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"queue {self.id} job {seq} not done after {timeout} s")
                    left_ms = min(left_ms, max(1, int(left * 1000)))
                with self._waiting_lock:
                    if self._watched:            # another waiter watches the line: it wakes us
                        self._follow(seq, left_ms)
                        continue
                    self._watched = True
                try:
                    events = poller.poll(left_ms)
                    if events:
                        _drain(self.completion_fd)
                finally:
                    with self._waiting_lock:     # each wake-up passed on (one follower may watch next)
                        self._watched = False
                        self._wake_ups += 1
                        if self._followers:
                            self._woken.notify_all()
                if not events:
                    if self.done() >= seq or self.error():   # the safety net caught what a signal should have
                        self._late_wakeups += 1
                    continue
                if any(event & select.POLLHUP for _, event in events) and self.done() < seq:
                    self._check_error(seq)       # the driver let the queue go (reset, close) ...
                    # ... or no writer is left on the completion line: the driver and the chip are gone.
                    raise NpuError(errno.ENODEV, "QUEUE",
                                   f"user queue {self.id}: the device's driver stopped before job {seq} ran",
                                   node=self.node)
        finally:
            self._set_waiting(-1)

    def _follow(self, seq: int, wait_ms: int) -> None:
        """Sleep until the watcher's next wake-up (or ``wait_ms``) unless job ``seq`` is done:
        looked at under the lock the watcher notifies under, so no wake-up is missed (several
        threads asleep on the line could take each other's byte). Called with the lock held."""
        if self.done() >= seq:
            return
        seen = self._wake_ups
        self._followers += 1
        try:
            woken = self._woken.wait_for(lambda: not self._watched or self._wake_ups != seen, wait_ms / 1000)
        finally:
            self._followers -= 1
        if not woken and (self.done() >= seq or self.error()):   # the safety net caught what a signal should have
            self._late_wakeups += 1

    def _set_waiting(self, change: int) -> None:
        with self._waiting_lock:
            self._waiters += change
            self.header.write32(queues.HDR_WAITING, 1 if self._waiters > 0 else 0)
            queues.store_load_fence()    # the flag visible before HDR_DONE is read again (spec.queues)

    def _check_error(self, seq: int) -> None:
        error = self.error()
        if error and (self.done() < seq or error == -errno.ECANCELED):
            raise NpuError(-error, "QUEUE", f"user queue {self.id} stopped before job {seq} ran"
                                            + (": the device was reset or the context closed"
                                               if error == -errno.ECANCELED else ""), node=self.node)

    def _check_open(self) -> None:
        if self.closed:
            raise NpuError(errno.EBADF, "QUEUE", self._closed_why())
        error = self.error()
        if error:
            raise NpuError(-error, "QUEUE", f"user queue {self.id} stopped"
                                            + (": the device was reset or the context closed"
                                               if error == -errno.ECANCELED else ""), node=self.node)

    def close(self, cancel: bool = False, timeout: float | None = None) -> None:
        """Destroy the queue (QUEUE_DESTROY): first wait for the jobs in flight (at most
        ``timeout`` s, then TimeoutError and the queue stays), or with ``cancel`` drop them
        (waiting on their fences then raises NpuError EBADF: closed). Then the slot, the
        memory and the limits' counts are the driver's again. A queue a reset already
        stopped is only let go here. Closing twice does nothing."""
        if self.closed:
            return
        with self._lock:         # no submitter slips a job in between the wait and the destroy
            if self.closed:
                return
            if self.destroyer is not None:
                if not cancel and not self.error():
                    if self.in_flight():
                        self._wait_seq(self.tail, timeout)
                    self._let_waiters_out(timeout)
                self.destroyer(self, cancel)
            self.release()

    def _let_waiters_out(self, timeout: float | None) -> None:
        """Every job is done: let the other threads still waiting on this queue read their
        completions before QUEUE_DESTROY takes the queue's memory (a waiter woken after it
        would read a header with no magic, ECANCELED, for a job that succeeded). They only
        have to notice, so this is short; bounded by ``timeout``, else by a few seconds."""
        deadline = time.monotonic() + (LET_WAITERS_OUT_S if timeout is None else timeout)
        while (self._in_c or self._waiters) and time.monotonic() < deadline:
            time.sleep(0.0002)

    def _closed_why(self) -> str:
        if self.pid != os.getpid():
            return f"user queue {self.id} belongs to process {self.pid}: a forked child makes its own"
        return f"user queue {self.id} is closed"

    def _inherited(self) -> None:
        """After fork, in the child: closed here, the queue stays the parent's. Only the
        child's copies of the lines are closed (the C client's locks may have been held by a
        parent thread at the fork: it is not touched)."""
        if self.closed:
            return
        self.closed = self._released = True
        for fd in (self.doorbell_fd, self.completion_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def release(self) -> None:
        """Unmap the queue and close its descriptors here, leaving the queue to the driver
        (it goes with the context)."""
        if getattr(self, "closed", False):
            return
        with self._in_c_lock:
            self.closed = True
            busy = self._in_c > 0
        if not busy:                     # else the last thread out of C lets go
            self._release()

    def _release(self) -> None:
        if self._native is not None:    # keep the C side's counts, then free it
            self._late_wakeups, self._waits = self.late_wakeups, list(self.wait_counts().values())
            self._released = True
            self._lib.npu_uq_close(self._native)
            queue_native.ffi.release(self._mem_pointer)
        self._released = True
        self.header.release()
        self.mem.close()
        for fd in (self.doorbell_fd, self.completion_fd):
            os.close(fd)

    def __enter__(self) -> UserQueue:
        return self

    def __exit__(self, *exc) -> None:
        self.close(cancel=exc[0] is not None)
