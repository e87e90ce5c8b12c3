/* The OpenCL backend's streams and copies: a command queue per logical
 * stream (in order, profiling on). Commands of one stream are ordered by its
 * queue; queues are not ordered with each other, but through the event slots:
 * the server records an event (a marker) on the stream that used a buffer
 * last and makes the next stream that uses it wait for it (a barrier), as on
 * CUDA; event_elapsed reads the markers' CL_PROFILING_COMMAND_END.
 *
 * Writes do not wait where the source can outlive the call: write_held (the
 * server's writes, whose source a cube_bytes_t holds) keeps a reference to
 * the bytes, whatever the size, rect writes too; write (a source valid only
 * during the call) copies up to CUBE__OCL_WRITE_COPY_MAX bytes into memory of
 * the stream, and blocks for larger ones. The copy is freed (the reference
 * released) once the write's event completed, seen at a later write, read,
 * launch or copy of the stream, at sync or at destroy. A stream keeps at most
 * CUBE__OCL_COPIED_BYTES_MAX (32 MiB) of copies and CUBE__OCL_PENDING_BYTES_MAX
 * (256 MiB) of writes in all in flight; past either a write waits for the
 * oldest. A write that fails once enqueued is returned by the next sync. Reads block
 * (a read's bytes are handed out at once); copies between two buffers do
 * not (clEnqueueCopyBuffer, as a launch).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/opencl_backend_internal.h"
#include "base/status.h"
#include "platform/platform.h"

//===----------------------------------------------------------------------===//
// Streams and ordering
//===----------------------------------------------------------------------===//

cube_status_t cube__ocl_stream_create(cube__backend_device_t* dev, uint64_t stream_id,
                                      void** out_stream) {
  cube__ocl_stream_t* s = calloc(1, sizeof(*s));
  if (!s)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "opencl:%u: no host memory for stream %" PRIu64, dev->index,
                             stream_id);
  cl_int err = CL_SUCCESS;
  s->queue = dev->cl->CreateCommandQueue(dev->ctx, dev->device, CL_QUEUE_PROFILING_ENABLE, &err);
  if (!s->queue) {
    free(s);
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl:%u (%s): clCreateCommandQueue for stream %" PRIu64,
                           dev->index, dev->name, stream_id);
  }
  s->id = stream_id;
  *out_stream = s;
  return CUBE_OK;
}

static void cube__ocl_reap(cube__backend_device_t* dev, cube__ocl_stream_t* s, bool wait);

void cube__ocl_stream_destroy(cube__backend_device_t* dev, void* stream) {
  cube__ocl_stream_t* s = stream;
  if (!s) return;
  dev->cl->Finish(s->queue);
  cube__ocl_reap(dev, s, true);
  free(s->pending);
  cube_status_free(s->write_errors);
  for (uint32_t i = 0; i < s->timed_count; ++i)
    dev->cl->ReleaseEvent(s->timed[(s->timed_head + i) % s->timed_cap].done);
  free(s->timed);
  dev->cl->ReleaseCommandQueue(s->queue);
  free(s);
}

//===----------------------------------------------------------------------===//
// Events (the event slots)
//===----------------------------------------------------------------------===//

cube_status_t cube__ocl_event_record(cube__backend_device_t* dev, void* stream,
                                     void** out_event) {
  cube__ocl_stream_t* s = stream;
  *out_event = NULL;
  if (!s)
    return CUBE_INVALID("opencl:%u: event record without a stream", dev->index);
  cl_event ev = NULL;
  cl_int err = dev->cl->EnqueueMarkerWithWaitList(s->queue, 0, NULL, &ev);
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl:%u (%s): clEnqueueMarkerWithWaitList recording an event on "
                           "stream %" PRIu64,
                           dev->index, dev->name, s->id);
  /* Another queue may wait for it: the work before it must start. */
  dev->cl->Flush(s->queue);
  *out_event = ev;
  return CUBE_OK;
}

cube_status_t cube__ocl_event_wait(cube__backend_device_t* dev, void* stream, void* event) {
  cube__ocl_stream_t* s = stream;
  if (!s || !event)
    return CUBE_INVALID("opencl:%u: event wait without a %s", dev->index,
                        s ? "event" : "stream");
  cl_event ev = event;
  cl_int err = dev->cl->EnqueueBarrierWithWaitList(s->queue, 1, &ev, NULL);
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl:%u (%s): clEnqueueBarrierWithWaitList making stream %" PRIu64
                           " wait for an event",
                           dev->index, dev->name, s->id);
  return CUBE_OK;
}

