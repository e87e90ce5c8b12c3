#include "server/server.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/status.h"
#include "kernel/kernel.h"

//===----------------------------------------------------------------------===//
// Futures
//===----------------------------------------------------------------------===//

struct cube_future_s {
  atomic_uint refs;       /* the caller's and the task's */
  cube__event_t done;
  cube_status_t status;   /* set before done */
  size_t count;
  cube_bytes_t** results; /* count entries, set before done */
  atomic_bool consumed;
};

static cube_future_t* cube__future_create(size_t count) {
  cube_future_t* f = calloc(1, sizeof(*f));
  if (!f) return NULL;
  atomic_init(&f->refs, 2);
  cube__event_init(&f->done);
  f->count = count;
  if (count) {
    f->results = calloc(count, sizeof(cube_bytes_t*));
    if (!f->results) {
      free(f);
      return NULL;
    }
  }
  return f;
}

static void cube__future_unref(cube_future_t* f) {
  if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
  if (!atomic_load(&f->consumed)) {
    cube_bytes_release_array(f->results, f->count);
    cube_status_free(f->status);
  }
  free(f->results);
  free(f);
}

static void cube__future_complete(cube_future_t* f, cube_status_t status) {
  f->status = status;
  if (status) {
    cube_bytes_release_array(f->results, f->count);
    for (size_t i = 0; i < f->count; ++i) f->results[i] = NULL;
  }
  cube__event_set(&f->done);
  cube__future_unref(f);
}

cube_status_t cube_future_wait(cube_future_t* f, uint64_t timeout_ns, cube_bytes_t** out_bytes) {
  if (!f) return CUBE_INVALID("cube_future_wait: future is NULL");
  if (f->count && !out_bytes)
    return CUBE_INVALID("cube_future_wait: out_bytes is NULL for a future of %zu results",
                        f->count);
  if (!cube__event_wait(&f->done, timeout_ns))
    return cube__status_make(CUBE_STATUS_DEADLINE_EXCEEDED,
                             "cube_future_wait: not ready after %" PRIu64 " ns", timeout_ns);
  bool expected = false;
  if (!atomic_compare_exchange_strong(&f->consumed, &expected, true))
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "cube_future_wait: the result was already taken by an earlier wait");
  if (f->status) {
    cube_status_t s = f->status;
    f->status = NULL;
    return s;
  }
  for (size_t i = 0; i < f->count; ++i) {
    out_bytes[i] = f->results[i];
    f->results[i] = NULL;
  }
  return CUBE_OK;
}

bool cube_future_is_ready(const cube_future_t* f) {
  return f && cube__event_is_set((cube__event_t*)&f->done);
}

size_t cube_future_count(const cube_future_t* f) { return f ? f->count : 0; }

void cube_future_release(cube_future_t* f) {
  if (f) cube__future_unref(f);
}

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
        char a[32], b[32], c[32];
        return cube__status_make(
            CUBE_STATUS_OUT_OF_MEMORY,
            "memory limit of %s reached: %s reserved + %s requested > %s (CUBE_MEMORY_LIMIT)",
            cube__format_bytes(s->memory_limit, a, sizeof(a)), cube__format_bytes(cur, b, sizeof(b)),
            cube__format_bytes(size, c, sizeof(c)), a);
      }
    } while (!atomic_compare_exchange_weak(&s->device_reserved, &cur, cur + size));
  } else {
    atomic_fetch_add(&s->device_reserved, size);
  }
  cube_status_t status = s->backend->alloc_on
                             ? s->backend->alloc_on(s->bdev, st->backend_stream, size, out)
                             : s->backend->alloc(s->bdev, size, out);
  if (status) atomic_fetch_sub(&s->device_reserved, size);
  return status;
}

static void cube__stream_device_dealloc(void* self, const cube__storage_t* storage) {
  cube__stream_t* st = self;
  if (st->server->backend->dealloc_on)
    st->server->backend->dealloc_on(st->server->bdev, st->backend_stream, storage);
  else
    st->server->backend->dealloc(st->server->bdev, storage);
  atomic_fetch_sub(&st->server->device_reserved, storage->size);
}

static cube_status_t cube__stream_host_alloc(void* self, uint64_t size, cube__storage_t* out) {
  cube__stream_t* st = self;
  return st->server->backend->host_alloc(st->server->bdev, size, out);
}

static void cube__stream_host_dealloc(void* self, const cube__storage_t* storage) {
  cube__stream_t* st = self;
  st->server->backend->host_dealloc(st->server->bdev, storage);
}

//===----------------------------------------------------------------------===//
// Streams
//===----------------------------------------------------------------------===//

