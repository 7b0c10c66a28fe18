"""What every compute unit shares: descriptor checks, the plan cache, and the registry
that a unit's module fills with one :func:`unit` declaration per opcode.

A unit module declares, for each opcode it serves (the descriptor layout and the opcode
are in ``npu_hw``, the hardware interface the compiler also reads), the
handler that runs a descriptor and the cost model of the chip's timing. Handlers read
their operands through the DMA engine (every access is IOMMU-checked), run the kernel
and write the result in place into the output view. A handler may return a *rerun*: a
call that does the same task again on the same operand views, with nothing decoded or
checked again (the C kernels' bound calls); the executor's job plans replay it. A descriptor whose fields make no
sense raises :class:`OpDescriptorError` (the job fails with EINVAL).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from firmware_sim import caches
from firmware_sim.errors import InvalidCommand
from firmware_sim.kernels import native
from npu_hw import ops, tasks

__all__ = ["OpDescriptorError", "Handler", "Rerun", "Cost", "Unit", "UNITS", "unit", "dims", "ranked",
           "count", "frozen", "plan", "Plan", "prod", "act_dtype", "int16_zero_points",
           "parse_binary"]

# Sanity bound on any one tensor (elements); the IOMMU bounds real accesses anyway.
MAX_ELEMENTS = 1 << 31

Rerun = Callable[[], None]
Handler = Callable[[np.void, object], "Rerun | None"]
Cost = Callable[[np.void], tuple[int, int]]


class OpDescriptorError(InvalidCommand):
    """A compute descriptor with impossible fields."""


@dataclass(frozen=True)
class Unit:
    """One opcode of the chip: its descriptor's name (``spec``), handler and cost.

    ``cost(desc)`` is ``(macs, bytes)``: multiply-accumulates (elementwise ops count one
    per output element, pooling one per window tap, data movement zero) and the bytes the
    task reads and writes in device memory; the timing model turns them into cycles."""
    opcode: int
    name: str
    handler: Handler
    cost: Cost


UNITS: dict[int, Unit] = {}


def unit(opcode: int, cost: Cost) -> Callable[[Handler], Handler]:
    """Declare ``handler`` as the chip's implementation of ``opcode`` (a decorator)."""
    def declare(handler: Handler) -> Handler:
        if opcode in UNITS:
            raise ValueError(f"opcode {opcode:#x} declared twice")
        UNITS[opcode] = Unit(opcode, tasks.TASK_TYPES[opcode].name, handler, cost)
        return handler
    return declare


def dims(values, name: str) -> tuple[int, ...]:
    """Positive dimensions of a bounded size, else :class:`OpDescriptorError`."""
    result = tuple(int(v) for v in values)
    if any(d == 0 for d in result):
        raise OpDescriptorError(f"{name} has an empty dimension: {result}")
    if math.prod(result) > MAX_ELEMENTS:
        raise OpDescriptorError(f"{name} {result} is too large")
    return result


def ranked(desc: np.void, field: str) -> tuple[int, ...]:
    """An arbitrary-rank shape field (``rank`` + ``u32[MAX_RANK]``), checked."""
    rank = int(desc["rank"])
    if not 1 <= rank <= ops.MAX_RANK:
        raise OpDescriptorError(f"rank {rank} outside 1..{ops.MAX_RANK}")
    return dims(desc[field][:rank], field)


def parse_binary(desc: np.void, params: tuple[str, ...]) -> tuple:
    """A broadcasting binary descriptor: ``(address, shape)`` of input1, input2 and the
    output (shapes at the output's rank, checked to broadcast), and the ``params`` as ints."""
    s1, s2, so = (ranked(desc, f) for f in ("in1_shape", "in2_shape", "out_shape"))
    try:
        if np.broadcast_shapes(s1, s2) != so:
            raise OpDescriptorError(f"{s1} and {s2} do not broadcast to {so}")
    except ValueError as exc:
        raise OpDescriptorError(str(exc)) from None
    return ((int(desc["input1"]), s1), (int(desc["input2"]), s2), (int(desc["output"]), so),
            {name: int(desc[name]) for name in params})


