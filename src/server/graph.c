/* Graphs (cube/graph.h): the capture state of a stream, the recorded nodes
 * (launches, writes, and task nodes: work of a layer above that the server
 * runs without knowing it, the collectives' parts), and the replay task that
 * runs them on the runner. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/options.h"
#include "base/status.h"
#include "cube/graph.h"
#include "kernel/kernel.h"
#include "server/server.h"
#include "server/tasks_internal.h"

enum { CUBE__NODE_LAUNCH = 0, CUBE__NODE_WRITE = 1, CUBE__NODE_COPY = 2 };

/* A buffer view the graph uses; slots are numbered in order of first use. */
typedef struct cube__graph_slot {
  cube__memory_t* mem; /* a binding reference held by the graph */
  uint64_t offset;     /* the view's start in the buffer */
  uint64_t len;        /* the view's size */
} cube__graph_slot_t;

/* The kind of a task node, apart from the kinds above. */
enum { CUBE__NODE_TASK = 3 };

/* A task of a layer above the server (cube__graph_record_task): run as the
 * queue would run it, on a copy of |payload| with the replay's stream and
 * slots. */
typedef struct cube__graph_task {
  cube__task_fn fn;
  cube__payload_drop_fn drop;   /* run on |payload| when the graph is freed */
  const char* what;             /* names the node in messages */
  size_t size;
  size_t stream_at;             /* SIZE_MAX: no stream in the payload */
  uint32_t view_count;
  cube__graph_task_view_t* views;
  uint32_t* view_slots;         /* the slot of each view, UINT32_MAX where its memory is NULL */
  unsigned char* payload;       /* |size| bytes, 64-byte aligned; owns its references */
} cube__graph_task_t;

typedef struct cube__graph_node {
  uint32_t kind;
  uint32_t slot;                /* write, copy: the slot written */
  uint32_t src_slot;            /* copy: the slot read */
  cube__launch_task_t* launch;  /* launch: the record as the queue would run it */
  uint32_t* arg_slots;          /* launch: the slot of each argument, UINT32_MAX for scalars */
  cube__write_task_t write;     /* write: bytes owned; mem's reference is the slot's */
  cube__copy_task_t copy;       /* copy: both references are the slots' */
  cube__graph_task_t* task;     /* task: owned */
} cube__graph_node_t;

/* Where a slot's view is in device storage, as a native graph's nodes use it. */
typedef struct cube__graph_bound {
  const cube__storage_t* storage; /* NULL: not known (every node using it is updated) */
  uint64_t offset;                /* the view's start in |storage| */
} cube__graph_bound_t;

enum { CUBE__NATIVE_UNTRIED = 0, CUBE__NATIVE_BUILT = 1, CUBE__NATIVE_NO = 2 };

struct cube_graph_s {
  atomic_uint refs;
  cube__server_t* server;
  pthread_mutex_t lock; /* recording (several threads may share a pinned stream) */
  cube_status_t failure; /* the first failure while recording */
  bool automatic;        /* made by automatic capture (graph_auto.c): node failures are
                            deferred as the eager launch's would be, unannotated */
  cube__graph_node_t* nodes;
  size_t node_count, node_cap;
  cube__graph_slot_t* slots;
  size_t slot_count, slot_cap;
  size_t copy_count; /* copy nodes: the replay call checks them against its substitutes */
  /* Native execution (a backend with graph slots), built by the first
   * replay; native_lock orders the updates and launches of replays from
   * several streams (the exec's parameters are one set). */
  pthread_mutex_t native_lock;
  int native_state;             /* CUBE__NATIVE_* */
  void* native;                 /* the backend's graph */
  cube__graph_bound_t* bound;   /* slot_count: what the native nodes use now */
  cube__graph_bound_t* want;    /* slot_count: what this replay needs (scratch) */
  cube__memory_t** want_mems;   /* slot_count: the memory of each (scratch) */
  bool* scalar_dirty;           /* node_count: its scalars were substituted last */
  size_t dirty_count;           /* true entries of scalar_dirty */
  atomic_bool ran_native;
};

static void cube__graph_task_free(cube__graph_task_t* t) {
  if (!t) return;
  if (t->payload && t->drop) t->drop(t->payload);
  cube__aligned_free(t->payload);
  free(t->views);
  free(t->view_slots);
  free(t);
}

static void cube__graph_free(cube_graph_t* g) {
  for (size_t i = 0; i < g->node_count; ++i) {
    cube__graph_node_t* n = &g->nodes[i];
    if (n->kind == CUBE__NODE_LAUNCH) {
      cube__launch_task_drop(n->launch);
      free(n->launch);
      free(n->arg_slots);
    } else if (n->kind == CUBE__NODE_TASK) {
      cube__graph_task_free(n->task);
    } else if (n->kind == CUBE__NODE_WRITE) {
      cube_bytes_release(n->write.bytes);
    }
  }
  if (g->native) cube__backend_graph_destroy(&g->server->be, g->native);
  for (size_t i = 0; i < g->slot_count; ++i) cube__memory_unref(g->slots[i].mem);
  cube_status_free(g->failure);
  pthread_mutex_destroy(&g->lock);
  pthread_mutex_destroy(&g->native_lock);
  free(g->bound);
  free(g->want);
  free(g->want_mems);
  free(g->scalar_dirty);
  free(g->nodes);
  free(g->slots);
  free(g);
}

