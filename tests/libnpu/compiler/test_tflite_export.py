import numpy as np
import pytest

from libnpu.compiler.float_ref import run_float
from libnpu.compiler.ir import Graph, Op, Tensor
from libnpu.compiler.tflite_export import TFLiteExportError, export_tflite
from libnpu.compiler.tflite_import import import_tflite, load_tflite


def test_resnet8_round_trip_is_bit_exact(resnet8_path, litert):
    g = load_tflite(resnet8_path)
    data = export_tflite(g)
    again = import_tflite(data)
    assert again.op_counts() == g.op_counts()
    for name, t in g.tensors.items():
        u = again.tensors[name]
        assert (u.shape, u.dtype, u.quant) == (t.shape, t.dtype, t.quant), name
        if t.is_constant:
            np.testing.assert_array_equal(u.data, t.data)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.integers(-128, 128, (1, 32, 32, 3), dtype=np.int8)
        np.testing.assert_array_equal(litert(data, [x])[0], litert(resnet8_path, [x])[0])


def test_blazeface_float_round_trip(blazeface_path, litert):
    data = export_tflite(load_tflite(blazeface_path))
    x = np.random.default_rng(1).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    for a, b in zip(litert(data, [x], reference=False), litert(blazeface_path, [x], reference=False)):
        np.testing.assert_array_equal(a, b)


def _conv_graph(pads) -> Graph:
    rng = np.random.default_rng(2)
    g = Graph("pads")
    g.add_tensor(Tensor("x", (1, 7, 7, 2), "float32"))
    g.add_const("w", rng.standard_normal((3, 3, 3, 2)).astype(np.float32))
    g.add_tensor(Tensor("y", (1, 4, 4, 3), "float32"))
    g.add_op(Op("CONV_2D", ["x", "w", ""], ["y"], dict(stride=(2, 2), dilation=(1, 1), pads=pads, groups=1,
                                                       activation="NONE")))
    g.inputs, g.outputs = ["x"], ["y"]
    return g


def test_explicit_padding_becomes_pad_op(litert):
    x = np.random.default_rng(3).standard_normal((1, 7, 7, 2)).astype(np.float32)
    for pads, extra_pad in (((1, 1, 1, 1), False), ((2, 1, 0, 3), True)):
        g = _conv_graph(pads)
        if pads == (2, 1, 0, 3):
            g.tensors["y"] = Tensor("y", (1, 4, 4, 3), "float32")
        data = export_tflite(g)
        assert ("PAD" in import_tflite(data).op_counts()) == extra_pad
        np.testing.assert_allclose(litert(data, [x], reference=False)[0], run_float(g, [x])["y"],
                                   rtol=1e-5, atol=1e-5)


def test_pooling_padding_must_be_same_or_valid():
    g = Graph("pool")
    g.add_tensor(Tensor("x", (1, 6, 6, 1), "float32"))
    g.add_tensor(Tensor("y", (1, 3, 3, 1), "float32"))
    g.add_op(Op("MAX_POOL_2D", ["x"], ["y"], dict(filter=(2, 2), stride=(2, 2), pads=(1, 1, 1, 1),
                                                 activation="NONE")))
    g.inputs, g.outputs = ["x"], ["y"]
    with pytest.raises(TFLiteExportError, match="neither SAME nor VALID"):
        export_tflite(g)


_SLICES = [  # begin, end, strides, begin/end/shrink masks, input shape
    ([0, 1, 0], [1, 4, 5], [1, 1, 2], 0, 0, 0, (2, 5, 6)),
    ([0, -1, 5], [2, -6, 0], [1, -1, -2], 0, 0, 0, (2, 5, 6)),
    ([1, 0, 0], [2, 0, 0], [1, 1, 1], 0, 0b110, 0b001, (2, 5, 6)),  # shrink axis 0, end-mask others
    ([0, 4, 5], [0, 0, 0], [1, -2, -1], 0b001, 0b111, 0, (2, 5, 6)),  # reversed through index 0
    ([-1, 2, -3], [0, 3, 0], [1, 1, 1], 0, 0b101, 0b010, (2, 5, 6)),  # negative begins, shrink middle
]


