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
#include <sys/un.h>
#include <unistd.h>

#include "nvdla_port.h"

#define SESSION_MAGIC 0x53414c44u   /* "DLAS" */
#define DEVICE_MAGIC 0x44414c44u    /* "DLAD" */
#define MEMORY_MAGIC 0x4d414c44u    /* "DLAM" */
#define HANDOVER_MAX_FDS 8          /* room to receive (and close) what a lying peer attaches */

struct memory {
    uint32_t magic;
    uint32_t handle;
    uint64_t iova;
    uint64_t size;                  /* mapped bytes */
    void *cpu;
    struct device *device;
    struct memory *next;
};

struct device {
    uint32_t magic;
    int fd;
    int handover;                   /* connection to the hand-over socket, -1 until first used */
    uint32_t seq;
    pthread_mutex_t lock;           /* one request at a time; guards memories too */
    struct memory *memories;
    struct session *session;
    struct device *next;
};

struct session {
    uint32_t magic;
    pthread_mutex_t lock;           /* guards devices */
    struct device *devices;
};

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

    /* EPIPE: the driver closed the connection; a refusal it sent first (EACCES, EBUSY)
     * may still be there to read, else the read finds the end (-ECONNRESET: reconnect) */
    if (send(dev->handover, &req, sizeof req, MSG_NOSIGNAL) != (ssize_t)sizeof req && errno != EPIPE)
        return -errno;
    ssize_t n = recvmsg(dev->handover, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == ECONNRESET)   /* reported before a reply still queued: read that */
        n = recvmsg(dev->handover, &msg, MSG_CMSG_CLOEXEC);
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

/* ---- session and devices ---- */

static struct session *as_session(void *p)
{
    struct session *s = p;
    return s != NULL && s->magic == SESSION_MAGIC ? s : NULL;
}

static struct device *as_device(struct session *s, void *p)
{
    if (s == NULL || p == NULL)
        return NULL;
    pthread_mutex_lock(&s->lock);
    struct device *d = s->devices;
    while (d != NULL && d != p)
        d = d->next;
    pthread_mutex_unlock(&s->lock);
    return d;
}

NvError NvDlaInitialize(void **session)
{
    if (session == NULL)
        return NvError_BadParameter;
    struct session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NvError_InsufficientMemory;
    s->magic = SESSION_MAGIC;
    pthread_mutex_init(&s->lock, NULL);
    *session = s;
    return NvSuccess;
}

NvError NvDlaOpen(void *session, NvU32 instance, void **device)
{
    struct session *s = as_session(session);
    if (s == NULL || device == NULL)
        return NvError_BadParameter;
    *device = NULL;
    const char *root = getenv("NPU_DEVROOT");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/npu%u", root != NULL && root[0] != '\0' ? root : "/dev", instance);
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
    *d = (struct device){ .magic = DEVICE_MAGIC, .fd = fd, .handover = -1, .session = s };
    pthread_mutex_init(&d->lock, NULL);
    struct npu_get_info info;
    memset(&info, 0, sizeof info);
    int err = request(d, NPU_CMD_GET_INFO, &info, sizeof info);
    if (err == 0 && info.abi_version >> 16 != NPU_ABI_VERSION >> 16) {
        debug("%s speaks ABI %#x; this library ABI %#x", path, info.abi_version, NPU_ABI_VERSION);
        close(fd);
        free(d);
        return NvError_NotSupported;
    }
    if (err != 0) {
        debug("GET_INFO on %s: %s", path, strerror(-err));
        close(fd);
        free(d);
        return from_errno(-err);
    }
    pthread_mutex_lock(&s->lock);
    d->next = s->devices;
    s->devices = d;
    pthread_mutex_unlock(&s->lock);
    *device = d;
    return NvSuccess;
}

static void release_memory(struct device *d, struct memory *m)
{
    struct npu_mem_free req;
    memset(&req, 0, sizeof req);
    req.handle = m->handle;
    munmap(m->cpu, m->size);
    int err = request(d, NPU_CMD_MEM_FREE, &req, sizeof req);
    if (err != 0)
        debug("MEM_FREE %u: %s", m->handle, strerror(-err));
    m->magic = 0;
    free(m);
}

