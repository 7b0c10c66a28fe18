"""Compute descriptors end to end: libnpu builds them in device memory, the FUSE driver
submits the job, the simulated chip runs them; results equal the kernels' (which equal
LiteRT's reference kernels)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import activations, conv, pooling
from npu_hw import ops
from npu_hw.fixedpoint import LUT_LOGISTIC, activation_lut, quantize_multiplier_array, softmax_params
from tests.support.quant_utils import random_int8


def test_conv_logistic_pool_softmax_job(device) -> None:
    rng = np.random.default_rng(42)
    x = random_int8(rng, (1, 16, 16, 8))
    w = random_int8(rng, (16, 3, 3, 8))
    bias = rng.integers(-2000, 2000, 16).astype(np.int32)
    mult, shift = quantize_multiplier_array(rng.uniform(0.001, 0.004, 16))
    lut = activation_lut(LUT_LOGISTIC, 0.05, 3, 1 / 256, -128)
    sm = softmax_params(1.0, 1 / 256)
    # Expected, straight from the kernels.
    y = conv.conv2d(x, w, bias, stride=(1, 1), dilation=(1, 1), padding=(1, 1), out_hw=(16, 16),
                    input_zp=-1, output_zp=3, multiplier=mult, shift=shift)
    y = activations.lut_lookup(y, lut)
    y = pooling.max_pool2d(y, filter_hw=(2, 2), stride=(2, 2), padding=(0, 0), out_hw=(8, 8))
    expected = activations.softmax(y.reshape(64, 16), input_beta_multiplier=sm[0],
                                   input_beta_left_shift=sm[1], diff_min=sm[2])

    def put(array: np.ndarray):
        mem = device.alloc_mem(max(array.nbytes, 64))
        mem.view[:array.nbytes] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return mem

    bufs = {name: put(a) for name, a in dict(x=x, w=w, bias=bias, mult=mult, shift=shift,
                                              lut=lut).items()}
    a = device.alloc_mem(16 * 16 * 16)
    b = device.alloc_mem(16 * 16 * 16)
    cmds = device.command_buffer()
    cmds.add("CONV_2D", ops.OPF_PER_CHANNEL, input=bufs["x"].address, weights=bufs["w"].address,
             bias=bufs["bias"].address, output=a.address, mult_iova=bufs["mult"].address,
             shift_iova=bufs["shift"].address, in_shape=(1, 16, 16, 8),
             out_shape=(1, 16, 16, 16), filter_hw=(3, 3), stride=(1, 1), dilation=(1, 1),
             padding=(1, 1), cin_per_group=8, input_zp=-1, output_zp=3, act_min=-128,
             act_max=127)
    cmds.add("LUT", input=a.address, output=b.address, count=16 * 16 * 16,
             lut=bufs["lut"].address)
    cmds.add("MAX_POOL_2D", input=b.address, output=a.address, in_shape=(1, 16, 16, 16),
             out_shape=(1, 8, 8, 16), filter_hw=(2, 2), stride=(2, 2), padding=(0, 0),
             act_min=-128, act_max=127)
    cmds.add("SOFTMAX", input=a.address, output=b.address, rows=64, depth=16,
             input_beta_multiplier=sm[0], input_beta_left_shift=sm[1], diff_min=sm[2])
    fence = device.run(cmds, [*bufs.values(), a, b])
    assert fence.status == 0
    np.testing.assert_array_equal(b.array(np.int8, (64, 16)), expected)