bool cube__ocl_event_done(cube__backend_device_t* dev, void* event) {
  if (!event) return true;
  cl_int exec = CL_COMPLETE;
  if (dev->cl->GetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(exec), &exec,
                            NULL) != CL_SUCCESS)
    return true; /* not readable: the failure surfaces at sync */
  return exec <= CL_COMPLETE; /* negative: failed */
}

cube_status_t cube__ocl_event_sync(cube__backend_device_t* dev, void* event) {
  if (!event) return CUBE_OK;
  cl_event ev = event;
  cl_int err = dev->cl->WaitForEvents(1, &ev);
  cl_int exec = CL_COMPLETE;
  if (err == CL_SUCCESS &&
      dev->cl->GetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(exec), &exec, NULL) ==
          CL_SUCCESS &&
      exec < 0)
    err = exec;
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl:%u (%s): clWaitForEvents on an event (the work before it "
                           "failed or could not be waited for)",
                           dev->index, dev->name);
  return CUBE_OK;
}

void cube__ocl_event_destroy(cube__backend_device_t* dev, void* event) {
  if (event) dev->cl->ReleaseEvent(event);
}

/* The end of marker |ev| on the device's profiling clock; |which| names it. */
static cube_status_t cube__ocl_event_end(cube__backend_device_t* dev, cl_event ev,
                                         const char* which, cl_ulong* out) {
  cl_int exec = CL_COMPLETE;
  cl_int err = dev->cl->GetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(exec), &exec,
                                     NULL);
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl:%u (%s): event elapsed: the status of the %s event",
                           dev->index, dev->name, which);
  if (exec < 0)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, exec,
                           "opencl:%u (%s): event elapsed: the %s event failed (the work "
                           "before it failed)",
                           dev->index, dev->name, which);
  if (exec != CL_COMPLETE)
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "opencl:%u (%s): event elapsed: the %s event has not completed "
                             "(execution status %d; wait for it first)",
                             dev->index, dev->name, which, (int)exec);
  *out = 0;
  err = dev->cl->GetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof(*out), out, NULL);
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl:%u (%s): event elapsed: no profiling info "
                           "(CL_PROFILING_COMMAND_END) for the %s event",
                           dev->index, dev->name, which);
  return CUBE_OK;
}

cube_status_t cube__ocl_event_elapsed(cube__backend_device_t* dev, void* start, void* end,
                                      uint64_t* out_ns) {
  *out_ns = 0;
  if (!start || !end)
    return CUBE_INVALID("opencl:%u: event elapsed without a %s event", dev->index,
                        start ? "end" : "start");
  cl_ulong t0 = 0, t1 = 0;
  CUBE_RETURN_IF_ERROR(cube__ocl_event_end(dev, start, "start", &t0));
  CUBE_RETURN_IF_ERROR(cube__ocl_event_end(dev, end, "end", &t1));
  if (t1 < t0)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "opencl:%u (%s): event elapsed: the end event ended %" PRIu64
                             " ns before the start event",
                             dev->index, dev->name, (uint64_t)(t0 - t1));
  *out_ns = (uint64_t)(t1 - t0);
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Writes that do not wait
//===----------------------------------------------------------------------===//

/* Frees the copies (releases the held bytes) of |s|'s writes that
 * completed, oldest first (the queue is in order: one not complete means the
 * later ones are not either); |wait|: all of them, waiting. A failed one's
 * status is kept for the next sync. */
