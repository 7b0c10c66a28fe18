"""The runtime: loads a compiled model (a loadable) onto a device and runs it.

Two levels, as users of NVDLA and of OpenVINO / FuriosaAI expect:

- ``Runtime`` mirrors NVDLA's IRuntime: ``load``, count and describe the input and
  output tensors, set descriptors, allocate and bind memory, ``submit``, ``unload``.
- ``libnpu.load(model)`` returns a ``CompiledModel`` with ``infer(inputs)``, trio's
  ``await infer_async(inputs)``, and ``InferRequest`` objects (``start``, ``wait``,
  a completion callback) so several inferences can be in flight at once.

One inference is one job: the model's task list, relocated to the addresses of
that request's memory, in one command buffer.  Weights are loaded once per model
(read-only device memory, shared by every request); activations, inputs and
outputs are per request, so requests never share scratch memory.

A stateful model (TFLite resource variables, ONNX state pairs) keeps its variables in
device memory of each request: the job reads them in place and writes their new values
back at its end, so nothing crosses to the host between calls.  As in OpenVINO,
``InferRequest.query_state()`` lists them (``VariableState``: name, value, ``reset``)
and ``reset_state()`` puts every one back to its initial value.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from libnpu.loadable import Loadable, RegionKind, TensorDesc
from libnpu.portability import MEM_READ, MEM_RW, Device, Fence, JobError, Memory, Session

ArrayLike = np.ndarray
Inputs = Sequence[ArrayLike] | Mapping[str, ArrayLike]


class ClosedError(RuntimeError):
    """The model was closed, the runtime unloaded or the request released: the device
    memory behind it is gone, so it cannot run or be read any more."""


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _quantization(desc: TensorDesc) -> tuple[np.ndarray, np.ndarray]:
    """(scale, zero point) of a quantized tensor; ValueError for a float one."""
    if desc.scale is None or desc.zero_point is None:
        raise ValueError(f"tensor {desc.name} is not quantized")
    return desc.scale, desc.zero_point


def quantize(values: np.ndarray, desc: TensorDesc) -> np.ndarray:
    """Float -> the tensor's integer type with its scale and zero point (TFLite rounding)."""
    scale, zero_point = _quantization(desc)
    info = np.iinfo(desc.dtype)
    q = _round_half_away(np.asarray(values, np.float32) / scale[0]) + zero_point[0]
    return np.clip(q, info.min, info.max).astype(desc.dtype)


def dequantize(values: np.ndarray, desc: TensorDesc) -> np.ndarray:
    scale, zero_point = _quantization(desc)
    return ((values.astype(np.int32) - int(zero_point[0])) * np.float32(scale[0])).astype(np.float32)


