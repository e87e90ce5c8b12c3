/* The wrappers: the only callers of a backend table (backend.h). Each one
 * gives the optional slot's fallback when the backend leaves it NULL, hits
 * the slot's fault site ("<backend>_<slot>", base/fault.h) before calling
 * the backend, and reports the call to the trace hook when one is set. */
#include "backends/backend.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "base/status.h"

//===----------------------------------------------------------------------===//
// Slot names and the trace hook
//===----------------------------------------------------------------------===//

#define CUBE__SLOT_NAME(id, name) #name,
static const char* const cube__slot_names[CUBE__SLOT_COUNT] = {
    CUBE__FAULT_BACKEND_SLOTS(CUBE__SLOT_NAME) CUBE__BACKEND_INFALLIBLE_SLOTS(CUBE__SLOT_NAME)};
#undef CUBE__SLOT_NAME

const char* cube__backend_slot_name(cube__backend_slot_t slot) {
  return (unsigned)slot < CUBE__SLOT_COUNT ? cube__slot_names[slot] : "?";
}

static _Atomic(cube__backend_trace_fn) cube__trace_fn;
static void* cube__trace_user;

void cube__backend_set_trace(cube__backend_trace_fn fn, void* user) {
  cube__trace_user = user;
  atomic_store_explicit(&cube__trace_fn, fn, memory_order_release);
}

static void cube__trace_slow(cube__backend_trace_fn fn, const cube__backend_t* be,
                             cube__backend_slot_t slot, int status) {
  cube__backend_call_t call = {be->vt->name, be->index, slot, status};
  fn(cube__trace_user, &call);
}

/* The hook, read once per call (NULL almost always). */
static inline cube__backend_trace_fn cube__trace_get(void) {
  return atomic_load_explicit(&cube__trace_fn, memory_order_acquire);
}

static inline void cube__trace(cube__backend_trace_fn fn, const cube__backend_t* be,
                               cube__backend_slot_t slot, int status) {
  if (__builtin_expect(fn != NULL, 0)) cube__trace_slow(fn, be, slot, status);
}

static inline bool cube__fault(const cube__backend_t* be, cube__backend_slot_t slot) {
  return cube__fault_hit(cube__fault_backend_site((unsigned)be->vt->backend, (unsigned)slot));
}

//===----------------------------------------------------------------------===//
// Lost devices
//===----------------------------------------------------------------------===//

/* The marker of orphans (backend.h, cube__backend_orphan) of a lost device. */
static cube__backend_loss_t cube__loss_of_orphans = {NULL, CUBE__SLOT_DEVICE_DESTROY, "", NULL};

cube_status_t cube__backend_lost_status(const cube__backend_t* be, const char* what) {
  const cube__backend_loss_t* loss = atomic_load_explicit(&be->loss, memory_order_acquire);
  const char* pre = what ? what : "";
  const char* sep = what ? ": " : "";
  if (!loss || !loss->root)
    return cube__status_make(CUBE_STATUS_DEVICE_LOST, "%s%s%s:%u is lost", pre, sep,
                             be->vt->name, be->index);
  return cube__status_make(CUBE_STATUS_DEVICE_LOST,
                           "%s%s%s:%u is lost: its %s failed at %s: %s; every call on the device "
                           "fails from then on (release its handles; other devices go on)",
                           pre, sep, be->vt->name, be->index,
                           cube__backend_slot_name((cube__backend_slot_t)loss->slot), loss->when,
                           cube_status_message(loss->root));
}

cube__backend_t cube__backend_orphan(const cube__backend_t* be) {
  cube__backend_t o = {be->vt, NULL, be->index, NULL, NULL};
  if (cube__backend_lost(be)) atomic_init(&o.loss, &cube__loss_of_orphans);
  return o;
}

/* Called with the status |st| of a slot when it is DEVICE_LOST: the first
 * such status makes the device lost (its copy is the root every later call
 * names) and tells the backend (CUBE__CTL_DEVICE_LOST). Out of line: only
 * failures reach it. */
