/* Automatic capture (CUBE_GRAPHS=auto; docs/graphs.md, "Automatic capture").
 *
 * A step is the launches a stream is given between two boundaries (a read, a
 * write, a sync, a flush, a replay, a capture, a collective: whatever else is
 * queued on the stream or waits for it). Each stream learns the signature of
 * its steps as they run eagerly: per launch the kernel, the static count, the
 * execution mode, the scalars by value, and per buffer argument its view size
 * and its slot (views numbered by first use in the step, so that the slots
 * say which arguments are the same view: the aliasing pattern, not the
 * buffers themselves). When a step is about to be seen the warm-up-th time
 * alike, it is also recorded into a graph as it is queued; at its boundary
 * the stream starts replaying. From then on each launch is compared with the
 * learned step as it arrives and held (its buffers referenced, the rest is
 * the graph's); when the last one matched, the step is queued as one replay
 * with the step's views substituted for every slot. A launch that differs
 * (or a boundary before the step is complete) queues what was held eagerly,
 * in order, at once, drops the graph and learns again; something outside the
 * step that needs its work queued (another stream using one of its buffers,
 * an exclusive call, shutdown) queues the held launches eagerly and keeps the
 * graph. Profiled (level exec or more), each change is a log line.
 *
 * Locks: one per stream state, never two at once; held launches and
 * fallbacks are queued under it, log lines written after it. Other streams
 * find a buffer's holder through the buffer's tag (cube__memory_t.auto_tag:
 * the holding stream's slot and step number; stale tags are harmless).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "kernel/kernel.h"
#include "server/server.h"

/* A step of more launches than this is not learned (it runs eagerly). */
enum { CUBE__AUTO_MAX_NODES = 1 << 16 };

#define CUBE__AUTO_EPOCH_BITS 44
#define CUBE__AUTO_EPOCH_MASK ((UINT64_C(1) << CUBE__AUTO_EPOCH_BITS) - 1)

typedef struct cube__auto_node {
  cube_kernel_t* kernel; /* compared by address and id; the graph holds it once there is one */
  uint64_t kernel_id;
  uint32_t count[3];
  cube_execution_mode_t mode;
  uint32_t arg_count;
  uint32_t arg0; /* its first argument in the signature's args */
} cube__auto_node_t;

typedef struct cube__auto_arg {
  uint32_t slot; /* a buffer: its slot; UINT32_MAX: a scalar */
  uint64_t v;    /* a buffer: its view size; a scalar: its bits (the value's u64) */
} cube__auto_arg_t;

typedef struct cube__auto_sig {
  cube__auto_node_t* nodes;
  size_t count, cap;
  cube__auto_arg_t* args;
  size_t arg_count, arg_cap;
  uint32_t slots; /* distinct views */
} cube__auto_sig_t;

/* A view of the step being learned and its slot (open addressing; entries
 * of earlier steps have another |gen|). */
typedef struct cube__auto_view {
  cube__memory_t* mem;
  uint64_t offset, len;
  uint32_t slot, gen;
} cube__auto_view_t;

typedef enum cube__auto_phase_e {
  CUBE__AUTO_LEARN = 0,  /* launches run eagerly; the steps are learned */
  CUBE__AUTO_REPLAY = 1, /* launches are held and compared with |prev| */
} cube__auto_phase_t;

/* A line to log once the state's lock is let go. */
typedef struct cube__auto_note {
  char text[320];
} cube__auto_note_t;

struct cube__auto {
  pthread_mutex_t lock; /* guards every field below but |live| (threads may share a pinned
                           stream; other streams end its held steps) */
  cube__stream_t* stream;
  struct cube__auto* next; /* the process's list (cube__auto_shutdown) */
  uint32_t warmup;
  cube__auto_phase_t phase;
  /* Learning. */
  cube__auto_sig_t cur;  /* the step being seen */
  cube__auto_sig_t prev; /* the last step seen; in REPLAY the step replayed */
  uint32_t repeats;      /* steps alike that ended with |prev| */
  bool broken;           /* |cur| is not learned (a dynamic count, too long, a fallback) */
  bool matching;         /* |cur| is so far a prefix of |prev| */
  struct cube_graph_s* tee; /* |cur| recorded as it is queued: the graph if it is the
                               warm-up-th step alike */
  cube__auto_view_t* views;
  size_t view_cap;
  uint32_t gen;
  /* Replaying. */
  struct cube_graph_s* graph; /* made from |prev|'s step; holds its kernels */
  size_t held;                /* launches of the step matched and held */
  bool done;                  /* the step's replay is queued; its boundary is still to come */
  bool eager_rest;            /* the step's held launches were queued eagerly from outside:
                                 its other launches run eagerly too, the graph stays */
  cube__graph_sub_t* subs;    /* prev.slots entries; the first |seen| hold references */
  uint32_t seen;
  uint64_t epoch;
  atomic_uint_fast64_t live; /* the tag of the held step, 0 when none (read by other
                                streams without the lock) */
  /* Counts (cube_graph_auto_stats_t). */
  uint64_t n_graphs, n_steps, n_launches, n_fallbacks, n_interrupted;
};

