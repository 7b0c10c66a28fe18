"""User-mode submission queues: the queue table the driver programs, and the queue memory
a client writes and a core reads through the IOMMU.

The queue table is a second register page (``bus/qtab``) of QUEUE_SLOTS slots.  The KMD
fills a slot (ASID, the queue memory's IOVA, entries, priority, timeout cap, the core
that serves it) and sets Q_ENABLED; it never touches the queue's entries.  Each
registration has two lines of its own (FIFOs named by Q_LINES, spec.memory.queue_line_path):
its doorbell (the client writes a byte into it to wake the serving core) and its
completion line (the core writes a byte into it when the client said it sleeps).

Wake-ups are never lost: each side publishes, then looks at the other's flag, with a full
memory barrier in between (``store_load_fence``; x86 lets a load pass an earlier store to
another location).  The core clears HDR_POLLING, fences, then looks at HDR_TAIL before it
sleeps; a client writes HDR_TAIL, fences, then rings unless HDR_POLLING is set.  A waiter
sets HDR_WAITING, fences, then looks at HDR_DONE before it sleeps; the core writes
HDR_DONE, fences, then signals the waiter if HDR_WAITING is set: a byte on the completion
line (WAIT_LINE, any bit but WAIT_FUTEX) and/or FUTEX_WAKE on HDR_DONE's low 32 bits
(WAIT_FUTEX), which the waiter sleeps on with FUTEX_WAIT (the kernel compares the word under
its own lock: a completion between the waiter's look and its sleep fails the FUTEX_WAIT).
Each register has one writer, named below; a "core" register is written by the serving
core, by the KMD only while the slot is disabled and acknowledged (registration starts its
counters from zero).

Disabling: the KMD clears Q_CONTROL and bumps Q_GENERATION and QUEUE_TABLE_GEN; every
core, between two jobs, copies Q_GENERATION into its own UQ_ACKS word for the slot
(``ack_register``).  Once all have, no entry of the queue runs and no core holds a view of
its memory, so the KMD may give it back.

Shared service (``firmware_sim.queue_service``): with the C service loop every core takes
every queue in and any core may run its next job, one at a time: a core first sets Q_CLAIM
(compare-and-swap 0 -> its number + 1) and clears it once the job is posted; Q_DONE and
Q_ERROR are what every core goes by.  Core 0 polls and keeps HDR_POLLING; the others join
only on a backlog.  Q_CORE is the core that serves the queue alone where the chip has no
shared service (its Python loop).

The queue memory (one buffer the driver allocates, mapped read-write in the client and in
the context's IOMMU space) is a header, QUEUE_ENTRIES submission entries and as many
completion records.  Sequence numbers start at 1; entry ``seq`` lives at slot
``seq % entries`` of both arrays.  The client writes the entry, then HDR_TAIL = seq; the
core runs entries in order and for each writes its completion, then HDR_DONE = seq.
"""
import ctypes
import os
import platform
import struct

from npu_hw import regs

QUEUE_SLOTS = 16                  # queues the chip serves at once (the table's slots)
QTAB_SIZE = 4096
QTAB_SLOT_SIZE = 128
DEFAULT_QUEUE_ENTRIES = 64        # a power of two; one slot of each array per job in flight

# ---- queue table, per slot (offsets within the slot) ----
Q_CONTROL = 0x00       # KMD (u32): Q_ENABLED
Q_ASID = 0x04          # KMD (u32): the owning context's address space
Q_IOVA = 0x08          # KMD (u64): device address of the queue memory (in that ASID)
Q_ENTRIES = 0x10       # KMD (u32): entries of the queue (a power of two)
Q_PRIORITY = 0x14      # KMD (u32): NPU_PRIO_* (higher is served first in each round)
Q_TIMEOUT_CAP_MS = 0x18  # KMD (u32): a job's timeout is clamped to this
Q_CORE = 0x1C          # KMD (u32): the core serving the queue (without shared service)
Q_GENERATION = 0x20    # KMD (u32): bumped at every registration and every disable
Q_CLAIM = 0x24         # core (u32): 0, or 1 + the core running (or about to run) the queue's next job
Q_ERROR = 0x28         # core (i32): 0, or -errno: the core stopped serving the queue (bad tail)
Q_DONE = 0x30          # core (u64): seq of the last job completed (jobs done, ok or failed)
Q_FAILED = 0x38        # core (u64): jobs that failed
Q_BUSY_NS = 0x40       # core (u64): wall-clock ns the core spent on the queue's jobs
Q_DEVICE_NS = 0x48     # core (u64): simulated device time of its jobs
Q_CYCLES = 0x50        # core (u64): simulated cycles of its jobs
Q_LINES = 0x58         # KMD (u64): the name of this registration's doorbell and completion lines
                       # (random, fresh per QUEUE_CREATE: spec.memory.queue_line_path)