/* Pinned pools whose buffers the caller still holds at shutdown (read
 * results, staging buffers): they are host memory the caller owns, so they
 * stay valid; the pools are destroyed once every buffer is released (checked
 * at the next shutdown). */
typedef struct cube__orphan {
  struct cube__orphan* next;
  cube__mm_t* mm;
  const cube__backend_vtable_t* backend;
} cube__orphan_t;

static cube_status_t cube__orphan_alloc(void* self, uint64_t size, cube__storage_t* out) {
  (void)self;
  (void)out;
  return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "staging: the device was shut down (%" PRIu64 " bytes)", size);
}

static void cube__orphan_dealloc(void* self, const cube__storage_t* storage) {
  cube__orphan_t* o = self;
  o->backend->host_dealloc(NULL, storage);
}
static pthread_mutex_t cube__orphans_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__orphan_t* cube__orphans;

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

static void cube__stream_destroy(cube__stream_t* st) {
  if (!st) return;
  if (st->holds_head) cube__stream_release_holds(st, true);
  if (st->mm) cube__mm_destroy(st->mm);
  if (st->pinned) {
    if (!cube__mm_in_use(st->pinned)) {
      cube__mm_destroy(st->pinned);
    } else {
      cube__orphan_t* o = calloc(1, sizeof(*o));
      if (o) {
        /* The pool's storage ops point at this stream, which goes away: they
         * now point at the orphan, which frees through the backend table with
         * no device (backend.h allows that for host storage). */
        o->mm = st->pinned;
        o->backend = st->server->backend;
        cube__storage_ops_t ops = {o, 64, cube__orphan_alloc, cube__orphan_dealloc};
        cube__mm_rebind_storage(o->mm, &ops);
        pthread_mutex_lock(&cube__orphans_lock);
        o->next = cube__orphans;
        cube__orphans = o;
        pthread_mutex_unlock(&cube__orphans_lock);
      }
    }
    st->pinned = NULL;
  }
  if (st->backend_stream && st->server->backend->stream_destroy)
    st->server->backend->stream_destroy(st->server->bdev, st->backend_stream);
  cube_status_free(st->errors);
  cube_status_free(st->profile_errors);
  pthread_mutex_destroy(&st->lock);
  free(st);
}

static cube_status_t cube__stream_create(cube__server_t* s, uint64_t id, uint32_t slot,
                                         cube__stream_t** out) {
  cube__stream_t* st = calloc(1, sizeof(*st));
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
  o.persistent = CUBE__PERSISTENT_ENABLED;
  o.mode = CUBE_ALLOCATION_AUTO;
  cube_status_t status = cube__mm_create(&o, &st->device_ops, &st->mm);
  if (!status && s->backend->host_alloc) {
    st->host_ops = (cube__storage_ops_t){st, 64, cube__stream_host_alloc, cube__stream_host_dealloc};
    o.name = "pinned host memory";
    o.persistent = CUBE__PERSISTENT_DISABLED;
    status = cube__mm_create(&o, &st->host_ops, &st->pinned);
  }
  if (!status && s->backend->stream_create)
    status = s->backend->stream_create(s->bdev, id, &st->backend_stream);
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
  pthread_mutex_unlock(&st->lock);
}

cube_status_t cube__stream_take_errors(cube__stream_t* st) {
  pthread_mutex_lock(&st->lock);
  cube_status_t e = st->errors;
  st->errors = NULL;
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
  const cube__backend_vtable_t* b = st->server->backend;
  if (!b->event_record || !m) return CUBE_OK;
  /* The common case (the stream that used it last) writes nothing: the
   * descriptor's line is shared with the callers' reference counting. */
  if (atomic_load_explicit(&m->last_use, memory_order_acquire) == st) return CUBE_OK;
  cube__stream_t* last = atomic_exchange_explicit(&m->last_use, st, memory_order_acq_rel);
  if (!last || last == st) return CUBE_OK;
  void* ev = NULL;
  cube_status_t status = b->event_record(st->server->bdev, last->backend_stream, &ev);
  if (!status) status = b->event_wait(st->server->bdev, st->backend_stream, ev);
  if (ev) b->event_destroy(st->server->bdev, ev);
  if (status)
    status = cube__status_annotate(status, "ordering memory %" PRIu64 " from stream %" PRIu64
                                   " after stream %" PRIu64, m->id, st->id, last->id);
  return status;
}

/* Holds the buffers of |mems| that belong to other streams until the work
 * |st| was given so far completed. Takes nothing when none is foreign. */
