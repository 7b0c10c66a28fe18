"""The chip's int8 compute kernels: pure numpy, byte-identical to LiteRT's reference
kernels (``ai-edge-litert`` BUILTIN_REF), NHWC layout.

Modules: ``fully_connected``, ``conv`` (conv2d, depthwise_conv2d), ``elementwise`` (add,
mul, quantize, requantize, dequantize), ``activations`` (ReLU family, tanh/logistic LUT,
softmax), ``pooling`` (max, average, mean), ``layout`` (concat, reshape, transpose, pad,
strided slice), ``resize`` (bilinear, nearest). ``fixedpoint`` / ``gemmlowp`` hold the
integer arithmetic, ``gemm`` the exact float-BLAS products. Which descriptor runs which kernel, and what it
costs, is declared per compute unit in ``firmware_sim.units``.
Quantization parameters come from ``npu_hw.fixedpoint``, which derives them
from tensor scales exactly as TFLite's Prepare functions do.

Facts that decide byte-exactness (measured against LiteRT 2.3.0, see tests/kernels):
most ops requantize with gemmlowp's double rounding (TFLITE_SINGLE_ROUNDING is off in
the wheels); FULLY_CONNECTED's reference kernel instead computes
``round(acc * (double)in_scale * filter_scale / out_scale)``, which needs the float64
effective scale (``fully_connected(..., scale=...)``).
"""
from .allocator import keep_freed_memory

keep_freed_memory()  # block temporaries reuse heap pages instead of faulting fresh ones
