/* nvdla_port.c - NVDLA's portability layer over the emulated NPU's device node (nvdla_port.h).
 *
 * Requests are frames written to and read from the node (npu_uapi.h): one write of
 * header + payload, then reads of the reply to our sequence number and no other (pread
 * at NPU_REPLY_BY_SEQ + seq; the driver answers EAGAIN while it is not ready, poll()
 * sleeps until a reply is). Buffer memory
 * is a sealed memfd bought with MEM_MAP's one-shot token on the device's hand-over
 * socket (SOCK_SEQPACKET, the descriptor rides on SCM_RIGHTS) and mapped shared: the
 * chip sees the same pages. docs/abi.md describes both; libnpu/portability.py and
 * libnpu/transport.py are the Python side of the same protocol.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "nvdla_port.h"

#define HANDOVER_MAX_FDS 8          /* room to receive (and close) what a lying peer attaches */

/* Handles. A pointer the caller passes is never dereferenced until it is found among the
 * live objects (compared by address under `handles`), so a forged, freed or foreign
 * handle is NvError_BadParameter, not a crash. A device in use by a call is held
 * (`users`); closing it waits until no call holds it, so a call racing a close or a
 * destroy in another thread either finishes first or finds the device gone. */
struct memory {
    uint32_t handle;
    uint64_t iova;
    uint64_t size;                  /* mapped bytes */
    void *cpu;
    struct memory *next;
};

struct device {
    int fd;
    int handover;                   /* connection to the hand-over socket, -1 until first used */
    uint32_t seq;
    pthread_mutex_t lock;           /* one request on the node at a time */
    unsigned users;                 /* calls holding the device (guarded by `handles`) */
    struct memory *memories;        /* guarded by `handles` */
    struct session *session;
    struct device *next;
};

struct session {
    struct device *devices;         /* guarded by `handles` */
    struct session *next;
};

static pthread_mutex_t handles = PTHREAD_MUTEX_INITIALIZER;   /* guards every list and count above */
static pthread_cond_t let_go = PTHREAD_COND_INITIALIZER;       /* a device's last user let go */
static struct session *sessions;

static void debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void debug(const char *fmt, ...)
{
    const char *flag = getenv("NPU_DEBUG");
    if (flag == NULL || flag[0] == '\0' || strcmp(flag, "0") == 0)
        return;
    va_list args;
    va_start(args, fmt);
    fputs("nvdla_port: ", stderr);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
}

void NvDlaDebugPrintf(const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
}

/* The same table as libnpu/nvdla.py's _ERRNO_TO_NVERROR. */
static NvError from_errno(int err)
{
    switch (err) {
    case 0: return NvSuccess;
    case EINVAL: return NvError_BadParameter;
    case ENOMEM: return NvError_InsufficientMemory;
    case ETIMEDOUT: return NvError_Timeout;
    case EFAULT: return NvError_InvalidAddress;
    case EBUSY: return NvError_Busy;
    case EPERM: case EACCES: return NvError_AccessDenied;
    case ENOENT: return NvError_BadValue;
    case E2BIG: return NvError_InvalidSize;
    case ENOTTY: return NvError_IoctlFailed;
    case EIO: return NvError_ResourceError;
    case ENODEV: return NvError_NotInitialized;
    default: return NvError_IoctlFailed;
    }
}

/* ---- requests on the node (call with dev->lock held) ---- */

_Static_assert(sizeof(off_t) == 8, "pread offsets past NPU_REPLY_BY_SEQ need a 64-bit off_t");

