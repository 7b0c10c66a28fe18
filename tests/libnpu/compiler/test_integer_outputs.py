"""Accurate-by-default on integer outputs (``libnpu.compiler.held_out``): an ArgMax's
class ids and a TopK's indices are scored by the share of their values equal to
float's, printed so, and escalated for only while a step raises that share. Before,
they were scored as floats (TopK's indices: ``1 - |index error| / 2.5``, far below 0)."""
from __future__ import annotations

import warnings

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

from libnpu.compiler.escalation import LADDER, format_fidelity
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.held_out import match_share, only_ties_missed
from libnpu.compiler.placement import import_with_fallback

ROWS, FEATURES, CLASSES, K = 4, 16, 64, 3


def _classifier(head: str) -> ModelProto:
    """x [4, 16] @ w [16, 64] -> ArgMax over the classes (int64 [4]), or TopK 3 of them
    (values float [4, 3], indices int64 [4, 3]). The classes' weights are one column plus
    noise of 1% of it: their logits are near-ties, which int8 reorders."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((FEATURES, 1)) + 0.01 * rng.standard_normal((FEATURES, CLASSES))
    inits = [numpy_helper.from_array(w.astype(np.float32), "w")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"])]
    if head == "argmax":
        nodes.append(helper.make_node("ArgMax", ["logits"], ["cls"], axis=1, keepdims=0))
        outputs = [helper.make_tensor_value_info("cls", TensorProto.INT64, [ROWS])]
    else:
        inits.append(numpy_helper.from_array(np.array([K], np.int64), "k"))
        nodes.append(helper.make_node("TopK", ["logits", "k"], ["vals", "idx"], axis=1))
        outputs = [helper.make_tensor_value_info("vals", TensorProto.FLOAT, [ROWS, K]),
                   helper.make_tensor_value_info("idx", TensorProto.INT64, [ROWS, K])]
    graph = helper.make_graph(nodes, head, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, FEATURES])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _data(count: int = 10) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(1)
    return [[rng.standard_normal((ROWS, FEATURES)).astype(np.float32)] for _ in range(count)]


def _compile(head: str, **options: object) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # a near-tie may miss the target: the warning is not the point
        graph = import_with_fallback(_classifier(head).SerializeToString(), "onnx")[0]    # TopK: a host op
        return to_int8_graph(graph, _data(), **options).metadata["fidelity"]


def test_match_share_counts_equal_values_and_fails_another_shape() -> None:
    ref, got = [np.array([1, 2, 3, 4]), np.array([5, 6])], [np.array([1, 2, 0, 4]), np.array([5, 6])]
    assert match_share(ref, got) == 5 / 6
    assert match_share([np.array([True, False])], [np.array([True, False])]) == 1.0
    assert match_share([np.array([1, 2, 3])], [np.array([1, 2])]) == 0.0      # a data-dependent shape differs


def _shares(fidelity: dict, name: str, values: int) -> list[float]:
    """``name``'s score on each step measured, each checked to be a share of its ``values``."""
    shares = [s["scores"][name] for s in fidelity["steps"] if "scores" in s]
    for share in shares:
        assert 0.0 <= share <= 1.0 and abs(share * values - round(share * values)) < 1e-3, share
    return shares


def test_an_argmax_output_is_scored_by_the_class_ids_it_matches() -> None:
    """Near-ties: int8 gets 5 of the 8 held-out class ids (scored -11.4 before), int16
    activations fewer; the escalation stops there (it ran all four steps before)."""
    fidelity = _compile("argmax")
    assert fidelity["exact"] == ["cls"] and fidelity["missed"] == ["cls"]
    shares = _shares(fidelity, "cls", ROWS * fidelity["samples"])
    assert [s["step"] for s in fidelity["steps"]] == ["int8", "int16 activations"] and shares[1] <= shares[0]
    assert fidelity["chosen"] == "int8" and fidelity["scores"]["cls"] == shares[0]
    assert f"cls matches {100 * shares[0]:.3g}% of index values (under the target)" in format_fidelity(fidelity)


def test_topk_indices_are_scored_by_agreement_and_values_by_cosine() -> None:
    """The values keep their cosine; the indices are scored by their share of equal values
    (a cosine before: 0.43 at int8). Each step raises the share here, so the escalation
    goes on to int16 weights, which match every index."""
    fidelity = _compile("topk")
    assert fidelity["exact"] == ["idx"] and fidelity["missed"] == []
    shares = _shares(fidelity, "idx", ROWS * K * fidelity["samples"])
    assert shares == sorted(shares) and shares[-1] == 1.0 and len(shares) <= len(LADDER)
    assert fidelity["chosen"] == "int16 weights" and fidelity["scores"]["vals"] >= fidelity["required"]
    assert "idx matches 100% of index values" in format_fidelity(fidelity)


def test_the_escalation_goes_on_for_indices_only_while_a_step_raises_their_match() -> None:
    exact = ["idx"]
    assert not only_ties_missed({"idx": 0.9, "vals": 0.999}, {}, 0.99, exact, None)        # one step is tried
    assert only_ties_missed({"idx": 0.9, "vals": 0.999}, {}, 0.99, exact, {"idx": 0.9})    # it did not help
    assert not only_ties_missed({"idx": 0.95, "vals": 0.999}, {}, 0.99, exact, {"idx": 0.9})  # it did
    assert not only_ties_missed({"idx": 0.9, "vals": 0.98}, {}, 0.99, exact, {"idx": 0.9})   # a float output misses
    assert not only_ties_missed({"idx": 1.0, "vals": 0.999}, {}, 0.99, exact, {"idx": 1.0})  # nothing misses