static void cube__ocl_reap(cube__backend_device_t* dev, cube__ocl_stream_t* s, bool wait) {
  const cube__ocl_api_t* cl = dev->cl;
  while (s->pending_count) {
    cube__ocl_pending_t* p = &s->pending[s->pending_head];
    cl_int err = CL_SUCCESS;
    if (wait) err = cl->WaitForEvents(1, &p->done);
    cl_int exec = CL_COMPLETE;
    if (err == CL_SUCCESS)
      err = cl->GetEventInfo(p->done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(exec), &exec,
                             NULL);
    if (err == CL_SUCCESS && exec > CL_COMPLETE) {
      if (!wait) break;
      /* Waited for and still not complete: hold on to the copy. */
      err = CL_INVALID_EVENT;
    }
    if (err == CL_SUCCESS && exec < 0) err = exec;
    if (err != CL_SUCCESS) {
      cube_status_t e = cube__ocl_error(
          CUBE_STATUS_INTERNAL, err,
          "opencl:%u (%s): write of %" PRIu64 " bytes to storage %" PRIu64 " at offset %" PRIu64
          " on stream %" PRIu64,
          dev->index, dev->name, p->size, p->storage_id, p->offset, s->id);
      s->write_errors = cube__status_join(s->write_errors, e);
      if (exec > CL_COMPLETE) {
        /* The driver may still read the source: keep it (leaked) rather than
         * free it under the device. */
        p->copy = NULL;
        p->held = NULL;
      }
    }
    free(p->copy);
    cube_bytes_release(p->held);
    cl->ReleaseEvent(p->done);
    s->pending_bytes -= p->size;
    if (p->copied) s->copied_bytes -= p->size;
    s->pending_head = (s->pending_head + 1) % s->pending_cap;
    s->pending_count--;
  }
}

void cube__ocl_reap_done(cube__backend_device_t* dev, cube__ocl_stream_t* s) {
  cube__ocl_reap(dev, s, false);
}

/* Enqueues a write of |src| (|size| bytes, packed rows) that does not wait:
 * from a reference to |owner| when given (no copy), else from a copy.
 * *out_done false when it could not (no host memory for the copy or the
 * ring: the caller then writes blocking). */
static cube_status_t cube__ocl_write_nowait(cube__backend_device_t* dev, cube__ocl_stream_t* s,
                                            const cube__storage_t* dst, uint64_t dst_offset,
                                            uint64_t pitch, const void* src, uint64_t width,
                                            uint64_t height, cube_bytes_t* owner,
                                            bool* out_done) {
  uint64_t size = width * height;
  *out_done = false;
  cube__ocl_reap(dev, s, false);
  /* Bounded: past a bound, wait for the oldest writes. */
  while (s->pending_count &&
         (s->pending_bytes + size > CUBE__OCL_PENDING_BYTES_MAX ||
          (!owner && s->copied_bytes + size > CUBE__OCL_COPIED_BYTES_MAX))) {
    cube__ocl_pending_t* p = &s->pending[s->pending_head];
    dev->cl->WaitForEvents(1, &p->done);
    cube__ocl_reap(dev, s, false);
    if (s->pending_count && &s->pending[s->pending_head] == p) break; /* not completing */
  }
  if (s->pending_count == s->pending_cap) {
    uint32_t cap = s->pending_cap ? s->pending_cap * 2 : 64;
    cube__ocl_pending_t* grown = malloc((size_t)cap * sizeof(*grown));
    if (!grown) return CUBE_OK;
    for (uint32_t i = 0; i < s->pending_count; ++i)
      grown[i] = s->pending[(s->pending_head + i) % s->pending_cap];
    free(s->pending);
    s->pending = grown;
    s->pending_cap = cap;
    s->pending_head = 0;
  }
  void* copy = NULL;
  const void* from = src;
  if (!owner) {
    copy = malloc((size_t)size);
    if (!copy) return CUBE_OK;
    memcpy(copy, src, (size_t)size);
    from = copy;
  }
  cl_mem mem = (cl_mem)dst->backend_data;
  cl_event done = NULL;
  cl_int err;
  if (height == 1 || pitch == width) {
    err = dev->cl->EnqueueWriteBuffer(s->queue, mem, CL_FALSE, (size_t)dst_offset, (size_t)size,
                                      from, 0, NULL, &done);
  } else {
    size_t bo[3] = {(size_t)dst_offset, 0, 0}, ho[3] = {0, 0, 0};
    size_t region[3] = {(size_t)width, (size_t)height, 1};
    err = dev->cl->EnqueueWriteBufferRect(s->queue, mem, CL_FALSE, bo, ho, region, (size_t)pitch,
                                          0, (size_t)width, 0, from, 0, NULL, &done);
  }
  if (err != CL_SUCCESS) {
    free(copy);
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl write of %" PRIu64 " rows of %" PRIu64
                           " bytes to storage %" PRIu64 " at offset %" PRIu64,
                           height, width, dst->id, dst_offset);
  }
  /* A large write starts now rather than at the next flush (PoCL and most
   * drivers submit on clFlush or when the queue fills). */
  if (owner) dev->cl->Flush(s->queue);
  cube__ocl_pending_t* p = &s->pending[(s->pending_head + s->pending_count) % s->pending_cap];
  p->done = done;
  p->copy = copy;
  p->held = owner ? cube_bytes_retain(owner) : NULL;
  p->copied = copy != NULL;
  p->size = size;
  p->storage_id = dst->id;
  p->offset = dst_offset;
  s->pending_count++;
  s->pending_bytes += size;
  if (copy) s->copied_bytes += size;
  *out_done = true;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Kernels timed by their events (the activity slots)
