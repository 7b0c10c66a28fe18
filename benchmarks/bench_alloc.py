"""Cost of one buffer allocation (and free) against the number of buffers already held.

Through the real device: a context first holds N one-page buffers (allocated with bare
MEM_ALLOC requests, so the client does not map 60k files), then the rate is measured
for ``libnpu``'s full path, ``Device.alloc_mem`` (MEM_ALLOC + MEM_MAP + mmap), and for
``Device.free_mem``, over a batch of allocations on top of the N held.  A driver whose
allocation is O(buffers held) shows rates falling with N; O(log n) keeps them flat.

The driver holds one descriptor per buffer (its sealed memfd), so the buffers a device
can hold are bounded by the daemon's RLIMIT_NOFILE less 512 reserved descriptors: on these
machines the hard limit is 20,000 and root lacks CAP_SYS_RESOURCE to lift it (19,488
buffers), hence default levels up to 18,000 plus the measured batch (``--held
1000,10000,60000`` works where the limit allows it).  A level the driver refuses ends the
device part with the driver's reason.  The IOVA allocator alone is then timed in process,
with fragmented free space, at the same levels and at 60,000.

Measured 2026-11-24 (batch 500, 2 vCPUs shared with other agents' work: +-30% run to run).
alloc_mem/s | free_mem/s at N held, and bare MEM_ALLOC/s while filling up to N:

    held      before (main: tmpfs files, first-fit list,   after (memfds, O(log n) allocator,
              memory counter summed over every buffer)     counter kept), three runs
    1,000     1,922 | 5,944   fill 5,187/s                  1,567-1,882 | 2,049-6,251   fill 3,206-4,412/s
    10,000    1,426 | 6,763   fill 2,599/s                  1,546-1,993 | 4,070-5,764   fill 4,164-4,725/s
    18-19,000     -                                         1,499-2,154 | 3,177-6,679   fill 4,372-4,745/s
    30,000      537 | 5,485   fill   973/s                  (beyond this machine's descriptor limit)
    60,000      244 | 6,681   fill   315/s                  (beyond this machine's descriptor limit)

IOVA allocator alone, alloc+free pairs/s with N free holes: 137k (1k), 131k (10k),
124k (18k), 71k (60k).

Run: ``python -m benchmarks.bench_alloc [--devroot DIR] [--held 1000,10000,18000]``.
Without ``--devroot`` it starts a device of its own under a temporary directory (root).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import libnpu
from kmd_fuse import uapi


def hold(device, count: int) -> list[int]:
    """Allocate ``count`` one-page buffers with bare MEM_ALLOC requests (no mapping)."""
    handles = []
    req = uapi.new_payload(uapi.NPU_CMD_MEM_ALLOC)
    req.size = 4096
    for _ in range(count):
        handles.append(device.file.request(uapi.NPU_CMD_MEM_ALLOC, req).handle)
    return handles


def measure(device, batch: int) -> tuple[float, float]:
    """(allocations/s, frees/s) of ``batch`` alloc_mem then ``batch`` free_mem calls."""
    start = time.perf_counter()
    buffers = [device.alloc_mem(4096) for _ in range(batch)]
    allocated = time.perf_counter()
    for memory in buffers:
        device.free_mem(memory)
    freed = time.perf_counter()
    return batch / (allocated - start), batch / (freed - allocated)


def bench_iova_allocator(levels: list[int], batch: int) -> list[dict]:
    """The driver's IOVA allocator alone, in this process, at every level (the device's
    descriptor limit does not apply): ``levels`` ranges held, every other one freed
    first so the free space is fragmented, then ``batch`` alloc + free pairs timed."""
    from kmd_fuse.mmu import IovaAllocator
    rows = []
    for level in levels:
        space = IovaAllocator()
        held = [(space.alloc(1 + i % 3), 1 + i % 3) for i in range(2 * level)]
        for iova, pages in held[::2]:
            space.free(iova, pages)
        start = time.perf_counter()
        for i in range(batch):
            space.free(space.alloc(1 + i % 4), 1 + i % 4)
        rate = batch / (time.perf_counter() - start)
        rows.append({"held": level, "iova_alloc_free_per_s": round(rate)})
        print(f"{level:>7} held: {rate:8.0f} IOVA alloc+free pairs/s (allocator alone, "
              f"{level} free holes)", flush=True)
    return rows


def bench(devroot: Path, levels: list[int], batch: int) -> list[dict]:
    rows = []
    with libnpu.initialize(devroot) as session:
        device = session.open(0)
        held = 0
        for level in levels:
            fill_start = time.perf_counter()
            try:
                hold(device, level - held)
            except libnpu.NpuError as exc:
                print(f"the driver refused a buffer before {level} were held: {exc}", flush=True)
                break
            fill_s = time.perf_counter() - fill_start
            fill_rate = (level - held) / fill_s if level > held else 0.0
            held = level
            allocs, frees = measure(device, batch)
            rows.append({"held": level, "allocs_per_s": round(allocs), "frees_per_s": round(frees),
                         "bare_mem_alloc_per_s_while_filling": round(fill_rate)})
            print(f"{level:>7} held: {allocs:8.0f} allocations/s, {frees:8.0f} frees/s "
                  f"(bare MEM_ALLOC while filling: {fill_rate:.0f}/s)", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devroot", type=Path, help="a mounted device's devroot (default: start one)")
    ap.add_argument("--held", default="1000,10000,18000", help="buffers held before each measurement")
    ap.add_argument("--batch", type=int, default=1000, help="allocations (then frees) measured per level")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    levels = sorted(int(n) for n in args.held.split(","))
    if args.devroot:
        rows = bench(args.devroot, levels, args.batch)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-alloc-") as tmp:
            devroot = Path(tmp) / "dev"
            kmd = [sys.executable, "-m", "kmd_fuse.cli"]
            subprocess.run([*kmd, "start", "--devroot", str(devroot)], check=True, capture_output=True)
            try:
                rows = bench(devroot, levels, args.batch)
            finally:
                subprocess.run([*kmd, "stop", "--devroot", str(devroot)], check=False, capture_output=True)
    rows += bench_iova_allocator(sorted({*levels, 60000}), args.batch)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
