"""DENSIFY: sparse constants in TFLite's sparsity format are densified at import, exactly
as LiteRT densifies them (random formats, traversal orders and blocks)."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from libnpu.compiler.float_ref import run_float
from libnpu.compiler.tflite_import import TFLiteImportError, import_tflite
from tests.support import sparse
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model

OP = tflite.BuiltinOperator


def _random_sparse(rng: np.random.Generator, dtype) -> tuple[np.ndarray, np.ndarray, sparse.Sparsity]:
    rank = int(rng.integers(1, 5))
    shape = [int(rng.integers(1, 7)) for _ in range(rank)]
    block_map, block_sizes = [], []
    for d in range(rank):
        if rng.random() < 0.3 and shape[d] > 1:
            bs = int(rng.choice([2, 3]))
            shape[d] = shape[d] * bs if shape[d] * bs <= 12 else bs
            block_map.append(d)
            block_sizes.append(bs)
    dense = rng.standard_normal(shape).astype(dtype)
    dense[rng.random(shape) < rng.uniform(0.2, 0.95)] = 0
    order = list(rng.permutation(rank)) + list(rank + rng.permutation(len(block_map)))
    # LiteRT reads a block's size from its level's dense_size: block levels are DENSE.
    formats = [int(rng.integers(2)) for _ in range(rank)] + [sparse.DENSE] * len(block_map)
    values, sp = sparse.encode(dense, [int(o) for o in order], formats, block_map, block_sizes)
    return dense, values, sp


def _densify_model(dense: np.ndarray, values: np.ndarray, sp: sparse.Sparsity) -> bytes:
    """x + DENSIFY(w): fed zeros, LiteRT's output is its densified constant."""
    shape = dense.shape
    tensors = [TensorSpec(shape, dense.dtype, data=values, sparsity=sp, name="w_sparse"),
               TensorSpec(shape, dense.dtype, name="w"),
               TensorSpec(shape, np.float32, name="x"),
               TensorSpec(shape, np.float32, name="y")]
    ops = [OpSpec(OP.DENSIFY, [0], [1])]
    if dense.dtype == np.float16:
        tensors.append(TensorSpec(shape, np.float32, name="w32"))
        ops.append(OpSpec(OP.DEQUANTIZE, [1], [4]))
        ops.append(OpSpec(OP.ADD, [2, 4], [3], tflite.BuiltinOptions.AddOptions, _add_options))
    else:
        ops.append(OpSpec(OP.ADD, [2, 1], [3], tflite.BuiltinOptions.AddOptions, _add_options))
    return build_model(tensors, ops, [2], [3])


def _add_options(b):
    tflite.AddOptionsStart(b)
    return tflite.AddOptionsEnd(b)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_densify_matches_litert(dtype, litert) -> None:
    rng = np.random.default_rng(40 if dtype == np.float32 else 41)
    for case in range(60):
        dense, values, sp = _random_sparse(rng, dtype)
        model = _densify_model(dense, values, sp)
        zeros = np.zeros(dense.shape, np.float32)
        (expected,) = litert(model, [zeros])
        np.testing.assert_array_equal(expected, dense.astype(np.float32), err_msg=f"case {case}: litert")
        g = import_tflite(model)
        assert "DENSIFY" not in g.op_counts()
        (got,) = run_float(g, [zeros]).values()
        np.testing.assert_array_equal(got, expected, err_msg=f"case {case}: {sp.traversal_order} "
                                      f"{[lv.format for lv in sp.levels]} blocks {sp.block_map}")


def test_bad_sparsity_is_one_import_error() -> None:
    dense = np.eye(4, dtype=np.float32)
    values, sp = sparse.encode(dense, [0, 1], [sparse.DENSE, sparse.SPARSE_CSR])
    sp.levels[1].indices = sp.levels[1].indices + 9   # indices outside the tensor
    with pytest.raises(TFLiteImportError, match="sparsity"):
        import_tflite(_densify_model(dense, values, sp))
    values, sp = sparse.encode(dense, [0, 1], [sparse.DENSE, sparse.SPARSE_CSR])
    with pytest.raises(TFLiteImportError, match="sparsity"):
        import_tflite(_densify_model(dense, values[:2], sp))   # fewer values than the format names


@pytest.mark.parametrize("name", ["face_detection_full_range_sparse", "pose_detection"])
def test_mediapipe_sparse_models_compile(name, litert) -> None:
    """The two mediapipe models with DENSIFY (and DEPTH_TO_SPACE) import with the float
    results of LiteRT and compile for the chip (a shared bias constant included)."""
    from libnpu.compiler.lower import compile_model
    from libnpu.model_zoo import cache_dir
    path = cache_dir() / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"{path} is not in the model cache")
    g = import_tflite(path.read_bytes(), name)
    x = np.random.default_rng(42).uniform(0, 1, g.tensors[g.inputs[0]].shape).astype(np.float32)
    for got, ref in zip(run_float(g, [x]).values(), litert(path, [x])):
        np.testing.assert_allclose(got, ref, atol=1e-3 * max(1.0, float(np.abs(ref).max())))
    assert compile_model(path, random_count=1, recipe="fast").tasks
