/* The client API: client objects and streams, handle lookup, resources,
 * exclusive access and allocation modes, memory accounting, flush, sync and
 * profile. Creating memory is in create.c, reading in read.c, launching in
 * launch.c, moving data between devices and collectives in
 * collective_api.c, shutdown in runtime.c. */
#include <stddef.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/params.h"
#include "base/abi.h"
#include "base/options.h"
#include "client/client_internal.h"
#include "server/recover.h"

struct cube_resource_s {
  cube__memory_t* mem; /* binding reference */
  void* ptr;
  uint64_t size;
};

/* CUBE_DEVICE_RECOVER=auto: the call that finds the device lost recovers it
 * (after the work queued before, which fails with the loss) and still
 * returns the loss, saying that the device works again. */
static cube_status_t cube__client_auto_recover(const cube_client_t* c, cube_status_t lost) {
  cube_status_t r = cube__server_recover(c->server, "automatic recovery");
  cube_status_t out =
      r ? cube__status_make(CUBE_STATUS_DEVICE_LOST, "%s; %s", cube_status_message(lost),
                            cube_status_message(r))
        : cube__status_make(CUBE_STATUS_DEVICE_LOST,
                            "%s; recovered (CUBE_DEVICE_RECOVER=auto): the device works again, "
                            "and its buffers that were not restorable hold no valid contents",
                            cube_status_message(lost));
  cube_status_free(r);
  if (cube_status_code(out) != CUBE_STATUS_DEVICE_LOST) return lost; /* no memory: the plain loss */
  cube_status_free(lost);
  return out;
}

cube_status_t cube__client_refuse(const cube_client_t* c, const char* fn) {
  if (!c) return CUBE_INVALID("%s: client is NULL", fn);
  if (cube__client_live(c)) {
    cube_status_t lost = cube__backend_lost_status(&c->server->be, fn);
    if (cube__option_enum(CUBE__OPT_DEVICE_RECOVER) == 1) return cube__client_auto_recover(c, lost);
    return lost;
  }
  return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "%s: the client was created before cube_shutdown; load a new one", fn);
}

//===----------------------------------------------------------------------===//
// Clients
//===----------------------------------------------------------------------===//

static cube_status_t cube__client_new(cube__server_t* s, cube_client_t** out) {
  cube_client_t* c = calloc(1, sizeof(*c));
  if (!c) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "client: no host memory");
  atomic_init(&c->refs, 1);
  c->epoch = cube__client_epoch();
  c->server = s;
  *out = c;
  return CUBE_OK;
}

cube_status_t cube_client_load(cube_device_id_t device, cube_client_t** out_client) {
  CUBE__CHECK_OUT(out_client, "cube_client_load", "out_client");
  CUBE_RETURN_IF_ERROR(cube__options_check("cube_client_load"));
  cube__server_t* s;
  cube_status_t st = cube__server_get(device, NULL, false, &s);
  if (st) return cube__status_annotate(st, "cube_client_load");
  return cube__client_new(s, out_client);
}

cube_status_t cube_client_init(cube_device_id_t device, const cube_server_options_t* in_options,
                               cube_client_t** out_client) {
  CUBE__CHECK_OUT(out_client, "cube_client_init", "out_client");
  cube_server_options_t read;
  const cube_server_options_t* options = NULL;
  if (in_options) {
    cube_server_options_initialize(&read);
    CUBE_RETURN_IF_ERROR(cube__struct_read("cube_client_init", "options->struct_size",
                                           &cube__struct_server_options, in_options, &read));
    options = &read;
  }
  if (options && ((unsigned)options->queue_mode > CUBE_QUEUE_INLINE ||
                  (unsigned)options->profile_level > CUBE_PROFILE_FULL ||
                  (unsigned)options->memory_config > CUBE_MEMORY_CONFIG_SUBSLICES ||
                  (unsigned)options->check_mode > CUBE_CHECK_VALIDATE ||
                  (unsigned)options->graphs > CUBE_GRAPHS_AUTO))
    return CUBE_INVALID("cube_client_init: options hold an out-of-range enum value "
                        "(queue_mode %d, profile_level %d, memory_config %d, check_mode %d, "
                        "graphs %d)",
                        (int)options->queue_mode, (int)options->profile_level,
                        (int)options->memory_config, (int)options->check_mode,
                        (int)options->graphs);
  if (options && options->graphs_warmup)
    CUBE_RETURN_IF_ERROR(cube__option_check_value(CUBE__OPT_GRAPHS_WARMUP, options->graphs_warmup,
                                                  "cube_client_init: options->graphs_warmup"));
  CUBE_RETURN_IF_ERROR(cube__options_check("cube_client_init"));
  if (options) {
    cube_status_t hs = cube__backend_params_check_header(options->backend_params, device);
    if (hs) return cube__status_annotate(hs, "cube_client_init");
  }
  cube__server_t* s;
  cube_status_t st = cube__server_get(device, options, true, &s);
  if (st && cube_status_code(st) == CUBE_STATUS_ALREADY_EXISTS) return st; /* names it already */
  if (st) return cube__status_annotate(st, "cube_client_init");
  return cube__client_new(s, out_client);
}

