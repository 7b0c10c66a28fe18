"""``npu demo``: the spine end to end - zero-copy memory, a DMA copy, an int8
fully connected layer, a flood of jobs past the ring size - printing what
happened at each step."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from libnpu.portability import MEM_READ, Session
from npu_hw import fixedpoint, tasks


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return np.clip(np.round(x / scale) + zero_point, -128, 127).astype(np.int8)


def run(devroot: Path) -> int:
    rng = np.random.default_rng(0)
    with Session(devroot) as session:
        dev = session.open()         # --device / $NPU_DEVICE, else 0
        info = dev.info()
        print(f"[info] {dev.path}: {info['model']}, {info['num_cores']} cores @ {info['clock_mhz']} MHz, "
              f"{info['memory_total'] >> 20} MiB, ring of {info['ring_entries']} entries, context {info['context_id']}")

        size = 4 << 20
        src, dst = dev.alloc_mem(size), dev.alloc_mem(size)
        src.view[:] = rng.integers(0, 256, size, dtype=np.uint8)
        cmds = dev.command_buffer()
        cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=size)
        start = time.perf_counter()
        fence = dev.run(cmds, [src, dst])
        wall = (time.perf_counter() - start) * 1e6
        ok = np.array_equal(src.view, dst.view)
        print(f"[dma] copied {size >> 20} MiB {src.address:#x} -> {dst.address:#x} through the IOMMU: "
              f"{'identical' if ok else 'MISMATCH'}; {wall:.0f} us wall, {fence.device_time_ns} ns device time")

        # A float layer y = x @ W.T + b, quantized per the TFLite int8 spec and run on the chip.
        rows, k, n = 16, 512, 256
        x = rng.standard_normal((rows, k)).astype(np.float32)
        w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
        b = (rng.standard_normal(n) * 0.1).astype(np.float32)
        y = x @ w.T + b
        x_scale, x_zp = float(np.abs(x).max() / 127), 0
        w_scales = np.abs(w).max(axis=1) / 127
        y_scale, y_zp = float((y.max() - y.min()) / 255), int(np.round(-128 - y.min() / ((y.max() - y.min()) / 255)))
        qx, qw = quantize(x, x_scale, x_zp), np.clip(np.round(w / w_scales[:, None]), -127, 127).astype(np.int8)
        qb = np.round(b / (x_scale * w_scales)).astype(np.int32)
        real = x_scale * w_scales / y_scale
        mult, shift = fixedpoint.quantize_multiplier_array(real)
        buffers = {}
        for name, array in dict(x=qx, w=qw, b=qb, m=mult.astype(np.int32), s=shift.astype(np.int32),
                                scale=real.astype(np.float64)).items():
            buffers[name] = dev.alloc_mem(array.nbytes, MEM_READ)
            buffers[name].array(array.dtype, array.shape)[...] = array
        out = dev.alloc_mem(rows * n)
        cmds.clear()
        cmds.add("FULLY_CONNECTED", flags=tasks.FC_PER_CHANNEL | tasks.FC_DOUBLE_SCALE,
                 input=buffers["x"].address, weights=buffers["w"].address, bias=buffers["b"].address,
                 output=out.address, mult_iova=buffers["m"].address, shift_iova=buffers["s"].address,
                 scale_iova=buffers["scale"].address, rows=rows, in_features=k, out_features=n,
                 input_zp=x_zp, output_zp=y_zp, act_min=-128, act_max=127)
        start = time.perf_counter()
        fence = dev.run(cmds, [*buffers.values(), out])
        wall = (time.perf_counter() - start) * 1e6
        got = (out.array(np.int8, (rows, n)).astype(np.float32) - y_zp) * y_scale
        error = float(np.abs(got - y).max())
        print(f"[fc] int8 fully connected {rows}x{k} @ {k}x{n} ({rows * k * n / 1e6:.1f} M MACs): "
              f"{wall:.0f} us wall, {fence.device_time_ns} ns device time; max |error| vs float "
              f"{error:.4f} (output step {y_scale:.4f})")

        nop = dev.command_buffer()
        nop.add("NOP")
        jobs = 2000
        start = time.perf_counter()
        fences = [dev.submit(nop) for _ in range(jobs)]
        for i in range(0, jobs, 64):
            dev.wait(fences[i:i + 64], timeout=30)
        elapsed = time.perf_counter() - start
        failed = sum(1 for f in fences if f.status)
        print(f"[ring] {jobs} jobs in flight through a {info['ring_entries']}-entry ring: {jobs / elapsed:.0f} jobs/s, "
              f"{failed} failed, fences {fences[0].id}..{fences[-1].id}")
        stats = dev.stats()
        print(f"[stats] context {stats['context_id']}: {stats['jobs_completed']} jobs completed, "
              f"{stats['jobs_failed']} failed, {stats['buffers']} buffers, {stats['memory_allocated'] >> 10} KiB held, "
              f"busy {stats['busy_time_ns'] / 1e6:.1f} ms")
        good = ok and failed == 0 and error <= 4 * y_scale   # int8 inputs cost a few output steps
    print("[done] " + ("all steps correct" if good else "SOMETHING WENT WRONG"))
    return 0 if good else 1

