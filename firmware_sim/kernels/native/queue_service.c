/* A core's user-queue service loop: the steps of firmware_sim.core.Core.run_user_job and
   firmware_sim.user_queues (next_entry, post) for the jobs they cost most on, without Python.

A job runs here only when nothing about it needs more than these steps: the entry is this seq's
and carries no flag, the queue is not traced, no fault is injected, no pacing, WATCHDOG_MS is the
one the queue's timeouts were worked out for, and its command buffer is one whose job plan the
Python path made and handed over (firmware_sim.queue_service: a plan with no step, or whose every
step is a C kernel call), with the same bytes now. Anything else returns to Python before any of
the job is done (NPU_UQ_PYTHON), which then runs it the one way it always has: its checks are the
checks. A plan is remembered with job_plans' generation, which every drop of a plan (an
invalidation, an eviction) moves: a plan whose generation is not the current one is never used.
Every value read from the client's queue memory is read once (a hostile client may rewrite it
while the core reads). Stores other processes read are atomic, and the two store-then-load pairs of
the wake-up protocol (HDR_DONE then HDR_WAITING; CURRENT_JOB then the watchdog's flag) have a full
fence between them, as the Python path's getppid() gives. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "int8_kernels.h"
#include "queue_service.h"

#define U32(base, off) ((uint32_t *)((base) + (off)))
#define U64(base, off) ((uint64_t *)((base) + (off)))
#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ADD64(p, v) STORE((p), LOAD(p) + (uint64_t)(v))

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static struct npu_uq_plan *find_plan(struct npu_uq_core *c, uint32_t asid, uint64_t iova, uint32_t size)
{
    uint64_t generation = LOAD(c->generation);
    for (int i = 0; i < NPU_UQ_PLANS; i++) {
        struct npu_uq_plan *p = &c->plans[i];
        if (p->live != NULL && p->generation == generation && p->cmd_iova == iova && p->cmd_size == size
            && p->asid == asid)
            return p;
    }
    return NULL;
}

/* Whether the kernel ring's next entry is a control entry (Python carries those out between
   any two jobs; ring jobs wait for the round's end). */
static int ring_control_waits(const struct npu_uq_core *c)
{
    uint8_t *bank = c->regs + c->bank;
    uint32_t head = LOAD(U32(bank, NPU_UQ_BANK_RING_HEAD));
    if (head == LOAD(U32(bank, NPU_UQ_BANK_RING_TAIL)))
        return 0;
    if (head >= c->ring_entries)
        return 1;                 /* Python's drain_ring deals with whatever this is */
    return LOAD(U32(c->ring, (size_t)head * NPU_UQ_RING_ENTRY_SIZE)) != NPU_UQ_RING_OP_JOB;
}

static int ring_waits(const struct npu_uq_core *c)
{
    uint8_t *bank = c->regs + c->bank;
    return LOAD(U32(bank, NPU_UQ_BANK_RING_HEAD)) != LOAD(U32(bank, NPU_UQ_BANK_RING_TAIL));
}

/* ---- shared service: every core serves every queue, one job of a queue at a time ----
   The lead (core 0) polls and keeps the clients' HDR_POLLING; a helper sleeps on its kernel
   doorbell and takes a queue's job only on a backlog: the lead asleep (what is left is the
   helper's), the lead in one job for NPU_UQ_JOIN_NS, or the job waiting NPU_UQ_WAIT_NS without
   the queue moving (the lead preempted). The lead calls a helper in when it starts or ends a
   long job while another queue waits. Q_CLAIM (the queue table: no client reaches it) keeps
   one job of a queue at a time, and Q_DONE and Q_ERROR there are what every core goes by. */

static uint32_t awake_of(const struct npu_uq_core *c, uint32_t bank)
{
    return LOAD(U32(c->regs + bank, NPU_UQ_BANK_UQ_AWAKE));
}

/* Q_DONE and Q_ERROR as the table has them (another core may have moved them). */
static void sync_queue(const struct npu_uq_core *c, struct npu_uq *q)
{
    if (!c->shared)
        return;
    q->done = LOAD(U64(q->slot, NPU_UQ_Q_DONE));
    if (LOAD(U32(q->slot, NPU_UQ_Q_ERROR)) != 0)
        q->stopped = 1;
}

static void call_helper(struct npu_uq_core *c, const struct npu_uq *busy, int need, int sleeping);

/* The lead starts a long job of `q`: a helper comes at once for a queue waiting, and one asleep
   for long ticks from now (a job submitted meanwhile finds it within a tick). */
