"""The TFLite C structures the delegate touches, declared here (no package ships TFLite's
headers; LiteRT exports no TfLite* symbols).

Written from the layouts of ``tflite/core/c/common.h`` (LiteRT 2.2-2.3), which only ever
appends fields: each struct is declared up to the last field the delegate reads or writes,
except the ones TFLite allocates from our side (``TfLiteDelegate``) or receives by value
(``TfLiteRegistration``), which are declared whole with their newest layout and a zeroed
tail. Enums are plain ``int``s (their C size) with the values as constants.

``LAYOUTS`` declares, per options table of the TFLite schema, the C struct of a node's
``builtin_data`` and how each field maps onto the table; which table each builtin carries
is declared with its operator (``libnpu.compiler.registry.tflite_options``), and builtins
declared nowhere are left to the interpreter.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["C_TYPES", "CDEF", "LAYOUTS", "OptionsLayout", "TYPES", "K_OK", "K_ERROR", "K_DELEGATE_ERROR",
           "ALLOCATION_CONSTANT", "FLAGS"]

K_OK, K_ERROR, K_DELEGATE_ERROR = 0, 1, 2
# kTfLiteMmapRo and kTfLitePersistentRo: read-only data known before the first run (weights).
ALLOCATION_CONSTANT = (1, 5)
# kTfLiteDelegateFlagsAllowDynamicTensors | kTfLiteDelegateFlagsRequirePropagatedShapes
FLAGS = 1 | 2

# TfLiteType -> numpy dtype name (the ones a chip partition can carry).
TYPES = {1: "float32", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8", 10: "float16"}

C_TYPES = """
typedef int TfLiteStatus;
typedef int TfLiteType;
typedef int TfLiteBufferHandle;

typedef struct TfLiteIntArray { int size; int data[]; } TfLiteIntArray;
typedef struct TfLiteFloatArray { int size; float data[]; } TfLiteFloatArray;
typedef struct { float scale; int32_t zero_point; } TfLiteQuantizationParams;
typedef struct { int type; void* params; } TfLiteQuantization;
typedef struct { TfLiteFloatArray* scale; TfLiteIntArray* zero_point; int32_t quantized_dimension; }
    TfLiteAffineQuantization;

typedef struct TfLiteTensor {
    TfLiteType type;
    void* data;
    TfLiteIntArray* dims;
    TfLiteQuantizationParams params;
    int allocation_type;
    size_t bytes;
    const void* allocation;
    const char* name;
    struct TfLiteDelegate* delegate;
    TfLiteBufferHandle buffer_handle;
    _Bool data_is_stale;
    _Bool is_variable;
    TfLiteQuantization quantization;
    void* sparsity;
    const TfLiteIntArray* dims_signature;
} TfLiteTensor;

typedef struct TfLiteNode {
    TfLiteIntArray* inputs;
    TfLiteIntArray* outputs;
    TfLiteIntArray* intermediates;
    TfLiteIntArray* temporaries;
    void* user_data;
    void* builtin_data;
    const void* custom_initial_data;
    int custom_initial_data_size;
    struct TfLiteDelegate* delegate;
    _Bool might_have_side_effect;
} TfLiteNode;

struct TfLiteContext;
typedef struct TfLiteRegistration {
    void* (*init)(struct TfLiteContext* context, const char* buffer, size_t length);
    void (*free)(struct TfLiteContext* context, void* buffer);
    TfLiteStatus (*prepare)(struct TfLiteContext* context, TfLiteNode* node);
    TfLiteStatus (*invoke)(struct TfLiteContext* context, TfLiteNode* node);
    const char* (*profiling_string)(const struct TfLiteContext* context, const TfLiteNode* node);
    int32_t builtin_code;
    const char* custom_name;
    int version;
    void* registration_external;
    void* (*async_kernel)(struct TfLiteContext* context, TfLiteNode* node);
    uint64_t inplace_operator;
    uint64_t reserved_tail[8];
} TfLiteRegistration;

