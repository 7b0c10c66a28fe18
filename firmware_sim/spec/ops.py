"""Task descriptors of the compute operators (FULLY_CONNECTED is in ``spec.tasks``), and
the geometry rules the compiler and the chip share.

Conventions (all descriptors follow ``spec.tasks``: common header, 8-byte aligned):

* Operands are device addresses (u64 IOVAs). Activations are int8 unless noted (the
  header flag ``OPF_INT16`` makes them int16, see below), dense row-major; 4-D image
  tensors are NHWC.
* ``*_shape`` fields are u32 arrays. Arbitrary-rank tensors use ``rank`` plus a
  ``u32[MAX_RANK]`` shape whose unused trailing entries are 0. For ADD / MUL all three
  shapes are given at the output's rank (inputs padded with leading 1s), and inputs
  broadcast like numpy.
* Quantization parameters are inline int32 values in TFLite's convention (multiplier
  Q0.31, shift positive = left); ``spec.fixedpoint`` derives them from scales exactly as
  TFLite does. Per-channel multipliers/shifts (conv, depthwise) are int32 arrays at
  ``mult_iova`` / ``shift_iova`` when the header flag ``OPF_PER_CHANNEL`` is set.
* ``act_min`` / ``act_max`` carry a fused activation (``spec.fixedpoint.fused_activation_range``).
"""
from __future__ import annotations

from firmware_sim.spec.tasks import register_task

__all__ = [
    "PADDING_SAME", "PADDING_VALID", "conv_geometry", "MAX_RANK", "OPF_PER_CHANNEL",
    "OPF_ALIGN_CORNERS", "OPF_HALF_PIXEL_CENTERS", "OPF_KEEP_DIMS", "OPF_INT16", "OPF_INT16_INPUT",
    "CONCAT_MAX_INPUTS",
    "OP_CONV_2D", "OP_DEPTHWISE_CONV_2D", "OP_ADD", "OP_MUL", "OP_MAX_POOL_2D", "OP_AVERAGE_POOL_2D",
    "OP_MEAN", "OP_RELU", "OP_LUT", "OP_SOFTMAX", "OP_CONCATENATION", "OP_RESHAPE", "OP_TRANSPOSE",
    "OP_PAD", "OP_STRIDED_SLICE", "OP_RESIZE_BILINEAR", "OP_RESIZE_NEAREST_NEIGHBOR", "OP_QUANTIZE",
    "OP_REQUANTIZE", "OP_DEQUANTIZE",
]

PADDING_SAME, PADDING_VALID = 1, 2


def conv_geometry(in_size: int, filter_size: int, stride: int, dilation: int,
                  padding: int) -> tuple[int, int]:
    """``(out_size, pad_before)`` along one spatial axis, as TFLite computes them.

    SAME: ``out = ceil(in / stride)``; VALID: ``out = ceil((in - eff + 1) / stride)`` with
    ``eff = (filter - 1) * dilation + 1``. The total padding is split with the smaller half
    before the image. Pooling uses the same rule with dilation 1.
    """
    if in_size < 0 or filter_size < 1 or stride < 1 or dilation < 1:
        raise ValueError("bad conv geometry: sizes must be >= 0, filter/stride/dilation >= 1")
    eff = (filter_size - 1) * dilation + 1
    if padding == PADDING_SAME:
        out = (in_size + stride - 1) // stride
    elif padding == PADDING_VALID:
        out = (in_size + stride - eff) // stride
    else:
        raise ValueError(f"unknown padding {padding}")
    out = max(out, 0)
    total = max((out - 1) * stride + eff - in_size, 0)
    return out, total // 2


MAX_RANK = 6
CONCAT_MAX_INPUTS = 1 << 16

# Header flag bits.
OPF_PER_CHANNEL = 0x1         # conv/depthwise: multipliers/shifts are arrays (mult_iova/shift_iova)
OPF_ALIGN_CORNERS = 0x2       # resize
OPF_HALF_PIXEL_CENTERS = 0x4  # resize
OPF_KEEP_DIMS = 0x8           # mean (informational: the output bytes are the same)
# int16 activations (TFLite's 16x8 scheme: symmetric int16, zero point 0, int8 weights):
# CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED (bias int64, FC with FC_DOUBLE_SCALE), ADD,
# MUL, MAX/AVERAGE_POOL_2D, MEAN, RELU, SOFTMAX (input_beta_* from fixedpoint.softmax_int16_params,
# output scale 2**-15), RESIZE_*, TRANSPOSE, PAD, STRIDED_SLICE (2-byte elements),
# QUANTIZE (float32 -> int16), DEQUANTIZE (int16 -> float32) and REQUANTIZE (its output).
# RESHAPE and CONCATENATION count bytes and need no flag.
OPF_INT16 = 0x100
OPF_INT16_INPUT = 0x200       # REQUANTIZE: the input is int16 (int16 -> int8 / int16)

