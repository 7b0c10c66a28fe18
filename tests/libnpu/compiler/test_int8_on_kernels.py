"""The compiler's int8 IR, executed by the chip's kernels, equals LiteRT's reference kernels."""
import numpy as np
import pytest

from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import load_tflite
from tests.support import int8_walk
from tests.support import model_builders as builders


def test_resnet8_on_chip_kernels_is_bit_exact(resnet8_path, litert):
    g = load_tflite(resnet8_path)
    rng = np.random.default_rng(11)
    for _ in range(3):
        x = rng.integers(-128, 128, (1, 32, 32, 3), dtype=np.int8)
        np.testing.assert_array_equal(int8_walk.run_int8(g, [x])[0], litert(resnet8_path, [x])[0])


@pytest.mark.parametrize("make,shape", [(builders.small_cnn, (1, 3, 16, 16)), (builders.layout_mix, (1, 4, 8, 8)),
                                        (builders.exporter_style, (1, 3, 8, 8)),
                                        (builders.standalone_activations, (1, 2, 4, 4))])
def test_quantized_onnx_on_chip_kernels_is_bit_exact(make, shape, litert):
    rng = np.random.default_rng(12)
    q = quantize_model(import_onnx(make()), [[rng.standard_normal(shape).astype(np.float32)] for _ in range(8)])
    tfl = export_tflite(q)
    for _ in range(2):
        x = rng.standard_normal(shape).astype(np.float32)
        for ours, ref in zip(int8_walk.run_int8(q, [x]), litert(tfl, [x])):
            np.testing.assert_array_equal(ours, ref)


def test_quantized_blazeface_on_chip_kernels_is_bit_exact(blazeface_path, astronaut, litert):
    img = astronaut.astype(np.float32) / 127.5 - 1.0
    cal = [img[y:y + 256:2, x:x + 256:2][None].copy() for y, x in ((0, 64), (128, 128), (256, 0))]
    q = quantize_model(load_tflite(blazeface_path), [[c] for c in cal])
    face = img[0:384:3, 64:448:3][None].copy()
    for ours, ref in zip(int8_walk.run_int8(q, [face]), litert(export_tflite(q), [face])):
        np.testing.assert_array_equal(ours, ref)


def test_per_channel_fully_connected_is_bit_exact(litert):
    rng = np.random.default_rng(13)
    q = quantize_model(import_onnx(builders.small_cnn()),
                       [[rng.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(4)],
                       fc_per_channel=True)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(int8_walk.run_int8(q, [x])[0], litert(export_tflite(q), [x])[0])


@pytest.mark.parametrize("mode,coord,nearest", [
    ("linear", "asymmetric", ""), ("linear", "align_corners", ""), ("linear", "half_pixel", ""),
    ("nearest", "asymmetric", "floor"), ("nearest", "align_corners", "round_prefer_ceil"),
    ("nearest", "tf_half_pixel_for_nn", "floor")])
def test_quantized_resize_is_bit_exact(mode, coord, nearest, litert):
    rng = np.random.default_rng(14)
    model = builders.resize(mode, coord, nearest or "round_prefer_floor")
    q = quantize_model(import_onnx(model), [[rng.standard_normal((1, 2, 5, 4)).astype(np.float32)]
                                            for _ in range(4)], io_dtype="int8")
    x = rng.integers(-128, 128, (1, 2, 5, 4), dtype=np.int8)
    np.testing.assert_array_equal(int8_walk.run_int8(q, [x])[0], litert(export_tflite(q), [x])[0])


def test_quantized_strided_slices_are_bit_exact(litert):
    from libnpu.compiler.tflite_import import import_tflite
    from tests.support.model_builders import single_op_tflite

    from .test_tflite_export import _SLICES
    rng = np.random.default_rng(15)
    for begin, end, strides, bmask, emask, smask, shape in _SLICES:
        probe = np.zeros(shape, np.float32)
        index = tuple(begin[d] if (smask >> d) & 1 else
                      slice(None if (bmask >> d) & 1 else begin[d], None if (emask >> d) & 1 else end[d], strides[d])
                      for d in range(len(shape)))
        out_shape = probe[index].shape
        model = single_op_tflite(45, [("x", shape, None), ("b", (3,), np.int32(begin)), ("e", (3,), np.int32(end)),
                                      ("s", (3,), np.int32(strides)), ("y", out_shape, None)],
                                 [0, 1, 2, 3], [4], options=("StridedSliceOptions", dict(
                                     BeginMask=bmask, EndMask=emask, ShrinkAxisMask=smask)))
        q = quantize_model(import_tflite(model), [[rng.standard_normal(shape).astype(np.float32)]],
                           io_dtype="int8")
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        np.testing.assert_array_equal(int8_walk.run_int8(q, [x])[0], litert(export_tflite(q), [x])[0])
