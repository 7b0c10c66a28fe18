"""Every class of malformed or invalid request gets its own errno, and another
client keeps working throughout."""
import errno
import os
import struct
import threading

import numpy as np
import pytest

import libnpu
from kmd_fuse import uapi
from npu_hw import iommu, tasks


class RawClient:
    """Frames written and read by hand, no libnpu in between."""

    def __init__(self, node):
        self.fd = os.open(node, os.O_RDWR)

    def close(self):
        os.close(self.fd)

    def send(self, frame: bytes) -> None:
        os.write(self.fd, frame)

    def reply(self):
        frame = os.read(self.fd, uapi.NPU_MAX_FRAME)
        return uapi.unpack_header(frame), frame[uapi.HDR_SIZE:]

    def call(self, cmd, payload=None, seq=7):
        self.send(uapi.pack_frame(cmd, seq, payload if payload is not None else uapi.new_payload(cmd)))
        hdr, body = self.reply()
        assert hdr.seq == seq and hdr.cmd == cmd
        return hdr.result, (uapi.unpack_payload(cmd, body) if body else None)


@pytest.fixture
def raw(npu):
    client = RawClient(npu.node)
    yield client
    client.close()


@pytest.fixture(autouse=True)
def bystander(npu):
    """Another client running jobs the whole time; it must never see an error."""
    stop, errors, done = threading.Event(), [], [0]

    def work():
        with libnpu.initialize(npu.devroot) as session:
            dev = session.open(0)
            src, dst = dev.alloc_mem(4096), dev.alloc_mem(4096)
            cmds = dev.command_buffer()
            cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=4096)
            while not stop.is_set():
                try:
                    src.view[:8] = done[0] % 251
                    dev.run(cmds, [src, dst])
                    assert dst.view[7] == done[0] % 251
                    done[0] += 1
                except Exception as exc:   # noqa: BLE001 - reported below
                    errors.append(exc)
                    return

    thread = threading.Thread(target=work)
    thread.start()
    while done[0] == 0 and thread.is_alive():
        threading.Event().wait(0.01)
    start = done[0]
    yield
    threading.Event().wait(0.05)
    stop.set()
    thread.join(30)
    assert not errors, errors
    assert done[0] > start


def expect_write_error(raw, frame, err):
    with pytest.raises(OSError) as exc:
        raw.send(frame)
    assert exc.value.errno == err
    assert raw.call(uapi.NPU_CMD_GET_INFO)[0] == 0     # the file still works


def test_short_frame_is_einval(raw):
    expect_write_error(raw, b"\x4e\x50", errno.EINVAL)


def test_bad_magic_is_einval(raw):
    frame = bytearray(uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 1, uapi.new_payload(uapi.NPU_CMD_GET_INFO)))
    frame[0] ^= 0xFF
    expect_write_error(raw, bytes(frame), errno.EINVAL)


def test_size_field_disagreeing_with_frame_is_einval(raw):
    frame = uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 1, uapi.new_payload(uapi.NPU_CMD_GET_INFO))
    expect_write_error(raw, frame[:-8], errno.EINVAL)


def test_nonzero_reserved_is_einval(raw):
    frame = bytearray(uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 1, uapi.new_payload(uapi.NPU_CMD_GET_INFO)))
    frame[20] = 1
    expect_write_error(raw, bytes(frame), errno.EINVAL)


def test_unknown_command_is_enotty(raw):
    hdr = struct.pack("<IIIIiI", uapi.NPU_FRAME_MAGIC, 0xC0084E3F, 5, 8, 0, 0)
    raw.send(hdr + bytes(8))
    reply, _ = raw.reply()
    assert reply.result == -errno.ENOTTY and reply.seq == 5


def test_wrong_payload_size_is_einval(raw):
    hdr = struct.pack("<IIIIiI", uapi.NPU_FRAME_MAGIC, uapi.NPU_CMD_MEM_ALLOC, 5, 8, 0, 0)
    raw.send(hdr + bytes(8))
    assert raw.reply()[0].result == -errno.EINVAL


