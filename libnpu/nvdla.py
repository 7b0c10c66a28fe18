"""NVDLA portability-layer names over libnpu, for people porting NVDLA UMD code.

The functions follow nvdla_inf.h's shapes - they return an ``NvError`` code
and hand results back in a tuple instead of through out-pointers::

    err, session = NvDlaInitialize()
    err, dev = NvDlaOpen(session, 0)
    err, mem, data = NvDlaAllocMem(session, dev, 4096, NvDlaHeap.System)
    task = NvDlaTask(task_id=1, address_list=[cmd_mem, src, dst])
    err = NvDlaSubmit(session, dev, [task])

``address_list[0]`` of a task is the memory holding its command buffer (task
descriptors, npu_hw/tasks.py); the rest are the buffers it uses.
The NvError values are this module's own; only the names follow NVDLA.  ``createRuntime()``
gives NVDLA's IRuntime (``load(buf, instance)``, ``getMaxDevices``, tensor descriptors,
``bindInputTensor``, ``submit``...) over :class:`libnpu.nvdla_runtime.Runtime`.
"""
from __future__ import annotations

import enum
import errno
import logging
from dataclasses import dataclass, field

import numpy as np

from kmd_fuse.uapi import NpuError
from libnpu.loadable import TensorDesc
from libnpu.nvdla_runtime import Runtime
from libnpu.portability import MEM_RW, Device, Memory, Session
from libnpu.properties import available_devices

log = logging.getLogger("libnpu.nvdla")


class NvError(enum.IntEnum):
    Success = 0
    NotImplemented = 1
    NotSupported = 2
    NotInitialized = 3
    BadParameter = 4
    Timeout = 5
    InsufficientMemory = 6
    InvalidState = 8
    InvalidAddress = 9
    InvalidSize = 10
    BadValue = 11
    Busy = 14
    FileOperationFailed = 15
    AccessDenied = 16
    ResourceError = 17
    IoctlFailed = 18


class NvDlaHeap(enum.IntEnum):
    System = 0
    SRAM = 1   # the emulated chip has no SRAM: allocations come from device memory


@dataclass
class NvDlaTask:
    """A unit of work: ``address_list[0]`` holds the command buffer."""

    task_id: int
    address_list: list[Memory] = field(default_factory=list)
    command_size: int | None = None     # bytes of task descriptors (default: the whole buffer)

    @property
    def num_addresses(self) -> int:
        return len(self.address_list)


_ERRNO_TO_NVERROR = {
    errno.EINVAL: NvError.BadParameter, errno.ENOMEM: NvError.InsufficientMemory,
    errno.ETIMEDOUT: NvError.Timeout, errno.EFAULT: NvError.InvalidAddress, errno.EBUSY: NvError.Busy,
    errno.EPERM: NvError.AccessDenied, errno.EACCES: NvError.AccessDenied, errno.ENOENT: NvError.BadValue,
    errno.E2BIG: NvError.InvalidSize, errno.ENOTTY: NvError.IoctlFailed, errno.EIO: NvError.ResourceError,
    errno.ENODEV: NvError.NotInitialized,
}


def nv_error(exc: OSError) -> NvError:
    """The NvError for an OSError/NpuError from libnpu."""
    if isinstance(exc, FileNotFoundError):
        return NvError.FileOperationFailed
    if exc.errno is None:
        return NvError.IoctlFailed
    return _ERRNO_TO_NVERROR.get(exc.errno, NvError.IoctlFailed)


def _guard(call):
    try:
        return NvError.Success, call()
    except OSError as exc:
        NvDlaDebugPrintf("%s", exc)
        return nv_error(exc), None


def NvDlaInitialize(devroot: str | None = None) -> tuple[NvError, Session]:
    return NvError.Success, Session(devroot)


def NvDlaDestroy(session: Session) -> NvError:
    session.destroy()
    return NvError.Success


def NvDlaOpen(session: Session, instance: int) -> tuple[NvError, Device | None]:
    return _guard(lambda: session.open(instance))


def NvDlaClose(session: Session, device: Device) -> NvError:
    session.close(device)
    return NvError.Success


def NvDlaAllocMem(session: Session, device: Device, size: int, heap: NvDlaHeap = NvDlaHeap.System
                  ) -> tuple[NvError, Memory | None, np.ndarray | None]:
    """Returns (error, memory handle, CPU view of the memory)."""
    if size <= 0:
        return NvError.BadParameter, None, None
    err, memory = _guard(lambda: device.alloc_mem(size, MEM_RW))
    return err, memory, (memory.view if memory else None)


def NvDlaFreeMem(session: Session, device: Device, memory: Memory) -> NvError:
    return _guard(lambda: device.free_mem(memory))[0]


