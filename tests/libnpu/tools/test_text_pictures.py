"""Rendered text of the corpus (benchmarks/text_pictures.py): deterministic, read where it is once preprocessed."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from benchmarks import text_pictures
from benchmarks.corpus_inputs import paddle_det_input, text_box

# A texture standing in for a corpus picture (those need the scikit-image wheel).
TEXTURE = (np.indices((90, 120)).sum(axis=0)[..., None] * np.array([3, 5, 7]) % 256).astype(np.uint8)


def _run(model, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _ink_detector():
    """A DB-style map from PaddleOCR's detection input: sigmoid(-4 x the mean normalized
    channel), grown by a 3x3 max pool: near 1 on ink, near 0 on paper."""
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["grey"], keepdims=1),
             helper.make_node("Mul", ["grey", "gain"], ["logit"]),
             helper.make_node("Sigmoid", ["logit"], ["prob"]),
             helper.make_node("MaxPool", ["prob"], ["map"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "ink", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("map", TensorProto.FLOAT, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
         helper.make_tensor("gain", TensorProto.FLOAT, [], [-4.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _ctc_reader():
    """A CTC-shaped reader of PaddleOCR's recognizer input: 40 time steps of 8 columns, two
    classes (0 blank, 1 ink) whose logits are the step's darkness against its paper."""
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["grey"], keepdims=0),         # [1, 48, 320]
             helper.make_node("ReduceMin", ["grey", "rows"], ["darkest"], keepdims=0),  # [1, 320]
             helper.make_node("Reshape", ["darkest", "steps"], ["per_step"]),            # [1, 40, 8]
             helper.make_node("ReduceMin", ["per_step", "last"], ["ink"], keepdims=1),  # [1, 40, 1]
             helper.make_node("Neg", ["ink"], ["dark"]),
             helper.make_node("Concat", ["zero", "dark"], ["logits"], axis=-1)]       # blank 0 vs darkness
    graph = helper.make_graph(
        nodes, "ctc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 48, 320])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
         helper.make_tensor("rows", TensorProto.INT64, [1], [1]),
         helper.make_tensor("steps", TensorProto.INT64, [3], [1, 40, 8]),
         helper.make_tensor("last", TensorProto.INT64, [1], [2]),
         helper.make_tensor("zero", TensorProto.FLOAT, [1, 40, 1], [0.3] * 40)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_the_same_seed_renders_the_same_pixels_and_another_seed_other_text():
    first, again, other = (text_pictures.page(s, 240, 200, TEXTURE) for s in ((1, 0), (1, 0), (2, 0)))
    assert np.array_equal(first.pixels, again.pixels) and first.text == again.text
    assert first.text != other.text and first.pixels.shape == (240, 200, 3) and first.pixels.dtype == np.uint8
    sealed = text_pictures.page((1, 0), 240, 200, TEXTURE, seals=1)
    x0, y0, x1, y1 = sealed.boxes[-1]
    red = sealed.pixels[y0:y1, x0:x1].astype(int)
    assert sealed.text[-1] == sealed.text[-1].upper() and ((red[..., 0] - red[..., 1:].max(axis=-1)) > 80).mean() > 0.05
    lines = [text_pictures.text_line((1, i), 48, TEXTURE, upside_down=i == 1) for i in (0, 0, 1)]
    assert np.array_equal(lines[0].pixels, lines[1].pixels) and lines[0].text != lines[2].text


def test_a_db_style_map_is_high_on_the_pages_lines_and_low_on_its_paper():
    rendered = text_pictures.page((3, 0), 512, 512, effects=False)   # not turned: boxes exact
    prob = _run(_ink_detector(), paddle_det_input(rendered.pixels))[0, 0]
    inside = np.zeros(prob.shape, bool)
    for x0, y0, x1, y1 in rendered.boxes:
        assert (prob[y0:y1, x0:x1] > 0.3).mean() > 0.2, (x0, y0, x1, y1)   # text found in every line
        inside[y0:y1, x0:x1] = True
    assert len(rendered.boxes) >= 5 and (prob[~inside] > 0.3).mean() < 0.02


def test_a_ctc_reader_reads_ink_over_the_lines_width_and_blank_over_the_padding():
    for seed in range(4):
        rendered = text_pictures.text_line((4, seed), 48, TEXTURE, effects=False)
        x = text_box(rendered.pixels, 48, 320)
        steps = _run(_ctc_reader(), x)[0].argmax(-1)
        width = min(320, int(np.ceil(48 * rendered.pixels.shape[1] / rendered.pixels.shape[0])))
        assert steps[:width // 8].mean() > 0.3 and not steps[(width + 7) // 8:].any(), (rendered.text, steps)