void cube__graph_unref(cube_graph_t* g) {
  if (g && atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1) cube__graph_free(g);
}

void cube__graph_ref(cube_graph_t* g) { atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed); }

cube__server_t* cube__graph_server(const cube_graph_t* g) { return g->server; }
size_t cube__graph_node_count(const cube_graph_t* g) { return g->node_count; }
size_t cube__graph_slot_count(const cube_graph_t* g) { return g->slot_count; }
uint64_t cube__graph_slot_len(const cube_graph_t* g, uint32_t slot) { return g->slots[slot].len; }
cube__memory_t* cube__graph_slot_mem(const cube_graph_t* g, uint32_t slot) {
  return g->slots[slot].mem;
}
void cube__graph_set_automatic(cube_graph_t* g) { g->automatic = true; }

void cube__graph_forget_buffers(cube_graph_t* g) {
  pthread_mutex_lock(&g->lock);
  for (size_t i = 0; i < g->node_count; ++i) {
    cube__graph_node_t* n = &g->nodes[i];
    if (n->kind == CUBE__NODE_LAUNCH) {
      cube__memory_t** mems = cube__launch_mems(n->launch);
      for (uint32_t k = 0; k < n->launch->arg_count; ++k) {
        cube__memory_unref(mems[k]);
        mems[k] = NULL;
      }
    } else {
      n->write.mem = NULL; /* its reference is the slot's */
    }
  }
  for (size_t i = 0; i < g->slot_count; ++i) {
    cube__memory_unref(g->slots[i].mem);
    g->slots[i].mem = NULL;
  }
  pthread_mutex_unlock(&g->lock);
}

bool cube__graph_slot_find(const cube_graph_t* g, const cube__memory_t* mem, uint64_t offset,
                           uint64_t len, uint32_t* out_slot) {
  for (size_t i = 0; i < g->slot_count; ++i) {
    const cube__graph_slot_t* s = &g->slots[i];
    if (s->mem == mem && s->offset == offset && s->len == len) {
      *out_slot = (uint32_t)i;
      return true;
    }
  }
  return false;
}

/* The slot of a view, added on first use (the graph takes a binding
 * reference). Graph lock held. */
static cube_status_t cube__graph_slot_add(cube_graph_t* g, cube__memory_t* mem, uint64_t offset,
                                          uint64_t len, uint32_t* out_slot) {
  if (cube__graph_slot_find(g, mem, offset, len, out_slot)) return CUBE_OK;
  void* grown = cube__array_grow(g->slots, &g->slot_cap, g->slot_count + 1, sizeof(*g->slots));
  if (!grown) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "graph: no host memory for a slot");
  g->slots = grown;
  cube__memory_ref(mem);
  g->slots[g->slot_count] = (cube__graph_slot_t){mem, offset, len};
  *out_slot = (uint32_t)g->slot_count++;
  return CUBE_OK;
}

static cube__graph_node_t* cube__graph_node_add(cube_graph_t* g) {
  void* grown = cube__array_grow(g->nodes, &g->node_cap, g->node_count + 1, sizeof(*g->nodes));
  if (!grown) return NULL;
  g->nodes = grown;
  cube__graph_node_t* n = &g->nodes[g->node_count];
  memset(n, 0, sizeof(*n));
  return n;
}

/* Capture ------------------------------------------------------------------ */

cube_graph_t* cube__graph_create(cube__server_t* s) {
  cube_graph_t* g = calloc(1, sizeof(*g));
  if (!g) return NULL;
  atomic_init(&g->refs, 1);
  g->server = s;
  pthread_mutex_init(&g->lock, NULL);
  pthread_mutex_init(&g->native_lock, NULL);
  atomic_init(&g->ran_native, false);
  return g;
}

cube_status_t cube__stream_capture_begin(cube__stream_t* st) {
  cube_graph_t* g = cube__graph_create(st->server);
  if (!g) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "capture: no host memory");
  cube_graph_t* none = NULL;
  if (!atomic_compare_exchange_strong_explicit(&st->capture, &none, g, memory_order_acq_rel,
                                               memory_order_acquire)) {
    cube__graph_free(g);
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "stream %" PRIu64 " of %s is capturing a graph already", st->id,
                             st->server->props.name);
  }
  return CUBE_OK;
}

cube_status_t cube__stream_capture_end(cube__stream_t* st, cube_graph_t** out_graph) {
  cube_graph_t* g = atomic_exchange_explicit(&st->capture, NULL, memory_order_acq_rel);
  if (!g)
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "stream %" PRIu64 " of %s is not capturing a graph", st->id,
                             st->server->props.name);
  pthread_mutex_lock(&g->lock);
  cube_status_t failure = g->failure;
  g->failure = NULL;
  pthread_mutex_unlock(&g->lock);
  if (failure) {
    cube__graph_unref(g);
    return cube__status_annotate(failure, "the capture recorded a failure");
  }
  *out_graph = g;
  return CUBE_OK;
}

cube_status_t cube__stream_capture_refusal(const cube__stream_t* st, const char* fn,
                                           const char* what) {
  return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "%s: stream %" PRIu64 " of %s is capturing a graph, and %s is not "
                           "captured (end the capture first, or do it before "
                           "cube_client_capture_begin)",
                           fn, st->id, st->server->props.name, what);
}

