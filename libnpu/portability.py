"""The portability layer: sessions, devices, memory, submission, fences.

It mirrors NVDLA's (NvDlaInitialize / Destroy / Open / Close / AllocMem /
FreeMem / Submit / DebugPrintf) in Python form::

    import libnpu
    with libnpu.initialize() as session:
        dev = session.open(0)
        src, dst = dev.alloc_mem(4096), dev.alloc_mem(4096)
        src.view[:] = 7
        cmds = dev.command_buffer()
        cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=4096)
        dev.submit(cmds, buffers=[src, dst]).wait()

Everything goes through the device node and the uapi; nothing here knows how
the driver or the chip work inside.
"""
from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kmd_fuse import uapi
from kmd_fuse.uapi import NpuError, sysfs_layout
from libnpu import properties
from libnpu.errors import JobError
from libnpu.transport import BufferSocket, DeviceFile, DriverGone
from libnpu.user_queue import QueueFence, UserQueue
from libnpu.visible_devices import node_number, visible_devices
from npu_hw import queues as queue_spec
from npu_hw import tasks as task_spec

log = logging.getLogger("libnpu")

MEM_READ, MEM_WRITE, MEM_RW = uapi.NPU_MEM_READ, uapi.NPU_MEM_WRITE, uapi.NPU_MEM_RW
PRIO_LOW, PRIO_NORMAL, PRIO_HIGH = uapi.NPU_PRIO_LOW, uapi.NPU_PRIO_NORMAL, uapi.NPU_PRIO_HIGH
QUEUE_RETRY_S = 1.0     # a device that could not give the runtime a user queue is asked again after this


def _fields(reply) -> list[str]:
    """A reply struct's fields that carry facts (not its pad and reserved space)."""
    return [name for name in dir(reply) if name != "pad" and not name.startswith("reserved")]


def default_devroot() -> Path:
    """$NPU_DEVROOT, else /dev (the driver's rule: kmd_fuse.uapi.sysfs_layout)."""
    return sysfs_layout.devroot()


def debug_print(fmt: str, *args) -> None:
    """NvDlaDebugPrintf: debug output through the logging module."""
    log.debug(fmt, *args)