Q_ENABLED = 0x1
Q_TRACE = 0x2          # time the queue's jobs in the core's profile queue (the driver's trace records)

# ---- queue memory: header ----
QUEUE_MAGIC = 0x5155504E   # "NPUQ" little endian
HDR_MAGIC = 0x00       # driver (u32): QUEUE_MAGIC
HDR_ENTRIES = 0x04     # driver (u32): entries (the table's Q_ENTRIES is what the core trusts)
HDR_TAIL = 0x08        # client (u64): seq of the last entry written
HDR_DONE = 0x10        # core (u64): seq of the last completion written
HDR_WAITING = 0x18     # client (u32): 0, or WAIT_* bits: how to wake the client at the next completion
HDR_POLLING = 0x1C     # core (u32): non-zero while the serving core watches HDR_TAIL (no doorbell needed)
HDR_ERROR = 0x20       # core / driver (i32): 0, or -errno: the queue stopped (no more job runs)
HDR_FAILED_TASK = 0x28  # core (u64; ABI 2.9): the last job that failed in a task: seq << 32 | the task's index
HEADER_SIZE = 256



def failed_task_word(seq: int, index: int) -> int:
    """HDR_FAILED_TASK's value for job ``seq`` failing in task ``index`` (one aligned write:
    the seq and the index are never seen from two different jobs)."""
    return (seq & 0xFFFFFFFF) << 32 | (index & 0xFFFFFFFF)


def failed_task_of(word: int, seq: int) -> int | None:
    """The index of the task job ``seq`` failed in, from HDR_FAILED_TASK; None when the word
    names another job (a later failure of the queue overwrote it, or the job failed outside
    its tasks: a timeout, an abort)."""
    return word & 0xFFFFFFFF if word and word >> 32 == seq & 0xFFFFFFFF else None


ENTRY_STRUCT = struct.Struct("<QQIIII")     # seq, cmd_iova, cmd_size, timeout_ms, flags, reserved
COMPLETION_STRUCT = struct.Struct("<QiIQQQQ")   # seq, status, core, cycles, device_time_ns, fault_iova, exec_ns
assert ENTRY_STRUCT.size == 32 and COMPLETION_STRUCT.size == 48

ENTRY_PROFILE = 0x1    # time the job's tasks (its profile records reach the driver, for GET_PROFILE)
ENTRY_FLAGS = ENTRY_PROFILE   # the flags an entry may carry: any other bit fails the job with EINVAL

# ---- HDR_WAITING's bits (ABI 2.8; before it, any non-zero value meant the line) ----
WAIT_LINE = 0x1        # a byte on the completion line (so is any bit the chip does not know)
WAIT_FUTEX = 0x2       # FUTEX_WAKE on HDR_DONE's low 32 bits (one waiter)
WAKEUPS = WAIT_LINE | WAIT_FUTEX   # what the chip honours (NPU_PARAM_QUEUE_WAKEUPS), on a host with futex

# A user-queue job's CURRENT_JOB in the core's bank: the top bit set (driver job ids never
# reach it), the slot, the low 48 bits of its seq.
USER_JOB_BIT = 1 << 63


USER_JOB_SEQ_MASK = (1 << 48) - 1


def user_job_id(slot: int, seq: int) -> int:
    """The chip's id of a user-queue job, which is also its fence for GET_PROFILE
    (npu_uapi.h's NPU_QUEUE_FENCE_BIT / NPU_QUEUE_FENCE_SHIFT)."""
    return USER_JOB_BIT | (slot << 48) | (seq & USER_JOB_SEQ_MASK)