/* Records into the stream's graph; a failure is also kept for capture_end. */
static cube_status_t cube__graph_fail(cube_graph_t* g, cube_status_t st) {
  if (!g->failure) g->failure = cube__status_make(cube_status_code(st), "%s", cube_status_message(st));
  return st;
}

cube_status_t cube__graph_record_launch(cube__stream_t* st, cube_kernel_t* kernel,
                                        const uint32_t count[3], cube__memory_t* dyn_mem,
                                        uint64_t dyn_offset, cube_execution_mode_t mode,
                                        uint32_t arg_count, const cube__task_arg_t* args) {
  cube_graph_t* g = atomic_load_explicit(&st->capture, memory_order_acquire);
  if (!g) return cube__server_launch(st, kernel, count, dyn_mem, dyn_offset, mode, arg_count, args);
  return cube__graph_add_launch(g, st, kernel, count, dyn_mem, dyn_offset, mode, arg_count, args);
}

cube_status_t cube__graph_add_launch(cube_graph_t* g, cube__stream_t* st, cube_kernel_t* kernel,
                                     const uint32_t count[3], cube__memory_t* dyn_mem,
                                     uint64_t dyn_offset, cube_execution_mode_t mode,
                                     uint32_t arg_count, const cube__task_arg_t* args) {
  pthread_mutex_lock(&g->lock);
  cube_status_t status = CUBE_OK;
  cube__graph_node_t* n = cube__graph_node_add(g);
  cube__launch_task_t* t = n ? malloc(cube__launch_task_size(arg_count)) : NULL;
  uint32_t* slots = t && arg_count ? malloc(arg_count * sizeof(uint32_t)) : NULL;
  if (!n || !t || (arg_count && !slots)) {
    free(t);
    free(slots);
    t = NULL;
    slots = NULL;
    status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "capture: no host memory for a launch");
  }
  for (uint32_t i = 0; !status && i < arg_count; ++i) {
    slots[i] = UINT32_MAX;
    if (args[i].mem)
      status = cube__graph_slot_add(g, args[i].mem, args[i].value.buffer.offset,
                                    args[i].value.buffer.len, &slots[i]);
  }
  if (status) {
    free(t);
    free(slots);
    cube__graph_fail(g, status);
    pthread_mutex_unlock(&g->lock);
    return status;
  }
  cube__launch_fill_t f = {st, kernel, count, dyn_mem, dyn_offset, mode, arg_count, args};
  cube__launch_fill(t, &f);
  n->kind = CUBE__NODE_LAUNCH;
  n->launch = t;
  n->arg_slots = slots;
  g->node_count++;
  pthread_mutex_unlock(&g->lock);
  return CUBE_OK;
}

cube_status_t cube__graph_record_write(cube__stream_t* st, cube__memory_t* mem, uint64_t view_offset,
                                       uint64_t view_len, uint64_t pitch, const void* src,
                                       uint64_t width, uint64_t height) {
  cube_graph_t* g = atomic_load_explicit(&st->capture, memory_order_acquire);
  if (!g) return cube__server_write_ordered(st, mem, view_offset, pitch, src, width, height);
  cube_bytes_t* bytes = NULL;
  CUBE_RETURN_IF_ERROR(cube_bytes_from_copy(src, (size_t)(width * height), &bytes));
  pthread_mutex_lock(&g->lock);
  uint32_t slot = 0;
  cube_status_t status = cube__graph_slot_add(g, mem, view_offset, view_len, &slot);
  cube__graph_node_t* n = status ? NULL : cube__graph_node_add(g);
  if (!status && !n)
    status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "capture: no host memory for a write");
  if (status) {
    cube_bytes_release(bytes);
    cube__graph_fail(g, status);
    pthread_mutex_unlock(&g->lock);
    return status;
  }
  n->kind = CUBE__NODE_WRITE;
  n->slot = slot;
  n->write = (cube__write_task_t){NULL, mem, view_offset, pitch, width, height, bytes};
  g->node_count++;
  pthread_mutex_unlock(&g->lock);
  return CUBE_OK;
}

cube_status_t cube__graph_record_copy(cube__stream_t* st, cube__memory_t* src,
                                      uint64_t src_offset, cube__memory_t* dst,
                                      uint64_t dst_offset, uint64_t bytes) {
  cube_graph_t* g = atomic_load_explicit(&st->capture, memory_order_acquire);
  if (!g) return cube__server_copy(st, src, src_offset, dst, dst_offset, bytes);
  pthread_mutex_lock(&g->lock);
  uint32_t from = 0, to = 0;
  cube_status_t status = cube__graph_slot_add(g, src, src_offset, bytes, &from);
  if (!status) status = cube__graph_slot_add(g, dst, dst_offset, bytes, &to);
  cube__graph_node_t* n = status ? NULL : cube__graph_node_add(g);
  if (!status && !n)
    status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "capture: no host memory for a copy");
  if (status) {
    cube__graph_fail(g, status);
    pthread_mutex_unlock(&g->lock);
    return status;
  }
  n->kind = CUBE__NODE_COPY;
  n->slot = to;
  n->src_slot = from;
  n->copy = (cube__copy_task_t){NULL, src, src_offset, dst, dst_offset, bytes};
  g->node_count++;
  g->copy_count++;
  pthread_mutex_unlock(&g->lock);
  return CUBE_OK;
}

