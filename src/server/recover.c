/* Recovery of a lost device (docs/failures.md, "Recovery"): the device's
 * driver state is reset and rebuilt in place, on the same server, streams,
 * pools and descriptors, so that every handle the program holds stays a
 * handle: its buffer gets memory of the new context at once, holding
 * nothing valid (a taint naming the loss: reads say DATA_LOST), except a
 * restorable buffer's, which is written back from its host copy.
 *
 * Everything runs with the device to itself (cube__exclusive: the work
 * queued before ran, and failed with DEVICE_LOST, first), under the
 * server's streams_lock and each stream's lock in turn (allocations and
 * staging of other threads wait), while the device is still lost (every
 * other caller is refused at once): the backend is called through the
 * recovery's own wrappers (backend.h, cube__backend_reset ...). The loss is
 * ended last (cube__backend_found).
 *
 * Work that calling threads do on a stream's backend state outside the
 * queue (an upload on the caller's thread, a cleanup, staging) goes through
 * the stream's gate (server.h, cube__stream_enter): the recovery first waits
 * until every such caller that entered before the loss has left, and none
 * enters while the device is lost. */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "memory/taint.h"
#include "server/recover.h"
#include "server/server.h"
#include "server/timing.h"

typedef struct cube__recover {
  cube__server_t* s;
  const char* fn;
  cube__stream_t* st;     /* the stream whose pools are renewed now */
  cube__taint_t* lost;    /* the taint of buffers whose contents are gone */
  uint64_t tainted, restored, restored_bytes;
  cube_status_t failure;  /* the first failed restore (the buffer is tainted with it) */
} cube__recover_t;

/* Waits until no caller is inside a stream of |s| (server.h,
 * cube__stream_enter). The device is lost (the caller checked it with a
 * sequentially consistent load), so none enters from now on; one that
 * entered before the loss is in a driver call that fails or lands in memory
 * the reset frees, and leaves soon. Under |s->streams_lock|: no stream is
 * added meanwhile. */
static void cube__recover_drain(cube__server_t* s) {
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    for (unsigned spin = 0; atomic_load_explicit(&st->callers, memory_order_seq_cst) != 0; ++spin) {
      if (spin < 64)
        cube__cpu_relax();
      else
        sched_yield();
    }
  }
}

/* Pinned memory the program still holds (read results, staging buffers):
 * the reset would free it under the program. */
static cube_status_t cube__recover_pinned_check(cube__server_t* s, const char* fn) {
  uint64_t count = 0, bytes = 0;
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st || !st->pinned) continue;
    pthread_mutex_lock(&st->lock);
    /* The small-read slice is the stream's own: reserved again on use. */
    if (st->small_read) {
      cube__memory_unref(st->small_read);
      st->small_read = NULL;
      st->small_read_ptr = NULL;
    }
    cube__mm_cleanup(st->pinned, true);
    cube_memory_usage_t u;
    cube__mm_usage(st->pinned, &u);
    pthread_mutex_unlock(&st->lock);
    count += u.number_allocs;
    bytes += u.bytes_in_use;
  }
  if (!count) return CUBE_OK;
  char b[32];
  return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "%s: %s:%u: %" PRIu64 " read result%s or staging buffer%s (%s) of the "
                           "device's pinned memory %s still held, and its reset would free them; "
                           "release them and recover again",
                           fn, s->be.vt->name, s->be.index, count, count == 1 ? "" : "s",
                           count == 1 ? "" : "s", cube__format_bytes(bytes, b, sizeof(b)),
                           count == 1 ? "is" : "are");
}

/* The host side of what the stream had in the old context: holds, timing,
 * its backend stream; its pinned pages (all free: checked) and deferred
 * errors (the work they report ran in the old context; its buffers carry
 * the loss). The device is lost: the wrappers call no driver. */
static void cube__recover_forget(cube__stream_t* st) {
  cube__server_t* s = st->server;
  cube__stream_release_holds(st, false); /* a lost device's events are done */
  cube__timing_destroy(st);
  pthread_mutex_lock(&st->lock);
  cube__backend_stream_destroy(&s->be, st->backend_stream);
  st->backend_stream = NULL;
  if (st->pinned) cube__mm_cleanup(st->pinned, true);
  cube_status_free(st->errors);
  st->errors = NULL;
  cube_status_free(st->profile_errors);
  st->profile_errors = NULL;
  atomic_store_explicit(&st->errors_pending, false, memory_order_relaxed);
  pthread_mutex_unlock(&st->lock);
}

