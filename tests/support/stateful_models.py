"""Small int8 streaming models with TFLite resource variables, built in memory.

``streaming_model()`` keeps two variables, initialized by a CALL_ONCE init subgraph as the
TFLite converter writes them:

- ``ema``:   an exponential moving average of the input, ``ema = 0.75 * ema + 0.25 * x``;
- ``total``: a running sum of the input (saturating at int8's range).

Outputs: ``ema + x`` read back after the assignment (so a read sees the value assigned
earlier in the same call), and the new ``total``.
"""
from __future__ import annotations

import numpy as np
import tflite

from tests.support.tflite_builder import RESOURCE, OpSpec, SubgraphSpec, TensorSpec, build_model, call_once, var_handle

SHAPE = (1, 8)
X_Q = dict(scale=[0.04], zero_point=[2])
EMA_Q = dict(scale=[0.05], zero_point=[-3])
TOTAL_Q = dict(scale=[0.2], zero_point=[0])
HALF_Q = dict(scale=[1 / 128], zero_point=[0])
EMA_INITIAL = np.array([[-40, -20, -3, 0, 5, 17, 60, 100]], np.int8)
TOTAL_INITIAL = np.zeros(SHAPE, np.int8)

_B = tflite.BuiltinOperator
_O = tflite.BuiltinOptions


def _handle(name: str, index: int) -> OpSpec:
    return OpSpec(_B.VAR_HANDLE, [], [index], _O.VarHandleOptions, var_handle(name))


def _init_subgraph() -> SubgraphSpec:
    tensors = [TensorSpec((), RESOURCE, name="ema_handle"), TensorSpec((), RESOURCE, name="total_handle"),
               TensorSpec(SHAPE, np.int8, **EMA_Q, data=EMA_INITIAL, name="ema_initial"),
               TensorSpec(SHAPE, np.int8, **TOTAL_Q, data=TOTAL_INITIAL, name="total_initial")]
    ops = [_handle("ema", 0), _handle("total", 1),
           OpSpec(_B.ASSIGN_VARIABLE, [0, 2], []), OpSpec(_B.ASSIGN_VARIABLE, [1, 3], [])]
    return SubgraphSpec(tensors, ops, name="init")


def streaming_model() -> bytes:
    """The two-variable streaming model (see the module docstring)."""
    t = [
        TensorSpec(SHAPE, np.int8, **X_Q, name="x"),                          # 0
        TensorSpec((), RESOURCE, name="ema_handle"),                          # 1
        TensorSpec((), RESOURCE, name="total_handle"),                        # 2
        TensorSpec(SHAPE, np.int8, **EMA_Q, name="ema_previous"),             # 3
        TensorSpec((1,), np.int8, **HALF_Q, data=np.array([96], np.int8), name="decay"),   # 4
        TensorSpec(SHAPE, np.int8, **EMA_Q, name="ema_decayed"),              # 5
        TensorSpec((1,), np.int8, **HALF_Q, data=np.array([32], np.int8), name="gain"),    # 6
        TensorSpec(SHAPE, np.int8, scale=[0.01], zero_point=[0], name="x_gained"),         # 7
        TensorSpec(SHAPE, np.int8, **EMA_Q, name="ema_new"),                  # 8
        TensorSpec(SHAPE, np.int8, **TOTAL_Q, name="total_previous"),         # 9
        TensorSpec(SHAPE, np.int8, **TOTAL_Q, name="total_new"),              # 10
        TensorSpec(SHAPE, np.int8, **EMA_Q, name="ema_read_back"),            # 11
        TensorSpec(SHAPE, np.int8, scale=[0.08], zero_point=[1], name="ema_plus_x"),       # 12
    ]
    ops = [
        OpSpec(_B.CALL_ONCE, [], [], _O.CallOnceOptions, call_once(1)),
        _handle("ema", 1), _handle("total", 2),
        OpSpec(_B.READ_VARIABLE, [1], [3]),
        OpSpec(_B.MUL, [3, 4], [5], _O.MulOptions, _mul_options),
        OpSpec(_B.MUL, [0, 6], [7], _O.MulOptions, _mul_options),
        OpSpec(_B.ADD, [5, 7], [8], _O.AddOptions, _add_options),
        OpSpec(_B.ASSIGN_VARIABLE, [1, 8], []),
        OpSpec(_B.READ_VARIABLE, [2], [9]),
        OpSpec(_B.ADD, [9, 0], [10], _O.AddOptions, _add_options),
        OpSpec(_B.ASSIGN_VARIABLE, [2, 10], []),
        OpSpec(_B.READ_VARIABLE, [1], [11]),
        OpSpec(_B.ADD, [11, 0], [12], _O.AddOptions, _add_options),
    ]
    return build_model(t, ops, [0], [12, 10], [_init_subgraph()])