static __attribute__((noinline)) void cube__backend_lose(const cube__backend_t* be,
                                                         cube__backend_slot_t slot,
                                                         cube_status_t st) {
  if (cube__backend_lost(be)) return;
  cube__backend_loss_t* loss = calloc(1, sizeof(*loss));
  cube_status_t root = cube__status_clone(st);
  if (!loss || !root || cube_status_code(root) != CUBE_STATUS_DEVICE_LOST) {
    /* No memory for the record: the device is lost all the same. */
    free(loss);
    cube_status_free(root);
    loss = NULL;
  } else {
    loss->root = root;
    loss->slot = (int)slot;
    cube__utc_now(loss->when, sizeof(loss->when));
  }
  cube__backend_loss_t* want = loss ? loss : &cube__loss_of_orphans;
  cube__backend_loss_t* none = NULL;
  /* |be| is const to the wrappers; the object is not (backend.h). */
  cube__backend_t* mut = (cube__backend_t*)(uintptr_t)be;
  /* Sequentially consistent: a recovery relies on it (server.h,
   * cube__stream_enter). */
  if (!atomic_compare_exchange_strong_explicit(&mut->loss, &none, want, memory_order_seq_cst,
                                               memory_order_seq_cst)) {
    if (loss) {
      cube_status_free(loss->root);
      free(loss);
    }
    return; /* another thread saw the loss first */
  }
  if (be->vt->ctl && be->device)
    cube_status_free(be->vt->ctl(be->device, NULL, CUBE__CTL_DEVICE_LOST, NULL));
}

static inline cube_status_t cube__backend_check_lost(const cube__backend_t* be,
                                                     cube__backend_slot_t slot,
                                                     cube_status_t st) {
  if (__builtin_expect(st != NULL, 0) && cube_status_code(st) == CUBE_STATUS_DEVICE_LOST)
    cube__backend_lose(be, slot, st);
  return st;
}

/* The usual shape of a fallible wrapper: a lost device answers at once; trace,
 * fault site, slot, trace; a DEVICE_LOST status makes the device lost. */
#define CUBE__CALL(be, slot, code, call, ...)                                 \
  do {                                                                        \
    if (__builtin_expect(cube__backend_lost(be), 0))                          \
      return cube__backend_lost_status((be), NULL);                           \
    cube__backend_trace_fn tf_ = cube__trace_get();                           \
    cube__trace(tf_, (be), (slot), -1);                                       \
    cube_status_t st_ = cube__fault((be), (slot))                             \
                            ? cube__fault_status((code), __VA_ARGS__)         \
                            : (call);                                         \
    if (__builtin_expect(tf_ != NULL, 0))                                     \
      cube__trace_slow(tf_, (be), (slot), (int)cube_status_code(st_));        \
    return cube__backend_check_lost((be), (slot), st_);                       \
  } while (0)

/* An infallible one called on a lost device too (it frees host state the
 * backend holds; the backend calls its driver no more). */
#define CUBE__CALL_LOST(be, slot, call)        \
  do {                                         \
    cube__backend_trace_fn tf_ = cube__trace_get(); \
    cube__trace(tf_, (be), (slot), -1);        \
    call;                                      \
    cube__trace(tf_, (be), (slot), 0);         \
  } while (0)

/* The shape of the other infallible ones. On a lost device nothing is called:
 * what it would give back (device and pinned memory, events) stays with the
 * driver. */
#define CUBE__CALL_VOID(be, slot, call)        \
  do {                                         \
    if (__builtin_expect(cube__backend_lost(be), 0)) break; \
    cube__backend_trace_fn tf_ = cube__trace_get(); \
    cube__trace(tf_, (be), (slot), -1);        \
    call;                                      \
    cube__trace(tf_, (be), (slot), 0);         \
  } while (0)

//===----------------------------------------------------------------------===//
// Devices
//===----------------------------------------------------------------------===//

_Thread_local bool cube__backend_open_may_reset = false;

static cube_status_t cube__backend_device_open(cube__backend_t* be, uint32_t index,
                                               const cube_server_options_t* options,
                                               cube_device_properties_t* out_props,
                                               cube_features_t* out_features,
                                               cube_backend_info_t* out_info) {
  CUBE__CALL(be, CUBE__SLOT_DEVICE_CREATE, CUBE_STATUS_UNAVAILABLE,
             be->vt->device_create(index, options, &be->device, out_props, out_features,
                                   out_info),
             "%s:%u: opening the device failed", be->vt->name, index);
}

