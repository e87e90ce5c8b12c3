/* Streams: their pools, storage accounting (the device-wide memory limit),
 * deferred errors and cross-stream holds (see stream.h). */
#include "server/stream.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/bytes.h"
#include "base/status.h"
#include "platform/platform.h"
#include "server/server.h"
#include "server/timing.h"

//===----------------------------------------------------------------------===//
// Storage wrappers: the memory limit is counted over every stream of a device.
//===----------------------------------------------------------------------===//

static cube_status_t cube__stream_device_alloc(void* self, uint64_t size, cube__storage_t* out) {
  cube__stream_t* st = self;
  cube__server_t* s = st->server;
  if (s->memory_limit) {
    uint_fast64_t cur = atomic_load(&s->device_reserved);
    do {
      if (cur + size > s->memory_limit || cur + size < cur) {
        /* |size| is what the pool asked the storage for (a page, or the
         * request's own bytes): the manager says which. */
        char a[32], b[32], c[32];
        return cube__status_make(
            CUBE_STATUS_OUT_OF_MEMORY, "%s reserved + %s more would exceed the memory limit of %s",
            cube__format_bytes(cur, b, sizeof(b)), cube__format_bytes(size, c, sizeof(c)),
            cube__format_bytes(s->memory_limit, a, sizeof(a)));
      }
    } while (!atomic_compare_exchange_weak(&s->device_reserved, &cur, cur + size));
  } else {
    atomic_fetch_add(&s->device_reserved, size);
  }
  cube_status_t status = cube__backend_alloc(&s->be, st->backend_stream, size, out);
  if (status) atomic_fetch_sub(&s->device_reserved, size);
  return status;
}

static void cube__stream_device_dealloc(void* self, const cube__storage_t* storage) {
  cube__stream_t* st = self;
  cube__backend_dealloc(&st->server->be, st->backend_stream, storage);
  atomic_fetch_sub(&st->server->device_reserved, storage->size);
}

static cube_status_t cube__stream_host_alloc(void* self, uint64_t size, cube__storage_t* out) {
  cube__stream_t* st = self;
  return cube__backend_host_alloc(&st->server->be, size, out);
}

static void cube__stream_host_dealloc(void* self, const cube__storage_t* storage) {
  cube__stream_t* st = self;
  cube__backend_host_dealloc(&st->server->be, storage);
}

//===----------------------------------------------------------------------===//
// Streams
//===----------------------------------------------------------------------===//

/* Pinned pools whose buffers the caller still holds at shutdown (read
 * results, staging buffers): they are host memory the caller owns, so they
 * stay valid; the pools are destroyed once every buffer is released (checked
 * at the next shutdown). */
/* Device pools whose buffers are lent out at shutdown (DLPack exports,
 * cube__server_lend) are kept the same way, and their storage is given back
 * through the backend's dealloc with no device (backend.h allows that). */
typedef struct cube__orphan {
  struct cube__orphan* next;
  cube__mm_t* mm;
  cube__backend_t be; /* the table only: the device is gone */
  bool device_memory; /* device pools (dealloc), else pinned ones (host_dealloc) */
} cube__orphan_t;

static cube_status_t cube__orphan_alloc(void* self, uint64_t size, cube__storage_t* out) {
  (void)self;
  (void)out;
  return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "staging: the device was shut down (%" PRIu64 " bytes)", size);
}

static void cube__orphan_dealloc(void* self, const cube__storage_t* storage) {
  cube__orphan_t* o = self;
  if (o->device_memory)
    cube__backend_dealloc(&o->be, NULL, storage);
  else
    cube__backend_host_dealloc(&o->be, storage);
}
static pthread_mutex_t cube__orphans_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__orphan_t* cube__orphans;

/* Views lent outside the runtime now (cube__server_lend). */
static atomic_size_t cube__server_lent;

void cube__server_lend(void) { atomic_fetch_add_explicit(&cube__server_lent, 1, memory_order_relaxed); }

void cube__server_unlend(bool after_shutdown) {
  atomic_fetch_sub_explicit(&cube__server_lent, 1, memory_order_acq_rel);
  if (after_shutdown) cube__server_sweep_orphans();
}

