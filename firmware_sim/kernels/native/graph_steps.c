/* One graph job on two threads of a core's process: the emulator's two cores of one job.

The steps come in a topological order. The calling thread and one helper thread (per process,
started on first use, asleep between jobs) each take the first step, within a short look-ahead
of the first one not taken, whose dependencies are all done: a step is claimed (0 -> 1, a
compare-and-swap) only once it can run, so a thread never holds a step it has not started and
the other thread never waits on a step nobody runs. With nothing ready, a thread waits for the
next step to end: a bounded spin on the count of steps done, then a futex on it (a thread
preempted mid-step costs the other its CPU time, not a spinning CPU). A helper that has not
woken by the time the caller has run every step is called off, under the lock, so a job never
waits for a wake-up it does not need. Every kernel allocates its own scratch memory (malloc
per call), so two may run at once. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "int8_kernels.h"
#include "graph_steps.h"

extern void omp_set_num_threads(int) __attribute__((weak));

enum { HELPER_IDLE, HELPER_PENDING, HELPER_RUNNING };
enum { STEP_FREE, STEP_TAKEN, STEP_DONE };
#define SPINS 200           /* pause loops (~10 ns each) before sleeping on the futex */
#define LOOKAHEAD 8         /* steps past the first untaken one a thread looks at for a ready one */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pid_t owner;                 /* the process whose helper this is (0: none; a fork has none) */
    const struct npu_graph *job;
    int32_t state;               /* HELPER_*: set under the lock, read by the caller spinning */
    int32_t first;               /* no step before this position is free (a hint, only grows) */
    int32_t ended;               /* steps done (or the job failed): the futex waiters watch it */
    int32_t sleepers;            /* threads asleep on `ended` */
    int32_t status, failed;      /* the first failure */
} G;

static long futex(int32_t *addr, int op, int32_t value)
{
    return syscall(SYS_futex, addr, op, value, NULL, NULL, 0);
}

static void step_ended(void)
{
    __atomic_add_fetch(&G.ended, 1, __ATOMIC_ACQ_REL);
    if (__atomic_load_n(&G.sleepers, __ATOMIC_ACQUIRE))
        futex(&G.ended, FUTEX_WAKE_PRIVATE, INT32_MAX);
}

/* Until `ended` moves from `seen`: a bounded spin, then the futex. */
static void wait_progress(int32_t seen)
{
    for (unsigned spins = 0; spins < SPINS; spins++) {
        if (__atomic_load_n(&G.ended, __ATOMIC_ACQUIRE) != seen)
            return;
        __builtin_ia32_pause();
    }
    __atomic_add_fetch(&G.sleepers, 1, __ATOMIC_ACQ_REL);
    if (__atomic_load_n(&G.ended, __ATOMIC_ACQUIRE) == seen)
        futex(&G.ended, FUTEX_WAIT_PRIVATE, seen);
    __atomic_sub_fetch(&G.sleepers, 1, __ATOMIC_ACQ_REL);
}

static int ready(const struct npu_graph *g, int32_t i)
{
    for (int32_t k = g->dep_start[i]; k < g->dep_start[i + 1]; k++)
        if (__atomic_load_n(&g->done[g->deps[k]], __ATOMIC_ACQUIRE) != STEP_DONE)
            return 0;
    return 1;
}

/* Claims a ready step: its position, -1 when every step is taken, -2 when none is ready yet. */
static int32_t claim(const struct npu_graph *g)
{
    int32_t first = __atomic_load_n(&G.first, __ATOMIC_ACQUIRE);
    while (first < g->count && __atomic_load_n(&g->done[first], __ATOMIC_ACQUIRE) != STEP_FREE)
        first++;
    if (first >= g->count)
        return -1;
    __atomic_store_n(&G.first, first, __ATOMIC_RELEASE);   /* a hint: a stale lower one costs a longer scan */
    int32_t end = first + LOOKAHEAD < g->count ? first + LOOKAHEAD : g->count;
    for (int32_t i = first; i < end; i++) {
        int32_t free_step = STEP_FREE;
        if (__atomic_load_n(&g->done[i], __ATOMIC_ACQUIRE) == STEP_FREE && ready(g, i)
            && __atomic_compare_exchange_n(&g->done[i], &free_step, STEP_TAKEN, 0, __ATOMIC_ACQ_REL,
                                           __ATOMIC_ACQUIRE))
            return i;
    }
    return -2;
}