static pthread_mutex_t cube__auto_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cube__auto* cube__auto_list;

//===----------------------------------------------------------------------===//
// Signatures
//===----------------------------------------------------------------------===//

static void cube__auto_sig_clear(cube__auto_sig_t* s) {
  s->count = 0;
  s->arg_count = 0;
  s->slots = 0;
}

static void cube__auto_sig_free(cube__auto_sig_t* s) {
  free(s->nodes);
  free(s->args);
  memset(s, 0, sizeof(*s));
}

static bool cube__auto_node_eq(const cube__auto_sig_t* a, size_t i, const cube__auto_sig_t* b,
                               size_t j) {
  const cube__auto_node_t* x = &a->nodes[i];
  const cube__auto_node_t* y = &b->nodes[j];
  if (x->kernel != y->kernel || x->kernel_id != y->kernel_id || x->mode != y->mode ||
      x->arg_count != y->arg_count || memcmp(x->count, y->count, sizeof(x->count)) != 0)
    return false;
  for (uint32_t k = 0; k < x->arg_count; ++k) {
    const cube__auto_arg_t* p = &a->args[x->arg0 + k];
    const cube__auto_arg_t* q = &b->args[y->arg0 + k];
    if (p->slot != q->slot || p->v != q->v) return false;
  }
  return true;
}

static uint64_t cube__auto_hash(const cube__memory_t* mem, uint64_t offset, uint64_t len) {
  uint64_t h = (uint64_t)(uintptr_t)mem * UINT64_C(0x9E3779B97F4A7C15);
  h ^= (offset + UINT64_C(0x632BE59BD9B4E019)) * UINT64_C(0xBF58476D1CE4E5B9);
  h ^= len * UINT64_C(0x94D049BB133111EB);
  return h ^ (h >> 31);
}

/* Grows the view table to hold |need| views of the current generation. */
static bool cube__auto_views_reserve(struct cube__auto* a, size_t need) {
  if (need * 2 <= a->view_cap) return true;
  size_t cap = a->view_cap ? a->view_cap * 2 : 64;
  while (need * 2 > cap) cap *= 2;
  cube__auto_view_t* v = calloc(cap, sizeof(*v));
  if (!v) return false;
  for (size_t i = 0; i < a->view_cap; ++i) {
    const cube__auto_view_t* e = &a->views[i];
    if (e->gen != a->gen) continue;
    size_t h = (size_t)cube__auto_hash(e->mem, e->offset, e->len) & (cap - 1);
    while (v[h].gen == a->gen) h = (h + 1) & (cap - 1);
    v[h] = *e;
  }
  free(a->views);
  a->views = v;
  a->view_cap = cap;
  return true;
}

/* The slot of a view in the step being learned (a new one on first use). */
static bool cube__auto_slot(struct cube__auto* a, cube__memory_t* mem, uint64_t offset,
                            uint64_t len, uint32_t* out_slot) {
  if (!cube__auto_views_reserve(a, (size_t)a->cur.slots + 1)) return false;
  size_t mask = a->view_cap - 1;
  size_t h = (size_t)cube__auto_hash(mem, offset, len) & mask;
  for (; a->views[h].gen == a->gen; h = (h + 1) & mask) {
    const cube__auto_view_t* e = &a->views[h];
    if (e->mem == mem && e->offset == offset && e->len == len) {
      *out_slot = e->slot;
      return true;
    }
  }
  a->views[h] = (cube__auto_view_t){mem, offset, len, a->cur.slots, a->gen};
  *out_slot = a->cur.slots++;
  return true;
}

