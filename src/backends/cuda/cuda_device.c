/* The CUDA backend's devices: every GPU the driver reports, one client each.
 * A device retains its GPU's primary context for the life of the process
 * (pinned read results may outlive cube_shutdown; they belong to that
 * context), reads its properties and limits, takes the process's worker pool
 * for the staging ring's host copies and sets the ring's tunables from its
 * cube_cuda_params_t (cube_server_options_t.backend_params; without them the
 * option table's CUBE_CUDA_COPY_THREADS, CUBE_CUDA_STAGING_CHUNK,
 * CUBE_CUDA_STREAM_COPY, CUBE_CUDA_ASYNC_ALLOC). Teardown gives back what
 * every other file of the backend put into the device.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_backend_internal.h"
#include "backends/params.h"
#include "base/options.h"
#include "base/status.h"
#include "cube/backends/cuda.h"
#include "cube/cube.h"
#include "platform/platform.h"
#include "platform/worker_pool.h"

/* Primary contexts, retained once per device for the process. */
static pthread_mutex_t cube__cuda_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext cube__cuda_ctxs[CUBE__CUDA_MAX_DEVICES];

//===----------------------------------------------------------------------===//
// Devices
//===----------------------------------------------------------------------===//

CUcontext cube__cuda_primary_context(uint32_t index) {
  if (index >= CUBE__CUDA_MAX_DEVICES) return NULL;
  pthread_mutex_lock(&cube__cuda_ctx_lock);
  CUcontext ctx = cube__cuda_ctxs[index];
  pthread_mutex_unlock(&cube__cuda_ctx_lock);
  return ctx;
}

cube_status_t cube__cuda_availability(void) {
  const cube__cuda_driver_t* cu;
  CUBE_RETURN_IF_ERROR(cube__cuda_driver(&cu));
  int n = 0;
  CUresult r = cu->DeviceGetCount(&n);
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_UNAVAILABLE,
                            "cuda backend unavailable: cuDeviceGetCount");
  if (n <= 0)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cuda backend unavailable: the driver reports no GPU");
  return CUBE_OK;
}

