/* A user queue's client side in C: submit and wait without Python on the job path
 * (docs/abi.md, "User queues"; the Python reference is libnpu/user_queue.py).
 * Plain C declarations only: cffi reads this file as it is (ABI mode). */

struct npu_uq_client;

/* A client of the queue memory mapped at `mem` (`entries` entries), ringing `doorbell_fd`,
 * whose last entry written is `tail`, its waiter asleep as `wake_by` says: NPU_QUEUE_WAIT_FUTEX
 * on the header's `done` (ABI 2.8, where the device's NPU_PARAM_QUEUE_WAKEUPS has it: one system
 * call a sleep, where the line takes poll and read), else NPU_QUEUE_WAIT_LINE on
 * `completion_fd`; NULL when out of memory.  The descriptors and the mapping stay the caller's. */
struct npu_uq_client *npu_uq_open(void *mem, unsigned int entries, int doorbell_fd, int completion_fd,
                                  unsigned long long tail, unsigned int wake_by);
void npu_uq_close(struct npu_uq_client *q);

/* The seq of the last entry this client wrote (submitters take turns on a lock inside). */
unsigned long long npu_uq_tail(struct npu_uq_client *q);
/* A tail set by hand (an entry written some other way). */
void npu_uq_set_tail(struct npu_uq_client *q, unsigned long long tail);

/* Write the next job (tail + 1) with its entry `flags` (0 or NPU_QUEUE_ENTRY_PROFILE), publish the tail and ring the doorbell unless the core
 * polls.  Its seq (> 0); -EAGAIN when `entries` jobs are in flight (nothing written); the
 * queue's error (-errno, -ECANCELED once the driver gave the memory back) when it stopped;
 * -ENODEV when nobody holds the doorbell's other end. */
long long npu_uq_submit(struct npu_uq_client *q, unsigned long long cmd_iova, unsigned int cmd_size,
                        unsigned int timeout_ms, unsigned int flags);

/* Wait for job `seq`: poll `done` for `spin_ns` (yielding the CPU), then sleep on the
 * completion line, each sleep at most `slice_ms` (a safety net), all of it at most
 * `timeout_ns` (< 0: no limit).  0 with the job's completion record copied to `out` (its seq
 * differs when a later job overwrote it: the job completed); -ETIMEDOUT; the queue's error
 * when it stopped first (as submit); -EPIPE when no writer is left on the completion line. */
int npu_uq_wait(struct npu_uq_client *q, unsigned long long seq, long long spin_ns, long long timeout_ns,
                int slice_ms, void *out);

/* submit (with its entry `flags`), then wait for that job (its seq in *seq_out, 0 if none
 * was written): one call per job for a client that runs jobs one at a time.  0, or the
 * errors of both. */
int npu_uq_run(struct npu_uq_client *q, unsigned long long cmd_iova, unsigned int cmd_size,
               unsigned int timeout_ms, unsigned int flags, long long spin_ns, long long timeout_ns, int slice_ms,
               void *out, unsigned long long *seq_out);

/* What a repeated job's recent runs took on the core (their completions' exec_ns): the state
 * of its hinted wait, zeroed before the first run and kept by the caller between runs.
 * `expected_ns` is the low quartile of the last `recent` runs (0: fewer than two seen, no
 * hint yet), `spread_ns` the distance from it to the second slowest of eight (the top
 * eighth left out). */
struct npu_uq_hint {
	long long expected_ns;
	long long spread_ns;
	unsigned long long runs;        /* exec times recorded so far */
	long long recent[8];            /* the last of them, a ring */
	unsigned long long woken_spin_from;   /* runs from which a short job the core woke for is spun for again */
	unsigned int woken_spin_misses;       /* such spins missed in a row */
};

/* Record one run's exec_ns (<= 0: ignored) and recompute the hint. */
void npu_uq_hint_update(struct npu_uq_hint *hint, long long exec_ns);

/* How long a hinted wait polls for a short job whatever the load (0: the job is not short, or
 * not known yet): its expected time and spread plus NPU_UQ_SHORT_MARGIN_NS when it is expected
 * within NPU_UQ_SHORT_JOB_NS, plus NPU_UQ_SHORT_WAKE_NS when the submit `rang` the doorbell (the
 * core slept: its wake-up comes first), at most NPU_UQ_SHORT_SPIN_MAX_NS; 0 for a woken core
 * while `woken_spin_from` is ahead of `runs` (such a spin missed lately). */
long long npu_uq_short_spin_ns(const struct npu_uq_hint *hint, int rang);

/* One synchronous job of a client that runs the same command buffer again and again (an
 * inference): npu_uq_run unless the queue has jobs in flight (-EBUSY, nothing written: the
 * caller takes a queue that is idle), its wait hinted by `hint` (NULL: none).  A short job
 * (npu_uq_short_spin_ns) is first spun for without yielding, even by a caller that may not
 * spin (`spin_ns` 0): its end comes sooner than a sleep's wake-up would, and a client back
 * soon finds the core still polling (a sleeping client's wake-up outlasts a contended core's
 * poll: then both sleep on every job).  A job expected
 * to take from NPU_UQ_SLEEP_AHEAD_MIN_NS to NPU_UQ_SLEEP_AHEAD_MAX_NS, with `spin_ns` > 0 (a
 * CPU to spare), is slept through on a timer, with no signal asked of the core, until NPU_UQ_WAKE_MARGIN_NS before its expected
 * end; then spun for across the spread and the margin on each side (at least `spin_ns`, at
 * most NPU_UQ_SPREAD_SPIN_MAX_NS unless `spin_ns` is longer), then waited for on the
 * completion line, as npu_uq_wait.  Any other is npu_uq_wait's.  A successful job's exec_ns
 * goes into the hint (npu_uq_hint_update). */
int npu_uq_run_hinted(struct npu_uq_client *q, unsigned long long cmd_iova, unsigned int cmd_size,
                      unsigned int timeout_ms, unsigned int flags, long long spin_ns, long long timeout_ns,
                      int slice_ms, struct npu_uq_hint *hint, void *out, unsigned long long *seq_out);

/* Waits a safety-net timeout ended with the job done or the queue stopped (a lost signal). */
unsigned long long npu_uq_late_wakeups(struct npu_uq_client *q);

/* The counts of the wait path: [0] waits that returned at once (done before any wait),
 * [1] waits that ended in the spin, [2] waits that slept on the completion line. */
void npu_uq_wait_counts(struct npu_uq_client *q, unsigned long long out[3]);
