"""The activation unit: RELU (RELU / RELU6 / RELU_N1_TO_1 by their range), LUT (LOGISTIC,
TANH by their table) and SOFTMAX (descriptors: ``spec.ops``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import activations
from firmware_sim.spec import ops

from .common import Rerun, count, dims, unit
from .elementwise import flat_cost


@unit(ops.OP_RELU, flat_cost(1, 1))
def relu(desc: np.void, dma) -> None:
    n = count(desc)
    x = dma.read_array(int(desc["input"]), np.int8, (n,))
    out = dma.write_array(int(desc["output"]), np.int8, (n,))
    activations.relu_family(x, input_zp=int(desc["input_zp"]), output_zp=int(desc["output_zp"]),
                            multiplier=int(desc["multiplier"]), shift=int(desc["shift"]),
                            act_min=int(desc["act_min"]), act_max=int(desc["act_max"]), out=out)


@unit(ops.OP_LUT, flat_cost(1, 1, 256))
def lut(desc: np.void, dma) -> None:
    n = count(desc)
    x = dma.read_array(int(desc["input"]), np.int8, (n,))
    table = dma.read_array(int(desc["lut"]), np.int8, (256,))
    activations.lut_lookup(x, table, out=dma.write_array(int(desc["output"]), np.int8, (n,)))


def _softmax_cost(desc: np.void) -> tuple[int, int]:
    n = int(desc["rows"]) * int(desc["depth"])
    return 2 * n, 2 * n


@unit(ops.OP_SOFTMAX, _softmax_cost)
def softmax(desc: np.void, dma) -> Rerun | None:
    shape = dims((desc["rows"], desc["depth"]), "rows/depth")
    x = dma.read_array(int(desc["input"]), np.int8, shape)
    return activations.softmax_bound(x, input_beta_multiplier=int(desc["input_beta_multiplier"]),
                                     input_beta_left_shift=int(desc["input_beta_left_shift"]),
                                     diff_min=int(desc["diff_min"]),
                                     out=dma.write_array(int(desc["output"]), np.int8, shape))
