/* SPDX-License-Identifier: MIT */
/*
 * npu_uapi.h - the user/kernel ABI of the emulated NPU driver (kmd_fuse).
 *
 * This header is the single source of truth for every structure and command
 * number that crosses the device node /dev/npuN.  C programs include it as is;
 * Python reads it with cffi (kmd_fuse/uapi/__init__.py), which understands the
 * declarations outside the "C only" block, so the layouts are binary-exact in
 * both languages.
 *
 * Transport: the FUSE node has no ioctl(), so each request is one write() of a
 * frame (struct npu_frame_hdr followed by the command's payload struct) and each
 * reply is one read() of a frame of the same shape (hdr.result = 0 or -errno).
 * Up to 64 requests may be in flight per open file (EBUSY beyond); replies come
 * in completion order and are matched to requests by seq, or each is read by its
 * own seq (pread at NPU_REPLY_BY_SEQ + seq; a seq in flight twice is EEXIST).  A reply that is not
 * ready yet (WAIT) is signalled with POLLIN; read() without a ready reply fails
 * with EAGAIN after a short server-side wait, so a client never blocks unboundedly.
 * Buffers' memory comes as sealed memfds from a per-device Unix socket (see MEM_MAP).
 *
 * Command numbers are encoded like Linux _IOWR('N', nr, struct npu_xxx):
 * dir(2 bits, 3 = read|write) << 30 | size(14 bits) << 16 | 'N' << 8 | nr.
 * The values are spelled out below (cffi cannot evaluate macros) and checked
 * against _IOWR by static asserts in the C-only block and by the Python loader.
 * Command NPU_CMD_<NAME> carries struct npu_<name>; the driver's command list is
 * read from these #defines, in this header only.
 *
 * Growing the ABI (docs/abi.md): as drm_ioctl does, the driver matches a command
 * by type and nr, accepts any payload size from the command's first version
 * (NPU_<NAME>_SIZE_VER0, or the current size for a command without one) up to
 * the current size, zero-extends an older payload, and replies with as many
 * bytes as the client sent.  So fields are only ever appended, and every struct
 * ends in reserved space that must be zero (EINVAL otherwise), as must every pad
 * field; a payload larger than the driver knows is accepted only if the bytes
 * beyond are zero (E2BIG otherwise).  New device facts are GET_PARAM ids.
 */
#ifndef NPU_UAPI_H
#define NPU_UAPI_H

#include <stdint.h>

#define NPU_ABI_VERSION 0x00020009      /* major << 16 | minor: 2.0 = buffers handed over as sealed memfds,
                                           2.1 = reserved fields, sizes that grow, GET_PARAM,
                                           2.2 = SUBMIT_BATCH,
                                           2.3 = GET_PROFILE, NPU_SUBMIT_PROFILE, params 16..23,
                                           2.4 = QUEUE_CREATE (user-mode submission queues), params 24..25,
                                           2.5 = replies read by seq (NPU_REPLY_BY_SEQ), a seq in flight
                                                 twice refused (EEXIST),
                                           2.6 = QUEUE_DESTROY, NPU_QUEUE_ENTRY_PROFILE, queue fences in GET_PROFILE,
                                           2.7 = each task's core in GET_PROFILE (npu_task_profile.core),
                                           2.8 = a user queue's waiter woken by futex on `done`
                                                 (NPU_QUEUE_WAIT_FUTEX), param 26,
                                           2.9 = the task a user queue's job failed in (header's failed_task) */
#define NPU_FRAME_MAGIC 0x3155504e      /* "NPU1" little endian */
#define NPU_IOC_TYPE 0x4e               /* 'N' */