cube_status_t cube_client_clone(cube_client_t* c, cube_client_t** out_client) {
  CUBE__CHECK_CLIENT(c, "cube_client_clone");
  CUBE__CHECK_OUT(out_client, "cube_client_clone", "out_client");
  CUBE_RETURN_IF_ERROR(cube__client_new(c->server, out_client));
  (*out_client)->pinned = c->pinned;
  (*out_client)->stream = c->stream;
  return CUBE_OK;
}

cube_client_t* cube_client_retain(cube_client_t* c) {
  if (c) atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
  return c;
}

void cube_client_release(cube_client_t* c) {
  if (!c || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1) return;
  /* A step held on the client's stream is queued now rather than at the
   * stream's next use or at cube_shutdown. */
  uint64_t id = c->stream;
  if (cube__client_live(c) && cube__server_auto(c->server) &&
      (c->pinned || cube__stream_current_id_peek(&id)))
    cube__auto_end_stream_id(c->server, id, "cube_client_release");
  cube__client_overrides_free(c);
  free(c);
}

cube_device_id_t cube_client_device(const cube_client_t* c) {
  return cube__client_live(c) ? c->server->id : (cube_device_id_t){CUBE_BACKEND_NONE, 0};
}
const cube_backend_info_t* cube_client_info(const cube_client_t* c) {
  return cube__client_live(c) ? &c->server->info : NULL;
}
const cube_device_properties_t* cube_client_properties(const cube_client_t* c) {
  return cube__client_live(c) ? &c->server->props : NULL;
}
const cube_features_t* cube_client_features(const cube_client_t* c) {
  return cube__client_live(c) ? &c->server->features : NULL;
}
cube_status_t cube_client_device_identity(cube_client_t* c, char* out, size_t size) {
  static const char fn[] = "cube_client_device_identity";
  CUBE__CHECK_CLIENT(c, fn);
  if (!out) return CUBE_INVALID("%s: out is NULL", fn);
  if (!size) return CUBE_INVALID("%s: size is 0", fn);
  cube__server_device_identity(c->server, out, size);
  return CUBE_OK;
}

