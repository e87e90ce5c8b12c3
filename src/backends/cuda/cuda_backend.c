/* The CUDA backend: every GPU the driver reports, one client each.
 *
 * - Driver and NVRTC through dlopen (cuda_api.c); no driver -> UNAVAILABLE.
 * - One primary context per GPU, retained for the life of the process (pinned
 *   read results may outlive cube_shutdown; they belong to that context).
 * - Storage: stream-ordered cuMemAllocAsync/cuMemFreeAsync on the allocating
 *   stream's CUDA stream (plain cuMemAlloc where memory pools are not
 *   supported), under cube's pools. Pinned staging: cuMemHostAlloc.
 * - Copies between device memory and ordinary host memory go through a
 *   device-wide ring of pinned chunks (CUBE__CUDA_CHUNK each): the host copy of
 *   one chunk overlaps the DMA of the others, and large transfers are split
 *   over the process's worker pool so that several threads do the host copies.
 *   A chunk is reused once the event recorded after its DMA has completed.
 * - Kernels: the dialect's CUDA unit compiled by NVRTC to a cubin for the
 *   device's architecture (sm_90 on an H200), through the kernel cache (memory
 *   and disk, kind "cubin"); the module is loaded once per device and the
 *   function found through a per-device map keyed by (kernel id, mode).
 *
 * Threading: every entry sets the device's context current on the calling
 * thread first. The ring and the function map have their own locks; the rest
 * of the device is read-only after device_create. Writes into fresh buffers run
 * on the caller's thread (CUBE__BACKEND_CALLER_WRITES) on the stream's CUDA
 * stream, ordered after what the runner put there before.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/worker_pool.h"
#include "backends/cuda/cuda_api.h"
#include "backends/cuda/cuda_internal.h"
#include "base/bytes.h"
#include "base/fault.h"
#include "base/status.h"
#include "cube/cube.h"
#include "kernel/cache.h"
#include "kernel/dialect.h"
#include "kernel/kernel.h"
#include "platform/platform.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define CUBE__CUDA_MAX_DEVICES 64u
#define CUBE__CUDA_ALIGNMENT 512u
#define CUBE__CUDA_CHUNK (4ull << 20)   /* default bytes per staging chunk */
#define CUBE__CUDA_RING_BYTES (128ull << 20) /* pinned bytes the ring may hold */
#define CUBE__CUDA_MAX_SLOTS 64u         /* chunks in the ring at most */
#define CUBE__CUDA_MAX_COPY_THREADS 16u  /* default host copies of one transfer */
#define CUBE__CUDA_DIRECT_MAX (64u << 10) /* transfers up to this skip the ring */

#define CUBE__CUDA_SPARE_EVENTS 64u

typedef struct cube__cuda_slot {
  void* host; /* pinned, chunk bytes */
  CUevent done;
  bool pending; /* |done| recorded and not yet waited for */
} cube__cuda_slot_t;

typedef struct cube__cuda_fn {
  uint64_t kernel_id;
  uint32_t mode;
  CUfunction fn;
  int max_threads;
} cube__cuda_fn_t;

typedef struct cube__cuda_module {
  cube__cache_key_t key;
  CUmodule module;
  CUfunction fn;
  int max_threads;
} cube__cuda_module_t;

struct cube__backend_device {
  uint32_t index;
  const cube__cuda_driver_t* cu;
  CUdevice dev;
  CUcontext ctx;
  int cc_major, cc_minor;
  char arch[16]; /* "sm_90" */
  char name[96];
  bool async_alloc;
  CUmemoryPool mempool;
  cube__worker_pool_t* workers;
  uint32_t copy_threads;
  uint64_t chunk;      /* bytes per staging chunk */
  uint32_t max_slots;  /* chunks in the ring at most (<= CUBE__CUDA_MAX_SLOTS) */
  bool stream_up, stream_down; /* host copies with non-temporal stores, per direction */
  uint32_t max_grid[3];
  uint32_t max_block[3];
  uint32_t max_threads_per_block;

  /* Staging ring. */
  pthread_mutex_t ring_lock;
  pthread_cond_t ring_cond;
  cube__cuda_slot_t slots[CUBE__CUDA_MAX_SLOTS];
  uint32_t slot_count;
  uint32_t free_slots[CUBE__CUDA_MAX_SLOTS]; /* FIFO of free chunk indices */
  uint32_t free_head, free_tail, free_count;
  CUevent spare_events[CUBE__CUDA_SPARE_EVENTS]; /* recycled events (ring_lock) */
  uint32_t spare_event_count;

  /* Functions and modules. */
  pthread_mutex_t fn_lock;
  cube__cuda_fn_t* fns;
  size_t fn_count, fn_cap;
  cube__cuda_module_t* modules;
  size_t module_count, module_cap;

  /* Validate mode: the bounds record (8 words) on the device and its pinned
   * mirror. Launches of one device run on its runner, one at a time. */
  CUdeviceptr bounds_dev;
  uint32_t* bounds_host;
};

typedef struct cube__cuda_stream {
  CUstream stream;
} cube__cuda_stream_t;

/* Primary contexts, retained once per device for the process. */
static pthread_mutex_t cube__cuda_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext cube__cuda_ctxs[CUBE__CUDA_MAX_DEVICES];

static atomic_uint_fast64_t cube__cuda_next_storage_id = 1;

#define CUBE__CU_TRY(dev, call, ...)                                    \
  do {                                                                  \
    CUresult cube__r_ = (call);                                         \
    if (cube__r_ != CUDA_SUCCESS) return cube__cuda_error(cube__r_, CUBE_STATUS_OK, __VA_ARGS__); \
  } while (0)

/* Every entry makes the device's context current for its duration and puts
 * back whatever the calling thread had: cube runs on the user's threads too
 * (uploads, allocation), and a program's own CUDA code on that thread must
 * find its context unchanged. Nothing is pushed when it is current already,
 * and on cube's own threads the context is set and left current. */
typedef struct cube__cuda_scope {
  const cube__cuda_driver_t* cu;
  bool pushed;
} cube__cuda_scope_t;

static inline cube__cuda_scope_t cube__cuda_enter(CUcontext ctx) {
  const cube__cuda_driver_t* cu = NULL;
  cube__cuda_scope_t s = {NULL, false};
  cube_status_t st = cube__cuda_driver(&cu);
  if (st) {
    cube_status_free(st);
    return s;
  }
  s.cu = cu;
  CUcontext cur = NULL;
  if (cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx) return s;
  /* cube's own threads (runners, copy workers) keep the context current:
   * a push and a pop per launch cost a tenth of the launch. */
  if (cube__thread_is_cube() && cu->CtxSetCurrent(ctx) == CUDA_SUCCESS) return s;
  s.pushed = cu->CtxPushCurrent(ctx) == CUDA_SUCCESS;
  return s;
}

static inline void cube__cuda_leave(cube__cuda_scope_t* s) {
  if (!s->pushed) return;
  CUcontext popped = NULL;
  s->cu->CtxPopCurrent(&popped);
}

#define CUBE__CUDA_SCOPE(ctx)                                                    \
  __attribute__((cleanup(cube__cuda_leave), unused)) cube__cuda_scope_t cube__scope_ = \
      cube__cuda_enter(ctx)

static inline CUstream cube__cuda_s(void* stream) {
  return stream ? ((cube__cuda_stream_t*)stream)->stream : NULL;
}

CUcontext cube__cuda_device_context(const cube__backend_device_t* d) { return d->ctx; }
uint32_t cube__cuda_device_ordinal(const cube__backend_device_t* d) { return d->index; }
CUstream cube__cuda_stream_handle(void* backend_stream) { return cube__cuda_s(backend_stream); }

//===----------------------------------------------------------------------===//
// Devices
//===----------------------------------------------------------------------===//

static cube_status_t cube__cuda_availability(void) {
  const cube__cuda_driver_t* cu;
  CUBE_RETURN_IF_ERROR(cube__cuda_driver(&cu));
  int n = 0;
  CUresult r = cu->DeviceGetCount(&n);
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_UNAVAILABLE, "cuda backend unavailable: cuDeviceGetCount");
  if (n <= 0) return cube__status_make(CUBE_STATUS_UNAVAILABLE, "cuda backend unavailable: the driver reports no GPU");
  return CUBE_OK;
}

