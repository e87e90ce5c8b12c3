/* The CUDA backend's storage, streams and events.
 *
 * - Storage: stream-ordered cuMemAllocAsync/cuMemFreeAsync on the allocating
 *   stream's CUDA stream (plain cuMemAlloc where memory pools are not
 *   supported), under cube's pools. Pinned staging: cuMemHostAlloc.
 * - Streams: one non-blocking CUDA stream per server stream.
 * - Events: recycled through a per-device list of spares (under ring_lock).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "backends/cuda/cuda_backend_internal.h"
#include "base/fault.h"
#include "base/status.h"
#include "platform/platform.h"

static atomic_uint_fast64_t cube__cuda_next_storage_id = 1;

//===----------------------------------------------------------------------===//
// Storage
//===----------------------------------------------------------------------===//

/* Waits for |s|. If that wait fails, the whole context is waited for as
 * well, so that no copy can still be running into memory the caller is about
 * to give back; the first failure is returned. */
CUresult cube__cuda_wait(cube__backend_device_t* d, CUstream s) {
  CUresult r = s ? d->cu->StreamSynchronize(s) : d->cu->CtxSynchronize();
  if (r != CUDA_SUCCESS && s) d->cu->CtxSynchronize();
  return r;
}

cube_status_t cube__cuda_oom(cube__backend_device_t* d, CUresult r, uint64_t size,
                             const char* how) {
  char a[32], b[32];
  size_t free_b = 0, total_b = 0;
  d->cu->MemGetInfo(&free_b, &total_b);
  return cube__cuda_error(
      r, CUBE_STATUS_OK, "cuda:%u: %s of %s failed (%s free on the device)", d->index, how,
      cube__format_bytes(size, a, sizeof(a)), cube__format_bytes(free_b, b, sizeof(b)));
}

cube_status_t cube__cuda_alloc_on(cube__backend_device_t* d, void* stream, uint64_t size,
                                  cube__storage_t* out) {
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
  if (r != CUDA_SUCCESS)
    return cube__cuda_oom(d, r, size, async ? "cuMemAllocAsync" : "cuMemAlloc");
  out->id = atomic_fetch_add_explicit(&cube__cuda_next_storage_id, 1, memory_order_relaxed);
  out->ptr = (void*)(uintptr_t)p;
  out->size = size;
  /* (device index + 1) << 1 | stream-ordered: enough to free it with no
   * device object (memory a DLPack export kept past cube_shutdown). */
  out->backend_data = (void*)(((uintptr_t)d->index + 1) << 1 | (async ? 1u : 0u));
  return CUBE_OK;
}

void cube__cuda_dealloc_on(cube__backend_device_t* d, void* stream,
                           const cube__storage_t* s) {
  if (!s || !s->ptr) return;
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)s->ptr;
  uintptr_t tag = (uintptr_t)s->backend_data;
  if (!d) {
    /* After device_destroy: the primary context is retained for the process. */
    const cube__cuda_driver_t* cu;
    cube_status_t st = cube__cuda_driver(&cu);
    CUcontext ctx = (tag >> 1) ? cube__cuda_primary_context((uint32_t)((tag >> 1) - 1)) : NULL;
    if (st || !ctx) {
      cube_status_free(st);
      return;
    }
    CUBE__CUDA_SCOPE(ctx);
    cu->MemFree(p);
    return;
  }
  CUBE__CUDA_SCOPE(d->ctx);
  if ((tag & 1u) && stream)
    d->cu->MemFreeAsync(p, cube__cuda_s(stream));
  else
    d->cu->MemFree(p);
}

cube_status_t cube__cuda_alloc(cube__backend_device_t* d, uint64_t size,
                               cube__storage_t* out) {
  return cube__cuda_alloc_on(d, NULL, size, out);
}

void cube__cuda_dealloc(cube__backend_device_t* d, const cube__storage_t* s) {
  cube__cuda_dealloc_on(d, NULL, s);
}

void cube__cuda_trim(cube__backend_device_t* d, void* stream) {
  if (!d->async_alloc || !d->cu->MemPoolTrimTo) return;
  CUBE__CUDA_SCOPE(d->ctx);
  if (stream) cube__cuda_wait(d, cube__cuda_s(stream));
  d->cu->MemPoolTrimTo(d->mempool, 0);
}

