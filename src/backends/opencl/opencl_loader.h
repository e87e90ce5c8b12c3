/* The OpenCL library, loaded with dlopen: its entry points and the devices of
 * every platform. Nothing links libOpenCL; the headers give the types only
 * (CL_TARGET_OPENCL_VERSION 120).
 *
 * The library is CUBE_OPENCL_LIBRARY if set (a path or a soname), else
 * "libOpenCL.so.1" (the ICD loader). It is loaded once per process, on the
 * first call, and stays loaded (drivers often do not survive dlclose);
 * CUBE_OPENCL_LIBRARY is read then.
 *
 * Thread-safe: every function here may be called from any thread.
 */
#ifndef CUBE_BACKENDS_OPENCL_OPENCL_LOADER_H_
#define CUBE_BACKENDS_OPENCL_OPENCL_LOADER_H_

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stdint.h>

#include "cube/status.h"

/* One entry point per function the backend calls (the names without "cl"). */
#define CUBE__OCL_FUNCTIONS(X)  \
  X(GetPlatformIDs)             \
  X(GetPlatformInfo)            \
  X(GetDeviceIDs)               \
  X(GetDeviceInfo)              \
  X(CreateContext)              \
  X(ReleaseContext)             \
  X(CreateCommandQueue)         \
  X(ReleaseCommandQueue)        \
  X(CreateBuffer)               \
  X(ReleaseMemObject)           \
  X(EnqueueReadBuffer)          \
  X(EnqueueWriteBuffer)         \
  X(EnqueueReadBufferRect)      \
  X(EnqueueWriteBufferRect)     \
  X(EnqueueCopyBuffer)          \
  X(EnqueueMapBuffer)           \
  X(EnqueueUnmapMemObject)      \
  X(EnqueueMarkerWithWaitList)  \
  X(EnqueueBarrierWithWaitList) \
  X(CreateProgramWithSource)    \
  X(CreateProgramWithBinary)    \
  X(BuildProgram)               \
  X(GetProgramInfo)             \
  X(GetProgramBuildInfo)        \
  X(RetainProgram)              \
  X(ReleaseProgram)             \
  X(CreateKernel)               \
  X(ReleaseKernel)              \
  X(GetKernelWorkGroupInfo)     \
  X(SetKernelArg)               \
  X(EnqueueNDRangeKernel)       \
  X(Finish)                     \
  X(Flush)                      \
  X(WaitForEvents)              \
  X(GetEventInfo)               \
  X(GetEventProfilingInfo)      \
  X(ReleaseEvent)

typedef struct cube__ocl_api {
#define CUBE__OCL_MEMBER(name) __typeof__(&cl##name) name;
  CUBE__OCL_FUNCTIONS(CUBE__OCL_MEMBER)
#undef CUBE__OCL_MEMBER
} cube__ocl_api_t;

/* A device of some platform, in enumeration order (platforms in the order
 * clGetPlatformIDs gives, each platform's devices of every type). */
typedef struct cube__ocl_device_ref {
  cl_platform_id platform;
  cl_device_id device;
} cube__ocl_device_ref_t;

/* The entry points, or UNAVAILABLE with the reason: the library does not load
 * ("libOpenCL.so.1: cannot open shared object file ..."), lacks a function,
 * or no platform or device is there. Returns the same answer every time. */
cube_status_t cube__ocl_load(const cube__ocl_api_t** out_api);

/* Devices found (0 when unavailable) and device |index|'s ids. */
uint32_t cube__ocl_device_count(void);
cube__ocl_device_ref_t cube__ocl_device_ref(uint32_t index);

/* The library actually opened (for messages and backend info). */
const char* cube__ocl_library_name(void);

/* "CL_OUT_OF_RESOURCES (-5)"-style text of an error code (static storage for
 * known codes; unknown ones are written into |buf|). */
const char* cube__ocl_error_name(cl_int err, char buf[32]);

#endif /* CUBE_BACKENDS_OPENCL_OPENCL_LOADER_H_ */
