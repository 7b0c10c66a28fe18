"""QDQ ONNX models as users make them: a float model quantized by onnxruntime's own
``quantize_static`` (QDQ format, int8 activations and weights)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def quantize_qdq(float_model: bytes, folder: Path, shape: tuple[int, ...], count: int, seed: int = 1) -> Path:
    """``float_model`` (one input ``x`` of ``shape``) quantized by ``quantize_static`` with
    ``count`` calibration inputs uniform in [-1, 1]; the QDQ model's path in ``folder``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    (folder / "float.onnx").write_bytes(float_model)
    rng = np.random.default_rng(seed)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{"x": rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(count)])

        def get_next(self) -> dict | None:
            return next(self.feeds, None)
    out = folder / "qdq.onnx"
    quantize_static(str(folder / "float.onnx"), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return out
