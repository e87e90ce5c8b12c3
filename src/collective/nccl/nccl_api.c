/* NCCL through dlopen (see nccl_api.h). Built with the CUDA backend only. */
#ifdef CUBE_HAVE_NCCL_TRANSPORT
#include "collective/nccl/nccl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "base/status.h"
#include "platform/platform.h"

#ifdef CUBE_HAVE_NCCL_H
/* The types written in nccl_api.h are those of the installed header. */
#define CUBE__NCCL_SAME(fn, type)                                               \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), type),          \
                 #fn ": the type in nccl_api.h differs from nccl.h's")
CUBE__NCCL_SAME(ncclGetVersion, cube__nccl_get_version_fn);
CUBE__NCCL_SAME(ncclGetUniqueId, cube__nccl_get_unique_id_fn);
CUBE__NCCL_SAME(ncclCommInitRankConfig, cube__nccl_comm_init_rank_config_fn);
CUBE__NCCL_SAME(ncclGroupStart, cube__nccl_group_fn);
CUBE__NCCL_SAME(ncclGroupEnd, cube__nccl_group_fn);
CUBE__NCCL_SAME(ncclAllReduce, cube__nccl_all_reduce_fn);
CUBE__NCCL_SAME(ncclSend, cube__nccl_send_fn);
CUBE__NCCL_SAME(ncclRecv, cube__nccl_recv_fn);
CUBE__NCCL_SAME(ncclCommFinalize, cube__nccl_comm_fn);
CUBE__NCCL_SAME(ncclCommDestroy, cube__nccl_comm_fn);
CUBE__NCCL_SAME(ncclCommAbort, cube__nccl_comm_fn);
CUBE__NCCL_SAME(ncclCommGetAsyncError, cube__nccl_comm_async_error_fn);
CUBE__NCCL_SAME(ncclGetErrorString, cube__nccl_error_string_fn);
CUBE__NCCL_SAME(ncclGetLastError, cube__nccl_last_error_fn);
#undef CUBE__NCCL_SAME
/* The 2.14 prefix of ncclConfig_t. */
_Static_assert(offsetof(ncclConfig_t, size) == offsetof(cube__nccl_config_t, size), "config");
_Static_assert(offsetof(ncclConfig_t, magic) == offsetof(cube__nccl_config_t, magic), "config");
_Static_assert(offsetof(ncclConfig_t, version) == offsetof(cube__nccl_config_t, version), "config");
_Static_assert(offsetof(ncclConfig_t, blocking) == offsetof(cube__nccl_config_t, blocking),
               "config");
_Static_assert(sizeof(ncclUniqueId) == 128, "unique id");
_Static_assert(ncclFloat32 == 7 && ncclBfloat16 == 9 && ncclAvg == 4 && ncclInProgress == 7,
               "NCCL's ABI values");
#endif

static pthread_once_t cube__nccl_once = PTHREAD_ONCE_INIT;
static cube__nccl_t cube__nccl_table;
static char cube__nccl_reason[512]; /* empty when NCCL is usable */
static char cube__nccl_line[320];

const char* cube__nccl_version_name(int v, char* buf, size_t size) {
  /* 2.8 and before: X*1000 + Y*100 + Z; since 2.9: X*10000 + Y*100 + Z. */
  int major = v >= 10000 ? v / 10000 : v / 1000;
  int minor = v >= 10000 ? (v % 10000) / 100 : (v % 1000) / 100;
  int patch = v % 100;
  snprintf(buf, size, "%d.%d.%d", major, minor, patch);
  return buf;
}

static void cube__nccl_load(void) {
  /* Before NCCL reads its environment: multicast stays off unless the user
   * asked otherwise. Once, before any NCCL call, in pthread_once. */
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  const char* path = cube__option_str(CUBE__OPT_NCCL_LIBRARY); /* default libnccl.so.2 */
  if (!path || !path[0]) path = "libnccl.so.2";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    const char* e = dlerror();
    snprintf(cube__nccl_reason, sizeof(cube__nccl_reason), "NCCL could not be loaded (%s)",
             e ? e : path);
    return;
  }
  cube__nccl_t t;
  memset(&t, 0, sizeof(t));
