"""Jobs through the ring: NOP floods past the ring size, DMA copy, int8 FC,
several processes at once."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import libnpu
from npu_hw import tasks
from tests.support.reference import fully_connected as reference_fc

DESC = tasks.DMA_COPY.size


def test_30k_jobs_through_the_256_entry_ring_none_lost_or_duplicated(device):
    """Each job copies its own sequence number into its own slot: a lost job
    leaves a hole, a duplicated one shows in the completion count. 30,000 wrap the ring
    117 times (100,000 took 29 s of the suite's 10 minutes)."""
    jobs = 30_000
    src = device.alloc_mem(jobs * 8)
    dst = device.alloc_mem(jobs * 8)
    src.array(np.int64, jobs)[:] = np.arange(jobs) + 1
    cmds = device.alloc_mem(jobs * DESC, libnpu.MEM_READ)
    descs = cmds.array(tasks.DMA_COPY.dtype, jobs)
    descs["opcode"], descs["size"] = tasks.OP_DMA_COPY, DESC
    descs["src"] = src.address + np.arange(jobs) * 8
    descs["dst"] = dst.address + np.arange(jobs) * 8
    descs["length"] = 8
    before = device.info()["jobs_completed"]
    fences, window = [], []
    for i in range(jobs):
        window.append(device.submit(cmds, [src, dst], offset=i * DESC, size=DESC))
        if len(window) == 64:              # keep the ring busy, collect in batches
            assert device.wait(window, timeout=60) == 64
            fences.extend(window)
            window = []
    if window:
        device.wait(window, timeout=60)
        fences.extend(window)
    assert [f.id for f in fences] == list(range(fences[0].id, fences[0].id + jobs))
    assert all(f.status == 0 for f in fences)
    assert np.array_equal(dst.array(np.int64, jobs), np.arange(jobs) + 1)
    assert device.info()["jobs_completed"] - before == jobs
    stats = device.stats()
    assert stats["jobs_queued"] == 0 and stats["jobs_running"] == 0


@pytest.mark.parametrize("length,src_off,dst_off", [(1, 0, 0), (4096, 0, 0), (5000, 3, 4093),
                                                    (3 * 4096 + 17, 100, 7), (1 << 20, 0, 0)])
def test_dma_copy_exact_bytes(device, length, src_off, dst_off):
    src = device.alloc_mem(src_off + length)
    dst = device.alloc_mem(dst_off + length + 64)
    data = np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8)
    src.view[src_off:src_off + length] = data
    dst.view[:] = 0xEE
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=src.address + src_off, dst=dst.address + dst_off, length=length)
    fence = device.run(cmds, [src, dst])
    assert np.array_equal(dst.view[dst_off:dst_off + length], data)
    assert (dst.view[:dst_off] == 0xEE).all() and (dst.view[dst_off + length:] == 0xEE).all()
    assert fence.device_time_ns > 0


def test_dma_copy_across_adjacent_buffers(device):
    """A transfer spanning two buffer objects is gathered/scattered page by page."""
    a, b = device.alloc_mem(4096), device.alloc_mem(4096)
    if b.address != a.address + 4096:
        pytest.skip("allocator did not place the buffers back to back")
    out = device.alloc_mem(8192)
    a.view[:] = 1
    b.view[:] = 2
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=a.address + 2048, dst=out.address, length=4096)
    cmds.add("DMA_COPY", src=out.address, dst=a.address + 4000, length=200)
    device.run(cmds, [a, b, out])
    assert (out.view[:2048] == 1).all() and (out.view[2048:4096] == 2).all()
    assert (a.view[4000:] == 1).all()          # the write scattered across the boundary
    assert (b.view[:104] == 1).all() and (b.view[104:] == 2).all()


def _fc_case(rng, per_channel):
    rows, k, n = int(rng.integers(1, 9)), int(rng.integers(1, 300)), int(rng.integers(1, 70))
    x = rng.integers(-128, 128, (rows, k), dtype=np.int8)
    w = rng.integers(-127, 128, (n, k), dtype=np.int8)
    bias = rng.integers(-20000, 20000, n, dtype=np.int32)
    shape = n if per_channel else 1
    mult = rng.integers(1 << 30, (1 << 31) - 1, shape, dtype=np.int64).astype(np.int32)
    shift = rng.integers(-12, 2, shape, dtype=np.int32)
    params = dict(input_zp=int(rng.integers(-128, 128)), output_zp=int(rng.integers(-128, 128)))
    act = (-128, 127) if rng.random() < 0.5 else (0, 127)
    return x, w, bias, mult, shift, params, act


@pytest.mark.parametrize("seed", range(16))
def test_int8_fully_connected_exact(device, seed):
    rng = np.random.default_rng(seed)
    per_channel, double_scale = bool(seed % 2), bool(seed % 4 >= 2)
    x, w, bias, mult, shift, params, (lo, hi) = _fc_case(rng, per_channel)
    scale = rng.uniform(1e-4, 0.05, mult.shape)
    rows, k = x.shape
    n = w.shape[0]
    arrays = dict(x=x, w=w, bias=bias, mult=mult, shift=shift, scale=scale)
    buf = {name: device.alloc_mem(a.nbytes) for name, a in arrays.items()}
    out = device.alloc_mem(rows * n)
    for name, array in arrays.items():
        buf[name].array(array.dtype, array.shape)[...] = array
    flags = (tasks.FC_PER_CHANNEL if per_channel else 0) | (tasks.FC_DOUBLE_SCALE if double_scale else 0)
    cmds = device.command_buffer()
    cmds.add("FULLY_CONNECTED", flags=flags,
             input=buf["x"].address, weights=buf["w"].address, bias=buf["bias"].address,
             output=out.address, mult_iova=buf["mult"].address, shift_iova=buf["shift"].address,
             scale_iova=buf["scale"].address, scale=float(scale[0]),
             rows=rows, in_features=k, out_features=n, multiplier=int(mult[0]), shift=int(shift[0]),
             act_min=lo, act_max=hi, **params)
    device.run(cmds, [*buf.values(), out])
    pick = (lambda a: a) if per_channel else (lambda a: a[0])
    expected = reference_fc(x, w, bias, params["input_zp"], params["output_zp"], pick(mult), pick(shift), lo, hi,
                            scale=pick(scale) if double_scale else None)
    assert np.array_equal(out.array(np.int8, (rows, n)), expected)


def test_priorities_and_empty_jobs(device):
    fences = [device.submit(None, priority=p) for p in (libnpu.PRIO_LOW, libnpu.PRIO_NORMAL, libnpu.PRIO_HIGH)]
    device.wait(fences, timeout=10)
    assert [f.status for f in fences] == [0, 0, 0]
    with pytest.raises(libnpu.NpuError):
        device.submit(None, priority=7)


CLIENT = textwrap.dedent("""
    import sys, numpy as np, libnpu
    with libnpu.initialize(sys.argv[1]) as s:
        d = s.open(0)
        a, b = d.alloc_mem(4096), d.alloc_mem(4096)
        c = d.command_buffer(); c.add("DMA_COPY", src=a.address, dst=b.address, length=4096)
        for i in range(int(sys.argv[2])):
            a.view[:8] = np.frombuffer(np.int64(i).tobytes(), np.uint8)
            d.run(c, [a, b])
            assert b.array(np.int64, 1)[0] == i
        print("done", d.stats()["jobs_completed"])
""")


def test_two_processes_submit_at_once(npu):
    procs = [subprocess.Popen([sys.executable, "-c", CLIENT, str(npu.devroot), "400"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.split() == ["done", "400"]