def NvDlaSubmit(session: Session, device: Device, tasks: list[NvDlaTask]) -> NvError:
    """Run the tasks, in order, each to completion (NVDLA's submit is synchronous)."""
    if not tasks:
        return NvError.BadParameter
    for task in tasks:
        if not task.address_list:
            return NvError.BadParameter
        cmd, *buffers = task.address_list
        # _guard calls the lambda at once, within this iteration
        err, fence = _guard(lambda: device.submit(cmd, buffers, size=task.command_size, wait=True))  # noqa: B023
        if err:
            return err
        if fence.status:
            NvDlaDebugPrintf("task %d failed: %s", task.task_id, errno.errorcode.get(-fence.status))
            return nv_error(NpuError(-fence.status, "job"))
    return NvError.Success


def NvDlaDebugPrintf(fmt: str, *args) -> None:
    log.debug(fmt, *args)


class IRuntime:
    """NVDLA's IRuntime names over :class:`libnpu.nvdla_runtime.Runtime`, for ported UMD code.

    Methods that NVDLA gives an ``NvDlaError`` return an :class:`NvError` (with the result
    in a tuple); ``load`` returns a bool as NVDLA's does.  ``load`` takes the loadable's
    bytes (NVDLA's ``load(buf, instance)``) and opens device ``instance``."""

    def __init__(self, session: Session | None = None):
        self.session = session or Session()
        self.runtime: Runtime | None = None
        self._device: Device | None = None

    def getMaxDevices(self) -> int:
        return len(available_devices(self.session.devroot))

    def getNumDevices(self) -> int:
        return 0 if self.runtime is None else self.runtime.get_num_devices()

    def load(self, buf: bytes | bytearray | memoryview, instance: int = 0) -> bool:
        if self.runtime is not None:
            NvDlaDebugPrintf("load: a loadable is already loaded; unload() first")
            return False
        try:
            self._device = self.session.open(instance)
            runtime = Runtime(self._device)
            runtime.load(buf)
        except (OSError, ValueError) as exc:     # no device, or a damaged loadable (LoadableError)
            NvDlaDebugPrintf("load: %s", exc)
            self._close_device()
            return False
        self.runtime = runtime
        return True

    def unload(self) -> None:
        if self.runtime is not None:
            self.runtime.unload()
            self.runtime = None
        self._close_device()

    def _close_device(self) -> None:
        if self._device is not None:
            self.session.close(self._device)
            self._device = None

    def _loaded(self) -> Runtime:
        if self.runtime is None:
            raise _NotLoaded()
        return self.runtime

    def _call(self, call):
        try:
            return NvError.Success, call()
        except _NotLoaded:
            return NvError.InvalidState, None
        except IndexError:
            return NvError.BadParameter, None
        except ValueError as exc:
            NvDlaDebugPrintf("%s", exc)
            return NvError.BadValue, None
        except OSError as exc:
            NvDlaDebugPrintf("%s", exc)
            return nv_error(exc), None

    def getNumInputTensors(self) -> tuple[NvError, int | None]:
        return self._call(lambda: self._loaded().num_input_tensors())

    def getNumOutputTensors(self) -> tuple[NvError, int | None]:
        return self._call(lambda: self._loaded().num_output_tensors())

    def getInputTensorDesc(self, index: int) -> tuple[NvError, TensorDesc | None]:
        return self._call(lambda: self._loaded().input_tensor_desc(index))

    def getOutputTensorDesc(self, index: int) -> tuple[NvError, TensorDesc | None]:
        return self._call(lambda: self._loaded().output_tensor_desc(index))

    def setInputTensorDesc(self, index: int, desc: TensorDesc) -> NvError:
        return self._call(lambda: self._loaded().set_input_tensor_desc(index, desc))[0]

    def setOutputTensorDesc(self, index: int, desc: TensorDesc) -> NvError:
        return self._call(lambda: self._loaded().set_output_tensor_desc(index, desc))[0]

    def allocateSystemMemory(self, size: int) -> tuple[NvError, Memory | None, np.ndarray | None]:
        if size <= 0:
            return NvError.BadParameter, None, None
        err, memory = self._call(lambda: self._loaded().allocate_system_memory(size))
        return err, memory, (memory.view if memory else None)

    def freeSystemMemory(self, memory: Memory) -> NvError:
        return self._call(lambda: self._loaded().device.free_mem(memory))[0]

    def bindInputTensor(self, index: int, memory: Memory) -> NvError:
        return self._call(lambda: self._loaded().bind_input_tensor(index, memory))[0]

    def bindOutputTensor(self, index: int, memory: Memory) -> NvError:
        return self._call(lambda: self._loaded().bind_output_tensor(index, memory))[0]

    def submit(self) -> NvError:
        """Run the loaded model once on the bound memory, to completion."""
        err, fence = self._call(lambda: self._loaded().submit(wait=True))
        if err:
            return err
        if fence.status:
            return nv_error(NpuError(-fence.status, "job"))
        return NvError.Success


class _NotLoaded(Exception):
    pass


def createRuntime(session: Session | None = None) -> IRuntime:
    """NVDLA's ``nvdla::createRuntime()``."""
    return IRuntime(session)