//===----------------------------------------------------------------------===//

bool cube__ocl_activity_begin(cube__backend_device_t* dev, void* stream, uint32_t kind,
                              bool keep) {
  (void)keep;
  cube__ocl_stream_t* s = stream;
  if (!s) return false;
  /* A copy's record: the stream's next copy makes one. */
  if (kind == CUBE__ACTIVITY_COPY) s->time_copy = true;
  if (s->clock_known) return true;
  /* The device's profiling clock against cube's: a marker's queued time
   * beside the host's time around its enqueue (once per stream). */
  const cube__ocl_api_t* cl = dev->cl;
  cl_event m = NULL;
  uint64_t h0 = cube__now_ns();
  cl_int err = cl->EnqueueMarkerWithWaitList(s->queue, 0, NULL, &m);
  uint64_t h1 = cube__now_ns();
  cl_ulong q = 0;
  if (err == CL_SUCCESS) err = cl->WaitForEvents(1, &m);
  if (err == CL_SUCCESS)
    err = cl->GetEventProfilingInfo(m, CL_PROFILING_COMMAND_QUEUED, sizeof(q), &q, NULL);
  if (m) cl->ReleaseEvent(m);
  if (err != CL_SUCCESS || !q) {
    s->time_copy = false;
    return false;
  }
  s->clock_offset = (int64_t)(h0 + (h1 - h0) / 2) - (int64_t)q;
  s->clock_known = true;
  return true;
}

void cube__ocl_timed_push(cube__backend_device_t* dev, cube__ocl_stream_t* s, cl_event done,
                          uint32_t kind, const char* name, const uint32_t count[3],
                          uint64_t bytes) {
  if (s->timed_count == s->timed_cap) {
    uint32_t cap = s->timed_cap ? s->timed_cap * 2 : 256;
    cube__ocl_timed_t* grown =
        cap <= CUBE__OCL_TIMED_MAX ? malloc((size_t)cap * sizeof(*grown)) : NULL;
    if (!grown) {
      /* At the limit (or no memory): the oldest goes unread. */
      dev->cl->ReleaseEvent(s->timed[s->timed_head].done);
      s->timed_head = (s->timed_head + 1) % s->timed_cap;
      s->timed_count--;
      s->timed_dropped++;
    } else {
      for (uint32_t i = 0; i < s->timed_count; ++i)
        grown[i] = s->timed[(s->timed_head + i) % s->timed_cap];
      free(s->timed);
      s->timed = grown;
      s->timed_cap = cap;
      s->timed_head = 0;
    }
  }
  cube__ocl_timed_t* t = &s->timed[(s->timed_head + s->timed_count) % s->timed_cap];
  t->done = done;
  t->kind = kind;
  t->bytes = bytes;
  memcpy(t->count, count, sizeof(t->count));
  size_t n = 0;
  while (name && name[n] && n + 1 < sizeof(t->name)) ++n;
  memcpy(t->name, name ? name : "", n);
  t->name[n] = 0;
  s->timed_count++;
}