def user_job_slot(job_id: int) -> int:
    return (job_id >> 48) & 0x7FFF


def slot_offset(slot: int) -> int:
    if not 0 <= slot < QUEUE_SLOTS:
        raise ValueError(f"queue slot {slot} out of range 0..{QUEUE_SLOTS - 1}")
    return slot * QTAB_SLOT_SIZE


def ack_register(core: int, slot: int) -> int:
    """The register (of the register file) where ``core`` acknowledges ``slot``'s generation."""
    return regs.core_bank(core) + regs.UQ_ACKS + 4 * slot_offset(slot) // QTAB_SLOT_SIZE


def entries_offset() -> int:
    return HEADER_SIZE


def completions_offset(entries: int) -> int:
    return HEADER_SIZE + entries * ENTRY_STRUCT.size


def memory_size(entries: int) -> int:
    """Bytes of queue memory for ``entries`` entries (before rounding to pages)."""
    return completions_offset(entries) + entries * COMPLETION_STRUCT.size


def store_load_fence() -> None:
    """A full memory barrier between a store to shared memory and a later load of another
    location (x86 may reorder exactly those two): a system call (getppid, the cheapest,
    about 0.2 us) serializes them, which no Python-level memory access does."""
    os.getppid()


def wants_line(waiting: int) -> bool:
    """Whether a HDR_WAITING value asks for the completion line: any bit but WAIT_FUTEX
    (a pre-2.8 client writes 1)."""
    return bool(waiting & ~WAIT_FUTEX)


def wants_futex(waiting: int) -> bool:
    """Whether a HDR_WAITING value asks for FUTEX_WAKE on HDR_DONE."""
    return bool(waiting & WAIT_FUTEX)


_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())   # no Python constant for it
_FUTEX_WAKE = 1                   # shared (no FUTEX_PRIVATE_FLAG): the waiter is another process
_libc = ctypes.CDLL(None, use_errno=True) if _SYS_FUTEX is not None else None


def futex_supported() -> bool:
    """Whether this host's futex is reachable from here (the chip then honours WAIT_FUTEX)."""
    return _libc is not None


def futex_wake(address: int, waiters: int = 1) -> None:
    """FUTEX_WAKE of at most ``waiters`` processes asleep on the u32 at ``address`` (a shared
    mapping: the key is the file's page, whichever process maps it). It never blocks and
    reads nothing the waiter wrote: whatever a client does to the word, it wakes at most its
    own sleepers."""
    if _libc is not None:
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAKE, waiters, None, None, 0)


class Header:
    """The header's index fields, each read and written as one aligned native access
    (struct's '<Q' goes byte by byte: the other side could see a torn value)."""

    def __init__(self, buffer):
        import sys
        if sys.byteorder != "little":
            raise OSError("user queues need a little-endian host")
        view = memoryview(buffer).cast("B")[:HEADER_SIZE]
        self._views = (view, view.cast("Q"), view.cast("I"), view.cast("i"))
        _, self._u64, self._u32, self._i32 = self._views
        # HDR_DONE's address here, for FUTEX_WAKE (the ctypes object, an export of the view, goes at once)
        self._done_address = ctypes.addressof(ctypes.c_char.from_buffer(view)) + HDR_DONE if not view.readonly else 0

    def read64(self, offset: int) -> int:
        return self._u64[offset >> 3]

    def write64(self, offset: int, value: int) -> None:
        self._u64[offset >> 3] = value

    def read32(self, offset: int) -> int:
        return self._u32[offset >> 2]

    def write32(self, offset: int, value: int) -> None:
        self._u32[offset >> 2] = value

    def error(self) -> int:
        return self._i32[HDR_ERROR >> 2]

    def set_error(self, value: int) -> None:
        self._i32[HDR_ERROR >> 2] = value

    def wake_futex(self, waiters: int = 1) -> None:
        """FUTEX_WAKE on HDR_DONE (``futex_wake``) through this mapping."""
        if self._done_address:
            futex_wake(self._done_address, waiters)

    def release(self) -> None:
        """Let go of the buffer (an mmap cannot close while views of it exist)."""
        for view in reversed(self._views):
            view.release()
