"""The chip's power-on self-test: one small job through the real executor before it forks its cores.

``kernels.warm_up`` calls each C kernel directly; a model's job also decodes its
descriptors, binds the kernels (requantization plans, per-channel parameters), builds a
job plan and replays it, and every one of those steps runs numpy and C-library code of
its own. Run first by a model, those code pages would be faulted into the core then and
stay resident after the model is unloaded (issue 15: a device's memory back to its idle
figure). So the chip's main process, before it forks its cores, runs the operators of the int8 model zoo (QUANTIZE,
convolutions, depthwise, ADD, average pooling, RESHAPE, FULLY_CONNECTED, SOFTMAX,
DEQUANTIZE, with the flags the compiler gives them) as one job, twice (decoded,
then replayed), in a private address space: its own page table and buffer object in a
temporary directory inside the chip's bus directory, never the device's memory or ASIDs. The job's state then leaves
through the one invalidation path (``caches.invalidate``) and the directory is removed.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from firmware_sim import caches
from firmware_sim.dma import DmaEngine
from firmware_sim.executor import JobResult, run_job
from firmware_sim.timing import HardwareProfile
from npu_hw import iommu, memory, ops, tasks
from npu_hw.fixedpoint import add_params, softmax_params

__all__ = ["self_test", "network"]

ASID, BO = 1, 1
MEMORY_BYTES = 256 << 10


class _Memory:
    """A private bus: one page table mapping one buffer object at IOVA_BASE."""

    def __init__(self, bus: Path):
        with open(memory.bo_path(bus, BO), "wb") as f:
            f.truncate(MEMORY_BYTES)
        pages = MEMORY_BYTES // iommu.PAGE_SIZE
        with open(memory.page_table_path(bus, ASID), "wb") as f:
            f.truncate(iommu.PT_ENTRIES * iommu.PTE_DTYPE.itemsize)   # sparse: only the entries written take memory
            f.write(np.asarray(iommu.make_ptes(BO, 0, pages, True, True), iommu.PTE_DTYPE).tobytes())
        self.bo = memory.bo_path(bus, BO)
        self.dma = DmaEngine(bus)
        self.next = 0
        self.chunks: list[tuple[int, bytes]] = []

    def put(self, array: np.ndarray) -> int:
        """Place ``array`` (64-byte aligned); its IOVA."""
        data = np.ascontiguousarray(array).tobytes()
        at = self.alloc(len(data))
        self.chunks.append((at - iommu.IOVA_BASE, data))
        return at

    def alloc(self, nbytes: int) -> int:
        at = self.next
        self.next = -(-(at + max(nbytes, 1)) // 64) * 64
        if self.next > MEMORY_BYTES:
            raise MemoryError("self-test memory exhausted")
        return iommu.IOVA_BASE + at

    def write(self) -> None:
        with open(self.bo, "r+b") as f:
            for offset, data in self.chunks:
                f.seek(offset)
                f.write(data)


def _pattern(shape: tuple[int, ...], dtype=np.int8) -> np.ndarray:
    n = int(np.prod(shape))
    return ((np.arange(n) * 37 + 11) % 255 - 127).astype(dtype).reshape(shape)


def _per_channel(channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel multipliers in [2**30, 2**31) and shifts, as a quantizer would give."""
    multiplier = ((1 << 30) + np.arange(channels, dtype=np.int32) * (1 << 24)).astype(np.int32)
    return multiplier, np.full(channels, -7, np.int32) + np.arange(channels, dtype=np.int32) % 3