size_t cube__ocl_activity_take(cube__backend_device_t* dev, void* stream, bool flush,
                               cube__activity_record_t* out, size_t max) {
  cube__ocl_stream_t* s = stream;
  const cube__ocl_api_t* cl = dev->cl;
  size_t n = 0;
  while (s && s->timed_count && n < max) {
    cube__ocl_timed_t* t = &s->timed[s->timed_head];
    cl_int exec = CL_COMPLETE;
    if (flush) cl->WaitForEvents(1, &t->done);
    if (cl->GetEventInfo(t->done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(exec), &exec,
                         NULL) != CL_SUCCESS)
      exec = -1;
    if (exec > CL_COMPLETE) break; /* not done yet: neither are those after it */
    cl_ulong t0 = 0, t1 = 0;
    bool ok = exec == CL_COMPLETE &&
              cl->GetEventProfilingInfo(t->done, CL_PROFILING_COMMAND_START, sizeof(t0), &t0,
                                        NULL) == CL_SUCCESS &&
              cl->GetEventProfilingInfo(t->done, CL_PROFILING_COMMAND_END, sizeof(t1), &t1,
                                        NULL) == CL_SUCCESS &&
              t1 >= t0;
    if (ok) { /* a failed kernel has no record: its failure is the stream's */
      cube__activity_record_t* r = &out[n++];
      memset(r, 0, sizeof(*r));
      r->kind = t->kind;
      r->bytes = t->bytes;
      r->start_ns = (uint64_t)((int64_t)t0 + s->clock_offset);
      r->end_ns = (uint64_t)((int64_t)t1 + s->clock_offset);
      memcpy(r->count, t->count, sizeof(r->count));
      memcpy(r->name, t->name, sizeof(r->name));
    }
    cl->ReleaseEvent(t->done);
    s->timed_head = (s->timed_head + 1) % s->timed_cap;
    s->timed_count--;
  }
  return n;
}

/* Checks that |height| rows of |width| bytes, |pitch| apart from |offset|,
 * lie inside |storage|. */
static cube_status_t cube__ocl_check_rows(const char* op, const cube__storage_t* storage,
                                          uint64_t offset, uint64_t pitch, uint64_t width,
                                          uint64_t height) {
  if (height > 1 && pitch < width)
    return CUBE_INVALID("opencl %s: pitch %" PRIu64 " is smaller than the row width %" PRIu64, op,
                        pitch, width);
  uint64_t span, last;
  if (cube__mul_overflow_u64(height - 1, pitch, &span) ||
      cube__add_overflow_u64(span, width, &span) || cube__add_overflow_u64(offset, span, &last) ||
      last > storage->size || last > SIZE_MAX)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "opencl %s: %" PRIu64 " rows of %" PRIu64 " bytes, pitch %" PRIu64
                             ", at offset %" PRIu64 " exceed storage %" PRIu64 " of %" PRIu64
                             " bytes",
                             op, height, width, pitch, offset, storage->id, storage->size);
  return CUBE_OK;
}

/* A write through the write slot (|owner| NULL: |src| is valid only during
 * the call) or write_held (|owner| holds |src|). */
static cube_status_t cube__ocl_write_any(cube__backend_device_t* dev, void* stream,
                                         const cube__storage_t* dst, uint64_t dst_offset,
                                         uint64_t pitch, const void* src, uint64_t width,
                                         uint64_t height, cube_bytes_t* owner) {
  if (width == 0 || height == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__ocl_check_rows("write", dst, dst_offset, pitch, width, height));
  cube__ocl_stream_t* s = stream;
  if (owner || width * height <= CUBE__OCL_WRITE_COPY_MAX) {
    bool done;
    CUBE_RETURN_IF_ERROR(cube__ocl_write_nowait(dev, s, dst, dst_offset, pitch, src, width,
                                                height, owner, &done));
    if (done) return CUBE_OK;
  }
  cl_mem mem = (cl_mem)dst->backend_data;
  cl_int err;
  /* Blocking: the server releases |src| when this returns. */
  if (height == 1 || pitch == width) {
    err = dev->cl->EnqueueWriteBuffer(s->queue, mem, CL_TRUE, (size_t)dst_offset,
                                      (size_t)(width * height), src, 0, NULL, NULL);
  } else {
    size_t bo[3] = {(size_t)dst_offset, 0, 0}, ho[3] = {0, 0, 0};
    size_t region[3] = {(size_t)width, (size_t)height, 1};
    err = dev->cl->EnqueueWriteBufferRect(s->queue, mem, CL_TRUE, bo, ho, region, (size_t)pitch, 0,
                                          (size_t)width, 0, src, 0, NULL, NULL);
  }
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl write of %" PRIu64 " rows of %" PRIu64
                           " bytes to storage %" PRIu64 " at offset %" PRIu64,
                           height, width, dst->id, dst_offset);
  return CUBE_OK;
}

cube_status_t cube__ocl_write(cube__backend_device_t* dev, void* stream,
                              const cube__storage_t* dst, uint64_t dst_offset,
                              uint64_t pitch, const void* src, uint64_t width,
                              uint64_t height) {
  return cube__ocl_write_any(dev, stream, dst, dst_offset, pitch, src, width, height, NULL);
}

