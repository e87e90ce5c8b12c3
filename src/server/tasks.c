/* The server's tasks: what the client queues on a device (reads, launches,
 * flush, sync, profile; writes and copies are tasks_write.c's) and what then
 * runs on the runner. Each task carries its stream. */
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
#include "kernel/cache.h"

//===----------------------------------------------------------------------===//
// Reads
//===----------------------------------------------------------------------===//

typedef struct cube__read_task {
  cube__stream_t* stream;
  cube_future_t* future;
  size_t count;
  cube__read_region_t* regions; /* heap, owned */
} cube__read_task_t;

/* The read itself, on the runner or on a caller with the device to itself
 * (cube__submit_here): the stream's deferred errors if there are any (taken),
 * else each region into results[i] (a new buffer; NULL for a region read into
 * the caller's memory). Gives back every region's binding reference (set to
 * NULL) before it returns: once a read returns, it holds no memory. On
 * failure the results are released and NULL. */
static cube_status_t cube__read_exec(cube__stream_t* st, size_t count,
                                     cube__read_region_t* regions, cube_bytes_t** results) {
  cube__server_t* s = st->server;
  cube_status_t status = cube__stream_take_errors(st);
  /* A buffer whose contents a failure spoiled: the failure, not the bytes. */
  if (!status && __builtin_expect(cube__taint_any(), 0))
    status = cube__taint_read_status(regions, count);
  for (size_t i = 0; !status && i < count; ++i) {
    cube__read_region_t* r = &regions[i];
    const cube__storage_t* storage;
    uint64_t off, sz;
    if (!cube__memory_resolve(r->mem, &storage, &off, &sz)) {
      status = cube__status_make(CUBE_STATUS_NOT_FOUND, "read: handles[%zu]: memory is not bound", i);
      break;
    }
    status = cube__stream_order(st, r->mem);
    if (status) break;
    /* Read into the stream's staging pool: its pages stay mapped between
     * reads, where fresh heap memory costs a page fault per 4 KiB. */
    size_t n = (size_t)(r->width * r->height);
    void* dst = r->into;
    void* small = NULL; /* the stream's small-read slice, copied into the result after */
    if (!dst) {
      if (n <= CUBE__SMALL_READ_BYTES && st->pinned) small = cube__stream_small_read(st);
      if (small) {
        status = cube__bytes_allocate_uninit(n, &results[i]);
        dst = small;
      } else {
        status = st->pinned ? cube__stream_staging(st, n, &results[i])
                            : cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "no staging");
        if (status) {
          cube_status_free(status);
          status = cube__bytes_allocate_uninit(n, &results[i]);
        }
        if (!status) dst = cube_bytes_data(results[i]);
      }
    }
    if (!status && r->width != 0 && r->height != 0) {
      uint64_t t0 = cube__timing_wanted(s) ? cube__now_ns() : 0;
      status = cube__backend_read(&s->be, st->backend_stream, dst, storage, off + r->offset,
                                r->pitch, r->width, r->height);
      if (t0 && !status) {
        /* A read has its bytes when the backend returns: the host clock. */
        cube__timed_desc_t d = {CUBE__TRACE_DOWNLOAD, "download", {r->width * r->height, 0, 0}};
        cube__timing_host_after(st, &d, t0, cube__now_ns() - t0);
      }
    }
    if (!status && small) memcpy(cube_bytes_data(results[i]), small, n);
    if (status) status = cube__status_annotate(status, "read of handles[%zu]", i);
  }
  for (size_t i = 0; i < count; ++i) {
    cube__memory_unref(regions[i].mem);
    regions[i].mem = NULL;
  }
  if (status) cube_bytes_release_array(results, count);
  return status;
}

static cube_status_t cube__read_task_run(void* state, void* payload) {
  (void)state;
  cube__read_task_t* t = payload;
  cube_status_t status =
      cube__read_exec(t->stream, t->count, t->regions, cube__future_results(t->future));
  cube__future_complete(t->future, status);
  t->future = NULL;
  return CUBE_OK;
}

static void cube__read_task_drop(void* payload) {
  cube__read_task_t* t = payload;
  if (t->future) /* never ran (shutdown) */
    cube__future_complete(t->future, cube__status_make(CUBE_STATUS_ABORTED,
                                                       "read: the device was shut down"));
  for (size_t i = 0; i < t->count; ++i)
    if (t->regions[i].mem) cube__memory_unref(t->regions[i].mem);
  free(t->regions);
}

