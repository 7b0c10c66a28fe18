"""Hostile descriptors of the newer opcodes on a real device (docs/security.md, "A
descriptor cannot take the chip down or its memory"): each job fails with its precise
errno or, for the geometry that used to ask for gigabytes, simply runs; the cores are
never restarted and another context's job runs as before. The exhaustive run is
``benchmarks.fuzz_descriptors``; tests/firmware_sim/test_hostile_descriptors.py checks
the working memory."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np

import libnpu
from firmware_sim.chip import core_address_space
from kmd_fuse import paths
from npu_hw import ops


def _r(shape) -> list[int]:
    return list(shape) + [0] * (ops.MAX_RANK - len(shape))


def _run_one(dev, buffers, task: str, flags: int = 0, **fields) -> int:
    cmds = dev.command_buffer()
    cmds.add(task, flags, **fields)
    try:
        dev.run(cmds, buffers)
    except libnpu.JobError as exc:
        return exc.errno
    return 0


def test_hostile_descriptors_fail_precisely_and_nobody_else_notices(session):
    attacker, bystander = session.open(0), session.open(0)
    data, out = attacker.alloc_mem(1 << 16), attacker.alloc_mem(1 << 16)
    idx = attacker.alloc_mem(4096)
    np.frombuffer(idx.view, np.int32)[:4] = [0, 1, 7, -1]
    x, o, buffers = data.address, out.address, [data, out, idx]
    conv = dict(input=x, weights=x + 4096, output=o, in_shape=(1, 3, 3, 2), out_shape=(1, 6, 6, 3), filter_hw=(2, 2),
                dilation=(1, 1), cin_per_group=2, multiplier=1 << 30, act_min=-128, act_max=127)
    resets = attacker.info()["reset_count"]
    cases = [
        (0, "TRANSPOSE_CONV", 0, {**conv, "stride": (1 << 31, 1)}),          # used to ask for ~100 GiB
        (0, "TRANSPOSE_CONV", 0, {**conv, "stride": (2, 2), "padding": ((1 << 32) - 1, 0)}),
        (errno.EFAULT, "TRANSPOSE_CONV", 0, {**conv, "stride": (1, 1), "in_shape": (1, 300, 300, 2)}),  # past them
        (errno.EINVAL, "GATHER", 0, dict(input=x, output=o, indices_iova=idx.address, outer=1, axis_size=4, inner=8,
                                         count=4)),                         # index 7 and -1 outside [0, 4)
        (errno.EINVAL, "GATHER", 0, dict(input=x, output=o, indices_iova=idx.address, outer=1 << 20, axis_size=1 << 20,
                                         inner=1 << 20, count=1)),          # a product past 2^31
        (errno.EFAULT, "BATCH_MATMUL", 0, dict(lhs=x, rhs=1 << 60, output=o, rank=2, lhs_shape=_r((4, 4)),
                                               rhs_shape=_r((4, 4)), multiplier=1 << 30, act_min=-128, act_max=127)),
        (errno.EINVAL, "SUM", 0, dict(input=x, output=o, rank=7, in_shape=_r((2, 2)), axes_mask=1, multiplier=1 << 30)),
        (errno.EINVAL, "ARG_MAX", 0, dict(input=x, output=o, rank=2, in_shape=_r((4, 4)), axis=1 << 31)),
        (errno.EINVAL, "REDUCE_L2", 0, dict(input=x, output=o, rank=1, in_shape=_r((8,)), axes_mask=1,
                                            scale=float("nan"))),
        (errno.EFAULT, "DIV", 0, dict(input1=x, input2=x, output=idx.address + 4096 - 8, rank=1, in1_shape=_r((64,)),
                                      in2_shape=_r((64,)), out_shape=_r((64,)), output_multiplier=1 << 30,
                                      act_min=-128, act_max=127)),          # the output runs past the mappings
        (errno.EINVAL, "LOG_SOFTMAX", 0, dict(input=x, output=o, rows=1 << 16, depth=1 << 16)),
    ]
    for expected, name, flags, fields in cases:
        assert _run_one(attacker, buffers, name, flags, **fields) == expected, (name, fields)
    src, dst = bystander.alloc_mem(4096), bystander.alloc_mem(4096)
    src.view[:] = 7
    cmds = bystander.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=4096)
    bystander.run(cmds, [src, dst])
    assert bytes(dst.view[:4096]) == b"\x07" * 4096
    assert attacker.info()["reset_count"] == resets        # no core was restarted
    attacker.close()
    bystander.close()



def _address_space_limits(bus) -> list[str]:
    """The "Max address space" soft limit of each process of the chip serving ``bus``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            limits = Path(f"/proc/{pid}/limits").read_text()
        except OSError:
            continue
        if b"firmware_sim" in cmdline and str(bus).encode() in cmdline:
            found += [line.split()[3] for line in limits.splitlines() if line.startswith("Max address space")]
    return found


def test_a_core_cannot_take_many_times_the_device_memory_of_the_host(fresh_npu):
    # REDUCE_L2 widens its input to int64 (8x) and squares it: over a 512 MiB buffer of a
    # 1 GiB device that is 8 GiB of the host's memory for one descriptor, on each core.
    # The cores now run with an address space of the device memory plus a few GiB.
    bus = paths.bus_dir(fresh_npu.devroot, 0)
    expected = str(core_address_space(1 << 30))
    assert _address_space_limits(bus).count(expected) == 2, _address_space_limits(bus)
    with libnpu.initialize(fresh_npu.devroot) as session:
        dev = session.open(0)
        big, out = dev.alloc_mem(512 << 20), dev.alloc_mem(4096)
        status = _run_one(dev, [big, out], "REDUCE_L2", input=big.address, output=out.address, rank=1,
                          in_shape=_r((512 << 20,)), axes_mask=1, scale=1.0)
        assert status == errno.EINVAL                      # more working memory than the chip has
        assert _run_one(dev, [big, out], "REDUCE_L2", input=big.address, output=out.address, rank=1,
                        in_shape=_r((4096,)), axes_mask=1, scale=1.0) == 0
        assert dev.info()["reset_count"] == 0