/* A new step: the view table forgets the last one's views. */
static void cube__auto_views_reset(struct cube__auto* a) {
  if (++a->gen == 0) {
    if (a->views) memset(a->views, 0, a->view_cap * sizeof(*a->views));
    a->gen = 1;
  }
}

/* Appends a launch to |cur|; false when out of host memory. */
static bool cube__auto_sig_append(struct cube__auto* a, cube_kernel_t* kernel,
                                  const uint32_t count[3], cube_execution_mode_t mode,
                                  uint32_t arg_count, const cube__task_arg_t* args) {
  cube__auto_sig_t* s = &a->cur;
  void* nodes = cube__array_grow(s->nodes, &s->cap, s->count + 1, sizeof(*s->nodes));
  if (!nodes) return false;
  s->nodes = nodes;
  void* all = cube__array_grow(s->args, &s->arg_cap, s->arg_count + arg_count + 1, sizeof(*s->args));
  if (!all) return false;
  s->args = all;
  cube__auto_node_t* n = &s->nodes[s->count];
  *n = (cube__auto_node_t){kernel, kernel->id, {count[0], count[1], count[2]}, mode, arg_count,
                           (uint32_t)s->arg_count};
  for (uint32_t i = 0; i < arg_count; ++i) {
    cube__auto_arg_t* x = &s->args[s->arg_count + i];
    if (args[i].mem) {
      x->v = args[i].value.buffer.len;
      if (!cube__auto_slot(a, args[i].mem, args[i].value.buffer.offset, x->v, &x->slot))
        return false;
    } else {
      x->slot = UINT32_MAX;
      x->v = args[i].value.u64;
    }
  }
  s->arg_count += arg_count;
  s->count++;
  return true;
}

//===----------------------------------------------------------------------===//
// Notes (log lines, profile level exec and above)
//===----------------------------------------------------------------------===//

static bool cube__auto_logs(const struct cube__auto* a) {
  return a->stream->server->profiler.level >= CUBE_PROFILE_EXEC;
}

static void cube__auto_note(const struct cube__auto* a, cube__auto_note_t* note, const char* fmt,
                            ...) CUBE_PRINTF(3, 4);