static uint32_t cube__cuda_device_count(void) {
  const cube__cuda_driver_t* cu;
  cube_status_t s = cube__cuda_driver(&cu);
  if (s) {
    cube_status_free(s);
    return 0;
  }
  int n = 0;
  if (cu->DeviceGetCount(&n) != CUDA_SUCCESS || n < 0) return 0;
  return (uint32_t)n > CUBE__CUDA_MAX_DEVICES ? CUBE__CUDA_MAX_DEVICES : (uint32_t)n;
}

static int cube__cuda_attr(cube__backend_device_t* d, CUdevice_attribute a) {
  int v = 0;
  if (d->cu->DeviceGetAttribute(&v, a, d->dev) != CUDA_SUCCESS) v = 0;
  return v;
}

static void cube__cuda_device_free(cube__backend_device_t* d) {
  if (!d) return;
  if (d->ctx) {
    CUBE__CUDA_SCOPE(d->ctx);
    d->cu->CtxSynchronize();
    for (uint32_t i = 0; i < d->slot_count; ++i) {
      if (d->slots[i].done) d->cu->EventDestroy(d->slots[i].done);
      if (d->slots[i].host) d->cu->MemFreeHost(d->slots[i].host);
    }
    for (size_t i = 0; i < d->module_count; ++i) d->cu->ModuleUnload(d->modules[i].module);
    for (uint32_t i = 0; i < d->spare_event_count; ++i) d->cu->EventDestroy(d->spare_events[i]);
    if (d->bounds_dev) d->cu->MemFree(d->bounds_dev);
    if (d->bounds_host) d->cu->MemFreeHost(d->bounds_host);
    if (d->async_alloc && d->cu->MemPoolTrimTo) d->cu->MemPoolTrimTo(d->mempool, 0);
  }
  free(d->fns);
  free(d->modules);
  if (d->workers) cube__worker_pool_release(d->workers);
  pthread_mutex_destroy(&d->ring_lock);
  pthread_cond_destroy(&d->ring_cond);
  pthread_mutex_destroy(&d->fn_lock);
  free(d);
}

static cube_status_t cube__cuda_device_read(cube__backend_device_t* d, uint32_t index,
                                            cube_device_properties_t* p,
                                            cube_features_t* out_features,
                                            cube_backend_info_t* out_info, uint32_t count);

static cube_status_t cube__cuda_device_create(uint32_t index, const cube_server_options_t* options,
                                              cube__backend_device_t** out_device,
                                              cube_device_properties_t* p,
                                              cube_features_t* out_features,
                                              cube_backend_info_t* out_info) {
  (void)options;
  const cube__cuda_driver_t* cu;
  CUBE_RETURN_IF_ERROR(cube__cuda_driver(&cu));
  uint32_t count = cube__cuda_device_count();
  if (index >= count)
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "cuda device %u does not exist (%u GPU%s)",
                             index, count, count == 1 ? "" : "s");
  cube__backend_device_t* d = calloc(1, sizeof(*d));
  if (!d) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cuda device %u: no host memory", index);
  pthread_mutex_init(&d->ring_lock, NULL);
  pthread_cond_init(&d->ring_cond, NULL);
  pthread_mutex_init(&d->fn_lock, NULL);
  d->index = index;
  d->cu = cu;
  cube_status_t st = CUBE_OK;
  CUresult r = cu->DeviceGet(&d->dev, (int)index);
  if (r != CUDA_SUCCESS) {
    st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: cuDeviceGet", index);
    goto fail;
  }
  pthread_mutex_lock(&cube__cuda_ctx_lock);
  if (!cube__cuda_ctxs[index]) {
    r = cu->DevicePrimaryCtxRetain(&cube__cuda_ctxs[index], d->dev);
    if (r != CUDA_SUCCESS) cube__cuda_ctxs[index] = NULL;
  }
  d->ctx = cube__cuda_ctxs[index];
  pthread_mutex_unlock(&cube__cuda_ctx_lock);
  if (!d->ctx) {
    st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: cuDevicePrimaryCtxRetain", index);
    goto fail;
  }
  {
    CUBE__CUDA_SCOPE(d->ctx);
    st = cube__cuda_device_read(d, index, p, out_features, out_info, count);
  }
  if (st) goto fail;
  *out_device = d;
  return CUBE_OK;
fail:
  cube__cuda_device_free(d);
  return st;
}