bool cube_client_is_blocking(const cube_client_t* c) {
  return cube__client_live(c) && cube__device_is_blocking(c->server->device);
}
cube_status_t cube_client_profile_summary(cube_client_t* c, cube_profile_summary_flags_t flags,
                                          cube_profile_summary_t* out_summary) {
  const char* fn = "cube_client_profile_summary";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_summary, fn, "out_summary");
  if (flags & ~(cube_profile_summary_flags_t)CUBE_PROFILE_SUMMARY_RESET)
    return CUBE_INVALID("%s: flags 0x%x has unknown bits (0x%x)", fn, flags,
                        flags & ~(cube_profile_summary_flags_t)CUBE_PROFILE_SUMMARY_RESET);
  size_t need = offsetof(cube_profile_summary_t, rows) + sizeof(out_summary->rows);
  if (out_summary->struct_size && out_summary->struct_size < need)
    return CUBE_INVALID("%s: out_summary->struct_size %zu does not reach past rows (%zu bytes)",
                        fn, out_summary->struct_size, need);
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &st));
  /* The stream's timed work that completed goes into the rows first. From
   * inside a task of this device (a log callback) that poll cannot be
   * queued: the summary then has the rows made so far. */
  cube_status_t polled = cube__server_timing_poll(st);
  if (cube__queue_refused_reentry(polled))
    cube_status_free(polled);
  else if (polled)
    return cube__status_annotate(polled, "%s", fn);
  cube_profile_summary_t sum;
  if (!cube__profiler_snapshot(&c->server->profiler, (flags & CUBE_PROFILE_SUMMARY_RESET) != 0,
                               &sum))
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory for the rows", fn);
  cube_status_t status = cube__struct_write(fn, "out_summary->struct_size",
                                            &cube__struct_profile_summary, out_summary, &sum);
  if (status) cube_profile_summary_deinitialize(&sum);
  return status;
}

cube_profile_level_t cube_client_profile_level(const cube_client_t* c) {
  return cube__client_live(c) ? c->server->profiler.level : CUBE_PROFILE_NONE;
}

//===----------------------------------------------------------------------===//
// Streams
//===----------------------------------------------------------------------===//

cube_stream_id_t cube_stream_current(void) { return cube__stream_current_id(); }
cube_stream_id_t cube_stream_id_new(void) { return cube__stream_new_id(); }
cube_stream_id_t cube_stream_create_id(void) { return cube_stream_id_new(); } /* deprecated */

void cube_client_set_stream(cube_client_t* c, cube_stream_id_t stream) {
  if (!c) return;
  c->pinned = true;
  c->stream = stream;
}
void cube_client_unset_stream(cube_client_t* c) {
  if (c) c->pinned = false;
}
cube_stream_id_t cube_client_stream(const cube_client_t* c) {
  return c ? cube__client_stream_id(c) : 0;
}

//===----------------------------------------------------------------------===//
// Handles
//===----------------------------------------------------------------------===//

cube_status_t cube__client_handle_foreign(const cube_client_t* c, cube_handle_t h,
                                          const char* what, const cube__handle_info_t* out) {
  return CUBE_INVALID("%s: handle 0x%" PRIx64 " lives on %s, not on this client's %s", what, h.id,
                      out->server->props.name, c->server->props.name);
}

cube_status_t cube__client_handle_f(const cube_client_t* c, cube_handle_t h,
                                    cube__handle_info_t* out, const char* fmt, ...) {
  cube_status_t st = cube__client_handle(c, h, "", out);
  if (!st) return CUBE_OK;
  cube_status_free(st);
  char what[192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  /* The same lookup again (a failed handle stays failed): its message. */
  return cube__client_handle(c, h, what, out);
}

//===----------------------------------------------------------------------===//
// Resources
//===----------------------------------------------------------------------===//

cube_status_t cube_client_get_resource(cube_client_t* c, cube_handle_t handle,
                                       cube_resource_t** out_resource) {
  const char* fn = "cube_client_get_resource";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_resource, fn, "out_resource");
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__client_handle(c, handle, "cube_client_get_resource: handle", &info));
  const cube__storage_t* storage;
  uint64_t off, sz;
  if (!cube__memory_resolve(info.mem, &storage, &off, &sz))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "%s: memory of handle 0x%" PRIx64
                             " is not bound", fn, handle.id);
  cube_resource_t* r = calloc(1, sizeof(*r));
  if (!r) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  cube__memory_ref(info.mem);
  r->mem = info.mem;
  r->ptr = (char*)storage->ptr + off + info.offset_start;
  r->size = cube__handle_view_size(&info);
  *out_resource = r;
  return CUBE_OK;
}

void* cube_resource_ptr(const cube_resource_t* r) { return r ? r->ptr : NULL; }
uint64_t cube_resource_size(const cube_resource_t* r) { return r ? r->size : 0; }
void cube_resource_release(cube_resource_t* r) {
  if (!r) return;
  cube__memory_unref(r->mem);
  free(r);
}

