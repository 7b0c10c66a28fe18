/* A core's user-queue service loop in C (queue_service.c; the Python side: firmware_sim.queue_service). */

/* The hardware interface's offsets the loop uses (npu_hw.regs, npu_hw.queues, npu_hw.ring):
   firmware_sim.queue_service checks each against its npu_hw name when it is imported. */
#define NPU_UQ_REG_FAULT_INJECT 0x24
#define NPU_UQ_REG_WATCHDOG_MS 0x28
#define NPU_UQ_REG_PACING 0x40
#define NPU_UQ_REG_QUEUE_TABLE_GEN 0x44
#define NPU_UQ_BANK_RING_HEAD 0x00
#define NPU_UQ_BANK_RING_TAIL 0x04
#define NPU_UQ_BANK_CORE_STATE 0x18
#define NPU_UQ_BANK_BUSY_CYCLES 0x28
#define NPU_UQ_BANK_CURRENT_JOB 0x30
#define NPU_UQ_BANK_JOB_START_NS 0x38
#define NPU_UQ_BANK_BUSY_NS 0x40
#define NPU_UQ_BANK_JOB_TIMEOUT_MS 0x48
#define NPU_UQ_BANK_UQ_SLOT 0x5C
#define NPU_UQ_BANK_UQ_SEQ 0x60
#define NPU_UQ_BANK_UQ_AWAKE 0x70
#define NPU_UQ_AWAKE 1
#define NPU_UQ_ASLEEP_TICKING 2
#define NPU_UQ_CORE_IDLE 0
#define NPU_UQ_CORE_BUSY 1
#define NPU_UQ_PACING_ON 0x1
#define NPU_UQ_RING_ENTRY_SIZE 64
#define NPU_UQ_RING_OP_JOB 1
#define NPU_UQ_QTAB_SLOT_SIZE 128
#define NPU_UQ_Q_CONTROL 0x00
#define NPU_UQ_Q_TRACE 0x2
#define NPU_UQ_Q_CLAIM 0x24
#define NPU_UQ_Q_ERROR 0x28
#define NPU_UQ_Q_DONE 0x30
#define NPU_UQ_Q_BUSY_NS 0x40
#define NPU_UQ_Q_DEVICE_NS 0x48
#define NPU_UQ_Q_CYCLES 0x50
#define NPU_UQ_HDR_TAIL 0x08
#define NPU_UQ_HDR_DONE 0x10
#define NPU_UQ_HDR_WAITING 0x18
#define NPU_UQ_HDR_POLLING 0x1C
#define NPU_UQ_WAIT_FUTEX 0x2
#define NPU_UQ_HEADER_SIZE 256
#define NPU_UQ_ENTRY_SIZE 32
#define NPU_UQ_COMPLETION_SIZE 48
#define NPU_UQ_JOBS_PER_TURN 4
#define NPU_UQ_USER_JOB_BIT 0x8000000000000000
#define NPU_UQ_SEQ_MASK 0xFFFFFFFFFFFF

/* Why npu_uq_serve returned. */
#define NPU_UQ_IDLE 0        /* a whole round found no job: nothing left to run */
#define NPU_UQ_PYTHON 1      /* the next job of queue `at` needs the Python path (nothing of it done) */
#define NPU_UQ_FAILED 2      /* the job `failed_seq` of queue `at` failed in a C step: Python completes it */
#define NPU_UQ_BETWEEN 3     /* between two jobs: a ring-control entry or a table change for Python */
#define NPU_UQ_RING 4        /* the kernel ring holds jobs: Python's turn for it (a round ended) */
#define NPU_UQ_PLANS 16      /* job plans the loop remembers */
#define NPU_UQ_MAX_SERVED 64 /* queues one core serves at most (npu_hw.queues.QUEUE_SLOTS is 16) */

/* firmware_sim.idle_poll's constants (checked against it on import). */
#define NPU_UQ_GROW_START_NS 10000
#define NPU_UQ_CONTENDED_NS 20000
#define NPU_UQ_LOAD_CHECK_NS 2000000

