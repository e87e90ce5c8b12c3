/* Loading libOpenCL with dlopen and enumerating its devices (see the header). */
#include "backends/opencl/opencl_loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "base/status.h"
#include "platform/platform.h"

#define CUBE__OCL_MAX_PLATFORMS 16u
#define CUBE__OCL_MAX_DEVICES 64u

static pthread_once_t cube__ocl_once = PTHREAD_ONCE_INIT;
static cube__ocl_api_t cube__ocl_api;
static bool cube__ocl_ok;
static char cube__ocl_reason[512];
static char cube__ocl_library[256] = "libOpenCL.so.1"; /* CUBE_OPENCL_LIBRARY: at most 255 */
static uint32_t cube__ocl_count;
static cube__ocl_device_ref_t cube__ocl_devices[CUBE__OCL_MAX_DEVICES];

const char* cube__ocl_error_name(cl_int err, char buf[32]) {
  switch (err) {
#define CUBE__OCL_CASE(c) \
  case c:                 \
    return #c;
    CUBE__OCL_CASE(CL_SUCCESS)
    CUBE__OCL_CASE(CL_DEVICE_NOT_FOUND)
    CUBE__OCL_CASE(CL_DEVICE_NOT_AVAILABLE)
    CUBE__OCL_CASE(CL_COMPILER_NOT_AVAILABLE)
    CUBE__OCL_CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    CUBE__OCL_CASE(CL_OUT_OF_RESOURCES)
    CUBE__OCL_CASE(CL_OUT_OF_HOST_MEMORY)
    CUBE__OCL_CASE(CL_PROFILING_INFO_NOT_AVAILABLE)
    CUBE__OCL_CASE(CL_MEM_COPY_OVERLAP)
    CUBE__OCL_CASE(CL_BUILD_PROGRAM_FAILURE)
    CUBE__OCL_CASE(CL_MAP_FAILURE)
    CUBE__OCL_CASE(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    CUBE__OCL_CASE(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    CUBE__OCL_CASE(CL_COMPILE_PROGRAM_FAILURE)
    CUBE__OCL_CASE(CL_LINK_PROGRAM_FAILURE)
    CUBE__OCL_CASE(CL_INVALID_VALUE)
    CUBE__OCL_CASE(CL_INVALID_DEVICE_TYPE)
    CUBE__OCL_CASE(CL_INVALID_PLATFORM)
    CUBE__OCL_CASE(CL_INVALID_DEVICE)
    CUBE__OCL_CASE(CL_INVALID_CONTEXT)
    CUBE__OCL_CASE(CL_INVALID_QUEUE_PROPERTIES)
    CUBE__OCL_CASE(CL_INVALID_COMMAND_QUEUE)
    CUBE__OCL_CASE(CL_INVALID_HOST_PTR)
    CUBE__OCL_CASE(CL_INVALID_MEM_OBJECT)
    CUBE__OCL_CASE(CL_INVALID_BINARY)
    CUBE__OCL_CASE(CL_INVALID_BUILD_OPTIONS)
    CUBE__OCL_CASE(CL_INVALID_PROGRAM)
    CUBE__OCL_CASE(CL_INVALID_PROGRAM_EXECUTABLE)
    CUBE__OCL_CASE(CL_INVALID_KERNEL_NAME)
    CUBE__OCL_CASE(CL_INVALID_KERNEL)
    CUBE__OCL_CASE(CL_INVALID_ARG_INDEX)
    CUBE__OCL_CASE(CL_INVALID_ARG_VALUE)
    CUBE__OCL_CASE(CL_INVALID_ARG_SIZE)
    CUBE__OCL_CASE(CL_INVALID_KERNEL_ARGS)
    CUBE__OCL_CASE(CL_INVALID_WORK_DIMENSION)
    CUBE__OCL_CASE(CL_INVALID_WORK_GROUP_SIZE)
    CUBE__OCL_CASE(CL_INVALID_WORK_ITEM_SIZE)
    CUBE__OCL_CASE(CL_INVALID_GLOBAL_OFFSET)
    CUBE__OCL_CASE(CL_INVALID_EVENT_WAIT_LIST)
    CUBE__OCL_CASE(CL_INVALID_EVENT)
    CUBE__OCL_CASE(CL_INVALID_OPERATION)
    CUBE__OCL_CASE(CL_INVALID_BUFFER_SIZE)
    CUBE__OCL_CASE(CL_INVALID_GLOBAL_WORK_SIZE)
#undef CUBE__OCL_CASE
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      snprintf(buf, 32, "OpenCL error %d", (int)err);
      return buf;
  }
}

static void cube__ocl_fail(const char* fmt, ...) CUBE_PRINTF(1, 2);
static void cube__ocl_fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cube__ocl_reason, sizeof(cube__ocl_reason), fmt, ap);
  va_end(ap);
  cube__ocl_ok = false;
}

