/* A user queue's client side in C (queue_client.h; protocol: docs/abi.md, "User queues",
 * and npu_hw/queues.py).
 *
 * The same steps as libnpu/user_queue.py, for what they cost: that Python path spent about
 * 18 us of CPU per NOP job on submit and wait.  The one difference is the barrier between
 * a store and a later load of another location (tail then polling, waiting then done):
 * Python has no memory fence and makes a system call; here it is a real one.
 *
 * Several threads may wait on one queue.  One of them at a time (the watcher) sleeps on
 * the completion line and empties it; the others sleep on a condition variable the watcher
 * broadcasts after each wake-up.  Were they all to sleep on the line, a byte written for one
 * job could be taken by the waiter of another while the first was between its look at
 * `done` and its poll(): it would sleep until the safety net.  A lone waiter pays no
 * system call for this (uncontended mutex, no broadcast without followers).
 *
 * The watcher sleeps on the completion line (NPU_QUEUE_WAIT_LINE: poll, then read to empty
 * it) or, on a chip of ABI 2.8 that offers it, on the header's `done` itself
 * (NPU_QUEUE_WAIT_FUTEX: one FUTEX_WAIT, which the core ends with one FUTEX_WAKE; about 1.2 us
 * of CPU less per sleep and wake-up on the 2-vCPU VM, pinned ping-pong: 4.9 against 6.1 us). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "npu_uapi.h"
#include "queue_client.h"

struct npu_uq_client {
	unsigned char *mem;
	struct npu_queue_header *header;
	struct npu_queue_entry *entries;
	struct npu_queue_completion *completions;
	unsigned int count;                 /* entries, a power of two */
	int doorbell_fd, completion_fd;
	pthread_mutex_t submit_lock;        /* submitters take turns: `tail`, the entries */
	unsigned long long tail;
	pthread_mutex_t waiting_lock;       /* `waiters` and the header's `waiting` change together; */
	unsigned int waiters;               /* guards the watcher's state below too */
	int watched;                        /* a waiter sleeps on the completion line */
	unsigned int followers;             /* waiters asleep on `woken` */
	unsigned long long wake_ups;        /* the watcher's wake-ups so far (followers look for a change) */
	pthread_cond_t woken;               /* broadcast after each of the watcher's wake-ups */
	unsigned long long late_wakeups;
	unsigned long long waits[3];        /* at once, in the spin, asleep */
	unsigned int wake_by;               /* HDR_WAITING's value while a waiter sleeps: NPU_QUEUE_WAIT_* */
};

/* The hinted wait (npu_uq_run_hinted), for a caller that may spin: jobs expected to take at
 * least this long are slept through on a timer; shorter ones are spun for (a wake-up costs
 * about what they take). */
#define NPU_UQ_SLEEP_AHEAD_MIN_NS 150000LL
/* ... until this long before their expected end (a timer wake-up on a busy machine). */
#define NPU_UQ_WAKE_MARGIN_NS 40000LL
/* Longer jobs are not slept through: a wake-up is small beside them, and a wrong hint
 * would cost as much as the sleep. */
#define NPU_UQ_SLEEP_AHEAD_MAX_NS 5000000LL
/* After the timer, the client polls across the recent jobs' spread (and the margin on each
 * side), but never longer than this: a job preempted for milliseconds is slept through on
 * the completion line, not spun for. */
#define NPU_UQ_SPREAD_SPIN_MAX_NS 300000LL
/* A job expected to end within this (its recent runs on the core) is spun for, whatever the
 * load: a sleep and its wake-up cost more than such a job (a 1 us job: 37-47 us p50 at load
 * average 10-18 on the 2-vCPU VM when client and core both slept, issue 27) ... */
#define NPU_UQ_SHORT_JOB_NS 20000LL
/* ... for its expected time and spread and this margin (the core's pick-up, a late clock) ... */
#define NPU_UQ_SHORT_MARGIN_NS 10000LL
/* ... and this more when the core slept (the doorbell rung): its wake-up ... */
#define NPU_UQ_SHORT_WAKE_NS 30000LL
/* ... at most this long: a core that lost its CPU meanwhile is waited for asleep. */
#define NPU_UQ_SHORT_SPIN_MAX_NS 50000LL
/* A spin for a woken core that missed (its wake-up took longer: a loaded machine, where the
 * woken core often waits for the spinning client's own CPU) is not tried again for this many
 * jobs, doubled for each miss in a row (at most 64 times: one spin in about a thousand jobs);
 * one that catches its job starts over. */