static bool cube__mm_in_use(cube__mm_t* mm) {
  cube__mm_cleanup(mm, true);
  cube_memory_usage_t u;
  cube__mm_usage(mm, &u);
  return u.number_allocs > 0;
}

/* Destroys the orphaned pools that are free now; true if none is left. */
bool cube__server_sweep_orphans(void) {
  pthread_mutex_lock(&cube__orphans_lock);
  cube__orphan_t** p = &cube__orphans;
  while (*p) {
    cube__orphan_t* o = *p;
    if (cube__mm_in_use(o->mm)) {
      p = &o->next;
      continue;
    }
    *p = o->next;
    cube__mm_destroy(o->mm);
    free(o);
  }
  bool empty = cube__orphans == NULL;
  pthread_mutex_unlock(&cube__orphans_lock);
  return empty;
}

/* Destroys |mm|, or keeps it as an orphan while buffers of it are in use
 * (|device_memory|: a device pool, with |alignment|). */
static void cube__stream_retire_mm(cube__stream_t* st, cube__mm_t* mm, bool device_memory,
                                   uint64_t alignment) {
  if (!cube__mm_in_use(mm)) {
    cube__mm_destroy(mm);
    return;
  }
  cube__orphan_t* o = calloc(1, sizeof(*o));
  if (!o) {
    cube__mm_destroy(mm);
    return;
  }
  /* The pool's storage ops point at this stream, which goes away: they now
   * point at the orphan, which frees through the backend table with no
   * device (backend.h allows that). */
  o->mm = mm;
  o->be = cube__backend_orphan(&st->server->be);
  o->device_memory = device_memory;
  cube__storage_ops_t ops = {o, alignment, cube__orphan_alloc, cube__orphan_dealloc};
  cube__mm_rebind_storage(o->mm, &ops);
  pthread_mutex_lock(&cube__orphans_lock);
  o->next = cube__orphans;
  cube__orphans = o;
  pthread_mutex_unlock(&cube__orphans_lock);
}

void cube__stream_destroy(cube__stream_t* st) {
  if (!st) return;
  cube__auto_destroy(st->auto_state); /* first: its graph holds buffers of the pools */
  if (st->holds_head) cube__stream_release_holds(st, true);
  if (st->mm) {
    /* With views lent out (DLPack exports), device pools still in use are
     * kept: cube_shutdown sweeps those that its handles' release freed, the
     * last export's deleter the rest. */
    if (atomic_load_explicit(&cube__server_lent, memory_order_acquire) > 0)
      cube__stream_retire_mm(st, st->mm, true, st->device_ops.alignment);
    else
      cube__mm_destroy(st->mm);
    st->mm = NULL;
  }
  cube__timing_destroy(st); /* before the backend stream goes */
  if (st->small_read) cube__memory_unref(st->small_read);
  if (st->pinned) {
    cube__stream_retire_mm(st, st->pinned, false, 64);
    st->pinned = NULL;
  }
  cube__backend_stream_destroy(&st->server->be, st->backend_stream);
  cube_status_free(st->errors);
  cube_status_free(st->profile_errors);
  pthread_mutex_destroy(&st->lock);
  cube__aligned_free(st);
}

