"""A concatenation with an empty input (torch.cat with an empty tensor, as eeg-spindles'
head exports it) runs on the chip: the empty input is left out of the descriptor, which the
chip refuses (EINVAL: "concat input extents do not add up to the output's")."""
from __future__ import annotations

import numpy as np
import pytest

from tests.libnpu.compiler.test_onnx_ops import check_against_onnxruntime, single_node


@pytest.mark.parametrize("name,model", [
    ("empty last", single_node("Concat", {"x": (1, 6, 1)}, {"y": (1, 6, 1)},
                               {"e": np.zeros((1, 0, 1), np.float32)}, axis=1)),
    ("empty between two", single_node("Concat", {"x": (1, 6, 2), "z": (1, 6, 2)}, {"y": (1, 12, 2)},
                                      {"e": np.zeros((1, 0, 2), np.float32)}, axis=1, _order=["x", "e", "z"])),
])
def test_an_empty_concat_input_is_left_out(mem, name, model) -> None:
    check_against_onnxruntime(mem, model)