#define CUBE__NCCL_SYM(field, sym, required)                                                 \
  do {                                                                                      \
    void* p = dlsym(lib, sym);                                                              \
    if (!p && (required)) {                                                                 \
      snprintf(cube__nccl_reason, sizeof(cube__nccl_reason), "%s has no %s (NCCL older than " \
               "2.14?)", path, sym);                                                        \
      return;                                                                               \
    }                                                                                       \
    memcpy(&t.field, &p, sizeof(p));                                                        \
  } while (0)
  CUBE__NCCL_SYM(GetVersion, "ncclGetVersion", 1);
  CUBE__NCCL_SYM(GetUniqueId, "ncclGetUniqueId", 1);
  CUBE__NCCL_SYM(CommInitRankConfig, "ncclCommInitRankConfig", 1);
  CUBE__NCCL_SYM(GroupStart, "ncclGroupStart", 1);
  CUBE__NCCL_SYM(GroupEnd, "ncclGroupEnd", 1);
  CUBE__NCCL_SYM(AllReduce, "ncclAllReduce", 1);
  CUBE__NCCL_SYM(Send, "ncclSend", 1);
  CUBE__NCCL_SYM(Recv, "ncclRecv", 1);
  CUBE__NCCL_SYM(CommFinalize, "ncclCommFinalize", 1);
  CUBE__NCCL_SYM(CommDestroy, "ncclCommDestroy", 1);
  CUBE__NCCL_SYM(CommAbort, "ncclCommAbort", 1);
  CUBE__NCCL_SYM(CommGetAsyncError, "ncclCommGetAsyncError", 1);
  CUBE__NCCL_SYM(GetErrorString, "ncclGetErrorString", 1);
  CUBE__NCCL_SYM(GetLastError, "ncclGetLastError", 0);
#undef CUBE__NCCL_SYM
  int v = 0;
  cube__nccl_result_t r = t.GetVersion(&v);
  char vn[32];
  if (r != CUBE__NCCL_SUCCESS) {
    snprintf(cube__nccl_reason, sizeof(cube__nccl_reason), "%s: ncclGetVersion failed (%d)", path,
             (int)r);
    return;
  }
  if (v < CUBE__NCCL_MIN_VERSION) {
    snprintf(cube__nccl_reason, sizeof(cube__nccl_reason),
             "%s is NCCL %s; cube needs 2.14 or later (nonblocking communicators)", path,
             cube__nccl_version_name(v, vn, sizeof(vn)));
    return;
  }
  t.version = v;
  snprintf(t.path, sizeof(t.path), "%s", path);
  cube__nccl_table = t;
  cube__nccl_reason[0] = '\0';
  snprintf(cube__nccl_line, sizeof(cube__nccl_line), "NCCL %s (%s)",
           cube__nccl_version_name(v, vn, sizeof(vn)), path);
}

cube_status_t cube__nccl_get(const cube__nccl_t** out) {
  pthread_once(&cube__nccl_once, cube__nccl_load);
  if (cube__nccl_reason[0])
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "nccl: %s", cube__nccl_reason);
  *out = &cube__nccl_table;
  return CUBE_OK;
}

const char* cube__nccl_describe(void) {
  pthread_once(&cube__nccl_once, cube__nccl_load);
  return cube__nccl_reason[0] ? cube__nccl_reason : cube__nccl_line;
}

static const char* cube__nccl_result_name(cube__nccl_result_t r) {
  static const char* const names[] = {"ncclSuccess",       "ncclUnhandledCudaError",
                                      "ncclSystemError",   "ncclInternalError",
                                      "ncclInvalidArgument", "ncclInvalidUsage",
                                      "ncclRemoteError",   "ncclInProgress"};
  return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[(unsigned)r] : "ncclResult";
}

cube_status_t cube__nccl_error(cube__nccl_result_t r, cube__nccl_comm_t comm,
                               cube_status_code_t code, const char* fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  const char* text = NULL;
  const char* last = NULL;
  if (!cube__nccl_reason[0] && cube__nccl_table.GetErrorString) {
    text = cube__nccl_table.GetErrorString(r);
    if (cube__nccl_table.GetLastError) last = cube__nccl_table.GetLastError(comm);
  }
  if (code == CUBE_STATUS_OK)
    code = r == CUBE__NCCL_INVALID_ARGUMENT ? CUBE_STATUS_INVALID_ARGUMENT : CUBE_STATUS_INTERNAL;
  return cube__status_make(code, "%s: %s (%s%s%s, error %d)", what, cube__nccl_result_name(r),
                           text ? text : "no description", last && last[0] ? "; last error: " : "",
                           last && last[0] ? last : "", (int)r);
}

#endif /* CUBE_HAVE_NCCL_TRANSPORT */