/* firmware_sim.queue_service's policy of shared service (checked against it on import). */
#define NPU_UQ_JOIN_NS 20000     /* a job this long on the lead is a backlog for the queues waiting */
#define NPU_UQ_WAIT_NS 200000    /* a queue's job waiting this long (no progress) is one too */
#define NPU_UQ_TICK_MS 2         /* a helper's look while the lead is awake */
#define NPU_UQ_MAX_HELPERS 15

/* Why npu_uq_rest (queue_service.c) returned. */
#define NPU_UQ_WORK 0        /* work came: within the poll window, or before the core could sleep */
#define NPU_UQ_WOKE 1        /* it slept and a doorbell (or the safety-net timeout) woke it */
#define NPU_UQ_ASK 2         /* it would sleep, but Python sleeps it (a table change, no queue, recycling) */

/* One served queue (firmware_sim.user_queues.ServedQueue keeps `done` and `stopped` here). */
struct npu_uq {
    uint8_t *mem;                 /* the queue memory, through the IOMMU: header, entries, completions */
    uint8_t *slot;                /* its slot of the queue table */
    uint64_t done;                /* seq of the last job completed (mirrors Q_DONE) */
    uint32_t entries;             /* a power of two (checked when the slot was taken in) */
    uint32_t slot_index;
    uint32_t asid;
    uint32_t timeout_default_ms;  /* regs.job_timeout_ms of a job asking none, at `watchdog_ms` */
    uint32_t timeout_cap_ms;      /* ... and the clamp of one asking a timeout */
    uint32_t watchdog_ms;         /* the WATCHDOG_MS those two were worked out for */
    uint32_t priority;            /* Q_PRIORITY */
    int32_t stopped;
    int32_t completion_fd;
    int32_t doorbell_fd;          /* the chip's read end of the queue's doorbell (non-blocking) */
    uint64_t seen_done;           /* a helper's look: Q_DONE when it first saw the queue waiting, */
    int64_t seen_ns;              /*   and when (0: not waiting then) */
};

/* A job plan the loop may replay (firmware_sim.job_plans.replayable: no step, or one C call). */
struct npu_uq_plan {
    uint64_t generation;          /* job_plans' generation when remembered: any other means gone */
    uint64_t cmd_iova;
    uint32_t cmd_size, asid;
    const uint8_t *live;          /* the command buffer, as the first run's IOMMU translation */
    const uint8_t *copy;          /* the plan's copy of its bytes */
    const struct npu_step *steps;
    int32_t count;
    uint64_t cycles, device_ns;
    uint64_t last_ns;             /* its last replay's wall time (a long one calls a helper in) */
};

/* The adaptive idle poll of firmware_sim.idle_poll.IdlePoll, for npu_uq_run (the same rule). */
struct npu_uq_idle {
    int64_t window_ns, max_ns;
    int64_t checked_ns;           /* when the load was last looked at */
    int64_t preempted_at;         /* this process's involuntary context switches then */
    int32_t contended, cpus;
    int32_t loadavg_fd;           /* /proc/loadavg kept open, or -1 */
};

