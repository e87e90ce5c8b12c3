/* The server's tasks that move bytes into buffers: writes of host data (on
 * backends that cannot copy on the caller), writes ordered after a stream's
 * work, accepting contents as they are, and copies between buffers. Reads,
 * launches, flush and sync are tasks.c's. Each task carries its stream. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/status.h"
#include "kernel/kernel.h"
#include "server/future.h"
#include "server/server.h"
#include "server/tasks_internal.h"
#include "server/timing.h"
#include "platform/platform.h"

//===----------------------------------------------------------------------===//
// Writes
//===----------------------------------------------------------------------===//

cube_status_t cube__write_exec(cube__stream_t* st, cube__memory_t* mem, uint64_t offset,
                               uint64_t pitch, const void* src, uint64_t width, uint64_t height,
                               cube_bytes_t* owner) {
  cube__server_t* s = st->server;
  const cube__storage_t* storage;
  uint64_t slice_off, slice_size;
  cube_status_t status;
  if (!cube__memory_resolve(mem, &storage, &slice_off, &slice_size))
    status = cube__status_make(CUBE_STATUS_NOT_FOUND, "write: memory %" PRIu64 " is not bound",
                               mem->id);
  else if (__builtin_expect(!cube__timing_wanted(s), 1))
    status = cube__backend_write_held(&s->be, st->backend_stream, storage, slice_off + offset,
                                      pitch, src, width, height, owner);
  else {
    /* Timed on the host clock: it may run on the calling thread, and the
     * backend has taken the bytes when it returns (read them, copied them or
     * kept |owner|: then this is the time to queue the write). */
    uint64_t t0 = cube__now_ns();
    status = cube__backend_write_held(&s->be, st->backend_stream, storage, slice_off + offset,
                                      pitch, src, width, height, owner);
    cube__timed_desc_t d = {CUBE__TRACE_UPLOAD, "upload", {width * height, 0, 0}};
    if (!status) cube__timing_host(st, &d, t0, cube__now_ns() - t0);
  }
  /* A failure taints the buffer; a whole write clears its taint. */
  if (__builtin_expect(status != NULL, 0) || cube__memory_taint(mem))
    cube__taint_after_write(st, mem, offset, pitch, width, height, status);
  return status;
}

static cube_status_t cube__write_task_run(void* state, void* payload) {
  (void)state;
  cube__write_task_t* t = payload;
  cube__stream_t* st = t->stream;
  cube__stream_push_error(st, cube__write_exec(st, t->mem, t->offset, t->pitch,
                                               cube_bytes_const_data(t->bytes), t->width,
                                               t->height, t->bytes));
  return CUBE_OK;
}

/* A write into |mem| that could not run: deferred, and |mem| tainted (its
 * contents are not what the caller wrote). */
static void cube__write_failed(cube__stream_t* st, cube__memory_t* mem, uint64_t bytes,
                               cube_status_t status) {
  char what[96];
  snprintf(what, sizeof(what), "write of %" PRIu64 " bytes into memory %" PRIu64, bytes, mem->id);
  cube__taint_fail(st, &mem, 1, NULL, status, what);
  cube__stream_push_error(st, cube__status_annotate(status, "write of %" PRIu64 " bytes", bytes));
}

/* An upload on the caller's thread into fresh |mem| that met its device
 * lost at the gate (a loss after the call's own check): failed as a write
 * that the driver refused, the buffer tainted and the failure deferred. The
 * taint is set under the lock of the stream that owns |mem|, under which a
 * recovery taints that stream's buffers (recover.c). */
__attribute__((noinline, cold)) static void cube__write_refused(cube__stream_t* st,
                                                               cube__memory_t* mem,
                                                               uint64_t bytes) {
  cube__stream_t* owner = mem->owner ? mem->owner : st;
  cube_status_t status = cube__backend_lost_status(&st->server->be, NULL);
  char what[96];
  snprintf(what, sizeof(what), "write of %" PRIu64 " bytes into memory %" PRIu64, bytes, mem->id);
  pthread_mutex_lock(&owner->lock);
  cube__taint_fail(st, &mem, 1, NULL, status, what);
  pthread_mutex_unlock(&owner->lock);
  cube__stream_push_error(st, cube__status_annotate(status, "write of %" PRIu64 " bytes", bytes));
}

static void cube__write_task_drop(void* payload) {
  cube__write_task_t* t = payload;
  cube_bytes_release(t->bytes);
  cube__memory_unref(t->mem);
}