def test_requests_overlap_up_to_a_limit_then_ebusy(raw):
    for seq in range(1, 65):
        raw.send(uapi.pack_frame(uapi.NPU_CMD_GET_INFO, seq, uapi.new_payload(uapi.NPU_CMD_GET_INFO)))
    with pytest.raises(OSError) as exc:
        raw.send(uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 65, uapi.new_payload(uapi.NPU_CMD_GET_INFO)))
    assert exc.value.errno == errno.EBUSY
    replies = [raw.reply()[0] for _ in range(64)]
    assert sorted(r.seq for r in replies) == list(range(1, 65)) and all(r.result == 0 for r in replies)
    with pytest.raises(OSError) as exc:
        os.read(raw.fd, uapi.NPU_MAX_FRAME)              # all answered: nothing more to read
    assert exc.value.errno == errno.ENOMSG


def test_small_read_buffer_is_eoverflow_and_keeps_the_reply(raw):
    raw.send(uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 3, uapi.new_payload(uapi.NPU_CMD_GET_INFO)))
    with pytest.raises(OSError) as exc:
        os.read(raw.fd, 16)
    assert exc.value.errno == errno.EOVERFLOW
    assert raw.reply()[0].seq == 3


def test_read_without_a_request_is_enomsg(raw):
    with pytest.raises(OSError) as exc:
        os.read(raw.fd, uapi.NPU_MAX_FRAME)
    assert exc.value.errno == errno.ENOMSG


def test_unknown_handle_is_enoent(raw):
    for cmd in (uapi.NPU_CMD_MEM_MAP, uapi.NPU_CMD_MEM_FREE):
        req = uapi.new_payload(cmd)
        req.handle = 999
        assert raw.call(cmd, req)[0] == -errno.ENOENT
    req = uapi.new_payload(uapi.NPU_CMD_SUBMIT)
    req.num_bos, req.bo_handles[0] = 1, 999
    assert raw.call(uapi.NPU_CMD_SUBMIT, req)[0] == -errno.ENOENT


def test_double_free_is_enoent(raw):
    req = uapi.new_payload(uapi.NPU_CMD_MEM_ALLOC)
    req.size = 4096
    result, alloc = raw.call(uapi.NPU_CMD_MEM_ALLOC, req)
    assert result == 0
    free = uapi.new_payload(uapi.NPU_CMD_MEM_FREE)
    free.handle = alloc.handle
    assert raw.call(uapi.NPU_CMD_MEM_FREE, free)[0] == 0
    assert raw.call(uapi.NPU_CMD_MEM_FREE, free)[0] == -errno.ENOENT


def test_over_quota_is_enomem_and_bad_flags_einval(raw):
    req = uapi.new_payload(uapi.NPU_CMD_MEM_ALLOC)
    req.size = 1 << 40
    assert raw.call(uapi.NPU_CMD_MEM_ALLOC, req)[0] == -errno.ENOMEM
    req.size, req.flags = 4096, 0x80
    assert raw.call(uapi.NPU_CMD_MEM_ALLOC, req)[0] == -errno.EINVAL


def test_submit_validation(raw, device):
    mem = device.alloc_mem(4096)          # another context's buffer: its handle means nothing here
    req = uapi.new_payload(uapi.NPU_CMD_SUBMIT)
    req.num_bos, req.bo_handles[0] = 1, mem.handle
    req.cmd_iova, req.cmd_size = mem.address, 8
    assert raw.call(uapi.NPU_CMD_SUBMIT, req)[0] == -errno.ENOENT
    own = uapi.new_payload(uapi.NPU_CMD_MEM_ALLOC)
    own.size = 4096
    _, own = raw.call(uapi.NPU_CMD_MEM_ALLOC, own)
    req.bo_handles[0] = own.handle
    req.cmd_iova = own.iova + 4096        # command buffer outside every listed buffer
    assert raw.call(uapi.NPU_CMD_SUBMIT, req)[0] == -errno.EFAULT
    req.cmd_iova, req.cmd_size = own.iova, 12
    assert raw.call(uapi.NPU_CMD_SUBMIT, req)[0] == -errno.EINVAL      # not a multiple of 8
    req.cmd_size, req.num_bos = 8, uapi.NPU_MAX_SUBMIT_BOS + 1
    assert raw.call(uapi.NPU_CMD_SUBMIT, req)[0] == -errno.E2BIG
    req.num_bos, req.bo_handles[1] = 2, own.handle
    assert raw.call(uapi.NPU_CMD_SUBMIT, req)[0] == -errno.EINVAL      # listed twice
    req.num_bos, req.flags = 1, 0x100
    assert raw.call(uapi.NPU_CMD_SUBMIT, req)[0] == -errno.EINVAL