cube_status_t cube__graph_record_task(cube__stream_t* st, cube__task_fn fn, const void* payload,
                                      size_t size, cube__payload_drop_fn drop, size_t stream_at,
                                      uint32_t view_count, const cube__graph_task_view_t* views,
                                      const char* what) {
  cube_graph_t* g = atomic_load_explicit(&st->capture, memory_order_acquire);
  if (!g) return cube__submit(st->server->service, st->id, fn, payload, size, drop);
  cube__graph_task_t* t = calloc(1, sizeof(*t));
  if (t) {
    t->payload = cube__aligned_alloc(size ? size : 1, 64);
    if (view_count) {
      t->views = malloc(view_count * sizeof(*t->views));
      t->view_slots = malloc(view_count * sizeof(*t->view_slots));
    }
  }
  cube_status_t status = CUBE_OK;
  if (!t || !t->payload || (view_count && (!t->views || !t->view_slots)))
    status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "capture: no host memory for %s", what);
  pthread_mutex_lock(&g->lock);
  for (uint32_t i = 0; !status && i < view_count; ++i) {
    cube__memory_t* mem;
    uint64_t offset;
    memcpy(&mem, (const unsigned char*)payload + views[i].mem_at, sizeof(mem));
    memcpy(&offset, (const unsigned char*)payload + views[i].offset_at, sizeof(offset));
    t->views[i] = views[i];
    t->view_slots[i] = UINT32_MAX;
    if (mem) status = cube__graph_slot_add(g, mem, offset, views[i].len, &t->view_slots[i]);
  }
  cube__graph_node_t* n = status ? NULL : cube__graph_node_add(g);
  if (!status && !n)
    status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "capture: no host memory for %s", what);
  if (status) {
    cube__graph_fail(g, status);
    pthread_mutex_unlock(&g->lock);
    if (t) {
      cube__aligned_free(t->payload);
      t->payload = NULL;
    }
    cube__graph_task_free(t);
    if (drop) drop((void*)payload); /* as a refused submit */
    return status;
  }
  memcpy(t->payload, payload, size);
  t->fn = fn;
  t->drop = drop;
  t->what = what;
  t->size = size;
  t->stream_at = stream_at;
  t->view_count = view_count;
  n->kind = CUBE__NODE_TASK;
  n->task = t;
  g->node_count++;
  pthread_mutex_unlock(&g->lock);
  return CUBE_OK;
}

/* Replay ------------------------------------------------------------------- */

bool cube__graph_is_native(const cube_graph_t* g) {
  return atomic_load_explicit(&g->ran_native, memory_order_acquire);
}

cube_status_t cube__graph_scalar_kind(const cube_graph_t* g, uint32_t node, uint32_t arg,
                                      cube_arg_kind_t* out_kind) {
  if (node >= g->node_count)
    return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                             "node %u: the graph has %zu nodes", node, g->node_count);
  const cube__graph_node_t* n = &g->nodes[node];
  if (n->kind == CUBE__NODE_TASK)
    return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                             "node %u is %s, not a launch: it has no scalars", node, n->task->what);
  if (n->kind != CUBE__NODE_LAUNCH)
    return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                             "node %u is a %s, not a launch: it has no scalars", node,
                             n->kind == CUBE__NODE_WRITE ? "write" : "copy");
  const cube_kernel_t* k = n->launch->kernel;
  if (arg >= n->launch->arg_count)
    return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                             "node %u (kernel '%s') has %u arguments, not an argument %u", node,
                             k->name, n->launch->arg_count, arg);
  if (k->arg_kinds[arg] == CUBE_ARG_BUFFER)
    return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                             "node %u (kernel '%s'): argument %u is a buffer (substitute its "
                             "slot instead)",
                             node, k->name, arg);
  *out_kind = k->arg_kinds[arg];
  return CUBE_OK;
}

typedef struct cube__replay_task {
  cube__stream_t* stream;
  cube_graph_t* graph;              /* a reference */
  cube__graph_sub_t* subs;          /* slot_count entries (mem NULL: as captured), references held */
  cube__graph_scalar_sub_t* scalars; /* sorted by node; owned */
  size_t scalar_count;
} cube__replay_task_t;

/* The slot |k| of a replay: its memory and its view's start in it. */
static inline cube__memory_t* cube__replay_slot(const cube_graph_t* g,
                                                const cube__graph_sub_t* subs, size_t k,
                                                uint64_t* out_view) {
  if (subs && subs[k].mem) {
    *out_view = subs[k].offset;
    return subs[k].mem;
  }
  *out_view = g->slots[k].offset;
  return g->slots[k].mem;
}

cube_status_t cube__graph_check_copies(const cube_graph_t* g, const cube__graph_sub_t* subs) {
  if (!subs || !g->copy_count) return CUBE_OK;
  for (size_t i = 0; i < g->node_count; ++i) {
    const cube__graph_node_t* n = &g->nodes[i];
    if (n->kind != CUBE__NODE_COPY) continue;
    uint64_t from, to;
    const cube__memory_t* src = cube__replay_slot(g, subs, n->src_slot, &from);
    const cube__memory_t* dst = cube__replay_slot(g, subs, n->slot, &to);
    if (src != dst || from == to) continue;
    uint64_t gap = from < to ? to - from : from - to;
    if (gap < n->copy.bytes)
      return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                               "node %zu copies %" PRIu64 " bytes from slot %u to slot %u, and "
                               "with these bindings the two views overlap (bytes %" PRIu64
                               " and %" PRIu64 " of memory %" PRIu64 ")",
                               i, n->copy.bytes, n->src_slot, n->slot, from, to, src->id);
  }
  return CUBE_OK;
}