static void cube__stream_hold(cube__stream_t* st, cube__memory_t* const* mems, uint32_t n) {
  const cube__backend_vtable_t* b = st->server->backend;
  if (!b->event_record) return;
  uint32_t foreign = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (mems[i] && mems[i]->owner != st) ++foreign;
  if (!foreign) return;
  cube__hold_t* h = malloc(sizeof(*h) + foreign * sizeof(cube__memory_t*));
  void* ev = NULL;
  cube_status_t status = h ? b->event_record(st->server->bdev, st->backend_stream, &ev)
                           : cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory");
  if (status) {
    /* Without a hold the owner could reuse the memory under this stream's
     * work: wait for it instead. */
    cube_status_free(status);
    free(h);
    cube_status_free(b->sync(st->server->bdev, st->backend_stream));
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
  const cube__backend_vtable_t* b = st->server->backend;
  if (atomic_load_explicit(&st->hold_count, memory_order_acquire) == 0) return;
  for (;;) {
    pthread_mutex_lock(&st->lock);
    cube__hold_t* h = st->holds_head;
    if (h && !wait && !b->event_done(st->server->bdev, h->event)) h = NULL;
    if (h) {
      st->holds_head = h->next;
      if (!st->holds_head) st->holds_tail = NULL;
      atomic_fetch_sub_explicit(&st->hold_count, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&st->lock);
    if (!h) return;
    if (wait) {
      cube_status_t e = b->event_sync(st->server->bdev, h->event);
      /* Not seen to complete: wait for the whole stream before letting go. */
      if (e) cube_status_free(b->sync(st->server->bdev, st->backend_stream));
      cube_status_free(e);
    }
    b->event_destroy(st->server->bdev, h->event);
    for (uint32_t i = 0; i < h->count; ++i) cube__memory_unref(h->mems[i]);
    free(h);
  }
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

cube_status_t cube__server_alloc(cube__stream_t* st, uint64_t size, const char* what,
                                 cube__memory_t** out_mem) {
  cube__server_t* s = st->server;
  cube__memory_t* m = NULL;
  pthread_mutex_lock(&st->lock);
  cube_status_t status = cube__mm_reserve(st->mm, size, &m);
  if (!status) {
    /* Nobody else can see |m| yet (the pool only reads its counts). */
    m->owner = st;
    atomic_store_explicit(&m->last_use, st, memory_order_relaxed);
  }
  pthread_mutex_unlock(&st->lock);
  if (status) {
    if (cube_status_code(status) == CUBE_STATUS_OUT_OF_MEMORY) {
      char a[32], b[32];
      status = cube__status_annotate(
          status, "%s: out of memory on %s stream %" PRIu64 " (device reserved %s, limit %s)",
          what, s->props.name, st->id,
          cube__format_bytes(atomic_load(&s->device_reserved), a, sizeof(a)),
          s->memory_limit ? cube__format_bytes(s->memory_limit, b, sizeof(b)) : "none");
      cube_memory_report_t* r = cube__status_oom_report_mut(status);
      if (r) {
        r->device_reserved = atomic_load(&s->device_reserved);
        r->memory_limit = s->memory_limit;
      }
      return status;
    }
    return cube__status_annotate(status, "%s", what);
  }
  *out_mem = m;
  return CUBE_OK;
}

typedef struct cube__write_task {
  cube__memory_t* mem;
  uint64_t offset, pitch, width, height;
  cube_bytes_t* bytes; /* owns the source */
} cube__write_task_t;

static cube_status_t cube__write_exec(cube__stream_t* st, cube__memory_t* mem, uint64_t offset,
                                      uint64_t pitch, const void* src, uint64_t width,
                                      uint64_t height) {
  cube__server_t* s = st->server;
  const cube__storage_t* storage;
  uint64_t slice_off, slice_size;
  if (!cube__memory_resolve(mem, &storage, &slice_off, &slice_size))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "write: memory %" PRIu64 " is not bound",
                             mem->id);
  return s->backend->write(s->bdev, st->backend_stream, storage, slice_off + offset, pitch, src,
                           width, height);
}

static cube_status_t cube__write_task_run(void* state, void* payload) {
  cube__server_t* s = state;
  cube__write_task_t* t = payload;
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__server_stream(s, cube__stream_current_id(), &st));
  cube__stream_push_error(st, cube__write_exec(st, t->mem, t->offset, t->pitch,
                                               cube_bytes_const_data(t->bytes), t->width,
                                               t->height));
  return CUBE_OK;
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
    /* The callers stage FILE buffers first (cube__server_stage_file); a
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
      cube__stream_push_error(st, cube__status_annotate(status, "write of %" PRIu64 " bytes",
                                                        width * height));
      return;
    }
    owner = copy;
    src = cube_bytes_const_data(copy);
  }
  if (s->backend->flags & (CUBE__BACKEND_HOST_MEMORY | CUBE__BACKEND_CALLER_WRITES)) {
    /* The buffer is fresh: no queued work references it, so copying on the
     * calling thread is ordered with everything that can observe it (on a
     * device stream: the copy goes into the stream after what the runner put
     * there before, and nothing queued after it can run earlier). */
    cube_status_t status = cube__write_exec(st, mem, offset, pitch, src, width, height);
    cube_bytes_release(owner);
    if (status)
      cube__stream_push_error(st, cube__status_annotate(status, "write of %" PRIu64 " bytes",
                                                        width * height));
    return;
  }
  cube__write_task_t t = {mem, offset, pitch, width, height, owner};
  cube_status_t status = CUBE_OK;
  /* The task runs later: keep |owner| only if it keeps |src| alive. */
  if (!owner || cube_bytes_const_data(owner) != src || !cube__bytes_owns_data(owner))
    status = cube_bytes_from_copy(src, (size_t)(width * height), &t.bytes);
  if (t.bytes != owner) cube_bytes_release(owner);
  if (status) {
    cube__stream_push_error(st, status);
    return;
  }
  cube__memory_ref(mem);
  status = cube__submit(s->service, st->id, cube__write_task_run, &t, sizeof(t),
                        cube__write_task_drop);
  if (status) cube__stream_push_error(st, status);
}