static void work(const struct npu_graph *g)
{
    for (;;) {
        if (__atomic_load_n(&G.status, __ATOMIC_ACQUIRE))
            return;
        int32_t seen = __atomic_load_n(&G.ended, __ATOMIC_ACQUIRE);
        int32_t i = claim(g);
        if (i == -1)
            return;
        if (i == -2) {
            wait_progress(seen);
            continue;
        }
        int status = npu_step_run(&g->steps[i]);
        if (status != 0) {
            int32_t none = 0;
            if (__atomic_compare_exchange_n(&G.status, &none, status, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                __atomic_store_n(&G.failed, i, __ATOMIC_RELEASE);
            step_ended();                 /* wakes a waiter, which then sees the failure */
            return;
        }
        __atomic_store_n(&g->done[i], STEP_DONE, __ATOMIC_RELEASE);
        step_ended();
    }
}

static void *helper(void *unused)
{
    (void)unused;
    if (omp_set_num_threads)
        omp_set_num_threads(1);      /* oneDNN's GEMMs single-threaded here too, as in the caller */
    pthread_mutex_lock(&G.lock);
    for (;;) {
        while (G.state != HELPER_PENDING)
            pthread_cond_wait(&G.wake, &G.lock);
        G.state = HELPER_RUNNING;
        const struct npu_graph *g = G.job;
        pthread_mutex_unlock(&G.lock);
        work(g);
        pthread_mutex_lock(&G.lock);
        __atomic_store_n(&G.state, HELPER_IDLE, __ATOMIC_RELEASE);
        if (__atomic_load_n(&G.sleepers, __ATOMIC_ACQUIRE))
            futex(&G.state, FUTEX_WAKE_PRIVATE, 1);
    }
    return NULL;
}

static int helper_ready(void)
{
    pid_t me = getpid();
    if (G.owner == me)
        return 1;
    /* First use in this process (or in a child forked after the parent started one, where
       the parent's thread does not exist): a fresh lock and helper. */
    pthread_mutex_init(&G.lock, NULL);
    pthread_cond_init(&G.wake, NULL);
    G.state = HELPER_IDLE;
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int made = pthread_create(&thread, &attr, helper, NULL);
    pthread_attr_destroy(&attr);
    if (made != 0)
        return 0;
    G.owner = me;
    return 1;
}

int npu_graph_run(const struct npu_graph *g, int32_t *failed)
{
    memset(g->done, 0, sizeof(int32_t) * (size_t)g->count);
    G.first = 0;
    G.ended = 0;
    G.status = 0;
    G.failed = 0;
    int helped = helper_ready();
    if (helped) {
        pthread_mutex_lock(&G.lock);
        G.job = g;
        G.state = HELPER_PENDING;
        pthread_cond_signal(&G.wake);
        pthread_mutex_unlock(&G.lock);
    }
    work(g);
    if (helped) {
        pthread_mutex_lock(&G.lock);
        if (G.state == HELPER_PENDING)       /* not awake yet: no need of it any more */
            G.state = HELPER_IDLE;
        pthread_mutex_unlock(&G.lock);
        /* The helper's last step (the caller found every step taken, or a failure): spin,
           then sleep on the state the helper wakes when it goes idle. */
        for (unsigned spins = 0; __atomic_load_n(&G.state, __ATOMIC_ACQUIRE) == HELPER_RUNNING;) {
            if (++spins < SPINS) {
                __builtin_ia32_pause();
                continue;
            }
            __atomic_add_fetch(&G.sleepers, 1, __ATOMIC_ACQ_REL);
            if (__atomic_load_n(&G.state, __ATOMIC_ACQUIRE) == HELPER_RUNNING)
                futex(&G.state, FUTEX_WAIT_PRIVATE, HELPER_RUNNING);
            __atomic_sub_fetch(&G.sleepers, 1, __ATOMIC_ACQ_REL);
        }
        G.job = NULL;
    }
    *failed = G.failed;
    return G.status;
}
