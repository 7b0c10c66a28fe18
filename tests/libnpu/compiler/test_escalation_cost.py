"""What accurate-by-default costs: the escalation's steps share their work (``step_reuse``)
and stop at a stated cap (``escalation.ESCALATION_BUDGET``). Speed itself is measured in
``benchmarks/escalation_cost.py``, not here."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

from libnpu.compiler.escalation import (
    BudgetError,
    FidelityWarning,
    format_fidelity,
    quantize_to_target,
)
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.recipes import RecipeError
from libnpu.tools.cli import main
from tests.support import model_builders as builders


def _data(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((1, 4, 8, 8)).astype(np.float32)] for _ in range(count)]


def test_steps_that_share_their_work_choose_the_same_graph() -> None:
    """All four steps (a target no step meets): calibration, GPTQ's moments, the quantized
    graph before bias correction and the float outputs are computed once per float graph,
    and the graph chosen is the one the steps computed from nothing give, tensor for tensor."""
    graph, data = import_onnx(builders.outlier_channel()), _data(10, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FidelityWarning)
        alone = quantize_to_target(graph, data, target=1.0, share_work=False, budget=0, cpu_float=False)
        shared = quantize_to_target(graph, data, target=1.0, budget=0, cpu_float=False)
    steps = shared.metadata["fidelity"]["steps"]
    assert [s["step"] for s in steps] == [s["step"] for s in alone.metadata["fidelity"]["steps"]] == \
        ["int8", "int16 activations", "int16 weights", "bias correction"]
    assert [s["scores"] for s in steps] == [s["scores"] for s in alone.metadata["fidelity"]["steps"]]
    assert [op.type for op in shared.ops] == [op.type for op in alone.ops]
    for name, t in alone.tensors.items():
        assert shared.tensors[name].quant == t.quant, name
        assert t.data is None or np.array_equal(shared.tensors[name].data, t.data), name
    alone_work = [s["work"] for s in alone.metadata["fidelity"]["steps"]]
    shared_work = [s["work"] for s in steps]
    assert shared_work[0] == alone_work[0] and sum(shared_work[1:]) < 0.7 * sum(alone_work[1:])
    work = shared.metadata["fidelity"]["shared"]
    # int8 on the optimized graph, the three others on the equalized one: two of each, not four
    # (and once more each for the chosen step calibrated again on every sample)
    assert work["calibrate"] == {"computed": 3, "reused": 2}
    assert work["gptq moments"] == {"computed": 2, "reused": 2}
    assert work["quantize"] == {"computed": 3, "reused": 2}
    # the float side of the int16 search and of the measurement: one memo (held_out)
    assert work["held-out float"]["reused"] > work["held-out float"]["computed"]
    assert "shared" not in alone.metadata["fidelity"]


def test_the_cap_stops_the_running_step_and_says_so() -> None:
    """The steps after int8 do at most the cap's work (op evaluations: the same under any
    load): the step running when they reach it stops there, unmeasured; the result is the
    best step measured before it, and the metadata, the printed lines and the warning say
    the cap was hit and how to lift it. Before, a step that started under the cap ran to its
    end, however far past it."""
    graph = import_onnx(builders.outlier_channel())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FidelityWarning)
        uncapped = to_int8_graph(graph, _data(10, 4), target=1.0, escalation_budget=0, cpu_float=False)
    full = uncapped.metadata["fidelity"]["steps"]
    assert [s["step"] for s in full] == ["int8", "int16 activations", "int16 weights", "bias correction"]
    assert "capped" not in uncapped.metadata["fidelity"]
    base, first = full[0]["work"], full[1]["work"]
    budget = (first + full[2]["work"] / 2) / base      # the int16 weights step stops halfway
    with pytest.warns(FidelityWarning, match=r"hit its cap: --escalation-budget 0 lifts it"):
        q = to_int8_graph(graph, _data(10, 4), target=1.0, escalation_budget=budget, cpu_float=False)
    fidelity = q.metadata["fidelity"]
    steps = fidelity["steps"]
    assert [s["step"] for s in steps] == ["int8", "int16 activations", "int16 weights"]
    assert steps[0]["work"] == base and steps[1]["work"] == first and steps[2]["stopped"]
    assert sum(s["work"] for s in steps[1:]) == int(budget * base) + 1     # the op evaluation past the cap
    assert "scores" not in steps[2] and fidelity["chosen"] == "int16 activations"
    assert fidelity["capped"] == (f"int16 weights stopped at the cap: the steps after int8 reached {budget:g} "
                                  "times the int8 step's work")
    printed = format_fidelity(fidelity)
    assert "int16 weights      stopped at the cap (work x" in printed and "capped: int16 weights stopped" in printed
    with pytest.warns(FidelityWarning, match=r"hit its cap"):     # the first escalation too
        q = to_int8_graph(graph, _data(10, 4), target=1.0, escalation_budget=1, cpu_float=False)
    assert [s.get("stopped", False) for s in q.metadata["fidelity"]["steps"]] == [False, True]
    assert q.metadata["fidelity"]["chosen"] == "int8"


def test_budget_errors(tmp_path, capsys) -> None:
    graph = import_onnx(builders.small_cnn())
    with pytest.raises(BudgetError, match="expected a factor >= 1"):
        to_int8_graph(graph, escalation_budget=0.5)
    with pytest.raises(RecipeError, match="default recipe"):
        to_int8_graph(graph, recipe="fast", escalation_budget=10)
    path = tmp_path / "cnn.onnx"
    onnx.save(builders.small_cnn(), path)
    assert main(["compile", str(path), "-o", str(tmp_path / "a.nlb"), "--recipe", "fast",
                 "--escalation-budget", "10", "--no-progress"]) == 2
    assert "--escalation-budget goes with the default recipe" in capsys.readouterr().err