static void cube__pinned_release(void* user, void* data, size_t size) {
  (void)data;
  (void)size;
  cube__memory_unref((cube__memory_t*)user);
}

cube_status_t cube__server_staging(cube__stream_t* st, size_t size, cube_bytes_t** out) {
  if (!st->pinned)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "staging: %s has no pinned host memory",
                             st->server->props.name);
  cube__memory_t* m = NULL;
  pthread_mutex_lock(&st->lock);
  cube_status_t status = cube__mm_reserve(st->pinned, size ? size : 1, &m);
  pthread_mutex_unlock(&st->lock);
  if (status) return status;
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

cube_status_t cube__server_stage_file(cube__stream_t* st, cube_bytes_t** inout) {
  cube_bytes_t* b = *inout;
  if (!cube__bytes_is_file(b)) return CUBE_OK;
  size_t n = cube_bytes_size(b);
  cube_bytes_t* safe = NULL;
  if (st->pinned) {
    cube_status_t status = cube__server_staging(st, n, &safe);
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

//===----------------------------------------------------------------------===//
// Reads
//===----------------------------------------------------------------------===//

typedef struct cube__read_task {
  cube_future_t* future;
  size_t count;
  cube__read_region_t* regions; /* heap, owned */
} cube__read_task_t;

static cube_status_t cube__read_task_run(void* state, void* payload) {
  cube__server_t* s = state;
  cube__read_task_t* t = payload;
  cube__stream_t* st;
  cube_status_t status = cube__server_stream(s, cube__stream_current_id(), &st);
  if (!status) status = cube__stream_take_errors(st);
  for (size_t i = 0; !status && i < t->count; ++i) {
    cube__read_region_t* r = &t->regions[i];
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
    if (dst) {
      /* Into the caller's memory: the future's result is empty. */
      status = cube__bytes_allocate_uninit(0, &t->future->results[i]);
    } else {
      status = st->pinned ? cube__server_staging(st, n, &t->future->results[i])
                          : cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "no staging");
      if (status) {
        cube_status_free(status);
        status = cube__bytes_allocate_uninit(n, &t->future->results[i]);
      }
      if (!status) dst = cube_bytes_data(t->future->results[i]);
    }
    if (!status && r->width != 0 && r->height != 0)
      status = s->backend->read(s->bdev, st->backend_stream, dst, storage, off + r->offset,
                                r->pitch, r->width, r->height);
    if (status) status = cube__status_annotate(status, "read of handles[%zu]", i);
  }
  /* Let go of the buffers before the caller can see the result: once a read
   * returns, it holds no memory. */
  for (size_t i = 0; i < t->count; ++i) {
    cube__memory_unref(t->regions[i].mem);
    t->regions[i].mem = NULL;
  }
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

cube_status_t cube__server_read(cube__server_t* s, uint64_t stream_id, size_t count,
                                cube__read_region_t* regions, cube_future_t** out_future) {
  cube__read_task_t t = {NULL, count, NULL};
  t.future = cube__future_create(count);
  t.regions = malloc((count ? count : 1) * sizeof(*regions));
  if (!t.future || !t.regions) {
    if (t.future) {
      free(t.future->results);
      free(t.future);
    }
    free(t.regions);
    for (size_t i = 0; i < count; ++i) cube__memory_unref(regions[i].mem);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "read: no host memory");
  }
  memcpy(t.regions, regions, count * sizeof(*regions));
  cube_future_t* f = t.future;
  cube_status_t status =
      cube__submit(s->service, stream_id, cube__read_task_run, &t, sizeof(t), cube__read_task_drop);
  if (status) {
    cube__future_unref(f);
    return status;
  }
  *out_future = f;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

typedef struct cube__launch_task {
  cube_kernel_t* kernel;
  cube_execution_mode_t mode;
  uint32_t arg_count;
  uint32_t count[3];
  cube__task_arg_t dyn; /* mem NULL: static count */
  cube__task_arg_t args[];
} cube__launch_task_t;

static cube_status_t cube__resolve_arg(const cube__task_arg_t* a, void** out_data) {
  const cube__storage_t* storage;
  uint64_t off, sz;
  if (!cube__memory_resolve(a->mem, &storage, &off, &sz))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "memory %" PRIu64 " is not bound", a->mem->id);
  *out_data = (char*)storage->ptr + off + a->offset;
  return CUBE_OK;
}

static cube_status_t cube__launch_exec(cube__server_t* s, cube__stream_t* st,
                                       cube__launch_task_t* t) {
  cube_kernel_t* k = t->kernel;
  uint32_t count[3] = {t->count[0], t->count[1], t->count[2]};
  if (t->dyn.mem) {
    void* p;
    CUBE_RETURN_IF_ERROR(cube__resolve_arg(&t->dyn, &p));
    uint32_t c[3];
    if (t->dyn.value.buffer.len < sizeof(c))
      return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                               "launch of kernel '%s': the dynamic cube count buffer holds %" PRIu64
                               " bytes, it needs 12 (three u32)",
                               k->name, t->dyn.value.buffer.len);
    if (s->backend->flags & CUBE__BACKEND_HOST_MEMORY) {
      memcpy(c, p, sizeof(c));
    } else {
      CUBE_RETURN_IF_ERROR(cube__stream_order(st, t->dyn.mem));
      const cube__storage_t* storage;
      uint64_t off, sz;
      cube__memory_resolve(t->dyn.mem, &storage, &off, &sz);
      CUBE_RETURN_IF_ERROR(s->backend->read(s->bdev, st->backend_stream, c, storage,
                                            off + t->dyn.offset, sizeof(c), sizeof(c), 1));
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
  if (s->backend->event_record) {
    cube__stream_release_holds(st, false);
    for (uint32_t i = 0; i < t->arg_count; ++i)
      CUBE_RETURN_IF_ERROR(cube__stream_order(st, t->args[i].mem));
  }
  cube_cpu_arg_t resolved[CUBE_MAX_KERNEL_ARGS];
  cube__launch_buffer_t buffers[CUBE_MAX_KERNEL_ARGS];
  for (uint32_t i = 0; i < t->arg_count; ++i) {
    resolved[i] = t->args[i].value;
    buffers[i] = (cube__launch_buffer_t){NULL, 0};
    if (t->args[i].mem) {
      cube_status_t status = cube__resolve_arg(&t->args[i], &resolved[i].buffer.data);
      if (status) return cube__status_annotate(status, "launch of kernel '%s': argument %u", k->name, i);
      uint64_t off, sz;
      cube__memory_resolve(t->args[i].mem, &buffers[i].storage, &off, &sz);
      buffers[i].offset = off + t->args[i].offset;
    }
  }
  uint64_t device_ns = UINT64_MAX;
  cube__launch_t l = {k, k->name, {count[0], count[1], count[2]}, k->cube_dim, t->mode,
                      t->arg_count, k->arg_kinds, resolved, buffers, NULL};
  cube_profile_level_t level = s->profiler.level;
  if (level == CUBE_PROFILE_EXEC) cube__profiler_log(&s->profiler, "Executing %s", k->name);
  if (level >= CUBE_PROFILE_BASIC && s->backend->prepare) {
    /* Compile (or load from the kernel cache) outside the timed launch, and
     * show it as its own line: a first launch is not a slow kernel. */
    uint64_t c0 = cube__now_ns();
    CUBE_RETURN_IF_ERROR(s->backend->prepare(s->bdev, k, t->mode));
    uint64_t cns = cube__now_ns() - c0;
    if (cns > 100000) {
      char what[160];
      snprintf(what, sizeof(what), "%s (compile or cache load)", k->name);
      cube__profiler_record(&s->profiler, what, cns);
    }
  }
  uint64_t t0 = level >= CUBE_PROFILE_BASIC ? cube__now_ns() : 0;
  if (level >= CUBE_PROFILE_BASIC) l.device_ns = &device_ns;
  cube_status_t status = s->backend->launch(s->bdev, st->backend_stream, &l);
  if (s->backend->event_record) {
    cube__memory_t* mems[CUBE_MAX_KERNEL_ARGS];
    for (uint32_t i = 0; i < t->arg_count; ++i) mems[i] = t->args[i].mem;
    cube__stream_hold(st, mems, t->arg_count);
  }
  if (level >= CUBE_PROFILE_BASIC) {
    if (s->backend->sync) cube_status_free(s->backend->sync(s->bdev, st->backend_stream));
    uint64_t ns = cube__now_ns() - t0;
    if (device_ns != UINT64_MAX) ns = device_ns; /* the device's own timestamps */
    cube__profiler_record(&s->profiler, k->name, ns);
    if (level >= CUBE_PROFILE_MEDIUM) {
      char d[32];
      cube__profiler_log(&s->profiler, "| %s | %s", cube__format_duration(ns, d, sizeof(d)),
                         k->name);
    }
    if (level >= CUBE_PROFILE_FULL)
      cube__profiler_log(&s->profiler, "%s: kernel#%" PRIu64 " CubeCount (%u, %u, %u)", k->name,
                         k->id, count[0], count[1], count[2]);
  }
  return status;
}

static cube_status_t cube__launch_task_run(void* state, void* payload) {
  cube__server_t* s = state;
  cube__launch_task_t* t = payload;
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__server_stream(s, cube__stream_current_id(), &st));
  cube__stream_push_error(st, cube__launch_exec(s, st, t));
  return CUBE_OK;
}

static void cube__launch_task_drop(void* payload) {
  cube__launch_task_t* t = payload;
  for (uint32_t i = 0; i < t->arg_count; ++i)
    if (t->args[i].mem) cube__memory_unref(t->args[i].mem);
  if (t->dyn.mem) cube__memory_unref(t->dyn.mem);
  cube_kernel_release(t->kernel);
}

cube_status_t cube__server_launch(cube__server_t* s, uint64_t stream_id, cube_kernel_t* kernel,
                                  const uint32_t count[3], const cube__task_arg_t* dyn,
                                  cube_execution_mode_t mode, uint32_t arg_count,
                                  const cube__task_arg_t* args) {
  union {
    cube__launch_task_t t;
    char bytes[sizeof(cube__launch_task_t) + CUBE_MAX_KERNEL_ARGS * sizeof(cube__task_arg_t)];
  } u;
  cube__launch_task_t* t = &u.t;
  memset(t, 0, sizeof(*t));
  t->kernel = cube_kernel_retain(kernel);
  t->mode = mode;
  t->arg_count = arg_count;
  memcpy(t->count, count, sizeof(t->count));
  if (dyn) t->dyn = *dyn;
  if (arg_count) memcpy(t->args, args, arg_count * sizeof(*args));
  return cube__submit(s->service, stream_id, cube__launch_task_run, t,
                      sizeof(*t) + arg_count * sizeof(*args), cube__launch_task_drop);
}

//===----------------------------------------------------------------------===//
// Flush, sync, profile
//===----------------------------------------------------------------------===//

static cube_status_t cube__flush_task_run(void* state, void* payload) {
  (void)payload;
  cube__server_t* s = state;
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__server_stream(s, cube__stream_current_id(), &st));
  return cube__stream_take_errors(st);
}

