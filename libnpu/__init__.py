"""libnpu: the user-mode driver of the emulated NPU.

``libnpu.initialize()`` opens a session; ``session.open(0)`` a device; see
``libnpu.portability`` for memory, submission and fences, and ``libnpu.nvdla``
for the NVDLA-style names.
"""
from kmd_fuse.uapi import NpuError
from libnpu.async_queue import AsyncInferQueue
from libnpu.host import HostOpError, register_host_op, unregister_host_op
from libnpu.portability import (
    MEM_READ,
    MEM_RW,
    MEM_WRITE,
    PRIO_HIGH,
    PRIO_LOW,
    PRIO_NORMAL,
    CommandBuffer,
    Device,
    Fence,
    JobError,
    Memory,
    Session,
    debug_print,
    initialize,
)
from libnpu.properties import PropertyError
from libnpu.runtime import CompiledModel, InferRequest, Runtime, load

__all__ = ["load", "AsyncInferQueue", "register_host_op", "unregister_host_op", "HostOpError", "CompiledModel",
           "InferRequest",
           "Runtime", "initialize", "Session", "Device", "Memory", "Fence", "CommandBuffer", "NpuError",
           "PropertyError", "JobError", "debug_print", "MEM_READ", "MEM_WRITE", "MEM_RW", "PRIO_LOW",
           "PRIO_NORMAL", "PRIO_HIGH"]
