import numpy as np
import pytest

from libnpu.compiler.float_ref import FloatInterpreter, pad_nhwc
from libnpu.compiler.ir import Graph, IRError, Op, Tensor
from libnpu.compiler.ops.activation import sigmoid
from libnpu.compiler.ops.conv import depthwise_conv2d
from libnpu.compiler.ops.pool import pool
from libnpu.compiler.ops.resize import resize_bilinear, resize_nearest
from libnpu.compiler.tflite_import import load_tflite


def test_blazeface_matches_litert_float(blazeface_path, astronaut, litert):
    g = load_tflite(blazeface_path)
    # Centre crop around the face, 128x128 by striding, scaled to [-1, 1] as MediaPipe does.
    x = (astronaut[0:384:3, 64:448:3].astype(np.float32) / 127.5 - 1.0)[None]
    ours = FloatInterpreter(g).run([x])
    ref = litert(blazeface_path, [x], reference=False)
    for name, r in zip(g.outputs, ref):
        np.testing.assert_allclose(ours[name], r, rtol=1e-4, atol=1e-3 * np.abs(r).max())
    # It finds the astronaut's face: some anchor scores high.
    assert ours["classificators"].max() > 0.0


def test_resnet8_int8_simulation_close_to_litert(resnet8_path, litert):
    """Simulated int8 (float compute, int grid on every tensor) stays within a few LSBs."""
    g = load_tflite(resnet8_path)
    fi = FloatInterpreter(g)
    rng = np.random.default_rng(1)
    agree, diffs = 0, []
    for _ in range(8):
        x = rng.integers(-128, 128, (1, 32, 32, 3), dtype=np.int8)
        ours = fi.run([x])[g.outputs[0]]
        ref = litert(resnet8_path, [x])[0]
        agree += int(ours.argmax() == ref.argmax())
        diffs.append(np.abs(ours.astype(int) - ref).mean())
    assert agree >= 7
    assert np.mean(diffs) < 4


def test_keep_returns_intermediates():
    g = Graph("t")
    g.add_tensor(Tensor("x", (1, 4), "float32"))
    g.add_tensor(Tensor("y", (1, 4), "float32"))
    g.add_tensor(Tensor("z", (1, 4), "float32"))
    g.add_op(Op("RELU", ["x"], ["y"]))
    g.add_op(Op("LOGISTIC", ["y"], ["z"]))
    g.inputs, g.outputs = ["x"], ["z"]
    out = FloatInterpreter(g).run({"x": np.array([[-2, -1, 0, 3]], np.float32)}, keep=True)
    np.testing.assert_array_equal(out["y"], [[0, 0, 0, 3]])
    np.testing.assert_allclose(out["z"], 1 / (1 + np.exp(-out["y"])))
    with pytest.raises(IRError, match="shape"):
        FloatInterpreter(g).run([np.zeros((2, 4), np.float32)])


def test_avg_pool_excludes_padding():
    x = np.ones((1, 3, 3, 1), np.float32)
    y = pool(x, kind="avg", filter=(3, 3), stride=(1, 1), pads=(1, 1, 1, 1), activation="NONE")
    np.testing.assert_allclose(y, 1.0)
    y = pool(x * np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1), kind="max", filter=(2, 2),
             stride=(2, 2), pads=(0, 1, 0, 1), activation="NONE")
    np.testing.assert_array_equal(y[0, :, :, 0], [[4, 5], [7, 8]])