static cube_status_t cube__noop_task_run(void* state, void* payload) {
  (void)state;
  (void)payload;
  return CUBE_OK;
}

cube_status_t cube__server_barrier(cube__server_t* s, uint64_t stream_id) {
  return cube__submit_blocking(s->service, stream_id, cube__noop_task_run, NULL);
}

cube_status_t cube__server_flush(cube__server_t* s, uint64_t stream_id) {
  cube__device_flush(s->device);
  return cube__submit_blocking(s->service, stream_id, cube__flush_task_run, NULL);
}

static cube_status_t cube__sync_exec(cube__server_t* s) {
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__server_stream(s, cube__stream_current_id(), &st));
  cube_status_t status = CUBE_OK;
  if (s->backend->sync) status = s->backend->sync(s->bdev, st->backend_stream);
  if (status) cube__stream_push_error(st, status);
  if (s->backend->event_done) cube__stream_release_holds(st, false);
  if (s->profiler.level >= CUBE_PROFILE_BASIC) cube__profiler_summary(&s->profiler);
  return cube__stream_take_errors(st);
}

static cube_status_t cube__sync_task_run(void* state, void* payload) {
  (void)payload;
  return cube__sync_exec(state);
}

cube_status_t cube__server_sync(cube__server_t* s, uint64_t stream_id) {
  return cube__submit_blocking(s->service, stream_id, cube__sync_task_run, NULL);
}