static int request(struct device *dev, uint32_t cmd, void *payload, size_t size)
{
    unsigned char frame[NPU_MAX_FRAME];
    const uint32_t seq = ++dev->seq;
    struct npu_frame_hdr hdr = { NPU_FRAME_MAGIC, cmd, seq, (uint32_t)size, 0, 0 };
    if (sizeof hdr + size > sizeof frame)
        return -E2BIG;
    memcpy(frame, &hdr, sizeof hdr);
    memcpy(frame + sizeof hdr, payload, size);
    if (write(dev->fd, frame, sizeof hdr + size) < 0)
        return -errno;
    for (;;) {
        struct pollfd wait = { .fd = dev->fd, .events = POLLIN };
        if (poll(&wait, 1, 1000) < 0 && errno != EINTR)
            return -errno;
        /* By seq: a reply an earlier failed read left behind can never be taken for this one. */
        ssize_t n = pread(dev->fd, frame, sizeof frame, (off_t)(NPU_REPLY_BY_SEQ + seq));
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;               /* not ready yet: the driver never blocks a read for long */
        if (n < (ssize_t)sizeof hdr)
            return n < 0 ? -errno : -EPROTO;
        memcpy(&hdr, frame, sizeof hdr);
        if (hdr.magic != NPU_FRAME_MAGIC || hdr.seq != seq || hdr.cmd != cmd)
            return -EPROTO;
        if (hdr.result > 0 || hdr.result <= -4096)
            return -EPROTO;         /* a result is 0 or -errno: anything else is not the driver */
        if (hdr.size == size && (size_t)n == sizeof hdr + size)
            memcpy(payload, frame + sizeof hdr, size);
        else if (hdr.result == 0)
            return -EPROTO;
        return hdr.result;
    }
}

static int handover_connect(struct device *dev, const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return -errno;
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int err = errno;
        close(sock);
        return -err;
    }
    dev->handover = sock;
    return 0;
}

/* One exchange on the hand-over socket: the buffer's descriptor, or -errno
 * (-EPIPE / -ECONNRESET when the driver dropped an idle connection). The peer is
 * believed only for exactly one reply of the right size with exactly one descriptor:
 * every descriptor that came is closed otherwise, and a result that is not a negative
 * errno is a protocol error, never taken for a descriptor. */
static int handover_once(struct device *dev, const struct npu_mem_map *map)
{
    struct npu_handover_request req = { NPU_HANDOVER_MAGIC, 0, map->token };
    struct npu_handover_reply reply = { 0, 0, 0 };
    union { struct cmsghdr align; char buf[CMSG_SPACE(HANDOVER_MAX_FDS * sizeof(int))]; } control;
    struct iovec iov = { &reply, sizeof reply };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                          .msg_controllen = sizeof control.buf };
    int received = -1, count = 0;

    if (send(dev->handover, &req, sizeof req, MSG_NOSIGNAL) != (ssize_t)sizeof req)
        return -errno;
    ssize_t n = recvmsg(dev->handover, &msg, MSG_CMSG_CLOEXEC);
    if (n == 0)
        return -ECONNRESET;
    if (n < 0)
        return -errno;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
            continue;
        size_t fds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < fds; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (count++ == 0)
                received = fd;
            else
                close(fd);
        }
    }
    if (n == (ssize_t)sizeof reply && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
        reply.magic == NPU_HANDOVER_MAGIC && reply.result == 0 && count == 1 && reply.size == map->size)
        return received;
    if (received >= 0)
        close(received);
    if (n == (ssize_t)sizeof reply && reply.magic == NPU_HANDOVER_MAGIC && reply.result < 0 &&
        reply.result > -4096 && count == 0)
        return reply.result;
    debug("hand-over: a malformed reply (%zd bytes, %d descriptors)", n, count);
    return -EPROTO;
}

static int receive_buffer(struct device *dev, const struct npu_mem_map *map)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (dev->handover < 0) {
            int err = handover_connect(dev, map->socket_path);
            if (err < 0)
                return err;
        }
        int fd = handover_once(dev, map);
        if (fd != -EPIPE && fd != -ECONNRESET)
            return fd;
        close(dev->handover);       /* the driver closed an idle connection: connect again */
        dev->handover = -1;
    }
    return -ECONNRESET;
}

/* ---- handles (call with `handles` held unless said otherwise) ---- */

static struct session *find_session(const void *p)
{
    struct session *s = sessions;
    while (s != NULL && s != p)
        s = s->next;
    return s;
}

static struct device *find_device(const struct session *s, const void *p)
{
    struct device *d = s != NULL ? s->devices : NULL;
    while (d != NULL && d != p)
        d = d->next;
    return d;
}

static struct memory *find_memory(const struct device *d, const void *p)
{
    struct memory *m = d->memories;
    while (m != NULL && m != p)
        m = m->next;
    return m;
}

/* `device` of `session`, held until put_device(), or NULL when either is no live handle
 * (takes `handles` itself). */
static struct device *get_device(const void *session, const void *device)
{
    pthread_mutex_lock(&handles);
    struct device *d = find_device(find_session(session), device);
    if (d != NULL)
        d->users++;
    pthread_mutex_unlock(&handles);
    return d;
}