class Runtime:
    """NVDLA IRuntime-style access to one loaded model on one device."""

    def __init__(self, device: Device):
        self.device = device
        self.loadable: Loadable | None = None
        self.weights: dict[int, Memory] = {}
        self.memory: dict[int, Memory] = {}          # region -> memory for this runtime's own submits
        self.bound: dict[int, tuple[Memory, int]] = {}  # region -> (memory, byte offset) bound by the user
        self.command: Memory | None = None

    # ---- loading ----
    def load(self, loadable: Loadable | str | os.PathLike) -> None:
        """Load a model: allocate its weight regions and copy their contents in."""
        if self.loadable is not None:
            raise RuntimeError("a model is already loaded; unload it first")
        if not isinstance(loadable, Loadable):
            loadable = Loadable.load(loadable)
        loadable.validate()
        loadable.check_runnable()
        self.loadable = loadable
        # Weight regions are shared by every inference, unless their contents hold
        # addresses of per-inference memory (e.g. CONCAT's input table): those are
        # per inference too.
        per_inference = {i for i, r in enumerate(loadable.regions) if r.kind != RegionKind.WEIGHTS}
        changed = True
        while changed:
            changed = False
            for reloc in loadable.data_relocs:
                if reloc.target in per_inference and reloc.region not in per_inference:
                    per_inference.add(reloc.region)
                    changed = True
        self.per_inference = per_inference
        try:
            for index, region in enumerate(loadable.regions):
                if index not in per_inference:
                    self.weights[index] = self.device.alloc_mem(max(region.size, 1), MEM_READ)
        except BaseException:
            self.unload()
            raise
        bases = self.region_bases({})
        for index, memory in self.weights.items():
            image = loadable.region_image(index, bases)
            memory.view[:len(image)] = np.frombuffer(image, np.uint8)

    @property
    def loaded(self) -> Loadable:
        """The loaded model; :class:`ClosedError` when there is none (never loaded or unloaded)."""
        if self.loadable is None:
            raise ClosedError("no model is loaded in this runtime (unloaded, or never loaded)")
        return self.loadable

    def write_images(self, memory: Mapping[int, Memory], bases: list[int], *, states: bool = True) -> None:
        """Initial contents of the per-inference regions that have any (patched for ``bases``);
        ``states=False`` leaves the STATE regions (variables kept between inferences) alone."""
        for index, mem in memory.items():
            region = self.loaded.regions[index]
            if region.kind == RegionKind.STATE and not states:
                continue
            if region.content is not None:
                image = self.loaded.region_image(index, bases)
                mem.view[:len(image)] = np.frombuffer(image, np.uint8)

    def region_bases(self, other: Mapping[int, int]) -> list[int]:
        """Device address of every region: weights from the model, the rest from ``other``."""
        bases = []
        for index in range(len(self.loaded.regions)):
            if index in self.weights:
                bases.append(self.weights[index].address)
            else:
                bases.append(other.get(index, 0))
        return bases

    def reset_state(self) -> None:
        """Put a stateful model's variables back to their initial values (the next
        ``submit`` reads them); a model without state has nothing to reset."""
        states = {i: m for i, m in self.memory.items() if self.loaded.regions[i].kind == RegionKind.STATE}
        self.write_images(states, self.region_bases({i: m.address for i, m in self.memory.items()}))

    def unload(self) -> None:
        """Free everything the model holds on the device."""
        for memory in [*self.weights.values(), *self.memory.values(), *([self.command] if self.command else [])]:
            if not memory.freed:
                self.device.free_mem(memory)
        self.weights.clear()
        self.memory.clear()
        self.bound.clear()
        self.command = None
        self.loadable = None

    # ---- tensors ----
    def num_input_tensors(self) -> int:
        return len(self.loaded.inputs())

    def num_output_tensors(self) -> int:
        return len(self.loaded.outputs())

    def input_tensor_desc(self, index: int) -> TensorDesc:
        return self.loaded.inputs()[index]

    def output_tensor_desc(self, index: int) -> TensorDesc:
        return self.loaded.outputs()[index]

    def set_input_tensor_desc(self, index: int, desc: TensorDesc) -> None:
        """Accepts a descriptor equal in shape, dtype and strides (the compiled layout is fixed)."""
        current = self.input_tensor_desc(index)
        if (tuple(desc.shape), desc.dtype, tuple(desc.strides)) != (current.shape, current.dtype, current.strides):
            raise ValueError(f"input {index} ({current.name}) is compiled for {current.shape} {current.dtype}; "
                             f"got {tuple(desc.shape)} {desc.dtype}")

    def allocate_system_memory(self, size: int) -> Memory:
        return self.device.alloc_mem(size, MEM_RW)

    def _bind(self, desc: TensorDesc, memory: Memory, offset: int) -> None:
        sharing = [t.name for t in self.loaded.tensors if t.region == desc.region and t.name != desc.name]
        if sharing:
            raise ValueError(f"{desc.name} shares its region with {sharing[:3]}: it cannot be rebound")
        if offset + desc.nbytes > memory.size:
            raise ValueError(f"{desc.name} needs {desc.nbytes} bytes at offset {offset}; memory has {memory.size}")
        self.bound[desc.region] = (memory, offset - desc.offset)

    def bind_input_tensor(self, index: int, memory: Memory, offset: int = 0) -> None:
        """The model reads input ``index`` straight from ``memory`` (no copy)."""
        self._bind(self.input_tensor_desc(index), memory, offset)

    def bind_output_tensor(self, index: int, memory: Memory, offset: int = 0) -> None:
        """The model writes output ``index`` straight into ``memory`` (no copy)."""
        self._bind(self.output_tensor_desc(index), memory, offset)

    def _layout(self) -> dict[int, int]:
        """Addresses of the non-weight regions for this runtime's submits."""
        bases = {}
        for index, region in enumerate(self.loaded.regions):
            if index in self.weights:
                continue
            if index in self.bound:
                memory, delta = self.bound[index]
                bases[index] = memory.address + delta
                continue
            if index not in self.memory:
                self.memory[index] = self.device.alloc_mem(max(region.size, 1), MEM_RW)
            bases[index] = self.memory[index].address
        return bases

    def submit(self, wait: bool = True) -> Fence:
        """Run the model once on the bound (or runtime-allocated) memory."""
        loadable = self.loaded
        fresh = [i for i in range(len(loadable.regions)) if i not in self.weights and i not in self.memory]
        bases = self.region_bases(self._layout())
        self.write_images(self.memory, bases, states=False)
        self.write_images({i: self.memory[i] for i in fresh if i in self.memory}, bases)  # first values of states
        commands = loadable.command_buffer(bases)
        if self.command is None or self.command.size < len(commands):
            if self.command is not None:
                self.device.free_mem(self.command)
            self.command = self.device.alloc_mem(max(len(commands), 8), MEM_READ)
        self.command.view[:len(commands)] = np.frombuffer(commands, np.uint8)
        buffers = [*self.weights.values(), *self.memory.values(), *(m for m, _ in self.bound.values())]
        return self.device.submit(self.command, buffers, size=len(commands), wait=wait)


