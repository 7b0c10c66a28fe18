"""The runtime's exception types, in one place (each is also importable from the module that raises it).

Below every other module of libnpu: the portability layer, the user queues, the properties
and the runtime all raise them without importing each other.  :class:`HostOpError`
(:mod:`libnpu.host`) and the loadable's format errors (:mod:`libnpu.loadable`) stay with
their modules, which raise nothing else of the runtime's.
"""
from __future__ import annotations

from kmd_fuse.uapi import NpuError

__all__ = ["JobError", "InputError", "ClosedError", "PropertyError"]


class JobError(NpuError):
    """A job the device ran and failed (IOMMU fault, bus error, timeout, bad descriptor).

    ``task_index``: the task (descriptor) of the job's command buffer it failed in, when the
    device says (a user queue's job, ABI 2.9), else None; ``task_name``: that task's operator
    and layer as the runtime running a model names them ("CONV_2D 'conv1d_7'"), else ""."""

    def __init__(self, err: int, command: str, detail: str = "", *, task_index: int | None = None,
                 task_name: str = ""):
        if task_index is not None:
            detail += f" at task {task_index}" + (f" ({task_name})" if task_name else "")
        super().__init__(err, command, detail)
        self.task_index, self.task_name = task_index, task_name


class InputError(ValueError):
    """Inputs that do not fit the model: wrong count, missing name, shape or dtype."""


class ClosedError(RuntimeError):
    """The model was closed, the runtime unloaded or the request released: the device
    memory behind it is gone, so it cannot run or be read any more."""


class PropertyError(ValueError):
    """A property that cannot be set: read-only, or fixed once the model was loaded."""
