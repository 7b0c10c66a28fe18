"""One IR op as one chip task descriptor: what an operator's ``lower`` returns
(:class:`Emitted`), the helpers it gets (:class:`Lowering`), and :func:`lower_op`, which
runs the op's kernel parameters (``qparams.op_params``), its operator's ``lower``
(``compiler.ops``) and the encoding (``npu_hw``): the address fields left 0,
one relocation per address, filled in at load time. :mod:`libnpu.compiler.lower` walks a
graph with it; :mod:`libnpu.compiler.placement` asks it whether the chip takes an op.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npu_hw import ops as spec_ops
from npu_hw import tasks as spec_tasks

from ..loadable import Reloc
from . import registry
from .ir import Graph, IRError, Op
from .memplan import MemoryPlan
from .qparams import op_params

__all__ = ["LoweringError", "Emitted", "Lowering", "pad_rank", "int16_flags", "lower_op"]


class LoweringError(IRError):
    """An op cannot be expressed as chip tasks."""


def pad_rank(shape, rank: int = spec_ops.MAX_RANK) -> list[int]:
    """A shape as a descriptor's ``u32[MAX_RANK]`` field (unused trailing entries 0)."""
    shape = [int(d) for d in shape]
    if len(shape) > rank:
        raise LoweringError(f"rank {len(shape)} exceeds the chip's {rank}")
    return shape + [0] * (rank - len(shape))


@dataclass
class Emitted:
    """One descriptor to encode: what an operator's ``lower`` returns."""
    name: str                      # descriptor type name in spec.tasks
    flags: int
    fields: dict[str, Any]
    addresses: dict[str, str]      # descriptor field -> tensor name
    extra: dict[str, Any] = field(default_factory=dict)  # field -> (region, offset) of lowering constants


class Lowering:
    """What an operator's ``lower`` gets: the graph, the memory plan and helpers."""

    def __init__(self, graph: Graph, plan: MemoryPlan) -> None:
        self.g, self.plan = graph, plan

    def shape(self, name: str) -> tuple[int, ...]:
        """``name``'s shape as the chip's descriptors take it: a scalar (rank 0, which the
        chip refuses: ranks are 1..MAX_RANK) is a 1-vector, the same single element."""
        return self.g.tensors[name].shape or (1,)

    def const(self, op: Op, what: str, data: np.ndarray) -> tuple[int, int]:
        p = self.plan.add_constant(f"{op.name}/{what}", data)
        return p.region, p.offset

    def emit(self, name: str, op: Op, fields: dict, flags: int = 0, extra: dict | None = None) -> Emitted:
        """A one-input, one-output descriptor reading ``op.inputs[0]``, writing its output."""
        return Emitted(name, flags, fields, dict(input=op.inputs[0], output=op.outputs[0]), extra or {})

    def flat(self, name: str, op: Op, fields: dict, extra: dict | None = None) -> Emitted:
        """A flat elementwise descriptor (``count`` elements)."""
        return self.emit(name, op, dict(fields, count=self.g.tensors[op.inputs[0]].size), extra=extra)

    def weighted(self, name: str, op: Op, fields: dict, flags: int = 0,
                 extra: dict | None = None) -> Emitted:
        """A descriptor reading ``op``'s input, weights and optional bias, writing its output."""
        addresses = dict(input=op.inputs[0], weights=op.inputs[1], output=op.outputs[0])
        if len(op.inputs) > 2 and op.inputs[2]:
            addresses["bias"] = op.inputs[2]
        return Emitted(name, flags, fields, addresses, extra or {})

    def convolution(self, name: str, op: Op, fields: dict, p: dict) -> Emitted:
        """A convolution-family descriptor: one requantization in ``fields``, or per-channel
        multipliers and shifts as lowering constants (``OPF_PER_CHANNEL``)."""
        mult, shift = p["multiplier"], p["shift"]
        if mult.size > 1:
            extra = dict(mult_iova=self.const(op, "multiplier", mult), shift_iova=self.const(op, "shift", shift))
            return self.weighted(name, op, fields, spec_ops.OPF_PER_CHANNEL, extra)
        return self.weighted(name, op, dict(fields, multiplier=int(mult[0]), shift=int(shift[0])))


def int16_flags(graph: Graph, op: Op, descriptor: str) -> int:
    """The descriptor flags that make the chip run ``op`` on int16 activations: its integer
    tensors are int16 (``OPF_INT16``); REQUANTIZE marks each side (``OPF_INT16`` the
    output, ``OPF_INT16_INPUT`` the input); int16 weights of an op with weights add
    ``OPF_WEIGHTS16`` (a16w16, only with int16 activations)."""
    data_in = [graph.tensors[n].dtype for n in op.inputs if n and not graph.tensors[n].is_constant]
    data_out = [graph.tensors[n].dtype for n in op.outputs]
    if descriptor == "REQUANTIZE":
        return ((spec_ops.OPF_INT16 if "int16" in data_out else 0)
                | (spec_ops.OPF_INT16_INPUT if "int16" in data_in else 0))
    flags = spec_ops.OPF_INT16 if "int16" in data_in + data_out else 0
    if registry.get(op.type, "weight_axis") is not None and graph.tensors[op.inputs[1]].dtype == "int16":
        if not flags:
            raise LoweringError(f"{op.describe()}: int16 weights need int16 activations")
        flags |= spec_ops.OPF_WEIGHTS16
    return flags


def _encode(e: Emitted, plan: MemoryPlan) -> tuple[bytes, list[Reloc]]:
    """The descriptor's bytes (address fields 0) and its relocations."""
    task_type = spec_tasks.TASK_BY_NAME[e.name]
    try:
        payload = spec_tasks.encode_task(e.name, e.flags, **e.fields)
    except (KeyError, ValueError, OverflowError) as exc:
        raise LoweringError(f"{e.name}: cannot encode descriptor: {exc}") from exc
    relocs = [plan.reloc(tensor, task_type.dtype.fields[f][1]) for f, tensor in e.addresses.items()]
    relocs += [Reloc(task_type.dtype.fields[f][1], region, offset) for f, (region, offset) in e.extra.items()]
    return payload, relocs


def lower_op(low: Lowering, op: Op) -> tuple[int, bytes, list[Reloc]] | None:
    """``op`` of ``low.g`` as the chip runs it: (opcode, descriptor bytes, relocations), or
    None for an op that needs no task (a RESHAPE aliasing its input). Raises what the
    kernel parameters, the operator's ``lower`` or the encoding refuse (:class:`LoweringError`)."""
    emitted = registry.get(op.type, "lower")(low, op, op_params(low.g, op))
    if emitted is None:
        return None
    emitted.flags |= int16_flags(low.g, op, emitted.name)
    payload, relocs = _encode(emitted, low.plan)
    return spec_tasks.TASK_BY_NAME[emitted.name].opcode, payload, relocs
