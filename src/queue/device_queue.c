/* Device queues: see device_queue.h and docs/cubecl.md, "Servers and the device queue".
 * This file: the ring, the runner, submission and shutdown; services.c: the
 * registry of devices and services; queue_internal.h: their shared types.
 *
 * Layout:
 *  - a global registry (cube__queue_registry_lock) of devices, newest first;
 *  - per device, its services in a list (lookup, creation in progress
 *    included) and a "ready" list, newest completed first, which is the
 *    destruction order;
 *  - THREADED devices own a runner thread and a bounded MPSC ring of
 *    1024 cells (per-cell sequence numbers, Vyukov style); tasks run in the
 *    cell, which is released afterwards;
 *  - INLINE devices own a re-entrant execution lock (mutex + owner + depth).
 *
 * Thread-locals record whose runner this thread is, which services are
 * borrowed by the tasks running on this thread (a linked list of stack
 * nodes) and the thread's current stream id.
 */
#include "queue/queue_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/options.h"
#include "base/status.h"
#include "platform/platform.h"

/* ---------------------------------------------------------------------------
 * Globals and thread-locals
 * ------------------------------------------------------------------------- */

static atomic_uint_fast64_t g_stream_counter;

static _Thread_local char tl_token;            /* its address identifies the thread */
static _Thread_local cube__device_t* tl_runner; /* device whose runner this thread is */
/* The device whose blocking call (a read, a sync) this thread ran on its own
 * thread as its last submission (cube__submit_here); cleared by every claim. */
_Thread_local cube__device_t* cube__tl_after_blocking;
static _Thread_local cube__borrow_t* tl_borrows;
static _Thread_local uint64_t tl_stream;
static _Thread_local bool tl_stream_set;

static inline uintptr_t cube__self(void) { return (uintptr_t)&tl_token; }

uintptr_t cube__queue_self(void) { return cube__self(); }

/* ---------------------------------------------------------------------------
 * Stream ids (docs/cubecl.md, "Streams")
 * ------------------------------------------------------------------------- */

uint64_t cube__stream_current_id(void) {
  if (!tl_stream_set) {
    tl_stream = atomic_fetch_add_explicit(&g_stream_counter, 1, memory_order_relaxed);
    tl_stream_set = true;
  }
  return tl_stream;
}

bool cube__stream_current_id_peek(uint64_t* out_id) {
  *out_id = tl_stream;
  return tl_stream_set;
}

uint64_t cube__stream_new_id(void) {
  return atomic_fetch_add_explicit(&g_stream_counter, 1, memory_order_relaxed);
}

typedef struct {
  uint64_t id;
  bool set;
} cube__stream_save_t;

static inline cube__stream_save_t cube__stream_enter(uint64_t id) {
  cube__stream_save_t save = {tl_stream, tl_stream_set};
  tl_stream = id;
  tl_stream_set = true;
  return save;
}

static inline void cube__stream_leave(cube__stream_save_t save) {
  tl_stream = save.id;
  tl_stream_set = save.set;
}

/* ---------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------- */

static const char* cube__service_name(const cube__service_t* s) {
  return (s->vt && s->vt->name) ? s->vt->name : "?";
}

static bool cube__is_borrowed(const cube__service_t* s) {
  for (const cube__borrow_t* b = tl_borrows; b; b = b->prev)
    if (b->service == s) return true;
  return false;
}

#define CUBE__REENTRY "re-entrant use of service '"

bool cube__queue_refused_reentry(cube_status_t st) {
  return st && cube_status_code(st) == CUBE_STATUS_FAILED_PRECONDITION &&
         strncmp(cube_status_message(st), CUBE__REENTRY, sizeof(CUBE__REENTRY) - 1) == 0;
}

cube_status_t cube__queue_name_refusal(cube_status_t st, const char* fn) {
  return cube__queue_refused_reentry(st) ? cube__status_annotate(st, "%s", fn) : st;
}