static cube_status_t cube__cuda_device_read(cube__backend_device_t* d, uint32_t index,
                                            cube_device_properties_t* p,
                                            cube_features_t* out_features,
                                            cube_backend_info_t* out_info, uint32_t count) {
  const cube__cuda_driver_t* cu = d->cu;
  cube_status_t st = CUBE_OK;
  CUresult r;
  if (cu->DeviceGetName(d->name, (int)sizeof(d->name), d->dev) != CUDA_SUCCESS)
    snprintf(d->name, sizeof(d->name), "GPU %u", index);
  size_t total = 0;
  r = cu->DeviceTotalMem(&total, d->dev);
  if (r != CUDA_SUCCESS) {
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: cuDeviceTotalMem", index);
  }
  d->cc_major = cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  d->cc_minor = cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  snprintf(d->arch, sizeof(d->arch), "sm_%d%d", d->cc_major, d->cc_minor);
  d->max_grid[0] = (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  d->max_grid[1] = (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  d->max_grid[2] = (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  d->max_block[0] = (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  d->max_block[1] = (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  d->max_block[2] = (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  d->max_threads_per_block = (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  d->async_alloc = cu->MemAllocAsync && cu->MemFreeAsync && cu->DeviceGetDefaultMemPool &&
                   cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) != 0;
  const char* env;
  if (cube__env_str("CUBE_CUDA_ASYNC_ALLOC", &env) && strcmp(env, "0") == 0) d->async_alloc = false;
  if (d->async_alloc && cu->DeviceGetDefaultMemPool(&d->mempool, d->dev) != CUDA_SUCCESS)
    d->async_alloc = false;
  if (d->async_alloc && cu->MemPoolSetAttribute) {
    /* cube's pools cache; the driver's pool gives memory back at each sync. */
    cuuint64_t threshold = 0;
    cu->MemPoolSetAttribute(d->mempool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
  }
  r = cu->MemAlloc(&d->bounds_dev, 64);
  if (r == CUDA_SUCCESS) r = cu->MemHostAlloc((void**)&d->bounds_host, 64, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) {
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: bounds record", index);
  }
  st = cube__worker_pool_acquire(&d->workers);
  if (st) return st;
  d->copy_threads = cube__worker_pool_size(d->workers);
  if (d->copy_threads > CUBE__CUDA_MAX_COPY_THREADS) d->copy_threads = CUBE__CUDA_MAX_COPY_THREADS;
  /* Tunables of the staging ring (docs/benchmarks.md has the measurements
   * behind the defaults): threads that copy one transfer, chunk size. */
  bool set = false;
  uint32_t threads = 0;
  st = cube__env_u32("CUBE_CUDA_COPY_THREADS", &set, &threads);
  if (!st && set && (threads < 1 || threads > 256))
    st = CUBE_INVALID("CUBE_CUDA_COPY_THREADS=%u: expected 1 to 256", threads);
  if (st) return st;
  if (set) d->copy_threads = threads;
  if (d->copy_threads > cube__worker_pool_size(d->workers))
    d->copy_threads = cube__worker_pool_size(d->workers);
  if (d->copy_threads < 1) d->copy_threads = 1;
  d->chunk = CUBE__CUDA_CHUNK;
  uint64_t chunk = 0;
  st = cube__env_size("CUBE_CUDA_STAGING_CHUNK", &set, &chunk);
  if (!st && set && (chunk < (64u << 10) || chunk > (64u << 20) || chunk % 4096))
    st = CUBE_INVALID("CUBE_CUDA_STAGING_CHUNK=%" PRIu64 " bytes: expected 64 KiB to 64 MiB, a "
                      "multiple of 4 KiB", chunk);
  if (st) return st;
  if (set) d->chunk = chunk;
  d->max_slots = (uint32_t)(CUBE__CUDA_RING_BYTES / d->chunk);
  if (d->max_slots > CUBE__CUDA_MAX_SLOTS) d->max_slots = CUBE__CUDA_MAX_SLOTS;
  if (d->max_slots < 4) d->max_slots = 4;
  /* Non-temporal stores pay on downloads (the copy out of a chunk into the
   * caller's memory) and not on uploads (a chunk written with plain stores
   * is still in the cache when the DMA engine reads it): measured on an
   * H200 host, docs/benchmarks.md. */
  d->stream_up = false;
  d->stream_down = true;
  if (cube__env_str("CUBE_CUDA_STREAM_COPY", &env)) {
    bool both = strcmp(env, "1") == 0, none = strcmp(env, "0") == 0;
    if (!both && !none && strcmp(env, "up") != 0 && strcmp(env, "down") != 0)
      return CUBE_INVALID("CUBE_CUDA_STREAM_COPY=%s: expected 0, 1, up or down", env);
    d->stream_up = both || strcmp(env, "up") == 0;
    d->stream_down = both || strcmp(env, "down") == 0;
  }

  if (p) {
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "cuda%u (%.80s, %.15s)", index, d->name, d->arch);
    p->id.backend = CUBE_BACKEND_CUDA;
    p->id.index = index;
    p->memory.total_memory = total;
    p->memory.max_page_size = (total / 4) / CUBE__CUDA_ALIGNMENT * CUBE__CUDA_ALIGNMENT;
    p->memory.alignment = CUBE__CUDA_ALIGNMENT;
    p->hardware.load_width = 128;
    p->hardware.plane_size_min = (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    p->hardware.plane_size_max = p->hardware.plane_size_min;
    p->hardware.max_bindings = CUBE_MAX_KERNEL_ARGS;
    p->hardware.max_shared_memory_size =
        (uint64_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    for (int i = 0; i < 3; ++i) {
      p->hardware.max_cube_count[i] = d->max_grid[i];
      p->hardware.max_cube_dim[i] = d->max_block[i];
    }
    p->hardware.max_units_per_cube = d->max_threads_per_block;
    p->hardware.num_streaming_multiprocessors =
        (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    p->hardware.num_tensor_cores = d->cc_major >= 7 ? 4 * p->hardware.num_streaming_multiprocessors : 0;
    p->hardware.min_tensor_cores_dim = d->cc_major >= 7 ? 16 : 0;
    p->hardware.num_cpu_cores = 0;
    p->hardware.max_vector_size = 4;
    p->hardware.l2_cache_size = (uint64_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    p->hardware.compute_capability = (uint32_t)(d->cc_major * 10 + d->cc_minor);
    p->timing_method = CUBE_TIMING_DEVICE;
    p->layout_policy = CUBE_LAYOUT_POLICY_PITCHED;
  }
  if (out_features)
    out_features->bits = CUBE_FEATURE_DYNAMIC_COUNT | CUBE_FEATURE_F64 | CUBE_FEATURE_I64 |
                         CUBE_FEATURE_ATOMIC_U32 | CUBE_FEATURE_ATOMIC_F32_ADD |
                         CUBE_FEATURE_SHARED_MEMORY | CUBE_FEATURE_SYNC_CUBE | CUBE_FEATURE_PLANE |
                         CUBE_FEATURE_PINNED_STAGING |
                         CUBE_FEATURE_COLLECTIVES; /* nccl when NCCL loads, else staged */
  if (out_info) {
    memset(out_info, 0, sizeof(*out_info));
    out_info->backend = CUBE_BACKEND_CUDA;
    snprintf(out_info->name, sizeof(out_info->name), "cuda");
    snprintf(out_info->version, sizeof(out_info->version), "cube %s cuda, driver %d.%d",
             CUBE_VERSION_STRING, cu->version / 1000, (cu->version % 1000) / 10);
    out_info->device_count = count;
  }
  return st;
}

static void cube__cuda_device_destroy(cube__backend_device_t* d) { cube__cuda_device_free(d); }

//===----------------------------------------------------------------------===//
// Storage
//===----------------------------------------------------------------------===//

/* Waits for |s|. If that wait fails, the whole context is waited for as
 * well, so that no copy can still be running into memory the caller is about
 * to give back; the first failure is returned. */
static CUresult cube__cuda_wait(cube__backend_device_t* d, CUstream s) {
  CUresult r = s ? d->cu->StreamSynchronize(s) : d->cu->CtxSynchronize();
  if (r != CUDA_SUCCESS && s) d->cu->CtxSynchronize();
  return r;
}

static cube_status_t cube__cuda_oom(cube__backend_device_t* d, CUresult r, uint64_t size,
                                    const char* how) {
  char a[32], b[32];
  size_t free_b = 0, total_b = 0;
  d->cu->MemGetInfo(&free_b, &total_b);
  return cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: %s of %s failed (%s free on the device)",
                          d->index, how, cube__format_bytes(size, a, sizeof(a)),
                          cube__format_bytes(free_b, b, sizeof(b)));
}

static cube_status_t cube__cuda_alloc_on(cube__backend_device_t* d, void* stream, uint64_t size,
                                         cube__storage_t* out) {
  CUBE__FAULT_RETURN(CUBE__FAULT_CPU_ALLOC, CUBE_STATUS_OUT_OF_MEMORY,
                     "cuda device %u: allocation of %llu bytes failed", d->index,
                     (unsigned long long)size);
  CUBE__CUDA_SCOPE(d->ctx);
  CUdeviceptr p = 0;
  size_t n = size ? (size_t)size : 1;
  bool async = d->async_alloc && stream;
  CUresult r = async ? d->cu->MemAllocAsync(&p, n, cube__cuda_s(stream)) : d->cu->MemAlloc(&p, n);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    /* Memory freed on other streams may still be pending in the driver's
     * pool: finish everything, trim, and try once more. */
    d->cu->CtxSynchronize();
    if (d->async_alloc && d->cu->MemPoolTrimTo) d->cu->MemPoolTrimTo(d->mempool, 0);
    r = async ? d->cu->MemAllocAsync(&p, n, cube__cuda_s(stream)) : d->cu->MemAlloc(&p, n);
  }
  if (r != CUDA_SUCCESS) return cube__cuda_oom(d, r, size, async ? "cuMemAllocAsync" : "cuMemAlloc");
  out->id = atomic_fetch_add_explicit(&cube__cuda_next_storage_id, 1, memory_order_relaxed);
  out->ptr = (void*)(uintptr_t)p;
  out->size = size;
  out->backend_data = async ? (void*)(uintptr_t)1 : NULL;
  return CUBE_OK;
}

static void cube__cuda_dealloc_on(cube__backend_device_t* d, void* stream,
                                  const cube__storage_t* s) {
  if (!s || !s->ptr) return;
  CUBE__CUDA_SCOPE(d->ctx);
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)s->ptr;
  if (s->backend_data && stream)
    d->cu->MemFreeAsync(p, cube__cuda_s(stream));
  else
    d->cu->MemFree(p);
}

static cube_status_t cube__cuda_alloc(cube__backend_device_t* d, uint64_t size,
                                      cube__storage_t* out) {
  return cube__cuda_alloc_on(d, NULL, size, out);
}

static void cube__cuda_dealloc(cube__backend_device_t* d, const cube__storage_t* s) {
  cube__cuda_dealloc_on(d, NULL, s);
}

static void cube__cuda_trim(cube__backend_device_t* d, void* stream) {
  if (!d->async_alloc || !d->cu->MemPoolTrimTo) return;
  CUBE__CUDA_SCOPE(d->ctx);
  if (stream) cube__cuda_wait(d, cube__cuda_s(stream));
  d->cu->MemPoolTrimTo(d->mempool, 0);
}

static cube_status_t cube__cuda_host_alloc(cube__backend_device_t* d, uint64_t size,
                                           cube__storage_t* out) {
  CUBE__FAULT_RETURN(CUBE__FAULT_CPU_HOST_ALLOC, CUBE_STATUS_OUT_OF_MEMORY,
                     "cuda device %u: pinned allocation of %llu bytes failed", d->index,
                     (unsigned long long)size);
  CUBE__CUDA_SCOPE(d->ctx);
  void* p = NULL;
  CUresult r = d->cu->MemHostAlloc(&p, size ? (size_t)size : 1, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) return cube__cuda_oom(d, r, size, "cuMemHostAlloc (pinned)");
  out->id = atomic_fetch_add_explicit(&cube__cuda_next_storage_id, 1, memory_order_relaxed);
  out->ptr = p;
  out->size = size;
  out->backend_data = d->ctx;
  return CUBE_OK;
}

/* |d| may be NULL (after cube_shutdown): the context is in the storage. */
static void cube__cuda_host_dealloc(cube__backend_device_t* d, const cube__storage_t* s) {
  (void)d;
  if (!s || !s->ptr) return;
  const cube__cuda_driver_t* cu;
  cube_status_t st = cube__cuda_driver(&cu);
  if (st) {
    cube_status_free(st);
    return;
  }
  CUBE__CUDA_SCOPE((CUcontext)s->backend_data);
  cu->MemFreeHost(s->ptr);
}

//===----------------------------------------------------------------------===//
// Streams and events
//===----------------------------------------------------------------------===//

static cube_status_t cube__cuda_stream_create(cube__backend_device_t* d, uint64_t stream_id,
                                              void** out_stream) {
  CUBE__CUDA_SCOPE(d->ctx);
  cube__cuda_stream_t* s = calloc(1, sizeof(*s));
  if (!s) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cuda stream %" PRIu64 ": no host memory", stream_id);
  CUresult r = d->cu->StreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    free(s);
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: cuStreamCreate for stream %" PRIu64,
                            d->index, stream_id);
  }
  *out_stream = s;
  return CUBE_OK;
}

static void cube__cuda_stream_destroy(cube__backend_device_t* d, void* stream) {
  cube__cuda_stream_t* s = stream;
  if (!s) return;
  {
    CUBE__CUDA_SCOPE(d->ctx);
    cube__cuda_wait(d, s->stream);
    d->cu->StreamDestroy(s->stream);
  }
  free(s);
}

static cube_status_t cube__cuda_sync(cube__backend_device_t* d, void* stream) {
  CUBE__CUDA_SCOPE(d->ctx);
  CUresult r = cube__cuda_wait(d, cube__cuda_s(stream));
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_LAUNCH_FAILED, "cuda device %u: synchronising the stream", d->index);
  return CUBE_OK;
}

/* Events are recycled: cuEventCreate costs about a microsecond, and a
 * buffer used across streams records one per launch. Giving an event back
 * before it completed is safe: a wait captures the record it was called
 * after, and a later record starts a new one. */
static cube_status_t cube__cuda_event_record(cube__backend_device_t* d, void* stream, void** out) {
  CUBE__CUDA_SCOPE(d->ctx);
  CUevent e = NULL;
  pthread_mutex_lock(&d->ring_lock);
  if (d->spare_event_count) e = d->spare_events[--d->spare_event_count];
  pthread_mutex_unlock(&d->ring_lock);
  if (!e)
    CUBE__CU_TRY(d, d->cu->EventCreate(&e, CU_EVENT_DEFAULT), "cuda device %u: cuEventCreate", d->index);
  CUresult r = d->cu->EventRecord(e, cube__cuda_s(stream));
  if (r != CUDA_SUCCESS) {
    d->cu->EventDestroy(e);
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: cuEventRecord", d->index);
  }
  *out = e;
  return CUBE_OK;
}

static cube_status_t cube__cuda_event_wait(cube__backend_device_t* d, void* stream, void* event) {
  CUBE__CUDA_SCOPE(d->ctx);
  CUBE__CU_TRY(d, d->cu->StreamWaitEvent(cube__cuda_s(stream), (CUevent)event, 0),
               "cuda device %u: cuStreamWaitEvent", d->index);
  return CUBE_OK;
}

static bool cube__cuda_event_done(cube__backend_device_t* d, void* event) {
  CUBE__CUDA_SCOPE(d->ctx);
  return d->cu->EventQuery((CUevent)event) != CUDA_ERROR_NOT_READY;
}

static cube_status_t cube__cuda_event_sync(cube__backend_device_t* d, void* event) {
  CUBE__CUDA_SCOPE(d->ctx);
  CUresult r = d->cu->EventSynchronize((CUevent)event);
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_LAUNCH_FAILED, "cuda device %u: cuEventSynchronize", d->index);
  return CUBE_OK;
}

static void cube__cuda_event_destroy(cube__backend_device_t* d, void* event) {
  if (!event) return;
  pthread_mutex_lock(&d->ring_lock);
  bool kept = d->spare_event_count < CUBE__CUDA_SPARE_EVENTS;
  if (kept) d->spare_events[d->spare_event_count++] = (CUevent)event;
  pthread_mutex_unlock(&d->ring_lock);
  if (kept) return;
  CUBE__CUDA_SCOPE(d->ctx);
  d->cu->EventDestroy((CUevent)event);
}

static cube_status_t cube__cuda_event_elapsed(cube__backend_device_t* d, void* start, void* end,
                                              uint64_t* out_ns) {
  CUBE__CUDA_SCOPE(d->ctx);
  float ms = 0;
  CUBE__CU_TRY(d, d->cu->EventSynchronize((CUevent)end), "cuda device %u: cuEventSynchronize", d->index);
  CUBE__CU_TRY(d, d->cu->EventElapsedTime(&ms, (CUevent)start, (CUevent)end),
               "cuda device %u: cuEventElapsedTime", d->index);
  *out_ns = ms <= 0 ? 0 : (uint64_t)((double)ms * 1e6);
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Staging ring and copies
//===----------------------------------------------------------------------===//

/* The host side of a staged copy. With |stream|, large copies use
 * non-temporal stores: the destination is not read into the cache first
 * (a plain copy reads it for ownership), so a chunk costs two passes over
 * memory instead of three, and the DMA engine shares what is left. */
#if defined(__SSE2__)
static void cube__copy_nt(void* dst, const void* src, size_t n) {
  uint8_t* d = dst;
  const uint8_t* s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (head > n) head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)(const void*)s);
    __m128i b = _mm_loadu_si128((const __m128i*)(const void*)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(const void*)(s + 32));
    __m128i e = _mm_loadu_si128((const __m128i*)(const void*)(s + 48));
    _mm_stream_si128((__m128i*)(void*)d, a);
    _mm_stream_si128((__m128i*)(void*)(d + 16), b);
    _mm_stream_si128((__m128i*)(void*)(d + 32), c);
    _mm_stream_si128((__m128i*)(void*)(d + 48), e);
  }
  _mm_sfence(); /* the stores are visible before the DMA that follows */
  memcpy(d, s, n);
}
#endif

static void cube__cuda_copy(bool stream, void* dst, const void* src, size_t n) {
#if defined(__SSE2__)
  if (stream && n >= (256u << 10)) {
    cube__copy_nt(dst, src, n);
    return;
  }
#endif
  (void)stream;
  memcpy(dst, src, n);
}

static void cube__cuda_slot_give(cube__backend_device_t* d, uint32_t i) {
  pthread_mutex_lock(&d->ring_lock);
  d->free_slots[d->free_tail] = i;
  d->free_tail = (d->free_tail + 1) % d->max_slots;
  d->free_count++;
  pthread_cond_signal(&d->ring_cond);
  pthread_mutex_unlock(&d->ring_lock);
}

/* Takes a chunk of the ring, its last DMA completed. Free chunks are kept in
 * FIFO order (the oldest DMA first); when the oldest is still busy and the
 * ring may grow, a new chunk is pinned instead of waiting, so that one thread
 * can fill a chunk while the previous one is on the wire. */
static cube_status_t cube__cuda_slot_take(cube__backend_device_t* d, uint32_t* out) {
  pthread_mutex_lock(&d->ring_lock);
  while (d->free_count == 0 && d->slot_count == d->max_slots)
    pthread_cond_wait(&d->ring_cond, &d->ring_lock);
  uint32_t i = UINT32_MAX;
  if (d->free_count > 0) {
    uint32_t head = d->free_slots[d->free_head];
    cube__cuda_slot_t* hs = &d->slots[head];
    bool busy = hs->pending && d->cu->EventQuery(hs->done) == CUDA_ERROR_NOT_READY;
    if (!busy || d->slot_count == d->max_slots) {
      i = head;
      d->free_head = (d->free_head + 1) % d->max_slots;
      d->free_count--;
    }
  }
  if (i == UINT32_MAX) {
    i = d->slot_count;
    cube__cuda_slot_t* s = &d->slots[i];
    CUresult r = d->cu->MemHostAlloc(&s->host, (size_t)d->chunk, CU_MEMHOSTALLOC_PORTABLE);
    if (r == CUDA_SUCCESS) r = d->cu->EventCreate(&s->done, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
      if (s->host) d->cu->MemFreeHost(s->host);
      s->host = NULL;
      s->done = NULL;
      pthread_mutex_unlock(&d->ring_lock);
      return cube__cuda_oom(d, r, d->chunk, "staging chunk (pinned)");
    }
    d->slot_count++;
  }
  pthread_mutex_unlock(&d->ring_lock);
  cube__cuda_slot_t* s = &d->slots[i];
  if (s->pending) {
    CUresult r = d->cu->EventSynchronize(s->done);
    /* A chunk whose DMA was not seen to finish stays pending: the next user
     * waits again instead of writing under a copy that may still run. */
    if (r == CUDA_SUCCESS) s->pending = false;
    if (r != CUDA_SUCCESS) {
      cube__cuda_slot_give(d, i);
      return cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: waiting for a staging copy", d->index);
    }
  }
  *out = i;
  return CUBE_OK;
}

/* A transfer of |height| rows of |width| bytes between packed host rows and
 * device rows |pitch| apart, cut into pieces that fit a chunk. */
typedef struct cube__cuda_xfer {
  cube__backend_device_t* d;
  CUstream stream;
  CUdeviceptr dev;  /* first byte of row 0 */
  uint8_t* host;    /* packed rows */
  uint64_t width, height, pitch;
  uint64_t rows_per; /* rows per piece, when width <= chunk */
  uint64_t per_row;  /* pieces per row, when width > chunk */
  bool to_device;
  _Atomic(cube_status_t) error;
} cube__cuda_xfer_t;

static uint64_t cube__cuda_xfer_pieces(cube__cuda_xfer_t* x) {
  uint64_t chunk = x->d->chunk;
  if (x->width <= chunk) {
    x->rows_per = chunk / x->width;
    x->per_row = 0;
    return (x->height + x->rows_per - 1) / x->rows_per;
  }
  x->rows_per = 1;
  x->per_row = (x->width + chunk - 1) / chunk;
  return x->height * x->per_row;
}

static cube_status_t cube__cuda_xfer_piece(cube__cuda_xfer_t* x, uint64_t i) {
  cube__backend_device_t* d = x->d;
  uint64_t row, rows, col, cols;
  if (x->per_row == 0) {
    row = i * x->rows_per;
    rows = x->height - row < x->rows_per ? x->height - row : x->rows_per;
    col = 0;
    cols = x->width;
  } else {
    row = i / x->per_row;
    rows = 1;
    col = (i % x->per_row) * d->chunk;
    cols = x->width - col < d->chunk ? x->width - col : d->chunk;
  }
  uint8_t* host = x->host + row * x->width + col;
  CUdeviceptr dev = x->dev + row * x->pitch + col;
  uint32_t slot = 0;
  CUBE_RETURN_IF_ERROR(cube__cuda_slot_take(d, &slot));
  cube__cuda_slot_t* s = &d->slots[slot];
  CUresult r;
  if (x->to_device) cube__cuda_copy(d->stream_up, s->host, host, (size_t)(rows * cols));
  if (rows == 1) {
    r = x->to_device ? d->cu->MemcpyHtoDAsync(dev, s->host, (size_t)cols, x->stream)
                     : d->cu->MemcpyDtoHAsync(s->host, dev, (size_t)cols, x->stream);
  } else {
    CUDA_MEMCPY2D m;
    memset(&m, 0, sizeof(m));
    if (x->to_device) {
      m.srcMemoryType = CU_MEMORYTYPE_HOST;
      m.srcHost = s->host;
      m.srcPitch = (size_t)cols;
      m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      m.dstDevice = dev;
      m.dstPitch = (size_t)x->pitch;
    } else {
      m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      m.srcDevice = dev;
      m.srcPitch = (size_t)x->pitch;
      m.dstMemoryType = CU_MEMORYTYPE_HOST;
      m.dstHost = s->host;
      m.dstPitch = (size_t)cols;
    }
    m.WidthInBytes = (size_t)cols;
    m.Height = (size_t)rows;
    r = d->cu->Memcpy2DAsync(&m, x->stream);
  }
  if (r == CUDA_SUCCESS) {
    r = d->cu->EventRecord(s->done, x->stream);
    /* The copy is queued but cannot be tracked: wait for it here, the chunk
     * must be idle before anyone else writes into it. */
    if (r != CUDA_SUCCESS) cube__cuda_wait(d, x->stream);
  }
  if (r == CUDA_SUCCESS) {
    s->pending = true;
    if (!x->to_device) {
      r = d->cu->EventSynchronize(s->done);
      if (r == CUDA_SUCCESS) {
        s->pending = false;
        cube__cuda_copy(d->stream_down, host, s->host, (size_t)(rows * cols));
      }
    }
  }
  cube__cuda_slot_give(d, slot);
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: %s copy of %" PRIu64 " bytes",
                            d->index, x->to_device ? "host-to-device" : "device-to-host",
                            rows * cols);
  return CUBE_OK;
}