@pytest.mark.parametrize("case", range(len(_SLICES)))
def test_strided_slice_masks_import_and_export(case, litert):
    """Masks and negative indices in a STRIDED_SLICE file resolve to bounds that the float
    reference, and the same op exported again, evaluate exactly like LiteRT."""
    from libnpu.compiler.float_ref import run_float
    from tests.support.model_builders import single_op_tflite
    begin, end, strides, bmask, emask, smask, shape = _SLICES[case]
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    index = []
    for d in range(len(shape)):
        if (smask >> d) & 1:
            index.append(begin[d])
        else:
            index.append(slice(None if (bmask >> d) & 1 else begin[d], None if (emask >> d) & 1 else end[d],
                               strides[d]))
    expected = x[tuple(index)]
    i32 = lambda v: np.asarray(v, np.int32)  # noqa: E731
    model = single_op_tflite(45, [("x", shape, None), ("b", (3,), i32(begin)), ("e", (3,), i32(end)),
                                  ("s", (3,), i32(strides)), ("y", expected.shape, None)],
                             [0, 1, 2, 3], [4], options=("StridedSliceOptions", dict(
                                 BeginMask=bmask, EndMask=emask, ShrinkAxisMask=smask)))
    np.testing.assert_array_equal(litert(model, [x], reference=False)[0], expected)
    g = import_tflite(model)
    np.testing.assert_array_equal(run_float(g, [x])["y"], expected)
    np.testing.assert_array_equal(litert(export_tflite(g), [x], reference=False)[0], expected)


@pytest.mark.parametrize("keep_dims", [False, True])
def test_a_float_reduce_l2_exports_as_the_root_of_summed_squares(keep_dims, litert):
    """TFLite has no L2 reduction: a float REDUCE_L2 (an STFT magnitude kept in float on the
    CPU, libnpu.compiler.cpu_float) is written as SQRT(SUM(MUL(x, x))), as LiteRT computes it."""
    g = Graph("l2")
    g.add_tensor(Tensor("x", (2, 3, 5), "float32"))
    g.add_tensor(Tensor("y", (1, 3, 5) if keep_dims else (3, 5), "float32"))
    g.add_op(Op("REDUCE_L2", ["x"], ["y"], dict(axes=(0,), keep_dims=keep_dims)))
    g.inputs, g.outputs = ["x"], ["y"]
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    (got,) = litert(export_tflite(g), [x])
    np.testing.assert_allclose(got, run_float(g, [x])["y"], rtol=1e-6)


@pytest.mark.parametrize("bounds", [(1e-10, np.inf), (-0.5, 0.25), (-np.inf, np.inf)])
def test_a_float_clip_exports_as_maximum_and_minimum(bounds, litert):
    """TFLite has no CLIP of any bounds: a float CLIP (``max(x, 1e-10)`` before a log, kept
    in float on the CPU, libnpu.compiler.cpu_float) is written as MINIMUM(MAXIMUM(x, lo), hi)."""
    g = Graph("clip")
    g.add_tensor(Tensor("x", (2, 5), "float32"))
    g.add_tensor(Tensor("y", (2, 5), "float32"))
    g.add_op(Op("CLIP", ["x"], ["y"], dict(min=bounds[0], max=bounds[1])))
    g.inputs, g.outputs = ["x"], ["y"]
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    (got,) = litert(export_tflite(g), [x])
    np.testing.assert_array_equal(got, run_float(g, [x])["y"])


def test_a_float_square_imports_as_mul_of_itself(litert):
    """TFLite SQUARE (basic-pitch's ``|CQT|^2`` before its log) is MUL(x, x): a chip op, and
    one a front end kept in float on the CPU can hold (a host call before)."""
    import tflite

    from tests.support.model_builders import single_op_tflite
    model = single_op_tflite(tflite.BuiltinOperator.SQUARE, [("x", (2, 5), None), ("y", (2, 5), None)], [0], [1])
    g = import_tflite(model)
    assert [op.type for op in g.ops] == ["MUL"]
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_array_equal(run_float(g, [x])["y"], litert(model, [x], reference=False)[0])