static cube_status_t cube__recover_renew(void* user, cube__storage_t* storage) {
  cube__recover_t* r = user;
  cube_status_t st = cube__backend_renew(&r->s->be, r->st->backend_stream, storage);
  if (!st) return CUBE_OK;
  char b[32];
  return cube__status_annotate(st, "memory of %s for a page of stream %" PRIu64,
                               cube__format_bytes(storage->size, b, sizeof(b)), r->st->id);
}

/* A buffer of the device: its host copy written back, or the loss's taint. */
static void cube__recover_live(void* user, cube__memory_t* m) {
  cube__recover_t* r = user;
  cube__keep_t* k = atomic_load_explicit(&m->keep, memory_order_acquire);
  const cube__storage_t* storage;
  uint64_t off, size;
  if (k && cube__memory_resolve(m, &storage, &off, &size)) {
    uint64_t n = k->size < size ? k->size : size;
    cube_status_t st = cube__backend_restore(&r->s->be, r->st->backend_stream, storage, off,
                                             k->data, n);
    if (!st && n == size) {
      cube__memory_set_taint(m, NULL);
      r->restored++;
      r->restored_bytes += n;
      return;
    }
    if (!st)
      st = cube__status_make(CUBE_STATUS_DATA_LOST,
                             "memory %" PRIu64 ": its host copy holds %" PRIu64
                             " bytes of its %" PRIu64,
                             m->id, k->size, size);
    char what[96];
    snprintf(what, sizeof(what), "restore of memory %" PRIu64 " after the recovery", m->id);
    cube__taint_t* t = cube__taint_create(st, what);
    if (t) cube__memory_set_taint(m, t);
    if (!r->failure)
      r->failure = st;
    else
      cube_status_free(st);
    return;
  }
  if (r->lost) cube__memory_set_taint(m, cube__taint_ref(r->lost));
  r->tainted++;
}

/* The taint of what the loss took: its root is the device's first fault. */
static cube__taint_t* cube__recover_taint(cube__server_t* s) {
  /* The first fault, in the past tense: the refusal's own words ("every
   * call on the device fails from then on (release its handles ...)") are
   * not true once the device works again. */
  const cube__backend_loss_t* loss = atomic_load_explicit(&s->be.loss, memory_order_acquire);
  cube_status_t why =
      loss && loss->root
          ? cube__status_make(CUBE_STATUS_DEVICE_LOST, "%s:%u was lost: its %s failed at %s: %s",
                              s->be.vt->name, s->be.index,
                              cube__backend_slot_name((cube__backend_slot_t)loss->slot),
                              loss->when, cube_status_message(loss->root))
          : cube__status_make(CUBE_STATUS_DEVICE_LOST, "%s:%u was lost", s->be.vt->name,
                              s->be.index);
  char what[160];
  snprintf(what, sizeof(what),
           "%s:%u (lost; its memory was freed by the recovery: the buffer is not restorable)",
           s->be.vt->name, s->be.index);
  cube__taint_t* t = cube__taint_create(why, what);
  cube_status_free(why);
  return t;
}