static int cube__cuda_xfer_range(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  (void)participant;
  cube__cuda_xfer_t* x = p;
  CUBE__CUDA_SCOPE(x->d->ctx);
  cube_status_t st = CUBE_OK;
  for (uint64_t i = begin; !st && i < end; ++i) st = cube__cuda_xfer_piece(x, i);
  if (st) {
    cube_status_t expected = NULL;
    if (!atomic_compare_exchange_strong(&x->error, &expected, st)) cube_status_free(st);
    return 1;
  }
  return 0;
}

/* Runs a transfer through the ring: one piece at a time on the caller for
 * small transfers, over up to copy_threads workers for large ones. */
static cube_status_t cube__cuda_xfer_run(cube__cuda_xfer_t* x) {
  uint64_t pieces = cube__cuda_xfer_pieces(x);
  atomic_init(&x->error, NULL);
  uint64_t threads = x->d->copy_threads;
  uint64_t min_chunk = pieces / threads + (pieces % threads ? 1 : 0);
  if (min_chunk < 2) min_chunk = 2;
  if (pieces <= 2)
    cube__cuda_xfer_range(x, 0, pieces, 0);
  else
    cube__worker_pool_run(x->d->workers, pieces, min_chunk, cube__cuda_xfer_range, x);
  return atomic_load(&x->error);
}

