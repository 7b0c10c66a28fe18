"""The NVDLA-named portability layer over the same device."""
import numpy as np

from libnpu.nvdla import (
    NvDlaAllocMem,
    NvDlaClose,
    NvDlaDestroy,
    NvDlaFreeMem,
    NvDlaInitialize,
    NvDlaOpen,
    NvDlaSubmit,
    NvDlaTask,
    NvError,
)
from npu_hw import tasks


def test_nvdla_flow_copies_data(npu):
    err, session = NvDlaInitialize(str(npu.devroot))
    assert err == NvError.Success
    err, dev = NvDlaOpen(session, 0)
    assert err == NvError.Success
    _, src, src_data = NvDlaAllocMem(session, dev, 4096)
    _, dst, dst_data = NvDlaAllocMem(session, dev, 4096)
    _, cmd, cmd_data = NvDlaAllocMem(session, dev, 4096)
    src_data[:] = np.arange(4096) % 256
    blob = tasks.encode_task("DMA_COPY", src=src.address, dst=dst.address, length=4096)
    cmd_data[:len(blob)] = np.frombuffer(blob, np.uint8)
    assert NvDlaSubmit(session, dev, [NvDlaTask(1, [cmd, src, dst], command_size=len(blob))]) == NvError.Success
    assert np.array_equal(dst_data, src_data)
    blob = tasks.encode_task("DMA_COPY", src=src.address, dst=0x10, length=16)
    cmd_data[:len(blob)] = np.frombuffer(blob, np.uint8)
    assert NvDlaSubmit(session, dev, [NvDlaTask(2, [cmd, src], command_size=len(blob))]) == NvError.InvalidAddress
    assert NvDlaFreeMem(session, dev, src) == NvError.Success
    assert NvDlaFreeMem(session, dev, src) == NvError.BadValue        # double free
    assert NvDlaAllocMem(session, dev, 1 << 40)[0] == NvError.InsufficientMemory
    assert NvDlaOpen(session, 7)[0] == NvError.FileOperationFailed
    assert NvDlaClose(session, dev) == NvError.Success
    assert NvDlaDestroy(session) == NvError.Success
