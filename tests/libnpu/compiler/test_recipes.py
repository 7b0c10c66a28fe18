"""Quantizer recipes: named option sets (``--recipe accurate``, ``fast``), explicit options winning."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.lower import lower
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.recipes import RECIPES, RecipeError, apply_recipe
from tests.support import model_builders as builders

SHAPE = (1, 4, 8, 8)


def _data(count: int, seed: int):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(SHAPE).astype(np.float32)] for _ in range(count)]


def test_a_recipe_fills_only_the_options_left_unset() -> None:
    assert apply_recipe({}) == {}
    assert apply_recipe({"recipe": "default", "method": "mse"}) == {"method": "mse"}
    assert apply_recipe({"recipe": "accurate"}) == RECIPES["accurate"] == \
        {"weight_rounding": "gptq", "int16": "auto", "int16_target": 0.999, "int16_weights": "auto", "equalize": True,
         "int16_grid": "per_channel"}
    assert apply_recipe({"recipe": "accurate", "int16": "none", "method": "mse"}) == \
        {"weight_rounding": "gptq", "int16": "none", "int16_target": 0.999, "int16_weights": "auto", "equalize": True,
         "int16_grid": "per_channel", "method": "mse"}
    assert apply_recipe({"recipe": "fast", "method": "mse"}) == {"method": "mse"}
    with pytest.raises(RecipeError, match="unknown recipe 'quick'.*default, fast, accurate"):
        apply_recipe({"recipe": "quick"})


def test_accurate_is_gptq_with_automatic_int16() -> None:
    graph = import_onnx(builders.outlier_channel())
    data = _data(6, 4)
    by_recipe = to_int8_graph(graph, data, recipe="accurate", int16_target=0.999)
    spelled = to_int8_graph(graph, data, recipe="fast", weight_rounding="gptq", int16="auto", int16_target=0.999,
                            int16_weights="auto", equalize=True, int16_grid="per_channel")
    assert by_recipe.metadata["calibration"]["weight_rounding"] == "gptq"
    assert by_recipe.metadata["calibration"]["bias_correction"] is False
    assert by_recipe.metadata["int16_layers"] == spelled.metadata["int16_layers"] != []
    assert lower(by_recipe).to_bytes() == lower(spelled).to_bytes()
    plain = to_int8_graph(graph, data, recipe="accurate", int16="none")   # an explicit option wins
    assert "int16_layers" not in plain.metadata and plain.metadata["calibration"]["weight_rounding"] == "gptq"