/* Refusals common to every call into |s|; NULL when the call may go on. */
static cube_status_t cube__check_usable(const cube__service_t* s) {
  const cube__device_t* d = s->device;
  if (cube__is_borrowed(s))
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             CUBE__REENTRY "%s' on device %s from inside its own task (a log "
                             "callback or an exclusive function of that device runs inside "
                             "one)",
                             cube__service_name(s), CUBE__KEY(d->key));
  if (s->destroyed)
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "service '%s' on device %s is destroyed (queue shut down)",
                             cube__service_name(s), CUBE__KEY(d->key));
  return CUBE_OK;
}

/* Drops the payload of a task that will not run. A zero-size payload may be
 * NULL; drop then gets a pointer to an empty aligned buffer, as the task would
 * have. */
static void cube__drop_refused(const void* payload, cube__payload_drop_fn drop) {
  static _Alignas(64) unsigned char empty[64];
  if (drop) drop(payload ? (void*)payload : (void*)empty);
}

static void cube__exec_lock(cube__device_t* d) {
  uintptr_t me = cube__self();
  if (atomic_load_explicit(&d->owner, memory_order_relaxed) == me) {
    ++d->depth;
    return;
  }
  pthread_mutex_lock(&d->exec_mutex);
  atomic_store_explicit(&d->owner, me, memory_order_relaxed);
  d->depth = 1;
}

static void cube__exec_unlock(cube__device_t* d) {
  if (--d->depth == 0) {
    atomic_store_explicit(&d->owner, 0, memory_order_relaxed);
    pthread_mutex_unlock(&d->exec_mutex);
  }
}

static void cube__sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------
 * Running tasks (any mode, on the executing thread)
 * ------------------------------------------------------------------------- */

/* Runs fn(state, payload) with |s| borrowed and |stream_id| current. */
static cube_status_t cube__run_borrowed(cube__service_t* s, uint64_t stream_id, cube__task_fn fn,
                                        void* payload) {
  cube__borrow_t b = {s, tl_borrows};
  tl_borrows = &b;
  cube__stream_save_t save = cube__stream_enter(stream_id);
  cube_status_t st = fn(s->state, payload);
  cube__stream_leave(save);
  tl_borrows = b.prev;
  return st;
}

static void cube__report_failure(cube__service_t* s, uint64_t stream_id, cube_status_t st) {
  if (s->vt->task_failed) {
    s->vt->task_failed(s->state, stream_id, st);
    return;
  }
  fprintf(stderr, "cube: a task of service '%s' on device %s (stream %llu) failed: [%s] %s\n",
          cube__service_name(s), CUBE__KEY(s->device->key),
          (unsigned long long)stream_id, cube_status_code_name(cube_status_code(st)),
          cube_status_message(st));
  cube_status_free(st);
}

/* A fire-and-forget task: run, report a failure, drop the payload. */
static void cube__run_detached(cube__service_t* s, uint64_t stream_id, cube__task_fn fn,
                               void* payload, cube__payload_drop_fn drop) {
  cube_status_t st = cube__run_borrowed(s, stream_id, fn, payload);
  if (st != CUBE_OK) cube__report_failure(s, stream_id, st);
  if (drop) drop(payload);
}

static cube_status_t cube__run_exclusive(uint64_t stream_id, cube_status_t (*fn)(void*),
                                         void* user) {
  cube__stream_save_t save = cube__stream_enter(stream_id);
  cube_status_t st = fn(user);
  cube__stream_leave(save);
  return st;
}

/* ---------------------------------------------------------------------------
 * The ring (THREADED mode)
 * ------------------------------------------------------------------------- */

/* Wakes the runner if it announced that it sleeps. Called after a publish:
 * the fence orders the publish before the read of |sleeping| (the runner
 * does the converse: sets |sleeping|, fences, re-checks the ring). */
static void cube__wake_runner(cube__device_t* d) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&d->sleeping, memory_order_relaxed) == 0) return;
  if (atomic_exchange(&d->sleeping, 0) != 0) {
    atomic_fetch_add(&d->wake_seq, 1);
    cube__futex_wake(&d->wake_seq, 1);
  }
}

/* Claims the next cell; spins, yields, then sleeps while the ring is full.
 * Never fails. */
