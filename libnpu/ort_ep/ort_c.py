"""C declarations of ONNX Runtime's plugin execution-provider API, for the version pinned.

Written from the API's public description (``onnxruntime_c_api.h`` /
``onnxruntime_ep_c_api.h`` in ORT's sources, which the wheel does not ship) for
``ORT_API_VERSION`` 23, the first release whose plugin EPs can compile nodes (ORT 1.23;
pyproject pins ``onnxruntime>=1.23``). ORT never moves a function table's entry once a
version shipped: later releases append, so slot N of a table is the same function in every
release from the one that added it. The structs an EP fills (``OrtEpFactory``, ``OrtEp``,
``OrtNodeComputeInfo``, ``OrtNodeFusionOptions``) are declared with their members up to
version 23 (ORT reads ``ort_version_supported`` and calls nothing newer).

ORT's function tables (``OrtApi``, ``OrtEpApi``) are declared by :func:`table_struct`
from ``{slot: declaration}`` below: only the entries this EP calls, each at its slot, the
others padded as ``void*``. The slots were counted against ORT's own checks of its table
(its ``static_assert``s on the last slot of each version: OrtApi's version 1 ends at 101,
15 at 254, 22 at 317, 23 at 389; OrtEpApi's version 22 at 1). tests/libnpu/ort_ep/test_ort_ep.py
calls ``GetBuildInfoString`` (slot 254) and the graph getters, so a misplaced slot fails there.
"""
from __future__ import annotations

__all__ = ["ORT_API_VERSION", "ORT_API", "ORT_EP_API", "CDEF", "table_struct", "ORT_FAIL", "ORT_INVALID_ARGUMENT",
           "ORT_EP_FAIL", "LOG_VERBOSE", "LOG_INFO", "LOG_WARNING", "LOG_ERROR", "ELEMENT_TYPES", "ATTR_INT",
           "ATTR_INTS", "ATTR_FLOAT", "ATTR_FLOATS", "ATTR_STRING", "ATTR_STRINGS", "ATTR_TENSOR",
           "HARDWARE_CPU"]

ORT_API_VERSION = 23

# OrtErrorCode
ORT_FAIL, ORT_INVALID_ARGUMENT, ORT_EP_FAIL = 1, 2, 11
# OrtLoggingLevel
LOG_VERBOSE, LOG_INFO, LOG_WARNING, LOG_ERROR = 0, 1, 2, 3
# OrtOpAttrType
ATTR_INT, ATTR_INTS, ATTR_FLOAT, ATTR_FLOATS, ATTR_STRING, ATTR_STRINGS, ATTR_GRAPH, ATTR_TENSOR = range(1, 9)
# OrtHardwareDeviceType
HARDWARE_CPU = 0

# ONNXTensorElementDataType: ONNX's TensorProto numbering.
ELEMENT_TYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
                 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}

_OPAQUE = ("Status", "Logger", "KeyValuePairs", "HardwareDevice", "EpDevice", "SessionOptions", "Graph", "Node",
           "ValueInfo", "OpAttr", "TypeInfo", "TensorTypeAndShapeInfo", "Value", "KernelContext",
           "EpGraphSupportInfo", "NodeComputeContext", "MemoryInfo", "MemoryDevice", "Allocator",
           "DataTransferImpl", "SyncStreamImpl", "RunOptions")

