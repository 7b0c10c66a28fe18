"""The chip's compute units: one module per unit declares, for each opcode it serves,
the handler that runs a descriptor and its cost (see ``units.common.unit``).

The descriptor layouts and opcodes stay in ``npu_hw`` (the hardware interface
the compiler reads too); everything the chip does with them lives beside each other here.
Every module of this package is a unit: adding one is adding a module.

- ``HANDLERS``: opcode -> ``handler(desc, dma)`` (the executor's dispatch table).
- ``task_cost(opcode, desc)``: ``(macs, bytes)`` for the timing model.
"""
from __future__ import annotations

import importlib
import pkgutil

import numpy as np

from firmware_sim import caches
from firmware_sim.kernels import native

from .common import UNITS, Handler, OpDescriptorError, Unit

__all__ = ["HANDLERS", "UNITS", "Unit", "OpDescriptorError", "task_cost"]

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "common":
        importlib.import_module(f"{__name__}.{_module.name}")

native.library()  # load (or build) the C kernels when a core starts, not inside its first job


def _guarded(handler: Handler) -> Handler:
    """A descriptor that asks for more working memory than the chip has fails the job
    (EINVAL) instead of taking the core down."""
    def run(desc: np.void, dma):
        try:
            return handler(desc, dma)
        except MemoryError:
            raise OpDescriptorError("task needs more working memory than the chip has") from None
    run.__name__ = handler.__name__
    return run


HANDLERS: dict[int, Handler] = {op: _guarded(u.handler) for op, u in sorted(UNITS.items())}

_COSTS: dict[tuple[int, bytes], tuple[int, int]] = {}


def task_cost(opcode: int, desc: np.void) -> tuple[int, int]:
    """``(macs, bytes)`` of one descriptor; ``(0, 0)`` for opcodes without compute.

    A pure function of the descriptor's bytes, remembered: a model's tasks repeat on
    every inference, and reading the fields costs more than the lookup."""
    key = (int(opcode), desc.tobytes())
    cost = _COSTS.get(key)
    if cost is None:
        u = UNITS.get(key[0])
        cost = u.cost(desc) if u is not None else (0, 0)
        if len(_COSTS) >= 4096:
            _COSTS.clear()
        _COSTS[key] = cost
    return cost


caches.register("costs", "(macs, bytes) of each descriptor, by its bytes (a pure function: "
                "no device memory, never invalidated)", None, _COSTS.clear,
                entries=lambda: len(_COSTS))
