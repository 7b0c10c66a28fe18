"""The user-queue memory as npu_uapi.h declares it for C clients is the layout the chip
and libnpu use (npu_hw/queues.py)."""
from __future__ import annotations

from kmd_fuse import uapi
from npu_hw import queues


def test_the_headers_queue_structs_match_the_chips_layout():
    ffi = uapi.ffi
    assert uapi.NPU_QUEUE_MAGIC == queues.QUEUE_MAGIC and uapi.NPU_QUEUE_HEADER_SIZE == queues.HEADER_SIZE
    assert queues.entries_offset() == queues.HEADER_SIZE >= ffi.sizeof("struct npu_queue_header")
    for field, offset in (("magic", queues.HDR_MAGIC), ("entries", queues.HDR_ENTRIES), ("tail", queues.HDR_TAIL),
                          ("done", queues.HDR_DONE), ("waiting", queues.HDR_WAITING),
                          ("polling", queues.HDR_POLLING), ("error", queues.HDR_ERROR),
                          ("failed_task", queues.HDR_FAILED_TASK)):
        assert ffi.offsetof("struct npu_queue_header", field) == offset, field
    assert ffi.sizeof("struct npu_queue_entry") == queues.ENTRY_STRUCT.size
    assert ffi.sizeof("struct npu_queue_completion") == queues.COMPLETION_STRUCT.size
    entry = ffi.new("struct npu_queue_entry *", {"seq": 7, "cmd_iova": 0x1000, "cmd_size": 64, "timeout_ms": 5,
                                                  "flags": 0})
    assert queues.ENTRY_STRUCT.unpack(bytes(ffi.buffer(entry))) == (7, 0x1000, 64, 5, 0, 0)
    done = ffi.new("struct npu_queue_completion *", {"seq": 3, "status": -14, "core": 1, "cycles": 9,
                                                      "device_time_ns": 10, "fault_iova": 11, "exec_ns": 12})
    assert queues.COMPLETION_STRUCT.unpack(bytes(ffi.buffer(done))) == (3, -14, 1, 9, 10, 11, 12)
    assert uapi.NPU_QUEUE_DEFAULT_ENTRIES == queues.DEFAULT_QUEUE_ENTRIES