def _mul_options(b):
    tflite.MulOptionsStart(b)
    return tflite.MulOptionsEnd(b)


def _add_options(b):
    tflite.AddOptionsStart(b)
    return tflite.AddOptionsEnd(b)


def recurrent_onnx(seed: int = 0, features: int = 16, hidden: int = 8, classes: int = 4):
    """A float Elman cell as ONNX: ``h = tanh(x Wx + h_in Wh + b)``, ``y = h Wy``; inputs
    ``x``, ``h_in``, outputs ``y``, ``h_out``. Marked ``{"h_in": "h_out"}`` it is a
    stateful model (the hidden state carried between calls), as OpenVINO's MakeStateful
    makes of such a pair."""
    from tests.support.model_builders import _Builder
    b = _Builder(seed)
    xw = b.node("MatMul", ["x", b.weight("wx", features, hidden, scale=0.3)], "xw")
    hw = b.node("MatMul", ["h_in", b.weight("wh", hidden, hidden, scale=0.3)], "hw")
    pre = b.node("Add", [b.node("Add", [xw, hw], "sum"), b.weight("b", hidden, scale=0.1)], "pre")
    b.node("Tanh", [pre], "h_out")
    b.node("MatMul", ["h_out", b.weight("wy", hidden, classes, scale=0.5)], "y")
    return b.model("elman", {"x": [1, features], "h_in": [1, hidden]}, {"y": [1, classes], "h_out": [1, hidden]})


def delay_model(*, with_init: bool = True, init_op: bool = False, read_back_scale: float | None = None) -> bytes:
    """A one-call delay line: output ``y`` is the variable ``previous`` read straight out (the
    input of the call before), then ``x`` is assigned to it. ``with_init=False`` leaves out
    the CALL_ONCE init; ``init_op`` makes the init subgraph compute its value (an ADD);
    ``read_back_scale`` adds a second output reading the variable back after the assignment
    with that scale."""
    q = dict(scale=[0.1], zero_point=[-5])
    t = [TensorSpec(SHAPE, np.int8, **q, name="x"), TensorSpec((), RESOURCE, name="previous_handle"),
         TensorSpec(SHAPE, np.int8, **q, name="y")]
    ops = [_handle("previous", 1), OpSpec(_B.READ_VARIABLE, [1], [2]), OpSpec(_B.ASSIGN_VARIABLE, [1, 0], [])]
    outputs = [2]
    if read_back_scale is not None:
        t.append(TensorSpec(SHAPE, np.int8, scale=[read_back_scale], zero_point=[-5], name="read_back"))
        ops.append(OpSpec(_B.READ_VARIABLE, [1], [3]))
        t.append(TensorSpec(SHAPE, np.int8, **q, name="doubled"))
        ops.append(OpSpec(_B.ADD, [3, 0], [4], _O.AddOptions, _add_options))
        outputs.append(4)
    init_tensors = [TensorSpec((), RESOURCE, name="previous_handle"),
                    TensorSpec(SHAPE, np.int8, **q, data=np.arange(8, dtype=np.int8).reshape(SHAPE), name="start")]
    init_ops = [_handle("previous", 0), OpSpec(_B.ASSIGN_VARIABLE, [0, 1], [])]
    if init_op:
        init_tensors.append(TensorSpec(SHAPE, np.int8, **q, name="start_doubled"))
        init_ops.insert(1, OpSpec(_B.ADD, [1, 1], [2], _O.AddOptions, _add_options))
        init_ops[-1] = OpSpec(_B.ASSIGN_VARIABLE, [0, 2], [])
    if not with_init:
        return build_model(t, ops, [0], outputs)
    ops.insert(0, OpSpec(_B.CALL_ONCE, [], [], _O.CallOnceOptions, call_once(1)))
    return build_model(t, ops, [0], outputs, [SubgraphSpec(init_tensors, init_ops, name="init")])