static cube__cell_t* cube__ring_claim(cube__device_t* d, size_t* out_pos) {
  unsigned spins = 0, yields = 0;
  cube__tl_after_blocking = NULL;
  size_t pos = atomic_load_explicit(&d->enqueue_pos, memory_order_relaxed);
  for (;;) {
    cube__cell_t* c = &d->cells[pos & CUBE__RING_MASK];
    size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    intptr_t diff = (intptr_t)seq - (intptr_t)pos;
    if (diff == 0) {
      if (atomic_compare_exchange_weak_explicit(&d->enqueue_pos, &pos, pos + 1,
                                                memory_order_relaxed, memory_order_relaxed)) {
        *out_pos = pos;
        return c;
      }
      /* |pos| was reloaded by the failed exchange. */
    } else if (diff < 0) {
      /* Full: the runner has not released this cell yet. */
      if (spins < CUBE__PRODUCER_SPINS) {
        ++spins;
        cube__cpu_relax();
      } else if (yields < CUBE__PRODUCER_YIELDS) {
        ++yields;
        sched_yield();
      } else {
        cube__wake_runner(d);
        cube__sleep_ns(CUBE__PRODUCER_SLEEP_NS);
      }
      pos = atomic_load_explicit(&d->enqueue_pos, memory_order_relaxed);
    } else {
      pos = atomic_load_explicit(&d->enqueue_pos, memory_order_relaxed);
    }
  }
}

static void cube__ring_publish(cube__device_t* d, cube__cell_t* c, size_t pos) {
  atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
  cube__wake_runner(d);
}

/* A cell's sequence number, seen from position |pos| (Vyukov's ring, plus
 * cells that ran where they were claimed):
 *   pos            claimed for |pos|, not published yet (or not claimed);
 *   pos + 1        published for |pos|: the runner runs it;
 *   >= pos + CELLS released: run by the runner, or by the thread that
 *                  claimed it (cube__submit_here), which released it itself;
 *                  a later producer may own the cell already.
 * Differences are taken as signed: the counters wrap. */
static inline bool cube__seq_released(size_t seq, size_t pos) {
  return (intptr_t)(seq - (pos + CUBE__RING_CELLS)) >= 0;
}

/* Runner side: true if the cell at the runner's position is published, or
 * ran where it was claimed (the runner then steps over it). */
static inline bool cube__ring_ready(const cube__device_t* d) {
  size_t pos = d->dequeue_pos;
  const cube__cell_t* c = &d->cells[pos & CUBE__RING_MASK];
  size_t seq = atomic_load_explicit((atomic_size_t*)&c->seq, memory_order_acquire);
  return seq == pos + 1 || cube__seq_released(seq, pos);
}

/* Runs the cell; for a call whose caller waits, returns the event to set
 * once the cell is released (so that the caller's next submission finds the
 * queue drained: cube__submit_here runs it at once then). */
static cube__event_t* cube__execute_cell(cube__cell_t* c) {
  switch (c->kind) {
    case CUBE__CELL_NORMAL:
      cube__run_detached(c->service, c->stream_id, c->fn, c->payload, c->drop);
      return NULL;
    case CUBE__CELL_HEAP:
      cube__run_detached(c->service, c->stream_id, c->fn, c->ptr, c->drop);
      cube__aligned_free(c->ptr);
      return NULL;
    case CUBE__CELL_BLOCKING: {
      cube__sync_call_t* r = (cube__sync_call_t*)c->ptr;
      r->result = cube__run_borrowed(c->service, c->stream_id, r->fn, r->arg);
      return &r->done; /* |r| lives until that is set */
    }
    case CUBE__CELL_EXCLUSIVE: {
      cube__sync_call_t* r = (cube__sync_call_t*)c->ptr;
      r->result = cube__run_exclusive(c->stream_id, r->xfn, r->arg);
      return &r->done;
    }
    default:
      return NULL;
  }
}