/* A read on its way to the queue: run on the calling thread when the device
 * has nothing before it (cube__read_here), else queued as a task whose record
 * cube__read_prepare writes. */
typedef struct cube__read_call {
  cube__stream_t* stream;
  size_t count;
  cube__read_region_t* regions; /* the caller's; their references are the call's */
  cube_bytes_t** results;       /* here: count slots, NULL */
  cube_future_t* future;        /* the future to complete, or NULL: the task makes one */
} cube__read_call_t;

static cube_status_t cube__read_here(void* state, void* arg) {
  (void)state;
  cube__read_call_t* r = arg;
  return cube__read_exec(r->stream, r->count, r->regions, r->results);
}

static cube_status_t cube__read_prepare(void* payload, void* arg) {
  cube__read_call_t* r = arg;
  cube__read_task_t* t = payload;
  t->stream = r->stream;
  t->count = r->count;
  t->future = r->future ? r->future : cube__future_create(r->count);
  t->regions = malloc((r->count ? r->count : 1) * sizeof(*r->regions));
  if (!t->future || !t->regions) {
    if (!r->future) cube__future_discard(t->future);
    free(t->regions);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "read: no host memory");
  }
  memcpy(t->regions, r->regions, r->count * sizeof(*r->regions));
  r->future = t->future;
  return CUBE_OK;
}

/* How long a synchronous read polls for the work queued before it to finish,
 * so that it runs on the calling thread (it would wait for that work anyway):
 * about as long as a future's wait spins before it sleeps. A define, so that
 * other values can be measured (docs/benchmarks.md). */
#ifndef CUBE__READ_WAIT_NS
#define CUBE__READ_WAIT_NS 20000
#endif
/* The same on a host-memory device (the CPU backend), whose runner and pool
 * already run one thread per core: a caller polling there takes a core from
 * the work it waits for. */
#ifndef CUBE__HOST_READ_WAIT_NS
#define CUBE__HOST_READ_WAIT_NS 2000
#endif

static inline uint64_t cube__read_wait_ns(const cube__server_t* s) {
  return cube__server_async(s) ? CUBE__READ_WAIT_NS : CUBE__HOST_READ_WAIT_NS;
}

/* Runs or queues the read (the regions' references are taken over, also on
 * failure). *out_here: it ran here, its status is returned and its results
 * are in r->results; else, when OK, r->future is the queued task's. */
static cube_status_t cube__read_submit(cube__read_call_t* r, uint64_t wait_ns, bool* out_here) {
  cube__here_task_t t = {cube__read_here,     r, cube__read_task_run, sizeof(cube__read_task_t),
                         cube__read_prepare,  r, cube__read_task_drop, wait_ns, false};
  cube__stream_t* st = r->stream;
  cube_status_t status = cube__submit_here(st->server->service, st->id, &t, out_here);
  if (status && !*out_here)
    for (size_t i = 0; i < r->count; ++i) cube__memory_unref(r->regions[i].mem);
  return status;
}

cube_status_t cube__server_read(cube__stream_t* st, size_t count, cube__read_region_t* regions,
                                cube_future_t** out_future) {
  cube_future_t* f = cube__future_create(count);
  if (!f) {
    for (size_t i = 0; i < count; ++i) cube__memory_unref(regions[i].mem);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "read: no host memory");
  }
  /* An asynchronous read does not wait for earlier work: it runs here only
   * when there is none, and then its future is complete when it returns. */
  cube__read_call_t r = {st, count, regions, cube__future_results(f), f};
  bool here = false;
  cube_status_t status = cube__read_submit(&r, 0, &here);
  if (here) {
    cube__future_complete(f, status); /* drops the task's reference */
  } else if (status) {
    cube__future_discard(f);
    return status;
  }
  *out_future = f;
  return CUBE_OK;
}

static cube_status_t cube__server_read_wait_run(cube__stream_t* st, size_t count,
                                     cube__read_region_t* regions, cube_bytes_t** out_bytes) {
  cube_bytes_t* small[4] = {NULL, NULL, NULL, NULL};
  cube_bytes_t** results = count <= 4 ? small : calloc(count, sizeof(*results));
  if (!results) {
    for (size_t i = 0; i < count; ++i) cube__memory_unref(regions[i].mem);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "read: no host memory");
  }
  cube__read_call_t r = {st, count, regions, results, NULL};
  bool here = false;
  cube_status_t status = cube__read_submit(&r, cube__read_wait_ns(st->server), &here);
  if (!here && !status) {
    status = cube_future_wait(r.future, UINT64_MAX, results);
    cube_future_release(r.future);
  }
  if (!status) memcpy(out_bytes, results, count * sizeof(*results));
  if (results != small) free(results);
  return status;
}

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