#define NPU_UQ_WOKEN_SPIN_BACKOFF 16ULL
#define NPU_UQ_WOKEN_SPIN_DOUBLINGS 6U
#define NPU_UQ_HINT_RUNS ((unsigned)(sizeof(((struct npu_uq_hint *)0)->recent) / sizeof(long long)))

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define CPU_RELAX() __asm__ __volatile__("" ::: "memory")
#endif

#define LOAD64(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)
#define LOAD32(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)

struct npu_uq_client *npu_uq_open(void *mem, unsigned int entries, int doorbell_fd, int completion_fd,
                                  unsigned long long tail, unsigned int wake_by)
{
	struct npu_uq_client *q = calloc(1, sizeof(*q));
	if (q == NULL)
		return NULL;
	q->mem = mem;
	q->header = mem;
	q->entries = (struct npu_queue_entry *)(q->mem + NPU_QUEUE_HEADER_SIZE);
	q->completions = (struct npu_queue_completion *)(q->mem + NPU_QUEUE_HEADER_SIZE
	                                                 + (size_t)entries * sizeof(struct npu_queue_entry));
	q->count = entries;
	q->doorbell_fd = doorbell_fd;
	q->completion_fd = completion_fd;
	q->tail = tail;
	q->wake_by = wake_by == NPU_QUEUE_WAIT_FUTEX ? NPU_QUEUE_WAIT_FUTEX : NPU_QUEUE_WAIT_LINE;
	pthread_mutex_init(&q->submit_lock, NULL);
	pthread_mutex_init(&q->waiting_lock, NULL);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&q->woken, &attr);
	pthread_condattr_destroy(&attr);
	return q;
}

void npu_uq_close(struct npu_uq_client *q)
{
	if (q == NULL)
		return;
	pthread_mutex_destroy(&q->submit_lock);
	pthread_mutex_destroy(&q->waiting_lock);
	pthread_cond_destroy(&q->woken);
	free(q);
}

unsigned long long npu_uq_tail(struct npu_uq_client *q)
{
	pthread_mutex_lock(&q->submit_lock);
	unsigned long long tail = q->tail;
	pthread_mutex_unlock(&q->submit_lock);
	return tail;
}

void npu_uq_set_tail(struct npu_uq_client *q, unsigned long long tail)
{
	pthread_mutex_lock(&q->submit_lock);
	q->tail = tail;
	pthread_mutex_unlock(&q->submit_lock);
}

/* 0, or why the queue stopped; a header without its magic was given back by the driver. */
static int queue_error(const struct npu_uq_client *q)
{
	int error = LOAD32(q->header->error);
	if (error == 0 && LOAD32(q->header->magic) != NPU_QUEUE_MAGIC)
		return -ECANCELED;
	return error;
}

/* The submission itself, under submit_lock. */
/* write() that raises no SIGPIPE when nobody reads the pipe any more (the driver and the
 * chip are gone): a C program hosting libnpu_runtime.so keeps SIGPIPE's default action,
 * which would kill it.  SIGPIPE is blocked in this thread for the write and, if the write
 * raised it (and none was pending before), taken before the old mask comes back.  Where
 * SIGPIPE is ignored (a Python host, as the Python path's check) the write is plain, after
 * one look at the disposition: two system calls a ring, not four. */
