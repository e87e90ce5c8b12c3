#include "backends/cuda/cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/options.h"
#include "base/status.h"
#include "platform/platform.h"

/* The ABI version asked of cuGetProcAddress (see the header). */
#define CUBE__CUDA_API_VERSION 12000

static pthread_once_t cube__cuda_once = PTHREAD_ONCE_INIT;
static cube__cuda_driver_t cube__cuda_table;
static char cube__cuda_reason[512]; /* empty when the driver is usable */

/* cuGetProcAddress, kept for cube__cuda_proc (the backend's ctl hands it out). */
static PFN_cuGetProcAddress_v12000 cube__cuda_get;
static PFN_cuGetProcAddress_v11030 cube__cuda_get_old;

static pthread_once_t cube__nvrtc_once = PTHREAD_ONCE_INIT;
static cube__nvrtc_t cube__nvrtc_table;
static char cube__nvrtc_reason[512];

static void cube__cuda_load(void) {
  const char* path = cube__option_str(CUBE__OPT_CUDA_DRIVER); /* default libcuda.so.1 */
  if (!path || !path[0]) path = "libcuda.so.1";
  /* RTLD_NODELETE: the driver keeps threads and handlers; it must never be
   * unmapped under them. */
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    const char* e = dlerror();
    snprintf(cube__cuda_reason, sizeof(cube__cuda_reason),
             "the CUDA driver could not be loaded (%s: %s)", path, e ? e : "?");
    return;
  }
  PFN_cuGetProcAddress_v12000 get = (PFN_cuGetProcAddress_v12000)(uintptr_t)dlsym(lib, "cuGetProcAddress_v2");
  PFN_cuGetProcAddress_v11030 get_old = NULL;
  if (!get) get_old = (PFN_cuGetProcAddress_v11030)(uintptr_t)dlsym(lib, "cuGetProcAddress");
  if (!get && !get_old) {
    snprintf(cube__cuda_reason, sizeof(cube__cuda_reason),
             "%s has no cuGetProcAddress: the driver is older than CUDA 11.3", path);
    return;
  }
  cube__cuda_driver_t t;
  memset(&t, 0, sizeof(t));
#define CUBE__CUDA_GET(field, sym, type, required)                                            \
  do {                                                                                        \
    void* p = NULL;                                                                           \
    CUresult r;                                                                               \
    if (get) {                                                                                \
      CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;                         \
      r = get(sym, &p, CUBE__CUDA_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);              \
      if (q != CU_GET_PROC_ADDRESS_SUCCESS) p = NULL;                                         \
    } else {                                                                                  \
      r = get_old(sym, &p, CUBE__CUDA_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);              \
    }                                                                                         \
    if (r != CUDA_SUCCESS) p = NULL;                                                          \
    if (!p && (required)) {                                                                   \
      if (r == CUDA_ERROR_STUB_LIBRARY)                                                       \
        snprintf(cube__cuda_reason, sizeof(cube__cuda_reason),                                \
                 "%s is the toolkit's stub library, not a driver (CUDA_ERROR_STUB_LIBRARY)",  \
                 path);                                                                       \
      else                                                                                    \
        snprintf(cube__cuda_reason, sizeof(cube__cuda_reason),                                \
                 "%s: the driver has no %s (error %d)", path, sym, (int)r);                   \
      return;                                                                                 \
    }                                                                                         \
    t.field = (type)(uintptr_t)p;                                                             \
  } while (0);
#define CUBE__CUDA_REQ(field, sym, type) CUBE__CUDA_GET(field, sym, type, 1)
#define CUBE__CUDA_OPT(field, sym, type) CUBE__CUDA_GET(field, sym, type, 0)
  CUBE__CUDA_DRIVER_FUNCTIONS(CUBE__CUDA_REQ)
  CUBE__CUDA_DRIVER_OPTIONAL(CUBE__CUDA_OPT)