void NvDlaClose(void *session, void *device)
{
    struct session *s = as_session(session);
    struct device *d = as_device(s, device);
    if (d == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    for (struct device **p = &s->devices; *p != NULL; p = &(*p)->next)
        if (*p == d) {
            *p = d->next;
            break;
        }
    pthread_mutex_unlock(&s->lock);
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
    d->magic = 0;
    free(d);
}

void NvDlaDestroy(void *session)
{
    struct session *s = as_session(session);
    if (s == NULL)
        return;
    while (s->devices != NULL)
        NvDlaClose(s, s->devices);
    pthread_mutex_destroy(&s->lock);
    s->magic = 0;
    free(s);
}

/* ---- memory ---- */

NvError NvDlaAllocMem(void *session, void *device, void **mem_handle, void **pData, NvU32 size, NvDlaHeap heap)
{
    struct device *d = as_device(as_session(session), device);
    if (d == NULL || mem_handle == NULL || pData == NULL || size == 0 ||
        (heap != NvDlaHeap_System && heap != NvDlaHeap_SRAM))
        return NvError_BadParameter;
    *mem_handle = *pData = NULL;
    struct memory *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NvError_InsufficientMemory;
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
            cpu = mmap(NULL, map.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)map.offset);
            err = cpu == MAP_FAILED ? -errno : 0;
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
        free(m);
        return from_errno(-err);
    }
    *m = (struct memory){ MEMORY_MAGIC, alloc.handle, alloc.iova, map.size, cpu, d, d->memories };
    d->memories = m;
    pthread_mutex_unlock(&d->lock);
    *mem_handle = m;
    *pData = cpu;
    return NvSuccess;
}

NvError NvDlaFreeMem(void *session, void *device, void *mem_handle, void *pData, NvU32 size)
{
    struct device *d = as_device(as_session(session), device);
    if (d == NULL || mem_handle == NULL)
        return NvError_BadParameter;
    pthread_mutex_lock(&d->lock);
    struct memory **p = &d->memories;
    while (*p != NULL && *p != mem_handle)
        p = &(*p)->next;
    struct memory *m = *p;
    if (m == NULL || (pData != NULL && pData != m->cpu) || size > m->size) {
        pthread_mutex_unlock(&d->lock);
        debug("NvDlaFreeMem: not a memory of this device (or pData/size do not match it)");
        return NvError_BadParameter;
    }
    *p = m->next;
    release_memory(d, m);
    pthread_mutex_unlock(&d->lock);
    return NvSuccess;
}

NvError NvDlaMemGetAddress(void *mem_handle, NvU64 *address)
{
    struct memory *m = mem_handle;
    if (m == NULL || address == NULL || m->magic != MEMORY_MAGIC)
        return NvError_BadParameter;
    *address = m->iova;
    return NvSuccess;
}

/* ---- submission ---- */

static NvError submit_one(struct device *d, const NvDlaTask *task)
{
    if (task->num_addresses < 1 || task->num_addresses > NVDLA_MAX_BUFFERS_PER_TASK)
        return NvError_BadParameter;
    struct npu_submit req;
    memset(&req, 0, sizeof req);
    for (NvU32 i = 0; i < task->num_addresses; i++) {
        struct memory *m = d->memories;
        while (m != NULL && m != task->address_list[i])
            m = m->next;
        if (m == NULL) {
            debug("task %llu: address_list[%u] is no memory of this device",
                  (unsigned long long)task->task_id, i);
            return NvError_BadParameter;
        }
        if (i == 0) {
            if (task->command_size > m->size)
                return NvError_InvalidSize;
            req.cmd_iova = m->iova;
            req.cmd_size = task->command_size ? task->command_size : (uint32_t)m->size;
        }
        NvU32 j = 0;
        while (j < req.num_bos && req.bo_handles[j] != m->handle)
            j++;
        if (j == req.num_bos)
            req.bo_handles[req.num_bos++] = m->handle;
    }
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
    struct device *d = as_device(as_session(session), device);
    if (d == NULL || tasks == NULL || num_tasks == 0)
        return NvError_BadParameter;
    NvError result = NvSuccess;
    pthread_mutex_lock(&d->lock);
    for (NvU32 i = 0; i < num_tasks && result == NvSuccess; i++)
        result = submit_one(d, &tasks[i]);
    pthread_mutex_unlock(&d->lock);
    return result;
}