typedef struct TfLiteDelegateParams {
    struct TfLiteDelegate* delegate;
    TfLiteIntArray* nodes_to_replace;
    TfLiteIntArray* input_tensors;
    TfLiteIntArray* output_tensors;
} TfLiteDelegateParams;

typedef struct TfLiteContext {
    size_t tensors_size;
    TfLiteStatus (*GetExecutionPlan)(struct TfLiteContext* context, TfLiteIntArray** execution_plan);
    TfLiteTensor* tensors;
    void* impl_;
    TfLiteStatus (*ResizeTensor)(struct TfLiteContext*, TfLiteTensor* tensor, TfLiteIntArray* new_size);
    void (*ReportError)(struct TfLiteContext*, const char* msg, ...);
    TfLiteStatus (*AddTensors)(struct TfLiteContext*, int tensors_to_add, int* first_new_tensor_index);
    TfLiteStatus (*GetNodeAndRegistration)(struct TfLiteContext*, int node_index, TfLiteNode** node,
                                           TfLiteRegistration** registration);
    TfLiteStatus (*ReplaceNodeSubsetsWithDelegateKernels)(struct TfLiteContext*, TfLiteRegistration registration,
                                                          const TfLiteIntArray* nodes_to_replace,
                                                          struct TfLiteDelegate* delegate);
    int recommended_num_threads;
    void* GetExternalContext;
    void* SetExternalContext;
    _Bool allow_fp32_relax_to_fp16;
    void* profiler;
    void* AllocatePersistentBuffer;
    void* AllocateBufferForEval;
    void* RequestScratchBufferInArena;
    void* GetScratchBuffer;
    void* ResizeTensorExplicit;
    TfLiteStatus (*PreviewDelegatePartitioning)(struct TfLiteContext* context, const TfLiteIntArray* nodes_to_replace,
                                                TfLiteDelegateParams** partition_params_array, int* num_partitions);
} TfLiteContext;

typedef struct TfLiteDelegate {
    void* data_;
    TfLiteStatus (*Prepare)(TfLiteContext* context, struct TfLiteDelegate* delegate);
    void* CopyFromBufferHandle;
    void* CopyToBufferHandle;
    void* FreeBufferHandle;
    int64_t flags;
    void* opaque_delegate_builder;
} TfLiteDelegate;

typedef struct { int width; int height; int width_offset; int height_offset; } TfLitePaddingValues;
typedef struct { int padding; int stride_width; int stride_height; int activation; int dilation_width_factor;
                 int dilation_height_factor; } TfLiteConvParams;
typedef struct { int padding; int stride_width; int stride_height; int depth_multiplier; int activation;
                 int dilation_width_factor; int dilation_height_factor; } TfLiteDepthwiseConvParams;
typedef struct { int activation; int weights_format; _Bool keep_num_dims; _Bool asymmetric_quantize_inputs; }
    TfLiteFullyConnectedParams;
typedef struct { int padding; int stride_width; int stride_height; int filter_width; int filter_height;
                 int activation; } TfLitePoolParams;
typedef struct { int activation; _Bool pot_scale_int16; } TfLiteAddParams;
typedef struct { int activation; } TfLiteActivationParams;
typedef struct { float beta; } TfLiteSoftmaxParams;
typedef struct { int axis; int activation; } TfLiteConcatenationParams;
typedef struct { int32_t shape[8]; int num_dimensions; } TfLiteReshapeParams;
typedef struct { _Bool keep_dims; } TfLiteReducerParams;
typedef struct { _Bool align_corners; _Bool half_pixel_centers; } TfLiteResizeParams;
typedef struct { int begin_mask; int end_mask; int ellipsis_mask; int new_axis_mask; int shrink_axis_mask;
                 _Bool offset; } TfLiteStridedSliceParams;