@dataclass
class Timing:
    latency_s: float = 0.0
    device_time_ns: int = 0


class InferRequest:
    """One inference's memory and job: fill inputs, ``start``, ``wait``, read outputs."""

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
            commands = loadable.command_buffer(bases)
            self.command = device.alloc_mem(max(len(commands), 8), MEM_READ)
        except BaseException:
            self._free_memory()        # e.g. ENOMEM half way: give back what was allocated
            raise
        self.command.view[:len(commands)] = np.frombuffer(commands, np.uint8)
        self.command_size = len(commands)
        self.buffers = [*model.runtime.weights.values(), *self.memory.values()]
        # Built once: the tensors' views into this request's memory and the SUBMIT
        # request itself (same command buffer and buffers every time; only the
        # inputs change between inferences).
        self._inputs = [(desc, self._view(desc)) for desc in loadable.inputs()]
        self._outputs = [(desc, self._view(desc)) for desc in loadable.outputs()]
        self._states = [VariableState(self, desc, self._view(desc)) for desc in loadable.states()]
        self._run = device.prepare_submit(self.command, self.buffers, size=self.command_size, wait=True)
        self._submit = device.prepare_submit(self.command, self.buffers, size=self.command_size)
        self.fence: Fence | None = None
        self.timing = Timing()
        self._started = 0.0
        self._waiter: threading.Thread | None = None

    def _view(self, desc: TensorDesc) -> np.ndarray:
        memory = self.memory[desc.region]
        return np.lib.stride_tricks.as_strided(
            memory.view[desc.offset:desc.offset + desc.nbytes].view(desc.dtype), desc.shape, desc.strides)

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
                raise KeyError(f"missing inputs {missing}")
            arrays = [inputs[d.name] for d, _ in slots]
        else:
            arrays = list(inputs)
            if len(arrays) != len(slots):
                raise ValueError(f"model takes {len(slots)} inputs, got {len(arrays)}")
        for (desc, view), array in zip(slots, arrays):
            if type(array) is np.ndarray and array.shape == view.shape and array.dtype == view.dtype:
                view[...] = array                 # the common case: already the model's shape and type
                continue
            array = np.asarray(array)
            if array.shape != desc.shape:
                if array.size != int(np.prod(desc.shape)):
                    raise ValueError(f"input {desc.name}: shape {array.shape}, expected {desc.shape}")
                array = array.reshape(desc.shape)
            if array.dtype != np.dtype(desc.dtype):
                if np.issubdtype(array.dtype, np.floating) and desc.scale is not None:
                    array = quantize(array, desc)
                else:
                    array = array.astype(desc.dtype)
            view[...] = array

    def outputs(self, dequantized: bool = False) -> list[np.ndarray]:
        """Copies of the outputs, in the model's own dtype (or float with ``dequantized``)."""
        self._check_usable()
        result = []
        for desc, view in self._outputs:
            value = view.copy()
            if dequantized and desc.scale is not None and value.dtype.kind in "iu":
                value = dequantize(value, desc)
            result.append(value)
        return result

    def query_state(self) -> list[VariableState]:
        """The variables this request keeps between inferences (OpenVINO's ``query_state``);
        empty for a model without state."""
        self._check_usable()
        return list(self._states)

    def reset_state(self) -> None:
        """Put every variable back to its initial value (OpenVINO's ``reset_state``)."""
        for state in self.query_state():
            state.reset()

    def _check_idle(self) -> None:
        self._check_usable()
        running = self.fence is not None and self.fence.status is None
        if running or (self._waiter is not None and self._waiter.is_alive()):
            raise RuntimeError("this request is still running: wait() before touching its state")

    def start(self, callback: Callable[[InferRequest, Exception | None], None] | None = None) -> None:
        """Submit the job; returns at once.  ``callback(request, error)`` runs in a
        helper thread when the job is done."""
        self._check_usable()
        if self.fence is not None and self.fence.status is None:
            raise RuntimeError("this request is still running")
        self._started = time.perf_counter()
        self.fence = self.model.device.submit_prepared(self._submit)
        if callback is not None:
            self._waiter = threading.Thread(target=self._wait_then_call, args=(callback,), daemon=True)
            self._waiter.start()

    def _wait_then_call(self, callback: Callable[[InferRequest, Exception | None], None]) -> None:
        error = None
        try:
            self._finish_wait(None)
        except Exception as exc:  # noqa: BLE001 - handed to the callback
            error = exc
        callback(self, error)

    def _finish_wait(self, timeout: float | None) -> None:
        fence = self.fence
        assert fence is not None, "waits follow start()"
        fence.wait(timeout)
        self.timing = Timing(time.perf_counter() - self._started, fence.device_time_ns)

    def wait(self, timeout: float | None = None) -> None:
        """Block until the job is done (raises JobError / TimeoutError)."""
        self._check_usable()
        if self.fence is None:
            raise RuntimeError("request not started")
        if self._waiter is not None:
            self._waiter.join(timeout)
            if self._waiter.is_alive():
                raise TimeoutError("inference still running")
            self._waiter = None
            return
        self._finish_wait(timeout)

    def infer(self, inputs: Inputs, dequantized: bool = False) -> list[np.ndarray]:
        """Run once, synchronously (one round trip to the driver)."""
        self.set_inputs(inputs)     # raises ClosedError once released
        started = time.perf_counter()
        self.fence = self.model.device.run_prepared(self._run)
        self.timing = Timing(time.perf_counter() - started, self.fence.device_time_ns)
        return self.outputs(dequantized)

    def release(self) -> None:
        """Free this request's device memory; using the request afterwards raises
        :class:`ClosedError`.  A job still running keeps its memory in the driver until
        it ends.  Releasing twice does nothing."""
        if self._released:
            return
        self._released = True
        self.model._forget(self)
        self._inputs, self._outputs, self._states = [], [], []   # drop the views before the memory goes
        self._free_memory()

    def _free_memory(self) -> None:
        for memory in [*self.memory.values(), *([self.command] if self.command else [])]:
            if not memory.freed:
                self.model.device.free_mem(memory)
        self.memory.clear()


