"""The chip's registries: one unit per opcode, one list of caches."""
from __future__ import annotations

from firmware_sim import caches, executor, units
from npu_hw import ops, tasks


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
    assert {"plans", "costs", "weight_cache", "binary_table", "requant_plans", "job_plans"} <= set(names)
    assert len(names) == len(set(names))


def test_a_whole_asid_invalidation_empties_the_caches_keyed_by_contents(tmp_path) -> None:
    """A closed context (model unloaded) leaves no table, plan or cost behind: the core's
    memory goes back to its idle size. One buffer's invalidation keeps them."""
    import numpy as np

    from firmware_sim.dma import DmaEngine
    from firmware_sim.kernels import binary_table, elementwise

    a = np.arange(-64, 64, dtype=np.int8)
    params = dict(input1_zp=0, input2_zp=0, output_zp=0, multiplier=1 << 30, shift=-3)
    elementwise.mul(np.resize(a, 1 << 16), np.resize(a, 1 << 16), **params)  # big: a table at once
    assert binary_table._tables
    dma = DmaEngine(tmp_path)
    caches.invalidate(dma, asid=3, bo_id=7)
    assert binary_table._tables
    caches.invalidate(dma, asid=3)
    assert not binary_table._tables