#define NPU_MAX_FRAME 4096              /* largest request or reply frame */
#define NPU_REPLY_BY_SEQ 0x1000000000000 /* pread() at this offset + seq: the reply to that request only (2.5);
                                           below it (read()'s file position): the first reply completed */
#define NPU_REPLY_NOWAIT 0x800000000000 /* added to NPU_REPLY_BY_SEQ + seq: EAGAIN at once if not ready */
#define NPU_MAX_SUBMIT_BOS 64           /* buffers one job may reference */
#define NPU_MAX_WAIT_FENCES 64          /* fences one WAIT may name */
#define NPU_MAX_BATCH_JOBS 8            /* jobs one SUBMIT_BATCH may carry */
#define NPU_MAX_PATH 256
#define NPU_HANDOVER_MAGIC 0x4f48504e   /* "NPHO" little endian: buffer hand-over messages */

/* MEM_ALLOC flags */
#define NPU_MEM_READ 0x1                /* device may read the buffer */
#define NPU_MEM_WRITE 0x2               /* device may write the buffer */
#define NPU_MEM_RW 0x3

/* SUBMIT flags */
#define NPU_SUBMIT_WAIT 0x1             /* reply only when the job is done (one round trip per sync job) */
#define NPU_SUBMIT_PROFILE 0x2          /* the chip times each task of the job: read them with GET_PROFILE */

#define NPU_MAX_PROFILE_TASKS 96        /* task records one GET_PROFILE reply carries */

/* WAIT flags */
#define NPU_WAIT_ALL 0x0                /* reply when every fence has signalled */
#define NPU_WAIT_ANY 0x1                /* reply when any fence has signalled */

/* Fence status reported by WAIT (per fence) */
#define NPU_FENCE_PENDING 1             /* not signalled yet */
#define NPU_FENCE_OK 0                  /* job completed; negative = -errno of the failed job */

/* SUBMIT priority */
#define NPU_PRIO_LOW 0
#define NPU_PRIO_NORMAL 1
#define NPU_PRIO_HIGH 2

/* Every request and reply starts with this header. */
struct npu_frame_hdr {
	uint32_t magic;     /* NPU_FRAME_MAGIC */
	uint32_t cmd;       /* NPU_CMD_* (replies echo it) */
	uint32_t seq;       /* chosen by the client, echoed in the reply */
	uint32_t size;      /* payload bytes that follow the header */
	int32_t result;     /* replies: 0 or -errno; requests: must be 0 */
	uint32_t reserved;  /* must be 0 */
};

/* GET_INFO: describe the device (no input fields). */
struct npu_get_info {
	uint32_t abi_version;
	uint32_t device_id;
	uint32_t hw_version;
	uint32_t num_cores;
	uint32_t clock_mhz;
	uint32_t ring_entries;
	uint32_t page_size;
	uint32_t num_contexts;          /* open contexts on the device */
	uint64_t memory_total;          /* device memory, bytes */
	uint64_t memory_used;           /* all contexts, bytes */
	uint64_t context_id;            /* the caller's context */
	uint64_t jobs_completed;
	uint64_t jobs_failed;
	uint64_t busy_time_ns;          /* device busy time, all cores */
	uint32_t reset_count;
	uint32_t pad;                   /* must be 0 */
	char model[32];
	uint64_t reserved[2];           /* must be 0 (ABI 2.1) */
};

/* MEM_ALLOC: size, flags -> handle and device address (IOVA). */
struct npu_mem_alloc {
	uint64_t size;                  /* in: bytes (rounded up to page_size) */
	uint32_t flags;                 /* in: NPU_MEM_* (0 means NPU_MEM_RW) */
	uint32_t handle;                /* out */
	uint64_t iova;                  /* out: device address in this context */
	uint64_t alloc_size;            /* out: bytes actually reserved */
	uint64_t reserved[2];           /* must be 0 (ABI 2.1) */
};

/*
 * MEM_MAP: handle -> a one-shot token that buys the buffer's file descriptor on
 * the device's hand-over socket (FUSE cannot carry descriptors).  The client
 * connects to socket_path (AF_UNIX, SOCK_SEQPACKET), sends a struct
 * npu_handover_request with the token and receives a struct npu_handover_reply
 * with, when result is 0, the descriptor attached (SCM_RIGHTS): a sealed memfd
 * (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) to mmap(MAP_SHARED) at offset,
 * zero copy.  See docs/abi.md, "Buffer hand-over".
 */
struct npu_mem_map {
	uint32_t handle;                /* in */
	uint32_t pad;                   /* must be 0 */
	uint64_t size;                  /* out: mappable bytes */
	uint64_t offset;                /* out: mmap offset within the descriptor */
	uint64_t token;                 /* out: one-shot, for this context's uid, this buffer */
	char socket_path[NPU_MAX_PATH]; /* out: the device's hand-over socket, NUL-terminated */
	uint64_t reserved[2];           /* must be 0 (ABI 2.1) */
};

/* Hand-over socket: one request message, one reply message (the fd rides on the reply). */
struct npu_handover_request {
	uint32_t magic;                 /* NPU_HANDOVER_MAGIC */
	uint32_t reserved;              /* must be 0 */
	uint64_t token;                 /* from MEM_MAP */
};

struct npu_handover_reply {
	uint32_t magic;                 /* NPU_HANDOVER_MAGIC */
	int32_t result;                 /* 0 (descriptor attached) or -errno */
	uint64_t size;                  /* bytes of the buffer (0 on error) */
};

/* MEM_FREE: handle.  The backing stays alive until jobs using it complete. */
struct npu_mem_free {
	uint32_t handle;
	uint32_t pad;                   /* must be 0 */
	uint64_t reserved[2];           /* must be 0 (ABI 2.1) */
};

/*
 * SUBMIT: run the command buffer at [cmd_iova, cmd_iova + cmd_size) - a list of
 * task descriptors (npu_hw/tasks.py) - which must lie inside one of
 * the listed buffers.  Every buffer the tasks touch must be listed in bo_handles.
 * The write returns at once and the job runs later; the reply carries the
 * fence at once, or - with NPU_SUBMIT_WAIT - when the job is done.
 */
struct npu_submit {
	uint64_t cmd_iova;              /* in */
	uint32_t cmd_size;              /* in: bytes; 0 = empty job */
	uint32_t num_bos;               /* in: entries used in bo_handles */
	uint32_t priority;              /* in: NPU_PRIO_* */
	uint32_t timeout_ms;            /* in: 0 = device default */
	uint32_t flags;                 /* in: NPU_SUBMIT_* */
	int32_t status;                 /* out (NPU_SUBMIT_WAIT): 0 or -errno of the job */
	uint64_t fence;                 /* out: fence id (per context, increasing) */
	uint64_t device_time_ns;        /* out (NPU_SUBMIT_WAIT): simulated time the job took */
	uint32_t bo_handles[NPU_MAX_SUBMIT_BOS]; /* in */
	uint64_t reserved[2];           /* must be 0 (ABI 2.1) */
};

/* WAIT: block (in poll(), not read()) until fences signal or timeout_ns passes. */
struct npu_wait {
	uint32_t count;                 /* in: fences used */
	uint32_t flags;                 /* in: NPU_WAIT_ALL or NPU_WAIT_ANY */
	int64_t timeout_ns;             /* in: relative; 0 = just poll; < 0 = forever */
	uint32_t signaled;              /* out: fences signalled */
	uint32_t first_signaled;        /* out: index of the first signalled fence (ANY) */
	uint64_t fences[NPU_MAX_WAIT_FENCES];      /* in */
	int32_t status[NPU_MAX_WAIT_FENCES];       /* out: NPU_FENCE_* or -errno */
	uint64_t device_time_ns[NPU_MAX_WAIT_FENCES]; /* out: simulated time the job took */
	uint64_t reserved[2];           /* must be 0 (ABI 2.1) */
};

/* GET_STATS: statistics of the caller's context. */
struct npu_get_stats {
	uint64_t context_id;
	uint64_t memory_allocated;      /* bytes held by live buffers */
	uint64_t memory_peak;
	uint64_t buffers;               /* live buffers */
	uint64_t jobs_submitted;
	uint64_t jobs_completed;
	uint64_t jobs_failed;
	uint64_t busy_time_ns;          /* wall-clock ns the chip's cores spent on this context's jobs */
	uint64_t jobs_queued;           /* waiting for a ring slot */
	uint64_t jobs_running;          /* on the ring or executing */
	uint64_t reserved[2];           /* must be 0 (ABI 2.1) */
};

/* RESET: reset the device (privileged: root only).  Jobs in flight fail with EIO. */
struct npu_reset {
	uint32_t flags;                 /* must be 0 */
	uint32_t reset_count;           /* out */
	uint64_t reserved[2];           /* must be 0 (ABI 2.1) */
};

/*
 * GET_PARAM: one device fact by id (ABI 2.1).  An unknown id is EINVAL, so a client
 * learns what a driver knows by asking.  New facts get a new id here, never a new
 * GET_INFO field.
 */
/*
 * SUBMIT_BATCH (2.2): the first `count` entries of `jobs`, each a SUBMIT's payload,
 * checked as SUBMIT checks them and queued in order, in one request (one round trip
 * for several jobs; wait for them with WAIT).  All or nothing: when any entry is
 * refused (its errno is the reply's) none is queued.  An entry may not ask for
 * NPU_SUBMIT_WAIT (EINVAL); its reserved space must be zero.  Entries past `count`
 * are ignored.  The reply fills each queued entry's `fence`.
 */
struct npu_submit_batch {
	uint32_t count;                 /* in: 1..NPU_MAX_BATCH_JOBS */
	uint32_t flags;                 /* in: must be 0 */
	struct npu_submit jobs[NPU_MAX_BATCH_JOBS]; /* in; out: fence */
	uint64_t reserved[2];           /* must be 0 */
};

struct npu_get_param {
	uint32_t param;                 /* in: NPU_PARAM_* */
	uint32_t pad;                   /* must be 0 */
	uint64_t value;                 /* out */
	uint64_t reserved[2];           /* must be 0 */
};

/* GET_PROFILE: one task of a profiled job, as the chip timed it. */
struct npu_task_profile {
	uint16_t opcode;                /* the task's opcode (npu_hw) */
	uint16_t core;                  /* (2.7) the core it ran on: a task graph's may be another than the job's */
	uint32_t index;                 /* the task's index in the command buffer */
	uint64_t cycles;                /* simulated cycles (they add up to the job's) */
	uint64_t start_ns;              /* CLOCK_MONOTONIC, when the core started the task */
	uint64_t end_ns;                /* CLOCK_MONOTONIC, when it finished */
};

/*
 * GET_PROFILE: the per-task timing of a finished job submitted with NPU_SUBMIT_PROFILE, or
 * (2.6) of a user-queue job whose entry asked for NPU_QUEUE_ENTRY_PROFILE, named by its
 * queue fence (NPU_QUEUE_FENCE_BIT; its submit_ns is when a core took the entry)
 * (the driver keeps the last 256 of each context, 16384 task records at most).  A job with more than
 * NPU_MAX_PROFILE_TASKS tasks takes several calls: `first` pages through them.
 */
struct npu_get_profile {
	uint64_t fence;                 /* in: a fence of this context, or a queue fence of one of its queues */
	uint32_t first;                 /* in: index of the first task record wanted */
	uint32_t count;                 /* out: records filled in tasks[] */
	uint32_t num_tasks;             /* out: tasks the job ran */
	uint32_t core;                  /* out: the core that ran it */
	int32_t status;                 /* out: the job's status (0 or -errno) */
	uint32_t complete;              /* out: 1 if every record arrived (0: the chip's profile queue overflowed) */
	uint64_t submit_ns;             /* out: CLOCK_MONOTONIC when the driver accepted the SUBMIT */
	uint64_t start_ns;              /* out: when the core started the job (queue wait = start - submit) */
	uint64_t end_ns;                /* out: when it finished executing (before any pacing) */
	uint64_t signal_ns;             /* out: when the driver signalled the fence */
	uint64_t cycles;                /* out: simulated cycles of the job */
	uint64_t device_time_ns;        /* out: simulated time of the job */
	struct npu_task_profile tasks[NPU_MAX_PROFILE_TASKS]; /* out */
	uint64_t reserved[2];           /* must be 0 */
};

#define NPU_PARAM_ABI_VERSION 0         /* NPU_ABI_VERSION of the driver */
#define NPU_PARAM_DEVICE_ID 1
#define NPU_PARAM_HW_VERSION 2
#define NPU_PARAM_NUM_CORES 3
#define NPU_PARAM_CLOCK_MHZ 4
#define NPU_PARAM_RING_ENTRIES 5
#define NPU_PARAM_PAGE_SIZE 6
#define NPU_PARAM_MEMORY_TOTAL 7        /* bytes */
#define NPU_PARAM_MEMORY_USED 8         /* bytes, all contexts */
#define NPU_PARAM_RESET_COUNT 9
#define NPU_PARAM_DEFAULT_JOB_TIMEOUT_MS 10 /* a SUBMIT's timeout when it gives 0 */
#define NPU_PARAM_MAX_JOB_TIMEOUT_MS 11 /* SUBMIT timeouts are clamped to this */
#define NPU_PARAM_MAX_SUBMIT_BOS 12
#define NPU_PARAM_MAX_WAIT_FENCES 13
#define NPU_PARAM_MAX_OUTSTANDING 14    /* requests one open file may have in flight */
#define NPU_PARAM_MAX_BATCH_JOBS 15     /* (2.2) jobs one SUBMIT_BATCH may carry */
#define NPU_PARAM_PROFILE 16            /* hardware profile id (npu_hw/profiles.py) */
#define NPU_PARAM_MACS_PER_CYCLE 17     /* int8 MACs per cycle, per core */
#define NPU_PARAM_DMA_BYTES_PER_CYCLE 18 /* memory bandwidth: bytes per cycle */
#define NPU_PARAM_SRAM_BYTES 19         /* on-chip SRAM per core */
#define NPU_PARAM_TASK_OVERHEAD_CYCLES 20 /* timing model: cycles each task costs besides its work */
#define NPU_PARAM_PACING 21             /* 1: a job ends no earlier than its modeled device time */
#define NPU_PARAM_UUID_LO 22            /* the device's UUID, bytes 0..7 (little endian) */
#define NPU_PARAM_UUID_HI 23            /* the device's UUID, bytes 8..15 */
#define NPU_PARAM_MAX_QUEUES_PER_CONTEXT 24 /* (2.4) user queues one context may create (0: none) */
#define NPU_PARAM_QUEUE_SLOTS 25        /* (2.4) user queues the chip serves at once, all contexts */
#define NPU_PARAM_QUEUE_WAKEUPS 26      /* (2.8) the NPU_QUEUE_WAIT_* bits the chip honours in `waiting` */

/*
 * QUEUE_CREATE (ABI 2.4): a user-mode submission queue of this context (docs/abi.md,
 * "User queues").  The driver allocates the queue memory (a header, `entries`
 * submission entries, as many completion records; layout in npu_hw/queues.py),
 * maps it in this context's device address space and registers it with the chip.  The
 * three tokens buy, on the hand-over socket as MEM_MAP's does, the queue memory (a sealed
 * memfd to mmap), its doorbell (a pipe's write end: write a byte after moving the tail,
 * unless the header says the core is polling) and its completion line (a pipe's read end
 * the chip writes a byte into after a completion when the header says the client waits).  The queue lives until
 * QUEUE_DESTROY, the context closing or a device reset (then its header's error is -ECANCELED).
 */
struct npu_queue_create {
	uint32_t entries;               /* in: a power of two up to NPU_QUEUE_MAX_ENTRIES (0: NPU_QUEUE_DEFAULT_ENTRIES) */
	uint32_t priority;              /* in: NPU_PRIO_* */
	uint32_t flags;                 /* in: must be 0 */
	uint32_t queue_id;              /* out: the queue's slot in the chip's queue table */
	uint64_t size;                  /* out: bytes of the queue memory */
	uint64_t iova;                  /* out: its device address in this context */
	uint32_t core;                  /* out: the core that serves the queue */
	uint32_t timeout_cap_ms;        /* out: jobs' timeouts are clamped to this (0 in an entry: the default) */
	uint64_t memory_token;          /* out: hand-over token of the queue memory */
	uint64_t doorbell_token;        /* out: hand-over token of the doorbell (pipe write end) */
	uint64_t completion_token;      /* out: hand-over token of the completion line (pipe read end) */
	char socket_path[NPU_MAX_PATH]; /* out: the device's hand-over socket, NUL-terminated */
	uint64_t reserved[2];           /* must be 0 */
};
#define NPU_QUEUE_DEFAULT_ENTRIES 64
#define NPU_QUEUE_MAX_ENTRIES 1024

/*
 * QUEUE_DESTROY (ABI 2.6): give back a user queue of this context.  Without flags a queue
 * with jobs in flight (tail past done) is refused with EBUSY: wait for them first (as
 * amdxdna waits for a hardware context to go idle).  NPU_QUEUE_DESTROY_CANCEL destroys
 * it anyway, as ivpu's CMDQ_DESTROY does: entries not started never run, a running one is
 * aborted (ECANCELED).  The reply comes once the chip has let go of the queue: its slot is
 * free, its memory given back (the client's mapping reads zeros: magic 0), its lines gone,
 * and the context's and the user's queue counts are down.  ENOENT: no live queue of this
 * context has that id (never created, another context's, destroyed, stopped by a reset);
 * EINVAL: an id past the chip's slots, unknown flags.
 */
struct npu_queue_destroy {
	uint32_t queue_id;              /* in: queue_id as QUEUE_CREATE answered */
	uint32_t flags;                 /* in: 0 or NPU_QUEUE_DESTROY_CANCEL */
	uint64_t reserved[2];           /* must be 0 */
};
#define NPU_QUEUE_DESTROY_CANCEL 0x1    /* destroy even with jobs in flight: they are cancelled */

/*
 * A queue job's fence for GET_PROFILE (ABI 2.6): NPU_QUEUE_FENCE_BIT | queue_id << NPU_QUEUE_FENCE_SHIFT | seq.
 * SUBMIT fences never have the bit set.
 */
#define NPU_QUEUE_FENCE_BIT 0x8000000000000000
#define NPU_QUEUE_FENCE_SHIFT 48

/*
 * The queue memory: struct npu_queue_header at 0, `entries` struct npu_queue_entry at
 * NPU_QUEUE_HEADER_SIZE, then `entries` struct npu_queue_completion.  Job `seq` (from 1)
 * uses index seq % entries of both arrays.  Read and write tail, done, waiting and polling
 * with single aligned accesses (the other side runs at the same time).
 */
#define NPU_QUEUE_MAGIC 0x5155504e      /* "NPUQ" little endian */
#define NPU_QUEUE_HEADER_SIZE 256
struct npu_queue_header {
	uint32_t magic;                 /* driver: NPU_QUEUE_MAGIC; 0 once the driver gave the queue back */
	uint32_t entries;               /* driver */
	uint64_t tail;                  /* client: seq of the last entry written */
	uint64_t done;                  /* chip: seq of the last completion written */
	uint32_t waiting;               /* client: 0, or how to wake it after each completion: NPU_QUEUE_WAIT_FUTEX
	                                   (2.8) and/or any other bit: the completion line (before 2.8: any non-zero) */
	uint32_t polling;               /* chip: non-zero: the serving core watches tail (no doorbell needed) */
	int32_t error;                  /* chip / driver: 0, or -errno: the queue stopped */
	uint32_t pad;
	uint64_t failed_task;           /* chip (2.9): the last job that failed in a task: (seq & 0xffffffff) << 32
	                                   | that task's index in the command buffer; 0 = none yet */
};

struct npu_queue_entry {
	uint64_t seq;                   /* the job's seq (an entry with another is EINVAL) */
	uint64_t cmd_iova;              /* command buffer, in this context's address space */
	uint32_t cmd_size;
	uint32_t timeout_ms;            /* 0: the device default; clamped to timeout_cap_ms */
	uint32_t flags;                 /* 0 or NPU_QUEUE_ENTRY_PROFILE (2.6); another bit fails the job with EINVAL */
	uint32_t reserved;
};
#define NPU_QUEUE_ENTRY_PROFILE 0x1     /* (2.6) time the job's tasks: GET_PROFILE with the job's queue fence */
#define NPU_QUEUE_WAIT_LINE 0x1         /* `waiting`: a byte on the completion line after each completion */
#define NPU_QUEUE_WAIT_FUTEX 0x2        /* (2.8) `waiting`: FUTEX_WAKE (shared, one waiter) on the low 32 bits of
                                           `done` after each completion: sleep with FUTEX_WAIT on them */

struct npu_queue_completion {
	uint64_t seq;
	int32_t status;                 /* 0 or -errno, as a fence's */
	uint32_t core;
	uint64_t cycles;
	uint64_t device_time_ns;
	uint64_t fault_iova;            /* the faulting address, for EFAULT */
	uint64_t exec_ns;               /* wall-clock ns the core spent on the job */
};

/* Each command's payload size in the ABI version that introduced it (the smallest the driver takes). */
#define NPU_GET_INFO_SIZE_VER0 120
#define NPU_MEM_ALLOC_SIZE_VER0 32
#define NPU_MEM_MAP_SIZE_VER0 288
#define NPU_MEM_FREE_SIZE_VER0 8
#define NPU_SUBMIT_SIZE_VER0 304
#define NPU_WAIT_SIZE_VER0 1304
#define NPU_GET_STATS_SIZE_VER0 80
#define NPU_RESET_SIZE_VER0 8

#define NPU_CMD_GET_INFO  0xc0884e00
#define NPU_CMD_MEM_ALLOC 0xc0304e01
#define NPU_CMD_MEM_MAP   0xc1304e02
#define NPU_CMD_MEM_FREE  0xc0184e03
#define NPU_CMD_SUBMIT    0xc1404e04
#define NPU_CMD_WAIT      0xc5284e05
#define NPU_CMD_GET_STATS 0xc0604e06
#define NPU_CMD_RESET     0xc0184e07
#define NPU_CMD_GET_PARAM 0xc0204e08
#define NPU_CMD_SUBMIT_BATCH 0xca184e09
#define NPU_CMD_GET_PROFILE 0xcc604e0a
#define NPU_CMD_QUEUE_CREATE 0xc1504e0b
#define NPU_CMD_QUEUE_DESTROY 0xc0184e0c

/* ---- C only: cffi skips everything from here to the end marker ---- */
#if !defined(NPU_UAPI_CDEF)
#include <stddef.h>
#include <linux/ioctl.h>
#define NPU_CHECK_CMD(cmd, nr, type) \
	_Static_assert((cmd) == _IOWR(NPU_IOC_TYPE, nr, type), #cmd " does not match _IOWR")
NPU_CHECK_CMD(NPU_CMD_GET_INFO, 0x00, struct npu_get_info);
NPU_CHECK_CMD(NPU_CMD_MEM_ALLOC, 0x01, struct npu_mem_alloc);
NPU_CHECK_CMD(NPU_CMD_MEM_MAP, 0x02, struct npu_mem_map);
NPU_CHECK_CMD(NPU_CMD_MEM_FREE, 0x03, struct npu_mem_free);
NPU_CHECK_CMD(NPU_CMD_SUBMIT, 0x04, struct npu_submit);
NPU_CHECK_CMD(NPU_CMD_WAIT, 0x05, struct npu_wait);
NPU_CHECK_CMD(NPU_CMD_GET_STATS, 0x06, struct npu_get_stats);
NPU_CHECK_CMD(NPU_CMD_RESET, 0x07, struct npu_reset);
NPU_CHECK_CMD(NPU_CMD_GET_PARAM, 0x08, struct npu_get_param);
NPU_CHECK_CMD(NPU_CMD_SUBMIT_BATCH, 0x09, struct npu_submit_batch);
NPU_CHECK_CMD(NPU_CMD_GET_PROFILE, 0x0a, struct npu_get_profile);
NPU_CHECK_CMD(NPU_CMD_QUEUE_CREATE, 0x0b, struct npu_queue_create);
NPU_CHECK_CMD(NPU_CMD_QUEUE_DESTROY, 0x0c, struct npu_queue_destroy);
#define NPU_CHECK_VER0(name, type) \
	_Static_assert(offsetof(type, reserved) == NPU_##name##_SIZE_VER0, #type " grew other than by appending")
NPU_CHECK_VER0(GET_INFO, struct npu_get_info);
NPU_CHECK_VER0(MEM_ALLOC, struct npu_mem_alloc);
NPU_CHECK_VER0(MEM_MAP, struct npu_mem_map);
NPU_CHECK_VER0(MEM_FREE, struct npu_mem_free);
NPU_CHECK_VER0(SUBMIT, struct npu_submit);
NPU_CHECK_VER0(WAIT, struct npu_wait);
NPU_CHECK_VER0(GET_STATS, struct npu_get_stats);
NPU_CHECK_VER0(RESET, struct npu_reset);
_Static_assert(sizeof(struct npu_handover_request) == 16, "hand-over request is 16 bytes");
_Static_assert(sizeof(struct npu_handover_reply) == 16, "hand-over reply is 16 bytes");
#endif
/* ---- end of C only ---- */

#endif /* NPU_UAPI_H */