/* A transfer of rows (or of one flat run when the rows are packed). */
static void cube__cuda_xfer_init(cube__cuda_xfer_t* x, cube__backend_device_t* d, CUstream s,
                                 CUdeviceptr dev, void* host, uint64_t pitch, uint64_t width,
                                 uint64_t height, bool to_device) {
  memset(x, 0, sizeof(*x));
  x->d = d;
  x->stream = s;
  x->dev = dev;
  x->host = host;
  if (height == 1 || pitch == width) {
    x->width = width * height;
    x->height = 1;
    x->pitch = x->width;
  } else {
    x->width = width;
    x->height = height;
    x->pitch = pitch;
  }
  x->to_device = to_device;
}

static cube_status_t cube__cuda_check_rows(cube__backend_device_t* d, const char* op,
                                           const cube__storage_t* storage, uint64_t offset,
                                           uint64_t pitch, uint64_t width, uint64_t height) {
  if (height > 1 && pitch < width)
    return CUBE_INVALID("cuda device %u %s: pitch %" PRIu64 " is smaller than the row width %" PRIu64,
                        d->index, op, pitch, width);
  uint64_t span, last;
  if (cube__mul_overflow_u64(height - 1, pitch, &span) ||
      cube__add_overflow_u64(span, width, &span) || cube__add_overflow_u64(offset, span, &last) ||
      last > storage->size)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "cuda device %u %s: %" PRIu64 " rows of %" PRIu64 " bytes, pitch %" PRIu64
                             ", at offset %" PRIu64 " exceed storage %" PRIu64 " of %" PRIu64 " bytes",
                             d->index, op, height, width, pitch, offset, storage->id, storage->size);
  return CUBE_OK;
}

