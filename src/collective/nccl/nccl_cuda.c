/* The nccl transport's CUDA side: the driver's entry points, native handles
 * and streams through the CUDA backend's ctl, context scopes, each GPU's comm
 * stream. */
#ifdef CUBE_HAVE_NCCL_TRANSPORT

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/options.h"
#include "base/status.h"
#include "collective/nccl/nccl_internal.h"

//===----------------------------------------------------------------------===//
// The CUDA driver, through the backend's ctl
//===----------------------------------------------------------------------===//


static pthread_mutex_t g_cu_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__nccl_cu_t g_cu;
static atomic_bool g_cu_ready;

/* The table, loaded from |be|'s ctl on first use. */
cube_status_t cube__nccl_cu_from(const cube__backend_t* be, const cube__nccl_cu_t** out) {
  if (atomic_load_explicit(&g_cu_ready, memory_order_acquire)) {
    *out = &g_cu;
    return CUBE_OK;
  }
  cube__backend_proc_fn proc = NULL;
  CUBE_RETURN_IF_ERROR(cube__backend_ctl(be, NULL, CUBE__CTL_DRIVER_PROC, &proc));
  cube__nccl_cu_t t;
  memset(&t, 0, sizeof(t));
#define CUBE__NCCL_CU_GET(field, sym, type)                                                  \
  {                                                                                          \
    void* p = proc(sym);                                                                     \
    if (!p)                                                                                  \
      return cube__status_make(CUBE_STATUS_UNAVAILABLE,                                      \
                               "nccl: the CUDA driver has no %s for the nccl transport", sym); \
    t.field = (type)(uintptr_t)p;                                                            \
  }
  CUBE__NCCL_CU_FUNCTIONS(CUBE__NCCL_CU_GET)
#undef CUBE__NCCL_CU_GET
  pthread_mutex_lock(&g_cu_lock);
  if (!atomic_load_explicit(&g_cu_ready, memory_order_relaxed)) {
    g_cu = t;
    atomic_store_explicit(&g_cu_ready, true, memory_order_release);
  }
  pthread_mutex_unlock(&g_cu_lock);
  *out = &g_cu;
  return CUBE_OK;
}

/* The table where no device is at hand (teardown, releases): it was loaded
 * by the operation that made what is being released, else there is nothing
 * of CUDA's to release. */
cube_status_t cube__nccl_cu_get(const cube__nccl_cu_t** out) {
  if (!atomic_load_explicit(&g_cu_ready, memory_order_acquire))
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "nccl: no CUDA device used NCCL yet");
  *out = &g_cu;
  return CUBE_OK;
}

/* A CUresult as a status (|code| OK: chosen from the result). */
cube_status_t cube__nccl_cu_error(CUresult r, cube_status_code_t code, const char* fmt,
                                         ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  const char* name = NULL;
  const char* text = NULL;
  if (atomic_load_explicit(&g_cu_ready, memory_order_acquire)) {
    if (g_cu.GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (g_cu.GetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  }
  if (code == CUBE_STATUS_OK)
    code = r == CUDA_ERROR_OUT_OF_MEMORY ? CUBE_STATUS_OUT_OF_MEMORY : CUBE_STATUS_INTERNAL;
  return cube__status_make(code, "%s: %s (%s, error %d)", what, name ? name : "CUDA error",
                           text ? text : "no description", (int)r);
}

/* The device's context and ordinal, a stream's CUstream (the backend's ctl;
 * a CUDA device answers these, and only CUDA devices reach this transport). */
CUcontext cube__nccl_ctx(const cube__server_t* s) {
  void* ctx = NULL;
  cube_status_free(cube__backend_ctl(&s->be, NULL, CUBE__CTL_NATIVE_CONTEXT, &ctx));
  return (CUcontext)ctx;
}

uint32_t cube__nccl_ordinal(const cube__server_t* s) {
  uint32_t o = UINT32_MAX;
  cube_status_free(cube__backend_ctl(&s->be, NULL, CUBE__CTL_NATIVE_ORDINAL, &o));
  return o;
}

CUstream cube__nccl_native_stream(const cube__stream_t* st) {
  void* cs = NULL;
  cube_status_free(cube__backend_ctl(&st->server->be, st->backend_stream,
                                     CUBE__CTL_NATIVE_STREAM, &cs));
  return (CUstream)cs;
}

//===----------------------------------------------------------------------===//
// Devices: the comm stream of each GPU
//===----------------------------------------------------------------------===//


pthread_mutex_t cube__nccl_dev_lock = PTHREAD_MUTEX_INITIALIZER;
cube__nccl_dev_t cube__nccl_devs[CUBE__NCCL_MAX_DEVICES];

/* The process-wide issue lock (see the top of the file). */
pthread_mutex_t cube__nccl_issue_lock = PTHREAD_MUTEX_INITIALIZER;


cube__nccl_scope_t cube__nccl_enter(const cube__nccl_cu_t* cu, CUcontext ctx) {
  cube__nccl_scope_t s = {cu, false};
  CUcontext cur = NULL;
  if (cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx) return s;
  s.pushed = cu->CtxPushCurrent(ctx) == CUDA_SUCCESS;
  return s;
}

/* Around NCCL's group calls: NCCL sets devices with the runtime
 * (cudaSetDevice replaces the thread's current context); a context pushed
 * first and popped after takes the change with it, so the caller's thread
 * (in inline mode, the user's) finds its context as it was. */
cube__nccl_scope_t cube__nccl_guard(const cube__nccl_cu_t* cu, CUcontext ctx) {
  cube__nccl_scope_t s = {cu, cu->CtxPushCurrent(ctx) == CUDA_SUCCESS};
  return s;
}

void cube__nccl_leave(cube__nccl_scope_t* s) {
  if (!s->pushed) return;
  CUcontext popped = NULL;
  s->cu->CtxPopCurrent(&popped);
  s->pushed = false;
}

/* The comm stream of |s|'s device, created on first use. */
cube_status_t cube__nccl_comm_stream(const cube__nccl_cu_t* cu, cube__server_t* s,
                                            CUstream* out, CUcontext* out_ctx) {
  uint32_t o = cube__nccl_ordinal(s);
  CUcontext ctx = cube__nccl_ctx(s);
  if (o >= CUBE__NCCL_MAX_DEVICES)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE, "nccl: cuda:%u: more than %u GPUs",
                             o, CUBE__NCCL_MAX_DEVICES);
  pthread_mutex_lock(&cube__nccl_dev_lock);
  cube_status_t st = CUBE_OK;
  cube__nccl_dev_t* d = &cube__nccl_devs[o];
  if (!d->stream) {
    cube__nccl_scope_t sc = cube__nccl_enter(cu, ctx);
    CUresult r = cu->StreamCreate(&d->stream, CU_STREAM_NON_BLOCKING);
    cube__nccl_leave(&sc);
    if (r != CUDA_SUCCESS) {
      d->stream = NULL;
      st = cube__nccl_cu_error(r, CUBE_STATUS_OK, "nccl: cuda:%u: creating its comm stream",
                               o);
    } else {
      d->ctx = ctx;
    }
  }
  if (!st) {
    *out = d->stream;
    *out_ctx = ctx;
  }
  pthread_mutex_unlock(&cube__nccl_dev_lock);
  return st;
}

#endif /* CUBE_HAVE_NCCL_TRANSPORT */
