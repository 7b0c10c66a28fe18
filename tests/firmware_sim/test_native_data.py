"""The C data-movement and table kernels (``native/data_kernels.c``) against the numpy
kernels they rerun, byte for byte: copies of transposed, sliced and concatenated views,
PAD, 256- and 65536-entry lookups, broadcast two-input lookups, MEAN, and every int8 op
that reruns as a table of its own reference (``kernels.byte_tables``). Random shapes up
to rank 6, broadcast shapes, int8 and int16 extremes; each rerun runs on new contents."""
from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from firmware_sim.kernels import (
    activations,
    binary,
    binary_table,
    byte_tables,
    elementwise,
    int16x8,
    layout,
    native,
    pooling,
    unary,
)
from firmware_sim.kernels.native import data_calls
from tests.support.quant_utils import random_int8, random_int16

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C kernels")


def _shape(rng: np.random.Generator, rank: int, high: int = 5) -> tuple[int, ...]:
    return tuple(int(v) for v in rng.integers(1, high, size=rank))


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    x = random_int16(rng, shape) if dtype == np.int16 else random_int8(rng, shape)
    info = np.iinfo(dtype)
    x.reshape(-1)[: min(2, x.size)] = [info.min, info.max][: min(2, x.size)]      # the extremes
    return x