def test_wait_validation(raw):
    req = uapi.new_payload(uapi.NPU_CMD_WAIT)
    req.count = 0
    assert raw.call(uapi.NPU_CMD_WAIT, req)[0] == -errno.EINVAL
    req.count, req.fences[0] = 1, 12345          # never issued
    assert raw.call(uapi.NPU_CMD_WAIT, req)[0] == -errno.EINVAL


def test_address_outside_any_mapping_faults_only_that_job(device):
    src = device.alloc_mem(4096)
    cmds = device.command_buffer()
    for dst in (iommu.IOVA_BASE - 4096, src.address + 4096 * 1000, 0):
        cmds.clear()
        cmds.add("DMA_COPY", src=src.address, dst=dst, length=64)
        with pytest.raises(libnpu.JobError) as exc:
            device.run(cmds, [src])
        assert exc.value.errno == errno.EFAULT
    cmds.clear()
    cmds.add("DMA_COPY", src=src.address, dst=src.address + 64, length=64)
    device.run(cmds, [src])                       # the context is still fine


def test_write_to_read_only_buffer_faults(device):
    ro = device.alloc_mem(4096, libnpu.MEM_READ)
    src = device.alloc_mem(4096)
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=ro.address, length=16)
    with pytest.raises(libnpu.JobError) as exc:
        device.run(cmds, [src, ro])
    assert exc.value.errno == errno.EFAULT


def test_other_contexts_memory_is_not_mapped_here(npu, device):
    with libnpu.initialize(npu.devroot) as session:
        other = session.open(0)
        secret = other.alloc_mem(4096)
        secret.view[:] = 42
        mine = device.alloc_mem(4096)
        cmds = device.command_buffer()
        # The other context's device address is (at best) some other page of ours.
        cmds.add("DMA_COPY", src=mine.address, dst=secret.address + 8 * 4096 * 1024, length=16)
        with pytest.raises(libnpu.JobError) as exc:
            device.run(cmds, [mine])
        assert exc.value.errno == errno.EFAULT
        assert (secret.view == 42).all()


def test_malformed_command_buffer_fails_the_job_with_einval(device):
    cmds = device.alloc_mem(4096, libnpu.MEM_READ)
    cmds.view[:8] = np.frombuffer(struct.pack("<HHI", 0x7FFF, 8, 0), np.uint8)   # unknown opcode
    with pytest.raises(libnpu.JobError) as exc:
        device.run(cmds, size=8)
    assert exc.value.errno == errno.EINVAL
    cmds.view[:8] = np.frombuffer(struct.pack("<HHI", tasks.OP_DMA_COPY, 8, 0), np.uint8)  # wrong size
    with pytest.raises(libnpu.JobError) as exc:
        device.run(cmds, size=8)
    assert exc.value.errno == errno.EINVAL


def test_freed_buffer_faults_on_every_core_after_jobs_used_it(device):
    """The chip keeps translations (an IOTLB) of buffers its jobs used; freeing a buffer
    makes the driver invalidate them on every core, so a later job that still names its
    address faults instead of reaching the freed memory."""
    src, dst = device.alloc_mem(4096), device.alloc_mem(4096)
    src.view[:] = 9
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=64)
    cmds.add("DMA_COPY", src=dst.address, dst=src.address + 64, length=64)
    # Enough jobs in flight at once that both cores run (and cache) them.
    device.wait([device.submit(cmds, [src, dst]) for _ in range(8)])
    assert device.stats()["jobs_completed"] >= 8
    device.free_mem(dst)
    for _ in range(4):                       # whichever core takes it
        fences = [device.submit(cmds, [src]) for _ in range(2)]
        for fence in fences:
            with pytest.raises(libnpu.JobError) as exc:
                fence.wait()
            assert exc.value.errno == errno.EFAULT
