"""The recurrent unit: UNIDIRECTIONAL_SEQUENCE_LSTM, a whole integer LSTM layer over a
sequence (descriptor and formula: ``npu_hw.ops``; kernel: ``kernels.lstm``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import native
from firmware_sim.kernels.gemmlowp16 import logistic_q3_table, tanh_table
from firmware_sim.kernels.lstm import lstm_int8x8_16
from firmware_sim.kernels.native import calls
from npu_hw import ops

from .common import OpDescriptorError, Rerun, dims, unit


def _sizes(desc: np.void) -> tuple[int, int, int, int]:
    return dims((desc["steps"], desc["batch"], desc["n_input"], desc["n_cell"]), "lstm sizes")  # type: ignore[return-value]


def _cost(desc: np.void) -> tuple[int, int]:
    try:
        steps, batch, n_in, n_cell = _sizes(desc)
    except OpDescriptorError:
        return 0, 0
    macs = steps * batch * 4 * n_cell * (n_in + n_cell) + steps * batch * n_cell * 8   # products, then the cell
    nbytes = steps * batch * (n_in + n_cell) + 4 * n_cell * (n_in + n_cell) + 32 * n_cell + 6 * batch * n_cell
    return macs, nbytes


@unit(ops.OP_UNIDIRECTIONAL_SEQUENCE_LSTM, _cost)
def unidirectional_sequence_lstm(desc: np.void, dma) -> Rerun | None:
    steps, batch, n_in, n_cell = _sizes(desc)
    cell_shift, cell_clip = int(desc["cell_shift"]), int(desc["cell_clip"])
    if not -30 <= cell_shift <= -9:
        raise OpDescriptorError(f"cell_shift {cell_shift} outside -30..-9")
    if not 0 <= cell_clip <= 32767:
        raise OpDescriptorError(f"cell_clip {cell_clip} outside 0..32767")
    shifts = desc["shifts"].astype(np.int64)
    if np.any((shifts < -31) | (shifts > 30)) or not -31 <= int(desc["hidden_shift"]) <= 30:
        raise OpDescriptorError("a requantization shift outside -31..30")
    batch_major = bool(int(desc["flags"]) & ops.OPF_BATCH_MAJOR)
    seq = (batch, steps) if batch_major else (steps, batch)
    x = dma.read_array(int(desc["input"]), np.int8, (*seq, n_in))
    w = dma.read_array(int(desc["input_weights"]), np.int8, (4, n_cell, n_in))
    r = dma.read_array(int(desc["recurrent_weights"]), np.int8, (4, n_cell, n_cell))
    biases = dma.read_array(int(desc["biases"]), np.int32, (8, n_cell))
    h_in = dma.read_array(int(desc["output_state_in"]), np.int8, (batch, n_cell))
    c_in = dma.read_array(int(desc["cell_state_in"]), np.int16, (batch, n_cell))
    # Every write view first: a descriptor whose outputs are not mapped fails before any work.
    out = dma.write_array(int(desc["output"]), np.int8, (*seq, n_cell))
    h_out = dma.write_array(int(desc["output_state_out"]), np.int8, (batch, n_cell))
    c_out = dma.write_array(int(desc["cell_state_out"]), np.int16, (batch, n_cell))
    scalars = dict(cell_shift=cell_shift, hidden_multiplier=int(desc["hidden_multiplier"]),
                   hidden_shift=int(desc["hidden_shift"]), hidden_zp=int(desc["hidden_zp"]), cell_clip=cell_clip)
    if native.library() is not None:
        tables = (logistic_q3_table(), tanh_table(3), tanh_table(15 + cell_shift))
        bound = calls.bind_lstm(x, w, r, biases, tables, h_in, c_in, out, h_out, c_out, batch_major=batch_major,
                                multipliers=desc["multipliers"], shifts=desc["shifts"], **scalars)
        if bound is not None:
            bound()
            return bound
    h, c = h_in.copy(), c_in.copy()
    lstm_int8x8_16(x.swapaxes(0, 1) if batch_major else x, w, r, biases[:4].astype(np.int64),
                   biases[4:].astype(np.int64), desc["multipliers"].astype(np.int64), shifts, h, c,
                   out.swapaxes(0, 1) if batch_major else out, **scalars)
    h_out[...] = h
    c_out[...] = c
    return None