uint32_t cube__cuda_device_count(void) {
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
  /* A lost device's context answers every call with its fault (or hangs):
   * its staging chunks, events, modules and bounds record are left to the
   * driver (docs/failures.md, "Lost devices"). */
  if (d->ctx && !atomic_load(&d->lost)) {
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
                                            const cube_cuda_params_t* prm,
                                            cube_device_properties_t* p,
                                            cube_features_t* out_features,
                                            cube_backend_info_t* out_info, uint32_t count);

/* The device's parameters: the caller's (checked against what the options
 * they mirror accept), else the option table's. */
static cube_status_t cube__cuda_params_take(const cube_server_options_t* options, uint32_t index,
                                            cube_cuda_params_t* prm) {
  cube_cuda_params_initialize(prm);
  char what[96];
  snprintf(what, sizeof(what), "cuda:%u", index);
  if (!options || !options->backend_params) {
    static const cube__option_id_t mirrored[] = {
        CUBE__OPT_CUDA_STAGING_CHUNK, CUBE__OPT_CUDA_COPY_THREADS, CUBE__OPT_CUDA_STREAM_COPY,
        CUBE__OPT_CUDA_ASYNC_ALLOC};
    for (size_t i = 0; i < sizeof(mirrored) / sizeof(mirrored[0]); ++i) {
      cube_status_t st = cube__option_status(mirrored[i]);
      if (st) return cube__status_annotate(st, "%s", what);
    }
    return CUBE_OK;
  }
  CUBE_RETURN_IF_ERROR(cube__backend_params_take(options, CUBE_BACKEND_CUDA, what,
                                                 sizeof(cube_cuda_params_t),
                                                 sizeof(cube_cuda_params_t), prm));
  snprintf(what, sizeof(what), "cuda:%u: backend_params.staging_chunk", index);
  CUBE_RETURN_IF_ERROR(
      cube__option_check_value(CUBE__OPT_CUDA_STAGING_CHUNK, prm->staging_chunk, what));
  if (prm->copy_threads) {
    snprintf(what, sizeof(what), "cuda:%u: backend_params.copy_threads", index);
    CUBE_RETURN_IF_ERROR(
        cube__option_check_value(CUBE__OPT_CUDA_COPY_THREADS, prm->copy_threads, what));
  }
  snprintf(what, sizeof(what), "cuda:%u: backend_params.stream_copy", index);
  return cube__option_check_value(CUBE__OPT_CUDA_STREAM_COPY, (uint64_t)prm->stream_copy, what);
}

static cube_status_t cube__cuda_device_open(uint32_t index, const cube_server_options_t* options,
                                            cube__backend_device_t** out_device,
                                            cube_device_properties_t* p,
                                            cube_features_t* out_features,
                                            cube_backend_info_t* out_info);

/* The primary context of |index| reset (cuDevicePrimaryCtxReset) and
 * forgotten, so that the next open retains the one the driver has now: for
 * a device lost before a cube_shutdown, opened by cube_device_recover
 * (cube__backend_open_may_reset). */
static cube_status_t cube__cuda_primary_reset(uint32_t index) {
  const cube__cuda_driver_t* cu;
  CUBE_RETURN_IF_ERROR(cube__cuda_driver(&cu));
  CUdevice dev;
  CUresult r = cu->DeviceGet(&dev, (int)index);
  if (r != CUDA_SUCCESS) return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuDeviceGet", index);
  pthread_mutex_lock(&cube__cuda_ctx_lock);
  r = cu->DevicePrimaryCtxReset(dev);
  if (r == CUDA_SUCCESS) cube__cuda_ctxs[index] = NULL;
  pthread_mutex_unlock(&cube__cuda_ctx_lock);
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuDevicePrimaryCtxReset", index);
  return CUBE_OK;
}

cube_status_t cube__cuda_device_create(uint32_t index, const cube_server_options_t* options,
                                       cube__backend_device_t** out_device,
                                       cube_device_properties_t* p,
                                       cube_features_t* out_features,
                                       cube_backend_info_t* out_info) {
  cube_status_t st = cube__cuda_device_open(index, options, out_device, p, out_features, out_info);
  if (cube_status_code(st) != CUBE_STATUS_DEVICE_LOST || !cube__backend_open_may_reset ||
      index >= CUBE__CUDA_MAX_DEVICES)
    return st;
  /* Lost before: reset and open once more (a GPU whose driver refuses the
   * process a new context fails again, with DEVICE_LOST). */
  cube_status_t reset = cube__cuda_primary_reset(index);
  if (reset) {
    cube_status_free(st);
    return cube__status_annotate(reset, "cuda:%u was lost before and could not be reset", index);
  }
  cube_status_free(st);
  return cube__cuda_device_open(index, options, out_device, p, out_features, out_info);
}

static cube_status_t cube__cuda_device_open(uint32_t index, const cube_server_options_t* options,
                                            cube__backend_device_t** out_device,
                                            cube_device_properties_t* p,
                                            cube_features_t* out_features,
                                            cube_backend_info_t* out_info) {
  cube_cuda_params_t prm;
  CUBE_RETURN_IF_ERROR(cube__cuda_params_take(options, index, &prm));
  const cube__cuda_driver_t* cu;
  CUBE_RETURN_IF_ERROR(cube__cuda_driver(&cu));
  uint32_t count = cube__cuda_device_count();
  if (index >= count)
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "cuda:%u does not exist (%u GPU%s)",
                             index, count, count == 1 ? "" : "s");
  cube__backend_device_t* d = calloc(1, sizeof(*d));
  if (!d)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cuda:%u: no host memory", index);
  pthread_mutex_init(&d->ring_lock, NULL);
  pthread_cond_init(&d->ring_cond, NULL);
  pthread_mutex_init(&d->fn_lock, NULL);
  d->index = index;
  d->cu = cu;
  cube_status_t st = CUBE_OK;
  CUresult r = cu->DeviceGet(&d->dev, (int)index);
  if (r != CUDA_SUCCESS) {
    st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuDeviceGet", index);
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
    st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuDevicePrimaryCtxRetain", index);
    goto fail;
  }
  {
    CUBE__CUDA_SCOPE(d->ctx);
    size_t free_b = 0, total_b = 0;
    if (cu->MemGetInfo(&free_b, &total_b) == CUDA_SUCCESS && total_b >= free_b)
      d->used_at_open = total_b - free_b;
    st = cube__cuda_device_read(d, index, &prm, p, out_features, out_info, count);
  }
  if (st) goto fail;
  *out_device = d;
  return CUBE_OK;
fail:
  cube__cuda_device_free(d);
  return st;
}

