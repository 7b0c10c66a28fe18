"""Register map.  All registers are little-endian; offsets are in bytes.

The register file is one 4 KiB page of shared memory.  A global bank describes
the chip and holds global controls; each core has a bank of its own at
``core_bank(core)``.  32-bit registers sit at 4-byte offsets, 64-bit counters at
8-byte aligned offsets (read them with a 64-bit view).  Each register has one
writer, named in its comment, so no read-modify-write races arise between the
KMD's process and the chip's.  "chip" is the chip's top-level process; "core" is
the core's own process, except while that process is dead: then the top-level
process's watchdog finishes the core's registers before it starts a new one.
"""
REGS_SIZE = 4096

DEVICE_ID_VALUE = 0x4E505530        # "NPU0"
HW_VERSION_VALUE = 0x00010000

# ---- global bank (u32) ----
ID = 0x00                # chip: DEVICE_ID_VALUE once the chip is up
HW_VERSION = 0x04        # chip
NUM_CORES = 0x08         # chip
CLOCK_MHZ = 0x0C         # chip
RING_ENTRIES = 0x10      # chip: entries in each core's ring and completion queue
PAGE_SHIFT = 0x14        # chip: IOMMU page size = 1 << PAGE_SHIFT
STATUS = 0x18            # chip: STATUS_* bits
RESET_REQ = 0x1C         # KMD: write an incrementing value to request a full reset
RESET_ACK = 0x20         # chip: copies RESET_REQ once every core is reset
FAULT_INJECT = 0x24      # KMD: FAULT_* bits, applied to every job a core starts while set
WATCHDOG_MS = 0x28       # KMD: default job timeout when a ring entry gives none
MACS_PER_CYCLE = 0x2C    # chip: timing model (per core)
DMA_BYTES_PER_CYCLE = 0x30  # chip: timing model
PROFILE_ID = 0x34        # chip: the hardware profile it runs (spec.profiles: Profile.id)
SRAM_KB = 0x38           # chip: on-chip SRAM per core, KiB
TASK_OVERHEAD_CYCLES = 0x3C  # chip: timing model, cycles each task costs besides its work
PACING = 0x40            # KMD: PACING_ON makes every job end no earlier than its modeled device time
QUEUE_TABLE_GEN = 0x44   # KMD: bumped after any change to the user-queue table (spec.queues)

STATUS_READY = 0x1

DEFAULT_JOB_TIMEOUT_MS = 5000    # a job's timeout when neither its submitter nor WATCHDOG_MS gives one
# A job's timeout counts the CPU time its core gets; a core that got less than that in
# STUCK_FACTOR timeouts of wall time is stuck (stopped, starved) and its job fails too.
STUCK_FACTOR = 10


def job_timeout_ms(requested_ms: int, default_ms: int, cap_ms: int | None = None) -> int:
    """The job-timeout rule, the one place the driver and the chip take it from: what the
    job's submitter asked, else the device's default (WATCHDOG_MS; DEFAULT_JOB_TIMEOUT_MS
    when that is 0), clamped to ``cap_ms`` when there is a cap (a cap of 0 is the default).
    The KMD clamps SUBMIT's timeouts by its maximum before the ring entry is written, so a
    ring entry's timeout needs no cap; a user queue's entries are the client's, so the chip
    clamps them by the queue's Q_TIMEOUT_CAP_MS."""
    default = default_ms or DEFAULT_JOB_TIMEOUT_MS
    timeout = requested_ms or default
    return timeout if cap_ms is None else min(timeout, cap_ms or default)


# The slowest an emulated core does a job's predicted work (its tasks' MACs and bytes, as the
# compiler counts them, and the tasks themselves), per ms of its CPU: the floor
# ``work_timeout_ms`` predicts with. Measured 2026-11-30 on the 2-vCPU VM: first runs (no plan
# yet) of int16 convolutions over a 6000x128 spectrogram 28 GMAC/s, replays 33; a numpy
# kernel's first run (int16 convolution before it ran in C) 0.1-1.5 GMAC/s, 20-55 MB/s of
# output. 1 GMAC/s and 50 MB/s bound them. A first run also decodes, translates and checks
# every task and binds its C call, whatever its work: 0.14-0.4 ms of CPU a task, which MACs
# and bytes miss for small tasks (a 75-step GRU's 1,200: predicted 46 ms, first run 230 ms;
# wakeforge-wake-up's 7,224, int16: predicted 2.1 s, first run 1.5 s on one core, 2.5-2.7 s
# as a task graph on two). 1 ms a task bounds it.
WORK_MACS_PER_MS = 1_000_000
WORK_BYTES_PER_MS = 50_000
WORK_TASK_US = 1_000