/* True when a copy node's source and destination are the same view in this
 * replay (g->want): that copy does nothing. native_lock held. */
static bool cube__graph_copy_onto_itself(const cube_graph_t* g) {
  for (size_t i = 0; g->copy_count && i < g->node_count; ++i) {
    const cube__graph_node_t* n = &g->nodes[i];
    if (n->kind == CUBE__NODE_COPY && g->want[n->slot].storage == g->want[n->src_slot].storage &&
        g->want[n->slot].offset == g->want[n->src_slot].offset)
      return true;
  }
  return false;
}

/* Node by node ----------------------------------------------------------- */

/* A task node: its function on a copy of the payload with the replay's
 * stream and slots, each view with a binding reference of its own, then its
 * drop, as the queue runs a submitted task. */
static cube_status_t cube__replay_task(cube__server_t* s, cube__stream_t* st,
                                       const cube__graph_sub_t* subs,
                                       const cube__graph_task_t* t) {
  _Alignas(64) unsigned char local[CUBE__TASK_INLINE_BYTES];
  unsigned char* p = t->size <= sizeof(local) ? local : cube__aligned_alloc(t->size, 64);
  if (!p)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory for the task",
                             t->what);
  memcpy(p, t->payload, t->size);
  if (t->stream_at != SIZE_MAX) memcpy(p + t->stream_at, &st, sizeof(st));
  for (uint32_t i = 0; i < t->view_count; ++i) {
    uint32_t k = t->view_slots[i];
    if (k == UINT32_MAX) continue;
    const cube__graph_task_view_t* v = &t->views[i];
    if (subs && subs[k].mem) {
      memcpy(p + v->mem_at, &subs[k].mem, sizeof(subs[k].mem));
      memcpy(p + v->offset_at, &subs[k].offset, sizeof(subs[k].offset));
    }
    cube__memory_t* mem;
    memcpy(&mem, p + v->mem_at, sizeof(mem));
    cube__memory_ref(mem);
  }
  cube_status_t status = t->fn(s, p);
  if (t->drop) t->drop(p);
  if (p != local) cube__aligned_free(p);
  return status ? cube__status_annotate(status, "%s", t->what) : CUBE_OK;
}

static cube_status_t cube__replay_node(cube__server_t* s, cube__stream_t* st,
                                       const cube__graph_sub_t* subs,
                                       const cube__graph_scalar_sub_t* sc, size_t sc_count,
                                       cube__graph_node_t* n, unsigned char* scratch) {
  if (n->kind == CUBE__NODE_TASK) return cube__replay_task(s, st, subs, n->task);
  if (n->kind == CUBE__NODE_LAUNCH) {
    cube__launch_task_t* t = (cube__launch_task_t*)(void*)scratch;
    memcpy(t, n->launch, cube__launch_task_size(n->launch->arg_count));
    t->stream = st;
    if (subs) {
      cube__memory_t** mems = cube__launch_mems(t);
      for (uint32_t i = 0; i < t->arg_count; ++i) {
        uint32_t k = n->arg_slots[i];
        if (k == UINT32_MAX || !subs[k].mem) continue;
        mems[i] = subs[k].mem;
        t->args[i].buffer.offset = subs[k].offset;
      }
    }
    for (size_t i = 0; i < sc_count; ++i) t->args[sc[i].arg] = sc[i].value;
    return cube__launch_exec(s, st, t, false);
  }
  if (n->kind == CUBE__NODE_COPY) {
    cube__memory_t* src = n->copy.src;
    uint64_t src_offset = n->copy.src_offset;
    cube__memory_t* dst = n->copy.dst;
    uint64_t dst_offset = n->copy.dst_offset;
    if (subs && subs[n->src_slot].mem) {
      src = subs[n->src_slot].mem;
      src_offset = subs[n->src_slot].offset;
    }
    if (subs && subs[n->slot].mem) {
      dst = subs[n->slot].mem;
      dst_offset = subs[n->slot].offset;
    }
    return cube__copy_exec(st, src, src_offset, dst, dst_offset, n->copy.bytes);
  }
  cube__memory_t* mem = n->write.mem;
  uint64_t offset = n->write.offset;
  if (subs && subs[n->slot].mem) {
    mem = subs[n->slot].mem;
    offset = subs[n->slot].offset;
  }
  bool events = cube__backend_has_events(&s->be);
  if (events) {
    cube__stream_release_holds(st, false);
    CUBE_RETURN_IF_ERROR(cube__stream_order(st, mem));
  }
  CUBE_RETURN_IF_ERROR(cube__write_exec(st, mem, offset, n->write.pitch,
                                        cube_bytes_const_data(n->write.bytes), n->write.width,
                                        n->write.height));
  if (events) cube__stream_hold(st, &mem, 1);
  return CUBE_OK;
}

