"""A decoder Loop on the CPU that feeds back its ArgMax (a table-structure recognizer in
small): the chip layers feeding it are compiled on int16 activations and weights by default,
the host call reads them as int16, and unseen pictures decode the tokens float decodes."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from libnpu.compiler.decisions import decision_path
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.ir import Graph
from libnpu.compiler.mixed_precision import MixedPrecisionError, promote, quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.placement import import_with_fallback, plan_placement
from tests.support import dynamic_models, model_builders

ENCODER = ["r1", "r2", "r3"]       # the three Convs (their Relus fused), the layers with weights


@pytest.fixture(scope="module")
def decoder() -> tuple[bytes, Graph]:
    """The model's bytes and its float graph, the Loop (and the Softmax-free rest) a HOST op."""
    data = dynamic_models.table_decoder().SerializeToString()
    plan = plan_placement(data)
    return data, import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)[0]


def _host_inputs(graph: Graph) -> list[str]:
    (host,) = [op for op in graph.ops if op.type == "HOST"]
    return [graph.tensors[i].dtype for i in host.inputs]


def test_the_layers_feeding_a_decoder_loop_are_its_decision_path(decoder):
    names, weights = decision_path(optimize(decoder[1]))
    assert set(ENCODER) <= set(names) and weights == ENCODER


def test_a_host_call_of_two_outputs_reads_a_promoted_layer_as_int16(decoder):
    # The Loop's call has two outputs (probabilities, boxes), so it is not promoted itself;
    # its input was copied to int8 for it, undoing the encoder's int16 (every flip stayed).
    data, graph = decoder
    q = to_int8_graph(graph, [[x] for x in dynamic_models.blob_images(4, 1)], recipe="fast")
    assert _host_inputs(q) == ["int8"]
    assert _host_inputs(promote(q, decision_path(optimize(graph))[0], graph)) == ["int16"]


def test_unseen_pictures_decode_the_tokens_float_decodes(decoder):
    # Before: int8 chosen (0.9999 on the 3 held-out samples), and 3 of 8 unseen pictures took
    # another token somewhere, one of them another number of steps (cosine 0.0 by shape).
    data, graph = decoder
    q = to_int8_graph(graph, [[x] for x in dynamic_models.blob_images(16, 100)])
    assert q.metadata["fidelity"]["decision_path"] == {"int16": 7, "int16_weights": 3}
    assert _host_inputs(q) == ["int16"]
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    run = FloatInterpreter(q)
    lengths = set()
    for x in dynamic_models.blob_images(8, 200):
        got = run.run({q.inputs[0]: x})
        for name, ref in zip(["probs", "boxes"], want.run(None, {"x": x})):
            value = got[q.outputs[["probs", "boxes"].index(name)]]
            assert value.shape == ref.shape
            if name == "probs":
                assert np.array_equal(value.argmax(-1), ref.argmax(-1))
            cosine = float(np.dot(value.ravel(), ref.ravel()) / np.linalg.norm(value) / np.linalg.norm(ref))
            assert cosine >= .98
        lengths.add(ref.shape[0])
    assert len(lengths) > 1          # the data did decide the number of steps


def test_a_rule_named_layer_the_quantized_graph_lost_is_skipped_and_a_users_is_not():
    """The decision path names float-graph tensors; the quantizer may rename one (a
    hard-swish's gate: "<name>/gated") or the op may leave for the CPU. Such a rule name is
    skipped (before: "int16: no op or tensor named ..." ended the whole compile, a table
    recognizer's among them); a name the user gave stays an error."""
    graph = import_onnx(model_builders.hard_swish_between_convs())
    data = [[np.random.default_rng(i).standard_normal((1, 3, 8, 8)).astype(np.float32)] for i in range(4)]
    q = quantize_mixed(graph, data, int16="gone,c1", int16_weights="gone,c1", int16_optional=("gone",))
    assert q.metadata["int16_layers"] and q.metadata["int16_weights"]
    with pytest.raises(MixedPrecisionError, match="no op or tensor named 'gone'"):
        quantize_mixed(graph, data, int16="gone,c1", int16_weights="none")
