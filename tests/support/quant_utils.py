"""Random quantization parameters for kernel tests, computed the way TFLite's Prepare does."""
from __future__ import annotations

import numpy as np

from npu_hw.fixedpoint import quantize_multiplier_array

ACTIVATIONS = (0, 1, 2, 3)  # NONE, RELU, RELU_N1_TO_1, RELU6


def f32(x: float | np.ndarray) -> np.ndarray:
    """Round to float32, the precision TFLite stores scales in."""
    return np.asarray(x, dtype=np.float32)


def conv_multipliers(input_scale: float, filter_scales: np.ndarray,
                     output_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (multiplier, shift) as TFLite's PopulateConvolutionQuantizationParams.

    The effective scale is ``input * filter / output`` evaluated in double from float32 scales.
    """
    real = (np.float64(f32(input_scale)) * f32(filter_scales).astype(np.float64)
            / np.float64(f32(output_scale)))
    return quantize_multiplier_array(real)


def random_int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def random_int16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-32768, 32768, size=shape, dtype=np.int16)


def log_uniform(rng: np.random.Generator, lo: float, hi: float, size=None):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size=size))
