"""Task descriptors of the compute operators (FULLY_CONNECTED is in ``npu_hw.tasks``), and
the geometry rules the compiler and the chip share.

Conventions (all descriptors follow ``npu_hw.tasks``: common header, 8-byte aligned):

* Operands are device addresses (u64 IOVAs). Activations are int8 unless noted (the
  header flag ``OPF_INT16`` makes them int16, see below), dense row-major; 4-D image
  tensors are NHWC.
* ``*_shape`` fields are u32 arrays. Arbitrary-rank tensors use ``rank`` plus a
  ``u32[MAX_RANK]`` shape whose unused trailing entries are 0. For ADD / MUL all three
  shapes are given at the output's rank (inputs padded with leading 1s), and inputs
  broadcast like numpy.
* Quantization parameters are inline int32 values in TFLite's convention (multiplier
  Q0.31, shift positive = left); ``npu_hw.fixedpoint`` derives them from scales exactly as
  TFLite does. Per-channel multipliers/shifts (conv, depthwise) are int32 arrays at
  ``mult_iova`` / ``shift_iova`` when the header flag ``OPF_PER_CHANNEL`` is set.
* ``act_min`` / ``act_max`` carry a fused activation (``spec.fixedpoint.fused_activation_range``).
"""
from __future__ import annotations

from npu_hw.tasks import register_task

__all__ = [
    "PADDING_SAME", "PADDING_VALID", "conv_geometry", "MAX_RANK", "OPF_PER_CHANNEL",
    "OPF_ALIGN_CORNERS", "OPF_HALF_PIXEL_CENTERS", "OPF_KEEP_DIMS", "OPF_INT16", "OPF_INT16_INPUT", "OPF_WEIGHTS16",
    "CONCAT_MAX_INPUTS", "MAX_FILTER_EXTENT",
    "OP_CONV_2D", "OP_DEPTHWISE_CONV_2D", "OP_ADD", "OP_MUL", "OP_MAX_POOL_2D", "OP_AVERAGE_POOL_2D",
    "OP_MEAN", "OP_RELU", "OP_LUT", "OP_SOFTMAX", "OP_CONCATENATION", "OP_RESHAPE", "OP_TRANSPOSE",
    "OP_PAD", "OP_STRIDED_SLICE", "OP_RESIZE_BILINEAR", "OP_RESIZE_NEAREST_NEIGHBOR", "OP_QUANTIZE",
    "OP_REQUANTIZE", "OP_DEQUANTIZE", "OP_SUM", "OP_REDUCE_MAX", "OP_REDUCE_MIN", "OP_REDUCE_L2",
    "OP_BATCH_MATMUL", "OPF_ADJ_X", "OPF_ADJ_Y", "OP_TRANSPOSE_CONV", "OP_GATHER",
    "OP_ARG_MAX", "OP_ARG_MIN", "OPF_INDEX_INT64",
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
# Convolutions: the longest dilated filter along an axis, ``(k - 1) * dilation + 1``; the
# padding on either side must be shorter than it (so it bounds the padded buffers).
MAX_FILTER_EXTENT = 4096

# Header flag bits.
OPF_PER_CHANNEL = 0x1         # conv/depthwise: multipliers/shifts are arrays (mult_iova/shift_iova)
OPF_ALIGN_CORNERS = 0x2       # resize
OPF_HALF_PIXEL_CENTERS = 0x4  # resize
OPF_KEEP_DIMS = 0x8           # mean (informational: the output bytes are the same)
# int16 activations (TFLite's 16x8 scheme: symmetric int16, zero point 0, int8 weights):
# CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED (bias int64, FC with FC_DOUBLE_SCALE), ADD,
# MUL, BATCH_MATMUL (both operands int16, int64 sums), MAX/AVERAGE_POOL_2D, MEAN, RELU,
# SOFTMAX (input_beta_* from fixedpoint.softmax_int16_params, output scale 2**-15), RESIZE_*,
# TRANSPOSE, PAD, STRIDED_SLICE (2-byte elements),
# QUANTIZE (float32 -> int16), DEQUANTIZE (int16 -> float32), REQUANTIZE (its output), and
# with our formulas (docs/hardware.md) PRELU (x, alpha and output int16) and HARD_SWISH (Q31 multipliers),
# and LUT (an int16[65536] table indexed by uint16(x): int16 LOGISTIC / TANH, spec.sigmoid16).
# RESHAPE and CONCATENATION count bytes and need no flag.
OPF_INT16 = 0x100
OPF_INT16_INPUT = 0x200       # REQUANTIZE: the input is int16 (int16 -> int8 / int16)
# With OPF_INT16, CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED: the weights are int16 too
# (symmetric, in [-32767, 32767]; "16x16", our formula: docs/hardware.md, kernels.int16x16).
OPF_WEIGHTS16 = 0x400

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
    ("lut", "<u8"),            # int8[256] (spec.fixedpoint.activation_lut), indexed by uint8(x);
                               # OPF_INT16: int16[65536] (spec.sigmoid16), indexed by uint16(x)
])
SOFTMAX = register_task(OP_SOFTMAX, "SOFTMAX", [
    ("input", "<u8"), ("output", "<u8"),
    ("rows", "<u4"), ("depth", "<u4"),        # softmax over the last axis of [rows, depth]
    ("input_beta_multiplier", "<i4"), ("input_beta_left_shift", "<i4"),
    ("diff_min", "<i4"),                       # spec.fixedpoint.softmax_params
])