static cube_status_t cube__cuda_device_read(cube__backend_device_t* d, uint32_t index,
                                            const cube_cuda_params_t* prm,
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
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuDeviceTotalMem", index);
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
  d->max_threads_per_block =
      (uint32_t)cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  d->async_alloc = cu->MemAllocAsync && cu->MemFreeAsync && cu->DeviceGetDefaultMemPool &&
                   cube__cuda_attr(d, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) != 0;
  if (!prm->async_alloc) d->async_alloc = false;
  if (d->async_alloc && cu->DeviceGetDefaultMemPool(&d->mempool, d->dev) != CUDA_SUCCESS)
    d->async_alloc = false;
  if (d->async_alloc && cu->MemPoolSetAttribute) {
    /* cube's pools cache; the driver's pool gives memory back at each sync. */
    cuuint64_t threshold = 0;
    cu->MemPoolSetAttribute(d->mempool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
  }
  r = cu->MemAlloc(&d->bounds_dev, 64);
  if (r == CUDA_SUCCESS)
    r = cu->MemHostAlloc((void**)&d->bounds_host, 64, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) {
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: bounds record", index);
  }
  st = cube__worker_pool_acquire(&d->workers);
  if (st) return st;
  d->copy_threads = cube__worker_pool_size(d->workers);
  if (d->copy_threads > CUBE__CUDA_MAX_COPY_THREADS) d->copy_threads = CUBE__CUDA_MAX_COPY_THREADS;
  /* Tunables of the staging ring (docs/benchmarks.md has the measurements
   * behind the defaults): threads that copy one transfer, chunk size; their
   * ranges were checked by cube__cuda_params_take. */
  if (prm->copy_threads) d->copy_threads = prm->copy_threads;
  if (d->copy_threads > cube__worker_pool_size(d->workers))
    d->copy_threads = cube__worker_pool_size(d->workers);
  if (d->copy_threads < 1) d->copy_threads = 1;
  d->chunk = prm->staging_chunk; /* CUBE__CUDA_CHUNK unless given */
  d->max_slots = (uint32_t)(CUBE__CUDA_RING_BYTES / d->chunk);
  if (d->max_slots > CUBE__CUDA_MAX_SLOTS) d->max_slots = CUBE__CUDA_MAX_SLOTS;
  if (d->max_slots < 4) d->max_slots = 4;
  /* Non-temporal stores pay on downloads (the copy out of a chunk into the
   * caller's memory) and not on uploads (a chunk written with plain stores
   * is still in the cache when the DMA engine reads it): measured on an
   * H200 host, docs/benchmarks.md. */
  d->stream_up = prm->stream_copy == CUBE_CUDA_STREAM_COPY_UP ||
                 prm->stream_copy == CUBE_CUDA_STREAM_COPY_BOTH;
  d->stream_down = prm->stream_copy == CUBE_CUDA_STREAM_COPY_DOWN ||
                   prm->stream_copy == CUBE_CUDA_STREAM_COPY_BOTH;

  if (p) {
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "cuda:%u (%.80s, %.15s)", index, d->name, d->arch);
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
    p->hardware.num_tensor_cores =
        d->cc_major >= 7 ? 4 * p->hardware.num_streaming_multiprocessors : 0;
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

cube_status_t cube__cuda_device_reset(cube__backend_device_t* d) {
  const cube__cuda_driver_t* cu = d->cu;
  if (!atomic_load(&d->lost))
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "cuda:%u: reset of a device that is not lost", d->index);
  /* Nothing else calls the backend about the device meanwhile (backend.h);
   * the locks order this against a straggler all the same. */
  pthread_mutex_lock(&d->fn_lock);
  pthread_mutex_lock(&d->ring_lock);
  CUresult r = cu->DevicePrimaryCtxReset(d->dev);
  cube_status_t st = CUBE_OK;
  if (r != CUDA_SUCCESS) {
    st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuDevicePrimaryCtxReset", d->index);
    goto out;
  }
  /* What the old context held is gone with it: only the records go here. */
  memset(d->slots, 0, sizeof(d->slots));
  d->slot_count = 0;
  d->free_head = d->free_tail = d->free_count = 0;
  d->spare_event_count = 0;
  d->fn_count = 0;
  d->module_count = 0;
  atomic_store(&d->module_bytes, 0);
  d->bounds_dev = 0;
  d->bounds_host = NULL;
  /* The handle of a reset primary context stays retained; retaining it
   * again gives the handle the driver has now. */
  CUcontext ctx = NULL;
  pthread_mutex_lock(&cube__cuda_ctx_lock);
  r = cu->DevicePrimaryCtxRetain(&ctx, d->dev);
  if (r == CUDA_SUCCESS) cube__cuda_ctxs[d->index] = ctx;
  pthread_mutex_unlock(&cube__cuda_ctx_lock);
  if (r != CUDA_SUCCESS) {
    /* Measured on an H200 (driver 580.159.04, CUDA 13.0; docs/failures.md):
     * after an illegal address the driver refuses this process every new
     * context of the GPU, primary or created, with the fault's own code,
     * however the old one was released and reset. NVIDIA documents these
     * errors as needing a new process. */
    if (cube__cuda_sticky(r))
      st = cube__cuda_error(r, CUBE_STATUS_OK,
                            "cuda:%u: cuDevicePrimaryCtxRetain after the reset: the CUDA driver "
                            "refuses this process a new context of the GPU after a sticky fault "
                            "(only a new process can use it again; other devices keep working)",
                            d->index);
    else
      st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuDevicePrimaryCtxRetain after the reset",
                            d->index);
    goto out;
  }
  d->ctx = ctx;
  {
    CUBE__CUDA_SCOPE(d->ctx);
    size_t free_b = 0, total_b = 0;
    if (cu->MemGetInfo(&free_b, &total_b) == CUDA_SUCCESS && total_b >= free_b)
      d->used_at_open = total_b - free_b;
    if (d->async_alloc && cu->DeviceGetDefaultMemPool(&d->mempool, d->dev) == CUDA_SUCCESS &&
        cu->MemPoolSetAttribute) {
      cuuint64_t threshold = 0;
      cu->MemPoolSetAttribute(d->mempool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
    }
    r = cu->MemAlloc(&d->bounds_dev, 64);
    if (r == CUDA_SUCCESS)
      r = cu->MemHostAlloc((void**)&d->bounds_host, 64, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS)
      st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: bounds record after the reset", d->index);
  }
  if (!st) {
    atomic_fetch_add(&d->epoch, 1);
    atomic_store(&d->lost, false);
  }
out:
  pthread_mutex_unlock(&d->ring_lock);
  pthread_mutex_unlock(&d->fn_lock);
  return st;
}

void cube__cuda_device_destroy(cube__backend_device_t* d) {
  cube__cuda_activity_device_gone(d);
  cube__cuda_device_free(d);
}