static ssize_t write_no_sigpipe(int fd, const void *buf, size_t len)
{
	struct sigaction disposition;
	if (sigaction(SIGPIPE, NULL, &disposition) == 0 && disposition.sa_handler == SIG_IGN)
		return write(fd, buf, len);     /* ignored (any Python host): no SIGPIPE to keep away */
	sigset_t pipe_only, old, pending;
	sigemptyset(&pipe_only);
	sigaddset(&pipe_only, SIGPIPE);
	sigemptyset(&pending);
	sigpending(&pending);
	const int was_pending = sigismember(&pending, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
	ssize_t n = write(fd, buf, len);
	const int err = errno;
	if (n < 0 && err == EPIPE && !was_pending) {
		const struct timespec now = {0, 0};
		while (sigtimedwait(&pipe_only, NULL, &now) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = err;
	return n;
}

static long long submit_locked(struct npu_uq_client *q, unsigned long long cmd_iova, unsigned int cmd_size,
                               unsigned int timeout_ms, unsigned int flags, int *rang)
{
	*rang = 0;
	int error = queue_error(q);
	if (error)
		return error;
	unsigned long long seq = q->tail + 1;
	if ((long long)(q->tail - LOAD64(q->header->done)) >= (long long)q->count)
		return -EAGAIN;
	struct npu_queue_entry *entry = &q->entries[seq & (q->count - 1)];
	entry->seq = seq;
	entry->cmd_iova = cmd_iova;
	entry->cmd_size = cmd_size;
	entry->timeout_ms = timeout_ms;
	entry->flags = flags;
	entry->reserved = 0;
	__atomic_store_n(&q->header->tail, seq, __ATOMIC_RELEASE);   /* the entry before the tail */
	q->tail = seq;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);    /* the tail visible before polling is read */
	if (LOAD32(q->header->polling))
		return (long long)seq;
	*rang = 1;
	if (write_no_sigpipe(q->doorbell_fd, "\1", 1) < 0 && errno == EPIPE)
		return -ENODEV;                        /* the driver and the chip are gone */
	/* EAGAIN: a full pipe already has a wake-up pending */
	return (long long)seq;
}

long long npu_uq_submit(struct npu_uq_client *q, unsigned long long cmd_iova, unsigned int cmd_size,
                        unsigned int timeout_ms, unsigned int flags)
{
	int rang;
	pthread_mutex_lock(&q->submit_lock);
	long long result = submit_locked(q, cmd_iova, cmd_size, timeout_ms, flags, &rang);
	pthread_mutex_unlock(&q->submit_lock);
	return result;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The queue stopped and this wait must end: the job is not done, or the queue was cancelled. */
static int stopped(const struct npu_uq_client *q, unsigned long long seq)
{
	int error = queue_error(q);
	if (error && (LOAD64(q->header->done) < seq || error == -ECANCELED))
		return error;
	return 0;
}

static void set_waiting(struct npu_uq_client *q, int change)
{
	pthread_mutex_lock(&q->waiting_lock);
	q->waiters += change;
	__atomic_store_n(&q->header->waiting, q->waiters > 0 ? q->wake_by : 0u, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);    /* the flag visible before done is read again */
	pthread_mutex_unlock(&q->waiting_lock);
}

/* Empty the completion line, which poll() found readable: one read never waits then (the
 * line is non-blocking, and holds a byte even if its client made it blocking); what a full
 * sink leaves wakes the next poll() at once. One system call, not FIONREAD's two. */
static void drain(int fd)
{
	char sink[256];
	(void)!read(fd, sink, sizeof(sink));
}

static void collect(const struct npu_uq_client *q, unsigned long long seq, void *out)
{
	memcpy(out, &q->completions[seq & (q->count - 1)], sizeof(struct npu_queue_completion));
}

/* Sleep on `woken` until the watcher's next wake-up (or `wait_ms`), unless `seq` is done
 * already: looked at under the lock the watcher takes to broadcast, so none is missed.
 * Called with waiting_lock held; returns with it released. */
static void follow(struct npu_uq_client *q, unsigned long long seq, int wait_ms)
{
	if (LOAD64(q->header->done) >= seq) {
		pthread_mutex_unlock(&q->waiting_lock);
		return;
	}
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec += 1;
		until.tv_nsec -= 1000000000L;
	}
	unsigned long long seen = q->wake_ups;
	int timed_out = 0;
	q->followers++;
	while (q->watched && q->wake_ups == seen && !timed_out)
		timed_out = pthread_cond_timedwait(&q->woken, &q->waiting_lock, &until) == ETIMEDOUT;
	q->followers--;
	pthread_mutex_unlock(&q->waiting_lock);
	if (timed_out && (LOAD64(q->header->done) >= seq || stopped(q, seq)))
		__atomic_add_fetch(&q->late_wakeups, 1, __ATOMIC_RELAXED);   /* the safety net caught it */
}

/* The watcher's sleep on HDR_DONE's low 32 bits (NPU_QUEUE_WAIT_FUTEX): FUTEX_WAIT, which the
 * kernel refuses (EAGAIN) if the word moved since it was read, so a completion between the
 * look and the sleep is never slept through; the core's FUTEX_WAKE ends it.  1 woken (or the
 * word had moved), 0 when `wait_ms` ran out, -errno on another failure. */
static int sleep_on_done(struct npu_uq_client *q, unsigned long long seq, int wait_ms)
{
	uint32_t *word = (uint32_t *)&q->header->done;     /* little endian: the low half */
	const uint32_t seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
	if (LOAD64(q->header->done) >= seq)
		return 1;
	const struct timespec slice = {wait_ms / 1000, (long)(wait_ms % 1000) * 1000000L};
	if (syscall(SYS_futex, word, FUTEX_WAIT, seen, &slice, NULL, 0) == 0)
		return 1;
	if (errno == EAGAIN || errno == EINTR)
		return 1;                                   /* look again */
	return errno == ETIMEDOUT ? 0 : -errno;
}

static int sleep_until_done(struct npu_uq_client *q, unsigned long long seq, long long deadline, int slice_ms)
{
	struct pollfd line = {.fd = q->completion_fd, .events = POLLIN, .revents = 0};
	while (LOAD64(q->header->done) < seq) {
		int error = stopped(q, seq);
		if (error)
			return error;
		int wait_ms = slice_ms;
		if (deadline >= 0) {
			long long left = deadline - now_ns();
			if (left <= 0)
				return -ETIMEDOUT;
			long long left_ms = (left + 999999) / 1000000;
			if (left_ms < wait_ms)
				wait_ms = (int)left_ms;
		}
		pthread_mutex_lock(&q->waiting_lock);
		if (q->watched) {               /* another waiter watches the line: it wakes us */
			follow(q, seq, wait_ms);
			continue;
		}
		q->watched = 1;
		const int by_futex = q->wake_by == NPU_QUEUE_WAIT_FUTEX;
		pthread_mutex_unlock(&q->waiting_lock);
		int ready, poll_errno, timed_out;
		if (by_futex) {
			line.revents = 0;
			ready = sleep_on_done(q, seq, wait_ms);
			poll_errno = -ready;
			timed_out = ready == 0;
			if (timed_out)          /* the safety net: is anyone left to wake it (a writer on the line)? */
				ready = poll(&line, 1, 0) > 0 && (line.revents & POLLHUP) ? 1 : 0;
			else if (ready < 0)
				ready = -1;
		} else {
			ready = poll(&line, 1, wait_ms);
			poll_errno = errno;
			timed_out = ready == 0;
			if (ready > 0)
				drain(q->completion_fd);
		}
		pthread_mutex_lock(&q->waiting_lock);   /* each wake-up passed on: the next look at `done` */
		q->watched = 0;                         /* is the followers' own (one of them may watch next) */
		q->wake_ups++;
		if (q->followers)
			pthread_cond_broadcast(&q->woken);
		pthread_mutex_unlock(&q->waiting_lock);
		if (timed_out && (LOAD64(q->header->done) >= seq || stopped(q, seq)))
			__atomic_add_fetch(&q->late_wakeups, 1, __ATOMIC_RELAXED);   /* the safety net caught what */
		if (ready < 0) {                                               /* no one signalled */
			if (poll_errno == EINTR)
				continue;
			return -poll_errno;
		}
		if (ready == 0)
			continue;
		if ((line.revents & POLLHUP) && LOAD64(q->header->done) < seq) {
			error = stopped(q, seq);   /* the driver let the queue go (reset, close) ... */
			return error ? error : -EPIPE;   /* ... or the driver and the chip are gone */
		}
	}
	return 0;
}

/* The hinted wait's first part: sleep on a timer until `margin` before the job's expected
 * end (the thread's timer slack made 1 us for it, so the timer is not late by the default
 * 50 us).  The core is not asked to signal (`waiting` stays as it was): nothing is written
 * for this sleep, and the client is running again when the job completes. */
static void sleep_ahead(long long start, long long expected_ns, long long deadline)
{
	long long until = start + expected_ns - NPU_UQ_WAKE_MARGIN_NS;
	if (deadline >= 0 && until > deadline)
		until = deadline;
	if (until <= now_ns())
		return;
	const int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	const struct timespec at = {until / 1000000000LL, until % 1000000000LL};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
		;
	if (slack > 0)
		prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
}

/* Wait for `seq`; with a hint (`expected_ns` in the sleep-ahead range) and a caller that may
 * spin, first asleep on a timer to the margin before the job's expected end, then polling
 * across the recent jobs' `spread_ns` and the margin on each side, then on the completion
 * line.  A caller that may not spin (`spin_ns` 0: every CPU is wanted) goes straight to the
 * line: a client woken before the job's end takes the CPU from the core that ends it
 * (measured at load average 9-10 on 2 vCPUs: ResNet-8's p50 0.311 ms on the line against
 * 0.35-0.44 ms for every timer rule tried, docs/runtime.md). */
static int wait_hinted(struct npu_uq_client *q, unsigned long long seq, long long spin_ns, long long expected_ns,
                       long long spread_ns, long long timeout_ns, int slice_ms, void *out)
{
	if (LOAD64(q->header->done) >= seq) {
		__atomic_add_fetch(&q->waits[0], 1, __ATOMIC_RELAXED);
		collect(q, seq, out);
		return 0;
	}
	long long start = now_ns();
	long long deadline = timeout_ns < 0 ? -1 : start + timeout_ns;
	if (spin_ns > 0 && expected_ns >= NPU_UQ_SLEEP_AHEAD_MIN_NS && expected_ns <= NPU_UQ_SLEEP_AHEAD_MAX_NS) {
		sleep_ahead(start, expected_ns, deadline);
		long long across = spread_ns + 2 * NPU_UQ_WAKE_MARGIN_NS;
		if (across > NPU_UQ_SPREAD_SPIN_MAX_NS)
			across = NPU_UQ_SPREAD_SPIN_MAX_NS;
		if (spin_ns < across)
			spin_ns = across;
		start = now_ns();
		if (deadline >= 0)
			timeout_ns = deadline > start ? deadline - start : 0;
	}
	if (timeout_ns >= 0 && spin_ns > timeout_ns)
		spin_ns = timeout_ns;
	long long spin_until = start + spin_ns;
	while (spin_ns > 0 && LOAD64(q->header->done) < seq) {   /* no spin: straight to sleep */
		int error = stopped(q, seq);
		if (error)
			return error;
		if (now_ns() >= spin_until)
			break;
		sched_yield();     /* the chip's process (or anyone's) runs first if it wants the CPU */
	}
	if (spin_ns > 0 && LOAD64(q->header->done) >= seq) {
		__atomic_add_fetch(&q->waits[1], 1, __ATOMIC_RELAXED);
		collect(q, seq, out);
		return 0;
	}
	__atomic_add_fetch(&q->waits[2], 1, __ATOMIC_RELAXED);
	set_waiting(q, +1);
	int result = sleep_until_done(q, seq, deadline, slice_ms);
	set_waiting(q, -1);
	if (result == 0)
		collect(q, seq, out);
	return result;
}

static int compare_ns(const void *a, const void *b)
{
	const long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

void npu_uq_hint_update(struct npu_uq_hint *hint, long long exec_ns)
{
	if (exec_ns <= 0)
		return;
	hint->recent[hint->runs % NPU_UQ_HINT_RUNS] = exec_ns;
	hint->runs++;
	const unsigned n = hint->runs < NPU_UQ_HINT_RUNS ? (unsigned)hint->runs : NPU_UQ_HINT_RUNS;
	if (n < 2) {             /* the first job alone (a first replay is slow): not a hint yet */
		hint->expected_ns = hint->spread_ns = 0;
		return;
	}
	long long sorted[sizeof(hint->recent) / sizeof(long long)];
	memcpy(sorted, hint->recent, n * sizeof(long long));
	qsort(sorted, n, sizeof(long long), compare_ns);
	/* The sleep aims at the low quartile (of two: the lower, so one slow job, a first
	 * replay or a preemption, is never slept through), the spin reaches the high end less
	 * its top eighth (of eight: the second slowest, so one preempted job is no spin). */
	const long long low = sorted[(n - 1) / 4], high = sorted[n - 1 - n / 8];
	hint->expected_ns = low;
	hint->spread_ns = high - low;
}

int npu_uq_wait(struct npu_uq_client *q, unsigned long long seq, long long spin_ns, long long timeout_ns,
                int slice_ms, void *out)
{
	return wait_hinted(q, seq, spin_ns, 0, 0, timeout_ns, slice_ms, out);
}

int npu_uq_run(struct npu_uq_client *q, unsigned long long cmd_iova, unsigned int cmd_size,
               unsigned int timeout_ms, unsigned int flags, long long spin_ns, long long timeout_ns, int slice_ms,
               void *out, unsigned long long *seq_out)
{
	*seq_out = 0;
	long long seq = npu_uq_submit(q, cmd_iova, cmd_size, timeout_ms, flags);
	if (seq < 0)
		return (int)seq;
	*seq_out = (unsigned long long)seq;
	return npu_uq_wait(q, (unsigned long long)seq, spin_ns, timeout_ns, slice_ms, out);
}

long long npu_uq_short_spin_ns(const struct npu_uq_hint *hint, int rang)
{
	if (hint->expected_ns <= 0 || hint->expected_ns > NPU_UQ_SHORT_JOB_NS)
		return 0;
	if (rang && hint->runs < hint->woken_spin_from)
		return 0;
	long long spin = hint->expected_ns + hint->spread_ns + NPU_UQ_SHORT_MARGIN_NS + (rang ? NPU_UQ_SHORT_WAKE_NS : 0);
	return spin < NPU_UQ_SHORT_SPIN_MAX_NS ? spin : NPU_UQ_SHORT_SPIN_MAX_NS;
}

/* Poll `done` for `spin_ns` without giving the CPU away (a yield under load hands it to
 * another task for a slice): 0 not done, 1 done in the spin, 2 done before it. */
static int spin_short(struct npu_uq_client *q, unsigned long long seq, long long spin_ns)
{
	if (spin_ns <= 0)
		return 0;
	if (LOAD64(q->header->done) >= seq)
		return 2;
	const long long until = now_ns() + spin_ns;
	while (LOAD64(q->header->done) < seq) {
		if (now_ns() >= until)
			return 0;
		CPU_RELAX();
	}
	return 1;
}

int npu_uq_run_hinted(struct npu_uq_client *q, unsigned long long cmd_iova, unsigned int cmd_size,
                      unsigned int timeout_ms, unsigned int flags, long long spin_ns, long long timeout_ns,
                      int slice_ms, struct npu_uq_hint *hint, void *out, unsigned long long *seq_out)
{
	int result = 0;
	*seq_out = 0;
	pthread_mutex_lock(&q->submit_lock);
	if (q->tail != LOAD64(q->header->done)) {    /* another job runs on this queue: */
		pthread_mutex_unlock(&q->submit_lock);    /* the caller takes another queue */
		return -EBUSY;
	}
	int rang;
	long long seq = submit_locked(q, cmd_iova, cmd_size, timeout_ms, flags, &rang);
	pthread_mutex_unlock(&q->submit_lock);
	if (seq < 0)
		return (int)seq;
	*seq_out = (unsigned long long)seq;
	/* A short job: spun for, whatever the load (a woken core's, unless such a spin missed lately). */
	const long long short_ns = hint ? npu_uq_short_spin_ns(hint, rang) : 0;
	const int spun = spin_short(q, (unsigned long long)seq, short_ns);
	if (short_ns > 0 && rang) {
		if (spun) {
			hint->woken_spin_misses = 0;
		} else {
			const unsigned doublings = hint->woken_spin_misses < NPU_UQ_WOKEN_SPIN_DOUBLINGS
			                           ? hint->woken_spin_misses : NPU_UQ_WOKEN_SPIN_DOUBLINGS;
			hint->woken_spin_from = hint->runs + (NPU_UQ_WOKEN_SPIN_BACKOFF << doublings);
			hint->woken_spin_misses++;
		}
	}
	if (spun) {
		__atomic_add_fetch(&q->waits[spun == 2 ? 0 : 1], 1, __ATOMIC_RELAXED);
		collect(q, (unsigned long long)seq, out);
	} else {
		result = wait_hinted(q, (unsigned long long)seq, spin_ns, hint ? hint->expected_ns : 0,
		                     hint ? hint->spread_ns : 0, timeout_ns, slice_ms, out);
	}
	const struct npu_queue_completion *done = out;
	if (hint && result == 0 && done->seq == (unsigned long long)seq && done->status == 0)
		npu_uq_hint_update(hint, (long long)done->exec_ns);
	return result;
}

unsigned long long npu_uq_late_wakeups(struct npu_uq_client *q)
{
	return __atomic_load_n(&q->late_wakeups, __ATOMIC_RELAXED);
}

void npu_uq_wait_counts(struct npu_uq_client *q, unsigned long long out[3])
{
	for (int i = 0; i < 3; i++)
		out[i] = __atomic_load_n(&q->waits[i], __ATOMIC_RELAXED);
}