/* True when |st|'s last timed launch prepared |k| in |mode| (or the backend
 * prepares nothing): its next timed launch has no compile or load to put
 * apart. */
static inline bool cube__launch_prepared(const cube__server_t* s, const cube__stream_t* st,
                                         const cube_kernel_t* k, cube_execution_mode_t mode) {
  return !cube__backend_has_prepare(&s->be) ||
         (st->prepared_kernel == k->id && st->prepared_mode == (int)mode);
}

/* A launch the profile or the trace wants timed (server/timing.h): its
 * compile or cache load apart, then the launch between two marks. Out of
 * line: the untimed launch is the hot path. */
__attribute__((noinline)) static cube_status_t cube__launch_timed(
    cube__server_t* s, cube__stream_t* st, cube__launch_task_t* t, cube__launch_t* l,
    const uint32_t count[3], cube__memory_t** mems, bool events, uint64_t* device_ns) {
  cube_kernel_t* k = t->kernel;
  cube_profile_level_t level = s->profiler.level;
  cube__timing_mark_t m;
  /* The traced loop's common case: the kernel loaded, the stream's kernels
   * timed by the backend's records as before (the caller comes here only
   * when the profile or a trace wants timing, so below the exec level
   * timing is wanted): marked at once, nothing to prepare. */
  if (level != CUBE_PROFILE_EXEC && cube__launch_prepared(s, st, k, t->mode) &&
      cube__timing_activity_known(st, level >= CUBE_PROFILE_BASIC)) {
    cube__timing_mark_activity(st, &m);
  } else {
    if (level == CUBE_PROFILE_EXEC) cube__profiler_log(&s->profiler, "Executing %s", k->name);
    if (!cube__launch_prepared(s, st, k, t->mode)) {
      /* Compile (or load from the kernel cache) outside the timed launch,
       * as a row of its own: a first launch is not a slow kernel. The
       * stream's next timed launch of the same kernel and mode finds it
       * loaded and skips this (after a recovery of the device, which
       * forgets modules, its load is inside that launch's time). */
      cube__cache_outcome_t outcome;
      cube__cache_outcome_begin(&outcome);
      uint64_t c0 = cube__now_ns();
      cube_status_t prep = cube__backend_prepare(&s->be, k, t->mode);
      uint64_t cns = cube__now_ns() - c0;
      cube__cache_outcome_end();
      if (prep) return prep;
      st->prepared_kernel = k->id;
      st->prepared_mode = (int)t->mode;
      if ((outcome.misses || outcome.disk_hits) && level >= CUBE_PROFILE_BASIC)
        cube__profiler_record(&s->profiler,
                              outcome.misses ? CUBE_PROFILE_ROW_COMPILE
                                             : CUBE_PROFILE_ROW_CACHE_LOAD,
                              k->name, cns);
    }
    cube__timing_begin_device(st, &m, false);
  }
  /* Without events or activity records the backend may time the kernel
   * itself (OpenCL's profiling info); with them the marks are the device's. */
  if (!m.ev0 && !m.activity) l->device_ns = device_ns;
  l->activity = m.activity;
  l->trace_order = m.order;
  cube_status_t status = cube__backend_launch(&s->be, st->backend_stream, l);
  if (events) cube__stream_hold(st, mems, t->arg_count);
  if (!status && m.activity) {
    cube__timing_end_activity(st); /* the backend's record comes later */
  } else if (!status) {
    cube__timed_desc_t d = {CUBE__TRACE_KERNEL, k->name, {count[0], count[1], count[2]}};
    cube__timing_end(st, &m, &d, *device_ns);
  } else if (m.ev0) {
    cube__backend_event_destroy(&s->be, m.ev0);
  }
  return status;
}

/* The queued record: a header, the arguments as the backend gets them
 * (resolved in place on the runner), then the buffers they bind. With four
 * arguments it fits a queue cell. A launch one of whose buffers holds no
 * valid contents (a taint) is not run, and passes the taint on. */
