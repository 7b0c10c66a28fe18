"""Job plans on a real device: a command buffer decoded once and replayed must behave as
decoding it every time would. Each test runs a job several times (the first run decodes,
the later ones replay) and changes one thing a stale plan would miss."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim.kernels import conv
from libnpu.portability import JobError
from npu_hw import ops, tasks
from npu_hw.fixedpoint import quantize_multiplier_array
from tests.support.quant_utils import random_int8

SHAPE = (1, 8, 8, 8)


def put(device, array: np.ndarray):
    mem = device.alloc_mem(max(array.nbytes, 64))
    mem.view[:array.nbytes] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return mem


def conv_job(device, bufs: dict, out, cmds=None) -> object:
    cmds = cmds if cmds is not None else device.command_buffer()
    cmds.add("CONV_2D", ops.OPF_PER_CHANNEL, input=bufs["x"].address, weights=bufs["w"].address,
             bias=bufs["bias"].address, output=out.address, mult_iova=bufs["mult"].address,
             shift_iova=bufs["shift"].address, in_shape=SHAPE, out_shape=SHAPE, filter_hw=(3, 3),
             stride=(1, 1), dilation=(1, 1), padding=(1, 1), cin_per_group=8, input_zp=-1,
             output_zp=3, act_min=-128, act_max=127)
    return cmds


def expected(x, w, bias, mult, shift) -> np.ndarray:
    return conv.conv2d(x, w, bias, stride=(1, 1), dilation=(1, 1), padding=(1, 1), out_hw=SHAPE[1:3],
                       input_zp=-1, output_zp=3, multiplier=mult, shift=shift)


@pytest.fixture
def operands():
    rng = np.random.default_rng(11)
    mult, shift = quantize_multiplier_array(rng.uniform(0.001, 0.004, 8))
    return dict(x=random_int8(rng, SHAPE), w=random_int8(rng, (8, 3, 3, 8)),
                bias=rng.integers(-2000, 2000, 8).astype(np.int32), mult=mult, shift=shift), rng


def test_replays_read_the_operands_current_contents(device, operands) -> None:
    arrays, rng = operands
    bufs = {name: put(device, a) for name, a in arrays.items()}
    out = device.alloc_mem(int(np.prod(SHAPE)))
    cmds = conv_job(device, bufs, out)
    for _ in range(4):
        arrays["x"] = random_int8(rng, SHAPE)          # new input and new weights in place
        arrays["w"] = random_int8(rng, (8, 3, 3, 8))
        bufs["x"].view[:arrays["x"].nbytes] = arrays["x"].reshape(-1).view(np.uint8)
        bufs["w"].view[:arrays["w"].nbytes] = arrays["w"].reshape(-1).view(np.uint8)
        device.run(cmds, [*bufs.values(), out])
        np.testing.assert_array_equal(out.array(np.int8, SHAPE), expected(**arrays))


def test_a_command_buffer_rewritten_in_place_is_decoded_again(device, operands) -> None:
    arrays, _ = operands
    bufs = {name: put(device, a) for name, a in arrays.items()}
    first, second = device.alloc_mem(int(np.prod(SHAPE))), device.alloc_mem(int(np.prod(SHAPE)))
    cmds = conv_job(device, bufs, first)
    other = conv_job(device, bufs, second)     # kept alive: freeing it would invalidate
    rewritten = other.memory.view[:cmds.used].copy()
    for _ in range(3):
        device.run(cmds, [*bufs.values(), first, second])
    cmds.memory.view[:cmds.used] = rewritten       # same address and size
    second.view[:] = 0
    device.run(cmds, [*bufs.values(), first, second])
    np.testing.assert_array_equal(second.array(np.int8, SHAPE), expected(**arrays))


def test_freed_operands_drop_the_plan(device, operands) -> None:
    """After the weights' buffer is freed the replayed job must fault, as a decoded one
    does (the IOMMU no longer maps it), instead of reading the freed pages."""
    arrays, _ = operands
    bufs = {name: put(device, a) for name, a in arrays.items()}
    out = device.alloc_mem(int(np.prod(SHAPE)))
    cmds = conv_job(device, bufs, out)
    for _ in range(3):
        device.run(cmds, [*bufs.values(), out])
    device.free_mem(bufs.pop("w"))
    with pytest.raises(JobError) as failed:
        device.run(cmds, [*bufs.values(), out])
    assert failed.value.errno == 14                # EFAULT


def test_a_nop_job_replays(device) -> None:
    cmds = device.command_buffer(capacity=256 * 64)
    for _ in range(256):
        cmds.add("NOP")
    for _ in range(5):
        assert device.run(cmds).status == 0


def test_a_profiled_replay_reports_every_task(device, operands) -> None:
    """A profiled job keeps one record per task (NOPs too) with the first run's cycles when
    later runs replay its plan, and unprofiled runs in between change nothing."""
    arrays, _ = operands
    bufs = {name: put(device, a) for name, a in arrays.items()}
    out = device.alloc_mem(int(np.prod(SHAPE)))
    cmds = device.command_buffer()
    cmds.add("NOP")
    conv_job(device, bufs, out, cmds)
    cmds.add("NOP")
    timings = []
    for profile in (True, False, True, True):
        fence = device.run(cmds, [*bufs.values(), out], profile=profile)
        np.testing.assert_array_equal(out.array(np.int8, SHAPE), expected(**arrays))
        if profile:
            timings.append(device.get_profile(fence))
    for timing in timings:
        assert timing.complete and [t.index for t in timing.tasks] == [0, 1, 2]
        assert [t.opcode for t in timing.tasks] == [tasks.OP_NOP, ops.OP_CONV_2D, tasks.OP_NOP]
        assert sum(t.cycles for t in timing.tasks) == timing.cycles
        assert all(t.start_ns <= t.end_ns for t in timing.tasks)
        assert [t.cycles for t in timing.tasks] == [t.cycles for t in timings[0].tasks]


def test_a_replayed_gather_reads_its_indices_each_run(device) -> None:
    """Units without a C rerun (here ops-layout's GATHER) replay by running their handler
    again, so indices rewritten in place between runs are honoured."""
    rng = np.random.default_rng(5)
    x = random_int8(rng, (2, 10, 3))
    data, out = put(device, x), device.alloc_mem(64)
    indices = device.alloc_mem(64)
    cmds = device.command_buffer()
    cmds.add("GATHER", input=data.address, indices_iova=indices.address, output=out.address,
             outer=2, axis_size=10, inner=3, count=4)
    for _ in range(4):
        picked = rng.integers(0, 10, 4).astype(np.int32)
        indices.view[:16] = picked.view(np.uint8)
        device.run(cmds, [data, indices, out])
        np.testing.assert_array_equal(out.array(np.int8, (2, 4, 3)), x[:, picked, :])
