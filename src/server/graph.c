/* Graphs (cube/graph.h): the capture state of a stream, the recorded nodes,
 * and the replay task that runs them on the runner. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "cube/graph.h"
#include "server/server.h"
#include "server/tasks_internal.h"

enum { CUBE__NODE_LAUNCH = 0, CUBE__NODE_WRITE = 1 };

/* A buffer view the graph uses; slots are numbered in order of first use. */
typedef struct cube__graph_slot {
  cube__memory_t* mem; /* a binding reference held by the graph */
  uint64_t offset;     /* the view's start in the buffer */
  uint64_t len;        /* the view's size */
} cube__graph_slot_t;

typedef struct cube__graph_node {
  uint32_t kind;
  uint32_t slot;                /* write: the slot written */
  cube__launch_task_t* launch;  /* launch: the record as the queue would run it */
  uint32_t* arg_slots;          /* launch: the slot of each argument, UINT32_MAX for scalars */
  cube__write_task_t write;     /* write: bytes owned; mem's reference is the slot's */
} cube__graph_node_t;

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
};

static void cube__graph_free(cube_graph_t* g) {
  for (size_t i = 0; i < g->node_count; ++i) {
    cube__graph_node_t* n = &g->nodes[i];
    if (n->kind == CUBE__NODE_LAUNCH) {
      cube__launch_task_drop(n->launch);
      free(n->launch);
      free(n->arg_slots);
    } else {
      cube_bytes_release(n->write.bytes);
    }
  }
  for (size_t i = 0; i < g->slot_count; ++i) cube__memory_unref(g->slots[i].mem);
  cube_status_free(g->failure);
  pthread_mutex_destroy(&g->lock);
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

/* Replay ------------------------------------------------------------------- */

typedef struct cube__replay_task {
  cube__stream_t* stream;
  cube_graph_t* graph;     /* a reference */
  cube__graph_sub_t* subs; /* slot_count entries (mem NULL: as captured), references held */
} cube__replay_task_t;

static cube_status_t cube__replay_node(cube__server_t* s, cube__stream_t* st,
                                       const cube__graph_sub_t* subs, cube__graph_node_t* n,
                                       unsigned char* scratch) {
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
    return cube__launch_exec(s, st, t, false);
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

static cube_status_t cube__replay_task_run(void* state, void* payload) {
  (void)state;
  cube__replay_task_t* r = payload;
  cube__stream_t* st = r->stream;
  cube__server_t* s = st->server;
  cube_graph_t* g = r->graph;
  _Alignas(64) unsigned char scratch[sizeof(cube__launch_task_t) +
                                     CUBE_MAX_KERNEL_ARGS *
                                         (sizeof(cube__launch_arg_t) + sizeof(cube__memory_t*))];
  /* Profiled, a replay is one row of the summary ("graph (N nodes)"), timed
   * on the host from its first node to the end of a sync after its last, so
   * that the device's work is in it; its nodes have no rows of their own. */
  cube_profile_level_t level = s->profiler.level;
  uint64_t t0 = level >= CUBE_PROFILE_BASIC ? cube__now_ns() : 0;
  for (size_t i = 0; i < g->node_count; ++i) {
    cube_status_t status = cube__replay_node(s, st, r->subs, &g->nodes[i], scratch);
    if (status && g->automatic)
      cube__stream_push_error(st, status);
    else if (status)
      cube__stream_push_error(st, cube__status_annotate(status, "replay of a graph of %zu nodes: "
                                                                "node %zu",
                                                        g->node_count, i));
  }
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
  cube__graph_unref(r->graph);
}

cube_status_t cube__server_replay(cube__stream_t* st, cube_graph_t* g, cube__graph_sub_t* subs) {
  cube__graph_ref(g);
  cube__replay_task_t r = {st, g, subs};
  return cube__submit(st->server->service, st->id, cube__replay_task_run, &r, sizeof(r),
                      cube__replay_task_drop);
}