static inline __attribute__((always_inline)) cube_status_t cube__launch_run(
    cube__server_t* s, cube__stream_t* st, cube__launch_task_t* t, bool profiled) {
  cube_kernel_t* k = t->kernel;
  cube__memory_t** mems = cube__launch_mems(t);
  uint32_t count[3] = {t->count[0], t->count[1], t->count[2]};
  /* A buffer (or the count's) without valid contents: not run, the taint
   * passed on. While no buffer of the process is tainted, one load. */
  if (__builtin_expect(cube__taint_any(), 0) && cube__taint_launch_skip(st, t, "not run"))
    return CUBE_OK;
  if (t->dyn_mem) {
    const cube__storage_t* storage;
    uint64_t off, sz;
    if (!cube__memory_resolve(t->dyn_mem, &storage, &off, &sz))
      return cube__status_make(CUBE_STATUS_NOT_FOUND,
                               "launch of kernel '%s': the dynamic count's memory %" PRIu64
                               " is not bound",
                               k->name, t->dyn_mem->id);
    uint32_t c[3];
    if (s->be.vt->caps & CUBE__CAP_HOST_MEMORY) {
      memcpy(c, (const char*)storage->ptr + off + t->dyn_offset, sizeof(c));
    } else {
      CUBE_RETURN_IF_ERROR(cube__stream_order(st, t->dyn_mem));
      CUBE_RETURN_IF_ERROR(cube__backend_read(&s->be, st->backend_stream, c, storage,
                                              off + t->dyn_offset, sizeof(c), sizeof(c), 1));
    }
    for (int i = 0; i < 3; ++i) {
      if (c[i] > s->props.hardware.max_cube_count[i])
        return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                                 "launch of kernel '%s': dynamic cube count %c = %u exceeds the "
                                 "device's %u",
                                 k->name, "xyz"[i], c[i], s->props.hardware.max_cube_count[i]);
      count[i] = c[i];
    }
  }
  if (!count[0] || !count[1] || !count[2]) return CUBE_OK;
  bool events = cube__backend_has_events(&s->be);
  if (events) {
    cube__stream_release_holds(st, false);
    for (uint32_t i = 0; i < t->arg_count; ++i)
      CUBE_RETURN_IF_ERROR(cube__stream_order(st, mems[i]));
  }
  /* Each buffer resolved once, in place: its storage and the view's offset
   * in it. */
  for (uint32_t i = 0; i < t->arg_count; ++i) {
    if (!mems[i]) continue;
    const cube__storage_t* storage;
    uint64_t off, sz;
    if (!cube__memory_resolve(mems[i], &storage, &off, &sz))
      return cube__status_make(CUBE_STATUS_NOT_FOUND,
                               "launch of kernel '%s': argument %u: memory %" PRIu64
                               " is not bound",
                               k->name, i, mems[i]->id);
    t->args[i].buffer.storage = storage;
    t->args[i].buffer.offset += off;
  }
  uint64_t device_ns = UINT64_MAX;
  cube__launch_t l = {k,       k->name,         {count[0], count[1], count[2]}, k->cube_dim, t->mode,
                      t->arg_count, k->arg_kinds, t->args, NULL, false, 0};
  if (__builtin_expect(!profiled || (s->profiler.level == CUBE_PROFILE_NONE && !cube__trace_on()),
                       1)) {
    cube_status_t status = cube__backend_launch(&s->be, st->backend_stream, &l);
    if (events) cube__stream_hold(st, mems, t->arg_count);
    return status;
  }
  return cube__launch_timed(s, st, t, &l, count, mems, events, &device_ns);
}

cube_status_t cube__launch_exec(cube__server_t* s, cube__stream_t* st, cube__launch_task_t* t,
                               bool profiled) {
  cube_status_t status = cube__launch_run(s, st, t, profiled);
  /* Its buffers hold no valid contents now: taint them. */
  if (__builtin_expect(status != NULL, 0)) cube__taint_launch_failed(st, t, status);
  return status;
}

static cube_status_t cube__launch_task_run(void* state, void* payload) {
  (void)state;
  cube__launch_task_t* t = payload;
  cube__stream_t* st = t->stream;
  cube__stream_push_error(st, cube__launch_exec(st->server, st, t, true));
  return CUBE_OK;
}

void cube__launch_task_drop(void* payload) {
  cube__launch_task_t* t = payload;
  cube__memory_t** mems = cube__launch_mems(t);
  for (uint32_t i = 0; i < t->arg_count; ++i)
    if (mems[i]) cube__memory_unref(mems[i]);
  if (t->dyn_mem) cube__memory_unref(t->dyn_mem);
  cube_kernel_release(t->kernel);
}

