"""Load a model and infer, OpenVINO-style: ``load``, ``CompiledModel``, ``InferRequest``, ``VariableState``.

``libnpu.load(model)`` returns a ``CompiledModel`` with ``infer(inputs)``, asyncio's and trio's
``await infer_async(inputs)``, request pools (:mod:`libnpu.pool`) and ``InferRequest``
objects (``start``, ``wait``, a completion callback) so several inferences can be in
flight at once.  The model's weights are loaded once through NVDLA's level underneath
(:class:`libnpu.nvdla_runtime.Runtime`), read-only and shared by every request;
activations, inputs, outputs and variables are per request, so requests never share
scratch memory.

One inference is one job: the model's task list, relocated to the addresses of that
request's memory, in one command buffer.  It goes on a user queue of the device
(``Device.shared_queue``: no request to the driver per job) for ``infer``, ``start`` and
``infer_async`` alike, PERF_COUNT and the partitions of a model with host steps included,
and through SUBMIT when no queue can be had.  A model with host steps runs through the
request's :class:`libnpu.partitions.PartitionRunner`.

A stateful model (TFLite resource variables, ONNX state pairs) keeps its variables in
device memory of each request: the job reads them in place and writes their new values
back at its end, so nothing crosses to the host between calls.  As in OpenVINO,
``InferRequest.query_state()`` lists them (``VariableState``: name, value, ``reset``)
and ``reset_state()`` puts every one back to its initial value.
"""
from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kmd_fuse.uapi import NpuError
from libnpu import job_timeouts, properties
from libnpu.errors import ClosedError, InputError, JobError
from libnpu.job_faults import name_failed_task
from libnpu.loadable import MAGIC as LOADABLE_MAGIC
from libnpu.loadable import Loadable, TensorDesc
from libnpu.nvdla_runtime import Runtime
from libnpu.openvino_request import OpenVinoRequestNames
from libnpu.partitions import PartitionRunner, host_kernels
from libnpu.pool import ErrorCallback, FinishCallback, OutputCallback, RequestPool
from libnpu.portability import MEM_READ, MEM_RW, Device, Fence, Memory, Session
from libnpu.profiling import ChipPart, HostPart, InferenceProfile, Timing
from libnpu.tensors import Inputs, as_input, dequantize, tensor_view
from libnpu.user_queue import QueueFence, RepeatedJob
from libnpu.variable_state import VariableState
from npu_hw import queues as queue_spec


