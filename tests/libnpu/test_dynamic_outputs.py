"""Model outputs whose shape the data decides (a decoder Loop that stops on its own,
NonZero, NonMaxSuppression): they compile, the host's array is checked against the
output's signature and bound, and every place that describes an output says -1 for such a
dim (the runs on the device: tests/libnpu/test_host_fallback.py)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from benchmarks.corpus import judge
from libnpu.compiler.escalation import FidelityWarning
from libnpu.compiler.lower import compile_model
from libnpu.dynamic_outputs import DynamicOutputError, check_dynamic_output
from libnpu.loadable import FormatError, Loadable, TensorDesc
from libnpu.tools.c_runtime import CApiError, _dense_bytes
from tests.support import dynamic_models


def _inputs(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(count)]


@pytest.fixture(scope="module")
def nms() -> Loadable:
    """The detector head with NMS, compiled with the defaults."""
    with warnings.catch_warnings():     # the kept boxes' indices, scored by cosine, under the target
        warnings.simplefilter("ignore", FidelityWarning)
        return compile_model(dynamic_models.conv_nms().SerializeToString(), [[x] for x in _inputs(4, 3)])


def test_nms_after_a_detector_head_compiles_with_the_boxes_it_keeps_bounded(nms):
    # The probe on random inputs kept the maximum (16 boxes) twice: taken as static, the
    # float reference then failed on calibration data ("produced shape (14, 3)").
    selected = nms.outputs()[1]
    assert (selected.shape_signature, selected.max_shape) == ((-1, 3), (16, 3))
    with pytest.raises(CApiError, match=r"output selected: its shape is decided per run \[-1, 3\]"):
        _dense_bytes(selected)       # what npu_runtime_output_bytes and npu_runtime_infer say


def _desc(signature, bound=None) -> TensorDesc:
    return TensorDesc("seq", (2, 4), "float32", 0, shape_signature=signature, max_shape=bound)


def test_a_host_output_outside_its_signature_or_bound_is_refused():
    check_dynamic_output(_desc((-1, 4), (16, 4)), np.zeros((16, 4), np.float32), "Loop")
    with pytest.raises(DynamicOutputError, match=r"shape \[3, 5\], its signature is \[-1, 4\]"):
        check_dynamic_output(_desc((-1, 4)), np.zeros((3, 5), np.float32), "Loop")
    with pytest.raises(DynamicOutputError, match=r"over its bound \[16, 4\]"):
        check_dynamic_output(_desc((-1, 4), (16, 4)), np.zeros((17, 4), np.float32), "Loop")
    huge = np.broadcast_to(np.zeros(1, np.float32), (80_000_000, 4))     # 1.3 GB it never allocates
    with pytest.raises(DynamicOutputError, match="over the 268,435,456 an output shaped per run may hold"):
        check_dynamic_output(_desc((-1, 4)), huge, "Loop")


def test_a_malformed_signature_in_the_loadable_is_a_format_error(nms):
    loadable = Loadable.from_bytes(nms.to_bytes())
    selected = loadable.outputs()[1]
    selected.shape_signature = (-1, 3, 1)          # another rank than the tensor's
    with pytest.raises(FormatError, match=r"signature \[-1, 3, 1\] or bound \[16, 3\] does not fit shape"):
        Loadable.from_bytes(loadable.to_bytes())
    selected.shape_signature, loadable.inputs()[0].shape_signature = (-1, 3), (-1, 3, 8, 8)
    with pytest.raises(FormatError, match="'x': no such output"):     # the host returns outputs only
        Loadable.from_bytes(loadable.to_bytes())


def test_the_corpus_judge_compares_shapes_first():
    want = [np.ones((6, 1, 4)), np.ones((3, 1, 4))]
    assert judge("seq", [np.ones((6, 1, 4)), np.ones((3, 4))], want, None).passed       # same values, laid out
    check = judge("seq", [np.ones((5, 1, 4)), np.ones((3, 1, 4))], want, None)
    assert not check.passed and check.text() == "shape [5, 1, 4] where the reference has [6, 1, 4] (input 0)"
