"""Rounding int8 weights to what the layer's inputs need (GPTQ), not to the nearest step.

Rounding every weight to its nearest int8 step is optimal per weight but not per output:
a head such as mediapipe's hand world-landmark layer sums 672 terms into an output some
260 times smaller than the terms, and nearest rounding leaves it at 2 dB SQNR (measured
on two unseen pictures; 14 dB with bias correction). GPTQ (Frantar et al., 2023, after
Optimal Brain Quantization) rounds the input columns one at a time and spreads each
column's rounding error over the columns not yet rounded, weighted by the inverse of
``H = E[x x^T]``, the second moment of the layer's inputs on the calibration data; the
same layer reaches 19 dB on the unseen pictures (42 dB on the calibration ones), and the
handedness head goes from 8 to 41 dB. The scales (per output channel) stay those of
nearest rounding, so the int8 spec and the chip's kernels are unchanged: only which
integer each weight gets differs.

Layers: FULLY_CONNECTED (inputs ``[rows, K]``) and ungrouped CONV_2D (input patches,
``K = KH * KW * Cin`` in the OHWI weight order), with ``K <= MAX_COLUMNS``, and
DEPTHWISE_CONV_2D, each channel on its own (``K = KH * KW``, one ``H`` per channel):
batch norm folded into a depthwise layer leaves channels whose output is a small
difference of large terms (pose_landmark_full's first depthwise layer: 24 dB SQNR from
nearest-rounded weights alone), and neighbouring pixels are correlated enough for the
error of one tap to be taken up by the others.

A layer's bias is a column too, whose input is always 1 and whose int32 (or int64) grid
is so fine that it rounds for free. It comes last, so it takes up what the weights'
rounding left in the output's mean: ``round_layer`` with the moments of the rows with a
1 appended (``input_moments`` does that for layers with a bias). This is not bias
correction: it sees the float graph's inputs only, as the weights' rounding does, not the
quantized graph's drift. Measured on pose_landmark_full with ``--recipe accurate`` (every
activation int16; the float reference simulating the int grids, unseen pictures): the
segmentation logits' cosine against float goes from 0.974 to 0.984 on astronaut and
from 0.676 to 0.750 on chelsea, the other outputs as they were.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from .float_ref import FloatInterpreter, windows
from .ir import Graph, Op

__all__ = ["MAX_COLUMNS", "input_moments", "gptq_round", "gptq_round_depthwise", "round_layer"]

MAX_COLUMNS = 2304          # H is K x K float64: 42 MB at this size
ROWS_PER_SAMPLE = 4096      # input rows (positions) drawn per calibration sample
BLOCK = 128                 # columns rounded together before the rest is updated (lazy batch updates)

Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


def _rows(op: Op, graph: Graph, x: np.ndarray) -> np.ndarray | None:
    """The layer's input as rows that multiply the flattened weight rows ([rows, K])."""
    w = graph.tensors[op.inputs[1]]
    if op.type == "FULLY_CONNECTED":
        k = w.shape[1]
        return x.reshape(-1, k) if x.size % k == 0 else None
    if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        _, kh, kw, _ = w.shape
        win = windows(x, kh, kw, tuple(op.attrs["stride"]), tuple(op.attrs.get("dilation", (1, 1))),
                      tuple(op.attrs["pads"]))            # (N, OH, OW, C, KH, KW)
        if op.type == "DEPTHWISE_CONV_2D":                # per channel: (C, rows, KH * KW)
            return np.ascontiguousarray(win.transpose(3, 0, 1, 2, 4, 5)).reshape(x.shape[-1], -1, kh * kw)
        if x.shape[-1] != w.shape[3]:                     # grouped convolution
            return None
        return np.ascontiguousarray(win.transpose(0, 1, 2, 4, 5, 3)).reshape(-1, kh * kw * w.shape[3])
    return None