static cube_status_t cube__stream_create(cube__server_t* s, uint64_t id, uint32_t slot,
                                         cube__stream_t** out) {
  cube__stream_t* st = cube__aligned_calloc(sizeof(*st), 64); /* |lock|'s own line */
  if (!st) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "stream %" PRIu64 ": no host memory", id);
  st->server = s;
  st->id = id;
  st->slot = slot;
  pthread_mutex_init(&st->lock, NULL);
  st->device_ops = (cube__storage_ops_t){st, s->props.memory.alignment, cube__stream_device_alloc,
                                          cube__stream_device_dealloc};
  cube__mm_options_t o;
  memset(&o, 0, sizeof(o));
  o.name = "device memory";
  o.config = s->options.memory_config;
  o.max_page_size = s->props.memory.max_page_size;
  o.granule = cube__server_memory_granule(s);
  o.persistent = CUBE__PERSISTENT_ENABLED;
  o.mode = CUBE_ALLOCATION_AUTO;
  cube_status_t status = cube__mm_create(&o, &st->device_ops, &st->mm);
  if (!status && cube__backend_has_host_storage(&s->be)) {
    st->host_ops = (cube__storage_ops_t){st, 64, cube__stream_host_alloc, cube__stream_host_dealloc};
    o.name = "pinned host memory";
    o.persistent = CUBE__PERSISTENT_DISABLED;
    status = cube__mm_create(&o, &st->host_ops, &st->pinned);
  }
  /* Called under the server's streams_lock: the installed pools are stable. */
  if (!status && s->installed) status = cube__mm_install(st->mm, s->installed, s->installed_count);
  if (!status) {
    cube__mm_set_measuring(st->mm, s->measuring);
    cube__mm_set_ring(st->mm, &s->mem_ring, id);
    if (st->pinned) cube__mm_set_ring(st->pinned, &s->mem_ring, id);
  }
  if (!status) status = cube__backend_stream_create(&s->be, id, &st->backend_stream);
  if (!status && cube__server_auto(s)) status = cube__auto_create(st, &st->auto_state);
  if (status) {
    cube__stream_destroy(st);
    return cube__status_annotate(status, "creating stream %" PRIu64, id);
  }
  *out = st;
  return CUBE_OK;
}

cube_status_t cube__server_stream(cube__server_t* s, uint64_t stream_id, cube__stream_t** out) {
  /* Ids are handed out from 0 in order: most are below max_streams. */
  uint32_t slot = (uint32_t)(stream_id < s->max_streams ? stream_id : stream_id % s->max_streams);
  cube__stream_t* st = atomic_load_explicit(&s->streams[slot], memory_order_acquire);
  if (st) {
    *out = st;
    return CUBE_OK;
  }
  pthread_mutex_lock(&s->streams_lock);
  st = atomic_load_explicit(&s->streams[slot], memory_order_acquire);
  cube_status_t status = CUBE_OK;
  if (!st) {
    status = cube__stream_create(s, stream_id, slot, &st);
    if (!status) atomic_store_explicit(&s->streams[slot], st, memory_order_release);
  }
  pthread_mutex_unlock(&s->streams_lock);
  if (!status) *out = st;
  return status;
}

void cube__stream_push_error(cube__stream_t* st, cube_status_t status) {
  if (!status) return;
  pthread_mutex_lock(&st->lock);
  if (st->profile_depth > 0 && cube_status_code(status) == CUBE_STATUS_LAUNCH_FAILED)
    st->profile_errors = cube__status_join(st->profile_errors, status);
  else
    st->errors = cube__status_join(st->errors, status);
  atomic_store_explicit(&st->errors_pending, st->errors != NULL, memory_order_relaxed);
  pthread_mutex_unlock(&st->lock);
}

cube_status_t cube__stream_take_errors(cube__stream_t* st) {
  /* An error pushed by work that ran before this call (on the runner, or on
   * a caller with the device to itself) is seen here: the queue's hand-over
   * orders that push before this load. One pushed concurrently by another
   * thread is taken by the next call, as if it had come after this one. */
  if (!atomic_load_explicit(&st->errors_pending, memory_order_relaxed)) return CUBE_OK;
  pthread_mutex_lock(&st->lock);
  cube_status_t e = st->errors;
  st->errors = NULL;
  atomic_store_explicit(&st->errors_pending, false, memory_order_relaxed);
  pthread_mutex_unlock(&st->lock);
  if (e)
    e = cube__status_annotate(e, "stream %" PRIu64 " has %zu deferred error%s", st->id,
                              cube_status_count(e), cube_status_count(e) == 1 ? "" : "s");
  return e;
}

//===----------------------------------------------------------------------===//
// Buffers that cross streams (backends with events)
//===----------------------------------------------------------------------===//

typedef struct cube__hold {
  struct cube__hold* next;
  void* event; /* recorded on the holding stream after its use */
  uint32_t count;
  cube__memory_t* mems[];
} cube__hold_t;

/* Orders |st|'s next use of |m| after the stream that used it last, when that
 * is another stream (an event recorded there now covers that use), and makes
 * |st| its last user. */