cube_status_t cube__cuda_host_alloc(cube__backend_device_t* d, uint64_t size,
                                    cube__storage_t* out) {
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
void cube__cuda_host_dealloc(cube__backend_device_t* d, const cube__storage_t* s) {
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

cube_status_t cube__cuda_stream_create(cube__backend_device_t* d, uint64_t stream_id,
                                       void** out_stream) {
  CUBE__CUDA_SCOPE(d->ctx);
  cube__cuda_stream_t* s = calloc(1, sizeof(*s));
  if (!s)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cuda stream %" PRIu64 ": no host memory",
                             stream_id);
  s->id = stream_id;
  CUresult r = d->cu->StreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    free(s);
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuStreamCreate for stream %" PRIu64,
                            d->index, stream_id);
  }
  *out_stream = s;
  return CUBE_OK;
}

void cube__cuda_stream_destroy(cube__backend_device_t* d, void* stream) {
  cube__cuda_stream_t* s = stream;
  if (!s) return;
  if (!atomic_load(&d->lost)) { /* a lost device's stream stays with the driver */
    CUBE__CUDA_SCOPE(d->ctx);
    cube__cuda_activity_before_wait(d, s);
    cube__cuda_wait(d, s->stream);
    d->cu->StreamDestroy(s->stream);
  }
  cube__cuda_activity_stream_gone(s);
  free(s);
}

cube_status_t cube__cuda_sync(cube__backend_device_t* d, void* stream) {
  CUBE__CUDA_SCOPE(d->ctx);
  cube__cuda_activity_before_wait(d, stream);
  CUresult r = cube__cuda_wait(d, cube__cuda_s(stream));
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_LAUNCH_FAILED,
                            "cuda:%u: synchronising the stream", d->index);
  return CUBE_OK;
}

/* Events are recycled: cuEventCreate costs about a microsecond, and a
 * buffer used across streams records one per launch. Giving an event back
 * before it completed is safe: a wait captures the record it was called
 * after, and a later record starts a new one. */
cube_status_t cube__cuda_event_record(cube__backend_device_t* d, void* stream, void** out) {
  CUBE__CUDA_SCOPE(d->ctx);
  CUevent e = NULL;
  pthread_mutex_lock(&d->ring_lock);
  if (d->spare_event_count) e = d->spare_events[--d->spare_event_count];
  pthread_mutex_unlock(&d->ring_lock);
  if (!e)
    CUBE__CU_TRY(d, d->cu->EventCreate(&e, CU_EVENT_DEFAULT), "cuda:%u: cuEventCreate",
                 d->index);
  CUresult r = d->cu->EventRecord(e, cube__cuda_s(stream));
  if (r != CUDA_SUCCESS) {
    d->cu->EventDestroy(e);
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuEventRecord", d->index);
  }
  *out = e;
  return CUBE_OK;
}

cube_status_t cube__cuda_event_wait(cube__backend_device_t* d, void* stream, void* event) {
  CUBE__CUDA_SCOPE(d->ctx);
  CUBE__CU_TRY(d, d->cu->StreamWaitEvent(cube__cuda_s(stream), (CUevent)event, 0),
               "cuda:%u: cuStreamWaitEvent", d->index);
  return CUBE_OK;
}

bool cube__cuda_event_done(cube__backend_device_t* d, void* event) {
  CUBE__CUDA_SCOPE(d->ctx);
  return d->cu->EventQuery((CUevent)event) != CUDA_ERROR_NOT_READY;
}

cube_status_t cube__cuda_event_sync(cube__backend_device_t* d, void* event) {
  CUBE__CUDA_SCOPE(d->ctx);
  CUresult r = d->cu->EventSynchronize((CUevent)event);
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_LAUNCH_FAILED, "cuda:%u: cuEventSynchronize",
                            d->index);
  return CUBE_OK;
}

void cube__cuda_event_destroy(cube__backend_device_t* d, void* event) {
  if (!event) return;
  pthread_mutex_lock(&d->ring_lock);
  bool kept = d->spare_event_count < CUBE__CUDA_SPARE_EVENTS;
  if (kept) d->spare_events[d->spare_event_count++] = (CUevent)event;
  pthread_mutex_unlock(&d->ring_lock);
  if (kept) return;
  CUBE__CUDA_SCOPE(d->ctx);
  d->cu->EventDestroy((CUevent)event);
}

cube_status_t cube__cuda_event_elapsed(cube__backend_device_t* d, void* start, void* end,
                                       uint64_t* out_ns) {
  CUBE__CUDA_SCOPE(d->ctx);
  float ms = 0;
  CUBE__CU_TRY(d, d->cu->EventSynchronize((CUevent)end), "cuda:%u: cuEventSynchronize",
               d->index);
  CUBE__CU_TRY(d, d->cu->EventElapsedTime(&ms, (CUevent)start, (CUevent)end),
               "cuda:%u: cuEventElapsedTime", d->index);
  *out_ns = ms <= 0 ? 0 : (uint64_t)((double)ms * 1e6);
  return CUBE_OK;
}