def _refill(rng: np.random.Generator, *arrays: np.ndarray) -> None:
    for a in arrays:
        a[...] = _random(rng, a.shape, a.dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_transpose_and_strided_slice_copies_equal_numpy(dtype) -> None:
    """TRANSPOSE (every rank 1-6, random permutations) and STRIDED_SLICE (negative strides,
    shrunk axes, masks) as C copies of a strided view, rerun on new contents."""
    rng = np.random.default_rng(7)
    for rank in range(1, 7):
        for _ in range(12):
            x = _random(rng, _shape(rng, rank), dtype)
            perm = tuple(int(p) for p in rng.permutation(rank))
            out = np.empty(tuple(x.shape[p] for p in perm), dtype)
            rerun = data_calls.bind_copy(x.transpose(perm), x, out, out, (x, out))
            assert rerun is not None
            _refill(rng, x)
            rerun()
            np.testing.assert_array_equal(out, layout.transpose(x, perm))

            begin = [int(rng.integers(-d, d)) for d in x.shape]
            end = [int(rng.integers(-d - 1, d + 1)) for d in x.shape]
            strides = [int(rng.choice([-2, -1, 1, 2, 3])) for _ in x.shape]
            masks = dict(begin_mask=int(rng.integers(0, 1 << rank)), end_mask=int(rng.integers(0, 1 << rank)))
            view = layout.strided_slice_view(x, begin, end, strides, **masks)
            if view.size == 0:
                continue
            out = np.empty(view.shape, dtype)
            rerun = data_calls.bind_copy(view, x, out, out, (x, out))
            assert rerun is not None
            _refill(rng, x)
            rerun()
            np.testing.assert_array_equal(out, layout.strided_slice(x, begin, end, strides, **masks))


def test_concatenation_is_a_sequence_of_copies() -> None:
    rng = np.random.default_rng(8)
    for _ in range(20):
        outer, inner = int(rng.integers(1, 6)), int(rng.integers(1, 40))
        xs = [random_int8(rng, (outer, int(rng.integers(1, 7)), inner)) for _ in range(int(rng.integers(1, 5)))]
        total = sum(x.shape[1] for x in xs)
        out = np.empty((outer, total, inner), np.int8)
        starts = np.cumsum([0] + [x.shape[1] for x in xs])
        copies = [data_calls.bind_copy(x, x, out[:, b:e], out, (x, out)) for x, b, e in zip(xs, starts, starts[1:])]
        rerun = data_calls.bind_sequence([c for c in copies if c is not None], (*xs, out))
        assert rerun is not None and all(c is not None for c in copies)
        _refill(rng, *xs)
        rerun()
        np.testing.assert_array_equal(out, layout.concat(xs, 1))


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_pad_equals_numpy(dtype) -> None:
    """Every rank 1-6, pads of 0-3 on either side, pad values at the type's extremes."""
    rng = np.random.default_rng(9)
    info = np.iinfo(dtype)
    for rank, value in itertools.product(range(1, 7), (info.min, info.max, 0, 5)):
        for _ in range(4):
            x = _random(rng, _shape(rng, rank, 6 if rank < 5 else 4), dtype)
            pads = [(int(rng.integers(0, 4)), int(rng.integers(0, 4))) for _ in range(rank)]
            out = np.empty(tuple(d + a + b for d, (a, b) in zip(x.shape, pads)), dtype)
            rerun = data_calls.bind_pad(x, out, pads, value)
            assert rerun is not None
            out[...] = 17       # every byte must be written
            _refill(rng, x)
            rerun()
            np.testing.assert_array_equal(out, layout.pad(x, pads, value))


@pytest.mark.parametrize("in_dtype, out_dtype", list(itertools.product([np.int8, np.int16], repeat=2)))
def test_lut_equals_numpy(in_dtype, out_dtype) -> None:
    """Every index and table width: int8 or int16 in, int8 or int16 out; int8 to int8 (64
    lookups a step in AVX-512 VBMI) at every tail length and in place, all 256 indices."""
    rng = np.random.default_rng(10)
    entries = 256 if in_dtype == np.int8 else 1 << 16
    for n in (1, 7, 63, 64, 65, 129, 256, 1000):
        x, table, out = _random(rng, (n,), in_dtype), _random(rng, (entries,), out_dtype), np.empty(n, out_dtype)
        rerun = data_calls.bind_lut(x, table, out)
        assert rerun is not None
        _refill(rng, x)
        if n == 256 and in_dtype == np.int8:
            x[:] = np.arange(-128, 128)
        rerun()
        np.testing.assert_array_equal(out, table[x.view(np.uint8 if in_dtype == np.int8 else np.uint16)])
        if in_dtype == out_dtype:
            want = table[x.view(np.uint8 if in_dtype == np.int8 else np.uint16)]
            rerun = data_calls.bind_lut(x, table, x)
            assert rerun is not None
            rerun()
            np.testing.assert_array_equal(x, want)


def _broadcast_pair(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    rank = int(rng.integers(1, 7))
    full = _shape(rng, rank, 6)
    a = tuple(d if rng.random() < 0.6 else 1 for d in full)
    b = tuple(d if rng.random() < 0.6 else 1 for d in full)
    b = b[int(rng.integers(0, rank)):]          # fewer axes: numpy's leading broadcast
    return a, b


def test_broadcast_add_and_mul_rerun_in_c() -> None:
    """int8 ADD and MUL over broadcast shapes (a row, a channel vector, a scalar, either
    side): the C rerun of their table gives the numpy kernel's bytes."""
    rng = np.random.default_rng(11)
    params = {"add": dict(input1_zp=-128, input2_zp=127, output_zp=1, left_shift=20,
                          input1_multiplier=1 << 30, input1_shift=-1, input2_multiplier=1_500_000_000,
                          input2_shift=-2, output_multiplier=1_800_000_000, output_shift=-18,
                          act_min=-100, act_max=127),
              "mul": dict(input1_zp=3, input2_zp=-7, output_zp=-128, multiplier=1_300_000_000, shift=-9,
                          act_min=-128, act_max=127)}
    for kind, kw in params.items():
        for _ in range(30):
            sa, sb = _broadcast_pair(rng)
            a, b = random_int8(rng, sa), random_int8(rng, sb)
            out = np.empty(np.broadcast_shapes(sa, sb), np.int8)
            rerun = elementwise.binary_bound(kind, a, b, out=out, **kw)     # first use: maybe no table
            rerun = rerun or elementwise.binary_bound(kind, a, b, out=out, **kw)
            assert rerun is not None
            _refill(rng, a, b)
            rerun()
            with native.enabled(False):
                np.testing.assert_array_equal(out, getattr(elementwise, kind)(a, b, **kw))


_ADD_LIKE = dict(input1_zp=-5, input2_zp=9, output_zp=-3, left_shift=20, input1_multiplier=1 << 30,
                 input1_shift=-1, input2_multiplier=1_500_000_000, input2_shift=-2,
                 output_multiplier=1_800_000_000, output_shift=-17)
_BINARY = [("sub", binary.sub, dict(_ADD_LIKE, act_min=-120, act_max=120)),
           ("squared_difference", binary.squared_difference, dict(_ADD_LIKE, left_shift=7)),
           ("maximum", binary.maximum, dict(input1_zp=0, input2_zp=0, output_zp=0)),
           ("minimum", binary.minimum, dict(input1_zp=0, input2_zp=0, output_zp=0)),
           ("prelu", binary.prelu, dict(input1_zp=-128, input2_zp=4, output_zp=2, output_multiplier_1=1 << 30,
                                        output_shift_1=0, output_multiplier_2=1_200_000_000, output_shift_2=-3))]
_UNARY = [("relu", activations.relu_family, dict(input_zp=-128, output_zp=-128, multiplier=1 << 30, shift=1,
                                                 act_min=-128, act_max=127)),
          ("requantize", elementwise.requantize, dict(input_zp=127, output_zp=-3, multiplier=1_700_000_000,
                                                      shift=-1)),
          ("leaky_relu", unary.leaky_relu, dict(input_zp=3, output_zp=-2, multiplier_identity=1 << 30,
                                                shift_identity=1, multiplier_alpha=1_300_000_000, shift_alpha=-4)),
          ("hard_swish", unary.hard_swish, dict(input_zp=-10, output_zp=-100, output_multiplier=20000,
                                                output_shift=-1, reluish_multiplier=25000, reluish_shift=1))]
_UNARY16 = [  # (kind, kernel, params, input dtype, output dtype)
    ("relu", activations.relu_family, dict(input_zp=0, output_zp=0, multiplier=1 << 30, shift=1, act_min=-32768,
                                           act_max=20000), np.int16, np.int16),
    ("requantize to int16", functools.partial(int16x8.requantize, out_dtype=np.int16),
     dict(input_zp=-128, output_zp=0, multiplier=1_700_000_000, shift=8), np.int8, np.int16),
    ("requantize to int8", functools.partial(int16x8.requantize, out_dtype=np.int8),
     dict(input_zp=0, output_zp=127, multiplier=1_700_000_000, shift=-9), np.int16, np.int8),
    ("requantize to int16", functools.partial(int16x8.requantize, out_dtype=np.int16),
     dict(input_zp=0, output_zp=0, multiplier=1_300_000_000, shift=1), np.int16, np.int16),
    ("hard_swish", unary.hard_swish, dict(input_zp=0, output_zp=0, output_multiplier=1_500_000_000,
                                          output_shift=-1, reluish_multiplier=1_200_000_000, reluish_shift=2),
     np.int16, np.int16)]


@pytest.mark.parametrize("kind, kernel, params", _BINARY, ids=[b[0] for b in _BINARY])
def test_two_byte_ops_rerun_as_their_table(kind, kernel, params) -> None:
    rng = np.random.default_rng(12)
    for _ in range(10):
        sa, sb = _broadcast_pair(rng)
        a, b = random_int8(rng, sa), random_int8(rng, sb)
        out = np.empty(np.broadcast_shapes(sa, sb), np.int8)
        rerun = byte_tables.binary_bound(kind, kernel, a, b, out, **params)
        assert rerun is not None
        _refill(rng, a, b)
        rerun()
        np.testing.assert_array_equal(out, kernel(a, b, **params))


@pytest.mark.parametrize("kind, kernel, params", _UNARY, ids=[u[0] for u in _UNARY])
def test_one_byte_ops_rerun_as_their_table(kind, kernel, params) -> None:
    rng = np.random.default_rng(13)
    x = random_int8(rng, (300,))
    out = np.empty_like(x)
    rerun = byte_tables.unary_bound(kind, kernel, x, out, **params)
    assert rerun is not None
    _refill(rng, x)
    rerun()
    np.testing.assert_array_equal(out, kernel(x, **params))


@pytest.mark.parametrize("kind, kernel, params, in_dtype, out_dtype", _UNARY16,
                         ids=[f"{u[0]} {np.dtype(u[3])}" for u in _UNARY16])
def test_int16_ops_of_one_input_rerun_as_their_table(kind, kernel, params, in_dtype, out_dtype) -> None:
    """int16 RELU, HARD_SWISH and the REQUANTIZEs between int8 and int16: a 256- or
    65536-entry table of the numpy kernel, looked up in C."""
    rng = np.random.default_rng(15)
    x = _random(rng, (500,), in_dtype)
    out = np.empty(x.shape, out_dtype)
    rerun = byte_tables.unary_bound(kind, kernel, x, out, **params)
    assert rerun is not None
    _refill(rng, x)
    rerun()
    np.testing.assert_array_equal(out, kernel(x, **params))


def test_a_kernel_that_refuses_an_input_gets_no_table() -> None:
    """DIV refuses a zero divisor (b at its zero point) in numpy: no table, so the op keeps
    running in numpy and refuses it there."""
    def picky(a, b, out=None):
        if np.any(b == 0):
            raise ZeroDivisionError("b == 0")
        return np.floor_divide(a, b, out=out)
    a = np.array([4, 8], np.int8)
    b = np.array([2, 4], np.int8)
    assert byte_tables.binary_bound("picky", picky, a, b, np.empty(2, np.int8)) is None


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_mean_reruns_in_c_as_numpy_computes(dtype) -> None:
    """MEAN over random axis sets of rank 1-6 tensors, zero points at the extremes (int8),
    requantizations with left and right shifts."""
    rng = np.random.default_rng(14)
    for _ in range(60):
        rank = int(rng.integers(1, 7))
        x = _random(rng, _shape(rng, rank, 7), dtype)
        axes = tuple(a for a in range(rank) if rng.random() < 0.5) or (rank - 1,)
        zps = (0, 0) if dtype == np.int16 else (int(rng.choice([-128, 127, 3])), int(rng.choice([-128, 127, -9])))
        kw = dict(input_zp=zps[0], output_zp=zps[1], multiplier=int(rng.integers(1 << 30, 1 << 31)),
                  shift=int(rng.integers(-8, 3)))
        out = np.empty(tuple(1 if i in axes else d for i, d in enumerate(x.shape)), dtype)
        rerun = pooling.mean_bound(x, axes, **kw, out=out)
        assert rerun is not None
        _refill(rng, x)
        rerun()
        np.testing.assert_array_equal(out, pooling.mean(x, axes, **kw))


def test_merge_axes_keeps_axes_only_where_an_operand_needs_them() -> None:
    assert data_calls.merge_axes((2, 3, 4), (12, 4, 1), (12, 4, 1)) == ([24], [[1], [1]])
    assert data_calls.merge_axes((2, 3, 4), (12, 4, 1), (4, 0, 1)) == ([2, 3, 4], [[12, 4, 1], [4, 0, 1]])
    assert data_calls.merge_axes((1, 1), (1, 1)) == ([1], [[0]])
    assert data_calls.merge_axes((2,) * 7, tuple(2 ** i for i in range(7))) is None   # 7 axes left


def test_gather_reruns_in_c_and_checks_its_indices_each_time() -> None:
    """GATHER's rerun reads the indices again (a model may compute them): new indices give
    numpy's rows; one outside the axis fails the rerun with the numpy kernel's error and
    writes nothing."""
    from firmware_sim.errors import InvalidCommand
    rng = np.random.default_rng(16)
    for _ in range(20):
        outer, axis, inner, k = (int(v) for v in rng.integers(1, 9, size=4))
        x, out = random_int8(rng, (outer, axis, inner)), np.empty((outer, k, inner), np.int8)
        indices = rng.integers(0, axis, size=k).astype(np.int32)
        layout.gather(x, indices, out=out)
        rerun = data_calls.bind_gather(x, indices, out)
        assert rerun is not None
        _refill(rng, x)
        indices[...] = rng.integers(0, axis, size=k)
        rerun()
        np.testing.assert_array_equal(out, layout.gather(x, indices))
    before = out.copy()
    indices[-1] = axis
    with pytest.raises(InvalidCommand):
        rerun()
    with pytest.raises(InvalidCommand):
        layout.gather(x, indices)
    np.testing.assert_array_equal(out, before)


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_sum_max_and_min_rerun_in_c_as_numpy_computes(kind: str) -> None:
    """SUM (requantized, zero points at the int8 extremes), REDUCE_MAX and REDUCE_MIN over
    random axis sets of rank 1-6 tensors."""
    from firmware_sim.kernels import reduce
    rng = np.random.default_rng(17)
    for _ in range(40):
        rank = int(rng.integers(1, 7))
        x = _random(rng, _shape(rng, rank, 6), np.int8)
        axes = tuple(a for a in range(rank) if rng.random() < 0.5) or (0,)
        out = np.empty(tuple(1 if i in axes else d for i, d in enumerate(x.shape)), np.int8)
        if kind == "sum":
            kw = dict(input_zp=int(rng.choice([-128, 127, 4])), output_zp=int(rng.choice([-128, 127, -9])),
                      multiplier=int(rng.integers(1 << 30, 1 << 31)), shift=int(rng.integers(-12, 3)))
            reduce.reduce_sum(x, axes, out=out, **kw)
            count = int(np.prod([x.shape[a] for a in axes]))
            rerun = data_calls.bind_mean(x, axes, out, zp_total=kw["input_zp"] * count, multiplier=kw["multiplier"],
                                         shift=kw["shift"], output_zp=kw["output_zp"], act_min=-128, act_max=127)
        else:
            kw = {}
            (reduce.reduce_max if kind == "max" else reduce.reduce_min)(x, axes, out=out)
            rerun = data_calls.bind_mean(x, axes, out, reduce=kind)
        assert rerun is not None
        _refill(rng, x)
        rerun()
        fn = {"sum": reduce.reduce_sum, "max": reduce.reduce_max, "min": reduce.reduce_min}[kind]
        np.testing.assert_array_equal(out, fn(x, axes, **kw))


def test_copies_between_overlapping_memory_stay_in_numpy() -> None:
    """A RESHAPE, PAD or GATHER whose output overlaps its input (one buffer, two views) gets
    no C rerun: numpy's kernels go through a temporary, a C copy would read what it wrote."""
    buffer = np.arange(64, dtype=np.int8)
    x, out = buffer[:32], buffer[16:48]
    assert data_calls.bind_copy(x, x, out, out, (x, out)) is None
    assert data_calls.bind_pad(buffer[:16].reshape(4, 4), buffer[8:44].reshape(6, 6), [(1, 1), (1, 1)], 0) is None
    indices = np.zeros(2, np.int32)
    assert data_calls.bind_gather(buffer[:8].reshape(1, 4, 2), indices, buffer[4:8].reshape(1, 2, 2)) is None
    assert data_calls.bind_copy(buffer[:16], buffer[:16], buffer[16:32], buffer[16:32], ()) is not None


def test_elementwise_reruns_run_in_place_but_not_on_partly_overlapping_memory() -> None:
    """An ADD into its own first operand reruns in C and gives numpy's bytes; an output that
    overlaps a broadcast operand only in part stays in numpy."""
    rng = np.random.default_rng(18)
    table = random_int8(rng, (1 << 16,))
    a, b = random_int8(rng, (4, 8)), random_int8(rng, (8,))
    expect = binary_table.lookup(table, a, b, a.shape)
    rerun = data_calls.bind_table2_broadcast(a, b, table, a)
    assert rerun is not None
    rerun()
    np.testing.assert_array_equal(a, expect)
    buffer = random_int8(rng, (40,))
    assert data_calls.bind_table2_broadcast(buffer[:32].reshape(4, 8), buffer[24:32], table,
                                            buffer[:32].reshape(4, 8)) is None
    assert data_calls.bind_lut(buffer[:16], table[:256], buffer[8:24]) is None
