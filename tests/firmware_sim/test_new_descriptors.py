"""The descriptors of opcodes 0x50..0x58 with impossible fields fail their job with
EINVAL, and the core goes on to run the next job."""
from __future__ import annotations

import errno

import numpy as np

from tests.support.chip_memory import ChipMemory, encode, ranked


def test_bad_fields_fail_with_einval_and_the_core_carries_on(mem: ChipMemory) -> None:
    x = mem.put(np.arange(-12, 12, dtype=np.int8).reshape(2, 3, 4))
    out = mem.alloc(256)
    shape = dict(rank=3, in_shape=ranked((2, 3, 4)))
    good_sum = dict(input=x, output=out, **shape, axes_mask=0b010, input_zp=0, output_zp=0,
                    multiplier=1 << 30, shift=1)
    bad = [
        encode("SUM", **{**good_sum, "axes_mask": 0}),                      # no axis
        encode("SUM", **{**good_sum, "axes_mask": 0b1000}),                 # axis beyond the rank
        encode("SUM", **{**good_sum, "shift": 40}),
        encode("REDUCE_MAX", input=x, output=out, rank=7, in_shape=ranked((2, 3, 4)), axes_mask=1),
        encode("REDUCE_L2", input=x, output=out, **shape, axes_mask=1, scale=-1.0),
        encode("REDUCE_L2", input=x, output=out, **shape, axes_mask=1, scale=float("nan")),
        encode("BATCH_MATMUL", lhs=x, rhs=x, output=out, rank=3, lhs_shape=ranked((2, 3, 4)),
               rhs_shape=ranked((2, 3, 4)), multiplier=1 << 30, act_min=-128, act_max=127),   # depth 4 vs 3
        encode("BATCH_MATMUL", lhs=x, rhs=x, output=out, rank=1, lhs_shape=ranked((24,)), rhs_shape=ranked((24,)),
               multiplier=1 << 30, act_min=-128, act_max=127),
        encode("TRANSPOSE_CONV", input=x, weights=x, output=out, in_shape=(1, 2, 3, 4), out_shape=(1, 4, 6, 2),
               filter_hw=(2, 2), stride=(2, 2), dilation=(2, 2), multiplier=1 << 30, act_min=-128, act_max=127),
        encode("GATHER", input=x, output=out, indices_iova=x, outer=0, axis_size=3, inner=4, count=1),
        encode("ARG_MAX", input=x, output=out, **shape, axis=3),
        encode("ARG_MIN", input=x, output=out, rank=0, in_shape=ranked(()), axis=0),
    ]
    for k, desc in enumerate(bad):
        assert mem.run(desc).status == -errno.EINVAL, k
    assert mem.run(encode("SUM", **good_sum)).status == 0
    assert mem.get(out, np.int8, (2, 1, 4)).tolist() == [[[-24, -21, -18, -15]], [[12, 15, 18, 21]]]
    assert mem.run(encode("ARG_MAX", input=x, output=out, **shape, axis=1, flags=0)).status == 0
    assert mem.get(out, np.int32, (2, 4)).tolist() == [[2] * 4, [2] * 4]