/* Node |i| of a replay of |g| on |st| failed: its error is deferred to the
 * stream, as its own launch's would be in an automatic graph (a replayed
 * step must fail as its eager launches did), else naming the node. */
static void cube__replay_node_error(cube__stream_t* st, const cube_graph_t* g, size_t i,
                                    cube_status_t status) {
  if (g->automatic)
    cube__stream_push_error(st, status);
  else
    cube__stream_push_error(st, cube__status_annotate(status, "replay of a graph of %zu nodes: "
                                                              "node %zu",
                                                      g->node_count, i));
}

typedef struct cube__replay_failed_ctx {
  cube__stream_t* stream;
  const cube_graph_t* graph;
} cube__replay_failed_ctx_t;

static void cube__replay_node_failed(void* user, size_t node, cube_status_t status) {
  const cube__replay_failed_ctx_t* f = user;
  cube__replay_node_error(f->stream, f->graph, node, status);
}

static void cube__replay_list(cube__server_t* s, cube__stream_t* st, const cube__replay_task_t* r) {
  cube_graph_t* g = r->graph;
  _Alignas(64) unsigned char scratch[sizeof(cube__launch_task_t) +
                                     CUBE_MAX_KERNEL_ARGS *
                                         (sizeof(cube__launch_arg_t) + sizeof(cube__memory_t*))];
  size_t next = 0; /* the scalars are sorted by node */
  for (size_t i = 0; i < g->node_count; ++i) {
    size_t first = next;
    while (next < r->scalar_count && r->scalars[next].node == i) ++next;
    cube_status_t status = cube__replay_node(s, st, r->subs, r->scalars + first, next - first,
                                             &g->nodes[i], scratch);
    if (status) cube__replay_node_error(st, g, i, status);
  }
}

/* Native ------------------------------------------------------------------ */

/* Whether the nodes can be one native graph: static counts, no Validate mode,
 * no task of a layer above (a collective: the driver's graph cannot hold it). */
static bool cube__graph_native_fits(const cube_graph_t* g) {
  for (size_t i = 0; i < g->node_count; ++i) {
    const cube__graph_node_t* n = &g->nodes[i];
    if (n->kind == CUBE__NODE_TASK) return false;
    if (n->kind == CUBE__NODE_LAUNCH &&
        (n->launch->dyn_mem || n->launch->mode == CUBE_EXEC_VALIDATE))
      return false;
  }
  return true;
}

/* Node |i|'s description with the slots at g->want and the scalars |sc|;
 * |args| holds its arguments (CUBE_MAX_KERNEL_ARGS). native_lock held. */
static void cube__graph_node_desc(const cube_graph_t* g, size_t i,
                                  const cube__graph_scalar_sub_t* sc, size_t sc_count,
                                  cube__launch_arg_t* args, cube__graph_node_desc_t* d) {
  const cube__graph_node_t* n = &g->nodes[i];
  memset(d, 0, sizeof(*d));
  if (n->kind == CUBE__NODE_COPY) {
    d->kind = CUBE__GRAPH_NODE_COPY;
    d->dst = g->want[n->slot].storage;
    d->dst_offset = g->want[n->slot].offset;
    d->src_storage = g->want[n->src_slot].storage;
    d->src_offset = g->want[n->src_slot].offset;
    d->width = n->copy.bytes;
    d->pitch = n->copy.bytes;
    d->height = 1;
    return;
  }
  if (n->kind == CUBE__NODE_WRITE) {
    d->kind = CUBE__GRAPH_NODE_WRITE;
    d->dst = g->want[n->slot].storage;
    d->dst_offset = g->want[n->slot].offset;
    d->pitch = n->write.pitch;
    d->width = n->write.width;
    d->height = n->write.height;
    d->src = cube_bytes_const_data(n->write.bytes);
    return;
  }
  const cube__launch_task_t* t = n->launch;
  const cube_kernel_t* k = t->kernel;
  memcpy(args, t->args, t->arg_count * sizeof(*args));
  for (uint32_t a = 0; a < t->arg_count; ++a) {
    uint32_t slot = n->arg_slots[a];
    if (slot == UINT32_MAX) continue;
    args[a].buffer.storage = g->want[slot].storage;
    args[a].buffer.offset = g->want[slot].offset;
  }
  for (size_t j = 0; j < sc_count; ++j) args[sc[j].arg] = sc[j].value;
  d->kind = CUBE__GRAPH_NODE_KERNEL;
  d->launch = (cube__launch_t){k,           k->name,       {t->count[0], t->count[1], t->count[2]},
                               k->cube_dim, t->mode,       t->arg_count,
                               k->arg_kinds, args,         NULL};
}

