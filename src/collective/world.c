/* The world of collectives: this process's place among the processes (MPI,
 * or CUBE_COLLECTIVE_RANK / CUBE_COLLECTIVE_RANKS), the devices of each
 * backend per process, the global ids of devices, device names in messages,
 * and the collective timeout (CUBE_COLLECTIVE_TIMEOUT). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/abi.h"
#include "base/options.h"
#include "base/status.h"
#include "collective/coll_internal.h"
#include "platform/platform.h"


static pthread_mutex_t g_world_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_world_ready;
static cube__coll_world_t g_world;

//===----------------------------------------------------------------------===//
// World and ids
//===----------------------------------------------------------------------===//

/* Without MPI, a process may still be one of several (the nccl transport
 * across processes, ids through CUBE_NCCL_ID_FILE): CUBE_COLLECTIVE_RANK and
 * CUBE_COLLECTIVE_RANKS. */
static cube_status_t cube__coll_world_env(cube__coll_world_t* w) {
  CUBE_RETURN_IF_ERROR(cube__option_status(CUBE__OPT_COLLECTIVE_RANK));
  CUBE_RETURN_IF_ERROR(cube__option_status(CUBE__OPT_COLLECTIVE_RANKS));
  bool has_r = cube__option_has_value(CUBE__OPT_COLLECTIVE_RANK);
  bool has_n = cube__option_has_value(CUBE__OPT_COLLECTIVE_RANKS);
  if (!has_r && !has_n) return CUBE_OK;
  unsigned long r = has_r ? cube__option_u32(CUBE__OPT_COLLECTIVE_RANK) : 0;
  unsigned long n = has_n ? cube__option_u32(CUBE__OPT_COLLECTIVE_RANKS) : 1;
  if (r >= n)
    return CUBE_INVALID("collectives: CUBE_COLLECTIVE_RANK=%lu / CUBE_COLLECTIVE_RANKS=%lu%s: "
                        "expected 0 <= rank < ranks <= 65536",
                        r, n, has_n ? "" : " (unset)");
  w->rank = (uint32_t)r;
  w->ranks = (uint32_t)n;
  return CUBE_OK;
}

cube_status_t cube__coll_world(cube__coll_world_t* out) {
  pthread_mutex_lock(&g_world_lock);
  cube_status_t st = CUBE_OK;
  if (!g_world_ready) {
    cube__coll_world_t w;
    memset(&w, 0, sizeof(w));
    w.ranks = 1;
    st = cube__mpi_start(&w.mpi, &w.rank, &w.ranks);
    if (!st && !w.mpi) st = cube__coll_world_env(&w);
    if (!st) {
      /* The devices per rank of the backend whose ids span MPI ranks (the
       * CPU's, CUBE_CPU_DEVICES). */
      cube_backend_t b = cube__backend_with_caps(CUBE__CAP_GLOBAL_IDS_UNDER_MPI);
      w.local_cpu = b == CUBE_BACKEND_NONE ? 0 : cube__backend_device_count(b);
      g_world = w;
      g_world_ready = true;
    }
  }
  if (!st) *out = g_world;
  pthread_mutex_unlock(&g_world_lock);
  return st;
}

/* The devices of each backend, counted once per process and only when they
 * are needed (a CPU-only MPI program does not load the CUDA driver). */
static pthread_mutex_t g_count_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t g_counts[CUBE__BACKEND_COUNT];
static bool g_counted[CUBE__BACKEND_COUNT];

static uint32_t cube__coll_local_count(cube_backend_t backend) {
  pthread_mutex_lock(&g_count_lock);
  if (!g_counted[backend]) {
    g_counts[backend] = cube__backend_device_count(backend);
    g_counted[backend] = true;
  }
  uint32_t n = g_counts[backend];
  pthread_mutex_unlock(&g_count_lock);
  return n;
}

uint32_t cube__coll_per_rank(const cube__coll_world_t* w, cube_backend_t backend) {
  const cube__backend_vtable_t* vt = cube__backend_get(backend);
  if (!vt) return 0;
  if (vt->caps & CUBE__CAP_GLOBAL_IDS_UNDER_MPI) return w->mpi ? w->local_cpu : 0;
  if ((vt->caps & CUBE__CAP_GLOBAL_IDS_MULTIPROCESS) && w->ranks > 1)
    return cube__coll_local_count(backend);
  return 0;
}

cube_status_t cube_collective_world(uint32_t* out_rank, uint32_t* out_ranks,
                                    uint32_t* out_local_devices) {
  cube__coll_world_t w;
  CUBE_RETURN_IF_ERROR(cube__options_check("cube_collective_world"));
  CUBE_RETURN_IF_ERROR(cube__coll_world(&w));
  if (out_rank) *out_rank = w.rank;
  if (out_ranks) *out_ranks = w.ranks;
  if (out_local_devices) *out_local_devices = w.local_cpu;
  return CUBE_OK;
}

cube_device_id_t cube__coll_global_id(cube_device_id_t local) {
  cube__coll_world_t w;
  cube_status_t st = cube__coll_world(&w);
  if (st) {
    cube_status_free(st);
    return local;
  }
  local.index += w.rank * cube__coll_per_rank(&w, local.backend);
  return local;
}

uint32_t cube__coll_global_count(cube_backend_t backend) {
  uint32_t n = cube__backend_device_count(backend);
  cube__coll_world_t w;
  cube_status_t st = cube__coll_world(&w);
  if (st) {
    cube_status_free(st);
    return n;
  }
  return cube__coll_per_rank(&w, backend) ? n * w.ranks : n;
}

//===----------------------------------------------------------------------===//
// Timeout and names
//===----------------------------------------------------------------------===//

cube_status_t cube__coll_timeout_ns(uint64_t* out_ns) {
  double s = cube__option_seconds(CUBE__OPT_COLLECTIVE_TIMEOUT); /* default 60 */
  CUBE_RETURN_IF_ERROR(cube__option_status(CUBE__OPT_COLLECTIVE_TIMEOUT));
  *out_ns = (uint64_t)(s * 1e9);
  return CUBE_OK;
}

const char* cube__coll_dev_name(cube_device_id_t d, char* buf, size_t size) {
  const char* b = cube_backend_name(d.backend);
  snprintf(buf, size, "%s:%u", b ? b : "?", d.index);
  return buf;
}