cube_status_t cube__stream_order(cube__stream_t* st, cube__memory_t* m) {
  const cube__backend_t* be = &st->server->be;
  if (!m || !cube__backend_has_events(be)) return CUBE_OK;
  /* The common case (the stream that used it last) writes nothing: the
   * descriptor's line is shared with the callers' reference counting. */
  if (atomic_load_explicit(&m->last_use, memory_order_acquire) == st) return CUBE_OK;
  cube__stream_t* last = atomic_exchange_explicit(&m->last_use, st, memory_order_acq_rel);
  if (!last || last == st) return CUBE_OK;
  void* ev = NULL;
  cube_status_t status = cube__backend_event_record(be, last->backend_stream, &ev);
  if (!status) status = cube__backend_event_wait(be, st->backend_stream, ev);
  cube__backend_event_destroy(be, ev);
  if (status)
    status = cube__status_annotate(status, "ordering memory %" PRIu64 " from stream %" PRIu64
                                   " after stream %" PRIu64, m->id, st->id, last->id);
  return status;
}

/* Holds the buffers of |mems| that belong to other streams until the work
 * |st| was given so far completed. Takes nothing when none is foreign. */
void cube__stream_hold(cube__stream_t* st, cube__memory_t* const* mems, uint32_t n) {
  const cube__backend_t* be = &st->server->be;
  if (!cube__backend_has_events(be)) return;
  uint32_t foreign = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (mems[i] && mems[i]->owner != st) ++foreign;
  if (!foreign) return;
  cube__hold_t* h = malloc(sizeof(*h) + foreign * sizeof(cube__memory_t*));
  void* ev = NULL;
  cube_status_t status = h ? cube__backend_event_record(be, st->backend_stream, &ev)
                           : cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory");
  if (status) {
    /* Without a hold the owner could reuse the memory under this stream's
     * work: wait for it instead. */
    cube_status_free(status);
    free(h);
    cube_status_free(cube__backend_sync(be, st->backend_stream));
    return;
  }
  h->next = NULL;
  h->event = ev;
  h->count = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (mems[i] && mems[i]->owner != st) {
      cube__memory_ref(mems[i]);
      h->mems[h->count++] = mems[i];
    }
  pthread_mutex_lock(&st->lock);
  if (st->holds_tail)
    st->holds_tail->next = h;
  else
    st->holds_head = h;
  st->holds_tail = h;
  atomic_fetch_add_explicit(&st->hold_count, 1, memory_order_release);
  pthread_mutex_unlock(&st->lock);
}