/* Builds the native graph with the slots at g->want. native_lock held. */
static cube_status_t cube__graph_native_build(cube__server_t* s, cube_graph_t* g,
                                              const cube__replay_task_t* r) {
  size_t n = g->node_count;
  cube__graph_node_desc_t* descs = calloc(n ? n : 1, sizeof(*descs));
  cube__launch_arg_t* args = calloc(n ? n * CUBE_MAX_KERNEL_ARGS : 1, sizeof(*args));
  if (!g->bound) g->bound = calloc(g->slot_count ? g->slot_count : 1, sizeof(*g->bound));
  if (!g->scalar_dirty) g->scalar_dirty = calloc(n ? n : 1, sizeof(*g->scalar_dirty));
  if (g->scalar_dirty) memset(g->scalar_dirty, 0, (n ? n : 1) * sizeof(*g->scalar_dirty));
  g->dirty_count = 0;
  cube_status_t st = CUBE_OK;
  if (!descs || !args || !g->bound || !g->scalar_dirty)
    st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "native graph: no host memory");
  size_t next = 0;
  for (size_t i = 0; !st && i < n; ++i) {
    size_t first = next;
    while (next < r->scalar_count && r->scalars[next].node == i) ++next;
    cube__graph_node_desc(g, i, r->scalars + first, next - first, args + i * CUBE_MAX_KERNEL_ARGS,
                          &descs[i]);
    if (next > first) {
      g->scalar_dirty[i] = true;
      g->dirty_count++;
    }
  }
  if (!st) st = cube__backend_graph_create(&s->be, descs, n, &g->native);
  if (!st) memcpy(g->bound, g->want, g->slot_count * sizeof(*g->bound));
  free(descs);
  free(args);
  return st;
}

/* One replay through the native graph; false when the graph is not native
 * (then nothing ran and nothing was ordered). */
static bool cube__replay_native(cube__server_t* s, cube__stream_t* st,
                                const cube__replay_task_t* r) {
  cube_graph_t* g = r->graph;
  pthread_mutex_lock(&g->native_lock);
  if (g->native_state == CUBE__NATIVE_NO) {
    pthread_mutex_unlock(&g->native_lock);
    return false;
  }
  cube_status_t status = CUBE_OK;
  if (!g->want) {
    g->want = calloc(g->slot_count ? g->slot_count : 1, sizeof(*g->want));
    g->want_mems = calloc(g->slot_count ? g->slot_count : 1, sizeof(*g->want_mems));
    if (!g->want || !g->want_mems) {
      free(g->want);
      free(g->want_mems);
      g->want = NULL;
      g->want_mems = NULL;
      pthread_mutex_unlock(&g->native_lock);
      return false; /* node by node needs no scratch */
    }
  }
  /* Where each slot is for this replay. */
  for (size_t k = 0; !status && k < g->slot_count; ++k) {
    uint64_t view;
    cube__memory_t* m = cube__replay_slot(g, r->subs, k, &view);
    const cube__storage_t* storage;
    uint64_t off, sz;
    if (!cube__memory_resolve(m, &storage, &off, &sz))
      status = cube__status_make(CUBE_STATUS_NOT_FOUND,
                                 "replay of a graph of %zu nodes: slot %zu: memory %" PRIu64
                                 " is not bound",
                                 g->node_count, k, m->id);
    g->want[k] = (cube__graph_bound_t){storage, off + view};
    g->want_mems[k] = m;
  }
  if (!status && cube__graph_copy_onto_itself(g)) {
    /* A substitute made a copy's source its destination: a copy that does
     * nothing, which a memcpy node cannot be. This replay runs node by node. */
    pthread_mutex_unlock(&g->native_lock);
    return false;
  }
  if (!status && g->native_state == CUBE__NATIVE_UNTRIED) {
    cube_status_t b = CUBE_OK;
    if (!cube__option_bool(CUBE__OPT_GRAPHS_NATIVE) || !cube__graph_native_fits(g))
      b = cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "not native");
    else
      b = cube__graph_native_build(s, g, r);
    if (b) {
      /* Node by node from now on: always correct, and the reason is the
       * driver's (a node it cannot record) or the graph's own. */
      cube_status_free(b);
      g->native_state = CUBE__NATIVE_NO;
      pthread_mutex_unlock(&g->native_lock);
      return false;
    }
    g->native_state = CUBE__NATIVE_BUILT;
  } else if (!status) {
    /* Update the nodes whose slots or scalars differ from what the exec has. */
    bool changed = r->scalar_count > 0 || g->dirty_count > 0;
    for (size_t k = 0; !changed && k < g->slot_count; ++k)
      changed = g->want[k].storage != g->bound[k].storage ||
                g->want[k].offset != g->bound[k].offset;
    size_t next = 0;
    for (size_t i = 0; changed && !status && i < g->node_count; ++i) {
      const cube__graph_node_t* n = &g->nodes[i];
      size_t first = next;
      while (next < r->scalar_count && r->scalars[next].node == i) ++next;
      bool upd = next > first || g->scalar_dirty[i];
      if (n->kind == CUBE__NODE_WRITE || n->kind == CUBE__NODE_COPY) {
        upd = upd || g->want[n->slot].storage != g->bound[n->slot].storage ||
              g->want[n->slot].offset != g->bound[n->slot].offset;
        if (n->kind == CUBE__NODE_COPY)
          upd = upd || g->want[n->src_slot].storage != g->bound[n->src_slot].storage ||
                g->want[n->src_slot].offset != g->bound[n->src_slot].offset;
      } else {
        for (uint32_t a = 0; !upd && a < n->launch->arg_count; ++a) {
          uint32_t k = n->arg_slots[a];
          upd = k != UINT32_MAX && (g->want[k].storage != g->bound[k].storage ||
                                    g->want[k].offset != g->bound[k].offset);
        }
      }
      if (!upd) continue;
      cube__launch_arg_t args[CUBE_MAX_KERNEL_ARGS];
      cube__graph_node_desc_t d;
      cube__graph_node_desc(g, i, r->scalars + first, next - first, args, &d);
      status = cube__backend_graph_update(&s->be, g->native, i, &d);
      bool dirty = next > first;
      if (dirty != g->scalar_dirty[i]) {
        g->scalar_dirty[i] = dirty;
        if (dirty) g->dirty_count++;
        else g->dirty_count--;
      }
    }
    if (cube_status_code(status) == CUBE_STATUS_UNIMPLEMENTED) {
      /* A node the driver cannot update in place (CUDA: a copy of rows
       * with a pitch): instantiate again, with this replay's slots. */
      cube_status_free(status);
      cube__backend_graph_destroy(&s->be, g->native);
      g->native = NULL;
      status = cube__graph_native_build(s, g, r);
      if (status) {
        cube_status_free(status);
        g->native_state = CUBE__NATIVE_NO;
        pthread_mutex_unlock(&g->native_lock);
        return false;
      }
      changed = false;
    }
    if (status) {
      /* Some nodes have the new parameters, some the old: the next replay
       * updates every node. */
      for (size_t k = 0; k < g->slot_count; ++k) g->bound[k].storage = NULL;
    } else if (changed) {
      memcpy(g->bound, g->want, g->slot_count * sizeof(*g->bound));
    }
  }
  bool events = cube__backend_has_events(&s->be);
  if (!status && events) {
    cube__stream_release_holds(st, false);
    for (size_t k = 0; !status && k < g->slot_count; ++k)
      status = cube__stream_order(st, g->want_mems[k]);
  }
  if (!status) {
    cube__replay_failed_ctx_t failed = {st, g};
    status = cube__backend_graph_launch(&s->be, st->backend_stream, g->native,
                                        cube__replay_node_failed, &failed);
    /* Held whatever the launch said: part of it may have been queued. */
    if (events) cube__stream_hold(st, g->want_mems, (uint32_t)g->slot_count);
  }
  pthread_mutex_unlock(&g->native_lock);
  if (status)
    cube__stream_push_error(st, cube__status_annotate(status, "replay of a graph of %zu nodes",
                                                      g->node_count));
  else
    atomic_store_explicit(&g->ran_native, true, memory_order_release);
  return true;
}

