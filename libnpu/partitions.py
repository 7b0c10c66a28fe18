"""The partition runner (CPU fallback): each chip partition of a model as a job, the host steps between them run here.

A model with operators the chip lacks has host steps (``Loadable.host_steps``, docs/models.md):
its command buffer is cut into partitions, each run as one job, and the host steps that
follow a partition run on the request's memory (mapped here) before the next one starts.
An ``InferRequest`` holds one :class:`PartitionRunner` for ``infer``, ``start``/``wait`` (in
a helper thread) and ``infer_async`` alike, its jobs on a user queue of the device when
there is one; ``Runtime.submit`` makes one per call (through SUBMIT).  The host kernels
themselves are :mod:`libnpu.host`'s.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from libnpu.dynamic_outputs import check_dynamic_output
from libnpu.errors import JobError
from libnpu.host import Boundary, HostKernel, kernel_for
from libnpu.job_faults import name_failed_task
from libnpu.job_timeouts import TimeoutLimits, job_timeout_ms
from libnpu.loadable import HostCall, HostStep, Loadable, TensorDesc, TensorFlags
from libnpu.portability import PRIO_NORMAL, Device, Fence, Memory, PreparedSubmit
from libnpu.profiling import ChipPart, HostPart
from libnpu.tensors import tensor_view
from libnpu.user_queue import QueueFence, RepeatedJob

# (wait, offset, size, timeout_ms) -> that part of the command buffer as a job on a user queue
# (run to its end with ``wait``), or None when there is no queue to take it: the runner uses SUBMIT.
QueueJob = Callable[[bool, int, int, int], QueueFence | None]
Parts = list[ChipPart | HostPart]


def boundary(desc: TensorDesc) -> Boundary:
    """How a tensor is stored, for a host step."""
    if desc.scale is None or desc.zero_point is None:
        return Boundary(desc.dtype)
    return Boundary(desc.dtype, float(desc.scale[0]), int(desc.zero_point[0]))


def host_kernels(loadable: Loadable) -> list[HostKernel]:
    """A kernel per host step (:class:`libnpu.host.HostOpError` if the host cannot run one)."""
    return [kernel_for(HostCall(step.kind, bytes(step.model), step.op, step.source, step.reason))
            for step in loadable.host_steps]


class _HostStepRun:
    """One host step bound to one request's memory: reads its inputs, runs, writes its outputs
    (those shaped per run into ``dynamic``, by name: :mod:`libnpu.dynamic_outputs`)."""

    def __init__(self, step: HostStep, kernel: HostKernel, loadable: Loadable,
                 view: Callable[[TensorDesc], np.ndarray], dynamic: dict[str, np.ndarray]) -> None:
        self.step, self.kernel, self.dynamic = step, kernel, dynamic
        self.ins = [loadable.tensors[i] for i in step.inputs]
        self.outs = [loadable.tensors[i] for i in step.outputs]
        self.in_views = [_constant(loadable, d) if d.flags & TensorFlags.CONSTANT else view(d) for d in self.ins]
        self.out_views = [view(d) for d in self.outs]
        self.sources = [boundary(d) for d in self.ins]
        self.targets = [boundary(d) for d in self.outs]

    def __call__(self) -> None:
        results = self.kernel.run([v.copy() for v in self.in_views], self.sources, self.targets)
        for view, value, desc in zip(self.out_views, results, self.outs):
            if desc.dynamic:
                self.dynamic[desc.name] = check_dynamic_output(desc, value, self.step.op)
                continue
            if value.size != view.size:
                raise ValueError(f"host step {self.step.op}: output {desc.name} has {value.size} values, "
                                 f"expected {view.size} {desc.shape}")
            view[...] = value.reshape(view.shape)


def _constant(loadable: Loadable, desc: TensorDesc) -> np.ndarray:
    content = loadable.regions[desc.region].content
    assert content is not None, "constants live in regions with contents"
    return tensor_view(np.frombuffer(content, np.uint8, desc.nbytes, desc.offset), desc, 0).copy()


@dataclass
class _Segment:
    """One chip partition (its job prepared to run to its end and to submit; None when it
    has no task) and the host steps that follow it."""
    run: PreparedSubmit | None
    submit: PreparedSubmit | None
    first_task: int
    steps: list[HostStep]
    offset: int = 0             # its tasks' bytes in the command buffer (for a user queue)
    size: int = 0
    job: RepeatedJob | None = None     # again on the queue it last ran on, its wait hinted
    timeout_ms: int = 0                # what its job asks for (0: the device's default)


class PartitionRunner:
    """One inference of a partitioned model on one request's memory at a time: each chip
    partition as a job (on a user queue through ``queue_job`` when it takes it, else
    SUBMIT), then its host steps, in order.  ``view(desc)`` maps a tensor of the request's
    memory; ``prepare`` (again when the priority or PERF_COUNT changes) before running.
    Each partition's job asks for the timeout of its own predicted work within ``limits``
    (:mod:`libnpu.job_timeouts`; None: the device's default)."""

    def __init__(self, device: Device, loadable: Loadable, kernels: list[HostKernel], command: Memory,
                 buffers: list[Memory], view: Callable[[TensorDesc], np.ndarray],
                 queue_job: QueueJob | None = None, limits: TimeoutLimits | None = None) -> None:
        self.device, self.loadable, self.command, self.buffers = device, loadable, command, buffers
        self._queue_job, self._limits = queue_job, limits
        self.dynamic: dict[str, np.ndarray] = {}    # the last run's outputs shaped per run, by name
        self._host = {id(step): _HostStepRun(step, kernel, loadable, view, self.dynamic)
                      for step, kernel in zip(loadable.host_steps, kernels)}
        self._segments: list[_Segment] = []
        self.profiled = False
        self.fence: Fence | QueueFence | None = None     # the last chip partition's job

    def clear(self) -> None:
        """Drop the host steps' views of the request's memory (before it is freed)."""
        self._host.clear()

    def prepare(self, priority: int = PRIO_NORMAL, profile: bool = False) -> None:
        """The partitions' jobs, prepared with ``priority`` (and PERF_COUNT when ``profile``)."""
        offsets = self.loadable.task_offsets()
        tasks_of = self.loadable.tasks
        self.profiled, self._segments = profile, []
        for tasks, steps in self.loadable.partitions():
            run = submit = None
            start, end = 0, 0
            timeout_ms = job_timeout_ms(self.loadable, tasks, self._limits) if tasks else 0
            if tasks:
                start, end = offsets[tasks.start], offsets[tasks.stop - 1] + len(tasks_of[tasks.stop - 1].payload)
                run, submit = (self.device.prepare_submit(self.command, self.buffers, size=end - start, offset=start,
                                                          wait=wait, priority=priority, timeout_ms=timeout_ms,
                                                          profile=profile)
                               for wait in (True, False))
            job = RepeatedJob(self.command.address + start, end - start, timeout_ms) if tasks else None
            self._segments.append(_Segment(run, submit, tasks.start, steps, start, end - start, job, timeout_ms))

    def _on_queue(self, wait: bool, segment: _Segment) -> QueueFence | None:
        return (None if self._queue_job is None
                else self._queue_job(wait, segment.offset, segment.size, segment.timeout_ms))

    def _run_on_queue(self, segment: _Segment) -> QueueFence | None:
        """The partition's job run to its end on a user queue: again on the one it last ran on
        (one C call, the wait hinted by the partition's own expected time, as a whole model's
        job is: a wait that spins burns a CPU the chip's cores need), else on one the request
        finds; None when there is none."""
        job = None if self.profiled else segment.job
        fence = job.run() if job is not None else None
        if fence is None:
            fence = self._on_queue(True, segment)
            if fence is not None and job is not None and fence.queue.native:
                job.queue = fence.queue
        return fence

    def run(self) -> tuple[int, Parts]:
        """One inference, to its end: the jobs' device time (ns) and, when profiled, its parts."""
        device_ns = 0
        parts: Parts = []
        for segment in self._segments:
            if segment.run is not None:
                try:
                    self.fence = self._run_on_queue(segment) or self.device.run_prepared(segment.run)
                except JobError as error:
                    raise name_failed_task(error, self.loadable, segment.first_task) from None
                device_ns += self.fence.device_time_ns
                self._chip_part(self.fence, segment, parts)
            for step in segment.steps:
                self._run_host_step(step, parts)
        return device_ns, parts

    async def run_async(self) -> tuple[int, Parts]:
        """``run`` for asyncio and trio: the event loop keeps running while the chip and the host work."""
        import anyio  # only async programs call this: a plain `import libnpu` does not load anyio
        device_ns = 0
        parts: Parts = []
        for segment in self._segments:
            if segment.submit is not None:
                fence = self._on_queue(False, segment) or self.device.submit_prepared(segment.submit)
                try:
                    await fence.wait_async()
                except JobError as error:
                    raise name_failed_task(error, self.loadable, segment.first_task) from None
                self.fence, device_ns = fence, device_ns + fence.device_time_ns
                self._chip_part(fence, segment, parts)
            for step in segment.steps:
                await anyio.to_thread.run_sync(self._run_host_step, step, parts)
        return device_ns, parts

    def _run_host_step(self, step: HostStep, parts: Parts) -> None:
        started = time.monotonic_ns()
        self._host[id(step)]()
        if self.profiled:
            parts.append(HostPart(step.after_task, step.name, step.op, started, time.monotonic_ns(), step.source))

    def _chip_part(self, fence: Fence | QueueFence, segment: _Segment, parts: Parts) -> None:
        if self.profiled:
            parts.append(ChipPart(self.device.get_profile(fence), segment.first_task))