typedef struct cube__sync_async_task {
  cube_future_t* future;
} cube__sync_async_task_t;

static cube_status_t cube__sync_async_run(void* state, void* payload) {
  cube__sync_async_task_t* t = payload;
  cube__future_complete(t->future, cube__sync_exec(state));
  t->future = NULL;
  return CUBE_OK;
}

static void cube__sync_async_drop(void* payload) {
  cube__sync_async_task_t* t = payload;
  if (t->future)
    cube__future_complete(t->future, cube__status_make(CUBE_STATUS_ABORTED,
                                                       "sync: the device was shut down"));
}

cube_status_t cube__server_sync_async(cube__server_t* s, uint64_t stream_id,
                                      cube_future_t** out_future) {
  cube__sync_async_task_t t = {cube__future_create(0)};
  if (!t.future) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "sync: no host memory");
  cube_future_t* f = t.future;
  cube_status_t status = cube__submit(s->service, stream_id, cube__sync_async_run, &t, sizeof(t),
                                      cube__sync_async_drop);
  if (status) {
    cube__future_unref(f);
    return status;
  }
  *out_future = f;
  return CUBE_OK;
}

typedef struct cube__profile_call {
  cube__server_t* server;
  uint64_t stream_id;
  cube_task_fn fn;
  void* user;
  const char* name;
  cube_profile_duration_t* out;
} cube__profile_call_t;

