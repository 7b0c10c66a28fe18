/*
 * A C client of the NPU driver: proof that npu_uapi.h is the whole ABI.
 * GET_INFO, MEM_ALLOC, MEM_MAP + the hand-over of the buffer's memfd (SCM_RIGHTS)
 * + mmap, SUBMIT (a DMA copy), WAIT, GET_STATS and MEM_FREE, against a live node
 * given as argv[1].  It uses only what ABI 2.0 had, so it is built both against
 * today's header and against the frozen 2.0 one (tests/kmd_fuse/uapi/abi_v2/).
 * Checks that a buffer cannot be resized (EPERM).  Prints "ok" and exits 0 on success.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "npu_uapi.h"

/* DMA_COPY task descriptor, as npu_hw/tasks.py defines it. */
struct dma_copy_task {
	uint16_t opcode;   /* 0x01 */
	uint16_t size;     /* 32 */
	uint32_t flags;
	uint64_t src, dst, length;
};

static int fd;
static int handover = -1;        /* one connection to the hand-over socket, made on first use */
static uint32_t seq;

static int request(uint32_t cmd, void *payload, size_t size)
{
	unsigned char frame[NPU_MAX_FRAME];
	struct npu_frame_hdr hdr = { NPU_FRAME_MAGIC, cmd, ++seq, (uint32_t)size, 0, 0 };
	memcpy(frame, &hdr, sizeof(hdr));
	memcpy(frame + sizeof(hdr), payload, size);
	if (write(fd, frame, sizeof(hdr) + size) < 0)
		return -errno;
	for (;;) {                       /* the driver answers EAGAIN while a reply is not ready */
		ssize_t n = read(fd, frame, sizeof(frame));
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n < (ssize_t)sizeof(hdr))
			return n < 0 ? -errno : -EPROTO;
		memcpy(&hdr, frame, sizeof(hdr));
		if (hdr.seq != seq || hdr.cmd != cmd)
			return -EPROTO;
		if (hdr.size == size)
			memcpy(payload, frame + sizeof(hdr), size);
		return hdr.result;
	}
}

/* Trade a MEM_MAP token for the buffer's descriptor: returns the fd or -errno. */
static int receive_buffer(const struct npu_mem_map *map)
{
	struct npu_handover_request req = { NPU_HANDOVER_MAGIC, 0, map->token };
	struct npu_handover_reply reply = { 0 };
	union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(int))]; } control;
	struct iovec iov = { &reply, sizeof(reply) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = control.buf, .msg_controllen = sizeof(control.buf) };
	int received = -1;

	if (handover < 0) {
		struct sockaddr_un addr = { .sun_family = AF_UNIX };
		if (strlen(map->socket_path) >= sizeof(addr.sun_path))
			return -ENAMETOOLONG;
		strcpy(addr.sun_path, map->socket_path);
		handover = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (handover < 0 || connect(handover, (struct sockaddr *)&addr, sizeof(addr)) < 0)
			return -errno;
	}
	if (send(handover, &req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req))
		return -errno;
	ssize_t n = recvmsg(handover, &msg, MSG_CMSG_CLOEXEC);
	if (n != (ssize_t)sizeof(reply) || reply.magic != NPU_HANDOVER_MAGIC)
		return -EPROTO;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(&received, CMSG_DATA(c), sizeof(int));
	if (reply.result) {
		if (received >= 0)
			close(received);
		return reply.result;
	}
	if (received < 0 || (msg.msg_flags & MSG_CTRUNC) || reply.size != map->size)
		return -EPROTO;
	return received;
}

static void *alloc_map(uint64_t size, struct npu_mem_alloc *out)
{
	struct npu_mem_map map = { 0 };
	memset(out, 0, sizeof(*out));
	out->size = size;
	out->flags = NPU_MEM_RW;
	if (request(NPU_CMD_MEM_ALLOC, out, sizeof(*out)))
		return NULL;
	map.handle = out->handle;
	if (request(NPU_CMD_MEM_MAP, &map, sizeof(map)))
		return NULL;
	int bo = receive_buffer(&map);
	if (bo < 0) {
		printf("hand-over failed: %d\n", bo);
		return NULL;
	}
	if (ftruncate(bo, (off_t)map.size * 2) == 0 || errno != EPERM) {   /* sealed: it cannot grow */
		printf("ftruncate of a buffer was not refused with EPERM\n");
		close(bo);
		return NULL;
	}
	void *p = mmap(NULL, map.size, PROT_READ | PROT_WRITE, MAP_SHARED, bo, (off_t)map.offset);
	close(bo);
	return p == MAP_FAILED ? NULL : p;
}

int main(int argc, char **argv)
{
	struct npu_get_info info = { 0 };
	struct npu_mem_alloc a, b, c;
	struct npu_submit submit = { 0 };
	struct npu_wait wait = { 0 };
	struct npu_get_stats stats = { 0 };
	struct npu_mem_free free_req = { 0 };
	int err;

	if (argc != 2)
		return 2;
	fd = open(argv[1], O_RDWR);
	if (fd < 0) { perror("open"); return 1; }
	if ((err = request(NPU_CMD_GET_INFO, &info, sizeof(info)))) { printf("GET_INFO %d\n", err); return 1; }
	printf("model %s cores %u abi %#x memory %llu\n", info.model, info.num_cores, info.abi_version,
	       (unsigned long long)info.memory_total);

	unsigned char *src = alloc_map(65536, &a), *dst = alloc_map(65536, &b);
	struct dma_copy_task *task = alloc_map(4096, &c);
	if (!src || !dst || !task) { printf("alloc/map failed\n"); return 1; }
	for (int i = 0; i < 65536; i++)
		src[i] = (unsigned char)(i * 7 + 3);
	*task = (struct dma_copy_task){ 0x01, sizeof(*task), 0, a.iova, b.iova, 65536 };

	submit.cmd_iova = c.iova;
	submit.cmd_size = sizeof(*task);
	submit.num_bos = 3;
	submit.bo_handles[0] = a.handle;
	submit.bo_handles[1] = b.handle;
	submit.bo_handles[2] = c.handle;
	submit.priority = NPU_PRIO_NORMAL;
	if ((err = request(NPU_CMD_SUBMIT, &submit, sizeof(submit)))) { printf("SUBMIT %d\n", err); return 1; }

	wait.count = 1;
	wait.flags = NPU_WAIT_ALL;
	wait.timeout_ns = 5000000000LL;
	wait.fences[0] = submit.fence;
	if ((err = request(NPU_CMD_WAIT, &wait, sizeof(wait)))) { printf("WAIT %d\n", err); return 1; }
	if (wait.status[0] != NPU_FENCE_OK) { printf("job status %d\n", wait.status[0]); return 1; }
	if (memcmp(src, dst, 65536)) { printf("data mismatch\n"); return 1; }
	free_req.handle = a.handle;
	if ((err = request(NPU_CMD_MEM_FREE, &free_req, sizeof(free_req)))) { printf("MEM_FREE %d\n", err); return 1; }
	if ((err = request(NPU_CMD_GET_STATS, &stats, sizeof(stats)))) { printf("GET_STATS %d\n", err); return 1; }
	if (stats.buffers != 2 || stats.jobs_completed != 1) {
		printf("stats: %llu buffers, %llu jobs completed\n", (unsigned long long)stats.buffers,
		       (unsigned long long)stats.jobs_completed);
		return 1;
	}
	printf("fence %llu done in %llu ns of device time\nok\n", (unsigned long long)submit.fence,
	       (unsigned long long)wait.device_time_ns[0]);
	close(handover);
	close(fd);
	return 0;
}
