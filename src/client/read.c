/* The client API: reading memory (read, read_async, read_one, read_into,
 * read_tensor). Validation and the regions here; the read itself is the
 * server's (cube__server_read, cube__server_read_wait): on the calling thread
 * when the device has nothing queued before it, else a task on the runner. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "client/client_internal.h"
#include "client/policy.h"
#include "server/future.h"

/* Reads the |count| regions |r| (heap, freed here; each holds a binding
 * reference, given back on failure) on the client's stream: into a future
 * when |out| is not NULL, else waiting, into |out_bytes|. */
/* Queues (or runs) the read of |count| regions |r| (freed here when |heap|). */
/* Under an override that reads nothing back (cube/execution.h): zeros of
 * each region's size, the device untouched. */
static cube_status_t cube__read_zeros(cube_client_t* c, const char* fn, size_t count,
                                      cube__read_region_t* r, bool heap, cube_future_t** out,
                                      cube_bytes_t** out_bytes) {
  cube_execution_override_t* o = cube__client_override(c);
  cube_status_t st = CUBE_OK;
  cube_future_t* f = out ? cube__future_create(count) : NULL;
  if (out && !f) st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  cube_bytes_t** results = f ? cube__future_results(f) : out_bytes;
  size_t made = 0;
  for (; !st && made < count; ++made) {
    uint64_t n = r[made].width * r[made].height;
    st = cube_bytes_allocate((size_t)n, &results[made]);
    if (st) st = cube__status_annotate(st, "%s", fn);
  }
  for (size_t j = 0; j < count; ++j) cube__memory_unref(r[j].mem);
  if (heap) free(r);
  if (st) {
    for (size_t j = 0; j + 1 < made; ++j) {
      cube_bytes_release(results[j]);
      results[j] = NULL;
    }
    cube__future_discard(f);
    return st;
  }
  cube__override_count(o, CUBE__EXEC_READ_SKIPPED);
  if (f) {
    cube__future_complete(f, CUBE_OK);
    *out = f;
  }
  return CUBE_OK;
}

static cube_status_t cube__read_queue(cube_client_t* c, const char* fn, size_t count,
                                      cube__read_region_t* r, bool heap, cube_future_t** out,
                                      cube_bytes_t** out_bytes, bool direct) {
  if (!direct && cube__override_skips_work(cube__client_override(c)))
    return cube__read_zeros(c, fn, count, r, heap, out, out_bytes);
  cube__stream_t* stream;
  cube_status_t st = cube__client_stream(c, &stream);
  if (!st && cube__stream_capturing(stream))
    st = cube__stream_capture_refusal(stream, fn, "a read");
  if (!st && cube__stream_auto(stream)) {
    cube__auto_step_end(stream, "a read");
    for (size_t j = 0; j < count; ++j) cube__auto_touch(stream, r[j].mem);
  }
  if (st) {
    for (size_t j = 0; j < count; ++j) cube__memory_unref(r[j].mem);
  } else {
    /* The read's own failures (the stream's deferred errors, spoiled
     * contents, a refusal from inside a device task) start with the call. */
    st = out ? cube__server_read(stream, count, r, out)
             : cube__server_read_wait(stream, count, r, out_bytes);
    if (st) st = cube__status_annotate(st, "%s", fn);
  }
  if (heap) free(r);
  return st;
}

static cube_status_t cube__read_handles(cube_client_t* c, const char* fn, size_t count,
                                        const cube_handle_t* handles, cube_future_t** out,
                                        cube_bytes_t** out_bytes, bool direct) {
  CUBE__CHECK_CLIENT(c, fn);
  if (count == 0) return CUBE_INVALID("%s: count is 0", fn);
  if (!handles) return CUBE_INVALID("%s: handles is NULL", fn);
  cube__read_region_t small[4];
  bool heap = count > sizeof(small) / sizeof(small[0]);
  cube__read_region_t* r = heap ? calloc(count, sizeof(*r)) : small;
  if (!r) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  for (size_t i = 0; i < count; ++i) {
    cube__handle_info_t info;
    cube_status_t st = cube__client_handle_f(c, handles[i], &info, "%s: handles[%zu]", fn, i);
    if (st) {
      for (size_t j = 0; j < i; ++j) cube__memory_unref(r[j].mem);
      if (heap) free(r);
      return st;
    }
    cube__memory_ref(info.mem);
    uint64_t n = cube__handle_view_size(&info);
    r[i] = (cube__read_region_t){info.mem, info.offset_start, n, 1, n, NULL};
  }
  return cube__read_queue(c, fn, count, r, heap, out, out_bytes, direct);
}

cube_status_t cube_client_read_async(cube_client_t* c, size_t count, const cube_handle_t* handles,
                                     cube_future_t** out_future) {
  CUBE__CHECK_OUT(out_future, "cube_client_read_async", "out_future");
  return cube__read_handles(c, "cube_client_read_async", count, handles, out_future, NULL, false);
}

cube_status_t cube_client_read(cube_client_t* c, size_t count, const cube_handle_t* handles,
                               cube_bytes_t** out_bytes) {
  CUBE__CHECK_OUT(out_bytes, "cube_client_read", "out_bytes");
  return cube__read_handles(c, "cube_client_read", count, handles, NULL, out_bytes, false);
}

cube_status_t cube_client_read_one(cube_client_t* c, cube_handle_t handle,
                                   cube_bytes_t** out_bytes) {
  CUBE__CHECK_OUT(out_bytes, "cube_client_read_one", "out_bytes");
  return cube__read_handles(c, "cube_client_read_one", 1, &handle, NULL, out_bytes, false);
}