void cube__server_write(cube__stream_t* st, cube__memory_t* mem, uint64_t offset, uint64_t pitch,
                        const void* src, uint64_t width, uint64_t height, cube_bytes_t* owner) {
  cube__server_t* s = st->server;
  if (width == 0 || height == 0) {
    cube_bytes_release(owner);
    return;
  }
  if (owner && cube__bytes_is_file(owner)) {
    /* The callers stage FILE buffers first (cube__stream_stage_file); a
     * mapping read here or on the runner would raise SIGBUS if the file
     * shrank, so one that reaches here is copied out, checked. */
    cube_bytes_t* copy = NULL;
    uintptr_t base = (uintptr_t)cube_bytes_const_data(owner), at = (uintptr_t)src;
    cube_status_t status =
        at >= base && at - base <= cube_bytes_size(owner)
            ? cube__bytes_allocate_uninit((size_t)(width * height), &copy)
            : cube__status_make(CUBE_STATUS_INTERNAL, "write: the source is not in its FILE owner");
    if (!status)
      status = cube__bytes_copy_out(owner, (size_t)(at - base), cube_bytes_data(copy),
                                    (size_t)(width * height));
    cube_bytes_release(owner);
    if (status) {
      cube_bytes_release(copy);
      cube__write_failed(st, mem, width * height, status);
      return;
    }
    owner = copy;
    src = cube_bytes_const_data(copy);
  }
  if (s->be.vt->caps & (CUBE__CAP_HOST_MEMORY | CUBE__CAP_CALLER_WRITES)) {
    /* The buffer is fresh: no queued work references it, so copying on the
     * calling thread is ordered with everything that can observe it (on a
     * device stream: the copy goes into the stream after what the runner put
     * there before, and nothing queued after it can run earlier). Inside the
     * stream's gate: a recovery does not replace the backend stream, the
     * buffer's storage or its taint under the copy (server.h). */
    if (__builtin_expect(!cube__stream_enter(st), 0)) {
      cube_bytes_release(owner);
      cube__write_refused(st, mem, width * height);
      return;
    }
    /* |owner| is not handed on: no backend with these caps keeps a source
     * past the call (write_held), and the upload returns once it is done. */
    cube_status_t status = cube__write_exec(st, mem, offset, pitch, src, width, height, NULL);
    cube__stream_leave(st);
    cube_bytes_release(owner);
    if (status)
      cube__stream_push_error(st, cube__status_annotate(status, "write of %" PRIu64 " bytes",
                                                        width * height));
    return;
  }
  cube__write_task_t t = {st, mem, offset, pitch, width, height, owner};
  cube_status_t status = CUBE_OK;
  /* The task runs later: keep |owner| only if it keeps |src| alive. */
  if (!owner || cube_bytes_const_data(owner) != src || !cube__bytes_owns_data(owner))
    status = cube_bytes_from_copy(src, (size_t)(width * height), &t.bytes);
  if (t.bytes != owner) cube_bytes_release(owner);
  if (status) {
    cube__write_failed(st, mem, width * height, status);
    return;
  }
  cube__memory_ref(mem);
  status = cube__submit(s->service, st->id, cube__write_task_run, &t, sizeof(t),
                        cube__write_task_drop);
  if (status) cube__write_failed(st, mem, width * height, status);
}

/* A write into a buffer that queued work may use (cube_client_write): it runs
 * on the runner, in stream order, after the buffer's last use on another
 * stream on backends with events, and holds the buffer for that stream's
 * next user as a launch does. */
static cube_status_t cube__write_ordered_task_run(void* state, void* payload) {
  (void)state;
  cube__write_task_t* t = payload;
  cube__stream_t* st = t->stream;
  cube__server_t* s = st->server;
  bool events = cube__backend_has_events(&s->be);
  cube_status_t status = CUBE_OK;
  if (events) {
    cube__stream_release_holds(st, false);
    status = cube__stream_order(st, t->mem);
    if (status) {
      char what[96];
      snprintf(what, sizeof(what), "write of %" PRIu64 " bytes into memory %" PRIu64,
               t->width * t->height, t->mem->id);
      cube__taint_fail(st, &t->mem, 1, NULL, status, what);
    }
  }
  if (!status)
    status = cube__write_exec(st, t->mem, t->offset, t->pitch, cube_bytes_const_data(t->bytes),
                              t->width, t->height, t->bytes);
  if (!status && events) cube__stream_hold(st, &t->mem, 1);
  if (status)
    cube__stream_push_error(st, cube__status_annotate(status, "write of %" PRIu64 " bytes into "
                                                              "memory %" PRIu64,
                                                      t->width * t->height, t->mem->id));
  return CUBE_OK;
}

cube_status_t cube__server_write_ordered(cube__stream_t* st, cube__memory_t* mem, uint64_t offset,
                                         uint64_t pitch, const void* src, uint64_t width,
                                         uint64_t height) {
  cube__server_t* s = st->server;
  cube__write_task_t t = {st, mem, offset, pitch, width, height, NULL};
  /* The caller may reuse |src| once the call returns: the task owns a copy. */
  CUBE_RETURN_IF_ERROR(cube_bytes_from_copy(src, (size_t)(width * height), &t.bytes));
  cube__memory_ref(mem);
  return cube__submit(s->service, st->id, cube__write_ordered_task_run, &t, sizeof(t),
                      cube__write_task_drop);
}

typedef struct cube__accept_task {
  cube__memory_t* mem;
} cube__accept_task_t;

static cube_status_t cube__accept_task_run(void* state, void* payload) {
  (void)state;
  cube__memory_set_taint(((cube__accept_task_t*)payload)->mem, NULL);
  return CUBE_OK;
}

static void cube__accept_task_drop(void* payload) {
  cube__memory_unref(((cube__accept_task_t*)payload)->mem);
}

