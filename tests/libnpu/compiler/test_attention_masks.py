"""Additive attention masks made from a bool mask input (libnpu.compiler.attention_masks):
calibration with masked keys compiles, and a key masked at run time stays masked when
the calibration had every key valid."""
from __future__ import annotations

import numpy as np
import pytest
import tflite
from onnx import TensorProto, helper, numpy_helper

from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.placement import import_with_fallback, plan_placement
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, named_options

F = np.float32
KEYS, DIM = 8, 8


def _masked_attention() -> bytes:
    """Self-attention over 8 tokens with ``scores.masked_fill(~mask, -inf)`` as PyTorch
    exports it: ``Where(Not(mask), -inf, 0)`` unsqueezed and added before the Softmax."""
    rng = np.random.default_rng(5)
    nodes = [*(helper.make_node("MatMul", ["x", f"w{n}"], [n]) for n in "qkv"),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]), helper.make_node("Not", ["mask"], ["masked"]),
             helper.make_node("Where", ["masked", "minus_inf", "zero"], ["bias"]),
             helper.make_node("Unsqueeze", ["bias", "axis"], ["bias3"]),
             helper.make_node("Add", ["scores", "bias3"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["weights"], axis=-1),
             helper.make_node("MatMul", ["weights", "v"], ["y"])]
    consts = {f"w{n}": (rng.standard_normal((DIM, DIM)) / 2).astype(F) for n in "qkv"}
    consts.update(minus_inf=np.array(-np.inf, F), zero=np.array(0.0, F), axis=np.array([1], np.int64))
    graph = helper.make_graph(nodes, "attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, KEYS, DIM]),
                               helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, KEYS])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, KEYS, DIM])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _feeds(count: int, seed: int, padded: bool) -> list[dict[str, np.ndarray]]:
    """Tokens, the last 1-4 keys padded out when ``padded``."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        mask = np.ones((1, KEYS), bool)
        if padded:
            mask[0, KEYS - int(rng.integers(1, 5)):] = False
        feeds.append({"x": rng.uniform(-1, 1, (1, KEYS, DIM)).astype(F), "mask": mask})
    return feeds


def _quantized(model: bytes, calibration: list[dict[str, np.ndarray]]):
    plan = plan_placement(model, dataset=calibration)
    graph, _ = import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)
    return graph, to_int8_graph(graph, calibration, recipe="fast")


def test_a_key_masked_at_run_time_stays_masked_after_a_calibration_with_every_key_valid() -> None:
    # The mask's grid was that of its zeros: a masked key read as 0 and took part (0.82).
    graph, q = _quantized(_masked_attention(), _feeds(8, 1, padded=False))
    assert output_scores(graph, q, _feeds(4, 2, padded=True))["y"] >= 0.99


def test_a_calibration_with_masked_keys_compiles() -> None:
    # It stopped at "calibration: tensor 'bias' has non-finite values".
    graph, q = _quantized(_masked_attention(), _feeds(8, 3, padded=True))
    assert output_scores(graph, q, _feeds(4, 4, padded=True))["y"] >= 0.99


FINFO_MIN = float(np.finfo(np.float32).min)


def _masked_by(form: str) -> bytes:
    """The same attention with its mask in another form PyTorch and HF exports emit:
    ``sentinel`` ``Where(Not(mask), -1e9, 0)`` added; ``masked_fill`` ``Where(Not(mask),
    -1e10, scores)``; ``hf`` ``(1.0 - mask) * finfo.min`` added; ``causal_add`` a constant
    [keys, keys] mask holding finfo.min added; ``causal_where`` ``Where(tril, scores, -inf)``."""
    rng = np.random.default_rng(5)
    nodes = [*(helper.make_node("MatMul", ["x", f"w{n}"], [n]) for n in "qkv"),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]), helper.make_node("Not", ["mask"], ["masked"])]
    consts = {f"w{n}": (rng.standard_normal((DIM, DIM)) / 2).astype(F) for n in "qkv"}
    consts.update(zero=np.array(0.0, F), one=np.array(1.0, F), axis=np.array([1], np.int64))
    tril = np.tril(np.ones((KEYS, KEYS), bool))
    if form == "sentinel":
        consts["big"] = np.array(-1e9, F)
        nodes += [helper.make_node("Where", ["masked", "big", "zero"], ["bias"]),
                  helper.make_node("Unsqueeze", ["bias", "axis"], ["bias3"]),
                  helper.make_node("Add", ["scores", "bias3"], ["logits"])]
    elif form == "masked_fill":
        consts["big"] = np.array(-1e10, F)
        nodes += [helper.make_node("Unsqueeze", ["masked", "axis"], ["masked3"]),
                  helper.make_node("Where", ["masked3", "big", "scores"], ["logits"])]
    elif form == "hf":
        consts["big"] = np.array(FINFO_MIN, F)
        nodes += [helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
                  helper.make_node("Sub", ["one", "maskf"], ["inverted"]),
                  helper.make_node("Mul", ["inverted", "big"], ["bias"]),
                  helper.make_node("Unsqueeze", ["bias", "axis"], ["bias3"]),
                  helper.make_node("Add", ["scores", "bias3"], ["logits"])]
    elif form == "causal_add":
        consts["causal"] = np.where(tril, 0.0, FINFO_MIN).astype(F)[None]
        nodes += [helper.make_node("Add", ["scores", "causal"], ["logits"])]
    else:
        consts.update(tril=tril[None], big=np.array(-np.inf, F))
        nodes += [helper.make_node("Where", ["tril", "scores", "big"], ["logits"])]
    nodes += [helper.make_node("Softmax", ["logits"], ["weights"], axis=-1),
              helper.make_node("MatMul", ["weights", "v"], ["y"])]
    graph = helper.make_graph(nodes, "attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, KEYS, DIM]),
                               helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, KEYS])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, KEYS, DIM])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("form", ["sentinel", "masked_fill", "hf", "causal_add", "causal_where"])
@pytest.mark.parametrize("padded", [False, True], ids=["every_key_valid", "padded"])
def test_a_mask_by_a_large_finite_or_constant_sentinel_keeps_masking(form: str, padded: bool) -> None:
    # A -1e9 / finfo.min seen in calibration gave the mask's grid a scale of ~4e6-1e36: the
    # scores collapsed and attention became uniform (0.61); HF's 1 - mask calibrated at 0
    # only got a grid without 1 (0.82 once its sentinel is -32); a constant causal mask of
    # finfo.min broke the sum's grid (0.72).
    graph, q = _quantized(_masked_by(form), _feeds(8, 1, padded=padded))
    assert output_scores(graph, q, _feeds(4, 2, padded=True))["y"] >= 0.99
    # the CPU makes the mask from the bool input alone, ahead of the chip's one job
    first_chip = next(i for i, op in enumerate(q.ops) if op.type != "HOST")
    assert all(op.type != "HOST" for op in q.ops[first_chip:])


def _selected_tflite(additive: bool) -> bytes:
    """Scores ``4 x`` over 8 keys masked by TFLite's ``SELECT_V2(mask, ., -1e9)`` before a
    SOFTMAX: of 0 then added (``additive``), or of the scores themselves."""
    op = tflite.BuiltinOperator
    tensors = [TensorSpec([1, KEYS], F, name="x"), TensorSpec([1, KEYS], np.bool_, name="mask"),
               TensorSpec([], F, data=np.array(4, F), name="four"),
               TensorSpec([], F, data=np.array(-1e9, F), name="sentinel"),
               TensorSpec([], F, data=np.array(0, F), name="zero"), TensorSpec([1, KEYS], F, name="scores"),
               TensorSpec([1, KEYS], F, name="bias"), TensorSpec([1, KEYS], F, name="logits"),
               TensorSpec([1, KEYS], F, name="y")]
    ops = [OpSpec(op.MUL, [0, 2], [5])]
    ops += [OpSpec(op.SELECT_V2, [1, 4, 3], [6]), OpSpec(op.ADD, [5, 6], [7])] if additive \
        else [OpSpec(op.SELECT_V2, [1, 5, 3], [7])]
    ops.append(OpSpec(op.SOFTMAX, [7], [8], *named_options("SoftmaxOptions", Beta=1.0)))
    return build_model(tensors, ops, [0, 1], [8])


def _tflite_feeds(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    return [{"x": f["x"][:, 0], "mask": f["mask"]} for f in _feeds(count, seed, padded=True)]


@pytest.mark.parametrize("additive", [True, False], ids=["additive", "masked_fill"])
def test_a_tflite_select_of_a_finite_sentinel_seen_in_calibration_keeps_the_scores(additive: bool) -> None:
    # The host's SELECT_V2 output (and the sum) reached -1e9: a grid step of ~4e6, every
    # key one value, attention uniform (0.61).
    graph, q = _quantized(_selected_tflite(additive), _tflite_feeds(8, 1))
    assert output_scores(graph, q, _tflite_feeds(4, 2))["y"] >= 0.99