static void long_job(struct npu_uq_core *c, const struct npu_uq *q)
{
    call_helper(c, q, 1, 0);
    call_helper(c, q, 0, 1);
}

static int claimed_by_other(const struct npu_uq_core *c, const struct npu_uq *q)
{
    uint32_t owner = c->shared ? LOAD(U32(q->slot, NPU_UQ_Q_CLAIM)) : 0;
    return owner != 0 && owner != c->core + 1;
}

int npu_uq_claim(struct npu_uq_core *c, struct npu_uq *q)
{
    if (!c->shared)
        return 1;
    uint32_t expected = 0;
    if (!__atomic_compare_exchange_n(U32(q->slot, NPU_UQ_Q_CLAIM), &expected, c->core + 1, 0,
                                     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return expected == c->core + 1;
    sync_queue(c, q);
    return 1;
}

void npu_uq_release(struct npu_uq_core *c, struct npu_uq *q)
{
    if (!c->shared)
        return;
    STORE(U32(q->slot, NPU_UQ_Q_CLAIM), 0);
    /* The claim let go of before the lead's UQ_AWAKE is read (has_work): either the lead, going
       to sleep, sees the queue free, or this core sees the lead asleep and takes the rest. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void npu_uq_release_all(uint8_t *table, int32_t slots, uint32_t core)
{
    for (int32_t slot = 0; slot < slots; slot++) {
        uint32_t mine = core + 1;
        __atomic_compare_exchange_n(U32(table, (size_t)slot * NPU_UQ_QTAB_SLOT_SIZE + NPU_UQ_Q_CLAIM), &mine, 0, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
}

static int pending(const struct npu_uq_core *c, struct npu_uq *q)
{
    sync_queue(c, q);
    return !q->stopped && LOAD(U64(q->mem, NPU_UQ_HDR_TAIL)) != q->done;
}

/* Whether this core takes the next job of `q` now (see above). */
static int wanted(struct npu_uq_core *c, struct npu_uq *q)
{
    if (!pending(c, q)) {
        q->seen_ns = 0;
        return 0;
    }
    if (claimed_by_other(c, q))
        return 0;
    if (!c->shared || c->lead)
        return 1;
    int64_t now = now_ns();
    if (q->seen_ns == 0 || q->seen_done != q->done) {
        q->seen_done = q->done;
        q->seen_ns = now;
    }
    if (awake_of(c, c->lead_bank) != NPU_UQ_AWAKE)
        return 1;
    const uint8_t *lead = c->regs + c->lead_bank;
    if (LOAD(U32(lead, NPU_UQ_BANK_CORE_STATE)) == NPU_UQ_CORE_BUSY
        && now - (int64_t)LOAD(U64(lead, NPU_UQ_BANK_JOB_START_NS)) >= NPU_UQ_JOIN_NS)
        return 1;
    return now - q->seen_ns >= NPU_UQ_WAIT_NS;
}

/* The lead: call a helper in (its kernel doorbell) if none is awake (with `sleeping`: none
   even ticking) and `need` queues other than `busy` have a job nobody took; once a tick at most. */
static void call_helper(struct npu_uq_core *c, const struct npu_uq *busy, int need, int sleeping)
{
    if (!c->shared || !c->lead || c->helper_count == 0)
        return;
    int64_t now = now_ns();
    if (now - c->called_ns < NPU_UQ_TICK_MS * 1000000LL)
        return;
    int waiting = 0;
    for (int32_t i = 0; i < c->count && waiting < need; i++) {
        struct npu_uq *q = c->queues[i];
        waiting += q != busy && pending(c, q) && LOAD(U32(q->slot, NPU_UQ_Q_CLAIM)) == 0;
    }
    if (waiting < need)
        return;
    for (int32_t i = 0; i < c->helper_count; i++) {
        uint32_t awake = awake_of(c, c->helper_banks[i]);
        if (awake == NPU_UQ_AWAKE || (sleeping && awake == NPU_UQ_ASLEEP_TICKING))
            return;
    }
    uint64_t one = 1;
    (void)!write(c->helper_fds[0], &one, sizeof(one));
    c->called_ns = now;
    c->joins++;
}

/* FUTEX_WAKE of one process asleep on HDR_DONE's low 32 bits (NPU_QUEUE_WAIT_FUTEX): shared (the waiter
   maps the same page), never blocks, and reads nothing of the client's. */
static void wake_futex(const struct npu_uq *q)
{
    (void)syscall(SYS_futex, (uint32_t *)(q->mem + NPU_UQ_HDR_DONE), FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void signal_waiter(const struct npu_uq *q)
{
    if (q->completion_fd < 0)
        return;
    const char one = 1;
    /* EAGAIN: the line is full, a wake-up is pending anyway; EPIPE: nobody reads it any more. */
    (void)!write(q->completion_fd, &one, 1);
}

/* The Python path's post(): the completion, HDR_DONE, the slot's counters, then (after a full
   fence) the waiter's signal if it sleeps, as HDR_WAITING asks (npu_hw.queues.wants_futex, wants_line). */
static void post(const struct npu_uq_core *c, struct npu_uq *q, uint64_t seq, uint64_t cycles,
                 uint64_t device_ns, uint64_t exec_ns)
{
    uint8_t *at = q->mem + NPU_UQ_HEADER_SIZE + (size_t)q->entries * NPU_UQ_ENTRY_SIZE
                  + (size_t)(seq & (q->entries - 1)) * NPU_UQ_COMPLETION_SIZE;
    /* seq, status, core, cycles, device_ns, fault_iova, exec_ns (queues.COMPLETION_STRUCT) */
    uint64_t record[6] = {seq, (uint64_t)c->core << 32, cycles, device_ns, 0, exec_ns};
    memcpy(at, record, sizeof(record));
    STORE(U64(q->mem, NPU_UQ_HDR_DONE), seq);
    q->done = seq;
    uint8_t *slot = q->slot;
    STORE(U64(slot, NPU_UQ_Q_DONE), seq);
    ADD64(U64(slot, NPU_UQ_Q_BUSY_NS), exec_ns);
    if (cycles) {
        ADD64(U64(slot, NPU_UQ_Q_DEVICE_NS), device_ns);
        ADD64(U64(slot, NPU_UQ_Q_CYCLES), cycles);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);   /* HDR_DONE visible before HDR_WAITING is read */
    uint32_t waiting = LOAD(U32(q->mem, NPU_UQ_HDR_WAITING));   /* read once: the client's to change */
    if (waiting & NPU_UQ_WAIT_FUTEX)
        wake_futex(q);
    if (waiting & ~(uint32_t)NPU_UQ_WAIT_FUTEX)          /* any other bit (a pre-2.8 client's 1): the line */
        signal_waiter(q);
}

/* One job of `q` if the loop can run it: 1 ran, 0 left to Python (nothing done), -1 failed in a
   C step (the failure recorded in `c`, the job still running for the watchdog). */
static int run_job(struct npu_uq_core *c, struct npu_uq *q, uint64_t seq)
{
    const uint8_t *entry = q->mem + NPU_UQ_HEADER_SIZE + (size_t)(seq & (q->entries - 1)) * NPU_UQ_ENTRY_SIZE;
    /* seq, cmd_iova (u64), cmd_size, timeout_ms, flags, reserved (u32): read once each */
    uint64_t written = LOAD((const uint64_t *)entry);
    uint64_t cmd_iova = LOAD((const uint64_t *)(entry + 8));
    uint32_t cmd_size = LOAD((const uint32_t *)(entry + 16));
    uint32_t timeout_ms = LOAD((const uint32_t *)(entry + 20));
    uint32_t flags = LOAD((const uint32_t *)(entry + 24));
    if (written != seq || flags != 0)
        return 0;
    uint8_t *regs = c->regs, *bank = c->regs + c->bank;
    if (LOAD(U32(regs, NPU_UQ_REG_FAULT_INJECT)) || LOAD(U32(regs, NPU_UQ_REG_PACING)) & NPU_UQ_PACING_ON
        || LOAD(U32(regs, NPU_UQ_REG_WATCHDOG_MS)) != q->watchdog_ms
        || LOAD(U32(q->slot, NPU_UQ_Q_CONTROL)) & NPU_UQ_Q_TRACE)
        return 0;
    struct npu_uq_plan *plan = NULL;
    if (cmd_size != 0) {
        plan = find_plan(c, q->asid, cmd_iova, cmd_size);
        if (plan == NULL || memcmp(plan->live, plan->copy, cmd_size) != 0)
            return 0;
    }
    if (plan != NULL && plan->last_ns >= NPU_UQ_JOIN_NS)
        long_job(c, q);
    if (timeout_ms == 0)
        timeout_ms = q->timeout_default_ms;
    else if (timeout_ms > q->timeout_cap_ms)
        timeout_ms = q->timeout_cap_ms;
    uint64_t job_id = NPU_UQ_USER_JOB_BIT | ((uint64_t)q->slot_index << 48) | (seq & NPU_UQ_SEQ_MASK);
    int64_t started = now_ns();
    STORE(U64(bank, NPU_UQ_BANK_JOB_START_NS), (uint64_t)started);
    STORE(U32(bank, NPU_UQ_BANK_JOB_TIMEOUT_MS), timeout_ms);
    STORE(U32(bank, NPU_UQ_BANK_UQ_SLOT), q->slot_index + 1);
    STORE(U64(bank, NPU_UQ_BANK_UQ_SEQ), seq);
    STORE(U64(bank, NPU_UQ_BANK_CURRENT_JOB), job_id);
    STORE(U32(bank, NPU_UQ_BANK_CORE_STATE), NPU_UQ_CORE_BUSY);
    if (c->armed != NULL) {
        __atomic_thread_fence(__ATOMIC_SEQ_CST);   /* CURRENT_JOB visible before the flag is read */
        if (!LOAD(c->armed)) {
            STORE(c->armed, 1);
            uint64_t one = 1;
            (void)!write(c->watchdog_fd, &one, sizeof(one));
        }
    }
    uint64_t cycles = 0, device_ns = 0;
    if (plan != NULL) {
        int32_t done = 0;
        int status = npu_steps_run(plan->steps, plan->count, &done);
        if (status != 0) {
            c->failed_seq = seq;
            c->failed_started_ns = (uint64_t)started;
            c->failed_timeout_ms = timeout_ms;
            c->failed_status = status;
            c->failed_plan = (int32_t)(plan - c->plans);
            c->failed_step = done;
            return -1;
        }
        cycles = plan->cycles;
        device_ns = plan->device_ns;
    }
    uint64_t exec_ns = (uint64_t)(now_ns() - started);
    if (plan != NULL)
        plan->last_ns = exec_ns;
    post(c, q, seq, cycles, device_ns, exec_ns);
    STORE(U64(bank, NPU_UQ_BANK_CURRENT_JOB), 0);
    STORE(U32(bank, NPU_UQ_BANK_UQ_SLOT), 0);
    ADD64(U64(bank, NPU_UQ_BANK_BUSY_NS), exec_ns);
    ADD64(U64(bank, NPU_UQ_BANK_BUSY_CYCLES), cycles);
    STORE(U32(bank, NPU_UQ_BANK_CORE_STATE), NPU_UQ_CORE_IDLE);
    if (exec_ns >= NPU_UQ_JOIN_NS)
        call_helper(c, q, 1, 0);      /* jobs came in while it ran: a backlog */
    return 1;
}

/* Round-robin among equals: each priority's queues turn by one (UserQueues.turn does the same). */
static void turn_queues(struct npu_uq_core *c)
{
    for (int32_t start = 0; start < c->count;) {
        int32_t end = start + 1;
        while (end < c->count && c->queues[end]->priority == c->queues[start]->priority)
            end++;
        if (end - start > 1) {
            struct npu_uq *first = c->queues[start];
            memmove(&c->queues[start], &c->queues[start + 1], sizeof(c->queues[0]) * (size_t)(end - start - 1));
            c->queues[end - 1] = first;
        }
        start = end;
    }
}

int npu_uq_serve(struct npu_uq_core *c)
{
    c->ran = 0;
    for (;;) {
        for (; c->at < c->count; c->at++, c->turn = 0) {
            struct npu_uq *q = c->queues[c->at];
            for (; c->turn < NPU_UQ_JOBS_PER_TURN; c->turn++) {
                if (c->shared && (!wanted(c, q) || !npu_uq_claim(c, q)))
                    break;                     /* nothing for this core, or another core runs its job */
                if (q->stopped) {
                    npu_uq_release(c, q);
                    break;
                }
                uint64_t tail = LOAD(U64(q->mem, NPU_UQ_HDR_TAIL));
                if (tail == q->done) {
                    npu_uq_release(c, q);
                    break;
                }
                /* PYTHON and FAILED return with the queue claimed: Python ends the job and lets go. */
                if (tail < q->done || tail - q->done > q->entries)
                    return NPU_UQ_PYTHON;      /* a garbled tail: Python stops the queue */
                int ran = run_job(c, q, q->done + 1);
                if (ran == 0) {
                    long_job(c, q);            /* a job for Python: a long one */
                    return NPU_UQ_PYTHON;
                }
                if (ran < 0)
                    return NPU_UQ_FAILED;
                npu_uq_release(c, q);
                c->ran++;
                c->round_ran++;
                if (ring_control_waits(c) || LOAD(U32(c->regs, NPU_UQ_REG_QUEUE_TABLE_GEN)) != c->table_gen) {
                    c->turn++;
                    return NPU_UQ_BETWEEN;
                }
            }
        }
        int round_ran = c->round_ran;
        c->at = c->turn = c->round_ran = 0;
        if (!round_ran)
            return NPU_UQ_IDLE;
        turn_queues(c);
        /* The end of a round: the kernel ring's turn (Python's), or another round. */
        if (ring_waits(c) || LOAD(U32(c->regs, NPU_UQ_REG_QUEUE_TABLE_GEN)) != c->table_gen)
            return NPU_UQ_RING;
    }
}

int npu_uq_has_work(struct npu_uq_core *c)
{
    if (ring_waits(c))
        return 1;
    for (int32_t i = 0; i < c->count; i++)
        if (wanted(c, c->queues[i]))
            return 1;
    return 0;
}

int npu_uq_poll(struct npu_uq_core *c, int64_t deadline_ns)
{
    while (now_ns() < deadline_ns) {
        if (npu_uq_has_work(c))
            return 1;
        sched_yield();            /* any runnable host process (the KMD, a client) goes first */
    }
    return 0;
}

/* The lead's (or an unshared core's) HDR_POLLING of its queues, and its UQ_AWAKE: NPU_UQ_AWAKE
   awake, 0 asleep (a helper: NPU_UQ_ASLEEP_TICKING when it sleeps a tick only). A helper keeps
   its hands off HDR_POLLING: the clients' doorbells are the lead's to answer. */
static void set_polling(const struct npu_uq_core *c, uint32_t polling)
{
    if (!c->shared || c->lead)
        for (int32_t i = 0; i < c->count; i++)
            STORE(U32(c->queues[i]->mem, NPU_UQ_HDR_POLLING), polling ? 1 : 0);
    STORE(U32(c->regs + c->bank, NPU_UQ_BANK_UQ_AWAKE), polling);
}

/* Empty a doorbell: the kernel's eventfd (8 bytes) or a queue's pipe (the chip's non-blocking end). */
static void consume(int fd, int kernel)
{
    if (kernel) {
        uint64_t count;
        (void)!read(fd, &count, sizeof(count));
        return;
    }
    char sink[4096];
    while (read(fd, sink, sizeof(sink)) == (ssize_t)sizeof(sink))
        ;
}

/* Where the core goes idle, without Python: polls as npu_uq_poll until `deadline_ns`; then clears
   every served queue's HDR_POLLING (clients ring from now on), a full fence, and looks once more
   (NPU_UQ_WORK, polling set again, if work came in between). With `may_sleep`, queues served and
   the table unchanged, it then sleeps on the kernel doorbell `kernel_fd` (an eventfd) and the
   queues' doorbells at most `sleep_ms`, consumes what woke it, sets HDR_POLLING again and returns
   NPU_UQ_WOKE; else NPU_UQ_ASK with HDR_POLLING cleared (core.Core.sleep's way). */
static int npu_uq_rest(struct npu_uq_core *c, int64_t deadline_ns, int32_t kernel_fd, int32_t may_sleep, int32_t sleep_ms)
{
    if (npu_uq_poll(c, deadline_ns))
        return NPU_UQ_WORK;
    int helper = c->shared && !c->lead;
    /* A helper looks again in a tick while the lead is awake and serves several queues (it may be
       preempted with one's work waiting; a single queue's client gains nothing from a second core). */
    int ticking = helper && c->count > 1 && awake_of(c, c->lead_bank) == NPU_UQ_AWAKE;
    set_polling(c, ticking ? NPU_UQ_ASLEEP_TICKING : 0);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);   /* the cleared flags visible before the tails are read */
    if (npu_uq_has_work(c)) {
        set_polling(c, NPU_UQ_AWAKE);
        return NPU_UQ_WORK;
    }
    if (!may_sleep || c->count == 0 || c->count > NPU_UQ_MAX_SERVED
        || LOAD(U32(c->regs, NPU_UQ_REG_QUEUE_TABLE_GEN)) != c->table_gen)
        return NPU_UQ_ASK;
    struct pollfd fds[1 + NPU_UQ_MAX_SERVED];
    int n = 0;
    fds[n++] = (struct pollfd){.fd = kernel_fd, .events = POLLIN};
    for (int32_t i = 0; i < c->count && !helper; i++)
        if (c->queues[i]->doorbell_fd >= 0)
            fds[n++] = (struct pollfd){.fd = c->queues[i]->doorbell_fd, .events = POLLIN};
    if (ticking)
        sleep_ms = NPU_UQ_TICK_MS;
    c->woken_by_kernel = 0;
    if (poll(fds, (nfds_t)n, sleep_ms) > 0)
        for (int i = 0; i < n; i++)
            if (fds[i].revents & POLLIN) {
                consume(fds[i].fd, i == 0);
                c->woken_by_kernel |= i == 0;
            }
    set_polling(c, NPU_UQ_AWAKE);
    return NPU_UQ_WOKE;
}

void npu_uq_idle_record(struct npu_uq_idle *idle, int64_t idle_ns, int64_t polled_ns)
{
    if (idle_ns <= polled_ns)
        return;                                   /* caught by the poll */
    if (idle_ns <= idle->max_ns) {
        int64_t grown = idle->window_ns * 2 > NPU_UQ_GROW_START_NS ? idle->window_ns * 2 : NPU_UQ_GROW_START_NS;
        idle->window_ns = grown < idle->max_ns ? grown : idle->max_ns;
    } else {
        idle->window_ns /= 2;
        if (idle->window_ns < NPU_UQ_GROW_START_NS)
            idle->window_ns = 0;
    }
}

/* Runnable tasks on the machine besides this one (/proc/loadavg's 4th field), as RunQueueProbe. */
static int runnable_others(int fd)
{
    char text[128];
    ssize_t n = fd < 0 ? -1 : pread(fd, text, sizeof(text) - 1, 0);
    if (n <= 0)
        return 0;
    text[n] = 0;
    const char *at = text;
    for (int field = 0; field < 3 && at != NULL; field++) {
        at = strchr(at, ' ');
        if (at != NULL)
            at++;
    }
    return at == NULL ? 0 : atoi(at) - 1;
}

int64_t npu_uq_idle_window(struct npu_uq_idle *idle)
{
    if (idle->window_ns == 0)
        return 0;
    int64_t now = now_ns();
    if (now - idle->checked_ns >= NPU_UQ_LOAD_CHECK_NS) {
        idle->checked_ns = now;
        struct rusage usage;
        int64_t preempted = getrusage(RUSAGE_SELF, &usage) == 0 ? (int64_t)usage.ru_nivcsw : idle->preempted_at;
        idle->contended = preempted != idle->preempted_at || runnable_others(idle->loadavg_fd) >= idle->cpus;
        idle->preempted_at = preempted;
    }
    if (idle->contended && idle->window_ns > NPU_UQ_CONTENDED_NS)
        return NPU_UQ_CONTENDED_NS;
    return idle->window_ns;
}

int npu_uq_run(struct npu_uq_core *c, int32_t kernel_fd, int32_t may_sleep, int32_t sleep_ms)
{
    int32_t ran = 0, ran_awake = 1;
    for (;;) {
        int why = npu_uq_serve(c);
        ran += c->ran;
        ran_awake |= c->ran > 0;
        if (why != NPU_UQ_IDLE || ring_waits(c) || LOAD(U32(c->regs, NPU_UQ_REG_QUEUE_TABLE_GEN)) != c->table_gen) {
            c->ran = ran;
            return why == NPU_UQ_IDLE ? NPU_UQ_RING : why;
        }
        /* A helper that woke for a look and found nothing to take sleeps again without a poll. */
        int64_t since = now_ns(), window = npu_uq_idle_window(&c->idle);
        if (c->shared && !c->lead && !ran_awake)
            window = 0;
        int rest = npu_uq_rest(c, since + window, kernel_fd, may_sleep, sleep_ms);
        ran_awake = rest == NPU_UQ_WORK;
        if (rest == NPU_UQ_ASK) {
            c->ran = ran;
            return NPU_UQ_ASKS;
        }
        if (rest == NPU_UQ_WOKE) {
            int helper = c->shared && !c->lead;
            if (!helper)                           /* a helper's window is not adapted: it stays short */
                npu_uq_idle_record(&c->idle, now_ns() - since, window);
            if (c->woken_by_kernel) {              /* the ring, a control entry, a successor, a call-in: Python's */
                c->ran = ran;
                return NPU_UQ_RING;
            }
            if (!helper)                           /* woken with two queues waiting: helpers tick from now */
                call_helper(c, NULL, 2, 1);
        }
    }
}