void cube__stream_release_holds(cube__stream_t* st, bool wait) {
  const cube__backend_t* be = &st->server->be;
  if (atomic_load_explicit(&st->hold_count, memory_order_acquire) == 0) return;
  for (;;) {
    pthread_mutex_lock(&st->lock);
    cube__hold_t* h = st->holds_head;
    if (h && !wait && !cube__backend_event_done(be, h->event)) h = NULL;
    if (h) {
      st->holds_head = h->next;
      if (!st->holds_head) st->holds_tail = NULL;
      atomic_fetch_sub_explicit(&st->hold_count, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&st->lock);
    if (!h) return;
    if (wait) {
      cube_status_t e = cube__backend_event_sync(be, h->event);
      /* Not seen to complete: wait for the whole stream before letting go. */
      if (e) cube_status_free(cube__backend_sync(be, st->backend_stream));
      cube_status_free(e);
    }
    cube__backend_event_destroy(be, h->event);
    for (uint32_t i = 0; i < h->count; ++i) cube__memory_unref(h->mems[i]);
    free(h);
  }
}

//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

/* "cpu:0 stream 3": where an allocation failed. */
const char* cube__stream_where(const cube__stream_t* st, char* buf, size_t n) {
  const cube_device_id_t id = st->server->id;
  const char* b = cube_backend_name(id.backend);
  snprintf(buf, n, "%s:%u stream %" PRIu64, b ? b : "?", id.index, st->id);
  return buf;
}

/* |status| (out of memory, carrying a report) with a last line naming the
 * largest holders of the device's memory by tag (docs/errors.md, "Out of
 * memory"):
 *   "\n  largest holders by tag: weights 40.00 MiB in 3 buffers, (untagged) ..." */
static cube_status_t cube__stream_oom_holders(cube__server_t* s, cube_status_t status) {
  cube__tag_total_t t[16];
  uint32_t n = cube__server_tag_totals(s, t, 16);
  uint64_t requested = 0;
  if (n == 0 || !cube_status_oom_report(status, &requested, NULL)) return status;
  char line[768];
  size_t len = (size_t)snprintf(line, sizeof(line), "\n  largest holders by tag:");
  for (uint32_t i = 0; i < n && i < 5 && len < sizeof(line); ++i) {
    char b[32];
    int k = snprintf(line + len, sizeof(line) - len, "%s %s %s in %" PRIu64 " buffer%s",
                     i ? "," : "", t[i].tag ? t[i].tag : "(untagged)",
                     cube__format_bytes(t[i].bytes, b, sizeof(b)), t[i].count,
                     t[i].count == 1 ? "" : "s");
    if (k < 0) break;
    len += (size_t)k;
  }
  cube_status_t out = cube__status_oom(requested, cube__status_oom_report_mut(status), "%s%s",
                                       cube_status_message(status), line);
  if (!cube_status_oom_report(out, NULL, NULL)) return status; /* the static status */
  cube_status_free(status);
  return out;
}
static void cube__trace_oom(cube__stream_t* st, uint64_t size, const char* what);

/* A failed reservation of cube__stream_alloc, out of its path (which a pool
 * hit takes): the report of an out-of-memory failure, and automatic
 * capture's second chance. Automatic capture never refuses what eager
 * launches allow: when an allocation of a stream under it runs out of
 * memory, the launches it held are queued, the queue is waited for, and the
 * allocation is tried again. */
__attribute__((noinline, cold)) static cube_status_t cube__stream_alloc_failed(
    cube__stream_t* st, uint64_t size, const char* what, cube_status_t status,
    cube__memory_t** out_mem) {
  cube__server_t* s = st->server;
  if (st->auto_state && cube_status_code(status) == CUBE_STATUS_OUT_OF_MEMORY &&
      cube__auto_yield_memory(st)) {
    cube_status_free(status);
    cube_status_free(cube__server_barrier(st));
    cube__memory_t* m = NULL;
    pthread_mutex_lock(&st->lock);
    status = cube__mm_reserve(st->mm, size, &m);
    if (!status) {
      m->owner = st;
      atomic_store_explicit(&m->last_use, st, memory_order_relaxed);
    }
    pthread_mutex_unlock(&st->lock);
    if (!status) {
      *out_mem = m;
      return CUBE_OK;
    }
  }
  if (cube_status_code(status) == CUBE_STATUS_OUT_OF_MEMORY) {
    char where[96];
    if (cube__trace_on()) cube__trace_oom(st, size, what);
    status = cube__mm_oom_locate(st->mm, status, what, cube__stream_where(st, where, sizeof(where)));
    cube_memory_report_t* r = cube__status_oom_report_mut(status);
    if (r) {
      r->device_reserved = atomic_load(&s->device_reserved);
      r->memory_limit = s->memory_limit;
    }
    if (cube__mem_tracking()) {
      cube__mem_event_t ev = {.t_ns = cube__now_ns(),
                              .size = size,
                              .stream = st->id,
                              .tag = cube__tag_current(),
                              .memory = cube__mm_name(st->mm),
                              .kind = CUBE__MEM_EVENT_OOM};
      cube__mem_ring_push(&s->mem_ring, &ev);
    }
    return cube__stream_oom_holders(s, status);
  }
  return cube__status_annotate(status, "%s", what);
}

/* An out-of-memory failure on the trace: an instant on the stream's track
 * and on the calling thread's. */
__attribute__((noinline, cold)) static void cube__trace_oom(cube__stream_t* st, uint64_t size,
                                                          const char* what) {
  cube__trace_record_t r;
  memset(&r, 0, sizeof(r));
  r.ts_ns = cube__now_ns();
  r.pid = cube__trace_device_pid(st->server->id);
  r.tid = st->id;
  r.kind = CUBE__TRACE_OOM;
  r.a[0] = size;
  snprintf(r.name, sizeof(r.name), "out of memory: %s", what ? what : "allocation");
  cube__trace_emit(&r);
  cube__trace_host(CUBE__TRACE_OOM, r.name, r.ts_ns, 0, size);
}

cube_status_t cube__stream_alloc(cube__stream_t* st, uint64_t size, const char* what,
                                 cube__memory_t** out_mem) {
  cube__memory_t* m = NULL;
  if (cube__stream_capturing(st))
    return cube__stream_capture_refusal(st, what, "allocation from the stream's pools");
  pthread_mutex_lock(&st->lock);
  cube_status_t status = cube__mm_reserve(st->mm, size, &m);
  if (!status) {
    /* Nobody else can see |m| yet (the pool only reads its counts). */
    m->owner = st;
    atomic_store_explicit(&m->last_use, st, memory_order_relaxed);
  }
  pthread_mutex_unlock(&st->lock);
  if (status) return cube__stream_alloc_failed(st, size, what, status, out_mem);
  *out_mem = m;
  return CUBE_OK;
}

static void cube__pinned_release(void* user, void* data, size_t size) {
  (void)data;
  (void)size;
  cube__memory_unref((cube__memory_t*)user);
}

cube_status_t cube__stream_staging(cube__stream_t* st, size_t size, cube_bytes_t** out) {
  if (!st->pinned)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "staging: %s has no pinned host memory",
                             st->server->props.name);
  cube__memory_t* m = NULL;
  /* Inside the gate (server.h): a recovery that has waited for the callers
   * sees this buffer held, and none is reserved while the device is lost. */
  if (!cube__stream_enter(st)) return cube__backend_lost_status(&st->server->be, "staging");
  pthread_mutex_lock(&st->lock);
  cube_status_t status = cube__mm_reserve(st->pinned, size ? size : 1, &m);
  pthread_mutex_unlock(&st->lock);
  cube__stream_leave(st);
  if (status) {
    char where[96];
    if (cube_status_code(status) == CUBE_STATUS_OUT_OF_MEMORY)
      return cube__mm_oom_locate(st->pinned, status, "staging",
                                 cube__stream_where(st, where, sizeof(where)));
    return status;
  }
  const cube__storage_t* storage;
  uint64_t off, sz;
  cube__memory_resolve(m, &storage, &off, &sz);
  /* The pool's reference keeps the slice; ours moves into the bytes. The
   * handle reference is not needed: staging buffers are never can_mut'd. */
  cube__memory_handle_to_binding(m);
  status = cube__bytes_make(CUBE_BYTES_PINNED, (char*)storage->ptr + off, size,
                            cube__pinned_release, m, out);
  if (status) cube__memory_unref(m);
  return status;
}