static cube_status_t cube__recover_run(void* user) {
  cube__recover_t* r = user;
  cube__server_t* s = r->s;
  /* Sequentially consistent (server.h, cube__stream_enter). */
  if (!atomic_load_explicit(&s->be.loss, memory_order_seq_cst))
    return CUBE_OK; /* another recovery came first */
  pthread_mutex_lock(&s->streams_lock);
  cube__recover_drain(s);
  cube_status_t status = cube__recover_pinned_check(s, r->fn);
  if (!status) {
    for (uint32_t i = 0; i < s->max_streams; ++i) {
      cube__stream_t* st = atomic_load(&s->streams[i]);
      if (st) cube__recover_forget(st);
    }
    status = cube__backend_reset(&s->be);
  }
  if (!status) r->lost = cube__recover_taint(s);
  for (uint32_t i = 0; !status && i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    pthread_mutex_lock(&st->lock);
    r->st = st;
    status = cube__backend_stream_renew(&s->be, st->id, &st->backend_stream);
    if (status)
      status = cube__status_annotate(status, "stream %" PRIu64, st->id);
    else
      status = cube__mm_renew(st->mm, cube__recover_renew, cube__recover_live, r);
    pthread_mutex_unlock(&st->lock);
  }
  if (!status && r->failure && cube_status_code(r->failure) == CUBE_STATUS_DEVICE_LOST) {
    /* A restore met a new fault: the new context is lost too, and the
     * device stays lost (the next recovery resets it again). */
    status = r->failure;
    r->failure = NULL;
  }
  if (!status) {
    atomic_fetch_add_explicit(&s->recoveries, 1, memory_order_relaxed);
    cube__backend_found(&s->be);
    cube__profiler_log(&s->profiler,
                       "cube: %s:%u recovered: %" PRIu64 " buffer%s lost, %" PRIu64
                       " restored (%" PRIu64 " bytes)",
                       s->be.vt->name, s->be.index, r->tainted, r->tainted == 1 ? "" : "s",
                       r->restored, r->restored_bytes);
  }
  pthread_mutex_unlock(&s->streams_lock);
  cube__taint_unref(r->lost);
  return status;
}

cube_status_t cube__server_recover(cube__server_t* s, const char* fn) {
  if (!cube__backend_lost(&s->be)) return CUBE_OK;
  cube__recover_t r;
  memset(&r, 0, sizeof(r));
  r.s = s;
  r.fn = fn;
  cube_status_t st = cube__exclusive(atomic_load(&s->device), 0, cube__recover_run, &r);
  if (st) {
    cube_status_free(r.failure);
    char where[32];
    snprintf(where, sizeof(where), "%s:%u", s->be.vt->name, s->be.index);
    if (strncmp(cube_status_message(st), fn, strlen(fn)) == 0) return st;
    return cube__status_annotate(st, "%s: recovering %s (the device stays lost)", fn, where);
  }
  if (r.failure) {
    /* The device works again; one restorable buffer (or more) did not get
     * its contents back and says so when read. */
    return cube__status_annotate(r.failure, "%s: %s:%u recovered, but a restorable buffer was not "
                                 "restored",
                                 fn, s->be.vt->name, s->be.index);
  }
  return CUBE_OK;
}

/* Checkpoints ------------------------------------------------------------- */

typedef struct cube__checkpoint {
  cube__stream_t* st;
  cube__memory_t* mem;
  uint64_t size;
} cube__checkpoint_t;

/* With the device to itself, so that a recovery never reads a copy being
 * replaced. */
static cube_status_t cube__checkpoint_run(void* user) {
  cube__checkpoint_t* c = user;
  cube__keep_t* k = malloc(sizeof(*k) + (c->size ? c->size : 1));
  if (!k)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "no host memory for a copy of %" PRIu64 " bytes", c->size);
  k->size = c->size;
  cube__memory_ref(c->mem); /* the read takes this binding reference over */
  cube__read_region_t region = {c->mem, 0, c->size, 1, c->size, k->data};
  cube_bytes_t* none = NULL;
  cube_status_t st = cube__server_read_wait(c->st, 1, &region, &none);
  if (st) {
    free(k);
    return st;
  }
  cube__memory_set_keep(c->mem, k);
  return CUBE_OK;
}

cube_status_t cube__server_checkpoint(cube__stream_t* st, cube__memory_t* mem) {
  const cube__storage_t* storage;
  uint64_t off, size;
  if (!cube__memory_resolve(mem, &storage, &off, &size))
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "memory %" PRIu64 " has no storage", mem->id);
  cube__checkpoint_t c = {st, mem, size};
  return cube__exclusive(atomic_load(&st->server->device), st->id, cube__checkpoint_run, &c);
}

cube_status_t cube__server_keep(cube__memory_t* mem, const void* data, uint64_t size) {
  cube__keep_t* k = malloc(sizeof(*k) + (size ? size : 1));
  if (!k)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "no host memory for a copy of %" PRIu64 " bytes", size);
  k->size = size;
  memcpy(k->data, data, size);
  cube__memory_set_keep(mem, k);
  return CUBE_OK;
}