cube_status_t cube__server_accept(cube__stream_t* st, cube__memory_t* mem) {
  cube__accept_task_t t = {mem};
  cube__memory_ref(mem);
  return cube__submit(st->server->service, st->id, cube__accept_task_run, &t, sizeof(t),
                      cube__accept_task_drop);
}

//===----------------------------------------------------------------------===//
// Copies
//===----------------------------------------------------------------------===//

static cube_status_t cube__copy_run(cube__stream_t* st, cube__memory_t* src,
                                    uint64_t src_offset, cube__memory_t* dst, uint64_t dst_offset,
                                    uint64_t bytes);

cube_status_t cube__copy_exec(cube__stream_t* st, cube__memory_t* src, uint64_t src_offset,
                              cube__memory_t* dst, uint64_t dst_offset, uint64_t bytes) {
  /* A source without valid contents: not run, the destination takes its
   * taint. A failure taints the destination; a whole copy clears it. */
  if (__builtin_expect(cube__memory_taint(src) != NULL, 0) && bytes != 0 &&
      (src != dst || src_offset != dst_offset) && cube__taint_copy_skip(st, src, dst, bytes, "not run"))
    return CUBE_OK;
  cube_status_t status = cube__copy_run(st, src, src_offset, dst, dst_offset, bytes);
  if (__builtin_expect(status != NULL, 0) || cube__memory_taint(dst))
    cube__taint_after_copy(st, src, dst, dst_offset, bytes, status);
  return status;
}

static cube_status_t cube__copy_run(cube__stream_t* st, cube__memory_t* src,
                                    uint64_t src_offset, cube__memory_t* dst, uint64_t dst_offset,
                                    uint64_t bytes) {
  cube__server_t* s = st->server;
  if (src == dst) {
    if (src_offset == dst_offset) return CUBE_OK;
    uint64_t lo = src_offset < dst_offset ? src_offset : dst_offset;
    uint64_t hi = src_offset < dst_offset ? dst_offset : src_offset;
    if (hi - lo < bytes)
      return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                               "copy of %" PRIu64 " bytes within memory %" PRIu64
                               ": the views at %" PRIu64 " and %" PRIu64 " overlap",
                               bytes, src->id, src_offset, dst_offset);
  }
  if (bytes == 0) return CUBE_OK;
  bool events = cube__backend_has_events(&s->be);
  if (events) {
    cube__stream_release_holds(st, false);
    CUBE_RETURN_IF_ERROR(cube__stream_order(st, src));
    CUBE_RETURN_IF_ERROR(cube__stream_order(st, dst));
  }
  const cube__storage_t *from, *to;
  uint64_t from_off, to_off, size;
  if (!cube__memory_resolve(src, &from, &from_off, &size))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "copy: source memory %" PRIu64 " is not bound",
                             src->id);
  if (!cube__memory_resolve(dst, &to, &to_off, &size))
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "copy: destination memory %" PRIu64 " is not bound", dst->id);
  cube__timing_mark_t m;
  m.on = false;
  if (__builtin_expect(cube__timing_wanted(s), 0)) cube__timing_begin_device(st, &m, true);
  cube_status_t status = cube__backend_copy(&s->be, st->backend_stream, to, to_off + dst_offset,
                                            from, from_off + src_offset, bytes);
  if (m.on) {
    cube__timed_desc_t d = {CUBE__TRACE_COPY, "copy", {bytes, 0, 0}};
    if (!status) cube__timing_end(st, &m, &d, UINT64_MAX);
    else if (m.ev0) cube__backend_event_destroy(&s->be, m.ev0);
  }
  /* Held whatever the copy said: it may have been queued. */
  if (events) {
    cube__memory_t* mems[2] = {src, dst};
    cube__stream_hold(st, mems, src == dst ? 1 : 2);
  }
  return status;
}

static cube_status_t cube__copy_task_run(void* state, void* payload) {
  (void)state;
  cube__copy_task_t* t = payload;
  cube__stream_t* st = t->stream;
  cube_status_t status =
      cube__copy_exec(st, t->src, t->src_offset, t->dst, t->dst_offset, t->bytes);
  if (status)
    cube__stream_push_error(st, cube__status_annotate(status, "copy of %" PRIu64 " bytes from "
                                                              "memory %" PRIu64 " to memory %" PRIu64,
                                                      t->bytes, t->src->id, t->dst->id));
  return CUBE_OK;
}

static void cube__copy_task_drop(void* payload) {
  cube__copy_task_t* t = payload;
  cube__memory_unref(t->src);
  cube__memory_unref(t->dst);
}

cube_status_t cube__server_copy(cube__stream_t* st, cube__memory_t* src, uint64_t src_offset,
                                cube__memory_t* dst, uint64_t dst_offset, uint64_t bytes) {
  cube__copy_task_t t = {st, src, src_offset, dst, dst_offset, bytes};
  cube__memory_ref(src);
  cube__memory_ref(dst);
  return cube__submit(st->server->service, st->id, cube__copy_task_run, &t, sizeof(t),
                      cube__copy_task_drop);
}