cube_status_t cube__backend_device_create(cube__backend_t* be, cube_backend_t backend,
                                          uint32_t index, const cube_server_options_t* options,
                                          cube_device_properties_t* out_props,
                                          cube_features_t* out_features,
                                          cube_backend_info_t* out_info) {
  be->vt = cube__backend_get(backend);
  be->device = NULL;
  be->index = index;
  atomic_init(&be->loss, NULL);
  be->ended = NULL;
  if (!be->vt)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "backend %s is not built into this library",
                             cube_backend_name(backend) ? cube_backend_name(backend) : "?");
  cube_status_t st = cube__backend_device_open(be, index, options, out_props, out_features,
                                               out_info);
  if (st) {
    /* A device that fails to open with DEVICE_LOST (its context was poisoned
     * before: the device was lost before a cube_shutdown) recorded the loss;
     * there is no device for cube__backend_device_destroy to end it with. */
    cube__backend_loss_t* loss = atomic_exchange(&be->loss, NULL);
    if (loss && loss != &cube__loss_of_orphans) {
      cube_status_free(loss->root);
      free(loss);
    }
  }
  return st;
}

void cube__backend_device_destroy(cube__backend_t* be) {
  if (!be->vt || !be->device) return;
  /* A lost device is destroyed too: the backend was told (CUBE__CTL_DEVICE_LOST)
   * and frees its host-side state without its driver. */
  cube__backend_trace_fn tf = cube__trace_get();
  cube__trace(tf, be, CUBE__SLOT_DEVICE_DESTROY, -1);
  be->vt->device_destroy(be->device);
  cube__trace(tf, be, CUBE__SLOT_DEVICE_DESTROY, 0);
  be->device = NULL;
  cube__backend_loss_t* loss = atomic_exchange(&be->loss, NULL);
  if (loss && loss != &cube__loss_of_orphans) {
    loss->next = be->ended;
    be->ended = loss;
  }
  while (be->ended) {
    loss = be->ended;
    be->ended = loss->next;
    cube_status_free(loss->root);
    free(loss);
  }
}

//===----------------------------------------------------------------------===//
// Recovery (backend.h): the slots called on a lost device, by its recovery
//===----------------------------------------------------------------------===//

/* A recovery's call that failed with DEVICE_LOST (a new fault in the
 * context the reset made): the device is still lost (its loss record was
 * never ended), and the backend, whose reset had ended its own, is told
 * again, so that the next recovery resets it again. */
static cube_status_t cube__backend_recovery_status(const cube__backend_t* be, cube_status_t st) {
  if (__builtin_expect(st != NULL, 0) && cube_status_code(st) == CUBE_STATUS_DEVICE_LOST &&
      be->vt->ctl && be->device)
    cube_status_free(be->vt->ctl(be->device, NULL, CUBE__CTL_DEVICE_LOST, NULL));
  return st;
}

cube_status_t cube__backend_reset(cube__backend_t* be) {
  cube_status_t st = be->vt->ctl && be->device
                         ? be->vt->ctl(be->device, NULL, CUBE__CTL_DEVICE_RESET, NULL)
                         : cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "no reset");
  if (cube_status_code(st) != CUBE_STATUS_UNIMPLEMENTED)
    return cube__backend_recovery_status(be, st);
  cube_status_free(st);
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                           "%s:%u: the %s backend cannot recover a lost device (no reset)",
                           be->vt->name, be->index, be->vt->name);
}

cube_status_t cube__backend_renew(const cube__backend_t* be, void* stream,
                                  cube__storage_t* storage) {
  cube__storage_t fresh;
  memset(&fresh, 0, sizeof(fresh));
  cube_status_t st = be->vt->alloc_on
                         ? be->vt->alloc_on(be->device, stream, storage->size, &fresh)
                         : be->vt->alloc(be->device, storage->size, &fresh);
  if (st) return cube__backend_recovery_status(be, st);
  storage->ptr = fresh.ptr;
  storage->backend_data = fresh.backend_data;
  return CUBE_OK;
}