OP_CONV_2D = 0x10
OP_DEPTHWISE_CONV_2D = 0x11
OP_ADD = 0x12
OP_MUL = 0x13
OP_MAX_POOL_2D = 0x14
OP_AVERAGE_POOL_2D = 0x15
OP_MEAN = 0x16
OP_RELU = 0x17
OP_LUT = 0x18
OP_SOFTMAX = 0x19
OP_CONCATENATION = 0x1A
OP_RESHAPE = 0x1B
OP_TRANSPOSE = 0x1C
OP_PAD = 0x1D
OP_STRIDED_SLICE = 0x1E
OP_RESIZE_BILINEAR = 0x1F
OP_RESIZE_NEAREST_NEIGHBOR = 0x20
OP_QUANTIZE = 0x21
OP_REQUANTIZE = 0x22
OP_DEQUANTIZE = 0x23

_U32x2, _U32x4 = ("<u4", (2,)), ("<u4", (4,))
_SHAPE = ("<u4", (MAX_RANK,))
_I32xR = ("<i4", (MAX_RANK,))

_CONV_FIELDS = [
    ("input", "<u8"),          # int8 [N, H, W, Cin]
    ("weights", "<u8"),        # conv: int8 [Cout, KH, KW, Cin/groups]; depthwise: [1, KH, KW, Cout]
    ("bias", "<u8"),           # int32 [Cout], 0 = none
    ("output", "<u8"),         # int8 [N, OH, OW, Cout]
    ("mult_iova", "<u8"),      # int32 [Cout] with OPF_PER_CHANNEL
    ("shift_iova", "<u8"),     # int32 [Cout] with OPF_PER_CHANNEL
    ("in_shape", *_U32x4),     # N, H, W, Cin
    ("out_shape", *_U32x4),    # N, OH, OW, Cout
    ("filter_hw", *_U32x2),
    ("stride", *_U32x2),
    ("dilation", *_U32x2),
    ("padding", *_U32x2),      # before the image: top, left (see conv_geometry)
    ("cin_per_group", "<u4"),  # conv: filter input depth (Cin for an ungrouped conv); depthwise: 1
    ("input_zp", "<i4"),
    ("output_zp", "<i4"),
    ("multiplier", "<i4"),     # per-tensor (no OPF_PER_CHANNEL)
    ("shift", "<i4"),
    ("act_min", "<i4"),
    ("act_max", "<i4"),
]
CONV_2D = register_task(OP_CONV_2D, "CONV_2D", _CONV_FIELDS)
DEPTHWISE_CONV_2D = register_task(OP_DEPTHWISE_CONV_2D, "DEPTHWISE_CONV_2D", _CONV_FIELDS)

_BINARY_SHAPES = [
    ("input1", "<u8"), ("input2", "<u8"), ("output", "<u8"),
    ("rank", "<u4"),
    ("in1_shape", *_SHAPE), ("in2_shape", *_SHAPE), ("out_shape", *_SHAPE),
    ("input1_zp", "<i4"), ("input2_zp", "<i4"), ("output_zp", "<i4"),
]
ADD = register_task(OP_ADD, "ADD", _BINARY_SHAPES + [
    ("left_shift", "<i4"),
    ("input1_multiplier", "<i4"), ("input1_shift", "<i4"),
    ("input2_multiplier", "<i4"), ("input2_shift", "<i4"),
    ("output_multiplier", "<i4"), ("output_shift", "<i4"),
    ("act_min", "<i4"), ("act_max", "<i4"),
])
MUL = register_task(OP_MUL, "MUL", _BINARY_SHAPES + [
    ("multiplier", "<i4"), ("shift", "<i4"),
    ("act_min", "<i4"), ("act_max", "<i4"),
])

_POOL_FIELDS = [
    ("input", "<u8"), ("output", "<u8"),
    ("in_shape", *_U32x4), ("out_shape", *_U32x4),
    ("filter_hw", *_U32x2), ("stride", *_U32x2), ("padding", *_U32x2),
    ("act_min", "<i4"), ("act_max", "<i4"),
]
MAX_POOL_2D = register_task(OP_MAX_POOL_2D, "MAX_POOL_2D", _POOL_FIELDS)
AVERAGE_POOL_2D = register_task(OP_AVERAGE_POOL_2D, "AVERAGE_POOL_2D", _POOL_FIELDS)