static void put_device(struct device *d)
{
    pthread_mutex_lock(&handles);
    if (--d->users == 0)
        pthread_cond_broadcast(&let_go);
    pthread_mutex_unlock(&handles);
}

/* Take `d` off its session's list (no call finds it any more) and wait until no call
 * holds it; then it is the caller's alone, for close_device(). */
static void detach_device(struct device *d)
{
    for (struct device **p = &d->session->devices; *p != NULL; p = &(*p)->next)
        if (*p == d) {
            *p = d->next;
            break;
        }
    while (d->users > 0)
        pthread_cond_wait(&let_go, &handles);
}

/* ---- session and devices ---- */

NvError NvDlaInitialize(void **session)
{
    if (session == NULL)
        return NvError_BadParameter;
    struct session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NvError_InsufficientMemory;
    pthread_mutex_lock(&handles);
    s->next = sessions;
    sessions = s;
    pthread_mutex_unlock(&handles);
    *session = s;
    return NvSuccess;
}

NvError NvDlaOpen(void *session, NvU32 instance, void **device)
{
    if (device == NULL)
        return NvError_BadParameter;
    *device = NULL;
    pthread_mutex_lock(&handles);
    int known = find_session(session) != NULL;
    pthread_mutex_unlock(&handles);
    if (!known)
        return NvError_BadParameter;
    const char *root = getenv("NPU_DEVROOT");
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/npu%u", root != NULL && root[0] != '\0' ? root : "/dev", instance) >=
        (int)sizeof path) {
        debug("NPU_DEVROOT is too long for a path");
        return NvError_BadParameter;    /* never open a truncated path: it names another file */
    }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        debug("open %s: %s", path, strerror(err));
        return err == ENOENT ? NvError_FileOperationFailed : from_errno(err);
    }
    struct device *d = calloc(1, sizeof *d);
    if (d == NULL) {
        close(fd);
        return NvError_InsufficientMemory;
    }
    *d = (struct device){ .fd = fd, .handover = -1 };
    pthread_mutex_init(&d->lock, NULL);
    struct npu_get_info info;
    memset(&info, 0, sizeof info);
    int err = request(d, NPU_CMD_GET_INFO, &info, sizeof info);
    NvError result = NvSuccess;
    if (err == 0 && info.abi_version >> 16 != NPU_ABI_VERSION >> 16) {
        debug("%s speaks ABI %#x; this library ABI %#x", path, info.abi_version, NPU_ABI_VERSION);
        result = NvError_NotSupported;
    } else if (err != 0) {
        debug("GET_INFO on %s: %s", path, strerror(-err));
        result = from_errno(-err);
    } else {
        pthread_mutex_lock(&handles);
        struct session *s = find_session(session);     /* destroyed meanwhile by another thread? */
        if (s != NULL) {
            d->session = s;
            d->next = s->devices;
            s->devices = d;
        }
        pthread_mutex_unlock(&handles);
        result = s != NULL ? NvSuccess : NvError_BadParameter;
    }
    if (result != NvSuccess) {
        close(fd);
        pthread_mutex_destroy(&d->lock);
        free(d);
        return result;
    }
    *device = d;
    return NvSuccess;
}

/* Unmap and free `m`, already off every list (call with d->lock held). */
static void release_memory(struct device *d, struct memory *m)
{
    struct npu_mem_free req;
    memset(&req, 0, sizeof req);
    req.handle = m->handle;
    munmap(m->cpu, m->size);
    int err = request(d, NPU_CMD_MEM_FREE, &req, sizeof req);
    if (err != 0)
        debug("MEM_FREE %u: %s", m->handle, strerror(-err));
    free(m);
}

/* Free a detached device and everything it holds (without `handles`). */
static void close_device(struct device *d)
{
    pthread_mutex_lock(&d->lock);
    while (d->memories != NULL) {
        struct memory *m = d->memories;
        d->memories = m->next;
        release_memory(d, m);
    }
    pthread_mutex_unlock(&d->lock);
    if (d->handover >= 0)
        close(d->handover);
    close(d->fd);                   /* the driver frees whatever the context still held */
    pthread_mutex_destroy(&d->lock);
    free(d);
}