//===----------------------------------------------------------------------===//
// Reads
//===----------------------------------------------------------------------===//

bool cube__stream_has_staging(const cube__stream_t* st) { return st->pinned != NULL; }

void* cube__stream_small_read(cube__stream_t* st) {
  if (st->small_read_ptr || !st->pinned) return st->small_read_ptr;
  cube__memory_t* m = NULL;
  pthread_mutex_lock(&st->lock);
  cube_status_t status = cube__mm_reserve(st->pinned, CUBE__SMALL_READ_BYTES, &m);
  pthread_mutex_unlock(&st->lock);
  if (status) {
    cube_status_free(status);
    return NULL;
  }
  const cube__storage_t* storage;
  uint64_t off, sz;
  cube__memory_resolve(m, &storage, &off, &sz);
  cube__memory_handle_to_binding(m); /* as a staging buffer's: released by unref */
  st->small_read = m;
  st->small_read_ptr = (char*)storage->ptr + off;
  return st->small_read_ptr;
}

cube_allocation_mode_t cube__stream_set_mode(cube__stream_t* st, cube_allocation_mode_t mode) {
  pthread_mutex_lock(&st->lock);
  cube_allocation_mode_t old = cube__mm_mode(st->mm);
  cube__mm_set_mode(st->mm, mode);
  pthread_mutex_unlock(&st->lock);
  return old;
}

