"""One operator, end to end, against LiteRT: a single-op int8 TFLite model imported by the
compiler, lowered, run on the chip's real executor (DMA engine, IOMMU, units), compared
byte for byte with LiteRT's BUILTIN_REF kernels on the same model and, exported back to
TFLite by the compiler, on the export too."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from libnpu.compiler.lower import lower
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import import_tflite
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.tflite_builder import run_reference


def check_on_chip(mem: ChipMemory, model: bytes, inputs: Sequence[np.ndarray], desc: str, *,
                  export: bool = False) -> list[np.ndarray]:
    """Run ``model`` on the chip and on LiteRT; assert equal bytes; the chip's outputs."""
    expected = run_reference(model, *inputs)
    graph = import_tflite(model)
    got = run_loadable(mem, lower(graph), list(inputs))
    assert len(got) == len(expected), desc
    for k, (a, b) in enumerate(zip(got, expected)):
        assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"{desc}: output {k}\n{a}\n{b}"
    if export:
        for k, (a, b) in enumerate(zip(got, run_reference(export_tflite(graph), *inputs))):
            assert a.tobytes() == b.tobytes(), f"{desc}: exported model, output {k}"
    return got