/* Disposes of a cell that will never run (shutdown leftovers). */
static void cube__discard_cell(cube__device_t* d, cube__cell_t* c) {
  switch (c->kind) {
    case CUBE__CELL_NORMAL:
      if (c->drop) c->drop(c->payload);
      break;
    case CUBE__CELL_HEAP:
      if (c->drop) c->drop(c->ptr);
      cube__aligned_free(c->ptr);
      break;
    case CUBE__CELL_BLOCKING:
    case CUBE__CELL_EXCLUSIVE: {
      cube__sync_call_t* r = (cube__sync_call_t*)c->ptr;
      r->result = cube__status_make(CUBE_STATUS_ABORTED,
                                    "device %s was shut down before the call ran",
                                    CUBE__KEY(d->key));
      cube__event_set(&r->done);
      break;
    }
    default:
      break;
  }
}

/* What cube__ring_run_one did. */
enum { CUBE__RAN_NOTHING = 0, CUBE__RAN_CELL = 1, CUBE__STEPPED_OVER = 2 };

/* Runs the next cell if it is published (CUBE__RAN_CELL), or steps over it
 * if it ran where it was claimed (CUBE__STEPPED_OVER, without touching it: a
 * later producer may own it); CUBE__RAN_NOTHING when there is nothing to do
 * yet. Runner thread only. */
static int cube__ring_run_one(cube__device_t* d) {
  size_t pos = d->dequeue_pos;
  cube__cell_t* c = &d->cells[pos & CUBE__RING_MASK];
  size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
  if (seq != pos + 1) {
    if (!cube__seq_released(seq, pos)) return CUBE__RAN_NOTHING;
    d->dequeue_pos = pos + 1;
    return CUBE__STEPPED_OVER;
  }
  cube__event_t* done = cube__execute_cell(c);
  d->dequeue_pos = pos + 1;
  atomic_store_explicit(&c->seq, pos + CUBE__RING_CELLS, memory_order_release);
  if (done) cube__event_set(done);
  return CUBE__RAN_CELL;
}

void cube__device_set_caller_issues(cube__device_t* d, bool on) {
  if (d) atomic_store_explicit(&d->caller_issues, on, memory_order_relaxed);
}

void cube__device_set_caller_polls(cube__device_t* d, unsigned polls) {
  if (d) atomic_store_explicit(&d->caller_polls, polls, memory_order_relaxed);
}

void cube__device_wait(cube__device_t* d, cube__event_t* e) {
  unsigned polls = d ? atomic_load_explicit(&d->caller_polls, memory_order_relaxed) : 0;
  if (polls)
    cube__event_wait_polls(e, UINT64_MAX, polls);
  else
    cube__event_wait(e, UINT64_MAX);
}

/* ---------------------------------------------------------------------------
 * Service destruction (on the executing thread)
 * ------------------------------------------------------------------------- */

static void cube__destroy_services(cube__device_t* d) {
  for (;;) {
    pthread_mutex_lock(&d->services_lock);
    cube__service_t* s = d->ready;
    if (s) d->ready = s->ready_next;
    pthread_mutex_unlock(&d->services_lock);
    if (!s) break;
    s->destroyed = true;
    if (s->vt->destroy) s->vt->destroy(s->state);
    s->state = NULL;
  }
}

/* ---------------------------------------------------------------------------
 * The runner thread
 * ------------------------------------------------------------------------- */

void* cube__queue_runner_main(void* arg) {
  cube__device_t* d = (cube__device_t*)arg;
  tl_runner = d;
  int last = CUBE__RAN_NOTHING;
  for (;;) {
    int ran = cube__ring_run_one(d);
    if (ran) {
      last = ran;
      continue;
    }
    if (atomic_load_explicit(&d->stop, memory_order_acquire)) {
      /* Look again after reading |stop|: what was published before the
       * shutdown request is visible now. */
      if (cube__ring_run_one(d)) continue;
      break;
    }

    /* Idle: spin, then yield, then sleep; no spin after a cell the caller
     * ran on a device whose callers issue their own work after one
     * (cube__device_set_caller_issues). */
    bool work = false;
    uint64_t spin_start = cube__now_ns();
    const int spins =
        last == CUBE__STEPPED_OVER && atomic_load_explicit(&d->caller_issues, memory_order_relaxed)
            ? 0
            : CUBE__RUNNER_SPINS;
    last = CUBE__RAN_NOTHING;
    for (int i = 0; i < spins && !work; ++i) {
      cube__cpu_relax();
      work = cube__ring_ready(d);
      if ((i & 63) == 63 && cube__now_ns() - spin_start > CUBE__RUNNER_SPIN_NS) break;
    }
    for (int i = 0; i < CUBE__RUNNER_YIELDS && !work; ++i) {
      sched_yield();
      work = cube__ring_ready(d) || atomic_load_explicit(&d->stop, memory_order_acquire);
    }
    if (work) continue;

    unsigned w = atomic_load(&d->wake_seq);
    atomic_store(&d->sleeping, 1);
    atomic_thread_fence(memory_order_seq_cst);
    if (cube__ring_ready(d) || atomic_load(&d->stop)) {
      atomic_store(&d->sleeping, 0);
      continue;
    }
    cube__futex_wait(&d->wake_seq, w, UINT64_MAX);
    atomic_store(&d->sleeping, 0);
  }
  /* Destroy on this thread so that calls made by destroy functions into
   * other services of the device run inline. */
  cube__destroy_services(d);
  tl_runner = NULL;
  return NULL;
}

