"""The math unit's handlers: descriptors in DMA memory, run by the real job executor, give
what the kernels give; impossible fields fail the job with EINVAL (the core keeps running)."""
from __future__ import annotations

import errno

import numpy as np

from firmware_sim.kernels import binary, normalization, unary
from libnpu.compiler.ops import binary as binary_params
from libnpu.compiler.ops import unary as unary_params
from libnpu.compiler.ops.normalization import log_softmax_params
from npu_hw import fixedpoint as fp
from tests.support.chip_memory import ChipMemory, encode
from tests.support.quant_utils import random_int8

from .test_ops_exec import ranked, run_ok


def test_math_handlers(mem: ChipMemory) -> None:
    rng = np.random.default_rng(5)
    a, b = random_int8(rng, (2, 3, 4)), random_int8(rng, (1, 3, 1))
    zps = dict(input1_zp=1, input2_zp=-2, output_zp=3)
    b_nonzero = np.where(b == -2, np.int8(5), b).astype(np.int8)
    binaries = {
        "PRELU": (binary.prelu, binary_params.prelu_params(0.05, 0.02, 0.04), b),
        "SQUARED_DIFFERENCE": (binary.squared_difference, binary_params.squared_difference_params(0.05, 0.03, 0.5), b),
        "SUB": (binary.sub, dict(fp.add_params(0.05, 0.03, 0.06), act_min=-128, act_max=127), b),
        "MAXIMUM": (binary.maximum, {}, b),
        "MINIMUM": (binary.minimum, {}, b),
        "DIV": (binary.div, dict(binary_params.div_params(0.05, 0.03, 0.2), act_min=-128, act_max=127), b_nonzero),
    }
    flat = a.reshape(-1)
    unaries = {
        "HARD_SWISH": (unary.hard_swish, unary_params.hard_swish_params(0.05, 1, 0.04, -3)),
        "LEAKY_RELU": (unary.leaky_relu,
                       dict(input_zp=1, output_zp=2, **unary_params.leaky_relu_params(0.05, 0.2, 0.04))),
        "RSQRT": (unary.rsqrt, dict(input_zp=-128, output_zp=-100, **unary_params.rsqrt_params(0.05, 0.1))),
        "ABS": (unary.abs_, dict(input_zp=1, output_zp=-128, **unary_params.abs_params(0.05, 0.03))),
    }
    ia, descs, expected = mem.put(a), [], []
    for name, (kernel, params, second) in binaries.items():
        out = mem.alloc(64)
        expected.append((out, kernel(a, second, **zps, **params)))
        descs.append(encode(name, input1=ia, input2=mem.put(second), output=out, rank=3, in1_shape=ranked(a.shape),
                            in2_shape=ranked(b.shape), out_shape=ranked(a.shape), **zps, **params))
    for name, (kernel, params) in unaries.items():
        out = mem.alloc(64)
        expected.append((out, kernel(flat, **params)))
        descs.append(encode(name, input=ia, output=out, count=flat.size, **params))
    out = mem.alloc(64)
    expected.append((out, normalization.l2_normalization(a.reshape(6, 4), input_zp=1)))
    descs.append(encode("L2_NORMALIZATION", input=ia, output=out, rows=6, depth=4, input_zp=1))
    out = mem.alloc(64)
    ls = log_softmax_params(0.05)
    expected.append((out, normalization.log_softmax(a.reshape(4, 6), **ls)))
    descs.append(encode("LOG_SOFTMAX", input=ia, output=out, rows=4, depth=6, **ls))
    run_ok(mem, *descs)
    for iova, exp in expected:
        np.testing.assert_array_equal(mem.get(iova, np.int8, exp.shape), exp)


def test_bad_math_descriptors_fail_the_job_cleanly(mem: ChipMemory) -> None:
    ix = mem.put(np.zeros(64, np.int8))
    out = mem.alloc(64)
    shapes = dict(rank=1, in1_shape=ranked((4,)), in2_shape=ranked((4,)), out_shape=ranked((4,)))
    bad = [
        encode("PRELU", input1=ix, input2=ix, output=out, **shapes, input1_zp=300),
        encode("MAXIMUM", input1=ix, input2=ix, output=out, rank=1, in1_shape=ranked((4,)),
               in2_shape=ranked((3,)), out_shape=ranked((4,))),
        encode("SUB", input1=ix, input2=ix, output=out, **shapes, left_shift=40),
        encode("DIV", input1=ix, input2=ix, output=out, **shapes, act_min=5, act_max=-5),
        encode("HARD_SWISH", input=ix, output=out, count=64, output_shift=3),
        encode("LEAKY_RELU", input=ix, output=out, count=64, shift_alpha=99),
        encode("RSQRT", input=ix, output=out, count=1 << 40),
        encode("L2_NORMALIZATION", input=ix, output=out, rows=0, depth=4),
        encode("LOG_SOFTMAX", input=ix, output=out, rows=4, depth=4, input_left_shift=40),
    ]
    for desc in bad:
        assert mem.run(desc).status == -errno.EINVAL
    assert mem.run(encode("ABS", input=ix, output=out, count=64)).status == 0  # still running