void NvDlaClose(void *session, void *device)
{
    pthread_mutex_lock(&handles);
    struct device *d = find_device(find_session(session), device);
    if (d != NULL)
        detach_device(d);
    pthread_mutex_unlock(&handles);
    if (d != NULL)
        close_device(d);
}

void NvDlaDestroy(void *session)
{
    pthread_mutex_lock(&handles);
    struct session *s = find_session(session);
    if (s == NULL) {
        pthread_mutex_unlock(&handles);
        return;
    }
    for (struct session **p = &sessions; *p != NULL; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    while (s->devices != NULL) {
        struct device *d = s->devices;
        detach_device(d);
        pthread_mutex_unlock(&handles);
        close_device(d);
        pthread_mutex_lock(&handles);
    }
    pthread_mutex_unlock(&handles);
    free(s);
}

/* ---- memory ---- */

/* The buffer's descriptor maps `size` bytes from `offset` only when the file is a buffer
 * the driver sealed at (at least) that size: a shorter or shrinkable file would raise
 * SIGBUS in the caller's program at its first touch past the end. */
static int check_buffer_file(int fd, uint64_t offset, uint64_t size)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    int seals = fcntl(fd, F_GET_SEALS);
    if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uint64_t)st.st_size < offset ||
        (uint64_t)st.st_size - offset < size || seals < 0 || !(seals & F_SEAL_SHRINK)) {
        debug("hand-over: the descriptor is not a sealed buffer of %llu bytes",
              (unsigned long long)(offset + size));
        return -EPROTO;
    }
    return 0;
}

NvError NvDlaAllocMem(void *session, void *device, void **mem_handle, void **pData, NvU32 size, NvDlaHeap heap)
{
    if (mem_handle == NULL || pData == NULL || size == 0 || (heap != NvDlaHeap_System && heap != NvDlaHeap_SRAM))
        return NvError_BadParameter;
    *mem_handle = *pData = NULL;
    struct device *d = get_device(session, device);
    if (d == NULL)
        return NvError_BadParameter;
    struct memory *m = calloc(1, sizeof *m);
    if (m == NULL) {
        put_device(d);
        return NvError_InsufficientMemory;
    }
    struct npu_mem_alloc alloc;
    struct npu_mem_map map;
    memset(&alloc, 0, sizeof alloc);
    memset(&map, 0, sizeof map);
    alloc.size = size;
    alloc.flags = NPU_MEM_RW;
    pthread_mutex_lock(&d->lock);
    int err = request(d, NPU_CMD_MEM_ALLOC, &alloc, sizeof alloc);
    if (err == 0) {
        map.handle = alloc.handle;
        err = request(d, NPU_CMD_MEM_MAP, &map, sizeof map);
        if (err == 0)
            map.socket_path[sizeof map.socket_path - 1] = '\0';
        if (err == 0 && (map.size < size || map.size > SIZE_MAX / 2 || map.offset > SIZE_MAX / 2))
            err = -EPROTO;          /* not the buffer just allocated: never map less than asked for */
    }
    void *cpu = MAP_FAILED;
    if (err == 0) {
        int fd = receive_buffer(d, &map);
        if (fd < 0) {
            err = fd;
        } else {
            err = check_buffer_file(fd, map.offset, map.size);
            if (err == 0) {
                cpu = mmap(NULL, map.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)map.offset);
                err = cpu == MAP_FAILED ? -errno : 0;
            }
            close(fd);
        }
    }
    if (err != 0) {
        debug("allocating %u bytes: %s", size, strerror(-err));
        if (alloc.handle != 0) {
            struct npu_mem_free req;
            memset(&req, 0, sizeof req);
            req.handle = alloc.handle;
            request(d, NPU_CMD_MEM_FREE, &req, sizeof req);
        }
        pthread_mutex_unlock(&d->lock);
        put_device(d);
        free(m);
        return from_errno(-err);
    }
    *m = (struct memory){ alloc.handle, alloc.iova, map.size, cpu, NULL };
    pthread_mutex_lock(&handles);
    m->next = d->memories;
    d->memories = m;
    pthread_mutex_unlock(&handles);
    pthread_mutex_unlock(&d->lock);
    put_device(d);
    *mem_handle = m;
    *pData = cpu;
    return NvSuccess;
}

