"""A sine's input on a grid too coarse for its phase is computed in float with it on the CPU
(libnpu.compiler.periodic, through the placement); a sine of a small-range input keeps its
input on the chip, and a position encoding of constants folds."""
from __future__ import annotations

import numpy as np
import tflite
from onnx import TensorProto, helper, numpy_helper

from libnpu.compiler.lower import compile_model
from libnpu.compiler.placement import CPU, NPU, place_model
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, named_options

F = np.float32
#: A Fourier encoding of coordinates in [0, 1]: pi/2 times 2^k rad per unit, k < 16 (trueocr's).
FREQS = (np.pi / 2 * 2.0 ** np.arange(16)).astype(F)


def _encoder(freqs: np.ndarray, constant_positions: bool = False) -> bytes:
    """Coordinates [1, 8, 2] -> Unsqueeze -> Mul by ``freqs`` -> Sin, Cos -> Concat ->
    Reshape -> MatMul: a box encoder's position encoding. ``constant_positions``: the
    coordinates are a constant, the encoding added to the model's input instead."""
    rng = np.random.default_rng(3)
    coords = "pos" if constant_positions else "x"
    nodes = [helper.make_node("Unsqueeze", [coords, "axis"], ["u"]), helper.make_node("Mul", ["u", "freqs"], ["phase"]),
             helper.make_node("Sin", ["phase"], ["s"]), helper.make_node("Cos", ["phase"], ["c"]),
             helper.make_node("Concat", ["s", "c"], ["sc"], axis=-1),
             helper.make_node("Reshape", ["sc", "shape"], ["flat"]), helper.make_node("MatMul", ["flat", "w"], ["y"])]
    consts = {"axis": np.array([-1], np.int64), "freqs": freqs, "shape": np.array([1, 8, 4 * freqs.size], np.int64),
              "w": (rng.standard_normal((4 * freqs.size, 8)) / 8).astype(F)}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 2])]
    if constant_positions:
        consts["pos"] = rng.uniform(0, 1, (1, 8, 2)).astype(F)
        nodes[-1].output[0] = "enc"
        nodes.append(helper.make_node("Add", ["enc", "x"], ["y"]))
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8])]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])
    graph = helper.make_graph(nodes, "encoder", inputs, [output],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _coordinates(count: int, shape: tuple[int, ...] = (1, 8, 2), low: float = 0.0,
                 high: float = 1.0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(1)
    return [[rng.uniform(low, high, shape).astype(F)] for _ in range(count)]


def test_a_fourier_encoding_of_coordinates_is_computed_in_float_with_its_sine() -> None:
    # One int16 step of the product was 1.5 rad: the chip's MUL gave the sine random phases
    # (the output's held-out score 0.50 after five escalation steps, the fifth CPU float).
    loadable = compile_model(_encoder(FREQS), _coordinates(16))
    placed = {op: (device, reason) for _, op, device, reason in loadable.metadata["placement"]}
    for op in ("Unsqueeze", "Mul"):
        assert placed[op][0] == CPU and placed[op][1].startswith("periodic input: a grid step of 1.49 rad"), placed
    assert placed["MatMul"] == (NPU, "") and placed["Concat"] == (NPU, "")
    assert len(loadable.host_steps) == 1          # the encoding and its sine in one host call
    assert loadable.metadata["fidelity"]["scores"]["y"] >= 0.99


def test_a_sine_of_a_small_range_input_keeps_its_input_on_the_chip() -> None:
    # An angle in [-pi, pi] (times 1 and 2): a step of 2e-4 rad at int16.
    placed = {p.op: p for p in place_model(_encoder(np.array([1.0, 2.0], F)))}
    assert (placed["Mul"].device, placed["Unsqueeze"].device) == (NPU, NPU)
    assert placed["Sin"].device == CPU and not placed["Sin"].reason.startswith("periodic")


def test_a_tflite_sine_of_a_scaled_input_takes_the_scaling_along() -> None:
    op = tflite.BuiltinOperator
    t = [TensorSpec((1, 8), F, name="x"), TensorSpec((1,), F, data=np.array([5000.0], F), name="k"),
         TensorSpec((1, 8), F, name="phase"), TensorSpec((1, 8), F, name="y")]
    model = build_model(t, [OpSpec(op.MUL, [0, 1], [2], *named_options("MulOptions")), OpSpec(op.SIN, [2], [3])],
                        [0], [3])
    placed = [(p.op, p.device, p.reason.split(":")[0]) for p in place_model(model)]
    assert placed[0] == ("MUL", CPU, "periodic input")
    assert placed[1][:2] == ("SIN", CPU)


def test_a_position_encoding_of_constants_folds_at_compile_time() -> None:
    loadable = compile_model(_encoder(FREQS, constant_positions=True), _coordinates(16, (1, 8, 8)), recipe="fast")
    assert not loadable.host_steps
    assert all(device == NPU for _, _, device, _ in loadable.metadata.get("placement", []))