bool cube__device_is_current(const cube__device_t* d) {
  if (!d) return false;
  if (d->is_inline)
    return atomic_load_explicit((atomic_uintptr_t*)&d->owner, memory_order_relaxed) ==
           cube__self();
  return tl_runner == d;
}

/* ---------------------------------------------------------------------------
 * Submission
 * ------------------------------------------------------------------------- */

cube_status_t cube__submit(cube__service_t* s, uint64_t stream_id, cube__task_fn fn,
                           const void* payload, size_t size, cube__payload_drop_fn drop) {
  if (!s || !fn) {
    if (size == 0 || payload) cube__drop_refused(payload, drop);
    return CUBE_INVALID("cube__submit: %s is NULL", !s ? "service" : "task function");
  }
  /* (A NULL payload with a size is not dropped: there is nothing to drop.) */
  if (size && !payload) return CUBE_INVALID("cube__submit: payload is NULL with size %zu", size);
  cube_status_t st = cube__check_usable(s);
  if (st != CUBE_OK) {
    cube__drop_refused(payload, drop);
    return st;
  }
  cube__device_t* d = s->device;

  /* Large payloads: a 64-aligned heap copy (made before a cell is claimed). */
  void* heap = NULL;
  if (size > CUBE__TASK_INLINE_BYTES) {
    heap = cube__aligned_alloc(size, 64);
    if (!heap) {
      cube__drop_refused(payload, drop);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                               "submit to service '%s' on device %s: no memory for a %zu-byte "
                               "payload",
                               cube__service_name(s), CUBE__KEY(d->key), size);
    }
    memcpy(heap, payload, size);
  }

  if (d->is_inline || tl_runner == d) {
    /* Run now on this thread (inline mode, or nested on the runner). */
    _Alignas(64) unsigned char local[CUBE__TASK_INLINE_BYTES];
    void* p = heap ? heap : (void*)local;
    if (!heap && size) memcpy(local, payload, size);
    if (d->is_inline) cube__exec_lock(d);
    cube__run_detached(s, stream_id, fn, p, drop);
    if (d->is_inline) cube__exec_unlock(d);
    cube__aligned_free(heap);
    return CUBE_OK;
  }

  size_t pos = 0;
  cube__cell_t* c = cube__ring_claim(d, &pos);
  c->kind = heap ? CUBE__CELL_HEAP : CUBE__CELL_NORMAL;
  c->fn = fn;
  c->drop = drop;
  c->service = s;
  c->stream_id = stream_id;
  c->ptr = heap;
  if (!heap && size) memcpy(c->payload, payload, size);
  cube__ring_publish(d, c, pos);
  return CUBE_OK;
}

