"""Timing hints: the work a compute descriptor asks for, for the chip's timing model.

``task_cost(opcode, desc)`` returns ``(macs, bytes)``: multiply-accumulates (elementwise
ops count one per output element, pooling one per window tap, data movement zero) and the
bytes the task reads and writes in device memory (activations, weights, bias,
per-channel parameters, tables). The timing model turns them into cycles.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from firmware_sim.spec import ops, tasks

__all__ = ["task_cost", "COSTS"]


def _prod(values) -> int:
    return int(np.prod([int(v) for v in values], dtype=np.int64))


def _ranked(desc: np.void, field: str) -> list[int]:
    return [int(v) for v in desc[field][:int(desc["rank"])]]


def _conv(desc: np.void) -> tuple[int, int]:
    n, h, w, cin = (int(v) for v in desc["in_shape"])
    _, oh, ow, cout = (int(v) for v in desc["out_shape"])
    kh, kw = (int(v) for v in desc["filter_hw"])
    depthwise = int(desc["opcode"]) == ops.OP_DEPTHWISE_CONV2D
    per_out = kh * kw * (1 if depthwise else int(desc["cin_per_group"]))
    outputs = n * oh * ow * cout
    weights = cout * per_out
    params = cout * 8 if int(desc["flags"]) & ops.OPF_PER_CHANNEL else 0
    bias = cout * 4 if int(desc["bias"]) else 0
    return outputs * per_out, n * h * w * cin + weights + bias + params + outputs


def _fc(desc: np.void) -> tuple[int, int]:
    m, k, n = int(desc["rows"]), int(desc["in_features"]), int(desc["out_features"])
    flags = int(desc["flags"])
    per_channel = bool(flags & tasks.FC_PER_CHANNEL)
    params = n * 8 if per_channel else 0
    if per_channel and flags & tasks.FC_DOUBLE_SCALE:
        params += n * 8  # float64 scales
    bias = n * 4 if int(desc["bias"]) else 0
    return m * k * n, m * k + n * k + bias + params + m * n


def _binary(desc: np.void) -> tuple[int, int]:
    out = _prod(_ranked(desc, "out_shape"))
    return out, _prod(_ranked(desc, "in1_shape")) + _prod(_ranked(desc, "in2_shape")) + out


def _pool(desc: np.void) -> tuple[int, int]:
    out = _prod(desc["out_shape"])
    return out * _prod(desc["filter_hw"]), _prod(desc["in_shape"]) + out


def _mean(desc: np.void) -> tuple[int, int]:
    shape = _ranked(desc, "in_shape")
    mask = int(desc["axes_mask"])
    out = _prod(d for i, d in enumerate(shape) if not mask >> i & 1)
    return _prod(shape), _prod(shape) + out


def _flat(in_bytes: int, out_bytes: int, extra: int = 0) -> Callable[[np.void], tuple[int, int]]:
    def cost(desc: np.void) -> tuple[int, int]:
        n = int(desc["count"])
        return n, n * (in_bytes + out_bytes) + extra
    return cost


def _softmax(desc: np.void) -> tuple[int, int]:
    n = int(desc["rows"]) * int(desc["depth"])
    return 2 * n, 2 * n


def _concat(desc: np.void) -> tuple[int, int]:
    out = int(desc["outer"]) * int(desc["inner"]) * int(desc["axis_total"])
    k = int(desc["num_inputs"])
    return 0, 2 * out + 12 * k


def _copy(desc: np.void) -> tuple[int, int]:
    return 0, 2 * int(desc["count"])


def _transpose(desc: np.void) -> tuple[int, int]:
    return 0, 2 * _prod(_ranked(desc, "in_shape"))


def _pad(desc: np.void) -> tuple[int, int]:
    shape = _ranked(desc, "in_shape")
    r = len(shape)
    out = _prod(d + int(a) + int(b) for d, a, b in
                zip(shape, desc["pad_before"][:r], desc["pad_after"][:r]))
    return 0, _prod(shape) + out


def _slice(desc: np.void) -> tuple[int, int]:
    from firmware_sim.kernels.layout import strided_slice_shape

    r = int(desc["rank"])
    shape = strided_slice_shape(_ranked(desc, "in_shape"), desc["begin"][:r], desc["end"][:r],
                                desc["strides"][:r], begin_mask=int(desc["begin_mask"]),
                                end_mask=int(desc["end_mask"]),
                                shrink_axis_mask=int(desc["shrink_axis_mask"]))
    return 0, 2 * _prod(shape)


def _resize(desc: np.void) -> tuple[int, int]:
    n, h, w, c = (int(v) for v in desc["in_shape"])
    out = n * c * _prod(desc["out_hw"])
    taps = 4 if int(desc["opcode"]) == ops.OP_RESIZE_BILINEAR else 0
    return out * taps, n * h * w * c + out


COSTS: dict[int, Callable[[np.void], tuple[int, int]]] = {
    tasks.OP_FULLY_CONNECTED: _fc,
    ops.OP_CONV2D: _conv,
    ops.OP_DEPTHWISE_CONV2D: _conv,
    ops.OP_ADD: _binary,
    ops.OP_MUL: _binary,
    ops.OP_MAX_POOL2D: _pool,
    ops.OP_AVG_POOL2D: _pool,
    ops.OP_MEAN: _mean,
    ops.OP_RELU: _flat(1, 1),
    ops.OP_LUT: _flat(1, 1, 256),
    ops.OP_SOFTMAX: _softmax,
    ops.OP_CONCAT: _concat,
    ops.OP_RESHAPE: _copy,
    ops.OP_TRANSPOSE: _transpose,
    ops.OP_PAD: _pad,
    ops.OP_STRIDED_SLICE: _slice,
    ops.OP_RESIZE_BILINEAR: _resize,
    ops.OP_RESIZE_NEAREST: _resize,
    ops.OP_QUANTIZE: _flat(4, 1),
    ops.OP_REQUANTIZE: _flat(1, 1),
    ops.OP_DEQUANTIZE: _flat(1, 4),
}


_MEMO: dict[tuple[int, bytes], tuple[int, int]] = {}


def task_cost(opcode: int, desc: np.void) -> tuple[int, int]:
    """``(macs, bytes)`` of one descriptor; ``(0, 0)`` for opcodes without compute.

    A pure function of the descriptor's bytes, remembered: a model's tasks repeat on
    every inference, and reading the fields costs more than the lookup."""
    key = (int(opcode), desc.tobytes())
    cost = _MEMO.get(key)
    if cost is None:
        fn = COSTS.get(key[0])
        cost = fn(desc) if fn is not None else (0, 0)
        if len(_MEMO) >= 4096:
            _MEMO.clear()
        _MEMO[key] = cost
    return cost
