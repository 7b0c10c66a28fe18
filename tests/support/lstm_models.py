"""int8 TFLite UNIDIRECTIONAL_SEQUENCE_LSTM models ("8x8->16": int8 activations and
weights, int16 cell state, five intermediate tensors), written with the tflite builders
as the converter lays them out, for LiteRT's integer LSTM kernel."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tflite

from tests.support.tflite_builder import OpSpec, TensorSpec, build_model

#: LiteRT's input order: input, 4 input weights, 4 recurrent weights (i, f, c, o each), 3
#: peepholes, 4 biases, projection weights and bias, output state, cell state, 4 layer norms.
INPUT, W0, R0, BIAS0, OUTPUT_STATE, CELL_STATE = 0, 1, 5, 12, 18, 19


@dataclass
class LstmSpec:
    """The quantization of a random int8 LSTM (scales drawn to look like converted models)."""
    steps: int
    batch: int
    n_input: int
    n_cell: int
    time_major: bool = True
    cell_shift: int = -11
    cell_clip: float = 0.0
    seed: int = 0


def lstm_model(spec: LstmSpec) -> bytes:
    """An int8 UNIDIRECTIONAL_SEQUENCE_LSTM of random weights and grids; the graph input is
    the sequence, the output every step's hidden state; the states are variable tensors."""
    rng = np.random.default_rng(spec.seed)
    n_in, n_cell = spec.n_input, spec.n_cell
    x_scale, x_zp = float(rng.uniform(0.005, 0.05)), int(rng.integers(-20, 20))
    h_scale, h_zp = float(rng.uniform(0.004, 0.01)), int(rng.integers(-10, 10))
    seq = [spec.steps, spec.batch, n_in] if spec.time_major else [spec.batch, spec.steps, n_in]
    out = seq[:2] + [n_cell]
    tensors = [TensorSpec(seq, np.int8, [x_scale], [x_zp], name="input")]

    def weights(cols: int, name: str) -> int:
        scale = float(rng.uniform(0.002, 0.02))
        tensors.append(TensorSpec([n_cell, cols], np.int8, [scale], [0], name=name,
                                  data=rng.integers(-127, 128, (n_cell, cols)).astype(np.int8)))
        return len(tensors) - 1
    w = [weights(n_in, f"input_to_{g}") for g in ("input", "forget", "cell", "output")]
    r = [weights(n_cell, f"recurrent_to_{g}") for g in ("input", "forget", "cell", "output")]
    biases = []
    for g, k in zip(("input", "forget", "cell", "output"), w):
        scale = x_scale * float(tensors[k].scale[0])
        tensors.append(TensorSpec([n_cell], np.int32, [scale], [0], name=f"{g}_bias",
                                  data=rng.integers(-(1 << 14), 1 << 14, n_cell).astype(np.int32)))
        biases.append(len(tensors) - 1)
    tensors.append(TensorSpec([spec.batch, n_cell], np.int8, [h_scale], [h_zp], name="output_state",
                              is_variable=True))
    h_state = len(tensors) - 1
    tensors.append(TensorSpec([spec.batch, n_cell], np.int16, [2.0 ** spec.cell_shift], [0], name="cell_state",
                              is_variable=True))
    c_state = len(tensors) - 1
    tensors.append(TensorSpec(out, np.int8, [h_scale], [h_zp], name="output"))
    output = len(tensors) - 1
    inter = []
    for k in range(4):    # the gates' grids: read only with layer normalization
        tensors.append(TensorSpec([0], np.int16, [2.0 ** -12], [0], name=f"intermediate_{k}"))
        inter.append(len(tensors) - 1)
    tensors.append(TensorSpec([0], np.int8, [h_scale], [h_zp], name="hidden"))
    inter.append(len(tensors) - 1)
    ins = [0, *w, *r, -1, -1, -1, *biases, -1, -1, h_state, c_state, -1, -1, -1, -1]

    def options(b):
        tflite.UnidirectionalSequenceLSTMOptionsStart(b)
        tflite.UnidirectionalSequenceLSTMOptionsAddFusedActivationFunction(b, tflite.ActivationFunctionType.TANH)
        tflite.UnidirectionalSequenceLSTMOptionsAddCellClip(b, spec.cell_clip)
        tflite.UnidirectionalSequenceLSTMOptionsAddTimeMajor(b, spec.time_major)
        return tflite.UnidirectionalSequenceLSTMOptionsEnd(b)
    op = OpSpec(tflite.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [output],
                tflite.BuiltinOptions.UnidirectionalSequenceLSTMOptions, options, version=3, intermediates=inter)
    return build_model(tensors, [op], [0], [output])