# ---- activations and elementwise math (opcodes 0x30..0x4F) ----
OP_PRELU = 0x30
OP_HARD_SWISH = 0x31
OP_LEAKY_RELU = 0x32
OP_SQUARED_DIFFERENCE = 0x33
OP_SUB = 0x34
OP_MAXIMUM = 0x35
OP_MINIMUM = 0x36
OP_RSQRT = 0x37
OP_ABS = 0x38
OP_DIV = 0x39
OP_L2_NORMALIZATION = 0x3A
OP_LOG_SOFTMAX = 0x3B
__all__ += ["OP_PRELU", "OP_HARD_SWISH", "OP_LEAKY_RELU", "OP_SQUARED_DIFFERENCE", "OP_SUB", "OP_MAXIMUM",
            "OP_MINIMUM", "OP_RSQRT", "OP_ABS", "OP_DIV", "OP_L2_NORMALIZATION", "OP_LOG_SOFTMAX"]

# Unary ops whose TFLite int8 kernel is a table built from float (ELU, GELU, EXP, LOG,
# SQRT, NEG...) run on LUT; these carry the parameters of an integer formula (kernels:
# ``firmware_sim.kernels.binary``, ``.unary``, ``.normalization``).
PRELU = register_task(OP_PRELU, "PRELU", _BINARY_SHAPES + [   # input1: x, input2: alpha
    ("output_multiplier_1", "<i4"), ("output_shift_1", "<i4"),  # x >= 0: in / out
    ("output_multiplier_2", "<i4"), ("output_shift_2", "<i4"),  # x < 0: in * alpha / out
])
SQUARED_DIFFERENCE = register_task(OP_SQUARED_DIFFERENCE, "SQUARED_DIFFERENCE", _BINARY_SHAPES + [
    ("left_shift", "<i4"),
    ("input1_multiplier", "<i4"), ("input1_shift", "<i4"),
    ("input2_multiplier", "<i4"), ("input2_shift", "<i4"),
    ("output_multiplier", "<i4"), ("output_shift", "<i4"),
])
SUB = register_task(OP_SUB, "SUB", _BINARY_SHAPES + [   # ADD's fields (spec.fixedpoint.add_params)
    ("left_shift", "<i4"),
    ("input1_multiplier", "<i4"), ("input1_shift", "<i4"),
    ("input2_multiplier", "<i4"), ("input2_shift", "<i4"),
    ("output_multiplier", "<i4"), ("output_shift", "<i4"),
    ("act_min", "<i4"), ("act_max", "<i4"),
])
MAXIMUM = register_task(OP_MAXIMUM, "MAXIMUM", _BINARY_SHAPES)   # one scale: compares the bytes
MINIMUM = register_task(OP_MINIMUM, "MINIMUM", _BINARY_SHAPES)
DIV = register_task(OP_DIV, "DIV", _BINARY_SHAPES + [
    ("output_multiplier", "<i4"), ("output_shift", "<i4"),   # in1 / (in2 * out)
    ("act_min", "<i4"), ("act_max", "<i4"),
])
HARD_SWISH = register_task(OP_HARD_SWISH, "HARD_SWISH", _FLAT + [
    ("input_zp", "<i4"), ("output_zp", "<i4"),
    ("output_multiplier", "<i4"), ("output_shift", "<i4"),     # int16 fixed point, shift <= 0
    ("reluish_multiplier", "<i4"), ("reluish_shift", "<i4"),   # int16 fixed point
])
LEAKY_RELU = register_task(OP_LEAKY_RELU, "LEAKY_RELU", _FLAT + [
    ("input_zp", "<i4"), ("output_zp", "<i4"),
    ("multiplier_identity", "<i4"), ("shift_identity", "<i4"),  # x >= 0: in / out
    ("multiplier_alpha", "<i4"), ("shift_alpha", "<i4"),        # x < 0: in * alpha / out
])
RSQRT = register_task(OP_RSQRT, "RSQRT", _FLAT + [
    ("input_zp", "<i4"), ("output_zp", "<i4"),
    ("multiplier", "<i4"), ("shift", "<i4"),   # 1 / (sqrt(in) * out)
])
ABS = register_task(OP_ABS, "ABS", _FLAT + [
    ("input_zp", "<i4"), ("output_zp", "<i4"),
    ("rescale", "<u4"),                        # 0: same scale (no multiplier)
    ("multiplier", "<i4"), ("shift", "<i4"),   # in / out
])
_ROWS = [("input", "<u8"), ("output", "<u8"), ("rows", "<u4"), ("depth", "<u4")]  # over the last axis
L2_NORMALIZATION = register_task(OP_L2_NORMALIZATION, "L2_NORMALIZATION", _ROWS + [
    ("input_zp", "<i4"),                       # output: scale 1/128, zero point 0
])
LOG_SOFTMAX = register_task(OP_LOG_SOFTMAX, "LOG_SOFTMAX", _ROWS + [   # output: scale 16/256, zero point 127
    ("input_multiplier", "<i4"), ("input_left_shift", "<i4"),
    ("reverse_scaling_divisor", "<i4"), ("reverse_scaling_right_shift", "<i4"),
    ("diff_min", "<i4"),
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

# ---- reductions (opcodes 0x50..0x53) ----
OP_SUM = 0x50
OP_REDUCE_MAX = 0x51
OP_REDUCE_MIN = 0x52
OP_REDUCE_L2 = 0x53

_REDUCE = [
    ("input", "<u8"), ("output", "<u8"),
    ("rank", "<u4"), ("in_shape", *_SHAPE),
    ("axes_mask", "<u4"),      # bit i set: reduce axis i (the output keeps it as 1)
]
# SUM: acc = sum(x - input_zp) (int32), y = clamp(MultiplyByQuantizedMultiplier(acc, multiplier,
#   shift) + output_zp, -128, 127), multiplier/shift = spec.fixedpoint.rescale_multiplier: LiteRT's
#   integer arithmetic, on int8 values (LiteRT 2.3 reads and writes them as uint8: docs/hardware.md).
SUM = register_task(OP_SUM, "SUM", _REDUCE + [
    ("input_zp", "<i4"), ("output_zp", "<i4"), ("multiplier", "<i4"), ("shift", "<i4"),
])
REDUCE_MAX = register_task(OP_REDUCE_MAX, "REDUCE_MAX", _REDUCE)   # one quantization in and out
REDUCE_MIN = register_task(OP_REDUCE_MIN, "REDUCE_MIN", _REDUCE)
# REDUCE_L2 (no TFLite kernel; docs/hardware.md): acc = sum((x - input_zp)^2) exactly (int64),
#   y = clamp(output_zp + round_half_away(sqrt_f64(acc) * scale), -128, 127),
#   scale = f64(input_scale / output_scale).
REDUCE_L2 = register_task(OP_REDUCE_L2, "REDUCE_L2", _REDUCE + [
    ("input_zp", "<i4"), ("output_zp", "<i4"), ("scale", "<f8"),
])

# ---- matrix products of two activations (opcode 0x54) ----
OP_BATCH_MATMUL = 0x54
OPF_ADJ_X = 0x20   # batch_matmul: lhs is stored [..., depth, rows] (transposed)
OPF_ADJ_Y = 0x40   # batch_matmul: rhs is stored [..., cols, depth]

# out[..., i, j] = clamp(MultiplyByQuantizedMultiplier(sum_k (lhs[..., i, k] - lhs_zp) *
#   (rhs[..., k, j] - rhs_zp), multiplier, shift) + output_zp, act_min, act_max); the batch
#   axes broadcast like numpy (shapes given at one rank, leading 1s added). With OPF_INT16
#   (LiteRT's int16 kernel) every operand is int16, the zero points 0, the sums int64 and the
#   requantization the int64 MultiplyByQuantizedMultiplier (shift in [-31, 14]).
BATCH_MATMUL = register_task(OP_BATCH_MATMUL, "BATCH_MATMUL", [
    ("lhs", "<u8"), ("rhs", "<u8"), ("output", "<u8"),
    ("rank", "<u4"),                   # >= 2: batch axes, then the two matrix axes
    ("lhs_shape", *_SHAPE), ("rhs_shape", *_SHAPE),   # as stored (adj flags say the order)
    ("lhs_zp", "<i4"), ("rhs_zp", "<i4"), ("output_zp", "<i4"),
    ("multiplier", "<i4"), ("shift", "<i4"),
    ("act_min", "<i4"), ("act_max", "<i4"),
])

# ---- transposed convolution (opcode 0x55) ----
OP_TRANSPOSE_CONV = 0x55
# The conv layout: weights [Cout, KH, KW, Cin] (symmetric, per channel with OPF_PER_CHANNEL),
# bias int32 [Cout] or 0, padding = (top, left) cropped from the full result. Each input
# pixel (y, x) adds (input - input_zp) * weights into output (y * stride - top + ky,
# x * stride - left + kx) when that lies inside out_shape; then + bias,
# MultiplyByQuantizedMultiplier per channel, + output_zp, clamp. dilation must be (1, 1)
# and cin_per_group Cin.
TRANSPOSE_CONV = register_task(OP_TRANSPOSE_CONV, "TRANSPOSE_CONV", _CONV_FIELDS)

# ---- gather along one axis by an index table (opcode 0x56) ----
OP_GATHER = 0x56
# The input is viewed as [outer, axis_size, inner] (inner counted in elements), the output
# as [outer, count, inner]: output[o, i, :] = input[o, indices[i], :]. Serves GATHER with
# constant indices, and one axis at a time MIRROR_PAD, BROADCAST_TO and ONNX Pad
# reflect/edge. An index outside [0, axis_size) fails the job (EINVAL).
GATHER = register_task(OP_GATHER, "GATHER", [
    ("input", "<u8"), ("output", "<u8"),
    ("indices_iova", "<u8"),   # int32[count]
    ("outer", "<u4"), ("axis_size", "<u4"), ("inner", "<u4"), ("count", "<u4"),
])

# ---- index of the largest / smallest value along one axis (opcodes 0x57, 0x58) ----
OP_ARG_MAX = 0x57
OP_ARG_MIN = 0x58
OPF_INDEX_INT64 = 0x80   # arg_max/arg_min: the output is int64 (else int32)
# The output (the input's shape without ``axis``) holds the first index of the extreme
# int8 value; ties go to the lowest index, as LiteRT's kernel.
_ARG = [
    ("input", "<u8"), ("output", "<u8"),
    ("rank", "<u4"), ("in_shape", *_SHAPE), ("axis", "<u4"),
]
ARG_MAX = register_task(OP_ARG_MAX, "ARG_MAX", _ARG)
ARG_MIN = register_task(OP_ARG_MIN, "ARG_MIN", _ARG)

# ---- int16 ADD / PRELU with one requantization per channel (opcodes 0x60, 0x61) ----
# For int16 activations whose grids are per channel (symmetric, zero point 0, one scale per
# index of the last axis): the same arithmetic as the int16 ADD / PRELU above, with the
# multipliers and shifts of output channel c (the last axis of out_shape) read from an
# int32 array [channels, k] at ``params`` (docs/hardware.md). Zero points must be 0; the
# descriptor's ``channels`` must equal the output's last dimension.
OP_ADD16_PER_CHANNEL = 0x60
OP_PRELU16_PER_CHANNEL = 0x61
__all__ += ["OP_ADD16_PER_CHANNEL", "OP_PRELU16_PER_CHANNEL", "ADD16_CHANNEL_PARAMS", "PRELU16_CHANNEL_PARAMS"]
#: The columns of ADD16_PER_CHANNEL's parameter array (ADD's fields, left shift excepted).
ADD16_CHANNEL_PARAMS = ("input1_multiplier", "input1_shift", "input2_multiplier", "input2_shift",
                        "output_multiplier", "output_shift")
#: The columns of PRELU16_PER_CHANNEL's parameter array (PRELU's fields).
PRELU16_CHANNEL_PARAMS = ("output_multiplier_1", "output_shift_1", "output_multiplier_2", "output_shift_2")
ADD16_PER_CHANNEL = register_task(OP_ADD16_PER_CHANNEL, "ADD16_PER_CHANNEL", _BINARY_SHAPES + [
    ("params", "<u8"),         # int32 [channels, 6]: ADD16_CHANNEL_PARAMS
    ("channels", "<u4"),
    ("left_shift", "<i4"),     # 15 (spec.fixedpoint.ADD_LEFT_SHIFT_INT16)
    ("act_min", "<i4"), ("act_max", "<i4"),
])
PRELU16_PER_CHANNEL = register_task(OP_PRELU16_PER_CHANNEL, "PRELU16_PER_CHANNEL", _BINARY_SHAPES + [
    ("params", "<u8"),         # int32 [channels, 4]: PRELU16_CHANNEL_PARAMS
    ("channels", "<u4"),       # input1: x (per-channel grid), input2: alpha (int16)
])

# ---- a whole LSTM layer over a sequence, TFLite's integer "8x8->16" cell (opcode 0x62) ----
# int8 input and output, int8 weights, int16 gates and cell state: LiteRT's integer LSTM
# without CIFG, peepholes, projection or layer normalization, byte for byte. Per step t, for
# each gate g of (input, forget, cell, output), all int16 saturating (docs/hardware.md):
#   gate_g = sat16(sat16(MBQM(W_g x_t + biases[g], m[g], s[g])) + MBQM(R_g h + biases[4 + g], m[4 + g], s[4 + g]))
#   i, f, o = logistic(gate) (gemmlowp, Q3.12 -> Q0.15); g = tanh(gate) (Q3.12 -> Q0.15)
#   c = sat16(RDBPOT(f * c, 15) + RDBPOT(i * g, 30 + cell_shift)), clamped to +-cell_clip if > 0
#   h = clamp8(MBQM(o * tanh(c as Q(15 + cell_shift)), hidden_multiplier, hidden_shift) + hidden_zp); y_t = h
# x_t and h are the raw bytes: the zero points are in the effective biases. The states are
# read from *_state_in before the first step and written to *_state_out after the last (the
# same address is fine). cell_shift in [-30, -9]; a header OPF_INT16 (the cell state's type)
# changes nothing.
OP_UNIDIRECTIONAL_SEQUENCE_LSTM = 0x62
OPF_BATCH_MAJOR = 0x10  # unidirectional_sequence_lstm: input/output are [batch, steps, ...] (else time-major)
__all__ += ["OP_UNIDIRECTIONAL_SEQUENCE_LSTM", "OPF_BATCH_MAJOR"]
UNIDIRECTIONAL_SEQUENCE_LSTM = register_task(OP_UNIDIRECTIONAL_SEQUENCE_LSTM, "UNIDIRECTIONAL_SEQUENCE_LSTM", [
    ("input", "<u8"), ("output", "<u8"),   # int8 [steps, batch, n_input] / [steps, batch, n_cell]
    ("input_weights", "<u8"),        # int8 [4, n_cell, n_input], gates input, forget, cell, output
    ("recurrent_weights", "<u8"),    # int8 [4, n_cell, n_cell]
    ("biases", "<u8"),               # int32 [8, n_cell]: the input products' effective biases, then the recurrent ones
    ("output_state_in", "<u8"), ("cell_state_in", "<u8"),     # int8 / int16 [batch, n_cell]
    ("output_state_out", "<u8"), ("cell_state_out", "<u8"),
    ("steps", "<u4"), ("batch", "<u4"), ("n_input", "<u4"), ("n_cell", "<u4"),
    ("multipliers", "<i4", (8,)), ("shifts", "<i4", (8,)),
    ("cell_shift", "<i4"), ("cell_clip", "<i4"),
    ("hidden_multiplier", "<i4"), ("hidden_shift", "<i4"), ("hidden_zp", "<i4"),
])

# ---- instance normalization with a per-channel scale and shift (opcode 0x6A) ----
# x and y [batch, pixels, channels] (NHWC, pixels = H * W), each (batch, channel) plane
# normalized over its pixels with exact integer sums, then scaled and shifted per channel
# (gamma, beta: ``gamma_size`` / ``beta_size`` values, 1 or channels). Our formula
# (docs/hardware.md, firmware_sim.kernels.instance_norm), float64 from the exact sums:
#   q = x - input_zp; S1 = sum q, S2 = sum q^2 (exact); mean = S1 / P;
#   var = (P * S2 - S1^2) / P^2 (one correctly rounded division of exact integers);
#   k = input_scale * gamma / sqrt(var * input_scale^2 + epsilon), gamma = (g - gamma_zp) * gamma_scale;
#   y = clamp(rint(((q - mean) * k + beta) / output_scale) + output_zp, act_min, act_max).
# x and y are int16 with OPF_INT16 (zero points 0), gamma and beta int16 when their flag says.
OP_INSTANCE_NORM = 0x6A
__all__ += ["OP_INSTANCE_NORM"]
INSTANCE_NORM = register_task(OP_INSTANCE_NORM, "INSTANCE_NORM", [
    ("input", "<u8"), ("gamma", "<u8"), ("beta", "<u8"), ("output", "<u8"),
    ("batch", "<u4"), ("pixels", "<u4"), ("channels", "<u4"),
    ("gamma_size", "<u4"), ("beta_size", "<u4"),
    ("gamma_int16", "<u4"), ("beta_int16", "<u4"),
    ("input_zp", "<i4"), ("gamma_zp", "<i4"), ("beta_zp", "<i4"), ("output_zp", "<i4"),
    ("act_min", "<i4"), ("act_max", "<i4"),
    ("input_scale", "<f8"), ("gamma_scale", "<f8"), ("beta_scale", "<f8"), ("output_scale", "<f8"),
    ("epsilon", "<f8"),
])
