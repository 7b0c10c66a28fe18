"""Timing hints computed from descriptors."""
from __future__ import annotations

import numpy as np

from firmware_sim.units import UNITS, task_cost
from npu_hw import ops, tasks


def decode(blob: bytes) -> np.void:
    return next(tasks.decode_tasks(blob))[2]


def test_conv_depthwise_fc_macs_and_bytes() -> None:
    conv = decode(tasks.encode_task("CONV_2D", ops.OPF_PER_CHANNEL, in_shape=(1, 56, 56, 64),
                                    out_shape=(1, 56, 56, 128), filter_hw=(1, 1),
                                    cin_per_group=64, bias=1))
    assert task_cost(ops.OP_CONV_2D, conv) == (56 * 56 * 128 * 64,
                                              56 * 56 * 64 + 128 * 64 + 128 * 4 + 128 * 8
                                              + 56 * 56 * 128)
    dw = decode(tasks.encode_task("DEPTHWISE_CONV_2D", in_shape=(1, 112, 112, 32),
                                  out_shape=(1, 56, 56, 32), filter_hw=(3, 3)))
    assert task_cost(ops.OP_DEPTHWISE_CONV_2D, dw)[0] == 56 * 56 * 32 * 9
    fc = decode(tasks.encode_task("FULLY_CONNECTED", rows=1, in_features=1024,
                                  out_features=1000))
    assert task_cost(tasks.OP_FULLY_CONNECTED, fc) == (1024 * 1000, 1024 + 1024 * 1000 + 1000)
    fc_exact = decode(tasks.encode_task("FULLY_CONNECTED",
                                        tasks.FC_PER_CHANNEL | tasks.FC_DOUBLE_SCALE, rows=2,
                                        in_features=8, out_features=4, bias=1))
    assert task_cost(tasks.OP_FULLY_CONNECTED, fc_exact) == (64, 16 + 32 + 16 + 32 + 32 + 8)


def test_every_compute_opcode_has_a_cost_and_data_movement_no_macs() -> None:
    compute = {v for k, v in vars(ops).items() if k.startswith("OP_")}
    assert compute <= set(UNITS)
    tr = decode(tasks.encode_task("TRANSPOSE", rank=2, in_shape=[3, 5, 0, 0, 0, 0],
                                  perm=[1, 0, 0, 0, 0, 0]))
    assert task_cost(ops.OP_TRANSPOSE, tr) == (0, 30)
    sl = decode(tasks.encode_task("STRIDED_SLICE", rank=1, in_shape=[10, 0, 0, 0, 0, 0],
                                  begin=[0] * 6, end=[10, 0, 0, 0, 0, 0],
                                  strides=[2, 1, 1, 1, 1, 1]))
    assert task_cost(ops.OP_STRIDED_SLICE, sl) == (0, 10)
    assert task_cost(tasks.OP_NOP, decode(tasks.encode_task("NOP"))) == (0, 0)