/* Writes the record where it is queued and takes its references. */
void cube__launch_fill(void* payload, const void* arg) {
  const cube__launch_fill_t* f = arg;
  cube__launch_task_t* t = payload;
  t->stream = f->stream;
  t->kernel = cube_kernel_retain(f->kernel);
  t->dyn_mem = f->dyn_mem;
  t->dyn_offset = f->dyn_offset;
  if (f->dyn_mem) cube__memory_ref(f->dyn_mem);
  memcpy(t->count, f->count, sizeof(t->count));
  t->mode = f->mode;
  t->arg_count = f->arg_count;
  t->graph_node = 0;
  cube__memory_t** mems = cube__launch_mems(t);
  for (uint32_t i = 0; i < f->arg_count; ++i) {
    t->args[i] = f->args[i].value;
    mems[i] = f->args[i].mem;
    if (mems[i]) cube__memory_ref(mems[i]);
  }
}

/* A launch run on the calling thread (cube__submit_here): the record built
 * on the stack, run and dropped as the queue would. */
static cube_status_t cube__launch_here(void* state, void* arg) {
  _Alignas(64) unsigned char record[CUBE__TASK_INLINE_BYTES];
  cube__launch_fill(record, arg);
  cube_status_t status = cube__launch_task_run(state, record);
  cube__launch_task_drop(record);
  return status;
}

static cube_status_t cube__launch_prepare(void* payload, void* arg) {
  cube__launch_fill(payload, arg);
  return CUBE_OK;
}

/* Right after a read or sync that ran on this thread: the launch runs here
 * too when nothing is queued ahead of it (cube__submit_here). Out of line:
 * the queued launch is the hot path. */
__attribute__((noinline)) static cube_status_t cube__launch_submit_here(
    cube__stream_t* st, cube__launch_fill_t* f, size_t size) {
  cube__here_task_t t = {cube__launch_here,    f, cube__launch_task_run, size,
                         cube__launch_prepare, f, cube__launch_task_drop, 0, true};
  bool here = false;
  return cube__submit_here(st->server->service, st->id, &t, &here);
}

cube_status_t cube__server_launch(cube__stream_t* st, cube_kernel_t* kernel,
                                  const uint32_t count[3], cube__memory_t* dyn_mem,
                                  uint64_t dyn_offset, cube_execution_mode_t mode,
                                  uint32_t arg_count, const cube__task_arg_t* args) {
  cube__launch_fill_t f = {st, kernel, count, dyn_mem, dyn_offset, mode, arg_count, args};
  size_t size = cube__launch_task_size(arg_count);
  /* The thread-local test first: it is false on every launch of a burst. */
  if (__builtin_expect(cube__follows_blocking_any(), 0) &&
      cube__follows_blocking(st->server->device) && cube__server_async(st->server) &&
      size <= CUBE__TASK_INLINE_BYTES)
    return cube__launch_submit_here(st, &f, size);
  return cube__submit_fill(st->server->service, st->id, cube__launch_task_run,
                           size, cube__launch_fill, &f, cube__launch_task_drop);
}

//===----------------------------------------------------------------------===//
// Flush, sync, profile
//===----------------------------------------------------------------------===//

static cube_status_t cube__flush_task_run(void* state, void* payload) {
  (void)state;
  return cube__stream_take_errors((cube__stream_t*)payload);
}

static cube_status_t cube__noop_task_run(void* state, void* payload) {
  (void)state;
  (void)payload;
  return CUBE_OK;
}

/* A lend's ordering (cube__server_lend_order), on the runner. */
typedef struct cube__lend_order {
  cube__stream_t* stream;
  cube__memory_t* mem;
  void* consumer; /* the consumer's native stream, or NULL: wait */
} cube__lend_order_t;