def _conv(mem: _Memory, x_at: int, shape: tuple[int, int, int, int], cout: int, k: int, stride: int,
          depthwise: bool) -> tuple[bytes, int, tuple[int, int, int, int]]:
    n, h, w, cin = shape
    oh, ow = -(-h // stride), -(-w // stride)
    out_shape = (n, oh, ow, cout)
    mult, shift = _per_channel(cout)
    pad = (max((oh - 1) * stride + k - h, 0) // 2, max((ow - 1) * stride + k - w, 0) // 2)
    out = mem.alloc(int(np.prod(out_shape)))
    desc = tasks.encode_task(
        "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", ops.OPF_PER_CHANNEL, input=x_at,
        weights=mem.put(_pattern((1, k, k, cout) if depthwise else (cout, k, k, cin))),
        bias=mem.put(_pattern((cout,), np.int32) * 50), output=out, mult_iova=mem.put(mult),
        shift_iova=mem.put(shift), in_shape=shape, out_shape=out_shape, filter_hw=(k, k),
        stride=(stride, stride), dilation=(1, 1), padding=pad, cin_per_group=1 if depthwise else cin,
        input_zp=-3, output_zp=5, act_min=-128, act_max=127)
    return desc, out, out_shape


def network(mem) -> list[bytes]:
    """The descriptors of a tiny int8 network with each operator the model zoo uses, its
    operands placed by ``mem`` (``put(array)`` and ``alloc(nbytes)`` return IOVAs)."""
    shape = (1, 8, 8, 8)
    count = int(np.prod(shape))
    x = mem.alloc(count)
    descs = [tasks.encode_task("QUANTIZE", input=mem.put(_pattern(shape).astype(np.float32) / 64), output=x,
                               count=count, scale=0.02, zero_point=-7)]
    d, a, a_shape = _conv(mem, x, shape, 16, 3, 2, depthwise=False)
    descs.append(d)
    d, b, _ = _conv(mem, a, a_shape, 16, 3, 1, depthwise=True)
    descs.append(d)
    d, c, _ = _conv(mem, b, a_shape, 16, 1, 1, depthwise=False)
    descs.append(d)
    rank4 = list(a_shape) + [0] * (ops.MAX_RANK - 4)
    added = mem.alloc(int(np.prod(a_shape)))
    descs.append(tasks.encode_task("ADD", input1=a, input2=c, output=added, act_min=-128, act_max=127,
                                   rank=4, in1_shape=rank4, in2_shape=rank4, out_shape=rank4, input1_zp=1,
                                   input2_zp=-2, output_zp=3, **add_params(0.05, 0.03, 0.06)))
    pooled_shape = (1, 2, 2, 16)
    pooled = mem.alloc(64)
    descs.append(tasks.encode_task("AVERAGE_POOL_2D", input=added, output=pooled, in_shape=a_shape,
                                   out_shape=pooled_shape, filter_hw=(2, 2), stride=(2, 2), padding=(0, 0),
                                   act_min=-128, act_max=127))
    flat = mem.alloc(64)
    descs.append(tasks.encode_task("RESHAPE", input=pooled, output=flat, count=64))
    classes = 10
    logits = mem.alloc(classes)
    descs.append(tasks.encode_task(
        "FULLY_CONNECTED", tasks.FC_DOUBLE_SCALE, input=flat, weights=mem.put(_pattern((classes, 64))),
        bias=mem.put(_pattern((classes,), np.int32)), output=logits, rows=1, in_features=64,
        out_features=classes, multiplier=1 << 30, shift=-7, scale=0.004, input_zp=7, output_zp=-5,
        act_min=-128, act_max=127))
    beta_multiplier, beta_shift, diff_min = softmax_params(1.0, 0.1)
    probabilities = mem.alloc(classes)
    descs.append(tasks.encode_task("SOFTMAX", input=logits, output=probabilities, rows=1, depth=classes,
                                   input_beta_multiplier=beta_multiplier, input_beta_left_shift=beta_shift,
                                   diff_min=diff_min))
    descs.append(tasks.encode_task("DEQUANTIZE", input=probabilities, output=mem.alloc(4 * classes),
                                   count=classes, scale=1 / 256, zero_point=-128))
    return descs


PREFIX = "npu-self-test-"


def remove_stale(scratch: Path) -> int:
    """Remove the self-test directories left in the bus directory ``scratch`` by a chip killed
    during its self-test; returns how many. The bus outlives a chip the driver restarts, and
    only the chip's main process tests there, one at a time (its successor starts after it
    died), so any found is dead: each chip killed mid-test left one (its memory files) until
    the daemon stopped (the chaos test's leak of 3 files after 34 chip kills)."""
    stale = [path for path in scratch.glob(PREFIX + "*") if path.is_dir()]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return len(stale)


def self_test(profile: HardwareProfile | None = None, scratch: Path | None = None) -> list[JobResult]:
    """Run the self-test job twice (decoded, then replayed from its job plan) in a private
    address space, then drop everything it left in the chip's caches. The two results
    (their status is 0 unless the chip is broken). Its files go in a directory made in
    ``scratch`` (the chip's bus directory: whoever removes the bus removes them too, even
    when this process is killed meanwhile), else in /dev/shm. A ``scratch``'s leftovers of
    a predecessor killed mid-test are removed first (:func:`remove_stale`)."""
    where = scratch if scratch is not None else Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    if scratch is not None:
        remove_stale(scratch)
    bus = Path(tempfile.mkdtemp(prefix=PREFIX, dir=where))
    try:
        mem = _Memory(bus)
        command = b"".join(network(mem))
        cmd_at = mem.put(np.frombuffer(command, np.uint8))
        mem.write()
        profile = profile or HardwareProfile()
        try:
            return [run_job(mem.dma, ASID, cmd_at, len(command), profile) for _ in range(2)]
        finally:
            caches.invalidate(mem.dma, ASID)
    finally:
        shutil.rmtree(bus, ignore_errors=True)