static cube_status_t cube__cuda_write(cube__backend_device_t* d, void* stream,
                                      const cube__storage_t* dst, uint64_t dst_offset,
                                      uint64_t pitch, const void* src, uint64_t width,
                                      uint64_t height) {
  if (width == 0 || height == 0) return CUBE_OK;
  CUBE__FAULT_RETURN(CUBE__FAULT_CPU_WRITE, CUBE_STATUS_INTERNAL,
                     "cuda write of %llu bytes to storage %llu failed",
                     (unsigned long long)(width * height), (unsigned long long)dst->id);
  CUBE_RETURN_IF_ERROR(cube__cuda_check_rows(d, "write", dst, dst_offset, pitch, width, height));
  CUBE__CUDA_SCOPE(d->ctx);
  CUstream s = cube__cuda_s(stream);
  CUdeviceptr to = (CUdeviceptr)(uintptr_t)dst->ptr + dst_offset;
  if ((height == 1 || pitch == width) && width * height <= CUBE__CUDA_DIRECT_MAX) {
    /* A small upload: the driver copies pageable memory into its own staging
     * before the call returns, so |src| is free again at once. */
    CUresult r = d->cu->MemcpyHtoDAsync(to, src, (size_t)(width * height), s);
    if (r != CUDA_SUCCESS)
      return cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: host-to-device copy of %" PRIu64
                              " bytes", d->index, width * height);
    return CUBE_OK;
  }
  cube__cuda_xfer_t x;
  cube__cuda_xfer_init(&x, d, s, to, (void*)(uintptr_t)src, pitch, width, height, true);
  return cube__cuda_xfer_run(&x);
}

/* Whether |p| is page-locked memory the device can DMA from or to. Asked with
 * cuPointerGetAttributes, which answers for any address (cuMemHostGetFlags
 * fails on pageable memory, and compute-sanitizer reports each failure). */