static cube_status_t cube__lend_order_run(void* state, void* payload) {
  (void)state;
  cube__lend_order_t* o = payload;
  cube__stream_t* st = o->stream;
  const cube__backend_t* be = &st->server->be;
  /* Spoiled contents (taint) are not lent: the consumer would take them as
   * valid. Checked here, in the stream's order, as a read checks them. */
  cube__taint_t* t = __builtin_expect(cube__taint_any(), 0) ? cube__memory_taint(o->mem) : NULL;
  if (t) {
    char where[64];
    snprintf(where, sizeof(where), "export of memory %" PRIu64, o->mem->id);
    return cube__taint_status(t, where);
  }
  CUBE_RETURN_IF_ERROR(cube__stream_order(st, o->mem));
  if (!o->consumer) return cube__backend_sync(be, st->backend_stream);
  cube_status_t r = cube__backend_ctl(be, st->backend_stream, CUBE__CTL_ORDER_NATIVE_STREAM,
                                      &o->consumer);
  if (cube_status_code(r) == CUBE_STATUS_UNIMPLEMENTED) {
    cube_status_free(r);
    return CUBE_INVALID("stream %p was given, but %s has no native streams to order (pass 0 "
                        "to wait, or -1)", o->consumer, st->server->props.name);
  }
  return r;
}

cube_status_t cube__server_lend_order(cube__stream_t* st, cube__memory_t* mem, void* consumer) {
  cube__lend_order_t o = {st, mem, consumer};
  return cube__submit_blocking(st->server->service, st->id, cube__lend_order_run, &o);
}

static cube_status_t cube__timing_poll_task_run(void* state, void* payload) {
  (void)state;
  cube__timing_collect((cube__stream_t*)payload);
  return CUBE_OK;
}

cube_status_t cube__server_timing_poll(cube__stream_t* st) {
  if (!st->timing) return CUBE_OK; /* nothing was timed with events or activity records */
  return cube__submit_blocking(st->server->service, st->id, cube__timing_poll_task_run, st);
}

cube_status_t cube__server_barrier(cube__stream_t* st) {
  return cube__submit_blocking(st->server->service, st->id, cube__noop_task_run, NULL);
}

cube_status_t cube__server_flush(cube__stream_t* st) {
  cube__device_flush(st->server->device);
  return cube__submit_blocking(st->server->service, st->id, cube__flush_task_run, st);
}

static cube_status_t cube__sync_exec(cube__stream_t* st) {
  cube__server_t* s = st->server;
  cube_status_t status = cube__backend_sync(&s->be, st->backend_stream);
  if (status) cube__stream_push_error(st, status);
  if (cube__backend_has_events(&s->be)) cube__stream_release_holds(st, false);
  cube__timing_poll(st, true); /* the device is done: every pair resolves */
  cube__stream_release_idle(st); /* buffers unused since the last sync go back */
  if (s->profiler.level >= CUBE_PROFILE_BASIC) cube__profiler_summary(&s->profiler);
  return cube__stream_take_errors(st);
}

/* A sync runs on the calling thread when the work queued before it has run
 * (at once, or within CUBE__READ_WAIT_NS of polling, as a read): the
 * backend's wait for the device is then the caller's own (a CUDA stream
 * sync on this thread), and no hand-off wakes it afterwards. Else it is
 * queued in that place and the caller waits for it, then for a blocking
 * no-op behind it: the runner releases a blocking cell before it wakes its
 * caller, so that once the sync returns nothing it waited for is still in
 * the queue (an asynchronous read right after it finds the device idle). */
typedef struct cube__sync_wait {
  cube__stream_t* stream;
  cube__event_t done; /* set by the queued task, or by its drop */
  cube_status_t result;
} cube__sync_wait_t;

static cube_status_t cube__sync_here(void* state, void* arg) {
  (void)state;
  return cube__sync_exec(((cube__sync_wait_t*)arg)->stream);
}

static cube_status_t cube__sync_wait_prepare(void* payload, void* arg) {
  *(cube__sync_wait_t**)payload = arg;
  return CUBE_OK;
}

static cube_status_t cube__sync_wait_run(void* state, void* payload) {
  (void)state;
  cube__sync_wait_t* w = *(cube__sync_wait_t**)payload;
  *(cube__sync_wait_t**)payload = NULL;
  w->result = cube__sync_exec(w->stream);
  cube__event_set(&w->done);
  return CUBE_OK;
}

static void cube__sync_wait_drop(void* payload) {
  cube__sync_wait_t* w = *(cube__sync_wait_t**)payload;
  if (!w) return;
  w->result = cube__status_make(CUBE_STATUS_ABORTED, "sync: the device was shut down");
  cube__event_set(&w->done);
}