static cube_status_t cube__profile_exclusive(void* p) {
  cube__profile_call_t* c = p;
  cube__server_t* s = c->server;
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__server_stream(s, c->stream_id, &st));
  if (s->backend->sync) {
    cube_status_t status = s->backend->sync(s->bdev, st->backend_stream);
    if (status) return cube__status_annotate(status, "cube_client_profile: start");
  }
  pthread_mutex_lock(&st->lock);
  st->profile_depth++;
  pthread_mutex_unlock(&st->lock);
  uint64_t t0 = cube__now_ns();
  void* ev0 = NULL;
  void* ev1 = NULL;
  if (s->backend->event_elapsed) {
    /* Device timestamps around the work (the host clock adds the sync). */
    cube_status_t e = s->backend->event_record(s->bdev, st->backend_stream, &ev0);
    if (e) {
      cube_status_free(e);
      ev0 = NULL;
    }
  }
  cube_status_t status = c->fn(c->user);
  if (ev0) {
    cube_status_t e = s->backend->event_record(s->bdev, st->backend_stream, &ev1);
    if (e) {
      cube_status_free(e);
      ev1 = NULL;
    }
  }
  cube_status_t sync_status = s->backend->sync ? s->backend->sync(s->bdev, st->backend_stream) : NULL;
  uint64_t t1 = cube__now_ns();
  if (ev0 && ev1 && !sync_status) {
    uint64_t ns = 0;
    cube_status_t e = s->backend->event_elapsed(s->bdev, ev0, ev1, &ns);
    if (!e) t1 = t0 + ns;
    cube_status_free(e);
  }
  if (ev0) s->backend->event_destroy(s->bdev, ev0);
  if (ev1) s->backend->event_destroy(s->bdev, ev1);
  pthread_mutex_lock(&st->lock);
  st->profile_depth--;
  cube_status_t launch_errors = NULL;
  if (st->profile_depth == 0) {
    launch_errors = st->profile_errors;
    st->profile_errors = NULL;
  }
  pthread_mutex_unlock(&st->lock);
  if (status || sync_status || launch_errors) {
    status = cube__status_join(status, sync_status);
    status = cube__status_join(status, launch_errors);
    return cube__status_annotate(status, "cube_client_profile '%s'", c->name ? c->name : "");
  }
  c->out->start_ns = t0;
  c->out->end_ns = t1;
  c->out->method = s->props.timing_method;
  if (c->name && s->profiler.level >= CUBE_PROFILE_BASIC)
    cube__profiler_record(&s->profiler, c->name, t1 - t0);
  return CUBE_OK;
}

cube_status_t cube__server_profile(cube__server_t* s, uint64_t stream_id, cube_task_fn fn,
                                   void* user, const char* name,
                                   cube_profile_duration_t* out_duration) {
  cube__profile_call_t c = {s, stream_id, fn, user, name, out_duration};
  return cube__exclusive(s->device, stream_id, cube__profile_exclusive, &c);
}

//===----------------------------------------------------------------------===//
// The server as a device service
//===----------------------------------------------------------------------===//

static void cube__server_destroy(void* state) {
  cube__server_t* s = state;
  if (!s) return;
  if (s->streams) {
    for (uint32_t i = 0; i < s->max_streams; ++i) cube__stream_destroy(atomic_load(&s->streams[i]));
    free((void*)s->streams);
  }
  if (s->bdev) s->backend->device_destroy(s->bdev);
  cube__profiler_deinit(&s->profiler);
  pthread_mutex_destroy(&s->streams_lock);
  free(s);
}

