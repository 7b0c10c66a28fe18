"""NVDLA's IRuntime: one loaded model on one device, its tensors described, bound to memory and submitted.

``Runtime`` mirrors NVDLA's IRuntime: ``load``, count and describe the input and output
tensors, set descriptors, allocate and bind memory, ``submit``, ``unload``
(:mod:`libnpu.nvdla` gives it NVDLA's own method names).  The OpenVINO-style level
(:mod:`libnpu.inference`: ``libnpu.load``) loads a model's weights through it.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Mapping

import numpy as np

from libnpu import job_timeouts, properties
from libnpu.dynamic_outputs import signature_text
from libnpu.errors import ClosedError
from libnpu.loadable import Loadable, RegionKind, TensorDesc
from libnpu.partitions import PartitionRunner, host_kernels
from libnpu.portability import MEM_READ, MEM_RW, Device, Fence, Memory
from libnpu.tensors import tensor_view


class Runtime:
    """NVDLA IRuntime-style access to one loaded model on one device."""

    def __init__(self, device: Device):
        self.device = device
        self.loadable: Loadable | None = None
        self.weights: dict[int, Memory] = {}
        self.memory: dict[int, Memory] = {}          # region -> memory for this runtime's own submits
        self.bound: dict[int, tuple[Memory, int]] = {}  # region -> (memory, byte offset) bound by the user
        self.command: Memory | None = None

    @functools.cached_property
    def timeout_limits(self) -> job_timeouts.TimeoutLimits | None:
        """The device's job timeouts, which bound what its jobs ask for (read once)."""
        return job_timeouts.device_limits(self.device)

    # ---- loading ----
    def get_max_devices(self) -> int:
        """NVDLA's getMaxDevices: how many devices the devroot holds (instances 0..n-1)."""
        return len(properties.available_devices(self.device.path.parent))

    def get_num_devices(self) -> int:
        """NVDLA's getNumDevices: the devices this runtime drives (its one device)."""
        return 1

    def load(self, loadable: Loadable | str | os.PathLike | bytes | bytearray | memoryview) -> None:
        """Load a model: allocate its weight regions and copy their contents in.

        ``loadable``: a Loadable, a file path, or the loadable's bytes (NVDLA's ``load(buf)``)."""
        if self.loadable is not None:
            raise RuntimeError("a model is already loaded; unload it first")
        if isinstance(loadable, (bytes, bytearray, memoryview)):
            loadable = Loadable.from_bytes(bytes(loadable))
        elif not isinstance(loadable, Loadable):
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
        self._check_desc("input", self.input_tensor_desc(index), index, desc)

    def set_output_tensor_desc(self, index: int, desc: TensorDesc) -> None:
        """Accepts a descriptor equal in shape, dtype and strides (the compiled layout is fixed)."""
        self._check_desc("output", self.output_tensor_desc(index), index, desc)

    @staticmethod
    def _check_desc(kind: str, current: TensorDesc, index: int, desc: TensorDesc) -> None:
        if (tuple(desc.shape), np.dtype(desc.dtype), tuple(desc.strides)) != (
                tuple(current.shape), np.dtype(current.dtype), tuple(current.strides)):
            raise ValueError(f"{kind} {index} ({current.name}) is compiled for {tuple(current.shape)} "
                             f"{current.dtype} strides {tuple(current.strides)}; got {tuple(desc.shape)} "
                             f"{desc.dtype} strides {tuple(desc.strides)}")

    def allocate_system_memory(self, size: int) -> Memory:
        return self.device.alloc_mem(size, MEM_RW)

    def _bind(self, desc: TensorDesc, memory: Memory, offset: int) -> None:
        if memory.freed or memory.device is not self.device:
            why = "was freed" if memory.freed else "belongs to another device"
            raise ValueError(f"{desc.name}: the memory {why}; bind a live memory of this runtime's device")
        sharing = [t.name for t in self.loaded.tensors if t.region == desc.region and t.name != desc.name]
        if sharing:
            raise ValueError(f"{desc.name} shares its region with {sharing[:3]}: it cannot be rebound")
        if offset < 0 or offset + desc.nbytes > memory.size:
            raise ValueError(f"{desc.name} needs {desc.nbytes} bytes at offset {offset}; memory has {memory.size}")
        self.bound[desc.region] = (memory, offset - desc.offset)

    def bind_input_tensor(self, index: int, memory: Memory, offset: int = 0) -> None:
        """The model reads input ``index`` straight from ``memory`` (no copy)."""
        self._bind(self.input_tensor_desc(index), memory, offset)

    def bind_output_tensor(self, index: int, memory: Memory, offset: int = 0) -> None:
        """The model writes output ``index`` straight into ``memory`` (no copy); not one
        whose shape each run decides (``desc.dynamic``: the host returns it as a new array)."""
        desc = self.output_tensor_desc(index)
        if desc.dynamic:
            raise ValueError(f"output {index} ({desc.name}) has its shape decided per run "
                             f"{signature_text(desc)}: no memory can be bound for it; read it from "
                             "libnpu.load(...).infer()")
        self._bind(desc, memory, offset)

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
        limits = self.timeout_limits
        if not loadable.host_steps:
            return self.device.submit(self.command, buffers, size=len(commands), wait=wait,
                                      timeout_ms=job_timeouts.job_timeout_ms(loadable, None, limits))
        if not wait:
            raise ValueError(f"model {loadable.name!r} has host steps between its chip partitions: "
                             "submit it with wait=True (or use libnpu.load(...).create_request())")
        partitions = PartitionRunner(self.device, loadable, host_kernels(loadable), self.command, buffers,
                                     self._host_view, limits=limits)
        partitions.prepare()
        partitions.run()
        fence = partitions.fence
        if fence is None:           # no chip partition
            return self.device.submit(None, wait=True)
        assert isinstance(fence, Fence), "a runner without a queue_job submits through the driver"
        return fence

    def _host_view(self, desc: TensorDesc) -> np.ndarray:
        if desc.region in self.bound:
            memory, delta = self.bound[desc.region]
            start = desc.offset + delta
        else:
            memory, start = self.memory[desc.region], desc.offset
        return tensor_view(memory.view, desc, start)