NvError NvDlaFreeMem(void *session, void *device, void *mem_handle, void *pData, NvU32 size)
{
    struct device *d = get_device(session, device);
    if (d == NULL)
        return NvError_BadParameter;
    pthread_mutex_lock(&handles);
    struct memory *m = find_memory(d, mem_handle);
    if (m != NULL && (pData == NULL || pData == m->cpu) && size <= m->size) {
        for (struct memory **p = &d->memories; *p != NULL; p = &(*p)->next)
            if (*p == m) {
                *p = m->next;
                break;
            }
    } else {
        m = NULL;
    }
    pthread_mutex_unlock(&handles);
    if (m == NULL) {
        put_device(d);
        debug("NvDlaFreeMem: not a memory of this device (or pData/size do not match it)");
        return NvError_BadParameter;
    }
    pthread_mutex_lock(&d->lock);
    release_memory(d, m);
    pthread_mutex_unlock(&d->lock);
    put_device(d);
    return NvSuccess;
}

NvError NvDlaMemGetAddress(void *mem_handle, NvU64 *address)
{
    if (mem_handle == NULL || address == NULL)
        return NvError_BadParameter;
    struct memory *m = NULL;
    pthread_mutex_lock(&handles);
    for (struct session *s = sessions; s != NULL && m == NULL; s = s->next)
        for (struct device *d = s->devices; d != NULL && m == NULL; d = d->next)
            m = find_memory(d, mem_handle);
    if (m != NULL)
        *address = m->iova;
    pthread_mutex_unlock(&handles);
    return m != NULL ? NvSuccess : NvError_BadParameter;
}

/* ---- submission ---- */

/* SUBMIT's buffers and command buffer from a task's address list (takes `handles`). */
static NvError resolve_task(struct device *d, const NvDlaTask *task, struct npu_submit *req)
{
    NvError result = NvSuccess;
    pthread_mutex_lock(&handles);
    for (NvU32 i = 0; i < task->num_addresses && result == NvSuccess; i++) {
        const struct memory *m = find_memory(d, task->address_list[i]);
        if (m == NULL) {
            debug("task %llu: address_list[%u] is no memory of this device",
                  (unsigned long long)task->task_id, i);
            result = NvError_BadParameter;
            break;
        }
        if (i == 0) {
            if (task->command_size > m->size) {
                result = NvError_InvalidSize;
                break;
            }
            req->cmd_iova = m->iova;
            req->cmd_size = task->command_size ? task->command_size : (uint32_t)m->size;
        }
        NvU32 j = 0;
        while (j < req->num_bos && req->bo_handles[j] != m->handle)
            j++;
        if (j == req->num_bos)
            req->bo_handles[req->num_bos++] = m->handle;
    }
    pthread_mutex_unlock(&handles);
    return result;
}

static NvError submit_one(struct device *d, const NvDlaTask *task)
{
    if (task->num_addresses < 1 || task->num_addresses > NVDLA_MAX_BUFFERS_PER_TASK)
        return NvError_BadParameter;
    struct npu_submit req;
    memset(&req, 0, sizeof req);
    NvError resolved = resolve_task(d, task, &req);
    if (resolved != NvSuccess)
        return resolved;
    req.priority = NPU_PRIO_NORMAL;
    req.flags = NPU_SUBMIT_WAIT;
    int err = request(d, NPU_CMD_SUBMIT, &req, sizeof req);
    if (err != 0) {
        debug("task %llu: SUBMIT: %s", (unsigned long long)task->task_id, strerror(-err));
        return from_errno(-err);
    }
    if (req.status != 0) {
        debug("task %llu failed on the chip: %s", (unsigned long long)task->task_id, strerror(-req.status));
        return from_errno(-req.status);
    }
    return NvSuccess;
}

NvError NvDlaSubmit(void *session, void *device, NvDlaTask *tasks, NvU32 num_tasks)
{
    if (tasks == NULL || num_tasks == 0)
        return NvError_BadParameter;
    struct device *d = get_device(session, device);
    if (d == NULL)
        return NvError_BadParameter;
    NvError result = NvSuccess;
    pthread_mutex_lock(&d->lock);
    for (NvU32 i = 0; i < num_tasks && result == NvSuccess; i++)
        result = submit_one(d, &tasks[i]);
    pthread_mutex_unlock(&d->lock);
    put_device(d);
    return result;
}