static cube_status_t cube__server_sync_run(cube__stream_t* st) {
  cube__sync_wait_t w;
  w.stream = st;
  w.result = CUBE_OK;
  cube__event_init(&w.done);
  cube__here_task_t t = {cube__sync_here,         &w, cube__sync_wait_run, sizeof(cube__sync_wait_t*),
                         cube__sync_wait_prepare, &w, cube__sync_wait_drop,
                         cube__read_wait_ns(st->server), false};
  bool here = false;
  cube_status_t status = cube__submit_here(st->server->service, st->id, &t, &here);
  if (here || status) return status;
  /* Queued: its task (or its drop) sets |done|; |w| lives until then. */
  cube__device_wait(st->server->device, &w.done);
  cube_status_free(cube__submit_blocking(st->server->service, st->id, cube__noop_task_run, NULL));
  return w.result;
}

/* A host thread's wait for a device (sync, a synchronous read) on the
 * trace: a record on the thread's track. */
static void cube__trace_wait(cube__stream_t* st, const char* what, uint64_t t0) {
  char name[64];
  const char* b = cube_backend_name(st->server->id.backend);
  snprintf(name, sizeof(name), "%s %s:%u stream %llu", what, b ? b : "?", st->server->id.index,
           (unsigned long long)st->id);
  cube__trace_host(CUBE__TRACE_WAIT, name, t0, cube__now_ns() - t0, 0);
}

cube_status_t cube__server_sync(cube__stream_t* st) {
  if (__builtin_expect(!cube__trace_on(), 1)) return cube__server_sync_run(st);
  uint64_t t0 = cube__now_ns();
  cube_status_t status = cube__server_sync_run(st);
  cube__trace_wait(st, "sync", t0);
  return status;
}

cube_status_t cube__server_read_wait(cube__stream_t* st, size_t count,
                                     cube__read_region_t* regions, cube_bytes_t** out_bytes) {
  if (__builtin_expect(!cube__trace_on(), 1))
    return cube__server_read_wait_run(st, count, regions, out_bytes);
  uint64_t t0 = cube__now_ns();
  cube_status_t status = cube__server_read_wait_run(st, count, regions, out_bytes);
  cube__trace_wait(st, "read", t0);
  return status;
}

typedef struct cube__sync_async_task {
  cube__stream_t* stream;
  cube_future_t* future;
} cube__sync_async_task_t;

static cube_status_t cube__sync_async_run(void* state, void* payload) {
  (void)state;
  cube__sync_async_task_t* t = payload;
  cube__future_complete(t->future, cube__sync_exec(t->stream));
  t->future = NULL;
  return CUBE_OK;
}

static void cube__sync_async_drop(void* payload) {
  cube__sync_async_task_t* t = payload;
  if (t->future)
    cube__future_complete(t->future, cube__status_make(CUBE_STATUS_ABORTED,
                                                       "sync: the device was shut down"));
}

cube_status_t cube__server_sync_async(cube__stream_t* st, cube_future_t** out_future) {
  cube__sync_async_task_t t = {st, cube__future_create(0)};
  if (!t.future) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "sync: no host memory");
  cube_future_t* f = t.future;
  cube_status_t status = cube__submit(st->server->service, st->id, cube__sync_async_run, &t,
                                      sizeof(t), cube__sync_async_drop);
  if (status) {
    cube__future_unref(f);
    return status;
  }
  *out_future = f;
  return CUBE_OK;
}

typedef struct cube__profile_call {
  cube__stream_t* stream;
  cube_task_fn fn;
  void* user;
  const char* name;
  cube_profile_duration_t* out;
} cube__profile_call_t;

