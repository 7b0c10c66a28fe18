"""An ONNX Runtime plugin execution provider that runs what the chip can of a model on the NPU.

``library_path()`` builds (once, cached by content and Python version) and returns
``libnpu_ort_ep.so``, which exports ``CreateEpFactories`` / ``ReleaseEpFactory``: register it
with ``onnxruntime.register_execution_provider_library("npu", path)``, pick its device from
``onnxruntime.get_ep_devices()`` and add it with ``SessionOptions.add_provider_for_devices``.
The library's C functions run the Python of :mod:`libnpu.ort_ep.provider` (cffi embedding,
:mod:`libnpu.capi.embedding`). See docs/ort_ep.md.
"""
from __future__ import annotations

from pathlib import Path

from .ort_c import CDEF

__all__ = ["library_path", "LIBRARY_NAME", "EP_NAME"]

LIBRARY_NAME = "libnpu_ort_ep"
EP_NAME = "NpuEmuExecutionProvider"

# Implemented in Python (provider.py); the C entry points and ORT's callbacks reach them.
_API = """
OrtStatus* npu_ort_create_factories_py(const char* registered_name, const OrtApiBase* api_base,
                                       const OrtLogger* logger, OrtEpFactory** factories, size_t max_factories,
                                       size_t* factory_count);
OrtStatus* npu_ort_release_factory_py(OrtEpFactory* factory);
const char* npu_ort_factory_name(const OrtEpFactory* self);
const char* npu_ort_factory_vendor(const OrtEpFactory* self);
const char* npu_ort_factory_version(const OrtEpFactory* self);
OrtStatus* npu_ort_supported_devices(OrtEpFactory* self, const OrtHardwareDevice* const* devices, size_t count,
                                     OrtEpDevice** ep_devices, size_t max_ep_devices, size_t* ep_device_count);
OrtStatus* npu_ort_create_ep(OrtEpFactory* self, const OrtHardwareDevice* const* devices,
                             const OrtKeyValuePairs* const* metadata, size_t count, const OrtSessionOptions* options,
                             const OrtLogger* logger, OrtEp** ep);
void npu_ort_release_ep(OrtEpFactory* self, OrtEp* ep);
const char* npu_ort_ep_name(const OrtEp* self);
OrtStatus* npu_ort_get_capability(OrtEp* self, const OrtGraph* graph, OrtEpGraphSupportInfo* info);
OrtStatus* npu_ort_compile(OrtEp* self, const OrtGraph** graphs, const OrtNode** fused_nodes, size_t count,
                           OrtNodeComputeInfo** compute_infos, OrtNode** ep_context_nodes);
void npu_ort_release_compute_infos(OrtEp* self, OrtNodeComputeInfo** compute_infos, size_t count);
OrtStatus* npu_ort_create_state(OrtNodeComputeInfo* self, OrtNodeComputeContext* context, void** state);
OrtStatus* npu_ort_compute(OrtNodeComputeInfo* self, void* state, OrtKernelContext* context);
void npu_ort_release_state(OrtNodeComputeInfo* self, void* state);
"""

# C helpers for the entries with nothing to decide (the EP works in host memory, no streams).
_HELPERS = """
uint32_t npu_ort_vendor_id(const OrtEpFactory* self);
OrtStatus* npu_ort_validate_compiled(OrtEpFactory* self, const OrtHardwareDevice* const* devices, size_t count,
                                     const char* info, int* compatibility);
OrtStatus* npu_ort_create_allocator(OrtEpFactory* self, const OrtMemoryInfo* info, const OrtKeyValuePairs* options,
                                    OrtAllocator** allocator);
void npu_ort_release_allocator(OrtEpFactory* self, OrtAllocator* allocator);
OrtStatus* npu_ort_create_data_transfer(OrtEpFactory* self, OrtDataTransferImpl** transfer);
bool npu_ort_is_stream_aware(const OrtEpFactory* self);
OrtStatus* npu_ort_create_sync_stream(OrtEpFactory* self, const OrtMemoryDevice* device,
                                      const OrtKeyValuePairs* options, OrtSyncStreamImpl** stream);
const char* npu_ort_compatibility_info(OrtEp* self, const OrtGraph* graph);
"""

_C_SOURCE = "#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n" + CDEF + _API + _HELPERS + """
uint32_t npu_ort_vendor_id(const OrtEpFactory* self) { return 0; }

OrtStatus* npu_ort_validate_compiled(OrtEpFactory* self, const OrtHardwareDevice* const* devices, size_t count,
                                     const char* info, int* compatibility)
{
    *compatibility = 0;         /* not applicable: this EP makes no pre-compiled (EPContext) models */
    return NULL;
}

OrtStatus* npu_ort_create_allocator(OrtEpFactory* self, const OrtMemoryInfo* info, const OrtKeyValuePairs* options,
                                    OrtAllocator** allocator)
{
    *allocator = NULL;          /* ORT's CPU allocator: inputs and outputs stay in host memory */
    return NULL;
}

void npu_ort_release_allocator(OrtEpFactory* self, OrtAllocator* allocator) {}

OrtStatus* npu_ort_create_data_transfer(OrtEpFactory* self, OrtDataTransferImpl** transfer)
{
    *transfer = NULL;
    return NULL;
}

bool npu_ort_is_stream_aware(const OrtEpFactory* self) { return false; }

OrtStatus* npu_ort_create_sync_stream(OrtEpFactory* self, const OrtMemoryDevice* device,
                                      const OrtKeyValuePairs* options, OrtSyncStreamImpl** stream)
{
    *stream = NULL;
    return NULL;
}

const char* npu_ort_compatibility_info(OrtEp* self, const OrtGraph* graph) { return "npu-emu"; }

/* The two symbols ORT's register_execution_provider_library looks up. */
OrtStatus* CreateEpFactories(const char* registered_name, const OrtApiBase* api_base, const OrtLogger* logger,
                             OrtEpFactory** factories, size_t max_factories, size_t* factory_count)
{
    embedded_python_start();
    return npu_ort_create_factories_py(registered_name, api_base, logger, factories, max_factories, factory_count);
}

OrtStatus* ReleaseEpFactory(OrtEpFactory* factory)
{
    embedded_python_start();
    return npu_ort_release_factory_py(factory);
}
"""

_INIT = """
from libnpu.ort_ep.provider import install
install(ffi, lib)
"""


def library_path() -> Path:
    """The EP's shared library, built if the cache lacks it (EmbeddingBuildError if it cannot be)."""
    from libnpu.capi.embedding import build_embedded  # cffi's builder: only when the library is asked for
    return build_embedded(LIBRARY_NAME, api=_API, cdef=CDEF + _HELPERS, c_source=_C_SOURCE, init_code=_INIT)
