"""``npu_tasks.h``: the chip's task descriptor formats for C, generated from npu_hw.

One ``struct npu_task_<name>`` per registered task type (``npu_hw.tasks`` and ``npu_hw.ops``),
its ``NPU_OP_<NAME>`` opcode and ``NPU_TASK_<NAME>_SIZE``, the descriptor flags and
geometry constants. The numpy dtypes of the spec are the source: each field becomes a
C member at the same offset (explicit padding members where numpy's aligned layout
leaves a gap), and static asserts on every offset and size make the C (or C++) compiler
confirm the layout whenever the header is compiled.

The header is generated, not stored: ``libnpu.capi.nvdla.build()`` writes it next to
the library it builds (an opcode added to the spec appears in the next build), and
``python -m libnpu.capi.tasks_header`` prints it.
"""
from __future__ import annotations

import numpy as np

from npu_hw import ops, tasks

__all__ = ["render"]

_C_TYPES = {"<u2": "uint16_t", "<u4": "uint32_t", "<u8": "uint64_t", "<i2": "int16_t", "<i4": "int32_t",
            "<i8": "int64_t", "<f4": "float", "<f8": "double", "|u1": "uint8_t", "|i1": "int8_t"}

# Constants a descriptor's fields take, by the spec's names.
_CONSTANTS = [("OPF_PER_CHANNEL", ops.OPF_PER_CHANNEL), ("OPF_ALIGN_CORNERS", ops.OPF_ALIGN_CORNERS),
              ("OPF_HALF_PIXEL_CENTERS", ops.OPF_HALF_PIXEL_CENTERS), ("OPF_KEEP_DIMS", ops.OPF_KEEP_DIMS),
              ("FC_PER_CHANNEL", tasks.FC_PER_CHANNEL), ("FC_DOUBLE_SCALE", tasks.FC_DOUBLE_SCALE),
              ("PADDING_SAME", ops.PADDING_SAME), ("PADDING_VALID", ops.PADDING_VALID),
              ("MAX_RANK", ops.MAX_RANK), ("CONCAT_MAX_INPUTS", ops.CONCAT_MAX_INPUTS)]


def _member(name: str, dtype: np.dtype) -> tuple[str, str]:
    """(C type, declarator) of one field."""
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return _C_TYPES[base.str], name + "".join(f"[{n}]" for n in shape)
    return _C_TYPES[dtype.str], name


def _struct(task: tasks.TaskType) -> list[str]:
    name = task.name.lower()
    lines = [f"/* {task.name}: opcode {task.opcode:#04x}, {task.size} bytes */", f"struct npu_task_{name} {{"]
    checks = []
    at, pads = 0, 0
    fields = sorted(task.dtype.fields.items(), key=lambda item: item[1][1])
    for field, (dtype, offset, *_) in fields:
        if offset > at:
            lines.append(f"\tuint8_t pad{pads}[{offset - at}];")
            pads += 1
        ctype, declarator = _member(field, dtype)
        lines.append(f"\t{ctype} {declarator};")
        checks.append(f"NPU_TASKS_ASSERT(offsetof(struct npu_task_{name}, {field}) == {offset}, "
                      f"\"{task.name}.{field}\");")
        at = offset + dtype.itemsize
    if task.size > at:
        lines.append(f"\tuint8_t pad{pads}[{task.size - at}];")
    lines.append("};")
    checks.append(f"NPU_TASKS_ASSERT(sizeof(struct npu_task_{name}) == {task.size}, \"{task.name} size\");")
    return lines + checks + [""]


def render() -> str:
    """The header's text."""
    out = ["/* npu_tasks.h - the emulated NPU's task descriptors (GENERATED from npu_hw by",
           " * libnpu/capi/tasks_header.py; do not edit).",
           " *",
           " * A command buffer is these descriptors laid end to end; each starts with opcode, size",
           " * (= NPU_TASK_<NAME>_SIZE) and flags. Operands are device addresses (IOVAs) of the",
           " * submitting context; see npu_hw/tasks.py and ops.py for every field's meaning.",
           " */",
           "#ifndef NPU_TASKS_H", "#define NPU_TASKS_H", "", "#include <stddef.h>", "#include <stdint.h>", "",
           "#ifdef __cplusplus", "#define NPU_TASKS_ASSERT static_assert", "#else",
           "#define NPU_TASKS_ASSERT _Static_assert", "#endif", ""]
    out += [f"#define NPU_{name} {value:#x}" for name, value in _CONSTANTS] + [""]
    for task in sorted(tasks.TASK_TYPES.values(), key=lambda t: t.opcode):
        out.append(f"#define NPU_OP_{task.name} {task.opcode:#04x}")
        out.append(f"#define NPU_TASK_{task.name}_SIZE {task.size}")
    out.append("")
    for task in sorted(tasks.TASK_TYPES.values(), key=lambda t: t.opcode):
        out += _struct(task)
    out += ["#undef NPU_TASKS_ASSERT", "", "#endif /* NPU_TASKS_H */", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