def swap_model() -> bytes:
    """Two variables that swap their values every call (``a, b = b, a``); the output is
    ``a + x``. Each new value is the other's old one, so neither may be written back
    before the other is read."""
    q = dict(scale=[0.1], zero_point=[0])
    t = [TensorSpec(SHAPE, np.int8, **q, name="x"), TensorSpec((), RESOURCE, name="a_handle"),
         TensorSpec((), RESOURCE, name="b_handle"), TensorSpec(SHAPE, np.int8, **q, name="a_old"),
         TensorSpec(SHAPE, np.int8, **q, name="b_old"), TensorSpec(SHAPE, np.int8, **q, name="y")]
    ops = [OpSpec(_B.CALL_ONCE, [], [], _O.CallOnceOptions, call_once(1)), _handle("a", 1), _handle("b", 2),
           OpSpec(_B.READ_VARIABLE, [1], [3]), OpSpec(_B.READ_VARIABLE, [2], [4]),
           OpSpec(_B.ASSIGN_VARIABLE, [1, 4], []), OpSpec(_B.ASSIGN_VARIABLE, [2, 3], []),
           OpSpec(_B.ADD, [3, 0], [5], _O.AddOptions, _add_options)]
    init = SubgraphSpec([TensorSpec((), RESOURCE, name="a_handle"), TensorSpec((), RESOURCE, name="b_handle"),
                         TensorSpec(SHAPE, np.int8, **q, data=np.full(SHAPE, 10, np.int8), name="a0"),
                         TensorSpec(SHAPE, np.int8, **q, data=np.full(SHAPE, -20, np.int8), name="b0")],
                        [_handle("a", 0), _handle("b", 1), OpSpec(_B.ASSIGN_VARIABLE, [0, 2], []),
                         OpSpec(_B.ASSIGN_VARIABLE, [1, 3], [])], name="init")
    return build_model(t, ops, [0], [5], [init])


def float_ema_model() -> bytes:
    """A float32 streaming model: ``ema = 0.75 * ema + 0.25 * x`` in a variable starting at
    0.5, returned and assigned (the quantizer makes it int8, its state included)."""
    f32 = np.float32
    t = [TensorSpec(SHAPE, f32, name="x"), TensorSpec((), RESOURCE, name="ema_handle"),
         TensorSpec(SHAPE, f32, name="ema_old"), TensorSpec((1,), f32, data=np.array([0.75], f32), name="decay"),
         TensorSpec(SHAPE, f32, name="decayed"), TensorSpec((1,), f32, data=np.array([0.25], f32), name="gain"),
         TensorSpec(SHAPE, f32, name="gained"), TensorSpec(SHAPE, f32, name="ema")]
    ops = [OpSpec(_B.CALL_ONCE, [], [], _O.CallOnceOptions, call_once(1)), _handle("ema", 1),
           OpSpec(_B.READ_VARIABLE, [1], [2]), OpSpec(_B.MUL, [2, 3], [4], _O.MulOptions, _mul_options),
           OpSpec(_B.MUL, [0, 5], [6], _O.MulOptions, _mul_options),
           OpSpec(_B.ADD, [4, 6], [7], _O.AddOptions, _add_options), OpSpec(_B.ASSIGN_VARIABLE, [1, 7], [])]
    init = SubgraphSpec([TensorSpec((), RESOURCE, name="ema_handle"),
                         TensorSpec(SHAPE, f32, data=np.full(SHAPE, 0.5, f32), name="ema_initial")],
                        [_handle("ema", 0), OpSpec(_B.ASSIGN_VARIABLE, [0, 1], [])], name="init")
    return build_model(t, ops, [0], [7], [init])