class VariableState:
    """One variable of a request (OpenVINO's ``VariableState``): its ``name``, its current
    value ``state`` (a copy, in the model's dtype), ``set_state`` and ``reset``.  The value
    lives in the request's device memory; these read or write it between inferences."""

    def __init__(self, request: InferRequest, desc: TensorDesc, view: np.ndarray):
        self._request, self.desc, self._view = request, desc, view
        self.name = request.model.loadable.regions[desc.region].name.removeprefix("state:")

    @property
    def state(self) -> np.ndarray:
        """The current value (a copy)."""
        self._request._check_idle()
        return self._view.copy()

    def dequantized(self) -> np.ndarray:
        """The current value as float32, with the variable's scale and zero point."""
        return dequantize(self.state, self.desc)

    def set_state(self, value: ArrayLike) -> None:
        """Overwrite the value: an array of the variable's shape in its dtype (or a float
        array, quantized with its scale and zero point)."""
        self._request._check_idle()
        array = np.asarray(value)
        if array.shape != self.desc.shape:
            raise ValueError(f"state {self.name}: shape {array.shape}, expected {self.desc.shape}")
        if np.issubdtype(array.dtype, np.floating) and self.desc.scale is not None:
            array = quantize(array, self.desc)
        elif array.dtype != np.dtype(self.desc.dtype):
            raise ValueError(f"state {self.name}: dtype {array.dtype}, expected {self.desc.dtype}")
        self._view[...] = array

    def reset(self) -> None:
        """Back to the initial value the model declares."""
        self._request._check_idle()
        initial = self._request.model.loadable.regions[self.desc.region].content
        assert initial is not None, "the compiler gives every STATE region its initial value"
        self._view[...] = np.frombuffer(bytes(initial[:self.desc.nbytes]), self.desc.dtype).reshape(self.desc.shape)

    def __repr__(self) -> str:
        return f"<VariableState {self.name} {list(self.desc.shape)} {self.desc.dtype}>"