cube_status_t cube__ocl_write_held(cube__backend_device_t* dev, void* stream,
                                   const cube__storage_t* dst, uint64_t dst_offset,
                                   uint64_t pitch, const void* src, uint64_t width,
                                   uint64_t height, cube_bytes_t* owner) {
  return cube__ocl_write_any(dev, stream, dst, dst_offset, pitch, src, width, height, owner);
}

cube_status_t cube__ocl_read(cube__backend_device_t* dev, void* stream, void* dst,
                             const cube__storage_t* src, uint64_t src_offset,
                             uint64_t pitch, uint64_t width, uint64_t height) {
  if (width == 0 || height == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__ocl_check_rows("read", src, src_offset, pitch, width, height));
  cube__ocl_stream_t* s = stream;
  cl_mem mem = (cl_mem)src->backend_data;
  cl_int err;
  if (height == 1 || pitch == width) {
    err = dev->cl->EnqueueReadBuffer(s->queue, mem, CL_TRUE, (size_t)src_offset,
                                     (size_t)(width * height), dst, 0, NULL, NULL);
  } else {
    size_t bo[3] = {(size_t)src_offset, 0, 0}, ho[3] = {0, 0, 0};
    size_t region[3] = {(size_t)width, (size_t)height, 1};
    err = dev->cl->EnqueueReadBufferRect(s->queue, mem, CL_TRUE, bo, ho, region, (size_t)pitch, 0,
                                         (size_t)width, 0, dst, 0, NULL, NULL);
  }
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl read of %" PRIu64 " rows of %" PRIu64
                           " bytes from storage %" PRIu64 " at offset %" PRIu64,
                           height, width, src->id, src_offset);
  /* The queue is in order: the writes before the read have completed, and
   * their sources go back now rather than at the next write or sync. */
  cube__ocl_reap(dev, s, false);
  return CUBE_OK;
}

/* Asynchronous, as a launch is (in order on the stream's queue); a failure
 * the driver reports later comes back from clFinish at the next sync. */
cube_status_t cube__ocl_copy(cube__backend_device_t* dev, void* stream,
                             const cube__storage_t* dst, uint64_t dst_offset,
                             const cube__storage_t* src, uint64_t src_offset, uint64_t bytes) {
  if (bytes == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__ocl_check_rows("copy from", src, src_offset, bytes, bytes, 1));
  CUBE_RETURN_IF_ERROR(cube__ocl_check_rows("copy to", dst, dst_offset, bytes, bytes, 1));
  cube__ocl_stream_t* s = stream;
  if (s->pending_count) cube__ocl_reap(dev, s, false);
  /* Timed (armed by activity_begin): its event is read once it completed. */
  bool timed = s->time_copy;
  s->time_copy = false;
  cl_event done = NULL;
  cl_int err = dev->cl->EnqueueCopyBuffer(s->queue, (cl_mem)src->backend_data,
                                          (cl_mem)dst->backend_data, (size_t)src_offset,
                                          (size_t)dst_offset, (size_t)bytes, 0, NULL,
                                          timed ? &done : NULL);
  if (err == CL_SUCCESS && done) {
    static const uint32_t none[3] = {0, 0, 0};
    cube__ocl_timed_push(dev, s, done, CUBE__ACTIVITY_COPY, "copy", none, bytes);
  }
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl copy of %" PRIu64 " bytes from storage %" PRIu64
                           " at offset %" PRIu64 " to storage %" PRIu64 " at offset %" PRIu64,
                           bytes, src->id, src_offset, dst->id, dst_offset);
  return CUBE_OK;
}

cube_status_t cube__ocl_sync(cube__backend_device_t* dev, void* stream) {
  cube__ocl_stream_t* s = stream;
  if (!s) return CUBE_OK;
  cl_int err = dev->cl->Finish(s->queue);
  cube__ocl_reap(dev, s, err == CL_SUCCESS);
  cube_status_t status = s->write_errors;
  s->write_errors = NULL;
  if (err != CL_SUCCESS)
    status = cube__status_join(
        status, cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                                "opencl:%u (%s): clFinish of stream %" PRIu64, dev->index,
                                dev->name, s->id));
  return status;
}