def parse_binary_per_channel(desc: np.void, columns: int, params: tuple[str, ...]) -> tuple:
    """An int16 binary descriptor with per-channel requantization (the ``*16_PER_CHANNEL``
    descriptors): :func:`parse_binary`'s operands, then ``(address, shape)``
    of the int32 ``[channels, columns]`` parameter array (``channels`` checked against the
    output's last dimension), then the ``params`` as ints. Zero points must be 0."""
    int16_zero_points(desc, "input1_zp", "input2_zp", "output_zp")
    a_at, b_at, out_at, kwargs = parse_binary(desc, params)
    channels = int(desc["channels"])
    if channels != out_at[1][-1]:
        raise OpDescriptorError(f"channels {channels}: the output has {out_at[1][-1]} channels")
    return a_at, b_at, out_at, (int(desc["params"]), (channels, columns)), kwargs


def act_dtype(desc: np.void) -> type:
    """The activation type of a descriptor: int16 with ``OPF_INT16``, else int8."""
    return np.int16 if int(desc["flags"]) & ops.OPF_INT16 else np.int8


def int16_zero_points(desc: np.void, *fields: str) -> None:
    """int16 activations are symmetric: their zero point fields must be 0."""
    for f in fields:
        if int(desc[f]):
            raise OpDescriptorError(f"{f} must be 0 with int16 activations, got {int(desc[f])}")


def count(desc: np.void) -> int:
    """The element count of a flat descriptor, checked."""
    n = int(desc["count"])
    if not 0 < n <= MAX_ELEMENTS:
        raise OpDescriptorError(f"element count {n} out of range")
    return n


def prod(values) -> int:
    return int(np.prod([int(v) for v in values], dtype=np.int64))


def frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False   # shared by every run of the plan
    return a


class Plan:
    """A decoded descriptor (``fields``) and, for the C kernels, the last call made for it
    (``bound``: reused while the task's operands are the same DMA views)."""
    __slots__ = ("fields", "bound")

    def __init__(self, fields: tuple):
        self.fields, self.bound = fields, None

    def run(self, operands: tuple, first_run: Callable[[], object]) -> Rerun | None:
        """Rerun the bound call if it was made for ``operands``, else ``first_run()``
        (which checks everything, runs the kernel and returns a bound call or None).
        Returns the bound call (the task's rerun), if any."""
        bound = self.bound
        if bound is not None and bound.uses(operands) and native.library() is not None:
            bound()
        else:
            self.bound = None          # a run that raises leaves no call behind
            self.bound = first_run()
        return self.bound


_PLANS: dict[tuple[str, bytes], Plan] = {}
PLAN_ENTRIES = 4096


def plan(kind: str, desc: np.void, parse: Callable[[np.void], tuple]) -> Plan:
    """``parse(desc)``, remembered by the descriptor's bytes: a model's descriptors repeat
    on every inference, and reading and checking ~30 fields costs more than small ops.
    Only the decoding is cached; every operand is still read through the DMA engine."""
    key = (kind, desc.tobytes())
    found = _PLANS.get(key)
    if found is None:
        found = Plan(parse(desc))
        if len(_PLANS) >= PLAN_ENTRIES:
            _PLANS.clear()
        _PLANS[key] = found
    return found


def _unbind_plans(asid: int, bo_id: int, released) -> None:
    # A bound call holds views of the buffers it ran on: drop them all, so a released
    # buffer is unmapped now (also one the IOTLB had already evicted, which ``released``
    # does not list). The decoded fields hold no device memory: they stay until a whole
    # ASID is invalidated (a context closed), which empties this cache (by_contents).
    for p in _PLANS.values():
        p.bound = None


caches.register("plans", "decoded descriptors by their bytes, and the C kernels' bound calls "
                "(which hold views of the operands' buffers: dropped on every invalidation)",
                _unbind_plans, _PLANS.clear, entries=lambda: len(_PLANS), by_contents=True)