static cube_status_t cube__replay_task_run(void* state, void* payload) {
  (void)state;
  cube__replay_task_t* r = payload;
  cube__stream_t* st = r->stream;
  cube__server_t* s = st->server;
  cube_graph_t* g = r->graph;
  /* Profiled, a replay is one row of the summary ("graph (N nodes)"), timed
   * on the host from its first node to the end of a sync after its last, so
   * that the device's work is in it; its nodes have no rows of their own. */
  cube_profile_level_t level = s->profiler.level;
  uint64_t t0 = level >= CUBE_PROFILE_BASIC ? cube__now_ns() : 0;
  if (!cube__backend_has_graphs(&s->be) || !g->node_count || !cube__replay_native(s, st, r))
    cube__replay_list(s, st, r);
  if (level >= CUBE_PROFILE_BASIC) {
    cube__stream_push_error(st, cube__backend_sync(&s->be, st->backend_stream));
    uint64_t ns = cube__now_ns() - t0;
    char name[48];
    snprintf(name, sizeof(name), "graph (%zu nodes)", g->node_count);
    cube__profiler_record(&s->profiler, name, ns);
    if (level >= CUBE_PROFILE_MEDIUM) {
      char d[32];
      cube__profiler_log(&s->profiler, "| %s | %s", cube__format_duration(ns, d, sizeof(d)), name);
    }
  }
  return CUBE_OK;
}

static void cube__replay_task_drop(void* payload) {
  cube__replay_task_t* r = payload;
  if (r->subs) {
    for (size_t i = 0; i < r->graph->slot_count; ++i)
      if (r->subs[i].mem) cube__memory_unref(r->subs[i].mem);
    free(r->subs);
  }
  free(r->scalars);
  cube__graph_unref(r->graph);
}

static cube_status_t cube__replay_prepare(void* payload, void* arg) {
  memcpy(payload, arg, sizeof(cube__replay_task_t));
  return CUBE_OK;
}

cube_status_t cube__server_replay(cube__stream_t* st, cube_graph_t* g, cube__graph_sub_t* subs,
                                  cube__graph_scalar_sub_t* scalars, size_t scalar_count) {
  cube__graph_ref(g);
  cube__replay_task_t r = {st, g, subs, scalars, scalar_count};
  if (cube__follows_blocking(st->server->device) && cube__server_async(st->server)) {
    /* Right after a read or sync that ran on this thread (a loop of replay,
     * sync): the replay runs here when nothing is queued ahead of it, as the
     * driver's own graph launch would (cube__submit_here). */
    cube__here_task_t t = {cube__replay_task_run, &r, cube__replay_task_run, sizeof(r),
                           cube__replay_prepare,  &r, cube__replay_task_drop, 0, true};
    bool here = false;
    cube_status_t status = cube__submit_here(st->server->service, st->id, &t, &here);
    if (here || status) cube__replay_task_drop(&r);
    return status;
  }
  return cube__submit(st->server->service, st->id, cube__replay_task_run, &r, sizeof(r),
                      cube__replay_task_drop);
}