static bool cube__cuda_is_pinned(cube__backend_device_t* d, const void* p) {
  CUpointer_attribute a = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  unsigned int type = 0;
  void* data[1] = {&type};
  return d->cu->PointerGetAttributes(1, &a, data, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS &&
         type == CU_MEMORYTYPE_HOST;
}

static cube_status_t cube__cuda_read(cube__backend_device_t* d, void* stream, void* dst,
                                     const cube__storage_t* src, uint64_t src_offset,
                                     uint64_t pitch, uint64_t width, uint64_t height) {
  if (width == 0 || height == 0) return CUBE_OK;
  CUBE__FAULT_RETURN(CUBE__FAULT_CPU_READ, CUBE_STATUS_INTERNAL,
                     "cuda read of %llu bytes from storage %llu failed",
                     (unsigned long long)(width * height), (unsigned long long)src->id);
  CUBE_RETURN_IF_ERROR(cube__cuda_check_rows(d, "read", src, src_offset, pitch, width, height));
  CUBE__CUDA_SCOPE(d->ctx);
  CUstream s = cube__cuda_s(stream);
  CUdeviceptr from = (CUdeviceptr)(uintptr_t)src->ptr + src_offset;
  bool flat = height == 1 || pitch == width;
  if (width * height <= CUBE__CUDA_DIRECT_MAX || cube__cuda_is_pinned(d, dst)) {
    /* Pinned destination (the staging pool): one DMA, no host copy. A small
     * read goes straight to any memory (the driver's own staging returns it
     * when the call completes): the ring's bookkeeping would cost more. */
    CUresult r;
    if (flat) {
      r = d->cu->MemcpyDtoHAsync(dst, from, (size_t)(width * height), s);
    } else {
      CUDA_MEMCPY2D m;
      memset(&m, 0, sizeof(m));
      m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      m.srcDevice = from;
      m.srcPitch = (size_t)pitch;
      m.dstMemoryType = CU_MEMORYTYPE_HOST;
      m.dstHost = dst;
      m.dstPitch = (size_t)width;
      m.WidthInBytes = (size_t)width;
      m.Height = (size_t)height;
      r = d->cu->Memcpy2DAsync(&m, s);
    }
    if (r == CUDA_SUCCESS) r = cube__cuda_wait(d, s);
    if (r != CUDA_SUCCESS)
      return cube__cuda_error(r, CUBE_STATUS_OK, "cuda device %u: device-to-host copy of %" PRIu64 " bytes",
                              d->index, width * height);
    return CUBE_OK;
  }
  cube__cuda_xfer_t x;
  cube__cuda_xfer_init(&x, d, s, from, dst, pitch, width, height, false);
  return cube__cuda_xfer_run(&x);
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

typedef struct cube__cuda_blob {
  size_t size;
  char data[];
} cube__cuda_blob_t;

static void cube__cuda_blob_destroy(void* p) { free(p); }

/* NVRTC writes a location as "file.cube(4): error"; the other backends'
 * compilers (and editors) use "file.cube:4: error". Rewrites the first form
 * into the second in place (one byte shorter each time). */
static void cube__cuda_log_locations(char* log) {
  for (char* p = log; (p = strstr(p, ".cube(")) != NULL;) {
    char* q = p + 6;
    char* digits = q;
    while (*q >= '0' && *q <= '9') ++q;
    if (q == digits || q[0] != ')' || q[1] != ':') {
      p += 6;
      continue;
    }
    p[5] = ':';
    q[0] = ':';
    memmove(q + 1, q + 2, strlen(q + 2) + 1); /* "):" -> ":" */
    p = q + 1;
  }
}

/* Compiles |text| with NVRTC for |d|'s architecture into a cubin blob. */
static cube_status_t cube__cuda_nvrtc_compile(cube__backend_device_t* d, const char* text,
                                              const char* kname, cube__cuda_blob_t** out) {
  CUBE__FAULT_RETURN(CUBE__FAULT_KERNEL_COMPILE, CUBE_STATUS_COMPILATION_FAILED,
                     "compiling kernel '%s' with NVRTC failed", kname);
  const cube__nvrtc_t* nv;
  CUBE_RETURN_IF_ERROR(cube__cuda_nvrtc(&nv));
  char unit[160];
  snprintf(unit, sizeof(unit), "%s.cu", kname);
  nvrtcProgram prog = NULL;
  nvrtcResult r = nv->CreateProgram(&prog, text, unit, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS)
    return cube__status_make(CUBE_STATUS_INTERNAL, "compiling kernel '%s': nvrtcCreateProgram: %s",
                             kname, nv->GetErrorString(r));
  char arch[48];
  snprintf(arch, sizeof(arch), "--gpu-architecture=%s", d->arch);
  const char* opts[] = {arch, "--std=c++17", "-lineinfo", "--device-as-default-execution-space"};
  r = nv->CompileProgram(prog, (int)(sizeof(opts) / sizeof(opts[0])), opts);
  cube_status_t st = CUBE_OK;
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    char* log = NULL;
    if (nv->GetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 0 && (log = malloc(n + 1))) {
      if (nv->GetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
      log[n] = '\0';
      cube__cuda_log_locations(log);
    }
    st = cube__status_make(CUBE_STATUS_COMPILATION_FAILED,
                           "compiling kernel '%s' with NVRTC %d.%d for %s failed (%s):\n%s", kname,
                           nv->major, nv->minor, d->arch, nv->GetErrorString(r),
                           log && log[0] ? log : "(no log)");
    free(log);
  } else {
    size_t n = 0;
    r = nv->GetCUBINSize(prog, &n);
    cube__cuda_blob_t* b = r == NVRTC_SUCCESS && n ? malloc(sizeof(*b) + n) : NULL;
    if (!b) {
      st = cube__status_make(r == NVRTC_SUCCESS ? CUBE_STATUS_OUT_OF_MEMORY : CUBE_STATUS_INTERNAL,
                             "compiling kernel '%s': no cubin (%zu bytes)", kname, n);
    } else if ((r = nv->GetCUBIN(prog, b->data)) != NVRTC_SUCCESS) {
      free(b);
      st = cube__status_make(CUBE_STATUS_INTERNAL, "compiling kernel '%s': nvrtcGetCUBIN: %s",
                             kname, nv->GetErrorString(r));
    } else {
      b->size = n;
      *out = b;
    }
  }
  nv->DestroyProgram(&prog);
  return st;
}

/* The cubin of |key| from the kernel cache (memory, then disk), or compiled
 * and stored. The blob belongs to the cache. */
static cube_status_t cube__cuda_cubin(cube__backend_device_t* d, cube__cache_key_t key,
                                      const char* text, const char* kname,
                                      const cube__cuda_blob_t** out) {
  cube__cuda_blob_t* b = cube__cache_memory_get(key);
  if (b) {
    cube__cache_count_memory_hit();
    *out = b;
    return CUBE_OK;
  }
  uint64_t t0 = cube__now_ns();
  void* data = NULL;
  size_t size = 0;
  cube_status_t st = cube__cache_disk_load(key, "cubin", &data, &size);
  if (!st) {
    b = malloc(sizeof(*b) + size);
    if (!b) {
      free(data);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "kernel '%s': no host memory for its cubin", kname);
    }
    b->size = size;
    memcpy(b->data, data, size);
    free(data);
    cube__cache_count_disk_hit(cube__now_ns() - t0);
    *out = cube__cache_memory_put(key, b, cube__cuda_blob_destroy);
    return CUBE_OK;
  }
  cube_status_free(st);
  uint64_t t1 = cube__now_ns();
  st = cube__cuda_nvrtc_compile(d, text, kname, &b);
  cube__cache_count_miss(cube__now_ns() - t1, st != CUBE_OK);
  if (st) return st;
  cube_status_free(cube__cache_disk_store(key, "cubin", b->data, b->size));
  *out = cube__cache_memory_put(key, b, cube__cuda_blob_destroy);
  return CUBE_OK;
}

/* The function map: open addressing on (kernel id, mode); the table is at
 * most half full. Guarded by fn_lock. */
static uint64_t cube__cuda_fn_key(uint64_t id, uint32_t mode) { return (id << 2) | mode; }

static bool cube__cuda_fn_find(cube__backend_device_t* d, uint64_t id, uint32_t mode,
                               cube__cuda_fn_t* out) {
  if (!d->fn_cap) return false;
  uint64_t key = cube__cuda_fn_key(id, mode);
  for (size_t i = (size_t)(key * 0x9E3779B97F4A7C15ull) & (d->fn_cap - 1);; i = (i + 1) & (d->fn_cap - 1)) {
    const cube__cuda_fn_t* e = &d->fns[i];
    if (!e->fn) return false;
    if (cube__cuda_fn_key(e->kernel_id, e->mode) == key) {
      *out = *e;
      return true;
    }
  }
}

static void cube__cuda_fn_place(cube__cuda_fn_t* table, size_t cap, const cube__cuda_fn_t* e) {
  uint64_t key = cube__cuda_fn_key(e->kernel_id, e->mode);
  size_t i = (size_t)(key * 0x9E3779B97F4A7C15ull) & (cap - 1);
  while (table[i].fn) i = (i + 1) & (cap - 1);
  table[i] = *e;
}

static bool cube__cuda_fn_insert(cube__backend_device_t* d, const cube__cuda_fn_t* e) {
  if ((d->fn_count + 1) * 2 > d->fn_cap) {
    size_t cap = d->fn_cap ? d->fn_cap * 2 : 64;
    cube__cuda_fn_t* table = calloc(cap, sizeof(*table));
    if (!table) return false;
    for (size_t i = 0; i < d->fn_cap; ++i)
      if (d->fns[i].fn) cube__cuda_fn_place(table, cap, &d->fns[i]);
    free(d->fns);
    d->fns = table;
    d->fn_cap = cap;
  }
  cube__cuda_fn_place(d->fns, d->fn_cap, e);
  d->fn_count++;
  return true;
}

static void* cube__grow(void* p, size_t* cap, size_t need, size_t elem) {
  if (need <= *cap) return p;
  size_t c = *cap ? *cap * 2 : 16;
  while (c < need) c *= 2;
  void* q = realloc(p, c * elem);
  if (q) *cap = c;
  return q;
}

/* The function of (|k|, |mode|) on |d|, compiled and loaded on first use. */
static cube_status_t cube__cuda_function(cube__backend_device_t* d, const cube_kernel_t* k,
                                         cube_execution_mode_t mode, cube__cuda_fn_t* out) {
  if (!k->source || !k->signature)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "kernel '%s' has no dialect source: native CPU kernels cannot run on "
                             "cuda device %u",
                             k->name, d->index);
  if ((unsigned)mode > CUBE_EXEC_UNCHECKED)
    return CUBE_INVALID("kernel '%s': execution mode %d is invalid", k->name, (int)mode);
  pthread_mutex_lock(&d->fn_lock);
  bool found = cube__cuda_fn_find(d, k->id, (uint32_t)mode, out);
  pthread_mutex_unlock(&d->fn_lock);
  if (found) return CUBE_OK;

  char* text = NULL;
  cube_status_t st = cube__dialect_generate(CUBE__TARGET_CUDA, k->signature, k->source, k->defines,
                                            k->define_count, mode, &text);
  if (st) return cube__status_annotate(st, "kernel '%s'", k->name);
  static const char* const mode_names[3] = {"checked", "validate", "unchecked"};
  const cube__nvrtc_t* nv = NULL;
  st = cube__cuda_nvrtc(&nv);
  if (st) {
    free(text);
    return cube__status_annotate(st, "kernel '%s'", k->name);
  }
  char nvv[32];
  snprintf(nvv, sizeof(nvv), "nvrtc %d.%d", nv->major, nv->minor);
  const char* parts[] = {"cube", CUBE_VERSION_STRING, "cuda", d->arch, nvv, mode_names[mode], text, NULL};
  cube__cache_key_t key = cube__cache_key(parts);

  /* Serialise per device: a second thread asking for the same kernel waits
   * and finds it loaded. */
  pthread_mutex_lock(&d->fn_lock);
  if (cube__cuda_fn_find(d, k->id, (uint32_t)mode, out)) {
    pthread_mutex_unlock(&d->fn_lock);
    free(text);
    return CUBE_OK;
  }
  cube__cuda_module_t* mod = NULL;
  for (size_t i = 0; i < d->module_count; ++i)
    if (d->modules[i].key.hi == key.hi && d->modules[i].key.lo == key.lo) mod = &d->modules[i];
  if (mod) {
    /* Another kernel object with the same unit: its module is loaded already,
     * an in-memory hit as on every backend. */
    cube__cache_count_memory_hit();
  } else {
    const cube__cuda_blob_t* cubin = NULL;
    st = cube__cuda_cubin(d, key, text, k->name, &cubin);
    CUBE__CUDA_SCOPE(d->ctx);
    CUmodule m = NULL;
    CUfunction f = NULL;
    if (!st) {
      CUresult r = d->cu->ModuleLoadData(&m, cubin->data);
      if (r == CUDA_SUCCESS) r = d->cu->ModuleGetFunction(&f, m, "cube_kernel_entry");
      if (r != CUDA_SUCCESS) {
        if (m) d->cu->ModuleUnload(m);
        st = cube__cuda_error(r, CUBE_STATUS_COMPILATION_FAILED,
                              "kernel '%s': loading its cubin (%zu bytes, %s) on cuda device %u",
                              k->name, cubin->size, d->arch, d->index);
      }
    }
    if (!st) {
      void* grown = cube__grow(d->modules, &d->module_cap, d->module_count + 1, sizeof(*d->modules));
      if (!grown) {
        d->cu->ModuleUnload(m);
        st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "kernel '%s': no host memory", k->name);
      } else {
        d->modules = grown;
        mod = &d->modules[d->module_count++];
        mod->key = key;
        mod->module = m;
        mod->fn = f;
        mod->max_threads = 0;
        if (d->cu->FuncGetAttribute(&mod->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f) !=
            CUDA_SUCCESS)
          mod->max_threads = (int)d->max_threads_per_block;
      }
    }
  }
  if (!st) {
    cube__cuda_fn_t e = {k->id, (uint32_t)mode, mod->fn, mod->max_threads};
    if (!cube__cuda_fn_insert(d, &e))
      st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "kernel '%s': no host memory", k->name);
    else
      *out = e;
  }
  pthread_mutex_unlock(&d->fn_lock);
  free(text);
  return st;
}