//===----------------------------------------------------------------------===//
// Exclusive access and allocation modes
//===----------------------------------------------------------------------===//

cube_status_t cube_client_exclusive(cube_client_t* c, cube_task_fn fn, void* user) {
  CUBE__CHECK_CLIENT(c, "cube_client_exclusive");
  if (!fn) return CUBE_INVALID("cube_client_exclusive: fn is NULL");
  /* The device to itself after everything called before: held steps too. */
  if (cube__server_auto(c->server)) cube__auto_end_device(c->server, "cube_client_exclusive");
  return cube__queue_name_refusal(
      cube__server_exclusive(c->server, cube__client_stream_id(c), fn, user),
      "cube_client_exclusive");
}

static cube_status_t cube__set_mode(cube_client_t* c, uint64_t stream_id,
                                    cube_allocation_mode_t mode, cube_allocation_mode_t* out_old) {
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__server_stream(c->server, stream_id, &st));
  cube_allocation_mode_t old = cube__stream_set_mode(st, mode);
  if (out_old) *out_old = old;
  return CUBE_OK;
}

cube_status_t cube_client_allocation_mode(cube_client_t* c, cube_allocation_mode_t mode) {
  CUBE__CHECK_CLIENT(c, "cube_client_allocation_mode");
  if (mode != CUBE_ALLOCATION_AUTO && mode != CUBE_ALLOCATION_PERSISTENT)
    return CUBE_INVALID("cube_client_allocation_mode: mode %d is not AUTO (0) or PERSISTENT (1)",
                        (int)mode);
  return cube__set_mode(c, cube__client_stream_id(c), mode, NULL);
}

cube_status_t cube_client_memory_persistent_allocation(cube_client_t* c, cube_task_fn fn,
                                                       void* user) {
  CUBE__CHECK_CLIENT(c, "cube_client_memory_persistent_allocation");
  if (!fn) return CUBE_INVALID("cube_client_memory_persistent_allocation: fn is NULL");
  /* As CubeCL: the calling thread's stream, not a pinned one. Windows nest:
   * closing one restores the mode that was in force when it opened (the
   * outer window's Persistent, or whatever allocation_mode set), as CubeCL's
   * current guard does, rather than Auto. */
  uint64_t sid = cube__stream_current_id();
  cube_allocation_mode_t outer;
  CUBE_RETURN_IF_ERROR(cube__set_mode(c, sid, CUBE_ALLOCATION_PERSISTENT, &outer));
  cube_status_t st = fn(user);
  cube_status_free(cube__set_mode(c, sid, outer, NULL)); /* restored even on failure */
  return st;
}

//===----------------------------------------------------------------------===//
// Memory accounting
//===----------------------------------------------------------------------===//

cube_status_t cube_client_memory_cleanup(cube_client_t* c) {
  CUBE__CHECK_CLIENT(c, "cube_client_memory_cleanup");
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &st));
  if (cube__stream_capturing(st))
    return cube__stream_capture_refusal(st, "cube_client_memory_cleanup", "a cleanup of the pools");
  cube__stream_cleanup(st);
  return CUBE_OK;
}

cube_status_t cube_client_memory_usage(cube_client_t* c, cube_memory_usage_t* out_usage) {
  const char* fn = "cube_client_memory_usage";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_usage, fn, "out_usage");
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &st));
  /* As CubeCL (a blocking call): after the work queued before it, so that a
   * failure of that work is seen. */
  if (cube__stream_auto(st)) cube__auto_step_end(st, "a memory usage");
  cube_status_t barrier = cube__server_barrier(st);
  if (barrier) return cube__status_annotate(barrier, "%s", fn); /* e.g. from a log callback */
  return cube__stream_usage(st, fn, true, out_usage);
}

cube_status_t cube_client_memory_report(cube_client_t* c, cube_memory_report_t* out_report) {
  const char* fn = "cube_client_memory_report";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_report, fn, "out_report");
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &st));
  cube_memory_report_t report;
  cube__stream_report(st, &report);
  return cube__struct_write(fn, "out_report->struct_size", &cube__struct_memory_report, out_report,
                            &report);
}