class CompiledModel:
    """A model loaded on a device, ready to infer.

    A stateful model's variables belong to each request: use ``create_request()`` for a
    stream whose state you follow (``infer`` and ``infer_async`` borrow pooled requests,
    each with state of its own)."""

    def __init__(self, loadable: Loadable, device: Device, session: Session | None = None):
        self.loadable, self.device, self._session = loadable, device, session
        self.runtime = Runtime(device)
        self.runtime.load(loadable)
        self._idle: list[InferRequest] = []
        self._requests: set[InferRequest] = set()    # every live request: idle, borrowed or the user's
        self._lock = threading.Lock()
        self.closed = False
        self.load_info: dict = {}

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
        """Requests to keep in flight for throughput: one per core, plus one being refilled."""
        return self.device.info()["num_cores"] + 1

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedError(f"model {self.loadable.name!r} is closed")

    def create_request(self) -> InferRequest:
        """A new request with its own memory; ``close()`` frees it with the model."""
        self._check_open()
        request = InferRequest(self)
        with self._lock:
            if not self.closed:
                self._requests.add(request)
                return request
        request.release()              # the model was closed meanwhile
        raise ClosedError(f"model {self.loadable.name!r} is closed")

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
            return request.infer(inputs, dequantized)
        finally:
            self._give_back(request)

    async def infer_async(self, inputs: Inputs, dequantized: bool = False) -> list[np.ndarray]:
        """``infer`` for trio: the event loop keeps running while the chip works."""
        request = self._borrow()
        try:
            request.set_inputs(inputs)
            request.start()
            fence = request.fence
            assert fence is not None, "start() submitted the job"
            await fence.wait_async()
            request.timing = Timing(time.perf_counter() - request._started, fence.device_time_ns)
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
            requests, self._idle = list(self._requests), []
        errors: list[BaseException] = []
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
         **compile_options) -> CompiledModel:
    """Load a model onto a device: a loadable (.nlb), or a .tflite / .onnx compiled
    (through the content-hash cache) first.  ``device``: an open Device or an
    instance number (default 0)."""
    timings: dict = {}
    started = time.perf_counter()
    cache_hit = None
    if isinstance(model, Loadable):
        loadable = model
    elif isinstance(model, (str, os.PathLike)) and Path(model).suffix == ".nlb":
        loadable = Loadable.load(model)
    else:
        from libnpu.compiler.cache import CompileCache, compile_cached
        cache = CompileCache(cache_dir) if cache_dir else None
        loadable, cache_hit = compile_cached(model, calibration, cache=cache, **compile_options)
    timings["compile_s"] = time.perf_counter() - started
    loadable.check_runnable()          # before opening anything
    session = None
    if not isinstance(device, Device):
        session = Session(devroot)
        device = session.open(device or 0)
    started = time.perf_counter()
    try:
        compiled = CompiledModel(loadable, device, session)
    except BaseException:
        if session is not None:
            session.destroy()
        raise
    timings["load_s"] = time.perf_counter() - started
    timings["cache_hit"] = cache_hit
    compiled.load_info = timings
    return compiled


__all__ = ["Runtime", "CompiledModel", "InferRequest", "VariableState", "ClosedError", "load", "quantize",
           "dequantize", "JobError"]
