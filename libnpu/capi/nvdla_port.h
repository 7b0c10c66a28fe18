/* nvdla_port.h - NVDLA's portability layer (umd/core/include/nvdla_inf.h) for the emulated NPU.
 *
 * libnvdla_port.so implements it in plain C over the device node and npu_uapi.h: no
 * Python runs in it. Compile and link with `npu capi --nvdla --cflags` / `--libs`.
 *
 * The names and shapes are NVDLA's; the NvError values are libnpu.nvdla's (the Python port
 * layer), so both report the same numbers. Devices are $NPU_DEVROOT/npu<instance>
 * (default /dev/npu<instance>).
 *
 * Memory: NvDlaAllocMem returns a handle and a CPU mapping of device memory (the chip
 * sees the same pages: zero copy). Task descriptors (npu_tasks.h) hold device addresses:
 * NvDlaMemGetAddress (an extension; NVDLA's KMD relocates instead) gives a handle's.
 *
 * Submission: NvDlaSubmit runs each task to completion, in order, as NVDLA's does. A
 * task's address_list[0] is the memory holding its command buffer (descriptors laid end
 * to end from offset 0), the others are the memories its descriptors use: list every one
 * (npu_uapi.h's SUBMIT contract). An address the context has not mapped is an IOMMU fault:
 * the task fails with NvError_InvalidAddress and the device carries on.
 *
 * Threads: a session and its devices may be used from several threads; requests on one
 * device are serialized. NvDlaClose / NvDlaDestroy wait for the calls in progress on the
 * device; later calls with its handles are NvError_BadParameter. Closing a device frees
 * (unmaps) its memory: no thread may touch a mapping of it afterwards.
 *
 * Handles: a handle is only ever compared with the live ones, never read through, so a
 * NULL, forged, freed or another session's handle is NvError_BadParameter.
 *
 * NvDlaDebugPrintf writes to stderr; the library's own diagnostics
 * appear there only when NPU_DEBUG is set (not "0").
 */
#ifndef NVDLA_PORT_H
#define NVDLA_PORT_H

#include <stdint.h>

#include "npu_uapi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint8_t NvU8;
typedef uint16_t NvU16;
typedef uint32_t NvU32;
typedef uint64_t NvU64;
typedef int32_t NvS32;
typedef int64_t NvS64;

typedef enum {
    NvSuccess = 0,
    NvError_NotImplemented = 1,
    NvError_NotSupported = 2,        /* the driver speaks another ABI major version */
    NvError_NotInitialized = 3,      /* the driver is gone (ENODEV) */
    NvError_BadParameter = 4,        /* NULL, zero size, unknown handle, or the driver said EINVAL */
    NvError_Timeout = 5,             /* a job ran past its timeout */
    NvError_InsufficientMemory = 6,  /* device memory, a quota, or host memory */
    NvError_InvalidState = 8,
    NvError_InvalidAddress = 9,      /* a job touched an address its context has not mapped (IOMMU fault) */
    NvError_InvalidSize = 10,
    NvError_BadValue = 11,
    NvError_Busy = 14,
    NvError_FileOperationFailed = 15, /* no such device node */
    NvError_AccessDenied = 16,
    NvError_ResourceError = 17,      /* a job failed on the chip (EIO: bus error, reset) */
    NvError_IoctlFailed = 18         /* any other failure of a request */
} NvError;

typedef enum {
    NvDlaHeap_System = 0,
    NvDlaHeap_SRAM = 1               /* no SRAM on this chip: served from device memory */
} NvDlaHeap;

#define NVDLA_MAX_BUFFERS_PER_TASK NPU_MAX_SUBMIT_BOS

typedef void *NvDlaMemHandle;

typedef struct NvDlaTask {
    NvU64 task_id;
    NvU32 num_addresses;                                 /* entries used in address_list (>= 1) */
    NvU32 command_size;                                  /* descriptor bytes in address_list[0]; 0 = all of it */
    NvDlaMemHandle address_list[NVDLA_MAX_BUFFERS_PER_TASK];
} NvDlaTask;

NvError NvDlaInitialize(void **session);
void NvDlaDestroy(void *session);                        /* closes the devices still open */
NvError NvDlaOpen(void *session, NvU32 instance, void **device);
void NvDlaClose(void *session, void *device);            /* frees the memory still allocated */
NvError NvDlaSubmit(void *session, void *device, NvDlaTask *tasks, NvU32 num_tasks);
NvError NvDlaAllocMem(void *session, void *device, void **mem_handle, void **pData, NvU32 size, NvDlaHeap heap);
NvError NvDlaFreeMem(void *session, void *device, void *mem_handle, void *pData, NvU32 size);
void NvDlaDebugPrintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Extension: the device address (IOVA) of a memory, to write into task descriptors. */
NvError NvDlaMemGetAddress(void *mem_handle, NvU64 *address);

#ifdef __cplusplus
}
#endif

#endif /* NVDLA_PORT_H */