#undef CUBE__CUDA_REQ
#undef CUBE__CUDA_OPT
#undef CUBE__CUDA_GET
  CUresult r = t.Init(0);
  if (r != CUDA_SUCCESS) {
    const char* name = NULL;
    const char* text = NULL;
    if (t.GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (t.GetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
    snprintf(cube__cuda_reason, sizeof(cube__cuda_reason), "cuInit failed: %s (%s) [%s]",
             name ? name : "CUDA error", text ? text : "no description", path);
    return;
  }
  if (t.DriverGetVersion(&t.version) != CUDA_SUCCESS) t.version = 0;
  cube__cuda_get = get;
  cube__cuda_get_old = get_old;
  cube__cuda_table = t;
  cube__cuda_reason[0] = '\0';
}

void* cube__cuda_proc(const char* sym) {
  pthread_once(&cube__cuda_once, cube__cuda_load);
  if (cube__cuda_reason[0] || !sym) return NULL;
  void* p = NULL;
  CUresult r;
  if (cube__cuda_get) {
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
    r = cube__cuda_get(sym, &p, CUBE__CUDA_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);
    if (q != CU_GET_PROC_ADDRESS_SUCCESS) p = NULL;
  } else {
    r = cube__cuda_get_old(sym, &p, CUBE__CUDA_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
  }
  return r == CUDA_SUCCESS ? p : NULL;
}

cube_status_t cube__cuda_driver(const cube__cuda_driver_t** out) {
  pthread_once(&cube__cuda_once, cube__cuda_load);
  if (cube__cuda_reason[0])
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "cuda backend unavailable: %s",
                             cube__cuda_reason);
  *out = &cube__cuda_table;
  return CUBE_OK;
}

static void cube__nvrtc_load(void) {
  static const char* const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                      "/usr/local/cuda/lib64/libnvrtc.so", NULL};
  const char* env = cube__option_str(CUBE__OPT_NVRTC);
  void* lib = NULL;
  const char* tried = "";
  if (env && env[0]) {
    tried = env;
    lib = dlopen(env, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  } else {
    for (int i = 0; names[i] && !lib; ++i) {
      tried = names[i];
      lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    }
  }
  if (!lib) {
    const char* e = dlerror();
    snprintf(cube__nvrtc_reason, sizeof(cube__nvrtc_reason), "NVRTC could not be loaded (%s: %s)",
             tried, e ? e : "?");
    return;
  }
  cube__nvrtc_t t;
  memset(&t, 0, sizeof(t));
#define CUBE__NVRTC_GET(field, sym)                                                      \
  do {                                                                                   \
    void* p = dlsym(lib, sym);                                                           \
    if (!p) {                                                                            \
      snprintf(cube__nvrtc_reason, sizeof(cube__nvrtc_reason), "NVRTC (%s) has no %s", tried, \
               sym);                                                                     \
      return;                                                                            \
    }                                                                                    \
    memcpy(&t.field, &p, sizeof(p));                                                     \
  } while (0)
  CUBE__NVRTC_GET(Version, "nvrtcVersion");
  CUBE__NVRTC_GET(CreateProgram, "nvrtcCreateProgram");
  CUBE__NVRTC_GET(CompileProgram, "nvrtcCompileProgram");
  CUBE__NVRTC_GET(GetProgramLogSize, "nvrtcGetProgramLogSize");
  CUBE__NVRTC_GET(GetProgramLog, "nvrtcGetProgramLog");
  CUBE__NVRTC_GET(GetCUBINSize, "nvrtcGetCUBINSize");
  CUBE__NVRTC_GET(GetCUBIN, "nvrtcGetCUBIN");
  CUBE__NVRTC_GET(DestroyProgram, "nvrtcDestroyProgram");
  CUBE__NVRTC_GET(GetErrorString, "nvrtcGetErrorString");
#undef CUBE__NVRTC_GET
  if (t.Version(&t.major, &t.minor) != NVRTC_SUCCESS) {
    snprintf(cube__nvrtc_reason, sizeof(cube__nvrtc_reason), "nvrtcVersion failed (%s)", tried);
    return;
  }
  cube__nvrtc_table = t;
  cube__nvrtc_reason[0] = '\0';
}

cube_status_t cube__cuda_nvrtc(const cube__nvrtc_t** out) {
  pthread_once(&cube__nvrtc_once, cube__nvrtc_load);
  if (cube__nvrtc_reason[0])
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "cuda: %s", cube__nvrtc_reason);
  *out = &cube__nvrtc_table;
  return CUBE_OK;
}

cube_status_t cube__cuda_error(CUresult r, cube_status_code_t code, const char* fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  const char* name = NULL;
  const char* text = NULL;
  if (cube__cuda_reason[0] == '\0' && cube__cuda_table.GetErrorName) {
    if (cube__cuda_table.GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (cube__cuda_table.GetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  }
  bool sticky = cube__cuda_sticky(r);
  if (sticky) code = CUBE_STATUS_DEVICE_LOST; /* whatever the caller would have said */
  if (code == CUBE_STATUS_OK) {
    switch (r) {
      case CUDA_ERROR_OUT_OF_MEMORY:
        code = CUBE_STATUS_OUT_OF_MEMORY;
        break;
      case CUDA_ERROR_NO_DEVICE:
      case CUDA_ERROR_STUB_LIBRARY:
      case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      case CUDA_ERROR_NOT_INITIALIZED:
        code = CUBE_STATUS_UNAVAILABLE;
        break;
      default:
        code = CUBE_STATUS_INTERNAL;
    }
  }
  return cube__status_make(code, "%s: %s (%s, error %d)%s", what, name ? name : "CUDA error",
                           text ? text : "no description", (int)r,
                           sticky ? "; the device's context is unusable from now on" : "");
}

bool cube__cuda_sticky(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:     /* 214 */
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:  /* 220 */
    case CUDA_ERROR_CONTAINED:             /* 226 */
    case CUDA_ERROR_ILLEGAL_ADDRESS:       /* 700 */
    case CUDA_ERROR_LAUNCH_TIMEOUT:        /* 702 */
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:  /* 709 */
    case CUDA_ERROR_ASSERT:                /* 710 */
    case CUDA_ERROR_HARDWARE_STACK_ERROR:  /* 714 */
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:   /* 715 */
    case CUDA_ERROR_MISALIGNED_ADDRESS:    /* 716 */
    case CUDA_ERROR_INVALID_ADDRESS_SPACE: /* 717 */
    case CUDA_ERROR_INVALID_PC:            /* 718 */
    case CUDA_ERROR_LAUNCH_FAILED:         /* 719 */
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:    /* 721 */
    case CUDA_ERROR_EXTERNAL_DEVICE:       /* 911 */
      return true;
    default:
      return false;
  }
}