typedef struct { float alpha; } TfLiteLeakyReluParams;
typedef struct { int num_splits; } TfLiteSplitParams;
typedef struct { int values_count; int axis; } TfLitePackParams;
typedef struct { int num; int axis; } TfLiteUnpackParams;
typedef struct { int axis; int batch_dims; } TfLiteGatherParams;
typedef struct { int block_size; } TfLiteBlockSizeParams;
typedef struct { int padding; int stride_width; int stride_height; int activation; } TfLiteTransposeConvParams;
typedef struct { _Bool adj_x; _Bool adj_y; _Bool asymmetric_quantize_inputs; } TfLiteBatchMatMulParams;
typedef struct { int mode; } TfLiteMirrorPaddingParams;
typedef struct { int output_type; } TfLiteArgMaxParams;
typedef struct { _Bool approximate; } TfLiteGeluParams;
"""

# The interpreter's callbacks into the delegate, implemented in Python (plugin.install).
CDEF = C_TYPES + """
extern "Python" TfLiteStatus npu_delegate_prepare(TfLiteContext*, TfLiteDelegate*);
extern "Python" void* npu_kernel_init(TfLiteContext*, const char*, size_t);
extern "Python" void npu_kernel_free(TfLiteContext*, void*);
extern "Python" TfLiteStatus npu_kernel_prepare(TfLiteContext*, TfLiteNode*);
extern "Python" TfLiteStatus npu_kernel_invoke(TfLiteContext*, TfLiteNode*);
"""


def _padding(c: int) -> int:
    # TfLitePadding (Unknown 0, Same 1, Valid 2) -> schema Padding (SAME 0, VALID 1)
    if c not in (1, 2):
        raise ValueError(f"padding {c} is neither SAME nor VALID")
    return c - 1


def _activation(c: int) -> int:
    # TfLiteFusedActivation and the schema share 0..5 (NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGN_BIT)
    if not 0 <= c <= 5:
        raise ValueError(f"fused activation {c} has no TFLite schema value")
    return c


def _mirror_mode(c: int) -> int:
    # TfLiteMirrorPaddingMode (Unknown 0, Reflect 1, Symmetric 2) -> schema (REFLECT 0, SYMMETRIC 1)
    if c not in (1, 2):
        raise ValueError(f"mirror padding mode {c} is unknown")
    return c - 1


@dataclass(frozen=True)
class OptionsLayout:
    """How one builtin's ``builtin_data`` becomes its flatbuffer options table."""
    struct: str                              # C struct of builtin_data
    table: str                               # the schema's options table (e.g. "Conv2DOptions")
    fields: Mapping[str, tuple[str, Callable[[Any], Any]]] = field(default_factory=dict)  # table field -> C

    def read(self, ffi: Any, builtin_data: Any) -> dict[str, Any]:
        """The options table's fields, read from ``builtin_data`` (a ``void*``)."""
        params = ffi.cast(f"{self.struct}*", builtin_data)
        return {name: convert(getattr(params, c_field)) for name, (c_field, convert) in self.fields.items()}


def _same(v: Any) -> Any:
    return v


def _b(v: Any) -> bool:
    return bool(v)


_Fields = dict[str, tuple[str, Callable[[Any], Any]]]
_CONV: _Fields = dict(
    Padding=("padding", _padding), StrideW=("stride_width", int), StrideH=("stride_height", int),
    FusedActivationFunction=("activation", _activation), DilationWFactor=("dilation_width_factor", int),
    DilationHFactor=("dilation_height_factor", int))
_POOL = OptionsLayout("TfLitePoolParams", "Pool2DOptions", dict(
    Padding=("padding", _padding), StrideW=("stride_width", int), StrideH=("stride_height", int),
    FilterWidth=("filter_width", int), FilterHeight=("filter_height", int),
    FusedActivationFunction=("activation", _activation)))
_ACT: _Fields = dict(FusedActivationFunction=("activation", _activation))
_REDUCER = OptionsLayout("TfLiteReducerParams", "ReducerOptions", dict(KeepDims=("keep_dims", _b)))
_BLOCK: _Fields = dict(BlockSize=("block_size", int))
_RESIZE: _Fields = dict(AlignCorners=("align_corners", _b), HalfPixelCenters=("half_pixel_centers", _b))