static void cube__auto_note(const struct cube__auto* a, cube__auto_note_t* note, const char* fmt,
                            ...) {
  if (!note || !cube__auto_logs(a)) return;
  int n = snprintf(note->text, sizeof(note->text), "graph auto: stream %" PRIu64 ": ",
                   a->stream->id);
  if (n < 0 || (size_t)n >= sizeof(note->text)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(note->text + n, sizeof(note->text) - (size_t)n, fmt, ap);
  va_end(ap);
}

static void cube__auto_log(const struct cube__auto* a, const cube__auto_note_t* note) {
  if (note->text[0])
    cube__profiler_log(&a->stream->server->profiler, "%s", note->text);
}

//===----------------------------------------------------------------------===//
// Held steps
//===----------------------------------------------------------------------===//

static uint64_t cube__auto_tag(const struct cube__auto* a) {
  return ((uint64_t)(a->stream->slot + 1) << CUBE__AUTO_EPOCH_BITS) |
         (a->epoch & CUBE__AUTO_EPOCH_MASK);
}

/* The state whose held step |tag| names, if that step is held now and is not
 * |self|'s; NULL otherwise. */
static struct cube__auto* cube__auto_holder(cube__server_t* s, const struct cube__auto* self,
                                            uint64_t tag) {
  if (!tag) return NULL;
  uint64_t slot = (tag >> CUBE__AUTO_EPOCH_BITS) - 1;
  if (slot >= s->max_streams || (self && slot == self->stream->slot)) return NULL;
  cube__stream_t* o = atomic_load_explicit(&s->streams[slot], memory_order_acquire);
  struct cube__auto* h = o ? o->auto_state : NULL;
  if (!h || atomic_load_explicit(&h->live, memory_order_acquire) != tag) return NULL;
  return h;
}

/* Queues launch |i| of the learned step eagerly, with the step's views. */
static void cube__auto_queue_eager(struct cube__auto* a, size_t i) {
  const cube__auto_node_t* n = &a->prev.nodes[i];
  cube__task_arg_t args[CUBE_MAX_KERNEL_ARGS];
  for (uint32_t k = 0; k < n->arg_count; ++k) {
    const cube__auto_arg_t* x = &a->prev.args[n->arg0 + k];
    memset(&args[k], 0, sizeof(args[k]));
    if (x->slot == UINT32_MAX) {
      args[k].value.u64 = x->v;
    } else {
      args[k].mem = a->subs[x->slot].mem;
      args[k].value.buffer.offset = a->subs[x->slot].offset;
      args[k].value.buffer.len = x->v;
    }
  }
  cube__stream_push_error(a->stream, cube__server_launch(a->stream, n->kernel, n->count, NULL, 0,
                                                         n->mode, n->arg_count, args));
}

/* Lets go of the step's views (after its work was queued) and of its tag. */
static void cube__auto_release_step(struct cube__auto* a) {
  atomic_store_explicit(&a->live, 0, memory_order_release);
  for (uint32_t k = 0; a->subs && k < a->seen; ++k) cube__memory_unref(a->subs[k].mem);
  a->seen = 0;
  a->held = 0;
}

/* Queues the held launches eagerly, in order. */
static void cube__auto_flush_held(struct cube__auto* a) {
  for (size_t i = 0; i < a->held; ++i) cube__auto_queue_eager(a, i);
  cube__auto_release_step(a);
}

/* Back to learning: the held launches are queued eagerly, the graph goes,
 * and the rest of the step runs eagerly, not learned. */
static void cube__auto_fall_back(struct cube__auto* a, cube__auto_note_t* note,
                                 const char* reason) {
  /* After a step whose replay is queued, what went on is past its end. */
  size_t held = a->done ? a->prev.count : a->held, total = a->prev.count;
  cube__auto_flush_held(a);
  free(a->subs);
  a->subs = NULL;
  cube__graph_unref(a->graph);
  a->graph = NULL;
  a->phase = CUBE__AUTO_LEARN;
  a->done = false;
  a->eager_rest = false;
  a->repeats = 0;
  cube__auto_sig_clear(&a->prev);
  cube__auto_sig_clear(&a->cur);
  a->broken = true;
  a->n_fallbacks++;
  cube__auto_note(a, note, "fell back to eager launches after launch %zu of %zu (%s)", held,
                  total, reason);
}

/* Queues the held launches eagerly for a reason outside the step; the graph
 * stays, the rest of the step runs eagerly. */
static void cube__auto_interrupt(struct cube__auto* a, cube__auto_note_t* note,
                                 const char* reason) {
  if (a->phase != CUBE__AUTO_REPLAY || !a->held || a->done) return;
  size_t held = a->held;
  cube__auto_flush_held(a);
  a->eager_rest = true;
  a->n_interrupted++;
  cube__auto_note(a, note,
                  "queued launches 1 to %zu of %zu eagerly (%s); the next step is replayed", held,
                  a->prev.count, reason);
}

/* The step is complete: one replay with its views. */
static void cube__auto_queue_replay(struct cube__auto* a) {
  /* The replay takes the references the step held (also when refused). */
  cube__graph_sub_t* subs = a->subs;
  a->subs = NULL;
  a->seen = 0;
  cube_status_t st = cube__server_replay(a->stream, a->graph, subs, NULL, 0);
  atomic_store_explicit(&a->live, 0, memory_order_release);
  /* Refused (a queue shut down): the launch calls returned already, so the
   * failure is deferred as theirs would be. */
  cube__stream_push_error(a->stream, st);
  a->n_steps++;
  a->n_launches += a->held;
  a->held = 0;
  a->done = true;
}

/* Tags |mem| for the held step; false when another stream's held step has it. */
static bool cube__auto_claim(struct cube__auto* a, cube__memory_t* mem, uint64_t mine,
                             uint64_t* out_other) {
  cube__server_t* s = a->stream->server;
  uint64_t t = atomic_load_explicit(&mem->auto_tag, memory_order_acquire);
  for (;;) {
    if (t == mine) return true;
    if (cube__auto_holder(s, a, t)) {
      *out_other = (t >> CUBE__AUTO_EPOCH_BITS) - 1;
      return false;
    }
    if (atomic_compare_exchange_weak_explicit(&mem->auto_tag, &t, mine, memory_order_acq_rel,
                                              memory_order_acquire))
      return true;
  }
}

/* A launch while replaying: held when it is the next one of the step. */
static void cube__auto_hold(struct cube__auto* a, cube_kernel_t* kernel, const uint32_t count[3],
                            cube__memory_t* dyn_mem, cube_execution_mode_t mode,
                            uint32_t arg_count, const cube__task_arg_t* args,
                            cube__auto_note_t* note, bool* out_eager) {
  char why[160];
  *out_eager = false;
  if (a->eager_rest) {
    *out_eager = true;
    return;
  }
  if (a->done) {
    snprintf(why, sizeof(why), "the step went on: launch %zu is kernel '%s'", a->prev.count + 1,
             kernel->name);
    cube__auto_fall_back(a, note, why);
    *out_eager = true;
    return;
  }
  size_t i = a->held;
  const cube__auto_node_t* n = &a->prev.nodes[i];
  why[0] = '\0';
  if (dyn_mem)
    snprintf(why, sizeof(why), "launch %zu has a dynamic cube count", i + 1);
  else if (kernel != n->kernel || kernel->id != n->kernel_id)
    snprintf(why, sizeof(why), "launch %zu is kernel '%s', not '%s'", i + 1, kernel->name,
             n->kernel->name);
  else if (mode != n->mode)
    snprintf(why, sizeof(why), "launch %zu of '%s' has another execution mode", i + 1,
             kernel->name);
  else if (memcmp(count, n->count, sizeof(n->count)) != 0)
    snprintf(why, sizeof(why), "launch %zu of '%s' has cube count (%u, %u, %u), not (%u, %u, %u)",
             i + 1, kernel->name, count[0], count[1], count[2], n->count[0], n->count[1],
             n->count[2]);
  if (!why[0] && !a->subs) {
    a->subs = calloc(a->prev.slots ? a->prev.slots : 1, sizeof(*a->subs));
    if (!a->subs) snprintf(why, sizeof(why), "no host memory to hold a step");
  }
  uint32_t seen = a->seen;
  for (uint32_t k = 0; !why[0] && k < arg_count; ++k) {
    const cube__auto_arg_t* x = &a->prev.args[n->arg0 + k];
    if (x->slot == UINT32_MAX) {
      if (args[k].value.u64 != x->v)
        snprintf(why, sizeof(why), "launch %zu of '%s': argument %u, a scalar, has another value",
                 i + 1, kernel->name, k);
      continue;
    }
    const cube__task_arg_t* t = &args[k];
    if (t->value.buffer.len != x->v) {
      snprintf(why, sizeof(why),
               "launch %zu of '%s': argument %u views %" PRIu64 " bytes, not %" PRIu64, i + 1,
               kernel->name, k, t->value.buffer.len, x->v);
    } else if (x->slot < seen) {
      if (a->subs[x->slot].mem != t->mem || a->subs[x->slot].offset != t->value.buffer.offset)
        snprintf(why, sizeof(why),
                 "launch %zu of '%s': argument %u is not the view the step used there before",
                 i + 1, kernel->name, k);
    } else {
      /* The slot's first use in the step (slots are numbered in that order):
       * any view of its size. */
      a->subs[seen++] = (cube__graph_sub_t){t->mem, t->value.buffer.offset};
    }
  }
  if (why[0]) {
    cube__auto_fall_back(a, note, why);
    *out_eager = true;
    return;
  }
  if (a->held == 0) {
    a->epoch++;
    atomic_store_explicit(&a->live, cube__auto_tag(a), memory_order_release);
  }
  uint64_t mine = cube__auto_tag(a);
  for (uint32_t k = a->seen; k < seen; ++k) {
    cube__memory_ref(a->subs[k].mem);
    a->seen = k + 1;
    uint64_t other = 0;
    if (!cube__auto_claim(a, a->subs[k].mem, mine, &other)) {
      snprintf(why, sizeof(why), "launch %zu of '%s' uses a buffer that stream %" PRIu64 "'s "
               "held step uses", i + 1, kernel->name, other);
      cube__auto_fall_back(a, note, why);
      *out_eager = true;
      return;
    }
  }
  if (++a->held < a->prev.count) return;
  if (a->seen != cube__graph_slot_count(a->graph)) {
    /* Cannot be (the slots of both are numbered by first use); kept safe. */
    a->held--;
    cube__auto_fall_back(a, note, "the step's views do not number like the graph's slots");
    *out_eager = true;
    return;
  }
  cube__auto_queue_replay(a);
}

//===----------------------------------------------------------------------===//
// Learning
//===----------------------------------------------------------------------===//

static void cube__auto_tee_drop(struct cube__auto* a) {
  cube__graph_unref(a->tee);
  a->tee = NULL;
}

/* A launch while learning (queued eagerly by the caller). */
static void cube__auto_learn(struct cube__auto* a, cube_kernel_t* kernel, const uint32_t count[3],
                             cube__memory_t* dyn_mem, uint64_t dyn_offset,
                             cube_execution_mode_t mode, uint32_t arg_count,
                             const cube__task_arg_t* args) {
  if (a->broken) return;
  if (a->cur.count == 0) {
    cube__auto_views_reset(a);
    a->matching = a->prev.count > 0;
    if (a->warmup <= 1 || (a->matching && a->repeats + 1 >= a->warmup))
      a->tee = cube__graph_create(a->stream->server);
  }
  if (dyn_mem || a->cur.count >= CUBE__AUTO_MAX_NODES ||
      !cube__auto_sig_append(a, kernel, count, mode, arg_count, args)) {
    a->broken = true;
    cube__auto_tee_drop(a);
    return;
  }
  size_t i = a->cur.count - 1;
  if (a->matching) a->matching = i < a->prev.count && cube__auto_node_eq(&a->cur, i, &a->prev, i);
  if (a->tee && a->warmup > 1 && !a->matching) cube__auto_tee_drop(a);
  if (a->tee) {
    cube_status_t st = cube__graph_add_launch(a->tee, a->stream, kernel, count, dyn_mem,
                                              dyn_offset, mode, arg_count, args);
    if (st) {
      cube_status_free(st);
      cube__auto_tee_drop(a);
    }
  }
}

/* The boundary of a learning step. */
static void cube__auto_learn_end(struct cube__auto* a, cube__auto_note_t* note) {
  if (a->cur.count == 0 && !a->broken) return;
  if (a->broken) {
    a->repeats = 0;
    cube__auto_sig_clear(&a->prev);
    cube__auto_sig_clear(&a->cur);
    a->broken = false;
    cube__auto_tee_drop(a);
    return;
  }
  a->repeats = a->matching && a->cur.count == a->prev.count ? a->repeats + 1 : 1;
  cube__auto_sig_t t = a->prev;
  a->prev = a->cur;
  a->cur = t;
  cube__auto_sig_clear(&a->cur);
  if (!a->tee) return;
  if (a->repeats < a->warmup) {
    cube__auto_tee_drop(a);
    return;
  }
  a->graph = a->tee;
  a->tee = NULL;
  cube__graph_set_automatic(a->graph);
  /* Every replay binds every slot: the graph keeps no buffer alive between
   * steps, so memory use, cleanup and out-of-memory are as without it. */
  cube__graph_forget_buffers(a->graph);
  a->phase = CUBE__AUTO_REPLAY;
  a->held = 0;
  a->seen = 0;
  a->done = false;
  a->eager_rest = false;
  a->n_graphs++;
  cube__auto_note(a, note,
                  "a step of %zu launches (%u buffer views) ran %u times alike: it is replayed "
                  "as one graph from the next step on",
                  a->prev.count, a->prev.slots, a->repeats);
}

/* A boundary, under the lock. */
static void cube__auto_end_locked(struct cube__auto* a, cube__auto_note_t* note, const char* what) {
  if (a->phase == CUBE__AUTO_LEARN) {
    cube__auto_learn_end(a, note);
    return;
  }
  if (a->held && !a->done && !a->eager_rest) {
    char why[160];
    snprintf(why, sizeof(why), "the step ended at %s", what);
    cube__auto_fall_back(a, note, why);
    a->broken = false; /* the step is over */
    return;
  }
  a->done = false;
  a->eager_rest = false;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

/* True where automatic capture stays out of the way: on the device's own
 * thread (a task, an exclusive call), whose calls run at once. */
static bool cube__auto_bypass(const cube__stream_t* st) {
  return cube__device_is_current(atomic_load_explicit(&st->server->device, memory_order_relaxed));
}

/* Ends the held step another stream has on |mem|, if any. No lock held.
 * The common cases (no tag, this stream's own) cost a load and a compare. */
static void cube__auto_yield_slow(cube__stream_t* st, uint64_t t);
static inline void cube__auto_yield(cube__stream_t* st, cube__memory_t* mem) {
  uint64_t t = atomic_load_explicit(&mem->auto_tag, memory_order_acquire);
  if (t && (t >> CUBE__AUTO_EPOCH_BITS) != (uint64_t)st->slot + 1) cube__auto_yield_slow(st, t);
}

static void cube__auto_yield_slow(cube__stream_t* st, uint64_t t) {
  struct cube__auto* h = cube__auto_holder(st->server, st->auto_state, t);
  if (!h) return;
  cube__auto_note_t note;
  note.text[0] = '\0';
  char why[96];
  snprintf(why, sizeof(why), "one of its buffers is used on stream %" PRIu64, st->id);
  pthread_mutex_lock(&h->lock);
  if (atomic_load_explicit(&h->live, memory_order_relaxed) == t) cube__auto_interrupt(h, &note, why);
  pthread_mutex_unlock(&h->lock);
  cube__auto_log(h, &note);
}

cube_status_t cube__auto_launch(cube__stream_t* st, cube_kernel_t* kernel, const uint32_t count[3],
                                cube__memory_t* dyn_mem, uint64_t dyn_offset,
                                cube_execution_mode_t mode, uint32_t arg_count,
                                const cube__task_arg_t* args) {
  struct cube__auto* a = st->auto_state;
  if (cube__auto_bypass(st))
    return cube__server_launch(st, kernel, count, dyn_mem, dyn_offset, mode, arg_count, args);
  for (uint32_t i = 0; i < arg_count; ++i)
    if (args[i].mem) cube__auto_yield(st, args[i].mem);
  if (dyn_mem) cube__auto_yield(st, dyn_mem);
  cube__auto_note_t note;
  note.text[0] = '\0';
  cube_status_t status = CUBE_OK;
  pthread_mutex_lock(&a->lock);
  bool eager = true;
  if (a->phase == CUBE__AUTO_REPLAY)
    cube__auto_hold(a, kernel, count, dyn_mem, mode, arg_count, args, &note, &eager);
  else
    cube__auto_learn(a, kernel, count, dyn_mem, dyn_offset, mode, arg_count, args);
  /* Queued under the lock: launches of threads sharing the stream keep the
   * order in which they were learned or held. */
  if (eager)
    status = cube__server_launch(st, kernel, count, dyn_mem, dyn_offset, mode, arg_count, args);
  pthread_mutex_unlock(&a->lock);
  cube__auto_log(a, &note);
  return status;
}

void cube__auto_step_end(cube__stream_t* st, const char* what) {
  struct cube__auto* a = st->auto_state;
  if (!a || cube__auto_bypass(st)) return;
  cube__auto_note_t note;
  note.text[0] = '\0';
  pthread_mutex_lock(&a->lock);
  cube__auto_end_locked(a, &note, what);
  pthread_mutex_unlock(&a->lock);
  cube__auto_log(a, &note);
}

void cube__auto_touch(cube__stream_t* st, cube__memory_t* mem) {
  if (!st->auto_state || !mem || cube__auto_bypass(st)) return;
  cube__auto_yield(st, mem);
}

static void cube__auto_interrupt_one(struct cube__auto* a, const char* what) {
  cube__auto_note_t note;
  note.text[0] = '\0';
  pthread_mutex_lock(&a->lock);
  cube__auto_interrupt(a, &note, what);
  pthread_mutex_unlock(&a->lock);
  cube__auto_log(a, &note);
}

void cube__auto_end_device(cube__server_t* s, const char* what) {
  if (cube__device_is_current(atomic_load_explicit(&s->device, memory_order_relaxed))) return;
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load_explicit(&s->streams[i], memory_order_acquire);
    if (st && st->auto_state) cube__auto_interrupt_one(st->auto_state, what);
  }
}

void cube__auto_end_stream_id(cube__server_t* s, uint64_t stream_id, const char* what) {
  uint32_t slot = (uint32_t)(stream_id % s->max_streams);
  cube__stream_t* st = atomic_load_explicit(&s->streams[slot], memory_order_acquire);
  if (st && st->auto_state && !cube__auto_bypass(st)) cube__auto_interrupt_one(st->auto_state, what);
}

/* Queues what is held and lets the graphs go (shutdown). */
static void cube__auto_quiesce(struct cube__auto* a) {
  cube__auto_note_t note;
  note.text[0] = '\0';
  pthread_mutex_lock(&a->lock);
  cube__auto_interrupt(a, &note, "cube_shutdown");
  free(a->subs);
  a->subs = NULL;
  cube__graph_unref(a->graph);
  a->graph = NULL;
  cube__auto_tee_drop(a);
  a->phase = CUBE__AUTO_LEARN;
  a->done = a->eager_rest = a->broken = false;
  a->repeats = 0;
  cube__auto_sig_clear(&a->cur);
  cube__auto_sig_clear(&a->prev);
  pthread_mutex_unlock(&a->lock);
  cube__auto_log(a, &note);
}

void cube__auto_shutdown(void) {
  /* The list's lock is not held while a state is quiesced (that queues
   * work, and an inline device destroys its streams, and so takes the list's
   * lock, under the device's lock). No other call runs during a shutdown:
   * the states listed here stay. */
  pthread_mutex_lock(&cube__auto_list_lock);
  size_t n = 0;
  for (struct cube__auto* a = cube__auto_list; a; a = a->next) ++n;
  struct cube__auto** all = n ? malloc(n * sizeof(*all)) : NULL;
  n = 0;
  for (struct cube__auto* a = cube__auto_list; all && a; a = a->next) all[n++] = a;
  if (!all) /* no host memory: quiesced under the lock */
    for (struct cube__auto* a = cube__auto_list; a; a = a->next) cube__auto_quiesce(a);
  pthread_mutex_unlock(&cube__auto_list_lock);
  for (size_t i = 0; i < n; ++i) cube__auto_quiesce(all[i]);
  free(all);
}

cube_status_t cube__auto_create(cube__stream_t* st, struct cube__auto** out) {
  struct cube__auto* a = calloc(1, sizeof(*a));
  if (!a) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "automatic capture: no host memory");
  pthread_mutex_init(&a->lock, NULL);
  a->stream = st;
  a->warmup = st->server->options.graphs_warmup;
  a->gen = 1;
  atomic_init(&a->live, 0);
  pthread_mutex_lock(&cube__auto_list_lock);
  a->next = cube__auto_list;
  cube__auto_list = a;
  pthread_mutex_unlock(&cube__auto_list_lock);
  *out = a;
  return CUBE_OK;
}