cube_status_t cube_client_memory_usage_device(cube_client_t* c, cube_memory_usage_t* out_usage) {
  const char* fn = "cube_client_memory_usage_device";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_usage, fn, "out_usage");
  cube__server_usage_device(c->server, out_usage);
  return CUBE_OK;
}

cube_status_t cube_client_memory_cleanup_device(cube_client_t* c) {
  CUBE__CHECK_CLIENT(c, "cube_client_memory_cleanup_device");
  cube__server_cleanup_device(c->server);
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Synchronisation and profiling
//===----------------------------------------------------------------------===//

cube_status_t cube_client_flush(cube_client_t* c) {
  CUBE__CHECK_CLIENT(c, "cube_client_flush");
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_capturing(stream))
    return cube__stream_capture_refusal(stream, "cube_client_flush", "a flush");
  if (cube__stream_auto(stream)) cube__auto_step_end(stream, "a flush");

  cube_status_t st = cube__server_flush(stream);
  return st ? cube__status_annotate(st, "cube_client_flush") : CUBE_OK;
}

cube_status_t cube_client_sync(cube_client_t* c) {
  CUBE__CHECK_CLIENT(c, "cube_client_sync");
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_capturing(stream))
    return cube__stream_capture_refusal(stream, "cube_client_sync", "a sync");
  if (cube__stream_auto(stream)) cube__auto_step_end(stream, "a sync");
  cube_status_t st = cube__server_sync(stream);
  return st ? cube__status_annotate(st, "cube_client_sync") : CUBE_OK;
}

cube_status_t cube_client_sync_async(cube_client_t* c, cube_future_t** out_future) {
  CUBE__CHECK_CLIENT(c, "cube_client_sync_async");
  CUBE__CHECK_OUT(out_future, "cube_client_sync_async", "out_future");
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_capturing(stream))
    return cube__stream_capture_refusal(stream, "cube_client_sync_async", "a sync");
  if (cube__stream_auto(stream)) cube__auto_step_end(stream, "a sync");
  return cube__queue_name_refusal(cube__server_sync_async(stream, out_future),
                                  "cube_client_sync_async");
}

cube_status_t cube_client_profile(cube_client_t* c, cube_task_fn fn, void* user, const char* name,
                                  cube_profile_duration_t* out_duration) {
  CUBE__CHECK_CLIENT(c, "cube_client_profile");
  if (!fn) return CUBE_INVALID("cube_client_profile: fn is NULL");
  CUBE__CHECK_OUT(out_duration, "cube_client_profile", "out_duration");
  uint64_t sid = cube__client_stream_id(c);
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__server_stream(c->server, sid, &stream));
  if (cube__server_auto(c->server)) cube__auto_end_device(c->server, "cube_client_profile");
  return cube__queue_name_refusal(cube__server_profile(stream, sid, fn, user, name, out_duration),
                                  "cube_client_profile");
}

cube_status_t cube_client_io_optimized_vector_sizes(const cube_client_t* c, uint32_t elem_size,
                                                    uint32_t* out_sizes, size_t capacity,
                                                    size_t* out_count) {
  const char* fn = "cube_client_io_optimized_vector_sizes";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_count, fn, "out_count");
  if (elem_size == 0) return CUBE_INVALID("%s: elem_size 0 is invalid", fn);
  const cube_device_properties_t* p = &c->server->props;
  uint64_t by_width = p->hardware.load_width / ((uint64_t)elem_size * 8);
  uint64_t max = p->hardware.max_vector_size < by_width ? p->hardware.max_vector_size : by_width;
  if (max < 1) max = 1;
  uint64_t top = 1;
  while (top * 2 <= max) top *= 2;
  size_t n = 0;
  for (uint64_t v = top; v >= 1; v /= 2) {
    if (out_sizes && n < capacity) out_sizes[n] = (uint32_t)v;
    ++n;
  }
  *out_count = n;
  if (out_sizes && n > capacity)
    return CUBE_INVALID("%s: %zu sizes do not fit in capacity %zu", fn, n, capacity);
  return CUBE_OK;
}