MEAN = register_task(OP_MEAN, "MEAN", [
    ("input", "<u8"), ("output", "<u8"),
    ("rank", "<u4"), ("in_shape", *_SHAPE),
    ("axes_mask", "<u4"),      # bit i set: reduce axis i
    ("input_zp", "<i4"), ("output_zp", "<i4"),
    ("multiplier", "<i4"), ("shift", "<i4"),   # spec.fixedpoint.rescale_multiplier
])

_FLAT = [("input", "<u8"), ("output", "<u8"), ("count", "<u8")]
RELU = register_task(OP_RELU, "RELU", _FLAT + [  # RELU / RELU6 / RELU_N1_TO_1 via act range
    ("input_zp", "<i4"), ("output_zp", "<i4"),
    ("multiplier", "<i4"), ("shift", "<i4"),   # spec.fixedpoint.relu_multiplier
    ("act_min", "<i4"), ("act_max", "<i4"),
])
LUT = register_task(OP_LUT, "LUT", _FLAT + [   # TANH / LOGISTIC
    ("lut", "<u8"),            # int8[256] (spec.fixedpoint.activation_lut), indexed by uint8(x)
])
SOFTMAX = register_task(OP_SOFTMAX, "SOFTMAX", [
    ("input", "<u8"), ("output", "<u8"),
    ("rows", "<u4"), ("depth", "<u4"),        # softmax over the last axis of [rows, depth]
    ("input_beta_multiplier", "<i4"), ("input_beta_left_shift", "<i4"),
    ("diff_min", "<i4"),                       # spec.fixedpoint.softmax_params
])

CONCATENATION = register_task(OP_CONCATENATION, "CONCATENATION", [
    ("inputs_iova", "<u8"),    # u64[num_inputs]: each input's IOVA
    ("sizes_iova", "<u8"),     # u32[num_inputs]: each input's extent on the concat axis
    ("output", "<u8"),
    ("num_inputs", "<u4"),
    ("outer", "<u4"),          # product of the dims before the axis
    ("inner", "<u4"),          # product of the dims after the axis (bytes per axis step)
    ("axis_total", "<u4"),     # output extent on the axis
])
RESHAPE = register_task(OP_RESHAPE, "RESHAPE", [
    ("input", "<u8"), ("output", "<u8"), ("count", "<u8"),   # bytes (same data, new shape)
])
TRANSPOSE = register_task(OP_TRANSPOSE, "TRANSPOSE", [
    ("input", "<u8"), ("output", "<u8"),
    ("rank", "<u4"), ("in_shape", *_SHAPE),
    ("perm", *_SHAPE),         # output axis i is input axis perm[i]
])
PAD = register_task(OP_PAD, "PAD", [
    ("input", "<u8"), ("output", "<u8"),
    ("rank", "<u4"), ("in_shape", *_SHAPE),
    ("pad_before", *_SHAPE), ("pad_after", *_SHAPE),
    ("pad_value", "<i4"),      # quantized fill value (the output zero point for PAD)
])
STRIDED_SLICE = register_task(OP_STRIDED_SLICE, "STRIDED_SLICE", [
    ("input", "<u8"), ("output", "<u8"),
    ("rank", "<u4"), ("in_shape", *_SHAPE),
    ("begin", *_I32xR), ("end", *_I32xR), ("strides", *_I32xR),
    ("begin_mask", "<u4"), ("end_mask", "<u4"), ("shrink_axis_mask", "<u4"),
])
_RESIZE_FIELDS = [
    ("input", "<u8"), ("output", "<u8"),
    ("in_shape", *_U32x4),     # N, H, W, C
    ("out_hw", *_U32x2),       # flags: OPF_ALIGN_CORNERS, OPF_HALF_PIXEL_CENTERS
]
RESIZE_BILINEAR = register_task(OP_RESIZE_BILINEAR, "RESIZE_BILINEAR", _RESIZE_FIELDS)
RESIZE_NEAREST_NEIGHBOR = register_task(OP_RESIZE_NEAREST_NEIGHBOR, "RESIZE_NEAREST_NEIGHBOR", _RESIZE_FIELDS)

QUANTIZE = register_task(OP_QUANTIZE, "QUANTIZE", _FLAT + [   # float32 -> int8
    ("scale", "<f4"), ("zero_point", "<i4"),
])
REQUANTIZE = register_task(OP_REQUANTIZE, "REQUANTIZE", _FLAT + [  # int8 -> int8
    ("input_zp", "<i4"), ("output_zp", "<i4"),
    ("multiplier", "<i4"), ("shift", "<i4"),   # spec.fixedpoint.rescale_multiplier
])
DEQUANTIZE = register_task(OP_DEQUANTIZE, "DEQUANTIZE", _FLAT + [  # int8 -> float32
    ("scale", "<f4"), ("zero_point", "<i4"),
])
