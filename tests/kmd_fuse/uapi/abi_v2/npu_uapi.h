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
 * in completion order and are matched to requests by seq.  A reply that is not
 * ready yet (WAIT) is signalled with POLLIN; read() without a ready reply fails
 * with EAGAIN after a short server-side wait, so a client never blocks unboundedly.
 * Buffers' memory comes as sealed memfds from a per-device Unix socket (see MEM_MAP).
 *
 * Command numbers are encoded like Linux _IOWR('N', nr, struct npu_xxx):
 * dir(2 bits, 3 = read|write) << 30 | size(14 bits) << 16 | 'N' << 8 | nr.
 * The values are spelled out below (cffi cannot evaluate macros) and checked
 * against _IOWR by static asserts in the C-only block and by the Python loader.
 */
#ifndef NPU_UAPI_H
#define NPU_UAPI_H

#include <stdint.h>

#define NPU_ABI_VERSION 0x00020000      /* major << 16 | minor: 2.0 = buffers handed over as sealed memfds */
#define NPU_FRAME_MAGIC 0x3155504e      /* "NPU1" little endian */
#define NPU_IOC_TYPE 0x4e               /* 'N' */

#define NPU_MAX_FRAME 4096              /* largest request or reply frame */
#define NPU_MAX_SUBMIT_BOS 64           /* buffers one job may reference */
#define NPU_MAX_WAIT_FENCES 64          /* fences one WAIT may name */
#define NPU_MAX_PATH 256
#define NPU_HANDOVER_MAGIC 0x4f48504e   /* "NPHO" little endian: buffer hand-over messages */

/* MEM_ALLOC flags */
#define NPU_MEM_READ 0x1                /* device may read the buffer */
#define NPU_MEM_WRITE 0x2               /* device may write the buffer */
#define NPU_MEM_RW 0x3

/* SUBMIT flags */
#define NPU_SUBMIT_WAIT 0x1             /* reply only when the job is done (one round trip per sync job) */

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
	uint32_t pad;
	char model[32];
};

/* MEM_ALLOC: size, flags -> handle and device address (IOVA). */
struct npu_mem_alloc {
	uint64_t size;                  /* in: bytes (rounded up to page_size) */
	uint32_t flags;                 /* in: NPU_MEM_* (0 means NPU_MEM_RW) */
	uint32_t handle;                /* out */
	uint64_t iova;                  /* out: device address in this context */
	uint64_t alloc_size;            /* out: bytes actually reserved */
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
	uint32_t pad;
	uint64_t size;                  /* out: mappable bytes */
	uint64_t offset;                /* out: mmap offset within the descriptor */
	uint64_t token;                 /* out: one-shot, for this context's uid, this buffer */
	char socket_path[NPU_MAX_PATH]; /* out: the device's hand-over socket, NUL-terminated */
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
	uint32_t pad;
};

/*
 * SUBMIT: run the command buffer at [cmd_iova, cmd_iova + cmd_size) - a list of
 * task descriptors (firmware_sim/spec/tasks.py) - which must lie inside one of
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
};

/* RESET: reset the device (privileged: root only).  Jobs in flight fail with EIO. */
struct npu_reset {
	uint32_t flags;                 /* must be 0 */
	uint32_t reset_count;           /* out */
};

#define NPU_CMD_GET_INFO  0xc0784e00
#define NPU_CMD_MEM_ALLOC 0xc0204e01
#define NPU_CMD_MEM_MAP   0xc1204e02
#define NPU_CMD_MEM_FREE  0xc0084e03
#define NPU_CMD_SUBMIT    0xc1304e04
#define NPU_CMD_WAIT      0xc5184e05
#define NPU_CMD_GET_STATS 0xc0504e06
#define NPU_CMD_RESET     0xc0084e07

/* ---- C only: cffi skips everything from here to the end marker ---- */
#if !defined(NPU_UAPI_CDEF)
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
_Static_assert(sizeof(struct npu_handover_request) == 16, "hand-over request is 16 bytes");
_Static_assert(sizeof(struct npu_handover_reply) == 16, "hand-over reply is 16 bytes");
#endif
/* ---- end of C only ---- */

#endif /* NPU_UAPI_H */