static void cube__ocl_do_load(void) {
  const char* path = cube__option_str(CUBE__OPT_OPENCL_LIBRARY); /* at most 255 bytes */
  if (path && path[0]) snprintf(cube__ocl_library, sizeof(cube__ocl_library), "%s", path);
  /* Kept loaded for the process: ICD loaders and drivers start threads and
   * register exit handlers that a dlclose would pull out from under them. */
  void* lib = dlopen(cube__ocl_library, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    cube__ocl_fail("opencl: cannot load %s (%s); set CUBE_OPENCL_LIBRARY or install an OpenCL "
                   "ICD loader and driver (Debian: ocl-icd-libopencl1 pocl-opencl-icd)",
                   cube__ocl_library, e ? e : "unknown error");
    return;
  }
#define CUBE__OCL_SYM(name)                                                               \
  do {                                                                                    \
    void* p = dlsym(lib, "cl" #name);                                                     \
    if (!p) {                                                                             \
      cube__ocl_fail("opencl: %s has no function cl" #name " (OpenCL 1.2 is required)",   \
                     cube__ocl_library);                                                  \
      return;                                                                             \
    }                                                                                     \
    memcpy(&cube__ocl_api.name, &p, sizeof(p));                                           \
  } while (0);
  CUBE__OCL_FUNCTIONS(CUBE__OCL_SYM)
#undef CUBE__OCL_SYM

  cl_platform_id platforms[CUBE__OCL_MAX_PLATFORMS];
  cl_uint np = 0;
  char eb[32];
  cl_int err = cube__ocl_api.GetPlatformIDs(CUBE__OCL_MAX_PLATFORMS, platforms, &np);
  if (err != CL_SUCCESS || np == 0) {
    cube__ocl_fail("opencl: no OpenCL platform (%s loaded, clGetPlatformIDs: %s, %u platforms); "
                   "is an ICD installed in /etc/OpenCL/vendors (or OCL_ICD_VENDORS)?",
                   cube__ocl_library, cube__ocl_error_name(err, eb), (unsigned)np);
    return;
  }
  if (np > CUBE__OCL_MAX_PLATFORMS) np = CUBE__OCL_MAX_PLATFORMS;
  uint32_t count = 0;
  for (cl_uint p = 0; p < np && count < CUBE__OCL_MAX_DEVICES; ++p) {
    cl_device_id ids[CUBE__OCL_MAX_DEVICES];
    cl_uint nd = 0;
    err = cube__ocl_api.GetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, CUBE__OCL_MAX_DEVICES, ids,
                                     &nd);
    if (err != CL_SUCCESS) continue; /* CL_DEVICE_NOT_FOUND: a platform without devices */
    if (nd > CUBE__OCL_MAX_DEVICES) nd = CUBE__OCL_MAX_DEVICES;
    for (cl_uint d = 0; d < nd && count < CUBE__OCL_MAX_DEVICES; ++d) {
      cl_bool available = CL_FALSE;
      if (cube__ocl_api.GetDeviceInfo(ids[d], CL_DEVICE_AVAILABLE, sizeof(available), &available,
                                      NULL) != CL_SUCCESS ||
          !available)
        continue;
      cube__ocl_devices[count].platform = platforms[p];
      cube__ocl_devices[count].device = ids[d];
      ++count;
    }
  }
  if (count == 0) {
    cube__ocl_fail("opencl: %u platform%s but no available device (%s)", (unsigned)np,
                   np == 1 ? "" : "s", cube__ocl_library);
    return;
  }
  cube__ocl_count = count;
  cube__ocl_ok = true;
}

cube_status_t cube__ocl_load(const cube__ocl_api_t** out_api) {
  pthread_once(&cube__ocl_once, cube__ocl_do_load);
  if (!cube__ocl_ok) return cube__status_make(CUBE_STATUS_UNAVAILABLE, "%s", cube__ocl_reason);
  if (out_api) *out_api = &cube__ocl_api;
  return CUBE_OK;
}

uint32_t cube__ocl_device_count(void) {
  pthread_once(&cube__ocl_once, cube__ocl_do_load);
  return cube__ocl_ok ? cube__ocl_count : 0;
}

cube__ocl_device_ref_t cube__ocl_device_ref(uint32_t index) {
  cube__ocl_device_ref_t none = {NULL, NULL};
  pthread_once(&cube__ocl_once, cube__ocl_do_load);
  return cube__ocl_ok && index < cube__ocl_count ? cube__ocl_devices[index] : none;
}

const char* cube__ocl_library_name(void) {
  pthread_once(&cube__ocl_once, cube__ocl_do_load);
  return cube__ocl_library;
}