static cube_status_t cube__profile_exclusive(void* p) {
  cube__profile_call_t* c = p;
  cube__stream_t* st = c->stream;
  cube__server_t* s = st->server;
  /* With timed events the bracket is the device's own (work queued before
   * it is not waited for); else the work before it is finished first, so
   * that the runner's clock measures only |fn|'s. */
  if (!cube__backend_has_event_timing(&s->be)) {
    cube_status_t start = cube__backend_sync(&s->be, st->backend_stream);
    if (start) return cube__status_annotate(start, "cube_client_profile: start");
  }
  cube__stream_profile_begin(st);
  uint64_t t0 = cube__now_ns();
  void* ev0 = NULL;
  void* ev1 = NULL;
  if (cube__backend_has_event_timing(&s->be)) {
    /* Device timestamps around the work (the host clock adds the sync). */
    cube_status_t e = cube__backend_event_record(&s->be, st->backend_stream, &ev0);
    if (e) {
      cube_status_free(e);
      ev0 = NULL;
    }
  }
  cube_status_t status = c->fn(c->user);
  if (ev0) {
    cube_status_t e = cube__backend_event_record(&s->be, st->backend_stream, &ev1);
    if (e) {
      cube_status_free(e);
      ev1 = NULL;
    }
  }
  cube_status_t sync_status = cube__backend_sync(&s->be, st->backend_stream);
  uint64_t t1 = cube__now_ns();
  if (ev0 && ev1 && !sync_status) {
    uint64_t ns = 0;
    cube_status_t e = cube__backend_event_elapsed(&s->be, ev0, ev1, &ns);
    if (!e) t1 = t0 + ns;
    cube_status_free(e);
  }
  cube__backend_event_destroy(&s->be, ev0);
  cube__backend_event_destroy(&s->be, ev1);
  cube_status_t launch_errors = cube__stream_profile_end(st);
  /* The task's own status, alone, is the caller's: returned as it was made
   * (cube_status_make), not annotated. */
  if (status && !sync_status && !launch_errors) return status;
  if (status || sync_status || launch_errors) {
    status = cube__status_join(status, sync_status);
    status = cube__status_join(status, launch_errors);
    return cube__status_annotate(status, "cube_client_profile '%s'", c->name ? c->name : "");
  }
  c->out->start_ns = t0;
  c->out->end_ns = t1;
  c->out->method = s->props.timing_method;
  cube__timing_poll(st, true); /* the launches inside have their rows before the region */
  if (c->name && s->profiler.level >= CUBE_PROFILE_BASIC)
    cube__profiler_record(&s->profiler, CUBE_PROFILE_ROW_REGION, c->name, t1 - t0);
  if (c->name && cube__trace_on()) {
    cube__trace_record_t r;
    memset(&r, 0, sizeof(r));
    r.ts_ns = t0;
    r.dur_ns = t1 - t0;
    r.pid = cube__trace_device_pid(s->id);
    r.tid = st->id;
    r.kind = CUBE__TRACE_RANGE;
    cube__trace_prefix_name(r.name, sizeof(r.name), "profile ", c->name);
    cube__trace_emit(&r);
  }
  return CUBE_OK;
}

cube_status_t cube__server_profile(cube__stream_t* st, uint64_t stream_id, cube_task_fn fn,
                                   void* user, const char* name,
                                   cube_profile_duration_t* out_duration) {
  cube__profile_call_t c = {st, fn, user, name, out_duration};
  return cube__exclusive(st->server->device, stream_id, cube__profile_exclusive, &c);
}

cube_status_t cube__server_exclusive(cube__server_t* s, uint64_t stream_id, cube_task_fn fn,
                                     void* user) {
  return cube__exclusive(s->device, stream_id, fn, user);
}

cube_status_t cube__server_prepare(cube__server_t* s, const cube_kernel_t* kernel,
                                   cube_execution_mode_t mode) {
  return cube__backend_prepare(&s->be, kernel, mode);
}

bool cube__server_has_kernel_limits(const cube__server_t* s) {
  return cube__backend_has_kernel_limits(&s->be);
}

cube_status_t cube__server_kernel_limits(cube__server_t* s, const cube_kernel_t* kernel,
                                         cube_execution_mode_t mode, cube__kernel_limits_t* out) {
  /* The memo is a cache of the backend's answer, not kernel state: it is
   * filled through the const pointer as a lazily computed field is. */
  cube__kernel_limits_memo_t* m =
      &((cube_kernel_t*)kernel)->limits[s->be.vt->backend][(unsigned)mode % 3u];
  uint32_t tag = s->be.index + 1u;
  if (atomic_load_explicit(&m->device, memory_order_acquire) == tag) {
    out->max_units = m->max_units;
    out->local_memory = m->local_memory;
    out->max_local_memory = m->max_local_memory;
    return CUBE_OK;
  }
  CUBE_RETURN_IF_ERROR(cube__backend_kernel_limits(&s->be, kernel, mode, out));
  uint32_t empty = 0;
  if (atomic_compare_exchange_strong_explicit(&m->device, &empty, CUBE__LIMITS_WRITING,
                                              memory_order_acquire, memory_order_relaxed)) {
    m->max_units = out->max_units;
    m->local_memory = out->local_memory;
    m->max_local_memory = out->max_local_memory;
    atomic_store_explicit(&m->device, tag, memory_order_release);
  }
  return CUBE_OK;
}