class Memory:
    """A device buffer mapped into this process (zero copy).

    ``view`` is a writable uint8 numpy array over the same pages the chip
    reads and writes; ``address`` is the buffer's device address.  The mapping
    comes from the buffer's sealed memfd (``fd``, closed once mapped)."""

    def __init__(self, device: Device, handle: int, size: int, address: int, fd: int, flags: int):
        self.device, self.handle, self.size, self.address, self.flags = device, handle, size, address, flags
        self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.view = np.frombuffer(self._map, dtype=np.uint8)
        self.freed = False

    def array(self, dtype, shape, offset: int = 0) -> np.ndarray:
        """A typed numpy view of part of the buffer."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if offset < 0 or offset + count * dtype.itemsize > self.size:
            raise ValueError(f"{count} x {dtype} at offset {offset} does not fit in {self.size} bytes")
        return self.view[offset:offset + count * dtype.itemsize].view(dtype).reshape(shape)

    def _unmap(self) -> None:
        # No view once freed: a use after free fails at once instead of touching stale pages.
        self.view = None  # type: ignore[assignment]
        try:
            self._map.close()
        except BufferError:
            pass   # numpy views still refer to it; unmapped when they go away

    def __repr__(self) -> str:
        return f"<Memory handle={self.handle} size={self.size} address={self.address:#x}>"


class CommandBuffer:
    """Task descriptors built in device memory, ready to submit."""

    def __init__(self, device: Device, capacity: int = 4096):
        self.memory = device.alloc_mem(capacity, MEM_READ)
        self.used = 0

    def add(self, task: str, flags: int = 0, **fields) -> None:
        """Append one task descriptor (see npu_hw/tasks.py for the fields)."""
        blob = task_spec.encode_task(task, flags, **fields)
        if self.used + len(blob) > self.memory.size:
            raise ValueError(f"command buffer full ({self.memory.size} bytes)")
        self.memory.view[self.used:self.used + len(blob)] = np.frombuffer(blob, np.uint8)
        self.used += len(blob)

    def clear(self) -> None:
        self.used = 0

    @property
    def address(self) -> int:
        return self.memory.address


class Fence:
    """The completion of one submitted job."""

    def __init__(self, device: Device, fence_id: int):
        self.device, self.id = device, fence_id
        self.status: int | None = None        # 0 or -errno once signalled
        self.device_time_ns = 0

    def wait(self, timeout: float | None = None) -> Fence:
        """Block until the job is done; raises JobError if it failed, TimeoutError on timeout."""
        self.device.wait([self], timeout=timeout)
        if self.status:
            raise JobError(-self.status, "job", f"fence {self.id} failed")
        return self

    async def wait_async(self, timeout: float | None = None) -> Fence:
        """``wait`` for asyncio and trio programs: the event loop keeps running meanwhile."""
        import anyio  # only async programs call this: a plain `import libnpu` does not load anyio
        return await anyio.to_thread.run_sync(self.wait, timeout)

    @property
    def signalled(self) -> bool:
        if self.status is None:
            self.device.wait([self], timeout=0, raise_on_timeout=False)
        return self.status is not None

    def __repr__(self) -> str:
        return f"<Fence {self.id} status={self.status}>"


@dataclass(frozen=True)
class TaskTiming:
    """One task of a profiled job, as the chip timed it (GET_PROFILE)."""
    index: int
    opcode: int
    cycles: int
    start_ns: int
    end_ns: int
    core: int = -1        # the core it ran on (a task graph's may differ from the job's; ABI 2.7)


@dataclass(frozen=True)
class JobTiming:
    """A profiled job (GET_PROFILE): CLOCK_MONOTONIC times, simulated cycles, its tasks."""
    fence: int
    core: int
    status: int
    complete: bool            # every task's record arrived
    submit_ns: int
    start_ns: int
    end_ns: int               # execution ended (before any pacing)
    signal_ns: int
    cycles: int
    device_time_ns: int
    tasks: list[TaskTiming]

    @property
    def queue_ns(self) -> int:
        """From the driver accepting the job to a core starting it (0 for a user-queue job)."""
        return max(0, self.start_ns - self.submit_ns)

    @property
    def via_queue(self) -> bool:
        """A user-queue job (its fence is a queue fence): no driver between client and core."""
        return bool(self.fence & uapi.NPU_QUEUE_FENCE_BIT)


def _job_span(commands: CommandBuffer | Memory | None, size: int | None, offset: int) -> tuple[int, int]:
    """(device address, size) of a job's task descriptors: a command buffer's used bytes,
    a buffer's bytes from ``offset`` (``size`` of them when given), none for ``None``."""
    if isinstance(commands, CommandBuffer):
        return commands.address, commands.used if size is None else size
    if isinstance(commands, Memory):
        return commands.address + offset, commands.size - offset if size is None else size
    return 0, 0


@dataclass(frozen=True)
class PreparedSubmit:
    """A SUBMIT request built once (``Device.prepare_submit``) and sent as often as
    wanted (``Device.submit_prepared`` / ``run_prepared``): same command buffer,
    same buffers, new inputs.  The driver checks it in full every time."""
    body: bytes
    wait: bool


