"""TFLite's sparse tensor format (``SparsityParameters`` in the flatbuffer schema), decoded
to dense arrays at import time: the chip runs dense weights only, so a model's DENSIFY
operators become plain constants.

The format stores a tensor of rank ``n`` as a tree of ``n + len(block_map)`` levels. The
levels walk the *expanded* dimensions in ``traversal_order``: dimension ``d < n`` is the
original axis ``d`` (counted in blocks when it is blocked), dimension ``n + k`` the
position inside a block of axis ``block_map[k]``. A DENSE level of size ``s`` turns each
parent position ``p`` into the positions ``p * s + i``; a SPARSE_CSR level lists, for
parent ``p``, the children ``array_segments[p] .. array_segments[p + 1] - 1`` whose
coordinates are ``array_indices[j]`` and whose position is ``j``. The positions of the
last level index the stored values.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tflite

__all__ = ["SparsityError", "densify"]

_DENSE, _SPARSE_CSR = 0, 1
_INDEX_VECTORS = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}


class SparsityError(ValueError):
    """Sparsity parameters that do not describe the tensor."""


def _index_vector(kind: int, table: Any, what: str) -> np.ndarray:
    cls = _INDEX_VECTORS.get(kind)
    if cls is None or table is None:
        raise SparsityError(f"{what}: missing or unknown index vector type {kind}")
    vec = cls()
    vec.Init(table.Bytes, table.Pos)
    return np.asarray(vec.ValuesAsNumpy() if vec.ValuesLength() else [], np.int64)


def densify(sparsity: Any, shape: tuple[int, ...], values: np.ndarray) -> np.ndarray:
    """The dense array of ``shape`` that ``values`` (the stored elements, in storage
    order) and ``sparsity`` (a ``tflite.SparsityParameters``) describe; zeros elsewhere."""
    rank = len(shape)
    order = [int(v) for v in sparsity.TraversalOrderAsNumpy()] if sparsity.TraversalOrderLength() else []
    block_map = [int(v) for v in sparsity.BlockMapAsNumpy()] if sparsity.BlockMapLength() else []
    levels = rank + len(block_map)
    if sorted(order) != list(range(levels)) or sparsity.DimMetadataLength() != levels:
        raise SparsityError(f"traversal order {order} / {sparsity.DimMetadataLength()} levels "
                            f"do not fit rank {rank} with {len(block_map)} blocked axes")
    if any(not 0 <= d < rank for d in block_map) or len(set(block_map)) != len(block_map):
        raise SparsityError(f"block map {block_map} does not fit rank {rank}")
    positions = np.zeros(1, np.int64)
    coords = np.zeros((1, levels), np.int64)
    sizes = [0] * levels
    for level in range(levels):
        meta = sparsity.DimMetadata(level)
        dim = order[level]
        if meta.Format() == _DENSE:
            size = int(meta.DenseSize())
            sizes[dim] = size
            child = np.arange(size, dtype=np.int64)
            positions = (positions[:, None] * size + child[None, :]).reshape(-1)
            coords = np.repeat(coords, size, axis=0)
            coords[:, dim] = np.tile(child, len(coords) // max(size, 1))
        elif meta.Format() == _SPARSE_CSR:
            segments = _index_vector(meta.ArraySegmentsType(), meta.ArraySegments(), f"level {level} segments")
            indices = _index_vector(meta.ArrayIndicesType(), meta.ArrayIndices(), f"level {level} indices")
            if len(positions) and (positions.max() + 1 >= len(segments) or np.any(np.diff(segments) < 0)
                                   or segments[-1] > len(indices) or segments[0] < 0):
                raise SparsityError(f"level {level}: array segments do not fit the tensor")
            counts = segments[positions + 1] - segments[positions]
            starts = np.repeat(segments[positions], counts)
            offsets = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
            positions = starts + offsets
            coords = np.repeat(coords, counts, axis=0)
            coords[:, dim] = indices[positions]
            sizes[dim] = -1  # known from the shape below
        else:
            raise SparsityError(f"level {level}: unknown dimension format {meta.Format()}")
    block = {d: k for k, d in enumerate(block_map)}
    dense_coords = []
    for d in range(rank):
        c = coords[:, d]
        if d in block:
            bsize = sizes[rank + block[d]]
            if bsize <= 0 or shape[d] % bsize:
                raise SparsityError(f"axis {d} of {shape} is not a whole number of blocks")
            c = c * bsize + coords[:, rank + block[d]]
        dense_coords.append(c)
    flat_values = np.asarray(values).reshape(-1)
    if len(positions) and (positions.max() >= flat_values.size or positions.min() < 0):
        raise SparsityError(f"{flat_values.size} stored values, the format addresses {positions.max() + 1}")
    if any(np.any((c < 0) | (c >= n)) for c, n in zip(dense_coords, shape)):
        raise SparsityError(f"an index lies outside the shape {shape}")
    dense = np.zeros(shape, flat_values.dtype)
    dense[tuple(dense_coords)] = flat_values[positions]
    return dense