cube_status_t cube__backend_restore(const cube__backend_t* be, void* stream,
                                    const cube__storage_t* dst, uint64_t offset, const void* src,
                                    uint64_t bytes) {
  cube_status_t st = be->vt->write(be->device, stream, dst, offset, bytes, src, bytes, 1);
  if (!st && be->vt->sync) st = be->vt->sync(be->device, stream);
  return cube__backend_recovery_status(be, st);
}

cube_status_t cube__backend_stream_renew(const cube__backend_t* be, uint64_t id, void** out) {
  *out = NULL;
  return cube__backend_recovery_status(
      be, be->vt->stream_create ? be->vt->stream_create(be->device, id, out) : CUBE_OK);
}

void cube__backend_found(cube__backend_t* be) {
  cube__backend_loss_t* loss = atomic_exchange(&be->loss, NULL);
  if (loss && loss != &cube__loss_of_orphans) {
    loss->next = be->ended;
    be->ended = loss;
  }
}

//===----------------------------------------------------------------------===//
// Storage
//===----------------------------------------------------------------------===//

cube_status_t cube__backend_alloc(const cube__backend_t* be, void* stream, uint64_t size,
                                  cube__storage_t* out) {
  const cube__backend_vtable_t* vt = be->vt;
  CUBE__CALL(be, CUBE__SLOT_ALLOC, CUBE_STATUS_OUT_OF_MEMORY,
             vt->alloc_on ? vt->alloc_on(be->device, stream, size, out)
                          : vt->alloc(be->device, size, out),
             "%s:%u: allocation of %" PRIu64 " bytes failed", vt->name, be->index, size);
}

void cube__backend_dealloc(const cube__backend_t* be, void* stream,
                           const cube__storage_t* storage) {
  const cube__backend_vtable_t* vt = be->vt;
  CUBE__CALL_VOID(be, CUBE__SLOT_DEALLOC,
                  vt->dealloc_on ? vt->dealloc_on(be->device, stream, storage)
                                 : vt->dealloc(be->device, storage));
}


cube_status_t cube__backend_host_alloc(const cube__backend_t* be, uint64_t size,
                                       cube__storage_t* out) {
  const cube__backend_vtable_t* vt = be->vt;
  if (!vt->host_alloc)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "%s:%u has no pinned host memory",
                             vt->name, be->index);
  CUBE__CALL(be, CUBE__SLOT_HOST_ALLOC, CUBE_STATUS_OUT_OF_MEMORY,
             vt->host_alloc(be->device, size, out),
             "%s:%u: pinned allocation of %" PRIu64 " bytes failed", vt->name, be->index,
             size);
}

void cube__backend_host_dealloc(const cube__backend_t* be, const cube__storage_t* storage) {
  if (!be->vt->host_dealloc) return;
  CUBE__CALL_VOID(be, CUBE__SLOT_HOST_DEALLOC, be->vt->host_dealloc(be->device, storage));
}

//===----------------------------------------------------------------------===//
// Streams, copies, launches
//===----------------------------------------------------------------------===//

cube_status_t cube__backend_stream_create(const cube__backend_t* be, uint64_t stream_id,
                                          void** out_stream) {
  *out_stream = NULL;
  if (!be->vt->stream_create) return CUBE_OK;
  CUBE__CALL(be, CUBE__SLOT_STREAM_CREATE, CUBE_STATUS_UNAVAILABLE,
             be->vt->stream_create(be->device, stream_id, out_stream),
             "%s:%u: creating stream %" PRIu64 " failed", be->vt->name, be->index,
             stream_id);
}

void cube__backend_stream_destroy(const cube__backend_t* be, void* stream) {
  if (!stream || !be->vt->stream_destroy) return;
  /* Called on a lost device too: the backend (told by CUBE__CTL_DEVICE_LOST)
   * frees the stream's host state without its driver. */
  CUBE__CALL_LOST(be, CUBE__SLOT_STREAM_DESTROY, be->vt->stream_destroy(be->device, stream));
}

