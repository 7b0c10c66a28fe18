"""int8 LSTM over a sequence with int16 gates and cell state (TFLite's "8x8->16" integer
LSTM), byte-identical to LiteRT's reference kernel (``lstm_eval::EvalInteger8x8_16``) for
a cell without CIFG, peepholes, projection or layer normalization.

Per step t, for each gate g of (input, forget, cell, output), all int16 saturating:

    gate_g = sat16(sat16(MBQM(W_g x_t + bx_g, mx_g, sx_g)) + MBQM(R_g h + br_g, mr_g, sr_g))
    i, f, o = logistic(gate) on Q3.12 -> Q0.15;  g = tanh(gate) on Q3.12 -> Q0.15
    c = sat16(RDBPOT(f * c, 15) + RDBPOT(i * g, 30 + cell_shift))     [clipped to +-cell_clip if > 0]
    h = clamp8(MBQM(o * tanh_{15 + cell_shift}(c), mh, sh) + hidden_zp)   [LiteRT 2.x: + zero point]
    y_t = h

``x_t`` and ``h`` are the raw int8 bytes: the zero points live in the effective biases
(``bx = bias - input_zp * rowsum(W)``, ``br = -h_zp * rowsum(R)``, as LiteRT's Prepare
folds them); MBQM is ``MultiplyByQuantizedMultiplier``; logistic and tanh are gemmlowp's
int16 fixed-point functions (:mod:`firmware_sim.kernels.gemmlowp16`); the cell state's
scale is ``2**cell_shift``.
"""
from __future__ import annotations

import numpy as np

from .fixedpoint import multiply_by_quantized_multiplier as mbqm
from .fixedpoint import rounding_divide_by_pot, wrap_int32
from .gemm import exact_gemm, f32_chunk, max_abs
from .gemmlowp16 import logistic_q3_table, tanh_table

__all__ = ["lstm_int8x8_16"]


def _sat16(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -(1 << 15), (1 << 15) - 1)


def _lut(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    return table[x + (1 << 15)].astype(np.int64)


def lstm_int8x8_16(x: np.ndarray, w: np.ndarray, r: np.ndarray, bias_x: np.ndarray, bias_r: np.ndarray,
                   multipliers: np.ndarray, shifts: np.ndarray, h: np.ndarray, c: np.ndarray, out: np.ndarray, *,
                   cell_shift: int, hidden_multiplier: int, hidden_shift: int, hidden_zp: int,
                   cell_clip: int = 0) -> None:
    """Run the cell over ``x`` (int8 [steps, batch, n_input], time-major), writing every step's
    output to ``out`` (int8 [steps, batch, n_cell]) and updating ``h`` (int8 [batch, n_cell])
    and ``c`` (int16 [batch, n_cell]) in place.

    ``w`` int8 [4, n_cell, n_input] and ``r`` int8 [4, n_cell, n_cell] in gate order (input,
    forget, cell, output); ``bias_x`` / ``bias_r`` int32 [4, n_cell], the effective biases;
    ``multipliers`` / ``shifts`` int32 [8]: the input products' four, then the recurrent ones.
    """
    if not -30 <= cell_shift <= -9:
        raise ValueError(f"cell state scale 2**{cell_shift}: LiteRT's kernel takes 2**-9 or finer")
    sigmoid, tanh3, tanh_c = logistic_q3_table(), tanh_table(3), tanh_table(15 + cell_shift)
    n_cell = w.shape[1]
    # The four gates' products as one exact float32 GEMM each way (gemm.exact_gemm).
    w_t = w.reshape(4 * n_cell, -1).astype(np.float32).T
    r_t = r.reshape(4 * n_cell, -1).astype(np.float32).T
    chunk_w, chunk_r = f32_chunk(128, max_abs(w)), f32_chunk(128, max_abs(r))
    state_h, state_c = h.astype(np.int64), c.astype(np.int64)

    def products(v: np.ndarray, weights_t: np.ndarray, chunk: int, bias: np.ndarray) -> np.ndarray:
        acc = exact_gemm(v.astype(np.float32), weights_t, chunk).astype(np.int64)
        return wrap_int32(acc.reshape(v.shape[0], 4, n_cell).transpose(1, 0, 2) + bias[:, None, :])  # int32 sums
    for t in range(x.shape[0]):
        xw = products(x[t], w_t, chunk_w, bias_x)
        hr = products(state_h, r_t, chunk_r, bias_r)
        gates = [_sat16(mbqm(hr[g], multipliers[4 + g], shifts[4 + g])
                        + _sat16(mbqm(xw[g], multipliers[g], shifts[g]))) for g in range(4)]
        i, f, o = (_lut(sigmoid, gates[k]) for k in (0, 1, 3))
        g_ = _lut(tanh3, gates[2])
        forget = _wrap16(rounding_divide_by_pot(f * state_c, 15))
        update = _wrap16(rounding_divide_by_pot(i * g_, 30 + cell_shift))
        state_c = _sat16(forget + update)
        if cell_clip > 0:
            state_c = np.clip(state_c, -cell_clip, cell_clip)
        hidden = mbqm(o * _lut(tanh_c, state_c), hidden_multiplier, hidden_shift) + hidden_zp
        state_h = np.clip(hidden, -128, 127)
        out[t] = state_h
    h[...] = state_h
    c[...] = state_c


def _wrap16(x: np.ndarray) -> np.ndarray:
    """``static_cast<int16_t>``: CwiseMul's products are stored without saturation."""
    return ((x + (1 << 15)) & 0xFFFF) - (1 << 15)
