"""Lowering: an int8 IR graph -> chip task descriptors -> a loadable.

A walk over the ops in topological order. For each op, ``qparams.op_params`` gives the
kernel parameters, the memory plan gives every operand's (region, offset), and the op's
descriptor (``firmware_sim.spec.tasks`` / ``spec.ops``) is encoded with its address
fields left 0 and one relocation per address, filled in at load time. Per-channel
multipliers, LUTs and CONCAT's tables are appended to the weights region.

Dependencies list, for each task, the earlier tasks it must follow: the producers of
its inputs and every earlier task touching bytes it overwrites (the arena reuses
memory), so a scheduler may run independent tasks in any order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import os
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from firmware_sim.spec import ops as spec_ops
from firmware_sim.spec import tasks as spec_tasks

from ..loadable import Loadable, Reloc, Task
from .frontend import check_int8
from .ir import Graph, IRError, Op
from .memplan import MemoryPlan, plan_memory
from .qparams import op_params

__all__ = ["LoweringError", "lower", "compile_model"]


class LoweringError(IRError):
    """An op cannot be expressed as chip tasks."""


def _pad_rank(shape, rank: int = spec_ops.MAX_RANK) -> list[int]:
    shape = [int(d) for d in shape]
    if len(shape) > rank:
        raise LoweringError(f"rank {len(shape)} exceeds the chip's {rank}")
    return shape + [0] * (rank - len(shape))


@dataclass
class _Emitted:
    name: str                      # descriptor type name in spec.tasks
    flags: int
    fields: dict[str, Any]
    addresses: dict[str, str]      # descriptor field -> tensor name
    extra: dict[str, Any] = field(default_factory=dict)  # field -> (region, offset) of lowering constants


class _Lowering:
    def __init__(self, graph: Graph, plan: MemoryPlan) -> None:
        self.g, self.plan = graph, plan

    def shape(self, name: str) -> tuple[int, ...]:
        return self.g.tensors[name].shape

    def const(self, op: Op, what: str, data: np.ndarray) -> tuple[int, int]:
        p = self.plan.add_constant(f"{op.name}/{what}", data)
        return p.region, p.offset

    # one method per op family ---------------------------------------------------------
    def conv(self, op: Op, p: dict) -> _Emitted:
        x, w = self.shape(op.inputs[0]), self.shape(op.inputs[1])
        out = self.shape(op.outputs[0])
        depthwise = op.type == "DEPTHWISE_CONV_2D"
        fields = dict(in_shape=x, out_shape=out, filter_hw=w[1:3], stride=p["stride"], dilation=p["dilation"],
                      padding=p["padding"], cin_per_group=1 if depthwise else w[3],
                      input_zp=p["input_zp"], output_zp=p["output_zp"], act_min=p["act_min"], act_max=p["act_max"])
        flags, extra = 0, {}
        mult, shift = p["multiplier"], p["shift"]
        if mult.size > 1:
            flags |= spec_ops.OPF_PER_CHANNEL
            extra = dict(mult_iova=self.const(op, "multiplier", mult), shift_iova=self.const(op, "shift", shift))
        else:
            fields.update(multiplier=int(mult[0]), shift=int(shift[0]))
        addresses = dict(input=op.inputs[0], weights=op.inputs[1], output=op.outputs[0])
        if len(op.inputs) > 2 and op.inputs[2]:
            addresses["bias"] = op.inputs[2]
        return _Emitted("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", flags, fields, addresses, extra)

    def fully_connected(self, op: Op, p: dict) -> _Emitted:
        n, k = self.shape(op.inputs[1])
        rows = self.g.tensors[op.inputs[0]].size // k
        fields = dict(rows=rows, in_features=k, out_features=n, input_zp=p["input_zp"],
                      output_zp=p["output_zp"], act_min=p["act_min"], act_max=p["act_max"])
        flags, extra = spec_tasks.FC_DOUBLE_SCALE, {}
        mult, shift, scale = p["multiplier"], p["shift"], np.asarray(p["scale"], np.float64)
        if mult.size > 1:
            flags |= spec_tasks.FC_PER_CHANNEL
            extra = dict(mult_iova=self.const(op, "multiplier", mult), shift_iova=self.const(op, "shift", shift),
                         scale_iova=self.const(op, "scale", scale))
        else:
            fields.update(multiplier=int(mult[0]), shift=int(shift[0]), scale=float(scale[0]))
        addresses = dict(input=op.inputs[0], weights=op.inputs[1], output=op.outputs[0])
        if len(op.inputs) > 2 and op.inputs[2]:
            addresses["bias"] = op.inputs[2]
        return _Emitted("FULLY_CONNECTED", flags, fields, addresses, extra)

    def binary(self, op: Op, p: dict) -> _Emitted:
        out = self.shape(op.outputs[0])
        rank = len(out)
        shapes = [(1,) * (rank - len(self.shape(i))) + tuple(self.shape(i)) for i in op.inputs]
        fields = dict(p, rank=rank, in1_shape=_pad_rank(shapes[0]), in2_shape=_pad_rank(shapes[1]),
                      out_shape=_pad_rank(out))
        return _Emitted(op.type, 0, fields, dict(input1=op.inputs[0], input2=op.inputs[1], output=op.outputs[0]))

    def pool(self, op: Op, p: dict) -> _Emitted:
        fields = dict(in_shape=self.shape(op.inputs[0]), out_shape=self.shape(op.outputs[0]),
                      filter_hw=p["filter_hw"], stride=p["stride"], padding=p["padding"],
                      act_min=p["act_min"], act_max=p["act_max"])
        name = "MAX_POOL_2D" if op.type == "MAX_POOL_2D" else "AVERAGE_POOL_2D"
        return _Emitted(name, 0, fields, dict(input=op.inputs[0], output=op.outputs[0]))

    def mean(self, op: Op, p: dict) -> _Emitted:
        shape = self.shape(op.inputs[0])
        fields = dict(rank=len(shape), in_shape=_pad_rank(shape), axes_mask=sum(1 << a for a in p["axes"]),
                      input_zp=p["input_zp"], output_zp=p["output_zp"], multiplier=p["multiplier"],
                      shift=p["shift"])
        return _Emitted("MEAN", spec_ops.OPF_KEEP_DIMS if p["keep_dims"] else 0, fields,
                        dict(input=op.inputs[0], output=op.outputs[0]))

    def flat(self, name: str, op: Op, fields: dict, extra: dict | None = None) -> _Emitted:
        fields = dict(fields, count=self.g.tensors[op.inputs[0]].size)
        return _Emitted(name, 0, fields, dict(input=op.inputs[0], output=op.outputs[0]), extra or {})

    def relu(self, op: Op, p: dict) -> _Emitted:
        return self.flat("RELU", op, p)

    def lut(self, op: Op, p: dict) -> _Emitted:
        return self.flat("LUT", op, {}, dict(lut=self.const(op, "lut", p["lut"])))

    def quantize(self, op: Op, p: dict) -> _Emitted:
        float_in = self.g.tensors[op.inputs[0]].dtype == "float32"
        return self.flat("QUANTIZE" if float_in else "REQUANTIZE", op, p)

    def dequantize(self, op: Op, p: dict) -> _Emitted:
        return self.flat("DEQUANTIZE", op, p)

    def softmax(self, op: Op, p: dict) -> _Emitted:
        shape = self.shape(op.inputs[0])
        fields = dict(p, rows=int(np.prod(shape[:-1], dtype=np.int64)), depth=shape[-1])
        return _Emitted("SOFTMAX", 0, fields, dict(input=op.inputs[0], output=op.outputs[0]))

    def concat(self, op: Op, p: dict) -> _Emitted:
        out = self.shape(op.outputs[0])
        axis = p["axis"]
        sizes = np.asarray([self.shape(i)[axis] for i in op.inputs], np.uint32)
        table = self.plan.add_address_table(f"{op.name}/inputs", list(op.inputs))
        fields = dict(num_inputs=len(op.inputs), outer=int(np.prod(out[:axis], dtype=np.int64)),
                      inner=int(np.prod(out[axis + 1:], dtype=np.int64)), axis_total=out[axis])
        extra = dict(inputs_iova=(table.region, table.offset), sizes_iova=self.const(op, "sizes", sizes))
        return _Emitted("CONCATENATION", 0, fields, dict(output=op.outputs[0]), extra)

    def reshape(self, op: Op, p: dict) -> _Emitted | None:
        src, dst = self.plan.placements[op.inputs[0]], self.plan.placements[op.outputs[0]]
        if src == dst:
            return None  # aliased by the memory plan: same bytes, nothing to do
        return _Emitted("RESHAPE", 0, dict(count=self.g.tensors[op.inputs[0]].nbytes),
                        dict(input=op.inputs[0], output=op.outputs[0]))

    def transpose(self, op: Op, p: dict) -> _Emitted:
        shape = self.shape(op.inputs[0])
        fields = dict(rank=len(shape), in_shape=_pad_rank(shape), perm=_pad_rank(p["perm"]))
        return _Emitted("TRANSPOSE", 0, fields, dict(input=op.inputs[0], output=op.outputs[0]))

    def pad(self, op: Op, p: dict) -> _Emitted:
        shape = self.shape(op.inputs[0])
        fields = dict(rank=len(shape), in_shape=_pad_rank(shape),
                      pad_before=_pad_rank([a for a, _ in p["paddings"]]),
                      pad_after=_pad_rank([b for _, b in p["paddings"]]), pad_value=p["pad_value"])
        return _Emitted("PAD", 0, fields, dict(input=op.inputs[0], output=op.outputs[0]))

    def strided_slice(self, op: Op, p: dict) -> _Emitted:
        shape = self.shape(op.inputs[0])
        fields = dict(rank=len(shape), in_shape=_pad_rank(shape), begin=_pad_rank(p["begin"]),
                      end=_pad_rank(p["end"]), strides=_pad_rank(p["strides"]),
                      end_mask=p["end_mask"], shrink_axis_mask=p["shrink_axis_mask"])
        return _Emitted("STRIDED_SLICE", 0, fields, dict(input=op.inputs[0], output=op.outputs[0]))

    def resize(self, op: Op, p: dict) -> _Emitted:
        flags = (spec_ops.OPF_ALIGN_CORNERS if p["align_corners"] else 0) | \
                (spec_ops.OPF_HALF_PIXEL_CENTERS if p["half_pixel_centers"] else 0)
        name = "RESIZE_BILINEAR" if op.type == "RESIZE_BILINEAR" else "RESIZE_NEAREST_NEIGHBOR"
        return _Emitted(name, flags, dict(in_shape=self.shape(op.inputs[0]), out_hw=p["out_hw"]),
                        dict(input=op.inputs[0], output=op.outputs[0]))


_DISPATCH: dict[str, Callable[[_Lowering, Op, dict], _Emitted | None]] = {
    "CONV_2D": _Lowering.conv, "DEPTHWISE_CONV_2D": _Lowering.conv,
    "FULLY_CONNECTED": _Lowering.fully_connected,
    "ADD": _Lowering.binary, "MUL": _Lowering.binary,
    "MAX_POOL_2D": _Lowering.pool, "AVERAGE_POOL_2D": _Lowering.pool,
    "MEAN": _Lowering.mean,
    "RELU": _Lowering.relu, "RELU6": _Lowering.relu, "RELU_N1_TO_1": _Lowering.relu,
    "LOGISTIC": _Lowering.lut, "TANH": _Lowering.lut,
    "QUANTIZE": _Lowering.quantize, "DEQUANTIZE": _Lowering.dequantize,
    "SOFTMAX": _Lowering.softmax,
    "CONCATENATION": _Lowering.concat,
    "RESHAPE": _Lowering.reshape,
    "TRANSPOSE": _Lowering.transpose,
    "PAD": _Lowering.pad,
    "STRIDED_SLICE": _Lowering.strided_slice,
    "RESIZE_BILINEAR": _Lowering.resize, "RESIZE_NEAREST_NEIGHBOR": _Lowering.resize,
}


def _encode(e: _Emitted, plan: MemoryPlan) -> tuple[bytes, list[Reloc]]:
    task_type = spec_tasks.TASK_BY_NAME[e.name]
    try:
        payload = spec_tasks.encode_task(e.name, e.flags, **e.fields)
    except (KeyError, ValueError, OverflowError) as exc:
        raise LoweringError(f"{e.name}: cannot encode descriptor: {exc}") from exc
    relocs = [plan.reloc(tensor, task_type.dtype.fields[f][1]) for f, tensor in e.addresses.items()]
    relocs += [Reloc(task_type.dtype.fields[f][1], region, offset) for f, (region, offset) in e.extra.items()]
    return payload, relocs


def _extents(plan: MemoryPlan, names: list[str]) -> list[tuple[int, int, int]]:
    out = []
    for n in names:
        p = plan.placements[n]
        out.append((p.region, p.offset, p.offset + max(p.nbytes, 1)))
    return out


def _overlaps(a: list[tuple[int, int, int]], b: list[tuple[int, int, int]]) -> bool:
    return any(r1 == r2 and s1 < e2 and s2 < e1 for r1, s1, e1 in a for r2, s2, e2 in b)


def lower(graph: Graph, *, metadata: dict[str, Any] | None = None) -> Loadable:
    """Compile an int8 graph (see :func:`frontend.check_int8`) into a loadable.

    A graph with no operators or no outputs, or whose operators all lower to nothing,
    is refused: its loadable would run no task and report success."""
    graph.check_runnable()
    check_int8(graph)
    plan = plan_memory(graph)
    _, index = plan.descriptors(graph)
    low = _Lowering(graph, plan)
    tasks: list[Task] = []
    producer: dict[str, int] = {}
    touched: list[tuple[list, list]] = []  # per task: (read extents, written extents)
    for op in graph.ops:
        emitted = _DISPATCH[op.type](low, op, op_params(graph, op))
        ins = [i for i in op.inputs if i and not graph.tensors[i].is_constant]
        if emitted is None:  # aliased RESHAPE: the output is ready when the input is
            if ins[0] in producer:
                producer[op.outputs[0]] = producer[ins[0]]
            continue
        payload, relocs = _encode(emitted, plan)
        reads, writes = _extents(plan, ins), _extents(plan, op.outputs)
        deps = {producer[i] for i in ins if i in producer}
        deps |= {j for j, (r, w) in enumerate(touched) if _overlaps(writes, r) or _overlaps(writes, w)}
        tasks.append(Task(op.name, op.type, spec_tasks.TASK_BY_NAME[emitted.name].opcode, payload,
                          deps=sorted(deps), tensors=[index[n] for n in op.inputs + op.outputs if n],
                          macs=graph.op_macs(op),
                          bytes_moved=sum(graph.tensors[n].nbytes for n in op.inputs + op.outputs if n),
                          relocs=relocs))
        touched.append((reads, writes))
        for o in op.outputs:
            producer[o] = len(tasks) - 1
    if not tasks:
        raise LoweringError(f"{graph.name}: no operator lowers to a chip task (all are aliased reshapes)")
    meta = dict(graph.metadata, **(metadata or {}))
    meta.update(arena_bytes=plan.arena_size, weights_bytes=plan.weights_size, macs=graph.macs())
    return plan.to_loadable(graph, tasks, {k: v for k, v in meta.items() if _jsonable(v)})


def _jsonable(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), list, dict))


def compile_model(model: str | os.PathLike | bytes | Graph,
                  dataset: Iterable[Mapping[str, np.ndarray] | Sequence[np.ndarray]] | None = None,
                  **quantize_options: Any) -> Loadable:
    """Model file (path/bytes) or graph -> int8 graph (quantized if needed) -> loadable."""
    from .frontend import to_int8_graph
    return lower(to_int8_graph(model, dataset, **quantize_options))