static cube_status_t cube__cuda_prepare(cube__backend_device_t* d, const cube_kernel_t* k,
                                        cube_execution_mode_t mode) {
  cube__cuda_fn_t f;
  return cube__cuda_function(d, k, mode, &f);
}

static cube_status_t cube__cuda_launch(cube__backend_device_t* d, void* stream,
                                       const cube__launch_t* l) {
  const cube_kernel_t* k = l->kernel;
  const char* name = l->name ? l->name : (k && k->name ? k->name : "?");
  if (!k) return CUBE_INVALID("launch of kernel '%s': no kernel object", name);
  CUBE__FAULT_RETURN(CUBE__FAULT_CPU_LAUNCH, CUBE_STATUS_LAUNCH_FAILED,
                     "launch of kernel '%s' failed", name);
  cube__cuda_fn_t f;
  CUBE_RETURN_IF_ERROR(cube__cuda_function(d, k, l->mode, &f));
  const uint32_t dim[3] = {l->dim.x, l->dim.y, l->dim.z};
  for (int i = 0; i < 3; ++i) {
    if (dim[i] == 0 || dim[i] > d->max_block[i])
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "launch of kernel '%s': cube dim (%u, %u, %u): %c = %u is outside "
                               "[1, %u]",
                               name, dim[0], dim[1], dim[2], "xyz"[i], dim[i], d->max_block[i]);
    if (l->count[i] > d->max_grid[i])
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "launch of kernel '%s': cube count %c = %u exceeds the device's %u",
                               name, "xyz"[i], l->count[i], d->max_grid[i]);
  }
  uint64_t units = (uint64_t)dim[0] * dim[1] * dim[2];
  if (units > (uint64_t)f.max_threads)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': cube dim (%u, %u, %u) has %" PRIu64
                             " units, more than the %d this kernel can run per cube on %s",
                             name, dim[0], dim[1], dim[2], units, f.max_threads, d->arch);
  if (l->count[0] == 0 || l->count[1] == 0 || l->count[2] == 0) return CUBE_OK;
  if (l->arg_count > CUBE_MAX_KERNEL_ARGS)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE, "launch of kernel '%s': %u arguments, more than %u",
                             name, l->arg_count, CUBE_MAX_KERNEL_ARGS);
  CUBE__CUDA_SCOPE(d->ctx);

  /* Marshalling: pointers into this frame, no allocation. */
  void* params[2 * CUBE_MAX_KERNEL_ARGS + 1];
  CUdeviceptr ptrs[CUBE_MAX_KERNEL_ARGS];
  uint64_t lens[CUBE_MAX_KERNEL_ARGS];
  uint32_t n = 0;
  for (uint32_t i = 0; i < l->arg_count; ++i) {
    if (l->kinds[i] == CUBE_ARG_BUFFER) {
      ptrs[i] = (CUdeviceptr)(uintptr_t)l->args[i].buffer.data;
      lens[i] = l->args[i].buffer.len;
      params[n++] = &ptrs[i];
      params[n++] = &lens[i];
    } else {
      params[n++] = (void*)(uintptr_t)&l->args[i];
    }
  }
  CUstream s = cube__cuda_s(stream);
  CUdeviceptr bounds = d->bounds_dev;
  CUresult r = CUDA_SUCCESS;
  if (l->mode == CUBE_EXEC_VALIDATE) {
    params[n++] = &bounds;
    r = d->cu->MemsetD32Async(bounds, 0, 8, s);
  }
  /* A profiled launch is timed where it runs: events around it. */
  void* ev0 = NULL;
  void* ev1 = NULL;
  if (r == CUDA_SUCCESS && l->device_ns) {
    cube_status_t e = cube__cuda_event_record(d, stream, &ev0);
    if (e) {
      cube_status_free(e);
      ev0 = NULL;
    }
  }
  if (r == CUDA_SUCCESS)
    r = d->cu->LaunchKernel(f.fn, l->count[0], l->count[1], l->count[2], dim[0], dim[1], dim[2], 0,
                            s, params, NULL);
  if (ev0) {
    if (r == CUDA_SUCCESS) {
      cube_status_t e = cube__cuda_event_record(d, stream, &ev1);
      uint64_t ns = 0;
      if (!e) e = cube__cuda_event_elapsed(d, ev0, ev1, &ns);
      if (!e) *l->device_ns = ns;
      cube_status_free(e);
    }
    cube__cuda_event_destroy(d, ev0);
    if (ev1) cube__cuda_event_destroy(d, ev1);
  }
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_LAUNCH_FAILED,
                            "launch of kernel '%s' on cuda device %u, cube count (%u, %u, %u), "
                            "cube dim (%u, %u, %u)",
                            name, d->index, l->count[0], l->count[1], l->count[2], dim[0], dim[1],
                            dim[2]);
  if (l->mode == CUBE_EXEC_VALIDATE) {
    r = d->cu->MemcpyDtoHAsync(d->bounds_host, bounds, 32, s);
    if (r == CUDA_SUCCESS) r = cube__cuda_wait(d, s);
    if (r != CUDA_SUCCESS)
      return cube__cuda_error(r, CUBE_STATUS_LAUNCH_FAILED, "launch of kernel '%s' (Validate mode)", name);
    cube_bounds_error_t b;
    memcpy(&b, d->bounds_host, sizeof(b)); /* the prelude's 8 words, the same layout */
    if (b.flag) return cube__kernel_bounds_status(k, name, &b);
  }
  return CUBE_OK;
}

const cube__backend_vtable_t cube__backend_cuda = {
    .backend = CUBE_BACKEND_CUDA,
    .name = "cuda",
    .flags = CUBE__BACKEND_CALLER_WRITES,
    .availability = cube__cuda_availability,
    .device_count = cube__cuda_device_count,
    .device_create = cube__cuda_device_create,
    .device_destroy = cube__cuda_device_destroy,
    .alloc = cube__cuda_alloc,
    .dealloc = cube__cuda_dealloc,
    .host_alloc = cube__cuda_host_alloc,
    .host_dealloc = cube__cuda_host_dealloc,
    .stream_create = cube__cuda_stream_create,
    .stream_destroy = cube__cuda_stream_destroy,
    .write = cube__cuda_write,
    .read = cube__cuda_read,
    .launch = cube__cuda_launch,
    .prepare = cube__cuda_prepare,
    .sync = cube__cuda_sync,
    .alloc_on = cube__cuda_alloc_on,
    .dealloc_on = cube__cuda_dealloc_on,
    .trim = cube__cuda_trim,
    .event_record = cube__cuda_event_record,
    .event_wait = cube__cuda_event_wait,
    .event_done = cube__cuda_event_done,
    .event_sync = cube__cuda_event_sync,
    .event_destroy = cube__cuda_event_destroy,
    .event_elapsed = cube__cuda_event_elapsed,
};