# OrtApi: slot -> declaration (name first after the return type's "(*", as C writes it).
ORT_API = {
    0: "OrtStatus* (*CreateStatus)(int code, const char* msg)",
    2: "const char* (*GetErrorMessage)(const OrtStatus* status)",
    51: "OrtStatus* (*GetTensorMutableData)(OrtValue* value, void** out)",
    55: "OrtStatus* (*CastTypeInfoToTensorInfo)(const OrtTypeInfo* type_info, const OrtTensorTypeAndShapeInfo** out)",
    60: "OrtStatus* (*GetTensorElementType)(const OrtTensorTypeAndShapeInfo* info, int* out)",
    61: "OrtStatus* (*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out)",
    62: "OrtStatus* (*GetDimensions)(const OrtTensorTypeAndShapeInfo* info, int64_t* values, size_t count)",
    65: "OrtStatus* (*GetTensorTypeAndShape)(const OrtValue* value, OrtTensorTypeAndShapeInfo** out)",
    88: "OrtStatus* (*KernelContext_GetInputCount)(const OrtKernelContext* context, size_t* out)",
    89: "OrtStatus* (*KernelContext_GetOutputCount)(const OrtKernelContext* context, size_t* out)",
    90: "OrtStatus* (*KernelContext_GetInput)(const OrtKernelContext* context, size_t index, const OrtValue** out)",
    91: "OrtStatus* (*KernelContext_GetOutput)(OrtKernelContext* context, size_t index, const int64_t* dims, "
        "size_t count, OrtValue** out)",
    93: "void (*ReleaseStatus)(OrtStatus* status)",
    96: "void (*ReleaseValue)(OrtValue* value)",
    99: "void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo* info)",
    247: "OrtStatus* (*Logger_LogMessage)(const OrtLogger* logger, int level, const char* message, "
         "const char* file, int line, const char* function)",
    254: "const char* (*GetBuildInfoString)(void)",
    272: "OrtStatus* (*ReadOpAttr)(const OrtOpAttr* attr, int type, void* data, size_t length, size_t* out)",
    289: "OrtStatus* (*GetValueInfoName)(const OrtValueInfo* value_info, const char** name)",
    290: "OrtStatus* (*GetValueInfoTypeInfo)(const OrtValueInfo* value_info, const OrtTypeInfo** type_info)",
    298: "void (*GetKeyValuePairs)(const OrtKeyValuePairs* pairs, const char* const** keys, "
         "const char* const** values, size_t* count)",
    300: "void (*ReleaseKeyValuePairs)(OrtKeyValuePairs* pairs)",
    307: "int (*HardwareDevice_Type)(const OrtHardwareDevice* device)",
    317: "const OrtEpApi* (*GetEpApi)(void)",
    318: "OrtStatus* (*GetTensorSizeInBytes)(const OrtValue* value, size_t* size)",
    326: "OrtStatus* (*ValueInfo_GetInitializerValue)(const OrtValueInfo* value_info, const OrtValue** value)",
    331: "OrtStatus* (*ValueInfo_IsConstantInitializer)(const OrtValueInfo* value_info, bool* out)",
    333: "OrtStatus* (*Graph_GetName)(const OrtGraph* graph, const char** name)",
    336: "OrtStatus* (*Graph_GetNumOperatorSets)(const OrtGraph* graph, size_t* count)",
    337: "OrtStatus* (*Graph_GetOperatorSets)(const OrtGraph* graph, const char** domains, int64_t* versions, "
         "size_t count)",
    338: "OrtStatus* (*Graph_GetNumInputs)(const OrtGraph* graph, size_t* count)",
    339: "OrtStatus* (*Graph_GetInputs)(const OrtGraph* graph, const OrtValueInfo** inputs, size_t count)",
    340: "OrtStatus* (*Graph_GetNumOutputs)(const OrtGraph* graph, size_t* count)",
    341: "OrtStatus* (*Graph_GetOutputs)(const OrtGraph* graph, const OrtValueInfo** outputs, size_t count)",
    344: "OrtStatus* (*Graph_GetNumNodes)(const OrtGraph* graph, size_t* count)",
    345: "OrtStatus* (*Graph_GetNodes)(const OrtGraph* graph, const OrtNode** nodes, size_t count)",
    346: "OrtStatus* (*Graph_GetParentNode)(const OrtGraph* graph, const OrtNode** node)",
    348: "OrtStatus* (*Node_GetId)(const OrtNode* node, size_t* id)",
    349: "OrtStatus* (*Node_GetName)(const OrtNode* node, const char** name)",
    350: "OrtStatus* (*Node_GetOperatorType)(const OrtNode* node, const char** op_type)",
    351: "OrtStatus* (*Node_GetDomain)(const OrtNode* node, const char** domain)",
    353: "OrtStatus* (*Node_GetNumInputs)(const OrtNode* node, size_t* count)",
    354: "OrtStatus* (*Node_GetInputs)(const OrtNode* node, const OrtValueInfo** inputs, size_t count)",
    355: "OrtStatus* (*Node_GetNumOutputs)(const OrtNode* node, size_t* count)",
    356: "OrtStatus* (*Node_GetOutputs)(const OrtNode* node, const OrtValueInfo** outputs, size_t count)",
    359: "OrtStatus* (*Node_GetNumAttributes)(const OrtNode* node, size_t* count)",
    360: "OrtStatus* (*Node_GetAttributes)(const OrtNode* node, const OrtOpAttr** attributes, size_t count)",
    362: "OrtStatus* (*OpAttr_GetTensorAttributeAsOrtValue)(const OrtOpAttr* attr, OrtValue** value)",
    363: "OrtStatus* (*OpAttr_GetType)(const OrtOpAttr* attr, int* type)",
    364: "OrtStatus* (*OpAttr_GetName)(const OrtOpAttr* attr, const char** name)",
    365: "OrtStatus* (*Node_GetNumSubgraphs)(const OrtNode* node, size_t* count)",
    378: "OrtStatus* (*GetTensorData)(const OrtValue* value, const void** out)",
    379: "OrtStatus* (*GetSessionOptionsConfigEntries)(const OrtSessionOptions* options, OrtKeyValuePairs** out)",
}
# OrtEpApi: slot -> declaration.
ORT_EP_API = {
    0: "OrtStatus* (*CreateEpDevice)(OrtEpFactory* factory, const OrtHardwareDevice* device, "
       "const OrtKeyValuePairs* metadata, const OrtKeyValuePairs* options, OrtEpDevice** ep_device)",
    2: "OrtStatus* (*EpGraphSupportInfo_AddNodesToFuse)(OrtEpGraphSupportInfo* info, const OrtNode* const* nodes, "
       "size_t count, const OrtNodeFusionOptions* options)",
    4: "const char* (*NodeComputeContext_NodeName)(const OrtNodeComputeContext* context)",
}


