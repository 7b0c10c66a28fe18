"""Device memory: allocation, zero-copy mapping, freeing, accounting."""
import errno
import os

import numpy as np
import pytest

import libnpu
from kmd_fuse import paths


def test_alloc_rounds_to_pages_and_gives_device_addresses(device):
    a = device.alloc_mem(100)
    b = device.alloc_mem(5000)
    assert a.size == 4096 and b.size == 8192
    assert a.address % 4096 == 0 and b.address % 4096 == 0
    assert a.address + a.size <= b.address or b.address + b.size <= a.address
    assert device.stats()["memory_allocated"] == 4096 + 8192


def test_view_is_the_device_memory_itself(device):
    """What libnpu writes is in the memfd the driver hands over, and vice versa (no copy)."""
    mem = device.alloc_mem(4096)
    mem.view[:] = 0x5A
    fd, size = device.buffer_fd(mem.handle)     # another descriptor of the same pages
    try:
        assert size == 4096 and os.fstat(fd).st_size == 4096
        assert os.pread(fd, 4096, 0) == b"\x5a" * 4096
        os.pwrite(fd, b"\x01\x02\x03", 0)
    finally:
        os.close(fd)
    assert bytes(mem.view[:3]) == b"\x01\x02\x03"


def test_chip_reads_and_writes_the_mapped_buffers(device):
    src, dst = device.alloc_mem(64 * 1024), device.alloc_mem(64 * 1024)
    pattern = np.random.default_rng(1).integers(0, 256, 64 * 1024, dtype=np.uint8)
    src.view[:] = pattern
    view_before = dst.view                      # the same view object sees the chip's writes
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=64 * 1024)
    device.run(cmds, [src, dst])
    assert np.array_equal(view_before, pattern)


def test_free_releases_memory_and_backing(npu, device):
    bus = paths.bus_dir(npu.devroot, 0)
    before = device.info()["memory_used"]
    mem = device.alloc_mem(1 << 20)
    links = set(os.listdir(bus))
    assert device.info()["memory_used"] == before + (1 << 20)
    device.free_mem(mem)
    assert device.info()["memory_used"] == before
    assert len(links - set(os.listdir(bus))) == 1     # its bo link is gone


def test_double_free_is_enoent(device):
    mem = device.alloc_mem(4096)
    device.free_mem(mem)
    with pytest.raises(libnpu.NpuError) as err:
        device.free_mem(mem)
    assert err.value.errno == errno.ENOENT
    with pytest.raises(libnpu.NpuError) as err:   # the raw handle, past libnpu's own check
        device._free_handle(mem.handle)
    assert err.value.errno == errno.ENOENT


def test_over_quota_alloc_is_enomem(device):
    with pytest.raises(libnpu.NpuError) as err:
        device.alloc_mem((1 << 30) + 4096)
    assert err.value.errno == errno.ENOMEM
    held = [device.alloc_mem(256 << 20) for _ in range(4)]   # the whole device
    with pytest.raises(libnpu.NpuError) as err:
        device.alloc_mem(4096)
    assert err.value.errno == errno.ENOMEM
    for mem in held:
        device.free_mem(mem)
    device.free_mem(device.alloc_mem(4096))


def test_zero_size_alloc_is_einval(device):
    with pytest.raises(libnpu.NpuError) as err:
        device.alloc_mem(0)
    assert err.value.errno == errno.EINVAL


def test_closing_a_context_frees_its_memory(npu):
    bus = paths.bus_dir(npu.devroot, 0)
    with libnpu.initialize(npu.devroot) as session:
        watcher = session.open(0)
        used = watcher.info()["memory_used"]
        files = set(os.listdir(bus))
        client = session.open(0)
        for _ in range(5):
            client.alloc_mem(1 << 20)
        assert watcher.info()["memory_used"] == used + (5 << 20)
        session.close(client)
        assert watcher.info()["memory_used"] == used
        assert set(os.listdir(bus)) == files
