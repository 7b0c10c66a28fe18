"""Recurrent models for the tests: float ONNX LSTM / GRU / RNN nodes with PyTorch-style
weights and real-looking sequences to feed them (:func:`rnn_model`, :func:`feeds_for`), and
int8 TFLite UNIDIRECTIONAL_SEQUENCE_LSTM models ("8x8->16": int8 activations and weights,
int16 cell state, five intermediate tensors) written with the tflite builders as the
converter lays them out, for LiteRT's integer LSTM kernel (:func:`lstm_model`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import tflite
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.support.tflite_builder import OpSpec, TensorSpec, build_model

T, B, FEATURES, H = 6, 1, 5, 8


def rnn_model(op: str, *, steps: int = T, batch: int = B, hidden: int = H, direction: str = "forward",
              outputs: tuple[str, ...] = ("Y", "Y_h", "Y_c"), initial: str = "", layout: int = 0,
              peephole: bool = False, seed: int = 0, **attrs) -> onnx.ModelProto:
    """One ``op`` (LSTM or GRU) node with PyTorch-style weights (uniform in +-1/sqrt(hidden));
    ``initial``: "" (no initial state), "input" (graph inputs h0 [, c0]) or "const"
    (initializers); output names left "" are the node's unused outputs."""
    rng = np.random.default_rng(seed)
    outputs = tuple(o for o in outputs if op == "LSTM" or o != "Y_c")
    dirs = 2 if direction == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    k = 1 / np.sqrt(hidden)

    def u(*shape):
        return rng.uniform(-k, k, shape).astype(np.float32)
    inits = [nh.from_array(u(dirs, gates * hidden, FEATURES), "W"), nh.from_array(u(dirs, gates * hidden, hidden), "R"),
             nh.from_array(u(dirs, 2 * gates * hidden), "B")]
    x_shape = [steps, batch, FEATURES] if layout == 0 else [batch, steps, FEATURES]
    s_shape = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    inputs = [h.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    names = ["X", "W", "R", "B", ""]
    states = ["h0", "c0"][:2 if op == "LSTM" else 1]
    if initial == "input":
        inputs += [h.make_tensor_value_info(s, TensorProto.FLOAT, s_shape) for s in states]
    elif initial == "const":
        inits += [nh.from_array(rng.uniform(-0.5, 0.5, s_shape).astype(np.float32), s) for s in states]
    names += states if initial else []
    if peephole:
        names += [""] * (7 - len(names)) + ["P"]
        inits.append(nh.from_array(u(dirs, 3 * hidden), "P"))
    y_shape = [steps, dirs, batch, hidden] if layout == 0 else [batch, steps, dirs, hidden]
    shapes = {"Y": y_shape, "Y_h": s_shape, "Y_c": s_shape}
    node_outputs = [o if o in outputs else "" for o in ("Y", "Y_h", "Y_c")[:3 if op == "LSTM" else 2]]
    while node_outputs and not node_outputs[-1]:
        node_outputs.pop()
    node = h.make_node(op, names, node_outputs, hidden_size=hidden, direction=direction,
                       **({"layout": layout} if layout else {}), **attrs)
    graph = h.make_graph([node], op, inputs,
                         [h.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def signal(rng: np.random.Generator, shape: tuple[int, ...], time_axis: int) -> np.ndarray:
    """A real-looking sequence: a few sinusoids of random frequency and phase per channel,
    plus a little noise, in about [-1, 1]."""
    t = np.arange(shape[time_axis], dtype=np.float64)
    view = [1] * len(shape)
    view[time_axis] = len(t)
    t = t.reshape(view)
    freq = rng.uniform(0.05, 0.6, (3, *[1 if a == time_axis else n for a, n in enumerate(shape)]))
    phase = rng.uniform(0, 2 * np.pi, freq.shape)
    x = np.sin(freq * t + phase).mean(axis=0) + rng.normal(0, 0.05, shape)
    return x.astype(np.float32)


def feeds_for(model: onnx.ModelProto, rng: np.random.Generator) -> list[np.ndarray]:
    """X as a real-looking sequence (time on axis 0, or 1 for layout 1); initial states as
    a previous call leaves them (smooth values in about +-0.5, not independent noise)."""
    layout = {a.name: a.i for a in model.graph.node[0].attribute}.get("layout", 0)
    out = []
    for vi in model.graph.input:
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        out.append(signal(rng, shape, layout) if vi.name == "X" else 0.5 * signal(rng, shape, len(shape) - 1))
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


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