class InferRequest(OpenVinoRequestNames):
    """One inference's memory and job: fill inputs, ``start``, ``wait``, read outputs (also by
    OpenVINO's names: ``start_async``, ``set_callback``, ``get_profiling_info``)."""

    def __init__(self, model: CompiledModel):
        self.model = model
        self._released = False
        device, loadable = model.device, model.loadable
        self.memory: dict[int, Memory] = {}
        self.command: Memory | None = None
        try:
            for i, region in enumerate(loadable.regions):
                if i not in model.runtime.weights:
                    self.memory[i] = device.alloc_mem(max(region.size, 1), MEM_RW)
            bases = model.runtime.region_bases({i: m.address for i, m in self.memory.items()})
            model.runtime.write_images(self.memory, bases)
            commands = loadable.command_buffer(bases, cores=model.job_cores)
            self.command = device.alloc_mem(max(len(commands), 8), MEM_READ)
        except BaseException:
            self._free_memory()        # e.g. ENOMEM half way: give back what was allocated
            raise
        self.command.view[:len(commands)] = np.frombuffer(commands, np.uint8)
        self.command_size = len(commands)
        self.buffers = [*model.runtime.weights.values(), *self.memory.values()]
        # A partitioned model (host steps): one job per chip partition, the host steps in between.
        self._partitions: PartitionRunner | None = None
        if loadable.host_steps:
            self._partitions = PartitionRunner(device, loadable, model.host_kernels, self.command, self.buffers,
                                               self._view, self._on_queue, model.timeout_limits)
            self._partitions.prepare(model.priority, model.profiling)
        self._error: Exception | None = None      # a partitioned start's failure, for wait() (no callback)
        self._raise_on_wait = False
        # Built once: the tensors' views into this request's memory and the SUBMIT
        # request itself (same command buffer and buffers every time; only the
        # inputs change between inferences).
        self._inputs = [(desc, self._view(desc)) for desc in loadable.inputs()]
        self._outputs = [(desc, self._view(desc)) for desc in loadable.outputs()]
        self._states = [VariableState(self, desc, self._view(desc)) for desc in loadable.states()]
        self._job = RepeatedJob(self.command.address, self.command_size,   # on its queue again: _run_sync
                                model.job_timeout_ms)
        self._prepare(model.priority, model.profiling)
        self.fence: Fence | QueueFence | None = None
        self.timing = Timing()
        self.profile: InferenceProfile | None = None   # the last inference's per-layer profile (PERF_COUNT)
        self._started = 0.0
        self._waiter: threading.Thread | None = None
        self._busy = False                  # infer / run_sync / start under way in some thread
        self._claim_lock = threading.Lock()

    def _prepare(self, priority: int, profile: bool) -> None:
        device = self.model.device
        self._priority, self._profiled = priority, profile
        self._job.queue = None               # a queue of the new priority next time
        timeout_ms = self.model.job_timeout_ms
        self._run = device.prepare_submit(self.command, self.buffers, size=self.command_size, wait=True,
                                          priority=priority, timeout_ms=timeout_ms, profile=profile)
        self._submit = device.prepare_submit(self.command, self.buffers, size=self.command_size, priority=priority,
                                             timeout_ms=timeout_ms, profile=profile)

    @property
    def partitioned(self) -> bool:
        """The model has host steps: its inference runs through the partition runner."""
        return self._partitions is not None

    def _follow_settings(self) -> None:
        """MODEL_PRIORITY and PERF_COUNT may change between inferences: rebuild the SUBMITs when they did."""
        if (self.model.priority, self.model.profiling) != (self._priority, self._profiled):
            self._prepare(self.model.priority, self.model.profiling)
            if self._partitions is not None:
                self._partitions.prepare(self.model.priority, self.model.profiling)

    def _collect_profile(self) -> None:
        """PERF_COUNT: the chip's per-layer timing of the job just finished."""
        fence = self.fence
        if self._profiled and fence is not None:      # through SUBMIT or a user queue alike
            self.profile = InferenceProfile.from_job(self.model.loadable, self.model.device.get_profile(fence),
                                                     self.model.clock_mhz)

    def _view(self, desc: TensorDesc) -> np.ndarray:
        return tensor_view(self.memory[desc.region].view, desc, desc.offset)

    def _check_usable(self) -> None:
        if self._released:
            why = "its model was closed" if self.model.closed else "it was released"
            raise ClosedError(f"this request of model {self.model.loadable.name!r} cannot be used: {why}")

    def set_inputs(self, inputs: Inputs) -> None:
        self._check_usable()
        slots = self._inputs
        if isinstance(inputs, Mapping):
            missing = [d.name for d, _ in slots if d.name not in inputs]
            if missing:
                raise InputError(f"missing inputs {missing} (the model takes {[d.name for d, _ in slots]})")
            arrays = [inputs[d.name] for d, _ in slots]
        else:
            # one array for a one-input model, as OpenVINO takes it (not iterated along its batch axis)
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(arrays) != len(slots):
                raise InputError(f"model takes {len(slots)} inputs, got {len(arrays)}")
        for (desc, view), array in zip(slots, arrays):
            if type(array) is np.ndarray and array.shape == view.shape and array.dtype == view.dtype:
                view[...] = array                 # the common case: already the model's shape and type
                continue
            value = as_input(np.asarray(array), desc, out=view)
            if value is not view:                 # quantized floats went straight into the view
                view[...] = value

    def outputs(self, dequantized: bool = False) -> list[np.ndarray]:
        """Copies of the outputs, in the model's own dtype (or float with ``dequantized``)."""
        self._check_usable()
        result = []
        for desc, view in self._outputs:
            value = self._dynamic_output(desc) if desc.dynamic else view.copy()
            if dequantized and desc.scale is not None and value.dtype.kind in "iu":
                value = dequantize(value, desc)
            result.append(value)
        return result

    def _dynamic_output(self, desc: TensorDesc) -> np.ndarray:
        """An output shaped per run: the host call's own array of the last run (libnpu.dynamic_outputs);
        before any, an empty one."""
        value = self._partitions.dynamic.get(desc.name) if self._partitions is not None else None
        if value is None:
            return np.zeros([max(d, 0) for d in desc.shape_signature or desc.shape], desc.dtype)
        return value.copy()

    def query_state(self) -> list[VariableState]:
        """The variables this request keeps between inferences (OpenVINO's ``query_state``);
        empty for a model without state."""
        self._check_usable()
        return list(self._states)

    def reset_state(self) -> None:
        """Put every variable back to its initial value (OpenVINO's ``reset_state``)."""
        for state in self.query_state():
            state.reset()

    def _running(self) -> bool:
        """An inference is under way: a call in some thread, or a started job not waited for."""
        started = self.fence is not None and self.fence.status is None
        return self._busy or started or (self._waiter is not None and self._waiter.is_alive())

    def _claim(self) -> None:
        """One inference at a time per request: two at once run jobs on the same memory (the
        inputs, the outputs, and the state both read and write: an update would be lost).
        The caller sets ``_busy`` back to False when it is done (no context manager: 2 us)."""
        with self._claim_lock:
            if self._running():
                raise RuntimeError("this request is still running: one inference at a time per request "
                                   "(wait() for it, or give each thread a request of its own)")
            self._busy = True

    def _check_idle(self) -> None:
        self._check_usable()
        if self._running():
            raise RuntimeError("this request is still running: wait() before touching its state")

    def start(self, callback: Callable[[InferRequest, Exception | None], None] | None = None) -> None:
        """Submit the job; returns at once.  ``callback(request, error)`` runs in a
        helper thread when the job is done."""
        self._check_usable()
        self._claim()
        try:
            if self.partitioned:
                return self._start_partitions(callback)
            self._follow_settings()
            self._started = time.perf_counter()
            self.fence = self._on_queue(False) or self.model.device.submit_prepared(self._submit)
            if callback is not None:
                self._waiter = threading.Thread(target=self._wait_then_call, args=(callback,), daemon=True)
                self._waiter.start()
        finally:
            self._busy = False

    def _wait_then_call(self, callback: Callable[[InferRequest, Exception | None], None]) -> None:
        error = None
        try:
            self._finish_wait(None)
        except Exception as exc:  # noqa: BLE001 - handed to the callback
            error = exc
        callback(self, error)

    def _start_partitions(self, callback: Callable[[InferRequest, Exception | None], None] | None) -> None:
        """``start`` of a partitioned model: the partitions and host steps run in order, in a helper thread."""
        self._started = time.perf_counter()
        self._error, self._raise_on_wait = None, callback is None
        self._waiter = threading.Thread(target=self._run_then_call, args=(callback,), daemon=True)
        self._waiter.start()

    def _run_then_call(self, callback: Callable[[InferRequest, Exception | None], None] | None) -> None:
        try:
            self._run_partitions()
        except Exception as exc:  # noqa: BLE001 - handed to the callback or to wait()
            self._error = exc
        if callback is not None:
            callback(self, self._error)

    def _run_partitions(self) -> None:
        """One inference of a partitioned model: each chip partition as a job, then its host steps."""
        self._follow_settings()
        partitions = self._partitions
        assert partitions is not None, "a partitioned model's request"
        try:
            device_ns, parts = partitions.run()
        finally:
            self.fence = partitions.fence
        self._finish_partitions(device_ns, parts)

    async def _run_partitions_async(self) -> None:
        self._follow_settings()
        partitions = self._partitions
        assert partitions is not None, "a partitioned model's request"
        try:
            device_ns, parts = await partitions.run_async()
        finally:
            self.fence = partitions.fence
        self._finish_partitions(device_ns, parts)

    def _finish_partitions(self, device_ns: int, parts: list[ChipPart | HostPart]) -> None:
        self.timing = Timing(time.perf_counter() - self._started, device_ns)
        if self._profiled:
            self.profile = InferenceProfile.from_parts(self.model.loadable, parts, self.model.clock_mhz)

    def _finish_wait(self, timeout: float | None) -> None:
        fence = self.fence
        assert fence is not None, "waits follow start()"
        try:
            fence.wait(timeout)
        except JobError as error:
            raise name_failed_task(error, self.model.loadable) from None
        self.timing = Timing(time.perf_counter() - self._started, fence.device_time_ns)
        self._collect_profile()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the job is done (raises JobError / TimeoutError)."""
        self._check_usable()
        if self.fence is None and self._waiter is None:
            raise RuntimeError("request not started")
        if self._waiter is not None:
            self._waiter.join(timeout)
            if self._waiter.is_alive():
                raise TimeoutError("inference still running")
            self._waiter = None
            if self._raise_on_wait and self._error is not None:
                error, self._error = self._error, None
                raise error
            return
        self._finish_wait(timeout)

    def infer(self, inputs: Inputs, dequantized: bool = False) -> list[np.ndarray]:
        """Run once, synchronously (through a user queue of the device, else one round trip
        to the driver)."""
        self._claim()
        try:
            self.set_inputs(inputs)     # raises ClosedError once released
            self._run_sync(time.perf_counter())
            return self.outputs(dequantized)
        finally:
            self._busy = False

    def run_sync(self, started: float) -> None:
        """Run the inputs already set, to the end: through a user queue of the device when it
        offers one (not for PERF_COUNT), else in one round trip (SUBMIT with WAIT);
        ``timing.latency_s`` counts from ``started`` (a ``time.perf_counter()``).  A model with
        CPU operators runs its chip partitions and host steps in turn."""
        self._check_usable()
        self._claim()
        try:
            self._run_sync(started)
        finally:
            self._busy = False

    def _run_sync(self, started: float) -> None:
        self._check_usable()
        if self.partitioned:
            self._started = started
            self._run_partitions()
            return
        self._follow_settings()
        # Again on the queue it last ran on (one C call, no look-up, the wait hinted), else take one.
        own = not self._profiled and self.model.device.use_queues
        try:
            fence = (self._job.run() if own else None) or self._on_queue(True)
        except JobError as error:
            raise name_failed_task(error, self.model.loadable) from None
        if fence is not None:
            self.fence, self.timing = fence, Timing(time.perf_counter() - started, fence.device_time_ns,
                                                    fence.exec_ns)
        else:
            self.fence = self.model.device.run_prepared(self._run)
            self.timing = Timing(time.perf_counter() - started, self.fence.device_time_ns)
        self._collect_profile()

    def _on_queue(self, wait: bool, offset: int = 0, size: int | None = None,
                  timeout_ms: int | None = None) -> QueueFence | None:
        """The job (the command buffer from ``offset``, ``size`` bytes and ``timeout_ms``: a
        partition's; the whole model's by default) on a user queue of the device (no request to the driver per job;
        timed task by task under PERF_COUNT), run to its end with ``wait`` (one call into the
        queue's C client); None when the device offers no queue or it stopped before the job
        went in (``UserQueue.try_submit``): the caller submits through the driver."""
        queue = self.model.device.shared_queue(self._priority)
        if queue is None or self.command is None:
            return None
        if wait and size is None and queue.native:
            self._job.queue = queue          # the next inferences go straight to it
        return queue.try_submit(self.command.address + offset, self.command_size if size is None else size,
                                wait=wait, flags=queue_spec.ENTRY_PROFILE if self._profiled else 0,
                                timeout_ms=self.model.job_timeout_ms if timeout_ms is None else timeout_ms)

    def release(self) -> None:
        """Free this request's device memory; using the request afterwards raises
        :class:`ClosedError`.  A job still running keeps its memory in the driver until
        it ends.  Releasing twice does nothing."""
        if self._released:
            return
        self._released = True
        self.model._forget(self)
        waiter = self._waiter
        if self.partitioned and waiter is not None and waiter is not threading.current_thread():
            waiter.join()       # its host steps write through this request's mappings
        fence = self.fence
        if isinstance(fence, QueueFence) and fence.status is None:
            # A queue job holds no buffer in the driver: freed under it, its accesses would
            # fault. It ends first (within its timeout), as a SUBMIT job keeps its memory.
            try:
                fence.queue.wait(fence)
            except NpuError:
                pass            # the queue stopped: nothing of it runs any more
        self._inputs, self._outputs, self._states = [], [], []   # drop the views before the memory goes
        if self._partitions is not None:
            self._partitions.clear()
        self._free_memory()

    def _free_memory(self) -> None:
        for memory in [*self.memory.values(), *([self.command] if self.command else [])]:
            if not memory.freed:
                self.model.device.free_mem(memory)
        self.memory.clear()


class CompiledModel:
    """A model loaded on a device, ready to infer.

    A stateful model's variables belong to each request: use ``create_request()`` for a
    stream whose state you follow (``infer`` and ``infer_async`` borrow pooled requests,
    each with state of its own)."""

    def __init__(self, loadable: Loadable, device: Device, session: Session | None = None,
                 config: Mapping[str, Any] | None = None):
        self.host_kernels = host_kernels(loadable)      # before any device memory: fails early
        self.loadable, self.device, self._session = loadable, device, session
        self.settings = {**device.settings, **properties.checked(config or {}, model=False)}
        properties.apply_log_level(self.settings)
        self.job_cores = properties.job_cores(self.settings, device.info()["num_cores"], partitioned=bool(
            loadable.host_steps))
        self.runtime = Runtime(device)
        # The timeout its jobs ask for, from their predicted work (0: the device's default).
        self.timeout_limits = self.runtime.timeout_limits
        self.job_timeout_ms = job_timeouts.job_timeout_ms(loadable, None, self.timeout_limits)
        if not self.settings["NPU_DEFER_WEIGHTS_LOAD"]:
            self.runtime.load(loadable)
        self._idle: list[InferRequest] = []
        self._requests: set[InferRequest] = set()    # every live request: idle, borrowed or the user's
        self._pools: set[RequestPool] = set()
        self._lock = threading.Lock()
        self.closed = False
        self.load_info: dict = {}
        self.last_profile: InferenceProfile | None = None
        self._clock_mhz: int | None = None

    @property
    def inputs(self) -> list[TensorDesc]:
        return self.loadable.inputs()

    @property
    def outputs(self) -> list[TensorDesc]:
        return self.loadable.outputs()

    @property
    def states(self) -> list[TensorDesc]:
        """The variables each request keeps between inferences (empty for most models)."""
        return self.loadable.states()

    @property
    def optimal_requests(self) -> int:
        """Requests to keep in flight for throughput: OPTIMAL_NUMBER_OF_INFER_REQUESTS under
        the THROUGHPUT hint, whatever this model's hint is."""
        return properties.optimal_requests({**self.settings, "PERFORMANCE_HINT": "THROUGHPUT"},
                                           self.device.info()["num_cores"])

    # ---- properties (OpenVINO's names: libnpu.properties) ----
    def get_property(self, name: str) -> Any:
        """One property by OpenVINO key or JSON name: the model's settings (the device's when
        it was loaded, with load()'s ``config``) and the device's facts."""
        return properties.value(self.settings, lambda: properties.device_facts(self.device), name, model=True)

    def set_property(self, values: Mapping[str, Any]) -> None:
        """Change how the model runs: PERFORMANCE_HINT, PERFORMANCE_HINT_NUM_REQUESTS,
        MODEL_PRIORITY, PERF_COUNT, LOG_LEVEL (all or none).  Properties fixed at load
        raise PropertyError; unknown names KeyError."""
        self.settings.update(properties.checked(values, model=True))
        properties.apply_log_level(self.settings)

    def properties(self) -> dict[str, Any]:
        """Every property, by JSON name."""
        return properties.snapshot(self.settings, self.device, model=True)

    @property
    def profiling(self) -> bool:
        """PERF_COUNT: inferences record per-layer counters."""
        return bool(self.settings["PERF_COUNT"])

    @property
    def clock_mhz(self) -> int:
        if self._clock_mhz is None:
            self._clock_mhz = self.device.param("CLOCK_MHZ")
        return self._clock_mhz

    def get_profiling_info(self) -> InferenceProfile | None:
        """The per-layer profile of the last ``infer`` / ``infer_async`` (PERF_COUNT on), as
        OpenVINO's ``get_profiling_info``; a request's own is ``request.profile``."""
        return self.last_profile

    @property
    def priority(self) -> int:
        """The driver's job priority for this model's inferences (from MODEL_PRIORITY)."""
        return properties.PRIORITIES[self.settings["MODEL_PRIORITY"]]

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedError(f"model {self.loadable.name!r} is closed")

    def _load_weights(self) -> None:
        """NPU_DEFER_WEIGHTS_LOAD: the weights go to the device with the first request."""
        with self._lock:
            if self.runtime.loadable is None and not self.closed:
                self.runtime.load(self.loadable)

    def create_request(self) -> InferRequest:
        """A new request with its own memory; ``close()`` frees it with the model."""
        self._check_open()
        self._load_weights()
        request = InferRequest(self)
        with self._lock:
            if not self.closed:
                self._requests.add(request)
                return request
        request.release()              # the model was closed meanwhile
        raise ClosedError(f"model {self.loadable.name!r} is closed")

    def create_pool(self, max_batch: int | None = None, *, on_output: OutputCallback | None = None,
                    on_error: ErrorCallback | None = None, on_finish: FinishCallback | None = None) -> RequestPool:
        """A bounded pool of ``max_batch`` requests (default: OPTIMAL_NUMBER_OF_INFER_REQUESTS)
        with ``get_task`` / ``try_get_task`` and output, error and finish callbacks
        (:mod:`libnpu.pool`); ``close()`` closes it with the model."""
        self._check_open()
        size = self.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") if max_batch is None else max_batch
        pool = RequestPool(self, size, on_output, on_error, on_finish)
        with self._lock:
            if not self.closed:
                self._pools.add(pool)
                return pool
        pool.close()
        raise ClosedError(f"model {self.loadable.name!r} is closed")

    def _forget_pool(self, pool: RequestPool) -> None:
        with self._lock:
            self._pools.discard(pool)

    def _forget(self, request: InferRequest) -> None:
        with self._lock:
            self._requests.discard(request)
            if request in self._idle:
                self._idle.remove(request)

    def _borrow(self) -> InferRequest:
        with self._lock:
            self._check_open()
            if self._idle:
                return self._idle.pop()
        return self.create_request()

    def _give_back(self, request: InferRequest) -> None:
        with self._lock:
            if not self.closed and request in self._requests:
                self._idle.append(request)

    def infer(self, inputs: Inputs, dequantized: bool = False) -> list[np.ndarray]:
        """Run one inference; thread-safe (each call borrows its own request)."""
        request = self._borrow()
        try:
            outputs = request.infer(inputs, dequantized)
            self.last_profile = request.profile
            return outputs
        finally:
            self._give_back(request)

    async def infer_async(self, inputs: Inputs, dequantized: bool = False) -> list[np.ndarray]:
        """``infer`` for asyncio and trio programs (through anyio): the event loop keeps
        running while the chip works.  Cancelled once its job was submitted, it raises the
        loop's cancellation when the job has ended (a job cannot be called back; at most its
        timeout), so the request goes back idle."""
        import anyio  # only async programs call this: a plain `import libnpu` does not load anyio
        request = self._borrow()
        try:
            request.set_inputs(inputs)
            if request.partitioned:
                request._started = time.perf_counter()
                await request._run_partitions_async()
                self.last_profile = request.profile
                return request.outputs(dequantized)
            request.start()
            fence = request.fence
            assert fence is not None, "start() submitted the job"
            with anyio.CancelScope(shield=True):
                await fence.wait_async()
            await anyio.lowlevel.checkpoint_if_cancelled()
            request.timing = Timing(time.perf_counter() - request._started, fence.device_time_ns)
            request._collect_profile()
            self.last_profile = request.profile
            return request.outputs(dequantized)
        finally:
            self._give_back(request)

    def close(self) -> None:
        """Free everything the model allocated on the device: the weights and the memory of
        every request, those from ``create_request`` included.  Afterwards the model and its
        requests raise :class:`ClosedError`.  Closing twice does nothing."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            pools = list(self._pools)
        errors: list[BaseException] = []
        for pool in pools:              # waits for their running tasks, stops their workers
            try:
                pool.close()
            except Exception as exc:  # noqa: BLE001 - free the rest, then report the first
                errors.append(exc)
        with self._lock:
            requests, self._idle = list(self._requests), []
        for free in [*(request.release for request in requests), self.runtime.unload]:
            try:
                free()
            except Exception as exc:  # noqa: BLE001 - free the rest, then report the first
                errors.append(exc)
        if self._session is not None:
            self._session.destroy()
        if errors:
            raise errors[0]

    def __enter__(self) -> CompiledModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load(model: str | os.PathLike | bytes | Loadable, device: Device | int | None = None, *,
         devroot: str | os.PathLike | None = None, calibration=None, cache_dir: str | os.PathLike | None = None,
         config: Mapping[str, Any] | None = None, **compile_options) -> CompiledModel:
    """Load a model onto a device: a loadable (.nlb), a .tflite / .onnx compiled (through
    the content-hash cache) first, or a model-zoo name (``npu fetch`` lists them).
    ``device``: an open Device or a device index (default $NPU_DEVICE, else 0; counted in
    NPU_VISIBLE_DEVICES' list: ``libnpu.visible_devices``).  ``config``: properties for this model (OpenVINO's
    ``compile_model(model, "NPU", config)``), over the device's settings; CACHE_DIR and
    NPU_BYPASS_UMD_CACHING steer the compile cache (``cache_dir`` wins over CACHE_DIR).
    ``compile_options`` go to :func:`libnpu.compiler.lower.compile_model`; among them
    ``input_shapes={"audio": (1, 16000)}`` (or ``(1, 16000)`` for a single-input model)
    gives inputs with free dimensions their shape (:mod:`libnpu.compiler.input_shapes`: a
    free leading batch dimension is 1 by default, any other must be given), and
    ``states={"h_in": "h_out"}`` makes a model stateful. A float model is quantized until
    each output reaches ``target`` (cosine 0.99) on held-out ``calibration`` samples
    (:mod:`libnpu.compiler.escalation`; a :class:`~libnpu.compiler.escalation.FidelityWarning`
    when it cannot), or int8 only with ``recipe="fast"``."""
    settings = {**(device.settings if isinstance(device, Device) else properties.defaults()),
                **properties.checked(config or {}, model=False)}
    if isinstance(model, (str, os.PathLike)) and not Path(model).exists():
        # a model-zoo name ("resnet8", "mp_hand_landmark_full"), as every `npu` command takes
        from libnpu import model_zoo  # not for every load: it brings Pillow and pip's wheel fetching
        if os.fspath(model) not in model_zoo.model_names():
            raise FileNotFoundError(errno.ENOENT, f"no such model file, nor a model-zoo name "
                                                  f"({model_zoo.describe_names()})", os.fspath(model))
        model = model_zoo.model_file(os.fspath(model))
    session = None
    if not isinstance(device, Device):     # opened first: a model compiled here is planned for its cores
        session = Session(devroot)
        device = session.open(device)     # None: $NPU_DEVICE, else 0 (libnpu.visible_devices)
    try:
        compiled = _compile_and_load(model, device, session, settings, calibration, cache_dir, config,
                                     compile_options)
    except BaseException:
        if session is not None:
            session.destroy()
        raise
    return compiled


def _compile_and_load(model: str | os.PathLike | bytes | Loadable, device: Device, session: Session | None,
                      settings: Mapping[str, Any], calibration, cache_dir: str | os.PathLike | None,
                      config: Mapping[str, Any] | None, compile_options: dict[str, Any]) -> CompiledModel:
    """``load``'s compile (for the device's cores: NPU_TILES, :mod:`libnpu.compiler.tiling`) and load."""
    cores = device.info()["num_cores"]
    wanted = properties.job_cores(settings, cores)      # None: one core; 0: all of them
    if wanted is not None and "tiles" not in compile_options:   # (one core: the compile cache's key as before)
        compile_options = dict(compile_options, tiles=wanted or cores)
    timings: dict = {}
    started = time.perf_counter()
    cache_hit = None
    if isinstance(model, Loadable):
        loadable = model
    elif isinstance(model, (str, os.PathLike)) and Path(model).suffix == ".nlb":
        loadable = Loadable.load(model)
    elif isinstance(model, (bytes, bytearray, memoryview)) and bytes(model[:len(LOADABLE_MAGIC)]) == LOADABLE_MAGIC:
        loadable = Loadable.from_bytes(bytes(model))
    # The compiler is imported only when a model needs compiling: about 70 ms more for every
    # `import libnpu` otherwise (no circle: the compiler imports nothing of the runtime).
    elif settings["NPU_BYPASS_UMD_CACHING"]:
        from libnpu.compiler.lower import compile_model
        loadable, cache_hit = compile_model(model, calibration, **compile_options), False
    else:
        from libnpu.compiler.cache import CompileCache, compile_cached
        cache_dir = cache_dir or settings["CACHE_DIR"] or None
        cache = CompileCache(cache_dir) if cache_dir else None
        loadable, cache_hit = compile_cached(model, calibration, cache=cache, **compile_options)
        if cache_hit:   # a compile that missed its fidelity target warned then: say it again
            from libnpu.compiler.escalation import warn_if_missed
            warn_if_missed(loadable.metadata)
    timings["compile_s"] = time.perf_counter() - started
    loadable.check_runnable()          # before loading anything
    started = time.perf_counter()
    compiled = CompiledModel(loadable, device, session, config)
    timings["load_s"] = time.perf_counter() - started
    timings["cache_hit"] = cache_hit
    compiled.load_info = timings
    return compiled