def _drawn_rows(op: Op, graph: Graph, x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """:func:`_rows`, at most ``ROWS_PER_SAMPLE`` of them drawn by ``rng`` (positions, the
    same draw either way). A convolution's windows are gathered at the drawn positions only:
    the same rows in the same layout as all of them copied then drawn from (U2-Net-p: 4096
    of 102,400 positions, a 236 MB copy per layer and sample before)."""
    if op.type not in ("CONV_2D", "DEPTHWISE_CONV_2D") or (op.type == "CONV_2D" and x.shape[-1] != graph.tensors[
            op.inputs[1]].shape[3]):
        rows = _rows(op, graph, x)
        if rows is not None and rows.shape[-2] > ROWS_PER_SAMPLE:
            rows = rows[..., rng.choice(rows.shape[-2], ROWS_PER_SAMPLE, replace=False), :]
        return rows
    _, kh, kw, _ = graph.tensors[op.inputs[1]].shape
    win = windows(x, kh, kw, tuple(op.attrs["stride"]), tuple(op.attrs.get("dilation", (1, 1))),
                  tuple(op.attrs["pads"]))            # (N, OH, OW, C, KH, KW)
    count = int(np.prod(win.shape[:3]))
    if count <= ROWS_PER_SAMPLE:
        return _rows(op, graph, x)
    drawn = win[np.unravel_index(rng.choice(count, ROWS_PER_SAMPLE, replace=False), win.shape[:3])]
    drawn = np.ascontiguousarray(drawn)               # (rows, C, KH, KW)
    if op.type == "DEPTHWISE_CONV_2D":                # (C, rows, KH * KW), laid out rows-first as drawn from _rows'
        return drawn.reshape(ROWS_PER_SAMPLE, x.shape[-1], kh * kw).transpose(1, 0, 2)
    return np.ascontiguousarray(drawn.transpose(0, 2, 3, 1)).reshape(ROWS_PER_SAMPLE, -1)


def _eligible(op: Op, graph: Graph) -> bool:
    if op.type not in ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D") or len(op.inputs) < 2:
        return False
    w = graph.tensors[op.inputs[1]]
    if op.type == "DEPTHWISE_CONV_2D":
        return w.is_constant and op.attrs.get("depth_multiplier", 1) == 1
    return w.is_constant and int(np.prod(w.shape[1:])) <= MAX_COLUMNS


def _has_bias(op: Op) -> bool:
    return len(op.inputs) > 2 and bool(op.inputs[2])


def input_moments(graph: Graph, dataset: Iterable[Feed], seed: int = 0) -> dict[str, np.ndarray]:
    """``E[x x^T]`` of each eligible layer's input rows over ``dataset``, by weight tensor
    name; for a layer with a bias, of the rows with a 1 appended (``[K + 1, K + 1]``)."""
    ops = [op for op in graph.ops if _eligible(op, graph)]
    if not ops:
        return {}
    run = FloatInterpreter(graph)
    rng = np.random.default_rng(seed)
    sums: dict[str, np.ndarray] = {}
    spare: dict[str, np.ndarray] = {}       # each layer's buffer for the next sample's moment
    counts: dict[str, int] = {}
    keep = sorted({op.inputs[0] for op in ops})
    for feed in dataset:
        values = run.run(feed, keep=keep)
        if not isinstance(feed, Mapping):
            feed = dict(zip(graph.inputs, feed, strict=True))
        for op in ops:
            x = values[op.inputs[0]] if op.inputs[0] in values else np.asarray(feed[op.inputs[0]], np.float32)
            rows = _drawn_rows(op, graph, np.asarray(x, np.float32), rng)
            if rows is None:
                continue
            r = rows.astype(np.float64)
            if _has_bias(op):       # the constant input the bias multiplies
                r = np.concatenate([r, np.ones((*r.shape[:-1], 1))], axis=-1)
            name = op.inputs[1]
            # [K, K], or [C, K, K] per channel. A BLAS product, not einsum, whose loop for this
            # contraction took 148 of a 257 s YOLO compile (benchmarks/escalation_cost.py); summed
            # in place, into the last sample's buffer: a wake-word head's [2113, 2113] moments
            # took 2 s a compile in fresh arrays
            moment = np.matmul(np.swapaxes(r, -1, -2), r, out=spare.get(name))
            if name in sums:
                sums[name] += moment
                spare[name] = moment
            else:
                sums[name] = moment + 0.0
            counts[name] = counts.get(name, 0) + r.shape[-2]
    return {n: s / counts[n] for n, s in sums.items()}


def round_layer(op_type: str, w: np.ndarray, scale: np.ndarray, moment: np.ndarray,
                bias: np.ndarray | None = None, damp: float = 0.1) -> tuple[np.ndarray, np.ndarray | None]:
    """GPTQ-rounded int8 weights of a layer and its bias: ``moment`` from
    :func:`input_moments`; when it has the bias's column (one more than the weights'
    columns) and ``bias`` is given, the bias returned takes up the weights' rounding error
    (float, to be quantized on its own grid), else ``bias`` comes back as it was."""
    if op_type == "DEPTHWISE_CONV_2D":          # each channel on its own: [C, KH*KW (+1)] rows
        _, kh, kw, channels = w.shape
        taps = kh * kw
        rows = w.reshape(taps, channels).T.astype(np.float64)
        with_bias = bias is not None and moment.shape[-1] == taps + 1
        if with_bias:
            rows = np.concatenate([rows, np.asarray(bias, np.float64).reshape(-1, 1)], axis=1)
        s = np.broadcast_to(np.asarray(scale, np.float64).reshape(-1), (channels,))
        done = [_gptq(rows[c:c + 1], s[c:c + 1], moment[c], damp, with_bias) for c in range(channels)]
        q = np.concatenate([d[0][:, :taps] for d in done]).T.reshape(w.shape)
        return q, (np.concatenate([d[1] for d in done]) if with_bias else bias)
    rows = w.reshape(w.shape[0], -1).astype(np.float64)
    k = rows.shape[1]
    with_bias = bias is not None and moment.shape[-1] == k + 1
    if with_bias:
        rows = np.concatenate([rows, np.asarray(bias, np.float64).reshape(-1, 1)], axis=1)
    q, last = _gptq(rows, scale, moment, damp, with_bias)
    return q[:, :k].reshape(w.shape), (last if with_bias else bias)


def gptq_round_depthwise(w: np.ndarray, scale: np.ndarray, moments: np.ndarray, damp: float = 0.1) -> np.ndarray:
    """int8 depthwise weights ``[1, KH, KW, C]``, each channel rounded by GPTQ with its own
    ``moments[c]`` (``[C, KH*KW, KH*KW]``) on its own ``scale[c]``."""
    return round_layer("DEPTHWISE_CONV_2D", w, scale, moments, None, damp)[0]


def gptq_round(w: np.ndarray, scale: np.ndarray, moment: np.ndarray, damp: float = 0.1) -> np.ndarray:
    """int8 weights for ``w`` (``[N, ...]``, rows flattened to ``[N, K]``) on the per-row
    ``scale`` grid, rounded column by column with the error spread by ``moment`` (``[K, K]``).

    ``damp`` (a fraction of the mean diagonal, added to it) keeps the inverse stable when
    the calibration data span fewer than K directions."""
    return _gptq(w.reshape(w.shape[0], -1), scale, moment, damp, free_last=False)[0].reshape(w.shape)


def _gptq(w: np.ndarray, scale: np.ndarray, moment: np.ndarray, damp: float,
          free_last: bool) -> tuple[np.ndarray, np.ndarray]:
    """GPTQ over the columns of ``w`` ``[N, K]``: the int8 columns, and the last column's
    final value, which ``free_last`` leaves unrounded (a bias: it takes up the error)."""
    W = w.astype(np.float64).copy()
    k = W.shape[1]
    s = np.asarray(scale, np.float64).reshape(-1, 1) * np.ones((W.shape[0], 1))
    H = moment.astype(np.float64).copy()
    dead = np.diag(H) == 0          # inputs that are always zero: their weights do not matter
    H[dead, dead] = 1.0
    rounded = k - 1 if free_last else k     # the damping is the rounded columns' (a bias's input is exact)
    H[:rounded, :rounded] += damp * float(np.mean(np.diag(H)[:rounded])) * np.eye(rounded)
    try:
        U = np.linalg.cholesky(np.linalg.inv(H)).T   # upper Cholesky factor of H^-1
    except np.linalg.LinAlgError:
        Q = np.clip(np.round(W / s), -127, 127)
        return Q.astype(np.int8), W[:, -1].copy()
    Q = np.zeros_like(W)
    last = W[:, -1].copy()
    for start in range(0, k, BLOCK):
        end = min(start + BLOCK, k)
        block = W[:, start:end].copy()
        errors = np.zeros_like(block)
        for j in range(end - start):
            col = block[:, j]
            if free_last and start + j == k - 1:
                last = col.copy()
                continue
            q = np.clip(np.round(col / s[:, 0]), -127, 127)
            Q[:, start + j] = q
            err = (col - q * s[:, 0]) / U[start + j, start + j]
            block[:, j + 1:] -= np.outer(err, U[start + j, start + j + 1:end])
            errors[:, j] = err
        W[:, end:] -= errors @ U[start:end, end:]
    return Q.astype(np.int8), last
