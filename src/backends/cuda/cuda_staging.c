/* The CUDA backend's copies between device memory and host memory, and
 * between two device buffers (one cuMemcpyDtoDAsync on the stream).
 *
 * Copies between device memory and ordinary host memory go through a
 * device-wide ring of pinned chunks (CUBE__CUDA_CHUNK each): the host copy of
 * one chunk overlaps the DMA of the others, and large transfers are split
 * over the process's worker pool so that several threads do the host copies.
 * A chunk is reused once the event recorded after its DMA has completed.
 * Small transfers (up to CUBE__CUDA_DIRECT_MAX) and reads into pinned memory
 * skip the ring: one DMA.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "backends/cuda/cuda_backend_internal.h"
#include "base/alloc.h"
#include "base/fault.h"
#include "base/status.h"
#include "platform/platform.h"
#include "platform/worker_pool.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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
      return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: waiting for a staging copy",
                              d->index);
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
  /* A source never touched would take a page fault per 4 KiB inside the
   * copy: mapped first, in one call (cube__prefault). */
  if (x->to_device) {
    cube__prefault(host, (size_t)(rows * cols), false);
    cube__cuda_copy(d->stream_up, s->host, host, (size_t)(rows * cols));
  }
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
      cube__prefault(host, (size_t)(rows * cols), true); /* while the DMA runs */
      r = d->cu->EventSynchronize(s->done);
      if (r == CUDA_SUCCESS) {
        s->pending = false;
        cube__cuda_copy(d->stream_down, host, s->host, (size_t)(rows * cols));
      }
    }
  }
  cube__cuda_slot_give(d, slot);
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: %s copy of %" PRIu64 " bytes",
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
    return CUBE_INVALID("cuda:%u %s: pitch %" PRIu64
                        " is smaller than the row width %" PRIu64,
                        d->index, op, pitch, width);
  uint64_t span, last;
  if (cube__mul_overflow_u64(height - 1, pitch, &span) ||
      cube__add_overflow_u64(span, width, &span) || cube__add_overflow_u64(offset, span, &last) ||
      last > storage->size)
    return cube__status_make(
        CUBE_STATUS_OUT_OF_RANGE,
        "cuda:%u %s: %" PRIu64 " rows of %" PRIu64 " bytes, pitch %" PRIu64
        ", at offset %" PRIu64 " exceed storage %" PRIu64 " of %" PRIu64 " bytes",
        d->index, op, height, width, pitch, offset, storage->id, storage->size);
  return CUBE_OK;
}

cube_status_t cube__cuda_write(cube__backend_device_t* d, void* stream,
                               const cube__storage_t* dst, uint64_t dst_offset,
                               uint64_t pitch, const void* src, uint64_t width,
                               uint64_t height) {
  if (width == 0 || height == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__cuda_check_rows(d, "write", dst, dst_offset, pitch, width, height));
  CUBE__CUDA_SCOPE(d->ctx);
  CUstream s = cube__cuda_s(stream);
  CUdeviceptr to = (CUdeviceptr)(uintptr_t)dst->ptr + dst_offset;
  if ((height == 1 || pitch == width) && width * height <= CUBE__CUDA_DIRECT_MAX) {
    /* A small upload: the driver copies pageable memory into its own staging
     * before the call returns, so |src| is free again at once. */
    CUresult r = d->cu->MemcpyHtoDAsync(to, src, (size_t)(width * height), s);
    if (r != CUDA_SUCCESS)
      return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: host-to-device copy of %" PRIu64
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

cube_status_t cube__cuda_read(cube__backend_device_t* d, void* stream, void* dst,
                              const cube__storage_t* src, uint64_t src_offset,
                              uint64_t pitch, uint64_t width, uint64_t height) {
  if (width == 0 || height == 0) return CUBE_OK;
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
      return cube__cuda_error(r, CUBE_STATUS_OK,
                              "cuda:%u: device-to-host copy of %" PRIu64 " bytes", d->index,
                              width * height);
    return CUBE_OK;
  }
  cube__cuda_xfer_t x;
  cube__cuda_xfer_init(&x, d, s, from, dst, pitch, width, height, false);
  return cube__cuda_xfer_run(&x);
}

cube_status_t cube__cuda_device_copy(cube__backend_device_t* d, void* stream,
                                     const cube__storage_t* dst, uint64_t dst_offset,
                                     const cube__storage_t* src, uint64_t src_offset,
                                     uint64_t bytes) {
  if (bytes == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__cuda_check_rows(d, "copy from", src, src_offset, bytes, bytes, 1));
  CUBE_RETURN_IF_ERROR(cube__cuda_check_rows(d, "copy to", dst, dst_offset, bytes, bytes, 1));
  CUBE__CUDA_SCOPE(d->ctx);
  CUdeviceptr from = (CUdeviceptr)(uintptr_t)src->ptr + src_offset;
  CUdeviceptr to = (CUdeviceptr)(uintptr_t)dst->ptr + dst_offset;
  CUresult r = d->cu->MemcpyDtoDAsync(to, from, (size_t)bytes, cube__cuda_s(stream));
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_OK,
                            "cuda:%u: device-to-device copy of %" PRIu64 " bytes from storage %"
                            PRIu64 " (offset %" PRIu64 ") to storage %" PRIu64 " (offset %" PRIu64
                            ")",
                            d->index, bytes, src->id, src_offset, dst->id, dst_offset);
  return CUBE_OK;
}