void cube__auto_destroy(struct cube__auto* a) {
  if (!a) return;
  pthread_mutex_lock(&cube__auto_list_lock);
  for (struct cube__auto** p = &cube__auto_list; *p; p = &(*p)->next) {
    if (*p == a) {
      *p = a->next;
      break;
    }
  }
  pthread_mutex_unlock(&cube__auto_list_lock);
  /* cube__auto_shutdown queued and let go of everything; what is left (a
   * stream that failed to be created) holds nothing. */
  cube__auto_release_step(a);
  free(a->subs);
  cube__graph_unref(a->graph);
  cube__graph_unref(a->tee);
  cube__auto_sig_free(&a->cur);
  cube__auto_sig_free(&a->prev);
  free(a->views);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

void cube__auto_stats(cube__server_t* s, uint64_t out[5]) {
  memset(out, 0, 5 * sizeof(uint64_t));
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load_explicit(&s->streams[i], memory_order_acquire);
    struct cube__auto* a = st ? st->auto_state : NULL;
    if (!a) continue;
    pthread_mutex_lock(&a->lock);
    out[0] += a->n_graphs;
    out[1] += a->n_steps;
    out[2] += a->n_launches;
    out[3] += a->n_fallbacks;
    out[4] += a->n_interrupted;
    pthread_mutex_unlock(&a->lock);
  }
}

bool cube__auto_yield_memory(cube__stream_t* st) {
  struct cube__auto* a = st->auto_state;
  if (!a || cube__auto_bypass(st)) return false;
  cube__auto_note_t note;
  note.text[0] = '\0';
  pthread_mutex_lock(&a->lock);
  bool kept = (a->phase == CUBE__AUTO_REPLAY && a->held && !a->done) || a->tee;
  if (a->phase == CUBE__AUTO_REPLAY) {
    cube__auto_interrupt(a, &note, "an allocation ran out of memory");
  } else if (a->tee) {
    cube__auto_tee_drop(a); /* the step is not learned: it keeps no buffer */
    a->broken = true;
  }
  pthread_mutex_unlock(&a->lock);
  cube__auto_log(a, &note);
  return kept;
}