# Each options table's C struct and fields, keyed by the schema's table name; which builtin
# carries which table is declared with the operators (``registry.tflite_options``).
LAYOUTS: dict[str, OptionsLayout] = {layout.table: layout for layout in (
    OptionsLayout("TfLiteConvParams", "Conv2DOptions", _CONV),
    OptionsLayout("TfLiteDepthwiseConvParams", "DepthwiseConv2DOptions", dict(
        _CONV, DepthMultiplier=("depth_multiplier", int))),
    OptionsLayout("TfLiteFullyConnectedParams", "FullyConnectedOptions", dict(
        _ACT, WeightsFormat=("weights_format", int), KeepNumDims=("keep_num_dims", _b))),
    _POOL,
    OptionsLayout("TfLiteAddParams", "AddOptions", dict(_ACT, PotScaleInt16=("pot_scale_int16", _b))),
    OptionsLayout("TfLiteAddParams", "SubOptions", dict(_ACT, PotScaleInt16=("pot_scale_int16", _b))),
    OptionsLayout("TfLiteActivationParams", "MulOptions", _ACT),
    OptionsLayout("TfLiteActivationParams", "DivOptions", _ACT),
    OptionsLayout("TfLiteActivationParams", "L2NormOptions", _ACT),
    OptionsLayout("TfLiteSoftmaxParams", "SoftmaxOptions", dict(Beta=("beta", float))),
    OptionsLayout("TfLiteConcatenationParams", "ConcatenationOptions", dict(_ACT, Axis=("axis", int))),
    _REDUCER,
    OptionsLayout("TfLiteResizeParams", "ResizeBilinearOptions", _RESIZE),
    OptionsLayout("TfLiteResizeParams", "ResizeNearestNeighborOptions", _RESIZE),
    OptionsLayout("TfLiteStridedSliceParams", "StridedSliceOptions", dict(
        BeginMask=("begin_mask", int), EndMask=("end_mask", int), EllipsisMask=("ellipsis_mask", int),
        NewAxisMask=("new_axis_mask", int), ShrinkAxisMask=("shrink_axis_mask", int), Offset=("offset", _b))),
    OptionsLayout("TfLiteLeakyReluParams", "LeakyReluOptions", dict(Alpha=("alpha", float))),
    OptionsLayout("TfLiteSplitParams", "SplitOptions", dict(NumSplits=("num_splits", int))),
    OptionsLayout("TfLiteSplitParams", "SplitVOptions", dict(NumSplits=("num_splits", int))),
    OptionsLayout("TfLitePackParams", "PackOptions", dict(ValuesCount=("values_count", int), Axis=("axis", int))),
    OptionsLayout("TfLiteUnpackParams", "UnpackOptions", dict(Num=("num", int), Axis=("axis", int))),
    OptionsLayout("TfLiteGatherParams", "GatherOptions", dict(Axis=("axis", int), BatchDims=("batch_dims", int))),
    OptionsLayout("TfLiteBlockSizeParams", "DepthToSpaceOptions", _BLOCK),
    OptionsLayout("TfLiteBlockSizeParams", "SpaceToDepthOptions", _BLOCK),
    OptionsLayout("TfLiteTransposeConvParams", "TransposeConvOptions", dict(
        Padding=("padding", _padding), StrideW=("stride_width", int), StrideH=("stride_height", int),
        FusedActivationFunction=("activation", _activation))),
    OptionsLayout("TfLiteBatchMatMulParams", "BatchMatMulOptions", dict(AdjX=("adj_x", _b), AdjY=("adj_y", _b))),
    OptionsLayout("TfLiteMirrorPaddingParams", "MirrorPadOptions", dict(Mode=("mode", _mirror_mode))),
    OptionsLayout("TfLiteArgMaxParams", "ArgMaxOptions", dict(OutputType=("output_type", _same))),
    OptionsLayout("TfLiteGeluParams", "GeluOptions", dict(Approximate=("approximate", _b))),
)}
