"""Runs one job: fetches its command buffer through the DMA engine and
executes the task descriptors in order."""
from __future__ import annotations

import errno
import importlib.util
from dataclasses import dataclass
from typing import Callable

import numpy as np

from firmware_sim.dma import BusError, DmaEngine, IommuFault
from firmware_sim.spec import tasks
from firmware_sim.timing import HardwareProfile, task_cycles


class DescriptorError(ValueError):
    """A descriptor whose fields make no sense (job fails with EINVAL)."""


def _nop(desc: np.void, dma: DmaEngine) -> None:
    pass


def _dma_copy(desc: np.void, dma: DmaEngine) -> None:
    length = int(desc["length"])
    src = dma.read(int(desc["src"]), length)
    dma.write(int(desc["dst"]), length)[:] = src


def _fully_connected(desc: np.void, dma: DmaEngine) -> None:
    from firmware_sim.kernels.fully_connected import fully_connected

    rows, k, n = int(desc["rows"]), int(desc["in_features"]), int(desc["out_features"])
    if not (rows and k and n):
        raise DescriptorError("FULLY_CONNECTED with an empty dimension")
    x = dma.read_array(int(desc["input"]), np.int8, (rows, k))
    w = dma.read_array(int(desc["weights"]), np.int8, (n, k))
    bias = dma.read_array(int(desc["bias"]), np.int32, (n,)) if desc["bias"] else None
    flags = int(desc["flags"])
    scale = None
    if flags & tasks.FC_PER_CHANNEL:
        mult = dma.read_array(int(desc["mult_iova"]), np.int32, (n,))
        shift = dma.read_array(int(desc["shift_iova"]), np.int32, (n,))
        if flags & tasks.FC_DOUBLE_SCALE:
            scale = dma.read_array(int(desc["scale_iova"]), np.float64, (n,))
    else:
        mult = np.array([desc["multiplier"]], np.int32)
        shift = np.array([desc["shift"]], np.int32)
        if flags & tasks.FC_DOUBLE_SCALE:
            scale = np.array([desc["scale"]], np.float64)
    out = dma.write_array(int(desc["output"]), np.int8, (rows, n))
    fully_connected(x, w, bias, input_zp=int(desc["input_zp"]), output_zp=int(desc["output_zp"]),
                    multiplier=mult, shift=shift, act_min=int(desc["act_min"]),
                    act_max=int(desc["act_max"]), out=out, scale=scale)


Handler = Callable[[np.void, DmaEngine], None]

HANDLERS: dict[int, Handler] = {
    tasks.OP_NOP: _nop,
    tasks.OP_DMA_COPY: _dma_copy,
    tasks.OP_FULLY_CONNECTED: _fully_connected,
}
# Compute operators beyond the base set register their handlers in ops_exec.
if importlib.util.find_spec("firmware_sim.ops_exec") is not None:
    from firmware_sim import ops_exec
    HANDLERS.update(ops_exec.HANDLERS)


@dataclass
class JobResult:
    status: int = 0          # 0 or -errno
    cycles: int = 0
    fault_iova: int = 0
    task_index: int = 0      # failing task, or the number of tasks run
    exec_ns: int = 0         # wall-clock time spent


def run_job(dma: DmaEngine, asid: int, cmd_iova: int, cmd_size: int, profile: HardwareProfile) -> JobResult:
    """Execute a job's command buffer; never raises for a bad job."""
    result = JobResult()
    if cmd_size == 0:
        return result
    index = 0
    try:
        dma.bind(asid)
        command_buffer = dma.read(cmd_iova, cmd_size).copy()  # the chip fetches descriptors once
        for index, (_, task, desc) in enumerate(tasks.decode_tasks(command_buffer)):
            moved_before = dma.bytes_moved
            handler = HANDLERS.get(task.opcode)
            if handler is None:
                raise DescriptorError(f"no compute unit for {task.name}")
            handler(desc, dma)
            dma.commit()
            result.cycles += task_cycles(profile, task, desc, dma.bytes_moved - moved_before)
        result.task_index = index + 1
    except IommuFault as fault:
        result.status, result.fault_iova, result.task_index = -errno.EFAULT, fault.iova, index
    except BusError:
        result.status, result.task_index = -errno.EIO, index
    except (tasks.CommandBufferError, DescriptorError, ValueError):
        result.status, result.task_index = -errno.EINVAL, index
    finally:
        dma.discard()
    return result
