/* One graph job on two threads of a core's process: the emulator's two cores of one job.

The steps come in a topological order. The calling thread and one helper thread (per process,
started on first use, asleep between jobs) each claim the next step (an atomic counter), wait
until the steps it depends on are done (spinning briefly, then yielding the CPU), run it and
mark it done. A step's dependencies are claimed before it, by a thread that runs them, so both
threads always progress. A helper that has not woken by the time the caller has run every step
is called off, under the lock, so a job never waits for a wake-up it does not need.
Every kernel allocates its own scratch memory (malloc per call), so two may run at once. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

#include "int8_kernels.h"
#include "graph_steps.h"

extern void omp_set_num_threads(int) __attribute__((weak));

enum { HELPER_IDLE, HELPER_PENDING, HELPER_RUNNING };
#define SPINS 100

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pid_t owner;                 /* the process whose helper this is (0: none; a fork has none) */
    const struct npu_graph *job;
    int32_t state;               /* HELPER_*: set under the lock, read by the caller spinning */
    int32_t next;                /* the next position to claim */
    int32_t status, failed;      /* the first failure */
} G;

static void wait_done(const int32_t *flag)
{
    for (unsigned spins = 0; !__atomic_load_n(flag, __ATOMIC_ACQUIRE);) {
        if (__atomic_load_n(&G.status, __ATOMIC_ACQUIRE))
            return;
        if (++spins < SPINS)
            __builtin_ia32_pause();
        else
            sched_yield();
    }
}

static void work(const struct npu_graph *g)
{
    for (;;) {
        if (__atomic_load_n(&G.status, __ATOMIC_ACQUIRE))
            return;
        int32_t i = __atomic_fetch_add(&G.next, 1, __ATOMIC_ACQ_REL);
        if (i >= g->count)
            return;
        for (int32_t k = g->dep_start[i]; k < g->dep_start[i + 1]; k++)
            wait_done(&g->done[g->deps[k]]);
        if (__atomic_load_n(&G.status, __ATOMIC_ACQUIRE))
            return;
        int status = npu_step_run(&g->steps[i]);
        if (status != 0) {
            int32_t none = 0;
            if (__atomic_compare_exchange_n(&G.status, &none, status, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                __atomic_store_n(&G.failed, i, __ATOMIC_RELEASE);
            return;
        }
        __atomic_store_n(&g->done[i], 1, __ATOMIC_RELEASE);
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
    G.next = 0;
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
        for (unsigned spins = 0; __atomic_load_n(&G.state, __ATOMIC_ACQUIRE) == HELPER_RUNNING;)
            if (++spins < SPINS)
                __builtin_ia32_pause();
            else
                sched_yield();
        G.job = NULL;
    }
    *failed = G.failed;
    return G.status;
}