cube_status_t cube__backend_write(const cube__backend_t* be, void* stream,
                                  const cube__storage_t* dst, uint64_t dst_offset, uint64_t pitch,
                                  const void* src, uint64_t width, uint64_t height) {
  CUBE__CALL(be, CUBE__SLOT_WRITE, CUBE_STATUS_INTERNAL,
             be->vt->write(be->device, stream, dst, dst_offset, pitch, src, width, height),
             "%s write of %" PRIu64 " bytes to storage %" PRIu64 " failed", be->vt->name,
             width * height, dst->id);
}

cube_status_t cube__backend_write_held(const cube__backend_t* be, void* stream,
                                       const cube__storage_t* dst, uint64_t dst_offset,
                                       uint64_t pitch, const void* src, uint64_t width,
                                       uint64_t height, cube_bytes_t* owner) {
  if (!owner || !be->vt->write_held)
    return cube__backend_write(be, stream, dst, dst_offset, pitch, src, width, height);
  /* The write slot's fault site and trace point: the same operation. */
  CUBE__CALL(be, CUBE__SLOT_WRITE, CUBE_STATUS_INTERNAL,
             be->vt->write_held(be->device, stream, dst, dst_offset, pitch, src, width, height,
                                owner),
             "%s write of %" PRIu64 " bytes to storage %" PRIu64 " failed", be->vt->name,
             width * height, dst->id);
}

cube_status_t cube__backend_read(const cube__backend_t* be, void* stream, void* dst,
                                 const cube__storage_t* src, uint64_t src_offset, uint64_t pitch,
                                 uint64_t width, uint64_t height) {
  CUBE__CALL(be, CUBE__SLOT_READ, CUBE_STATUS_INTERNAL,
             be->vt->read(be->device, stream, dst, src, src_offset, pitch, width, height),
             "%s read of %" PRIu64 " bytes from storage %" PRIu64 " failed", be->vt->name,
             width * height, src->id);
}

cube_status_t cube__backend_launch(const cube__backend_t* be, void* stream,
                                   const cube__launch_t* l) {
  CUBE__CALL(be, CUBE__SLOT_LAUNCH, CUBE_STATUS_LAUNCH_FAILED,
             be->vt->launch(be->device, stream, l), "launch of kernel '%s' failed on %s:%u",
             l->name ? l->name : "?", be->vt->name, be->index);
}

/* The copy slot's fallback: the bytes through a host buffer, a piece at a
 * time (a read returns once its bytes are on the host, and a write's source
 * may be reused once it returns: backend.h). */
static cube_status_t cube__backend_copy_bounce(const cube__backend_t* be, void* stream,
                                               const cube__storage_t* dst, uint64_t dst_offset,
                                               const cube__storage_t* src, uint64_t src_offset,
                                               uint64_t bytes) {
  if (bytes == 0) return CUBE_OK;
  uint64_t piece = bytes < CUBE__BACKEND_COPY_BOUNCE ? bytes : CUBE__BACKEND_COPY_BOUNCE;
  void* host = malloc((size_t)piece);
  if (!host)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "%s:%u: copy of %" PRIu64 " bytes: no host memory for a bounce "
                             "buffer of %" PRIu64 " bytes",
                             be->vt->name, be->index, bytes, piece);
  cube_status_t st = CUBE_OK;
  for (uint64_t done = 0; !st && done < bytes; done += piece) {
    uint64_t n = bytes - done < piece ? bytes - done : piece;
    st = cube__backend_read(be, stream, host, src, src_offset + done, n, n, 1);
    if (!st) st = cube__backend_write(be, stream, dst, dst_offset + done, n, host, n, 1);
    if (st)
      st = cube__status_annotate(st, "%s:%u: copy through host memory, bytes [%" PRIu64
                                     ", %" PRIu64 ") of %" PRIu64,
                                 be->vt->name, be->index, done, done + n, bytes);
  }
  free(host);
  return st;
}

cube_status_t cube__backend_copy(const cube__backend_t* be, void* stream,
                                 const cube__storage_t* dst, uint64_t dst_offset,
                                 const cube__storage_t* src, uint64_t src_offset, uint64_t bytes) {
  const cube__backend_vtable_t* vt = be->vt;
  CUBE__CALL(be, CUBE__SLOT_COPY, CUBE_STATUS_INTERNAL,
             vt->copy ? vt->copy(be->device, stream, dst, dst_offset, src, src_offset, bytes)
                      : cube__backend_copy_bounce(be, stream, dst, dst_offset, src, src_offset,
                                                  bytes),
             "%s copy of %" PRIu64 " bytes from storage %" PRIu64 " to storage %" PRIu64
             " failed",
             vt->name, bytes, src->id, dst->id);
}

