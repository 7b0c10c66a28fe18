"""Runs one job: fetches its command buffer through the DMA engine and
executes the task descriptors in order, or by their dependencies (``task_graph``).

A failure is classified only by the explicit check that found it (``errors``):
``InvalidCommand`` and a malformed command buffer give EINVAL, an IOMMU fault EFAULT,
a bus error EIO.  Anything else is the chip's own fault: the job fails with EIO, the
traceback goes to the chip's log (its stderr, the daemon's log file) and the core
serves the next job."""
from __future__ import annotations

import errno
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from firmware_sim import band_joins, job_plans, task_graph, units
from firmware_sim.dma import DmaEngine, IommuFault
from firmware_sim.errors import InvalidCommand, JobFailure
from firmware_sim.kernels.native import calls as native_calls
from firmware_sim.timing import HardwareProfile, task_cycles
from npu_hw import tasks


class DescriptorError(InvalidCommand):
    """A descriptor whose fields make no sense (job fails with EINVAL)."""


def _nop(desc: np.void, dma: DmaEngine) -> None:
    pass


def _dma_copy(desc: np.void, dma: DmaEngine) -> None:
    length = int(desc["length"])
    src = dma.read(int(desc["src"]), length)
    dma.write(int(desc["dst"]), length)[:] = src


Handler = Callable[[np.void, DmaEngine], "Callable[[], None] | None"]
# (index, opcode, start_ns, end_ns, cycles, tile: the job's core it was placed on, 0 = the one running it)
TaskHook = Callable[[int, int, int, int, int, int], None]

HANDLERS: dict[int, Handler] = {
    tasks.OP_NOP: _nop,
    tasks.OP_DMA_COPY: _dma_copy,
    **units.HANDLERS,     # the compute operators: FULLY_CONNECTED and those of npu_hw.ops
}


@dataclass
class JobResult:
    status: int = 0          # 0 or -errno
    cycles: int = 0
    fault_iova: int = 0
    task_index: int = 0      # failing task, or the number of tasks run
    failed_task: int = -1    # the task the job failed in (a check, a fault), else -1 (a user queue's HDR_FAILED_TASK)
    exec_ns: int = 0         # wall-clock time spent


def run_job(dma: DmaEngine, asid: int, cmd_iova: int, cmd_size: int, profile: HardwareProfile,
            inject_internal_error: bool = False, on_task: TaskHook | None = None,
            replay: bool = True, cores: int = 1) -> JobResult:
    """Execute a job's command buffer; never raises (short of the process dying).

    A command buffer run before (same ASID, address and bytes, no invalidation since)
    replays its job plan (``job_plans``: one call into C when every task is a C kernel
    call) unless ``replay`` is False (fault injection needs every access made).
    ``inject_internal_error`` (fault injection) makes the job
    meet an unexpected exception, as a bug in a kernel would.  ``on_task`` (profiling)
    hears each task that completed, on the first run and on replays alike: its index,
    opcode, CLOCK_MONOTONIC start and end, cycles and the core (of the job's) it was placed on.
    ``cores``: the chip's, which a graph job (``task_graph``) may use; its cycles are then
    its critical path over them."""
    result = JobResult()
    if cmd_size == 0 and not inject_internal_error:
        return result
    index = 0  # the task being run; after the loop, how many ran
    located = True  # False while a graph job is checked whole: a failure then is no task's
    try:
        if inject_internal_error:
            raise RuntimeError("injected internal error (FAULT_INTERNAL)")
        dma.bind(asid)
        # The IOTLB's view of the command buffer: a replay only compares it with its plan's copy.
        commands = dma.read_array(cmd_iova, np.uint8, (cmd_size,))
        plan = job_plans.lookup(dma, asid, cmd_iova, commands) if replay else None
        native_steps = plan.native_steps() if plan is not None and on_task is None else None
        if native_steps is not None:
            # Every step a C kernel call: the whole job in one call into C.
            status, index = native_steps.run()
            if status:
                native_calls.check_status(status)
            index, result.cycles = plan.tasks, plan.cycles
        elif plan is not None and on_task is None and plan.mixed is not None:
            # Runs of C kernel calls, one call into C each, and the Python steps between them.
            for index, segment in plan.mixed.segments:  # noqa: B007 (a failing step's index is reported)
                if isinstance(segment, job_plans.NativeSteps):
                    status, failed = segment.run()
                    if status:
                        index = failed
                        native_calls.check_status(status)
                else:
                    segment()
            index, result.cycles = plan.tasks, plan.cycles
        elif plan is not None and on_task is None:
            for index, step in plan.steps:   # noqa: B007 (a failing step's index is reported)
                step()
            index, result.cycles = plan.tasks, plan.cycles
        elif plan is not None:
            # Profiled replay: every task (NOPs too) timed around its step, as a first run would.
            for index, opcode, cycles, step, tile in plan.timed_steps:  # noqa: B007 (as above)
                started = time.monotonic_ns()
                if step is not None:
                    step()
                on_task(index, opcode, started, time.monotonic_ns(), cycles, tile)
            index, result.cycles = plan.tasks, plan.cycles
        else:
            command_buffer = commands.copy()      # the chip fetches the descriptors once
            steps: list[tuple[int, Callable[[], None]]] = []
            timed_steps: list[job_plans.TimedStep] = []
            located = False
            order, placement = task_graph.schedule(command_buffer, cores)
            located = True
            descs: dict[int, tuple[int, np.void]] = {}     # a graph job on several cores: for band_joins
            for index, task, desc in order:  # noqa: B020 (a graph job's own index; in order, the count)
                moved_before, copies_before = dma.bytes_moved, dma.copies
                started = time.monotonic_ns() if on_task else 0
                handler = HANDLERS.get(task.opcode)
                if handler is None:
                    raise DescriptorError(f"no compute unit for {task.name}")
                rerun = handler(desc, dma)
                dma.commit()
                cycles = task_cycles(profile, task, desc, dma.bytes_moved - moved_before)
                tile = placement.place(index, cycles)
                if on_task:
                    on_task(index, task.opcode, started, time.monotonic_ns(), cycles, tile)
                step: Callable[[], None] | None = None
                if task.opcode != tasks.OP_NOP:
                    # Only a callable is a rerun (a handler may return anything else).
                    step = (rerun if callable(rerun) and dma.copies == copies_before
                            else job_plans.HandlerStep(handler, desc, dma))
                    steps.append((index, step))
                    if placement.parallel_deps is not None:
                        descs[index] = (task.opcode, desc)
                timed_steps.append((index, task.opcode, cycles, step, tile))
                index += 1
            index, result.cycles = placement.placed, placement.cycles
            if replay:
                deps = placement.parallel_deps
                one_thread = None if deps is None else band_joins.join_steps(
                    steps, descs, deps, lambda opcode, desc: job_plans.HandlerStep(HANDLERS[opcode], desc, dma),
                    band_joins.readable(dma))
                job_plans.store(dma, asid, cmd_iova, job_plans.JobPlan(
                    command_buffer.tobytes(), steps, index, result.cycles, timed_steps, deps=deps,
                    one_thread=one_thread))
        result.task_index = index
    except IommuFault as fault:
        result.status, result.fault_iova, result.task_index = -fault.errno, fault.iova, index
    except JobFailure as failure:
        result.status, result.task_index = -failure.errno, index
        _report_failure(index if located else -1, asid, failure)
    except tasks.CommandBufferError as error:
        result.status, result.task_index = -errno.EINVAL, index
        _report_failure(index if located else -1, asid, error)
    except Exception:
        result.status, result.task_index = -errno.EIO, index
        _report_internal_error(index, asid)
    finally:
        dma.discard()
    if result.status and located:
        result.failed_task = index
    return result