cube_status_t cube__client_read_direct(cube_client_t* c, cube_handle_t handle,
                                       cube_bytes_t** out_bytes) {
  CUBE__CHECK_OUT(out_bytes, "cube_tune_op_launch", "out_bytes");
  return cube__read_handles(c, "cube_tune_op_launch: reading an output", 1, &handle, NULL,
                            out_bytes, true);
}

cube_status_t cube_client_read_into(cube_client_t* c, cube_handle_t handle, void* dst,
                                    size_t dst_size) {
  static const char fn[] = "cube_client_read_into";
  CUBE__CHECK_CLIENT(c, fn);
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, handle, &info, "%s: handle", fn));
  uint64_t n = cube__handle_view_size(&info);
  if (dst_size != n)
    return CUBE_INVALID("%s: handle 0x%" PRIx64 " views %" PRIu64 " bytes, dst_size is %zu", fn,
                        handle.id, n, dst_size);
  if (!dst && n) return CUBE_INVALID("%s: dst is NULL (%zu bytes to read)", fn, dst_size);
  cube_execution_override_t* o = cube__client_override(c);
  if (cube__override_skips_work(o)) {
    if (n) memset(dst, 0, dst_size);
    cube__override_count(o, CUBE__EXEC_READ_SKIPPED);
    return CUBE_OK;
  }
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_capturing(stream)) return cube__stream_capture_refusal(stream, fn, "a read");
  if (cube__stream_auto(stream)) {
    cube__auto_step_end(stream, "a read");
    cube__auto_touch(stream, info.mem);
  }
  cube__memory_ref(info.mem);
  cube__read_region_t r = {info.mem, info.offset_start, n, 1, n, dst};
  cube_bytes_t* none = NULL; /* a read into the caller's memory has no buffer */
  cube_status_t st = cube__server_read_wait(stream, 1, &r, &none);
  cube_bytes_release(none);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

static cube_status_t cube__read_tensors(cube_client_t* c, const char* fn, size_t count,
                                        const cube_tensor_t* tensors, cube_future_t** out,
                                        cube_bytes_t** out_bytes) {
  CUBE__CHECK_CLIENT(c, fn);
  if (count == 0) return CUBE_INVALID("%s: count is 0", fn);
  if (!tensors) return CUBE_INVALID("%s: tensors is NULL", fn);
  cube__read_region_t* r = calloc(count, sizeof(*r));
  if (!r) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  cube_status_t st = CUBE_OK;
  size_t i = 0;
  for (; i < count; ++i) {
    const cube_tensor_t* t = &tensors[i];
    char what[96];
    snprintf(what, sizeof(what), "%s: tensors[%zu].handle", fn, i);
    cube__handle_info_t info;
    st = cube__client_handle(c, t->handle, what, &info);
    if (st) break;
    cube_layout_desc_t d;
    st = cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, t->rank, t->shape, t->elem_size, &d);
    if (st) {
      st = cube__status_annotate(st, "%s: tensors[%zu]", fn, i);
      break;
    }
    if (!cube_layout_strides_readable(c->server->props.layout_policy, t->rank, t->shape,
                                      t->strides)) {
      char buf[256];
      size_t o = 0;
      for (uint32_t k = 0; k < t->rank && o < sizeof(buf) - 24; ++k)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%" PRIu64, k ? ", " : "", t->strides[k]);
      buf[o] = 0;
      st = cube__status_make(CUBE_STATUS_UNSUPPORTED,
                             "%s: tensors[%zu] has strides [%s] that %s does not produce "
                             "(it reads %s layouts only)",
                             fn, i, buf, c->server->props.name,
                             c->server->props.layout_policy == CUBE_LAYOUT_POLICY_PITCHED
                                 ? "pitched row-major"
                                 : "contiguous row-major");
      break;
    }
    uint64_t w, h, p, need;
    if (!cube__rows(&d, t->strides, &w, &h, &p, &need)) {
      st = CUBE_INVALID("%s: tensors[%zu] (rank %" PRIu32 ", elem_size %" PRIu32
                        ") spans more than 2^64 bytes",
                        fn, i, t->rank, t->elem_size);
      break;
    }
    uint64_t view = cube__handle_view_size(&info);
    if (need > view) {
      st = CUBE_INVALID("%s: tensors[%zu] needs %" PRIu64 " bytes but its handle views %" PRIu64,
                        fn, i, need, view);
      break;
    }
    cube__memory_ref(info.mem);
    r[i] = (cube__read_region_t){info.mem, info.offset_start, w, h, p, NULL};
  }
  if (st) {
    for (size_t j = 0; j < i; ++j) cube__memory_unref(r[j].mem);
    free(r);
    return st;
  }
  return cube__read_queue(c, fn, count, r, true, out, out_bytes, false);
}

cube_status_t cube_client_read_tensor_async(cube_client_t* c, size_t count,
                                            const cube_tensor_t* tensors,
                                            cube_future_t** out_future) {
  CUBE__CHECK_OUT(out_future, "cube_client_read_tensor_async", "out_future");
  return cube__read_tensors(c, "cube_client_read_tensor_async", count, tensors, out_future,
                            NULL);
}

cube_status_t cube_client_read_tensor(cube_client_t* c, size_t count, const cube_tensor_t* tensors,
                                      cube_bytes_t** out_bytes) {
  CUBE__CHECK_OUT(out_bytes, "cube_client_read_tensor", "out_bytes");
  return cube__read_tensors(c, "cube_client_read_tensor", count, tensors, NULL, out_bytes);
}