cube_status_t cube__backend_prepare(const cube__backend_t* be, const cube_kernel_t* kernel,
                                    cube_execution_mode_t mode) {
  if (!be->vt->prepare) return CUBE_OK;
  CUBE__CALL(be, CUBE__SLOT_PREPARE, CUBE_STATUS_COMPILATION_FAILED,
             be->vt->prepare(be->device, kernel, mode),
             "%s:%u: preparing a kernel failed", be->vt->name, be->index);
}

cube_status_t cube__backend_kernel_limits(const cube__backend_t* be, const cube_kernel_t* kernel,
                                          cube_execution_mode_t mode, cube__kernel_limits_t* out) {
  memset(out, 0, sizeof(*out));
  if (!be->vt->kernel_limits) return CUBE_OK;
  CUBE__CALL(be, CUBE__SLOT_PREPARE, CUBE_STATUS_COMPILATION_FAILED,
             be->vt->kernel_limits(be->device, kernel, mode, out),
             "%s:%u: preparing a kernel failed", be->vt->name, be->index);
}

cube_status_t cube__backend_sync(const cube__backend_t* be, void* stream) {
  if (!be->vt->sync) return CUBE_OK;
  CUBE__CALL(be, CUBE__SLOT_SYNC, CUBE_STATUS_INTERNAL, be->vt->sync(be->device, stream),
             "%s:%u: synchronising a stream failed", be->vt->name, be->index);
}

void cube__backend_trim(const cube__backend_t* be, void* stream) {
  if (!be->vt->trim) return;
  CUBE__CALL_VOID(be, CUBE__SLOT_TRIM, be->vt->trim(be->device, stream));
}

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//


static cube_status_t cube__no_events(const cube__backend_t* be, const char* what) {
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "%s:%u has no events (%s)",
                           be->vt->name, be->index, what);
}

cube_status_t cube__backend_event_record(const cube__backend_t* be, void* stream,
                                         void** out_event) {
  *out_event = NULL;
  if (!be->vt->event_record) return cube__no_events(be, "event_record");
  CUBE__CALL(be, CUBE__SLOT_EVENT_RECORD, CUBE_STATUS_INTERNAL,
             be->vt->event_record(be->device, stream, out_event),
             "%s:%u: recording an event failed", be->vt->name, be->index);
}

cube_status_t cube__backend_event_wait(const cube__backend_t* be, void* stream, void* event) {
  if (!be->vt->event_wait) return cube__no_events(be, "event_wait");
  CUBE__CALL(be, CUBE__SLOT_EVENT_WAIT, CUBE_STATUS_INTERNAL,
             be->vt->event_wait(be->device, stream, event),
             "%s:%u: waiting for an event failed", be->vt->name, be->index);
}

bool cube__backend_event_done(const cube__backend_t* be, void* event) {
  /* A lost device runs nothing more: whatever waits on the event is done. */
  if (!be->vt->event_done || cube__backend_lost(be)) return true;
  bool done = false;
  CUBE__CALL_VOID(be, CUBE__SLOT_EVENT_DONE, done = be->vt->event_done(be->device, event));
  return done;
}

cube_status_t cube__backend_event_sync(const cube__backend_t* be, void* event) {
  if (!be->vt->event_sync) return cube__no_events(be, "event_sync");
  CUBE__CALL(be, CUBE__SLOT_EVENT_SYNC, CUBE_STATUS_INTERNAL,
             be->vt->event_sync(be->device, event),
             "%s:%u: synchronising an event failed", be->vt->name, be->index);
}

void cube__backend_event_destroy(const cube__backend_t* be, void* event) {
  if (!event || !be->vt->event_destroy) return;
  CUBE__CALL_VOID(be, CUBE__SLOT_EVENT_DESTROY, be->vt->event_destroy(be->device, event));
}

