"""Encode a dense array in TFLite's sparse tensor format (``SparsityParameters``), the
inverse of what the importer decodes, so tests can write sparse models LiteRT densifies."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import flatbuffers
import numpy as np
import tflite

DENSE, SPARSE_CSR = 0, 1


@dataclass
class Level:
    """One level of the storage tree: DENSE with its size, or SPARSE_CSR with its arrays."""
    format: int
    dense_size: int = 0
    segments: np.ndarray | None = None
    indices: np.ndarray | None = None


@dataclass
class Sparsity:
    traversal_order: list[int]
    block_map: list[int]
    levels: list[Level]

    def write(self, b: flatbuffers.Builder) -> int:
        """The ``SparsityParameters`` table (indices as uint8/uint16/int32 by their range)."""
        metas = []
        for lv in self.levels:
            seg = idx = None
            if lv.format == SPARSE_CSR:
                seg, idx = _index_vector(b, lv.segments), _index_vector(b, lv.indices)
            tflite.DimensionMetadataStart(b)
            tflite.DimensionMetadataAddFormat(b, lv.format)
            tflite.DimensionMetadataAddDenseSize(b, lv.dense_size)
            if seg is not None:
                tflite.DimensionMetadataAddArraySegmentsType(b, seg[0])
                tflite.DimensionMetadataAddArraySegments(b, seg[1])
                tflite.DimensionMetadataAddArrayIndicesType(b, idx[0])
                tflite.DimensionMetadataAddArrayIndices(b, idx[1])
            metas.append(tflite.DimensionMetadataEnd(b))
        order = b.CreateNumpyVector(np.asarray(self.traversal_order, np.int32))
        bmap = b.CreateNumpyVector(np.asarray(self.block_map, np.int32)) if self.block_map else None
        b.StartVector(4, len(metas), 4)
        for m in reversed(metas):
            b.PrependUOffsetTRelative(m)
        meta_vec = b.EndVector()
        tflite.SparsityParametersStart(b)
        tflite.SparsityParametersAddTraversalOrder(b, order)
        if bmap is not None:
            tflite.SparsityParametersAddBlockMap(b, bmap)
        tflite.SparsityParametersAddDimMetadata(b, meta_vec)
        return tflite.SparsityParametersEnd(b)


def _index_vector(b: flatbuffers.Builder, values: np.ndarray) -> tuple[int, int]:
    top = int(values.max(initial=0))
    kind, dtype, mod = (3, np.uint8, "Uint8Vector") if top < 256 else \
        (2, np.uint16, "Uint16Vector") if top < 65536 else (1, np.int32, "Int32Vector")
    vec = b.CreateNumpyVector(np.asarray(values, dtype))
    getattr(tflite, f"{mod}Start")(b)
    getattr(tflite, f"{mod}AddValues")(b, vec)
    return kind, getattr(tflite, f"{mod}End")(b)


def encode(dense: np.ndarray, traversal_order: Sequence[int], formats: Sequence[int],
           block_map: Sequence[int] = (), block_sizes: Sequence[int] = ()) -> tuple[np.ndarray, Sparsity]:
    """``(stored values, sparsity)`` for ``dense``; ``formats[l]`` is level ``l``'s format
    (levels follow ``traversal_order`` over the expanded dimensions)."""
    rank = dense.ndim
    shape = list(dense.shape)
    expanded_shape = [shape[d] // dict(zip(block_map, block_sizes)).get(d, 1) for d in range(rank)]
    expanded_shape += list(block_sizes)
    # expanded[i_0..i_{rank-1}, b_0..] = dense[i_d * bs + b_k]
    split_shape, axes_outer, inner_of = [], [], {}
    for d in range(rank):
        if d in block_map:
            k = list(block_map).index(d)
            split_shape += [expanded_shape[d], block_sizes[k]]
        else:
            split_shape += [shape[d]]
    view = dense.reshape(split_shape)
    pos = 0
    for d in range(rank):
        axes_outer.append(pos)
        pos += 2 if d in block_map else 1
        if d in block_map:
            inner_of[d] = pos - 1
    expanded = view.transpose(axes_outer + [inner_of[d] for d in block_map])
    ordered = expanded.transpose(list(traversal_order))
    levels: list[Level] = []
    nodes = [()]  # coordinates (in traversal order) of the stored subtrees of the current level
    for level, fmt in enumerate(formats):
        size = ordered.shape[level]
        if fmt == DENSE:
            levels.append(Level(DENSE, size))
            nodes = [n + (i,) for n in nodes for i in range(size)]
        else:
            segments, indices, kept = [0], [], []
            for n in nodes:
                for i in range(size):
                    if np.any(ordered[n + (i,)] != 0):
                        indices.append(i)
                        kept.append(n + (i,))
                segments.append(len(indices))
            levels.append(Level(SPARSE_CSR, 0, np.asarray(segments), np.asarray(indices)))
            nodes = kept
    values = np.asarray([ordered[n] for n in nodes], dense.dtype)
    return values, Sparsity(list(traversal_order), list(block_map), levels)
