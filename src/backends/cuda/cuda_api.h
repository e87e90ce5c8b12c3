/* The CUDA driver API and NVRTC, loaded with dlopen at run time.
 *
 * Only the toolkit's headers are used, for types and prototypes (cuda.h,
 * cudaTypedefs.h, nvrtc.h); nothing links libcuda or libnvrtc. The driver's
 * entry points come from cuGetProcAddress at CUDA_API_VERSION 12000, so each
 * one has the ABI it had in CUDA 12.0 whatever the installed driver.
 *
 * Environment:
 *   CUBE_CUDA_DRIVER  path or name of the driver library (default libcuda.so.1)
 *   CUBE_NVRTC        path or name of NVRTC (default libnvrtc.so.13, .12, .so)
 *
 * Thread-safe: loading happens once (pthread_once); the tables are read-only
 * afterwards.
 */
#ifndef CUBE_BACKENDS_CUDA_CUDA_API_H_
#define CUBE_BACKENDS_CUDA_CUDA_API_H_

#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>

#include <stdbool.h>

#include "cube/status.h"

/* X(field, symbol, pfn type) for every driver entry point cube uses. */
#define CUBE__CUDA_DRIVER_FUNCTIONS(X)                                   \
  X(Init, "cuInit", PFN_cuInit_v2000)                                    \
  X(DriverGetVersion, "cuDriverGetVersion", PFN_cuDriverGetVersion_v2020) \
  X(DeviceGetCount, "cuDeviceGetCount", PFN_cuDeviceGetCount_v2000)      \
  X(DeviceGet, "cuDeviceGet", PFN_cuDeviceGet_v2000)                     \
  X(DeviceGetName, "cuDeviceGetName", PFN_cuDeviceGetName_v2000)         \
  X(DeviceTotalMem, "cuDeviceTotalMem", PFN_cuDeviceTotalMem_v3020)      \
  X(DeviceGetAttribute, "cuDeviceGetAttribute", PFN_cuDeviceGetAttribute_v2000) \
  X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", PFN_cuDevicePrimaryCtxRetain_v7000) \
  X(DevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", PFN_cuDevicePrimaryCtxReset_v11000) \
  X(CtxSetCurrent, "cuCtxSetCurrent", PFN_cuCtxSetCurrent_v4000)         \
  X(CtxGetCurrent, "cuCtxGetCurrent", PFN_cuCtxGetCurrent_v4000)         \
  X(CtxPushCurrent, "cuCtxPushCurrent", PFN_cuCtxPushCurrent_v4000)      \
  X(CtxPopCurrent, "cuCtxPopCurrent", PFN_cuCtxPopCurrent_v4000)         \
  X(CtxSynchronize, "cuCtxSynchronize", PFN_cuCtxSynchronize_v2000)      \
  X(StreamCreate, "cuStreamCreate", PFN_cuStreamCreate_v2000)            \
  X(StreamDestroy, "cuStreamDestroy", PFN_cuStreamDestroy_v4000)         \
  X(StreamSynchronize, "cuStreamSynchronize", PFN_cuStreamSynchronize_v2000) \
  X(StreamWaitEvent, "cuStreamWaitEvent", PFN_cuStreamWaitEvent_v3020)   \
  X(EventCreate, "cuEventCreate", PFN_cuEventCreate_v2000)               \
  X(EventRecord, "cuEventRecord", PFN_cuEventRecord_v2000)               \
  X(EventQuery, "cuEventQuery", PFN_cuEventQuery_v2000)                  \
  X(EventSynchronize, "cuEventSynchronize", PFN_cuEventSynchronize_v2000) \
  X(EventDestroy, "cuEventDestroy", PFN_cuEventDestroy_v4000)            \
  X(EventElapsedTime, "cuEventElapsedTime", PFN_cuEventElapsedTime_v2000) \
  X(MemAlloc, "cuMemAlloc", PFN_cuMemAlloc_v3020)                        \
  X(MemFree, "cuMemFree", PFN_cuMemFree_v3020)                           \
  X(MemGetInfo, "cuMemGetInfo", PFN_cuMemGetInfo_v3020)                  \
  X(MemHostAlloc, "cuMemHostAlloc", PFN_cuMemHostAlloc_v2020)            \
  X(MemFreeHost, "cuMemFreeHost", PFN_cuMemFreeHost_v2000)               \
  X(PointerGetAttributes, "cuPointerGetAttributes", PFN_cuPointerGetAttributes_v7000) \
  X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync", PFN_cuMemcpyHtoDAsync_v3020)   \
  X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync", PFN_cuMemcpyDtoHAsync_v3020)   \
  X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync", PFN_cuMemcpyDtoDAsync_v3020)   \
  X(Memcpy2DAsync, "cuMemcpy2DAsync", PFN_cuMemcpy2DAsync_v3020)         \
  X(MemsetD32Async, "cuMemsetD32Async", PFN_cuMemsetD32Async_v3020)      \
  X(ModuleLoadData, "cuModuleLoadData", PFN_cuModuleLoadData_v2000)      \
  X(ModuleUnload, "cuModuleUnload", PFN_cuModuleUnload_v2000)            \
  X(ModuleGetFunction, "cuModuleGetFunction", PFN_cuModuleGetFunction_v2000) \
  X(FuncGetAttribute, "cuFuncGetAttribute", PFN_cuFuncGetAttribute_v2020) \
  X(LaunchKernel, "cuLaunchKernel", PFN_cuLaunchKernel_v4000)            \
  X(GetErrorName, "cuGetErrorName", PFN_cuGetErrorName_v6000)            \
  X(GetErrorString, "cuGetErrorString", PFN_cuGetErrorString_v6000)