def table_struct(name: str, slots: dict[int, str]) -> str:
    """``struct name`` with each declaration at its slot and ``void*`` padding between."""
    members, next_slot = [], 0
    for slot in sorted(slots):
        if slot > next_slot:
            members.append(f"    void* _slots_{next_slot}_{slot - 1}[{slot - next_slot}];")
        members.append(f"    {slots[slot]};")
        next_slot = slot + 1
    return f"struct {name} {{\n" + "\n".join(members) + "\n};\n"


_STRUCTS = """
struct OrtApiBase {
    const OrtApi* (*GetApi)(uint32_t version);
    const char* (*GetVersionString)(void);
};

struct OrtNodeFusionOptions {
    uint32_t ort_version_supported;
    bool drop_constant_initializers;
};

struct OrtNodeComputeInfo {
    uint32_t ort_version_supported;
    OrtStatus* (*CreateState)(OrtNodeComputeInfo* self, OrtNodeComputeContext* context, void** state);
    OrtStatus* (*Compute)(OrtNodeComputeInfo* self, void* state, OrtKernelContext* context);
    void (*ReleaseState)(OrtNodeComputeInfo* self, void* state);
};

struct OrtEp {
    uint32_t ort_version_supported;
    const char* (*GetName)(const OrtEp* self);
    OrtStatus* (*GetCapability)(OrtEp* self, const OrtGraph* graph, OrtEpGraphSupportInfo* info);
    OrtStatus* (*Compile)(OrtEp* self, const OrtGraph** graphs, const OrtNode** fused_nodes, size_t count,
                          OrtNodeComputeInfo** compute_infos, OrtNode** ep_context_nodes);
    void (*ReleaseNodeComputeInfos)(OrtEp* self, OrtNodeComputeInfo** compute_infos, size_t count);
    void* GetPreferredDataLayout;           /* optional: NULL */
    void* ShouldConvertDataLayoutForOp;     /* optional: NULL */
    void* SetDynamicOptions;                /* optional: NULL */
    void* OnRunStart;                       /* optional: NULL */
    void* OnRunEnd;                         /* optional: NULL */
    void* CreateAllocator;                  /* optional: NULL (the factory's) */
    void* CreateSyncStreamForDevice;        /* optional: NULL (the factory's) */
    const char* (*GetCompiledModelCompatibilityInfo)(OrtEp* self, const OrtGraph* graph);
};

struct OrtEpFactory {
    uint32_t ort_version_supported;
    const char* (*GetName)(const OrtEpFactory* self);
    const char* (*GetVendor)(const OrtEpFactory* self);
    OrtStatus* (*GetSupportedDevices)(OrtEpFactory* self, const OrtHardwareDevice* const* devices, size_t count,
                                      OrtEpDevice** ep_devices, size_t max_ep_devices, size_t* ep_device_count);
    OrtStatus* (*CreateEp)(OrtEpFactory* self, const OrtHardwareDevice* const* devices,
                           const OrtKeyValuePairs* const* metadata, size_t count, const OrtSessionOptions* options,
                           const OrtLogger* logger, OrtEp** ep);
    void (*ReleaseEp)(OrtEpFactory* self, OrtEp* ep);
    uint32_t (*GetVendorId)(const OrtEpFactory* self);
    const char* (*GetVersion)(const OrtEpFactory* self);
    OrtStatus* (*ValidateCompiledModelCompatibilityInfo)(OrtEpFactory* self, const OrtHardwareDevice* const* devices,
                                                         size_t count, const char* info, int* compatibility);
    OrtStatus* (*CreateAllocator)(OrtEpFactory* self, const OrtMemoryInfo* info, const OrtKeyValuePairs* options,
                                  OrtAllocator** allocator);
    void (*ReleaseAllocator)(OrtEpFactory* self, OrtAllocator* allocator);
    OrtStatus* (*CreateDataTransfer)(OrtEpFactory* self, OrtDataTransferImpl** transfer);
    bool (*IsStreamAware)(const OrtEpFactory* self);
    OrtStatus* (*CreateSyncStreamForDevice)(OrtEpFactory* self, const OrtMemoryDevice* device,
                                            const OrtKeyValuePairs* options, OrtSyncStreamImpl** stream);
};
"""

# Types (for ffi and for the C source, which includes <stdbool.h>, <stddef.h>, <stdint.h> first).
CDEF = ("".join(f"typedef struct Ort{n} Ort{n};\n" for n in _OPAQUE)
        + "".join(f"typedef struct {n} {n};\n" for n in ("OrtApi", "OrtEpApi", "OrtApiBase", "OrtNodeFusionOptions",
                                                         "OrtNodeComputeInfo", "OrtEp", "OrtEpFactory"))
        + table_struct("OrtApi", ORT_API) + table_struct("OrtEpApi", ORT_EP_API) + _STRUCTS)
