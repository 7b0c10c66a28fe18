"""The data movement unit: CONCATENATION, RESHAPE, TRANSPOSE, PAD, STRIDED_SLICE, GATHER
(descriptors: ``npu_hw.ops``). No arithmetic: their cost is bytes only. CONCATENATION and
RESHAPE move bytes; the others move int8, or int16 elements with ``OPF_INT16``. The numpy
kernels (``kernels.layout``) run first; every op reruns in C (``native.data_calls``): copies,
PAD, int8 GATHER (its indices read and checked on every run)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import layout
from firmware_sim.kernels.native import data_calls
from npu_hw import ops

from .common import OpDescriptorError, Rerun, act_dtype, count, dims, prod, ranked, unit


def _ranked_raw(desc: np.void, field: str) -> list[int]:
    return [int(v) for v in desc[field][:int(desc["rank"])]]


def _concat_cost(desc: np.void) -> tuple[int, int]:
    out = int(desc["outer"]) * int(desc["inner"]) * int(desc["axis_total"])
    return 0, 2 * out + 12 * int(desc["num_inputs"])


@unit(ops.OP_CONCATENATION, _concat_cost)
def concatenation(desc: np.void, dma) -> Rerun | None:
    k = int(desc["num_inputs"])
    if not 0 < k <= ops.CONCAT_MAX_INPUTS:
        raise OpDescriptorError(f"concat of {k} inputs")
    outer, inner, total = dims((desc["outer"], desc["inner"], desc["axis_total"]), "concat")
    addrs = dma.read_array(int(desc["inputs_iova"]), np.uint64, (k,)).copy()
    sizes = dma.read_array(int(desc["sizes_iova"]), np.uint32, (k,)).astype(np.int64)
    if int(sizes.sum()) != total or np.any(sizes == 0):
        raise OpDescriptorError("concat input extents do not add up to the output's")
    xs = [dma.read_array(int(a), np.int8, (outer, int(s), inner)) for a, s in zip(addrs, sizes)]
    out = dma.write_array(int(desc["output"]), np.int8, (outer, total, inner))
    layout.concat(xs, 1, out=out)
    starts = np.concatenate(([0], np.cumsum(sizes)))
    copies = [data_calls.bind_copy(x, x, out[:, int(b):int(e)], out, (x, out))
              for x, b, e in zip(xs, starts[:-1], starts[1:])]
    if any(c is None for c in copies):
        return None
    return data_calls.bind_sequence([c for c in copies if c is not None], (*xs, out))


@unit(ops.OP_RESHAPE, lambda desc: (0, 2 * int(desc["count"])))
def reshape(desc: np.void, dma) -> Rerun | None:
    n = count(desc)
    x = dma.read_array(int(desc["input"]), np.int8, (n,))
    out = dma.write_array(int(desc["output"]), np.int8, (n,))
    out[:] = x
    return data_calls.bind_copy(x, x, out, out, (x, out))


def _elem(desc: np.void) -> int:
    return np.dtype(act_dtype(desc)).itemsize


@unit(ops.OP_TRANSPOSE, lambda desc: (0, 2 * _elem(desc) * prod(_ranked_raw(desc, "in_shape"))))
def transpose(desc: np.void, dma) -> Rerun | None:
    shape = ranked(desc, "in_shape")
    perm = tuple(int(p) for p in desc["perm"][:len(shape)])
    if sorted(perm) != list(range(len(shape))):
        raise OpDescriptorError(f"perm {perm} is not a permutation")
    dtype = act_dtype(desc)
    x = dma.read_array(int(desc["input"]), dtype, shape)
    out_shape = tuple(shape[p] for p in perm)
    out = dma.write_array(int(desc["output"]), dtype, out_shape)
    layout.transpose(x, perm, out=out)
    return data_calls.bind_copy(x.transpose(perm), x, out, out, (x, out))


def _pad_cost(desc: np.void) -> tuple[int, int]:
    shape = _ranked_raw(desc, "in_shape")
    r = len(shape)
    out = prod(d + int(a) + int(b) for d, a, b in
               zip(shape, desc["pad_before"][:r], desc["pad_after"][:r]))
    return 0, (prod(shape) + out) * _elem(desc)


@unit(ops.OP_PAD, _pad_cost)
def pad(desc: np.void, dma) -> Rerun | None:
    shape = ranked(desc, "in_shape")
    r = len(shape)
    pads = [(int(a), int(b)) for a, b in zip(desc["pad_before"][:r], desc["pad_after"][:r])]
    out_shape = dims([d + a + b for d, (a, b) in zip(shape, pads)], "padded shape")
    dtype = act_dtype(desc)
    x = dma.read_array(int(desc["input"]), dtype, shape)
    out = dma.write_array(int(desc["output"]), dtype, out_shape)
    layout.pad(x, pads, int(desc["pad_value"]), out=out)
    return data_calls.bind_pad(x, out, pads, int(desc["pad_value"]))


def _slice_args(desc: np.void, shape) -> tuple[tuple, dict]:
    r = len(shape)
    args = (desc["begin"][:r], desc["end"][:r], desc["strides"][:r])
    masks = dict(begin_mask=int(desc["begin_mask"]), end_mask=int(desc["end_mask"]),
                 shrink_axis_mask=int(desc["shrink_axis_mask"]))
    return args, masks


def _slice_cost(desc: np.void) -> tuple[int, int]:
    shape = _ranked_raw(desc, "in_shape")
    args, masks = _slice_args(desc, shape)
    return 0, 2 * _elem(desc) * prod(layout.strided_slice_shape(shape, *args, **masks))


@unit(ops.OP_STRIDED_SLICE, _slice_cost)
def strided_slice(desc: np.void, dma) -> Rerun | None:
    shape = ranked(desc, "in_shape")
    args, masks = _slice_args(desc, shape)
    out_shape = layout.strided_slice_shape(shape, *args, **masks)
    dtype = act_dtype(desc)
    x = dma.read_array(int(desc["input"]), dtype, shape)
    out = dma.write_array(int(desc["output"]), dtype, out_shape)
    layout.strided_slice(x, *args, **masks, out=out)
    return data_calls.bind_copy(layout.strided_slice_view(x, *args, **masks), x, out, out, (x, out))


def _gather_cost(desc: np.void) -> tuple[int, int]:
    return 0, 2 * _elem(desc) * int(desc["outer"]) * int(desc["count"]) * int(desc["inner"]) + 4 * int(desc["count"])


@unit(ops.OP_GATHER, _gather_cost)
def gather(desc: np.void, dma) -> Rerun | None:
    outer, axis, inner, k = dims((desc["outer"], desc["axis_size"], desc["inner"], desc["count"]), "gather")
    dims((outer, k, inner), "gather output")
    indices = dma.read_array(int(desc["indices_iova"]), np.int32, (k,))
    dtype = act_dtype(desc)
    x = dma.read_array(int(desc["input"]), dtype, (outer, axis, inner))
    out = dma.write_array(int(desc["output"]), dtype, (outer, k, inner))
    layout.gather(x, indices, out=out)
    return data_calls.bind_gather(x, indices, out)
