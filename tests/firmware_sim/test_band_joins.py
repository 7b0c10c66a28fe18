"""firmware_sim.band_joins: a layer's row bands and runs joined back into the layer's own task."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim import band_joins
from libnpu.compiler.lower import compile_model
from npu_hw import ops, tasks
from npu_hw.iommu import IOVA_BASE
from tests.support.chip_memory import ASID, ChipMemory
from tests.support.diamond import diamond_calibration, diamond_model, strided_model


@pytest.fixture(scope="module")
def compiled():
    model, calibration = diamond_model(), diamond_calibration()
    return (compile_model(model, calibration, recipe="fast"),
            compile_model(model, calibration, recipe="fast", tiles=2))


def _decoded(loadable) -> list[tuple[int, np.void]]:
    bases = [0x100000 * (i + 1) for i in range(len(loadable.regions))]
    command = np.frombuffer(loadable.command_buffer(bases), np.uint8)
    return [(task.opcode, desc) for _, task, desc in tasks.decode_tasks(command)]


def test_the_bands_join_into_the_layers_own_descriptors(compiled):
    whole, split = compiled
    layers, bands = _decoded(whole), _decoded(split)
    assert len(bands) > len(layers)
    steps = [(i, i) for i in range(len(bands))]
    joined = band_joins.join_steps(steps, dict(enumerate(bands)), [t.deps for t in split.tasks],
                                   lambda opcode, desc: (opcode, desc))
    assert joined is not None and len(joined) == len(layers)
    for (index, step), (opcode, layer) in zip(joined, layers, strict=True):
        got_opcode, got = step if isinstance(step, tuple) else bands[index]
        assert got_opcode == opcode
        assert all(np.array_equal(got[name], layer[name]) for name in layer.dtype.names)


def test_bands_that_do_not_meet_stay_apart(compiled):
    _, split = compiled
    bands = _decoded(split)
    at = next(i for i, (opcode, _) in enumerate(bands) if opcode == ops.OP_CONV_2D)
    first, second = bands[at][1], bands[at + 1][1]
    assert band_joins.join(ops.OP_CONV_2D, first, second) is not None
    shifted = np.array([second], dtype=second.dtype)
    shifted["output"] += 1                       # not where the first band ends
    assert band_joins.join(ops.OP_CONV_2D, first, shifted[0]) is None
    other = np.array([second], dtype=second.dtype)
    other["output_zp"] += 1                      # another layer's field
    assert band_joins.join(ops.OP_CONV_2D, first, other[0]) is None
    padded = np.array([second], dtype=second.dtype)
    padded["padding"][0, 0] = 1                  # a top padding of its own
    assert band_joins.join(ops.OP_CONV_2D, first, padded[0]) is None


def test_bands_that_skip_a_row_join_only_where_the_chip_may_read_it(tmp_path):
    """A stride-2 1x1 conv's bands read every other row: the row between them joins the read
    (as the untiled layer's task reads it) only if the context lets the chip read it."""
    model, calibration = strided_model()
    bands = [desc for opcode, desc in _decoded(compile_model(model, calibration, recipe="fast", tiles=2))
             if opcode == ops.OP_CONV_2D]
    assert len(bands) == 2
    first, second = bands
    asked: list[tuple[int, int]] = []

    def allowed(iova: int, nbytes: int) -> bool:
        asked.append((iova, nbytes))
        return True
    assert band_joins.join(ops.OP_CONV_2D, first, second) is None
    assert band_joins.join(ops.OP_CONV_2D, first, second, lambda iova, nbytes: False) is None
    joined = band_joins.join(ops.OP_CONV_2D, first, second, allowed)
    assert joined is not None
    row = int(first["in_shape"][2]) * int(first["in_shape"][3])
    assert asked == [(int(first["input"]) + int(first["in_shape"][1]) * row, int(second["input"]) - int(first["input"])
                      - int(first["in_shape"][1]) * row)] and asked[0][1] == row
    assert int(joined["out_shape"][1]) == 16 and int(joined["input"]) == int(first["input"])
    mem = ChipMemory(tmp_path, size=1 << 16)
    can_read = band_joins.readable(mem.dma)
    mem.dma.bind(ASID)
    assert can_read(mem.alloc(4096), 4096) and not can_read(IOVA_BASE + (1 << 16), 4096)