cube_status_t cube__submit_fill(cube__service_t* s, uint64_t stream_id, cube__task_fn fn,
                                size_t size, cube__payload_fill_fn fill, const void* arg,
                                cube__payload_drop_fn drop) {
  if (!s || !fn || !fill)
    return CUBE_INVALID("cube__submit_fill: %s is NULL",
                        !s ? "service" : !fn ? "task function" : "fill function");
  CUBE_RETURN_IF_ERROR(cube__check_usable(s));
  cube__device_t* d = s->device;
  void* heap = NULL;
  if (size > CUBE__TASK_INLINE_BYTES) {
    heap = cube__aligned_alloc(size, 64);
    if (!heap)
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                               "submit to service '%s' on device %s: no memory for a %zu-byte "
                               "payload",
                               cube__service_name(s), CUBE__KEY(d->key), size);
  }
  if (d->is_inline || tl_runner == d) {
    _Alignas(64) unsigned char local[CUBE__TASK_INLINE_BYTES];
    void* p = heap ? heap : (void*)local;
    fill(p, arg);
    if (d->is_inline) cube__exec_lock(d);
    cube__run_detached(s, stream_id, fn, p, drop);
    if (d->is_inline) cube__exec_unlock(d);
    cube__aligned_free(heap);
    return CUBE_OK;
  }
  if (heap) fill(heap, arg); /* before a cell is claimed: the runner waits on claimed cells */
  size_t pos = 0;
  cube__cell_t* c = cube__ring_claim(d, &pos);
  c->kind = heap ? CUBE__CELL_HEAP : CUBE__CELL_NORMAL;
  c->fn = fn;
  c->drop = drop;
  c->service = s;
  c->stream_id = stream_id;
  c->ptr = heap;
  if (!heap) fill(c->payload, arg);
  cube__ring_publish(d, c, pos);
  return CUBE_OK;
}

/* Queues a call whose record lives on this (waiting) caller's stack, and
 * waits for the runner to run it: a task of |s| (|fn|) for BLOCKING, or an
 * exclusive function (|xfn|) for EXCLUSIVE. */
static cube_status_t cube__call_on_runner(cube__device_t* d, int kind, cube__service_t* s,
                                          uint64_t stream_id, cube__task_fn fn,
                                          cube_status_t (*xfn)(void*), void* arg) {
  cube__sync_call_t r;
  r.fn = fn;
  r.xfn = xfn;
  r.arg = arg;
  r.result = CUBE_OK;
  cube__event_init(&r.done);
  size_t pos = 0;
  cube__cell_t* c = cube__ring_claim(d, &pos);
  c->kind = (uint32_t)kind;
  c->fn = NULL;
  c->drop = NULL;
  c->service = s;
  c->stream_id = stream_id;
  c->ptr = &r;
  cube__ring_publish(d, c, pos);
  cube__device_wait(d, &r.done);
  return r.result;
}

cube_status_t cube__submit_blocking(cube__service_t* s, uint64_t stream_id, cube__task_fn fn,
                                    void* payload) {
  if (!s || !fn)
    return CUBE_INVALID("cube__submit_blocking: %s is NULL", !s ? "service" : "task function");
  CUBE_RETURN_IF_ERROR(cube__check_usable(s));
  cube__device_t* d = s->device;
  if (d->is_inline) {
    cube__exec_lock(d);
    cube_status_t st = cube__run_borrowed(s, stream_id, fn, payload);
    cube__exec_unlock(d);
    return st;
  }
  if (tl_runner == d) return cube__run_borrowed(s, stream_id, fn, payload);
  return cube__call_on_runner(d, CUBE__CELL_BLOCKING, s, stream_id, fn, NULL, payload);
}

cube_status_t cube__exclusive(cube__device_t* d, uint64_t stream_id, cube_status_t (*fn)(void*),
                              void* user) {
  if (!d || !fn)
    return CUBE_INVALID("cube__exclusive: %s is NULL", !d ? "device" : "function");
  if (d->is_inline) {
    cube__exec_lock(d);
    cube_status_t st = cube__run_exclusive(stream_id, fn, user);
    cube__exec_unlock(d);
    return st;
  }
  if (tl_runner == d) return cube__run_exclusive(stream_id, fn, user);
  return cube__call_on_runner(d, CUBE__CELL_EXCLUSIVE, NULL, stream_id, NULL, fn, user);
}

/* ---------------------------------------------------------------------------
 * Work run where it is submitted (THREADED mode)
 * ------------------------------------------------------------------------- */