void cube__stream_cleanup(cube__stream_t* st) {
  cube__server_t* s = st->server;
  /* Holds and the backend stream are a recovery's to replace (server.h);
   * while the device is lost there is nothing to clean up: its recovery
   * gives the pools new memory. */
  if (!cube__stream_enter(st)) return;
  if (cube__backend_has_events(&s->be)) cube__stream_release_holds(st, false);
  pthread_mutex_lock(&st->lock);
  cube__mm_cleanup(st->mm, true);
  if (st->pinned) cube__mm_cleanup(st->pinned, true); /* read results and staging buffers */
  pthread_mutex_unlock(&st->lock);
  /* Memory the pools gave back may sit in the driver's own pool. */
  cube__backend_trim(&s->be, st->backend_stream);
  cube__stream_leave(st);
}

void cube__stream_release_idle(cube__stream_t* st) {
  pthread_mutex_lock(&st->lock);
  cube__mm_release_idle(st->mm);
  if (st->pinned) cube__mm_release_idle(st->pinned);
  pthread_mutex_unlock(&st->lock);
}

uint64_t cube__server_memory_granule(cube__server_t* s) {
  /* Host allocators map pages of 4 KiB, which a 64 KiB step keeps few. */
  uint64_t g = 0;
  cube_status_t status = cube__backend_ctl(&s->be, NULL, CUBE__CTL_MEMORY_GRANULE, &g);
  cube_status_free(status);
  return status == CUBE_OK && g > 0 ? g : 64ull << 10;
}

cube_status_t cube__stream_usage(cube__stream_t* st, const char* fn, bool fail_on_errors,
                                 cube_memory_usage_t* out) {
  pthread_mutex_lock(&st->lock);
  if (fail_on_errors && st->errors) {
    size_t n = cube_status_count(st->errors);
    pthread_mutex_unlock(&st->lock);
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: stream %" PRIu64 " has %zu deferred error%s; flush or sync first",
                             fn, st->id, n, n == 1 ? "" : "s");
  }
  cube__mm_usage(st->mm, out);
  pthread_mutex_unlock(&st->lock);
  return CUBE_OK;
}

void cube__stream_report(cube__stream_t* st, cube_memory_report_t* out) {
  pthread_mutex_lock(&st->lock);
  cube__mm_report(st->mm, out);
  pthread_mutex_unlock(&st->lock);
  out->device_reserved = atomic_load(&st->server->device_reserved);
  out->memory_limit = st->server->memory_limit;
}

void cube__server_usage_device(cube__server_t* s, cube_memory_usage_t* out) {
  memset(out, 0, sizeof(*out));
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    cube_memory_usage_t u;
    cube_status_free(cube__stream_usage(st, "", false, &u));
    out->number_allocs += u.number_allocs;
    out->bytes_in_use += u.bytes_in_use;
    out->bytes_padding += u.bytes_padding;
    out->bytes_reserved += u.bytes_reserved;
  }
}

void cube__server_cleanup_device(cube__server_t* s) {
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (st) cube__stream_cleanup(st);
  }
}

void cube__stream_profile_begin(cube__stream_t* st) {
  pthread_mutex_lock(&st->lock);
  st->profile_depth++;
  pthread_mutex_unlock(&st->lock);
}

cube_status_t cube__stream_profile_end(cube__stream_t* st) {
  pthread_mutex_lock(&st->lock);
  st->profile_depth--;
  cube_status_t launch_errors = NULL;
  if (st->profile_depth == 0) {
    launch_errors = st->profile_errors;
    st->profile_errors = NULL;
  }
  pthread_mutex_unlock(&st->lock);
  return launch_errors;
}

cube_status_t cube__stream_stage_file(cube__stream_t* st, cube_bytes_t** inout) {
  cube_bytes_t* b = *inout;
  if (!cube__bytes_is_file(b)) return CUBE_OK;
  size_t n = cube_bytes_size(b);
  cube_bytes_t* safe = NULL;
  if (st->pinned) {
    cube_status_t status = cube__stream_staging(st, n, &safe);
    if (status) {
      cube_status_free(status); /* no pinned memory left: a heap copy does */
      safe = NULL;
    }
  }
  if (!safe) CUBE_RETURN_IF_ERROR(cube__bytes_allocate_uninit(n, &safe));
  cube_status_t status = cube__bytes_copy_out(b, 0, cube_bytes_data(safe), n);
  if (status) {
    cube_bytes_release(safe);
    return status;
  }
  cube_bytes_release(b);
  *inout = safe;
  return CUBE_OK;
}