cube_status_t cube__backend_event_elapsed(const cube__backend_t* be, void* start, void* end,
                                          uint64_t* out_ns) {
  if (!be->vt->event_elapsed) return cube__no_events(be, "event_elapsed");
  CUBE__CALL(be, CUBE__SLOT_EVENT_ELAPSED, CUBE_STATUS_INTERNAL,
             be->vt->event_elapsed(be->device, start, end, out_ns),
             "%s:%u: reading event times failed", be->vt->name, be->index);
}

atomic_uint_fast64_t cube__activity_epoch;

bool cube__backend_activity_begin(const cube__backend_t* be, void* stream, uint32_t kind,
                                  bool keep) {
  if (!cube__backend_has_activity(be)) return false;
  bool on = false;
  CUBE__CALL_VOID(be, CUBE__SLOT_ACTIVITY_BEGIN,
                  on = be->vt->activity_begin(be->device, stream, kind, keep));
  return on;
}

size_t cube__backend_activity_take(const cube__backend_t* be, void* stream, bool flush,
                                   cube__activity_record_t* out, size_t max) {
  if (!cube__backend_has_activity(be)) return 0;
  size_t n = 0;
  CUBE__CALL_VOID(be, CUBE__SLOT_ACTIVITY_TAKE,
                  n = be->vt->activity_take(be->device, stream, flush, out, max));
  return n;
}

//===----------------------------------------------------------------------===//
// Control
//===----------------------------------------------------------------------===//

static cube_status_t cube__no_graphs(const cube__backend_t* be, const char* what) {
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "%s:%u has no native graphs (%s)",
                           be->vt->name, be->index, what);
}

cube_status_t cube__backend_graph_create(const cube__backend_t* be,
                                         const cube__graph_node_desc_t* nodes, size_t count,
                                         void** out_graph) {
  *out_graph = NULL;
  if (!be->vt->graph_create) return cube__no_graphs(be, "graph_create");
  CUBE__CALL(be, CUBE__SLOT_GRAPH_CREATE, CUBE_STATUS_INTERNAL,
             be->vt->graph_create(be->device, nodes, count, out_graph),
             "%s:%u: building a native graph of %zu nodes failed", be->vt->name, be->index,
             count);
}

cube_status_t cube__backend_graph_update(const cube__backend_t* be, void* graph, size_t index,
                                         const cube__graph_node_desc_t* node) {
  if (!be->vt->graph_update) return cube__no_graphs(be, "graph_update");
  CUBE__CALL(be, CUBE__SLOT_GRAPH_UPDATE, CUBE_STATUS_INTERNAL,
             be->vt->graph_update(be->device, graph, index, node),
             "%s:%u: updating node %zu of a native graph failed", be->vt->name, be->index, index);
}

cube_status_t cube__backend_graph_launch(const cube__backend_t* be, void* stream, void* graph,
                                         cube__graph_node_failed_fn node_failed, void* user) {
  if (!be->vt->graph_launch) return cube__no_graphs(be, "graph_launch");
  CUBE__CALL(be, CUBE__SLOT_GRAPH_LAUNCH, CUBE_STATUS_LAUNCH_FAILED,
             be->vt->graph_launch(be->device, stream, graph, node_failed, user),
             "%s:%u: launching a native graph failed", be->vt->name, be->index);
}

void cube__backend_graph_destroy(const cube__backend_t* be, void* graph) {
  if (!be->vt->graph_destroy || !graph) return;
  /* As stream_destroy: the graph's host side is freed on a lost device too. */
  CUBE__CALL_LOST(be, CUBE__SLOT_GRAPH_DESTROY, be->vt->graph_destroy(be->device, graph));
}

cube_status_t cube__backend_ctl(const cube__backend_t* be, void* stream, uint32_t op, void* arg) {
  if (!be->vt->ctl)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "%s:%u: control operation %u is not implemented",
                             be->vt->name, be->index, op);
  CUBE__CALL(be, CUBE__SLOT_CTL, CUBE_STATUS_INTERNAL, be->vt->ctl(be->device, stream, op, arg),
             "%s:%u: control operation %u failed", be->vt->name, be->index, op);
}
