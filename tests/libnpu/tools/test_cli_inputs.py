"""The inputs ``npu bench model`` / ``npu profile`` / ``npu run`` give a model: random ones
without -i, read from .npy files with it."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu.loadable import TensorDesc
from libnpu.tools.models import ModelSpecError, load_npy
from libnpu.tools.run import random_inputs


def test_unquantized_integer_inputs_get_ids_valid_in_any_table_and_quantized_ones_their_range():
    ids = TensorDesc("token", (1, 64), "int32", 0)           # a token id into an embedding (failed: any int32)
    q = TensorDesc("x", (1, 4096), "int8", 0, scale=np.array([0.1], np.float32), zero_point=np.array([0]))
    got_ids, got_q = random_inputs([ids, q])
    assert got_ids.dtype == np.int32 and set(np.unique(got_ids)) <= {0, 1}
    assert got_q.dtype == np.int8 and got_q.min() < -100 and got_q.max() > 100


def test_a_bool_mask_is_read_from_its_npy_and_text_is_refused(tmp_path):
    mask = np.arange(8)[None] >= 5                      # a padding mask input (failed: "bool is not numeric")
    np.save(tmp_path / "mask.npy", mask)
    np.testing.assert_array_equal(load_npy(tmp_path / "mask.npy"), mask)
    np.save(tmp_path / "names.npy", np.array(["a", "b"]))
    with pytest.raises(ModelSpecError, match="dtype <U1 is not numeric"):
        load_npy(tmp_path / "names.npy")
