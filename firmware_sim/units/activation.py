"""The activation unit: RELU (RELU / RELU6 / RELU_N1_TO_1 by their range), LUT (LOGISTIC,
TANH by their table) and SOFTMAX (descriptors: ``npu_hw.ops``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import activations, byte_tables, int16x8
from firmware_sim.kernels.native import data_calls
from npu_hw import ops
from npu_hw.sigmoid16 import INT16_LUT_SIZE

from .common import Rerun, count, dims, unit
from .elementwise import flat_cost


@unit(ops.OP_RELU, lambda desc: flat_cost(*(2, 2) if int(desc["flags"]) & ops.OPF_INT16 else (1, 1))(desc))
def relu(desc: np.void, dma) -> Rerun | None:
    """Reruns as a table lookup in C (``byte_tables``), int8 or int16."""
    n = count(desc)
    dtype = np.int16 if int(desc["flags"]) & ops.OPF_INT16 else np.int8
    x = dma.read_array(int(desc["input"]), dtype, (n,))
    out = dma.write_array(int(desc["output"]), dtype, (n,))
    kwargs = {f: int(desc[f]) for f in ("input_zp", "output_zp", "multiplier", "shift", "act_min", "act_max")}
    return byte_tables.unary_bound("relu", activations.relu_family, x, out, **kwargs)


def _lut_cost(desc: np.void) -> tuple[int, int]:
    if int(desc["flags"]) & ops.OPF_INT16:
        return flat_cost(2, 2, 2 * INT16_LUT_SIZE)(desc)
    return flat_cost(1, 1, 256)(desc)


@unit(ops.OP_LUT, _lut_cost)
def lut(desc: np.void, dma) -> Rerun | None:
    """int8: a 256-entry int8 table; ``OPF_INT16``: a 65536-entry int16 table indexed by
    ``uint16(x)`` (int16 LOGISTIC / TANH: ``spec.sigmoid16``). Reruns in C, reading the
    table where it lies in device memory."""
    n = count(desc)
    dtype, entries = (np.int16, INT16_LUT_SIZE) if int(desc["flags"]) & ops.OPF_INT16 else (np.int8, 256)
    x = dma.read_array(int(desc["input"]), dtype, (n,))
    table = dma.read_array(int(desc["lut"]), dtype, (entries,))
    out = dma.write_array(int(desc["output"]), dtype, (n,))
    activations.lut_lookup(x, table, out=out)
    return data_calls.bind_lut(x, table, out)


def _softmax_cost(desc: np.void) -> tuple[int, int]:
    n = int(desc["rows"]) * int(desc["depth"])
    return 2 * n, (4 if int(desc["flags"]) & ops.OPF_INT16 else 2) * n


@unit(ops.OP_SOFTMAX, _softmax_cost)
def softmax(desc: np.void, dma) -> Rerun | None:
    shape = dims((desc["rows"], desc["depth"]), "rows/depth")
    if int(desc["flags"]) & ops.OPF_INT16:  # the multiplier / shift take the input to the exp table
        x16 = dma.read_array(int(desc["input"]), np.int16, shape)
        return int16x8.softmax_int16_bound(x16, input_multiplier=int(desc["input_beta_multiplier"]),
                                           input_left_shift=int(desc["input_beta_left_shift"]),
                                           out=dma.write_array(int(desc["output"]), np.int16, shape))
    x = dma.read_array(int(desc["input"]), np.int8, shape)
    return activations.softmax_bound(x, input_beta_multiplier=int(desc["input_beta_multiplier"]),
                                     input_beta_left_shift=int(desc["input_beta_left_shift"]),
                                     diff_min=int(desc["diff_min"]),
                                     out=dma.write_array(int(desc["output"]), np.int8, shape))