def work_timeout_ms(macs: int, bytes_moved: int, tasks: int, default_ms: int, cap_ms: int) -> int:
    """The timeout a job of known work asks for (a model's job: the runtime, docs/runtime.md):
    its predicted time at the slowest rates above (``macs`` at WORK_MACS_PER_MS, plus
    ``bytes_moved`` at WORK_BYTES_PER_MS, plus WORK_TASK_US for each of its ``tasks``), at
    most ``cap_ms`` (the device's MAX_JOB_TIMEOUT_MS: a job really stuck still times out);
    0, the device's default, when ``default_ms`` (its DEFAULT_JOB_TIMEOUT_MS) covers it."""
    predicted = (-(-int(macs) // WORK_MACS_PER_MS) + -(-int(bytes_moved) // WORK_BYTES_PER_MS)
                 + -(-int(tasks) * WORK_TASK_US // 1000))
    if predicted <= default_ms or cap_ms <= default_ms:
        return 0
    return min(predicted, cap_ms)

PACING_ON = 0x1

FAULT_HANG = 0x1         # the core stops responding mid-job (watchdog must recover)
FAULT_DMA_ERROR = 0x2    # the next DMA access fails as a bus error (EIO)
FAULT_BIT_FLIP = 0x4     # one bit of the job's last output is flipped
FAULT_LOST_IRQ = 0x8     # the completion is written but no interrupt is raised
FAULT_INTERNAL = 0x10    # the job hits an unexpected error inside the chip (EIO, the core keeps serving)

# ---- per-core bank ----
CORE_BANK_BASE = 0x100
CORE_BANK_SIZE = 0x100
MAX_CORES = (REGS_SIZE - CORE_BANK_BASE) // CORE_BANK_SIZE

RING_HEAD = 0x00         # core (u32): next entry the core will consume, 0..RING_ENTRIES-1
RING_TAIL = 0x04         # KMD  (u32): next entry the KMD will write; ring empty when head == tail
DOORBELL = 0x08          # KMD  (u32): incremented after moving the tail (the doorbell line wakes the core)
CQ_HEAD = 0x0C           # KMD  (u32): next completion the KMD will read
CQ_TAIL = 0x10           # core (u32): next completion the core will write
IRQ_STATUS = 0x14        # core (u32): IRQ_* cause of the last interrupt (the chip's watchdog while the core is down)
CORE_STATE = 0x18        # core (u32): CORE_IDLE / CORE_BUSY / CORE_HUNG (hung in a job, FAULT_HANG; until restarted)
IRQ_COUNT = 0x1C         # core (u32): interrupts raised (wraps)
JOBS_DONE = 0x20         # core (u64): jobs completed (ok or failed)
BUSY_CYCLES = 0x28       # core (u64): simulated cycles spent on jobs
CURRENT_JOB = 0x30       # core (u64): job id being executed, 0 when idle
JOB_START_NS = 0x38      # core (u64): CLOCK_MONOTONIC ns when CURRENT_JOB started (watchdog)
BUSY_NS = 0x40           # core (u64): wall-clock ns spent executing jobs (utilization)
JOB_TIMEOUT_MS = 0x48    # core (u32): the ring entry's timeout of CURRENT_JOB (0: WATCHDOG_MS)
CORE_RESTARTS = 0x4C     # chip (u32): times the chip's watchdog restarted this core (it died or hung); wraps
PQ_HEAD = 0x50           # KMD  (u32): next profile record the KMD will read (ring.PROFILE_ENTRIES)
PQ_TAIL = 0x54           # core (u32): next profile record the core will write
PQ_DROPPED = 0x58        # core (u32): profile records dropped because the queue was full (wraps)
UQ_SLOT = 0x5C           # core (u32): 1 + the queue-table slot of the user-queue job running (0: none)
UQ_SEQ = 0x60            # core (u64): that job's seq
UQ_ABORT_STATUS = 0x68   # chip, then core (i32): -errno the watchdog failed the user-queue job with; the
                         #   restarted core posts that completion and clears it
INVAL_DONE = 0x6C        # core (u32): OP_INVALIDATE entries the core has carried out (wraps)
UQ_AWAKE = 0x70          # core (u32): UQ_AWAKE_ON while its user-queue service is awake (serving, polling),
                         #   0 asleep, UQ_ASLEEP_TICKING a helper asleep for a tick (spec.queues, shared service)
UQ_ACKS = 0x80           # core (u32 x spec.queues.QUEUE_SLOTS): the Q_GENERATION of each queue-table slot
                         #   this core has taken in (spec.queues.ack_register)

UQ_AWAKE_ON = 1
UQ_ASLEEP_TICKING = 2

IRQ_JOB_DONE = 0x1
IRQ_JOB_ERROR = 0x2
IRQ_MMU_FAULT = 0x4
IRQ_WATCHDOG = 0x8
IRQ_CORE_RESTART = 0x10  # the core died or hung and was restarted: CORE_RESTARTS went up

CORE_IDLE = 0
CORE_BUSY = 1
CORE_HUNG = 2


def core_bank(core: int) -> int:
    """Byte offset of ``core``'s register bank."""
    if not 0 <= core < MAX_CORES:
        raise ValueError(f"core {core} out of range 0..{MAX_CORES - 1}")
    return CORE_BANK_BASE + core * CORE_BANK_SIZE


class RegisterView:
    """Typed access to a mapped register file (any writable buffer of REGS_SIZE bytes).

    Registers are read and written through memoryview casts: one aligned native
    load or store each, a few times cheaper than numpy scalar access (every job
    touches a few dozen registers on both sides)."""

    def __init__(self, buffer):
        import sys
        view = memoryview(buffer)
        if sys.byteorder != "little" or view.nbytes < REGS_SIZE:
            import numpy as np  # big-endian host (or a short buffer: numpy raises the error)
            self._u32 = np.frombuffer(buffer, dtype="<u4", count=REGS_SIZE // 4)
            self._u64 = np.frombuffer(buffer, dtype="<u8", count=REGS_SIZE // 8)
        else:
            bytes_view = view.cast("B")[:REGS_SIZE]
            self._u32 = bytes_view.cast("I")
            self._u64 = bytes_view.cast("Q")

    def words(self):
        """The (u32, u64) word views, indexed by offset >> 2 and offset >> 3: for a hot path
        that touches many registers and cannot afford a method call for each."""
        return self._u32, self._u64

    def read32(self, offset: int) -> int:
        return int(self._u32[offset >> 2])

    def write32(self, offset: int, value: int) -> None:
        self._u32[offset >> 2] = value & 0xFFFFFFFF

    def read64(self, offset: int) -> int:
        return int(self._u64[offset >> 3])

    def write64(self, offset: int, value: int) -> None:
        self._u64[offset >> 3] = value
