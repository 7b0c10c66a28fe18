"""A BERT-style text encoder (token ids in, tests/support/encoder_models) through the
default compile: int16 for a model whose inputs are token ids, its attention mask kept when
calibration never padded, and its massive activations."""
from __future__ import annotations

from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.mixed_precision import quantize_mixed
from libnpu.compiler.optimize import optimize
from libnpu.compiler.placement import import_with_fallback, plan_placement
from tests.support.encoder_models import encoder, quantize_dynamic_encoder, sentences

SEQ = 8


def _imported(massive: float = 0.0, folder=None, hidden: int = 32):
    model = encoder(seq=SEQ, hidden=hidden, heads=2, layers=1, massive=massive).SerializeToString()
    if folder is not None:   # onnxruntime's dynamic quantization, attention's products of activations too
        model = quantize_dynamic_encoder(encoder(seq=SEQ, hidden=32, heads=2, layers=1), folder,
                                         extra_options={"MatMulConstBOnly": False})
    plan = plan_placement(model, dataset=sentences(4, SEQ, 1))
    return import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)[0]


def test_int16_takes_an_embedding_gathered_by_token_ids() -> None:
    # Every int16 step of the escalation was refused on a text encoder: "int16: tensor
    # 'input_ids' is not quantized" (the ids a GATHER takes rows by are on no grid).
    graph = _imported()
    q = quantize_mixed(graph, sentences(4, SEQ, 1), int16=["words", "wt"])
    assert {"words", "wt"} <= set(q.metadata["int16_layers"])
    assert q.tensors["words"].dtype == "int16" and q.tensors["input_ids"].quant is None


def test_a_padded_key_stays_masked_after_a_calibration_without_padding() -> None:
    # The scores, from token ids through the embeddings, passed for a mask too, so the mask
    # (1 - mask) * -32 kept calibration's grid of zeros (and the chip refused its SUB, a
    # scale 1e-8 wide: "output_shift must be in [-31, 0], got 8").
    graph = _imported()
    q = to_int8_graph(graph, sentences(8, SEQ, 1, min_len=SEQ), recipe="fast")
    assert q.tensors["inv"].quant.scale[0] > 1e-3
    assert output_scores(optimize(graph), q, sentences(4, SEQ, 2, min_len=3)).popitem()[1] >= 0.99


def test_the_default_compile_holds_an_encoder_with_massive_activations() -> None:
    # The delimiter tokens' few huge residual values set the int8 grids of the sums before
    # each LayerNorm, and every other token's values fell under one step (cosine 0.93 at
    # int8, 0.958 since the LayerNorms' statistics are exact sums); the escalation's int16
    # steps were refused (token ids), and it kept int8.
    graph = _imported(massive=100.0)
    unseen = sentences(4, SEQ, 2, min_len=3)
    fast = to_int8_graph(graph, sentences(10, SEQ, 1), recipe="fast")
    assert output_scores(optimize(graph), fast, unseen).popitem()[1] < 0.98
    q = to_int8_graph(graph, sentences(10, SEQ, 1))
    fidelity = q.metadata["fidelity"]
    assert not [s["refused"] for s in fidelity["steps"] if "refused" in s]
    assert fidelity["chosen"] != "int8" and not fidelity["missed"]
    assert output_scores(optimize(graph), q, unseen).popitem()[1] >= 0.98


def test_a_per_run_scale_goes_from_one_host_call_to_the_next_in_float(tmp_path) -> None:
    # quantize_dynamic's attention runs on the CPU in two calls around the chip's softmax;
    # the run-time scale of V's codes went from one to the other on an int8 grid, and
    # clipped at the largest calibration saw (cosine 0.972 on the device).
    graph = _imported(folder=tmp_path)
    q = to_int8_graph(graph, sentences(8, SEQ, 1, min_len=SEQ), recipe="fast")
    passed = [i for op in q.ops if op.type == "HOST" for i in op.inputs if i.endswith("_scale")]
    assert passed and all(q.tensors[i].dtype == "float32" and q.tensors[i].quant is None for i in passed)
    assert output_scores(optimize(graph), q, sentences(4, SEQ, 2, min_len=3)).popitem()[1] >= 0.99


def test_int16_holds_the_layer_norms_of_rows_with_massive_activations() -> None:
    # A LayerNorm op by op squared every row's deviations onto one grid: the delimiter
    # tokens' squares near 10^5 made it ~3 wide at int16, an ordinary token's squares are
    # under 1, and its variance came from a few rounded squares (0.9950 with every layer
    # int16; MiniLM 0.93). The statistics are now INSTANCE_NORM's exact sums over each row.
    graph = _imported(massive=100.0, hidden=64)
    opt = optimize(graph)
    every = [o for op in opt.ops if op.type != "HOST" for o in op.outputs if opt.tensors[o].dtype == "float32"]
    q = quantize_mixed(graph, sentences(10, SEQ, 1), int16=every)
    assert output_scores(opt, q, sentences(4, SEQ, 2, min_len=3)).popitem()[1] >= 0.999
    assert "INSTANCE_NORM" in {op.type for op in opt.ops} and not any(n.endswith("_sq") for n in opt.tensors)