/* True once every cell before |pos| has run (on the runner, or where it was
 * claimed), polling for at most |wait_ns|. The runner runs cells in order
 * and a claimer runs its own only when this holds, so the cell just before
 * |pos| being released says it for all of them. */
static bool cube__ring_before_done(const cube__device_t* d, size_t pos, uint64_t wait_ns) {
  const cube__cell_t* prev = &d->cells[(pos - 1) & CUBE__RING_MASK];
  if (cube__seq_released(atomic_load_explicit((atomic_size_t*)&prev->seq, memory_order_acquire),
                         pos - 1))
    return true;
  if (!wait_ns) return false;
  uint64_t start = cube__now_ns();
  for (unsigned i = 1;; ++i) {
    cube__cpu_relax();
    if (cube__seq_released(
            atomic_load_explicit((atomic_size_t*)&prev->seq, memory_order_acquire), pos - 1))
      return true;
    if ((i & 63) == 0 && cube__now_ns() - start > wait_ns) return false;
  }
}

/* Releases the cell claimed at |pos| without publishing it: its work ran on
 * this thread (or there is none). The runner steps over it when it gets
 * there. A runner asleep at this cell is woken when something was claimed
 * after it (it would not see that publish otherwise: it watches this cell),
 * and every CUBE__RUNNER_CATCH_UP positions, so that it never has more than
 * that many cells to step over when it wakes. The fence orders the release
 * before the reads of |enqueue_pos| and |sleeping|, against the runner's
 * fence between setting |sleeping| and looking at the ring. */
static void cube__ring_release_here(cube__device_t* d, cube__cell_t* c, size_t pos) {
  atomic_store_explicit(&c->seq, pos + CUBE__RING_CELLS, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&d->enqueue_pos, memory_order_relaxed) == pos + 1 &&
      ((pos + 1) & (CUBE__RUNNER_CATCH_UP - 1)) != 0)
    return;
  if (atomic_load_explicit(&d->sleeping, memory_order_relaxed) != 0 &&
      atomic_exchange(&d->sleeping, 0) != 0) {
    atomic_fetch_add(&d->wake_seq, 1);
    cube__futex_wake(&d->wake_seq, 1);
  }
}

cube_status_t cube__submit_here(cube__service_t* s, uint64_t stream_id, const cube__here_task_t* t,
                                bool* out_here) {
  if (out_here) *out_here = false;
  if (!s || !t || !t->here || !t->fn || !t->prepare || !out_here)
    return CUBE_INVALID("cube__submit_here: %s is NULL",
                        !s ? "service" : !t ? "task" : !t->here ? "here function"
                                                   : !t->fn ? "task function"
                                                   : !t->prepare ? "prepare function"
                                                                 : "out_here");
  if (t->size > CUBE__TASK_INLINE_BYTES)
    return CUBE_INVALID("cube__submit_here: a %zu-byte payload is over the cell's %d bytes",
                        t->size, CUBE__TASK_INLINE_BYTES);
  CUBE_RETURN_IF_ERROR(cube__check_usable(s));
  cube__device_t* d = s->device;
  if (d->is_inline || tl_runner == d) {
    /* Inline mode, or nested on the runner: the work runs now anyway. */
    if (d->is_inline) cube__exec_lock(d);
    cube_status_t st = cube__run_borrowed(s, stream_id, t->here, t->here_arg);
    if (d->is_inline) cube__exec_unlock(d);
    *out_here = true;
    return st;
  }
  /* Work that follows a blocking call may run here only right after it. */
  bool may = !tl_runner && (!t->after_blocking || cube__tl_after_blocking == d) &&
             cube__option_bool(CUBE__OPT_CALLER_RUNS);
  /* The next place in the queue, as any submission takes it: what was
   * submitted before is ahead, what is submitted from now on is behind. */
  size_t pos = 0;
  cube__cell_t* c = cube__ring_claim(d, &pos);
  if (may && cube__ring_before_done(d, pos, t->after_blocking ? 0 : t->wait_ns)) {
    /* Everything ahead ran and the runner cannot pass the unpublished cell:
     * this thread has the device to itself, as the runner would. */
    tl_runner = d;
    cube_status_t st = cube__run_borrowed(s, stream_id, t->here, t->here_arg);
    tl_runner = NULL;
    cube__ring_release_here(d, c, pos);
    if (!t->after_blocking) cube__tl_after_blocking = d;
    *out_here = true;
    return st;
  }
  cube_status_t st = t->prepare(c->payload, t->prepare_arg);
  if (st) {
    cube__ring_release_here(d, c, pos); /* nothing taken, nothing queued */
    return st;
  }
  c->kind = CUBE__CELL_NORMAL;
  c->fn = t->fn;
  c->drop = t->drop;
  c->service = s;
  c->stream_id = stream_id;
  c->ptr = NULL;
  cube__ring_publish(d, c, pos);
  return CUBE_OK;
}