class Device:
    """An open device instance (one driver context).  Thread-safe."""

    def __init__(self, path: Path, instance: int):
        self.path, self.instance = path, instance
        self.file = DeviceFile(path)
        self.buffer_socket = BufferSocket()
        self._lock = threading.Lock()
        self.buffers: dict[int, Memory] = {}
        self.settings = properties.defaults()    # the writable properties; models loaded here start with them
        self.queues: list[UserQueue] = []        # user queues created here (closed with the device)
        self._shared_queues: dict[int, list[UserQueue]] = {}   # priority -> the runtime's queues (shared_queue)
        self._futex_wakeups: bool | None = None    # the chip wakes queue waiters by futex (_queue_futex)
        self._num_cores = 0
        self.use_queues = True                   # False: the runtime submits through the driver (SUBMIT)
        self._queue_retry_at: dict[int, float] = {}

    # ---- properties (OpenVINO's names: libnpu.properties) ----
    def get_property(self, name: str) -> Any:
        """One property by OpenVINO key ("DEVICE_UUID", "PERFORMANCE_HINT"...) or JSON name;
        KeyError for an unknown name."""
        return properties.value(self.settings, lambda: properties.device_facts(self), name, model=False)

    def set_property(self, values: Mapping[str, Any]) -> None:
        """Set writable properties (all or none): KeyError for an unknown name,
        PropertyError for a read-only one, ValueError for a bad value."""
        self.settings.update(properties.checked(values, model=False))
        properties.apply_log_level(self.settings)

    def properties(self) -> dict[str, Any]:
        """Every property, by JSON name."""
        return properties.snapshot(self.settings, self, model=False)

    # ---- queries ----
    def info(self) -> dict:
        """Device description (GET_INFO) as a dict."""
        reply = self.file.request(uapi.NPU_CMD_GET_INFO)
        info = {name: getattr(reply, name) for name in _fields(reply) if name != "model"}
        info["model"] = uapi.c_string(reply.model)
        return info

    def stats(self) -> dict:
        """This context's statistics (GET_STATS) as a dict."""
        reply = self.file.request(uapi.NPU_CMD_GET_STATS)
        return {name: getattr(reply, name) for name in _fields(reply)}

    def param(self, param: int | str) -> int:
        """One device fact (GET_PARAM): an NPU_PARAM_* id, or its name ("MAX_JOB_TIMEOUT_MS").

        A driver that does not know the parameter answers EINVAL (NpuError)."""
        if isinstance(param, str):
            try:
                param = uapi.CONSTANTS[f"NPU_PARAM_{param.upper()}"]
            except KeyError:
                raise ValueError(f"no parameter {param!r} in npu_uapi.h") from None
        req = uapi.new_payload(uapi.NPU_CMD_GET_PARAM)
        req.param = param
        return self.file.request(uapi.NPU_CMD_GET_PARAM, req).value

    # ---- memory ----
    def alloc_mem(self, nbytes: int, flags: int = MEM_RW) -> Memory:
        """Allocate device memory and map it here (NvDlaAllocMem)."""
        req = uapi.new_payload(uapi.NPU_CMD_MEM_ALLOC)
        req.size, req.flags = nbytes, flags
        reply = self.file.request(uapi.NPU_CMD_MEM_ALLOC, req)
        try:
            fd, size = self.buffer_fd(reply.handle)
            try:
                memory = Memory(self, reply.handle, size, reply.iova, fd, flags)
            finally:
                os.close(fd)
        except BaseException:
            self._free_handle(reply.handle)
            raise
        with self._lock:
            self.buffers[memory.handle] = memory
        debug_print("alloc_mem %d bytes -> handle %d at %#x", nbytes, memory.handle, memory.address)
        return memory

    def buffer_fd(self, handle: int) -> tuple[int, int]:
        """(descriptor, size) of a buffer of this context: MEM_MAP, then the hand-over.

        The descriptor is a new one (the caller closes it) of a sealed memfd: it
        maps the same pages as every other mapping of the buffer and cannot be
        resized or linked; pass it to another process or API as a dma-buf's."""
        req = uapi.new_payload(uapi.NPU_CMD_MEM_MAP)
        req.handle = handle
        mapping = self.file.request(uapi.NPU_CMD_MEM_MAP, req)
        fd, size = self.buffer_socket.receive(uapi.c_string(mapping.socket_path), mapping.token)
        if size != mapping.size:
            os.close(fd)
            raise NpuError(errno.EPROTO, "MEM_MAP", f"hand-over gave {size} bytes, MEM_MAP said {mapping.size}")
        return fd, size

    def free_mem(self, memory: Memory) -> None:
        """Free device memory (NvDlaFreeMem); a second free raises ENOENT. Once the driver
        is gone the memory went with it: the free only unmaps it here."""
        if memory.freed:
            raise NpuError(errno.ENOENT, "MEM_FREE", f"buffer {memory.handle} was already freed")
        self._free_handle(memory.handle)
        memory.freed = True
        with self._lock:
            self.buffers.pop(memory.handle, None)
        memory._unmap()

    def _free_handle(self, handle: int) -> None:
        req = uapi.new_payload(uapi.NPU_CMD_MEM_FREE)
        req.handle = handle
        self._give_back(uapi.NPU_CMD_MEM_FREE, req)

    def _give_back(self, cmd: int, req: Any) -> None:
        """A request that gives something back to the driver (MEM_FREE, QUEUE_DESTROY): a
        driver that is gone took everything of the context along, so it has nothing to do
        (teardown after the driver stopped ends quietly, as close() does)."""
        try:
            self.file.request(cmd, req)
        except DriverGone:
            pass

    def command_buffer(self, capacity: int = 4096) -> CommandBuffer:
        return CommandBuffer(self, capacity)

    # ---- jobs ----
    def submit(self, commands: CommandBuffer | Memory | None, buffers: Iterable[Memory] = (), *,
               size: int | None = None, offset: int = 0, priority: int = PRIO_NORMAL,
               timeout_ms: int = 0, wait: bool = False) -> Fence:
        """Queue a job (NvDlaSubmit) and return its fence at once.

        ``buffers`` lists every buffer the tasks touch; the command buffer is
        added automatically.  ``commands=None`` submits an empty job.  With
        ``wait=True`` the reply comes when the job is done (see ``run``)."""
        return self.submit_prepared(self.prepare_submit(commands, buffers, size=size, offset=offset,
                                                        priority=priority, timeout_ms=timeout_ms, wait=wait))

    def prepare_submit(self, commands: CommandBuffer | Memory | None, buffers: Iterable[Memory] = (), *,
                       size: int | None = None, offset: int = 0, priority: int = PRIO_NORMAL,
                       timeout_ms: int = 0, wait: bool = False, profile: bool = False) -> PreparedSubmit:
        """The SUBMIT request ``submit`` would send, to send later (any number of times)."""
        req = uapi.new_payload(uapi.NPU_CMD_SUBMIT)
        req.cmd_iova, req.cmd_size = _job_span(commands, size, offset)
        handles: list[int] = []
        if isinstance(commands, CommandBuffer):
            handles.append(commands.memory.handle)
        elif isinstance(commands, Memory):
            handles.append(commands.handle)
        for memory in buffers:
            if memory.handle not in handles:
                handles.append(memory.handle)
        if len(handles) > uapi.NPU_MAX_SUBMIT_BOS:
            raise NpuError(errno.E2BIG, "SUBMIT", f"{len(handles)} buffers, at most {uapi.NPU_MAX_SUBMIT_BOS}")
        req.num_bos = len(handles)
        for i, handle in enumerate(handles):
            req.bo_handles[i] = handle
        req.priority, req.timeout_ms = priority, timeout_ms
        req.flags = (uapi.NPU_SUBMIT_WAIT if wait else 0) | (uapi.NPU_SUBMIT_PROFILE if profile else 0)
        return PreparedSubmit(uapi.ffi.buffer(req)[:], wait)

    def submit_batch(self, jobs: Sequence[PreparedSubmit]) -> list[Fence]:
        """Queue several prepared jobs in one request (SUBMIT_BATCH, ABI 2.2), in order;
        returns their fences at once (wait for them with ``wait``). All or nothing: if
        the driver refuses one job, none is queued (NpuError with that job's errno).
        Jobs prepared with ``wait=True`` cannot be batched (wait on the fences instead).
        More than NPU_MAX_BATCH_JOBS (8) jobs go as several requests."""
        fences: list[Fence] = []
        for start in range(0, len(jobs), uapi.NPU_MAX_BATCH_JOBS):
            chunk = jobs[start:start + uapi.NPU_MAX_BATCH_JOBS]
            batch = uapi.new_payload(uapi.NPU_CMD_SUBMIT_BATCH)
            batch.count = len(chunk)
            for i, prepared in enumerate(chunk):
                if prepared.wait:
                    raise ValueError("a job prepared with wait=True cannot be batched")
                uapi.ffi.memmove(uapi.ffi.addressof(batch.jobs[i]), prepared.body, len(prepared.body))
            reply = self.file.request(uapi.NPU_CMD_SUBMIT_BATCH, batch)
            fences += [Fence(self, reply.jobs[i].fence) for i in range(len(chunk))]
        return fences

    def submit_prepared(self, prepared: PreparedSubmit) -> Fence:
        """Send a prepared SUBMIT; returns its fence (signalled already if it waited)."""
        reply = self.file.request_body(uapi.NPU_CMD_SUBMIT, prepared.body)
        fence = Fence(self, reply.fence)
        if prepared.wait:
            fence.status, fence.device_time_ns = reply.status, reply.device_time_ns
        return fence

    def run(self, commands: CommandBuffer | Memory | None, buffers: Iterable[Memory] = (), **options) -> Fence:
        """Submit a job and wait for it in one round trip; raises JobError if it failed."""
        return self.run_prepared(self.prepare_submit(commands, buffers, wait=True, **options))

    def run_prepared(self, prepared: PreparedSubmit) -> Fence:
        """``run`` for a request from ``prepare_submit(..., wait=True)``."""
        if not prepared.wait:
            raise ValueError("run_prepared needs a request prepared with wait=True")
        fence = self.submit_prepared(prepared)
        if fence.status:
            raise JobError(-fence.status, "job", f"fence {fence.id} failed")
        return fence

    def wait(self, fences: Sequence[Fence | QueueFence], timeout: float | None = None, wait_any: bool = False,
             raise_on_timeout: bool = True) -> int:
        """Wait for fences (all, or any); returns how many have signalled.

        Fills each fence's ``status`` and ``device_time_ns``.  Job failures are
        reported in the statuses, not raised; a timeout raises TimeoutError
        unless ``raise_on_timeout`` is false.  Other threads keep using the
        device meanwhile.  User-queue fences (``QueueFence``, from ``start`` of a
        request too) may be among them: they are waited for here, not by the driver."""
        fences = list(fences)
        if not 1 <= len(fences) <= uapi.NPU_MAX_WAIT_FENCES:
            raise ValueError(f"wait takes 1..{uapi.NPU_MAX_WAIT_FENCES} fences")
        if any(isinstance(fence, QueueFence) for fence in fences):
            return self._wait_mixed(fences, timeout, wait_any, raise_on_timeout)
        req = uapi.new_payload(uapi.NPU_CMD_WAIT)
        req.count = len(fences)
        req.flags = uapi.NPU_WAIT_ANY if wait_any else uapi.NPU_WAIT_ALL
        req.timeout_ns = -1 if timeout is None else int(timeout * 1e9)
        for i, fence in enumerate(fences):
            req.fences[i] = fence.id
        try:
            reply, timed_out = self.file.request(uapi.NPU_CMD_WAIT, req), False
        except NpuError as exc:
            if exc.errno != errno.ETIMEDOUT or exc.payload is None:
                raise
            reply, timed_out = exc.payload, True
        for i, fence in enumerate(fences):
            if reply.status[i] != uapi.NPU_FENCE_PENDING:
                fence.status, fence.device_time_ns = reply.status[i], reply.device_time_ns[i]
        if timed_out and raise_on_timeout:
            raise TimeoutError(f"{len(fences) - reply.signaled} fence(s) not signalled after {timeout} s")
        return reply.signaled

    def _wait_mixed(self, fences: list[Fence | QueueFence], timeout: float | None, wait_any: bool,
                    raise_on_timeout: bool) -> int:
        """``wait`` with user-queue fences among them: ALL waits for each in turn; ANY polls
        (a queue's completions need no request to the driver to be seen)."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        def signalled() -> int:
            driver = [f for f in fences if isinstance(f, Fence) and f.status is None]
            if driver:
                self.wait(driver, timeout=0, raise_on_timeout=False)
            return sum(f.signalled for f in fences)

        try:
            if wait_any:
                while not signalled():
                    remaining = left()
                    if remaining == 0:
                        raise TimeoutError(f"none of {len(fences)} fence(s) signalled after {timeout} s")
                    time.sleep(0.0005)
            else:
                for fence in fences:
                    if isinstance(fence, QueueFence):
                        fence.queue.wait(fence, left())
                driver = [f for f in fences if isinstance(f, Fence)]
                if driver:
                    self.wait(driver, timeout=left())
        except TimeoutError:
            if raise_on_timeout:
                raise
        return signalled()

    async def run_async(self, commands: CommandBuffer | Memory | None, buffers: Iterable[Memory] = (),
                        **options) -> Fence:
        """``run`` for asyncio and trio programs (the blocking round trip happens in a worker thread)."""
        import anyio  # only async programs call this: a plain `import libnpu` does not load anyio
        return await anyio.to_thread.run_sync(lambda: self.run(commands, buffers, **options))

    def get_profile(self, fence: Fence | QueueFence | int) -> JobTiming:
        """How the chip spent a finished job submitted with ``profile=True`` (GET_PROFILE),
        through SUBMIT or a user queue: per task its opcode, simulated cycles and
        CLOCK_MONOTONIC start/end; for the job when the driver took it (a queue job: when its
        core took the entry), when a core started and finished it, when its fence signalled.
        ENOENT (NpuError) for a job not profiled or long forgotten, or whose queue is gone."""
        if isinstance(fence, QueueFence):
            fence_id = queue_spec.user_job_id(fence.queue.id, fence.id)
        else:
            fence_id = fence.id if isinstance(fence, Fence) else fence
        records: list[TaskTiming] = []
        while True:
            req = uapi.new_payload(uapi.NPU_CMD_GET_PROFILE)
            req.fence, req.first = fence_id, len(records)
            reply = self.file.request(uapi.NPU_CMD_GET_PROFILE, req)
            records += [TaskTiming(t.index, t.opcode, t.cycles, t.start_ns, t.end_ns, t.core)
                        for t in (reply.tasks[i] for i in range(reply.count))]
            if reply.count == 0 or len(records) >= reply.num_tasks:
                break
        return JobTiming(fence_id, reply.core, reply.status, bool(reply.complete), reply.submit_ns, reply.start_ns,
                         reply.end_ns, reply.signal_ns, reply.cycles, reply.device_time_ns, records)

    # ---- user-mode submission queues (ABI 2.4) ----
    def create_queue(self, entries: int = 0, priority: int = PRIO_NORMAL) -> UserQueue:
        """A user-mode submission queue of this context (QUEUE_CREATE): jobs submitted on it
        go to the chip and their completions come back without a request to the driver.
        NpuError: ENOTTY from a driver without queues, EMFILE past the context's or the
        user's limit, ENOSPC when the chip serves as many queues as it can."""
        req = uapi.new_payload(uapi.NPU_CMD_QUEUE_CREATE)
        req.entries, req.priority = entries, priority
        reply = self.file.request(uapi.NPU_CMD_QUEUE_CREATE, req)
        path = uapi.c_string(reply.socket_path)
        fds: list[int] = []
        try:
            for token in (reply.memory_token, reply.doorbell_token, reply.completion_token):
                fds.append(self.buffer_socket.receive(path, token)[0])
            queue = UserQueue(fds[0], reply.size, fds[1], fds[2], queue_id=reply.queue_id, entries=reply.entries,
                              iova=reply.iova, core=reply.core, timeout_cap_ms=reply.timeout_cap_ms,
                              futex=self._queue_futex())
            queue.destroyer, queue.node = self._destroy_queue, self.file.path
        except BaseException:
            for fd in fds[1:]:
                os.close(fd)
            raise
        finally:
            if fds:
                os.close(fds[0])      # the mapping keeps the memory
        with self._lock:
            self.queues.append(queue)
        return queue

    def _queue_futex(self) -> bool:
        """Whether the chip wakes a queue's waiter by futex (ABI 2.8; asked once per device)."""
        if self._futex_wakeups is None:
            try:
                wakeups = self.param("QUEUE_WAKEUPS")
            except NpuError:                      # a driver before 2.8: the completion line only
                wakeups = uapi.NPU_QUEUE_WAIT_LINE
            self._futex_wakeups = bool(wakeups & uapi.NPU_QUEUE_WAIT_FUTEX)
        return self._futex_wakeups

    def _destroy_queue(self, queue: UserQueue, cancel: bool) -> None:
        """QUEUE_DESTROY (``UserQueue.close``); a queue a reset or the driver already
        stopped (ENOENT with an error in its header), or whose driver is gone, is simply gone."""
        req = uapi.new_payload(uapi.NPU_CMD_QUEUE_DESTROY)
        req.queue_id = queue.id
        req.flags = uapi.NPU_QUEUE_DESTROY_CANCEL if cancel else 0
        try:
            self._give_back(uapi.NPU_CMD_QUEUE_DESTROY, req)
        except NpuError as exc:
            if not (exc.errno == errno.ENOENT and queue.error()):
                raise
        with self._lock:
            if queue in self.queues:
                self.queues.remove(queue)
            for held in self._shared_queues.values():
                if queue in held:
                    held.remove(queue)

    def shared_queue(self, priority: int = PRIO_NORMAL) -> UserQueue | None:
        """A user queue of ``priority`` for the runtime's jobs: an idle one of those made here,
        else a new one while there are fewer than cores (the driver puts each on the core
        serving fewest, so threads inferring at once use every core), else the least busy.
        None when the device offers none (a driver before ABI 2.4, a limit reached: asked
        again after QUEUE_RETRY_S): the caller then submits through the driver."""
        if not self.use_queues:
            return None
        with self._lock:
            held = self._shared_queues.setdefault(priority, [])
            for stopped in [q for q in held if q.closed or q.error()]:   # a reset stopped it: make a new one
                held.remove(stopped)
                stopped.release()
                if stopped in self.queues:
                    self.queues.remove(stopped)
            idle = next((q for q in held if not q.in_flight()), None)
            if idle is not None:
                return idle
            if len(held) >= self._cores() or time.monotonic() < self._queue_retry_at.get(priority, 0.0):
                return min(held, key=UserQueue.in_flight) if held else None
        try:
            queue = self.create_queue(priority=priority)
        except NpuError as exc:
            log.debug("no user queue (%s): jobs go through SUBMIT", exc)
            with self._lock:
                self._queue_retry_at[priority] = time.monotonic() + QUEUE_RETRY_S
                return min(held, key=UserQueue.in_flight) if held else None
        with self._lock:
            held.append(queue)
        return queue

    def _cores(self) -> int:
        if not self._num_cores:
            self._num_cores = self.param("NUM_CORES")
        return self._num_cores

    def queue_submit(self, queue: UserQueue, commands: CommandBuffer | Memory | None, *, size: int | None = None,
                     offset: int = 0, timeout_ms: int = 0, profile: bool = False) -> QueueFence:
        """``submit`` on a user queue: the command buffer as ``submit`` takes it (no buffer
        list: the chip's IOMMU checks every access in this context's address space).
        ``profile``: the chip times the job's tasks (``get_profile(fence)`` once it is done)."""
        return queue.submit(*_job_span(commands, size, offset), timeout_ms,
                            queue_spec.ENTRY_PROFILE if profile else 0)

    def queue_run(self, queue: UserQueue, commands: CommandBuffer | Memory | None, *, size: int | None = None,
                  offset: int = 0, timeout_ms: int = 0, timeout: float | None = None) -> QueueFence:
        """``queue_submit`` and wait, in one call into the queue's C client: raises JobError
        if the job failed, TimeoutError after ``timeout`` seconds (the job stays queued)."""
        return queue.run(*_job_span(commands, size, offset), timeout_ms, timeout)

    def reset(self) -> int:
        """Reset the device (root only); returns the reset count."""
        return self.file.request(uapi.NPU_CMD_RESET).reset_count

    def close(self) -> None:
        """Close the instance (NvDlaClose); the driver frees what it still holds."""
        for memory in list(self.buffers.values()):
            memory._unmap()
        self.buffers.clear()
        for queue in self.queues:
            queue.release()          # the driver destroys them with the context
        self.queues.clear()
        self._shared_queues.clear()
        self.buffer_socket.close()
        self.file.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Session:
    """A libnpu session (NvDlaInitialize ... NvDlaDestroy): owns opened devices."""

    def __init__(self, devroot: str | os.PathLike | None = None):
        self.devroot = Path(devroot) if devroot else default_devroot()
        self.devices: list[Device] = []

    def device_count(self) -> int:
        """The devices this program sees: the nodes present, or those of them
        NPU_VISIBLE_DEVICES lists (``libnpu.visible_devices``)."""
        present = {int(p.name[3:]) for p in self.devroot.glob("npu[0-9]*") if p.name[3:].isdigit()}
        visible = visible_devices()
        return len(present) if visible is None else sum(1 for n in visible if n in present)

    def open(self, instance: int | None = None, devroot: str | os.PathLike | None = None) -> Device:
        """Open visible device ``instance`` (NvDlaOpen); None: $NPU_DEVICE, else 0. The index
        counts in NPU_VISIBLE_DEVICES' list when it is set (``libnpu.visible_devices``)."""
        return self.open_node(node_number(instance), devroot)

    def open_node(self, number: int, devroot: str | os.PathLike | None = None) -> Device:
        """Open node ``npu<number>`` whatever NPU_VISIBLE_DEVICES says (tools that describe
        every device the driver serves: ``npu info``, ``npu doctor``)."""
        path = Path(devroot or self.devroot) / f"npu{number}"
        device = Device(path, number)
        self.devices.append(device)
        debug_print("opened %s", path)
        return device

    def close(self, device: Device) -> None:
        device.close()
        if device in self.devices:
            self.devices.remove(device)

    def destroy(self) -> None:
        for device in list(self.devices):
            self.close(device)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()


def initialize(devroot: str | os.PathLike | None = None) -> Session:
    """Start a session (NvDlaInitialize)."""
    return Session(devroot)