def failed_step_result(status: int, index: int, asid: int) -> JobResult:
    """The result of a job whose C step ``index`` failed with ``status`` in a replay outside
    ``run_job`` (the C service loop, ``queue_service``): what ``run_job`` makes of it."""
    try:
        native_calls.check_status(status)
    except JobFailure as failure:
        _report_failure(index, asid, failure)
        return JobResult(status=-failure.errno, task_index=index, failed_task=index)
    except Exception:
        _report_internal_error(index, asid)
    return JobResult(status=-errno.EIO, task_index=index, failed_task=index)


class ReportLimit:
    """At most ``per_second`` lines a second, then one line counting what was left out: any
    local user can make the chip refuse jobs, and its lines reach the log (on tmpfs)
    directly, not through the daemon's capped handler."""

    def __init__(self, per_second: int = 10, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second, self.clock = per_second, clock
        self.window, self.count, self.dropped = -1.0, 0, 0

    def admit(self) -> str | None:
        """None: drop this line; else a prefix to print before it ("" or the dropped count)."""
        now = self.clock()
        prefix = ""
        if now - self.window >= 1.0:
            if self.dropped:
                prefix = f"chip: {self.dropped} more failed jobs not logged\n"
            self.window, self.count, self.dropped = now, 0, 0
        if self.count >= self.per_second:
            self.dropped += 1
            return None
        self.count += 1
        return prefix


_REPORTS = ReportLimit()


def _report_failure(index: int, asid: int, failure: Exception) -> None:
    """The reason a check refused a job, for the chip's log (the daemon's log file): the
    completion carries only the errno and the task's index (``index`` -1: a graph job
    refused whole, before any task ran). Rate-limited (``ReportLimit``)."""
    prefix = _REPORTS.admit()
    if prefix is None:
        return
    where = f"at task {index}" if index >= 0 else "before its first task"
    print(f"{prefix}chip: a job of ASID {asid} failed {where}: {failure}", file=sys.stderr, flush=True)


def _report_internal_error(index: int, asid: int) -> None:
    print(f"chip: internal error in task {index} of a job of ASID {asid} (the job fails with EIO):",
          file=sys.stderr)
    traceback.print_exc()
    sys.stderr.flush()
