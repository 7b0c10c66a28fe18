"""The chip's registries: one unit per opcode, one list of caches."""
from __future__ import annotations

from firmware_sim import caches, executor, units
from firmware_sim.spec import ops, tasks


def test_every_compute_opcode_has_one_unit_named_as_its_descriptor() -> None:
    opcodes = {v for k, v in vars(ops).items() if k.startswith("OP_")} | {tasks.OP_FULLY_CONNECTED}
    assert set(units.UNITS) == opcodes
    for opcode, unit in units.UNITS.items():
        assert unit.name == tasks.TASK_TYPES[opcode].name
        assert executor.HANDLERS[opcode] is units.HANDLERS[opcode]


def test_descriptor_names_are_the_tflite_operator_names() -> None:
    for name in ("CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D",
                 "CONCATENATION", "RESIZE_NEAREST_NEIGHBOR", "FULLY_CONNECTED"):
        assert tasks.TASK_BY_NAME[name].opcode == getattr(ops, f"OP_{name}", tasks.OP_FULLY_CONNECTED)


def test_every_cache_is_registered_once() -> None:
    names = [c.name for c in caches.registered()]
    assert names[0] == "iotlb"
    assert {"plans", "costs", "weight_cache", "binary_table", "requant_plans"} <= set(names)
    assert len(names) == len(set(names))