@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
def test_resize_properties(align, half):
    """Same size is the identity, align_corners keeps the corners, 2x nearest repeats pixels."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 5, 7, 2)).astype(np.float32)
    for fn in (resize_bilinear, resize_nearest):
        np.testing.assert_allclose(fn(x, size=(5, 7), align_corners=align, half_pixel_centers=half), x,
                                   rtol=1e-6)
    y = resize_bilinear(x, size=(9, 13), align_corners=True, half_pixel_centers=False)
    np.testing.assert_allclose(y[:, [0, -1]][:, :, [0, -1]], x[:, [0, -1]][:, :, [0, -1]], rtol=1e-6)
    y = resize_nearest(x, size=(10, 14), align_corners=False, half_pixel_centers=False)
    np.testing.assert_array_equal(y[:, ::2, ::2], x)


def _single_op(op_type: str, in_shape, out_shape, attrs, extra_inputs=()):
    g = Graph(op_type.lower())
    g.add_tensor(Tensor("x", in_shape, "float32"))
    names = ["x"]
    for i, shape in enumerate(extra_inputs):
        g.add_tensor(Tensor(f"x{i + 1}", shape, "float32"))
        names.append(f"x{i + 1}")
    g.add_tensor(Tensor("y", out_shape, "float32"))
    g.add_op(Op(op_type, names, ["y"], attrs))
    g.inputs, g.outputs = names, ["y"]
    return g


_CASES = [
    ("RESIZE_BILINEAR", (1, 5, 7, 3), (1, 9, 4, 3), dict(size=(9, 4), align_corners=False, half_pixel_centers=False)),
    ("RESIZE_BILINEAR", (1, 5, 7, 3), (1, 9, 4, 3), dict(size=(9, 4), align_corners=True, half_pixel_centers=False)),
    ("RESIZE_BILINEAR", (1, 5, 7, 3), (1, 9, 4, 3), dict(size=(9, 4), align_corners=False, half_pixel_centers=True)),
    ("RESIZE_NEAREST_NEIGHBOR", (1, 5, 7, 3), (1, 11, 3, 3),
     dict(size=(11, 3), align_corners=False, half_pixel_centers=False)),
    ("RESIZE_NEAREST_NEIGHBOR", (1, 5, 7, 3), (1, 11, 3, 3),
     dict(size=(11, 3), align_corners=True, half_pixel_centers=False)),
    ("RESIZE_NEAREST_NEIGHBOR", (1, 5, 7, 3), (1, 11, 3, 3),
     dict(size=(11, 3), align_corners=False, half_pixel_centers=True)),
    ("MEAN", (1, 6, 5, 4), (1, 1, 1, 4), dict(axes=(1, 2), keep_dims=True)),
    ("MEAN", (2, 6, 5, 4), (2, 4), dict(axes=(1, 2), keep_dims=False)),
    ("AVERAGE_POOL_2D", (1, 7, 6, 2), (1, 4, 3, 2), dict(filter=(3, 3), stride=(2, 2), pads=(1, 1, 0, 1),
                                                       activation="RELU6")),
    ("MAX_POOL_2D", (1, 7, 6, 2), (1, 4, 3, 2), dict(filter=(3, 3), stride=(2, 2), pads=(1, 1, 0, 1),
                                                   activation="NONE")),
    ("TRANSPOSE", (2, 3, 4, 5), (4, 2, 5, 3), dict(perm=(2, 0, 3, 1))),
    ("SOFTMAX", (3, 10), (3, 10), dict(beta=0.7)),
    ("LOGISTIC", (2, 9), (2, 9), {}),
    ("TANH", (2, 9), (2, 9), {}),
    ("RELU_N1_TO_1", (2, 9), (2, 9), {}),
    ("PAD", (1, 3, 4, 2), (1, 6, 5, 2), dict(paddings=((0, 0), (1, 2), (0, 1), (0, 0)))),
]


@pytest.mark.parametrize("case", range(len(_CASES)))
def test_single_ops_match_litert_float(case, litert):
    from libnpu.compiler.tflite_export import export_tflite
    op_type, in_shape, out_shape, attrs = _CASES[case]
    g = _single_op(op_type, in_shape, out_shape, attrs)
    x = np.random.default_rng(case).standard_normal(in_shape).astype(np.float32) * 3
    ref = litert(export_tflite(g), [x], reference=False)[0]
    np.testing.assert_allclose(FloatInterpreter(g).run([x])["y"], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op_type", ["ADD", "SUB", "MUL"])
def test_binary_broadcast_matches_litert_float(op_type, litert):
    from libnpu.compiler.tflite_export import export_tflite
    g = _single_op(op_type, (1, 4, 5, 3), (1, 4, 5, 3), dict(activation="RELU"), extra_inputs=[(1, 1, 1, 3)])
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((1, 4, 5, 3)).astype(np.float32), rng.standard_normal((1, 1, 1, 3)).astype(np.float32)
    ref = litert(export_tflite(g), [a, b], reference=False)[0]
    np.testing.assert_allclose(FloatInterpreter(g).run([a, b])["y"], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stride, dilation, multiplier, dtype", [((1, 1), (1, 1), 1, np.float32),
                                                                 ((2, 2), (1, 1), 2, np.float32),
                                                                 ((1, 2), (2, 1), 1, np.float64)])
def test_depthwise_taps_in_one_buffer_give_the_same_sums(stride, dilation, multiplier, dtype) -> None:
    """The depthwise reference multiplies each tap into one reused buffer: the same float32
    sums, tap by tap in the same order, as a new product per tap (bit for bit)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 9, 11, 3)).astype(dtype)
    w = rng.standard_normal((1, 3, 3, 3 * multiplier)).astype(np.float32)
    pads = (1, 2, 2, 1)
    got = depthwise_conv2d(x, w, None, stride=stride, dilation=dilation, pads=pads,
                           depth_multiplier=multiplier, activation="NONE")
    xp = pad_nhwc(np.repeat(x, multiplier, axis=3), pads)
    (sh, sw), (dh, dw) = stride, dilation
    oh, ow = (xp.shape[1] - 2 * dh - 1) // sh + 1, (xp.shape[2] - 2 * dw - 1) // sw + 1
    want = np.zeros((1, oh, ow, 3 * multiplier), np.float32)
    for i in range(3):
        for j in range(3):
            want += xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw] * w[0, i, j]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_sigmoid_computes_one_quotient_with_both_quotients_values() -> None:
    """The LOGISTIC reference divides once, its numerator chosen by the sign: the same float32
    bits as computing 1 / (1 + e) and e / (1 + e) and choosing one, infinities and NaN included."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(4096) * 30).astype(np.float32)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 100.0, -100.0, -88.8]
    e = np.exp(-np.abs(x))
    with np.errstate(invalid="ignore"):
        want = np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(np.float32)
        got = sigmoid(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