void cube__device_flush(cube__device_t* d) {
  if (!d || d->is_inline) return;
  cube__wake_runner(d);
}

/* ---------------------------------------------------------------------------
 * Shutdown
 * ------------------------------------------------------------------------- */

void cube__queue_shutdown(cube__device_key_t key) {
  pthread_mutex_lock(&cube__queue_registry_lock);
  cube__device_t* d = cube__queue_find_device_locked(key);
  pthread_mutex_unlock(&cube__queue_registry_lock);
  if (!d) return;
  if (cube__device_is_current(d)) {
    fprintf(stderr,
            "cube: cube__queue_shutdown(%s) called from a task of that device; ignored\n",
            CUBE__KEY(key));
    return;
  }

  if (d->is_inline) {
    cube__exec_lock(d);
    cube__destroy_services(d);
    cube__exec_unlock(d);
  } else if (d->has_thread) {
    /* The runner drains the ring, sees |stop|, destroys the services on its
     * own thread and exits. */
    atomic_store(&d->stop, true);
    atomic_fetch_add(&d->wake_seq, 1);
    cube__futex_wake(&d->wake_seq, -1);
    pthread_join(d->thread, NULL);
    d->has_thread = false;
    /* Nothing should be left (the device must not be used during
     * shutdown); dispose of whatever a late producer published. */
    while (cube__ring_ready(d)) {
      cube__cell_t* c = &d->cells[d->dequeue_pos & CUBE__RING_MASK];
      if (atomic_load_explicit(&c->seq, memory_order_acquire) == d->dequeue_pos + 1) {
        cube__discard_cell(d, c);
        atomic_store_explicit(&c->seq, d->dequeue_pos + CUBE__RING_CELLS, memory_order_release);
      }
      ++d->dequeue_pos;
    }
  }

  pthread_mutex_lock(&cube__queue_registry_lock);
  cube__device_t** link = &cube__queue_devices;
  while (*link && *link != d) link = &(*link)->next;
  if (*link) *link = d->next;
  pthread_mutex_unlock(&cube__queue_registry_lock);
  cube__queue_device_free(d);
}

static cube_status_t cube__noop(void* user) {
  (void)user;
  return CUBE_OK;
}

void cube__queue_drain_all(void) {
  enum { MAX = 256 };
  cube__device_t* list[MAX];
  size_t n = 0;
  pthread_mutex_lock(&cube__queue_registry_lock);
  for (cube__device_t* d = cube__queue_devices; d && n < MAX; d = d->next)
    if (!d->is_inline && d->has_thread && !cube__device_is_current(d)) list[n++] = d;
  pthread_mutex_unlock(&cube__queue_registry_lock);
  /* Devices are freed only by shutdown, which is not running concurrently. */
  for (size_t i = 0; i < n; ++i) cube_status_free(cube__exclusive(list[i], 0, cube__noop, NULL));
}

void cube__queue_shutdown_all(void) {
  for (;;) {
    bool found = false;
    cube__device_key_t key = {0, 0};
    pthread_mutex_lock(&cube__queue_registry_lock);
    for (cube__device_t* d = cube__queue_devices; d; d = d->next) {
      if (cube__device_is_current(d)) continue;
      key = d->key;
      found = true;
      break;
    }
    pthread_mutex_unlock(&cube__queue_registry_lock);
    if (!found) return;
    cube__queue_shutdown(key);
  }
}