/* Optional: stream-ordered allocation (CUDA 11.2+) and graphs (11.4+); NULL
 * when absent. */
#define CUBE__CUDA_DRIVER_OPTIONAL(X)                                    \
  X(MemAllocAsync, "cuMemAllocAsync", PFN_cuMemAllocAsync_v11020)        \
  X(MemFreeAsync, "cuMemFreeAsync", PFN_cuMemFreeAsync_v11020)           \
  X(DeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", PFN_cuDeviceGetDefaultMemPool_v11020) \
  X(MemPoolTrimTo, "cuMemPoolTrimTo", PFN_cuMemPoolTrimTo_v11020)        \
  X(MemPoolSetAttribute, "cuMemPoolSetAttribute", PFN_cuMemPoolSetAttribute_v11020) \
  X(GraphCreate, "cuGraphCreate", PFN_cuGraphCreate_v10000)              \
  X(GraphAddKernelNode, "cuGraphAddKernelNode", PFN_cuGraphAddKernelNode_v12000) \
  X(GraphAddMemcpyNode, "cuGraphAddMemcpyNode", PFN_cuGraphAddMemcpyNode_v10000) \
  X(GraphAddEmptyNode, "cuGraphAddEmptyNode", PFN_cuGraphAddEmptyNode_v10000) \
  X(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", PFN_cuGraphInstantiateWithFlags_v11040) \
  X(GraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams", PFN_cuGraphExecKernelNodeSetParams_v12000) \
  X(GraphExecMemcpyNodeSetParams, "cuGraphExecMemcpyNodeSetParams", PFN_cuGraphExecMemcpyNodeSetParams_v10020) \
  X(GraphLaunch, "cuGraphLaunch", PFN_cuGraphLaunch_v10000)              \
  X(GraphExecDestroy, "cuGraphExecDestroy", PFN_cuGraphExecDestroy_v10000) \
  X(GraphDestroy, "cuGraphDestroy", PFN_cuGraphDestroy_v10000)

typedef struct cube__cuda_driver {
#define CUBE__CUDA_FIELD(field, sym, type) type field;
  CUBE__CUDA_DRIVER_FUNCTIONS(CUBE__CUDA_FIELD)
  CUBE__CUDA_DRIVER_OPTIONAL(CUBE__CUDA_FIELD)
#undef CUBE__CUDA_FIELD
  int version; /* cuDriverGetVersion: 13000 = CUDA 13.0 */
} cube__cuda_driver_t;

typedef struct cube__nvrtc {
  nvrtcResult (*Version)(int* major, int* minor);
  nvrtcResult (*CreateProgram)(nvrtcProgram* prog, const char* src, const char* name,
                               int num_headers, const char* const* headers,
                               const char* const* include_names);
  nvrtcResult (*CompileProgram)(nvrtcProgram prog, int num_options, const char* const* options);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*GetProgramLog)(nvrtcProgram prog, char* log);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*GetCUBIN)(nvrtcProgram prog, char* cubin);
  nvrtcResult (*DestroyProgram)(nvrtcProgram* prog);
  const char* (*GetErrorString)(nvrtcResult result);
  int major, minor;
} cube__nvrtc_t;

/* The driver, after cuInit(0) succeeded; else UNAVAILABLE with the reason
 * (library absent, symbol missing, cuInit's error such as
 * CUDA_ERROR_NO_DEVICE or CUDA_ERROR_STUB_LIBRARY). The status is a new copy
 * for the caller. */
/* A driver entry point by name, at the ABI version the backend uses
 * (cuGetProcAddress at 12000); NULL when absent or the driver did not load.
 * Thread-safe. What CUBE__CTL_DRIVER_PROC hands out. */
void* cube__cuda_proc(const char* sym);

cube_status_t cube__cuda_driver(const cube__cuda_driver_t** out_driver);

/* NVRTC, or UNAVAILABLE with the reason. */
cube_status_t cube__cuda_nvrtc(const cube__nvrtc_t** out_nvrtc);

/* A status for a failed driver call: "<what>: CUDA_ERROR_X (text)". The code
 * is DEVICE_LOST for an error that poisons the context (cube__cuda_sticky,
 * whatever |code| says: the wrappers of src/backends/backend.c then mark the
 * device lost), else OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY, UNAVAILABLE
 * for NO_DEVICE/STUB/driver mismatch, INTERNAL for the rest, or |code| when
 * not 0. */
cube_status_t cube__cuda_error(CUresult r, cube_status_code_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True for the driver's errors after which its context is unusable: every
 * later call in it returns the same error (docs/failures.md, "Lost devices",
 * lists them and why). */
bool cube__cuda_sticky(CUresult r);

#endif /* CUBE_BACKENDS_CUDA_CUDA_API_H_ */