static cube_status_t cube__server_create(cube__device_key_t key, void* arg, void** out_state) {
  const cube_server_options_t* in = arg;
  cube__server_t* s = calloc(1, sizeof(*s));
  if (!s) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "server: no host memory");
  pthread_mutex_init(&s->streams_lock, NULL);
  s->id = (cube_device_id_t){(cube_backend_t)key.type, key.index};
  if (in) s->options = *in;
  s->backend = cube__backend_get(s->id.backend);
  cube_status_t status = CUBE_OK;
  /* Resolve options from the environment. */
  if (!s->options.memory_limit) {
    bool set = false;
    status = cube__env_size("CUBE_MEMORY_LIMIT", &set, &s->options.memory_limit);
  }
  if (!status && !s->options.max_streams) {
    bool set = false;
    status = cube__env_u32("CUBE_MAX_STREAMS", &set, &s->options.max_streams);
    if (!status && (!set || s->options.max_streams == 0)) s->options.max_streams = 128;
  }
  if (!status && s->options.check_mode == CUBE_CHECK_AUTO) {
    const char* v;
    if (cube__env_str("CUBE_CHECK_MODE", &v)) {
      if (strcmp(v, "enforce") == 0) s->options.check_mode = CUBE_CHECK_ENFORCE;
      else if (strcmp(v, "validate") == 0) s->options.check_mode = CUBE_CHECK_VALIDATE;
      else if (strcmp(v, "auto") != 0)
        status = CUBE_INVALID("CUBE_CHECK_MODE: '%s' is not one of enforce, validate, auto", v);
    }
  }
  if (!status)
    status = cube__profiler_init(&s->profiler, s->options.profile_level, s->options.log_fn,
                                 s->options.log_user);
  if (!status) {
    s->options.profile_level = s->profiler.level;
    s->memory_limit = s->options.memory_limit;
    s->max_streams = s->options.max_streams;
    s->streams = calloc(s->max_streams, sizeof(*s->streams));
    if (!s->streams) status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "server: no host memory");
  }
  if (!status)
    status = s->backend->device_create(key.index, &s->options, &s->bdev, &s->props, &s->features,
                                       &s->info);
  if (status) {
    cube__server_destroy(s);
    return status;
  }
  *out_state = s;
  return CUBE_OK;
}

static void cube__server_task_failed(void* state, uint64_t stream_id, cube_status_t status) {
  cube__server_t* s = state;
  cube__stream_t* st;
  cube_status_t e = cube__server_stream(s, stream_id, &st);
  if (e) {
    cube_status_free(e);
    cube__profiler_log(&s->profiler, "task failed on stream %" PRIu64 ": %s", stream_id,
                       cube_status_message(status));
    cube_status_free(status);
    return;
  }
  cube__stream_push_error(st, status);
}

const cube__service_vtable_t cube__server_service = {
    "compute server", cube__server_create, cube__server_destroy, cube__server_task_failed};

cube_status_t cube__server_get(cube_device_id_t device, const cube_server_options_t* options,
                               bool insert, cube__server_t** out_server) {
  const cube__backend_vtable_t* b = cube__backend_get(device.backend);
  if ((unsigned)device.backend >= CUBE_BACKEND_COUNT)
    return CUBE_INVALID("device backend %d is not a backend", (int)device.backend);
  if (!b)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "backend %s is not built into this library",
                             cube_backend_name(device.backend));
  CUBE_RETURN_IF_ERROR(b->availability());
  uint32_t n = b->device_count();
  if (device.index >= n)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "device %s:%u does not exist (the %s backend has %u device%s)",
                             b->name, device.index, b->name, n, n == 1 ? "" : "s");
  cube__device_key_t key = {(uint32_t)device.backend, device.index};
  if (insert && cube__service_exists(key, &cube__server_service))
    return cube__status_make(CUBE_STATUS_ALREADY_EXISTS,
                             "cube_client_init: device %s:%u already has a server", b->name,
                             device.index);
  cube_server_options_t defaults;
  if (!options) {
    cube_server_options_initialize(&defaults);
    options = &defaults;
  }
  cube__service_t* svc;
  CUBE_RETURN_IF_ERROR(cube__service_get(key, options->queue_mode, &cube__server_service,
                                         (void*)options, &svc));
  cube__server_t* s = cube__service_state_unsafe(svc);
  atomic_store_explicit(&s->service, svc, memory_order_relaxed);
  atomic_store_explicit(&s->device, cube__service_device(svc), memory_order_relaxed);
  *out_server = s;
  return CUBE_OK;
}

void cube_server_options_initialize(cube_server_options_t* o) {
  if (o) memset(o, 0, sizeof(*o));
}