struct npu_uq_core {
    uint8_t *regs;                /* the register file */
    uint32_t bank;                /* this core's bank in it */
    uint8_t *ring;                /* the kernel ring */
    uint32_t ring_entries;
    uint8_t *table;               /* the queue table */
    uint32_t table_gen;           /* the QUEUE_TABLE_GEN the served queues reflect */
    uint32_t core;
    int32_t shared;               /* every core serves every queue, one job of a queue at a time (Q_CLAIM) */
    int32_t lead;                 /* shared: the core that polls and sets HDR_POLLING (core 0); helpers join */
    uint32_t lead_bank;           /* shared: the lead's bank (its UQ_AWAKE, CORE_STATE, JOB_START_NS) */
    int32_t helper_count;         /* the lead: the helpers it calls in on a backlog */
    uint32_t helper_banks[NPU_UQ_MAX_HELPERS];
    int32_t helper_fds[NPU_UQ_MAX_HELPERS];   /* ... through their kernel doorbells */
    int64_t called_ns;            /* the lead: when it last called a helper in */
    int32_t joins;                /* out: how often this core was called in or joined (a figure for tests) */
    struct npu_uq **queues;       /* by priority, highest first; each priority's turned round after a round */
    int32_t count;
    int32_t at, turn;             /* the round's position: the queue, the jobs it ran this turn */
    int32_t round_ran;            /* jobs run in this round so far (by Python too) */
    uint8_t *armed;               /* the watchdog's flag (wakeups.WatchdogArm), or NULL */
    int32_t watchdog_fd;
    const uint64_t *generation;   /* job_plans' generation now */
    struct npu_uq_plan plans[NPU_UQ_PLANS];
    struct npu_uq_idle idle;      /* npu_uq_run's idle poll */
    int32_t woken_by_kernel;      /* out, npu_uq_rest: the kernel doorbell was among what woke it */
    int32_t ran;                  /* out: jobs the last call ran */
    uint64_t failed_seq, failed_started_ns;   /* out, NPU_UQ_FAILED: the job, when it started */
    uint32_t failed_timeout_ms;
    int32_t failed_status, failed_plan, failed_step;   /* out, NPU_UQ_FAILED: the C status, the plan, its step */
};

/* Runs user-queue jobs round after round (each queue, by priority, at most JOBS_PER_TURN jobs a
   round, resuming at `at`/`turn`; after a round that ran a job, the queues of each priority
   turn by one, so the first of them becomes the last) while every job is one the loop can run: checked entry, no
   flags, no trace, no fault injection or pacing, a remembered plan whose bytes are unchanged.
   Posts each completion as firmware_sim.user_queues.UserQueues.post does. Returns NPU_UQ_*. */
int npu_uq_serve(struct npu_uq_core *c);

/* Polls the kernel ring and the queues' tails until work comes or CLOCK_MONOTONIC passes
   `deadline_ns`, yielding the CPU between looks; returns 1 if work came. */
int npu_uq_poll(struct npu_uq_core *c, int64_t deadline_ns);

/* Whether a queue not stopped has a job this core would take, or the kernel ring an entry. */
int npu_uq_has_work(struct npu_uq_core *c);

/* Shared service: take queue `q` (Q_CLAIM 0 -> this core + 1) and its Q_DONE and Q_ERROR; 1 if
   taken. npu_uq_release lets it go; npu_uq_release_all lets go of every queue this core holds
   (a new process of a core that died holding one). */
int npu_uq_claim(struct npu_uq_core *c, struct npu_uq *q);
void npu_uq_release(struct npu_uq_core *c, struct npu_uq *q);
void npu_uq_release_all(uint8_t *table, int32_t slots, uint32_t core);


/* IdlePoll.record and IdlePoll.window on `idle` (firmware_sim.idle_poll). */
void npu_uq_idle_record(struct npu_uq_idle *idle, int64_t idle_ns, int64_t polled_ns);
int64_t npu_uq_idle_window(struct npu_uq_idle *idle);

/* The core's loop over its user queues while nothing needs Python: npu_uq_serve; when it finds
   nothing, the idle poll (the window of `c->idle`, adapted as IdlePoll adapts) and npu_uq_rest,
   then npu_uq_serve again. Returns what npu_uq_serve returns for Python (PYTHON, FAILED, BETWEEN),
   NPU_UQ_RING when the kernel ring holds an entry, the table changed or the kernel doorbell rang
   (Python's turn: drain_all), or NPU_UQ_ASK + 16 when npu_uq_rest asks (the core's way to sleep). */
int npu_uq_run(struct npu_uq_core *c, int32_t kernel_fd, int32_t may_sleep, int32_t sleep_ms);
#define NPU_UQ_ASKS 18       /* npu_uq_run: NPU_UQ_ASK + 16 */
