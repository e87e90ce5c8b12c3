/* Graph replay (cube/graph.h): a recorded graph run on a stream, natively
 * through the backend's graph slots where it has them (CUDA graphs, the
 * CPU's prepared nodes), else node by node; substitutes for slots and
 * scalars; node failures deferred to the stream. docs/graphs.md describes
 * it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/options.h"
#include "base/status.h"
#include "kernel/kernel.h"
#include "server/timing.h"
#include "server/graph_internal.h"

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
                                       cube__graph_node_t* n, size_t index,
                                       unsigned char* scratch) {
  if (n->kind == CUBE__NODE_TASK) return cube__replay_task(s, st, subs, n->task);
  if (n->kind == CUBE__NODE_LAUNCH) {
    cube__launch_task_t* t = (cube__launch_task_t*)(void*)scratch;
    memcpy(t, n->launch, cube__launch_task_size(n->launch->arg_count));
    t->stream = st;
    t->graph_node = (uint32_t)index + 1;
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
    cube_status_t order = cube__stream_order(st, mem);
    if (order) {
      char what[96];
      snprintf(what, sizeof(what), "write of %" PRIu64 " bytes into memory %" PRIu64,
               n->write.width * n->write.height, mem->id);
      cube__taint_fail(st, &mem, 1, NULL, order, what);
      return order;
    }
  }
  CUBE_RETURN_IF_ERROR(cube__write_exec(st, mem, offset, n->write.pitch,
                                        cube_bytes_const_data(n->write.bytes), n->write.width,
                                        n->write.height, n->write.bytes));
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

/* Taint in native replays ---------------------------------------------------
 *
 * A native replay runs only when no slot is tainted (else it goes node by
 * node, where each node is checked as its eager work would be). A node that
 * fails inside it taints what it writes; the nodes after it already ran, so
 * afterwards each that used a tainted buffer passes the taint on ("ran on
 * invalid contents"), and a whole write or copy of a clean source clears
 * it, as the same work run eagerly would have left the buffers. */

/* The buffers node |i| of |g| may write in this replay (g->want_mems), at
 * most CUBE_MAX_KERNEL_ARGS, into |out|; returns how many. native_lock held. */
static uint32_t cube__native_node_outputs(const cube_graph_t* g, size_t i, cube__memory_t** out) {
  const cube__graph_node_t* n = &g->nodes[i];
  if (n->kind == CUBE__NODE_WRITE || n->kind == CUBE__NODE_COPY) {
    out[0] = g->want_mems[n->slot];
    return 1;
  }
  if (n->kind != CUBE__NODE_LAUNCH) return 0;
  uint32_t k = 0;
  uint64_t written = n->launch->kernel->written_args;
  for (uint32_t a = 0; a < n->launch->arg_count; ++a)
    if (n->arg_slots[a] != UINT32_MAX && (written & (UINT64_C(1) << a)))
      out[k++] = g->want_mems[n->arg_slots[a]];
  return k;
}

/* "launch of kernel 'k' (node 3 of a graph)", or the write or copy of node
 * 3, as a node of a replay node by node is named. */
static void cube__native_node_what(const cube_graph_t* g, size_t i, char* buf, size_t n) {
  const cube__graph_node_t* node = &g->nodes[i];
  if (node->kind == CUBE__NODE_LAUNCH)
    snprintf(buf, n, "launch of kernel '%s' (node %zu of a graph)", node->launch->kernel->name, i);
  else if (node->kind == CUBE__NODE_WRITE)
    snprintf(buf, n, "write of %" PRIu64 " bytes (node %zu of a graph)",
             node->write.width * node->write.height, i);
  else
    snprintf(buf, n, "copy of %" PRIu64 " bytes (node %zu of a graph)", node->copy.bytes, i);
}

static void cube__native_taint_forward(cube__stream_t* st, cube_graph_t* g,
                                       const cube__replay_task_t* r, size_t first) {
  for (size_t j = first + 1; j < g->node_count; ++j) {
    const cube__graph_node_t* n = &g->nodes[j];
    uint64_t view = 0, src_view = 0;
    if (n->kind == CUBE__NODE_WRITE) {
      cube__memory_t* m = cube__replay_slot(g, r->subs, n->slot, &view);
      cube__taint_after_write(st, m, view, n->write.pitch, n->write.width, n->write.height, NULL);
    } else if (n->kind == CUBE__NODE_COPY) {
      cube__memory_t* src = cube__replay_slot(g, r->subs, n->src_slot, &src_view);
      cube__memory_t* dst = cube__replay_slot(g, r->subs, n->slot, &view);
      if (!cube__taint_copy_skip(st, src, dst, n->copy.bytes, "ran on invalid contents"))
        cube__taint_after_copy(st, src, dst, view, n->copy.bytes, NULL);
    } else if (n->kind == CUBE__NODE_LAUNCH) {
      cube__taint_t* in = NULL;
      for (uint32_t a = 0; a < n->launch->arg_count; ++a) {
        if (n->arg_slots[a] == UINT32_MAX) continue;
        cube__taint_t* u = cube__taint_union(in, cube__memory_taint(g->want_mems[n->arg_slots[a]]));
        cube__taint_unref(in);
        in = u;
      }
      if (!in) continue;
      char where[64], what[256];
      snprintf(what, sizeof(what), "launch of kernel '%s' (node %zu of a graph) on %s "
               "(ran on invalid contents)", n->launch->kernel->name, j,
               cube__stream_where(st, where, sizeof(where)));
      cube__taint_note(in, what);
      cube__memory_t* out[CUBE_MAX_KERNEL_ARGS];
      uint32_t k = cube__native_node_outputs(g, j, out);
      for (uint32_t o = 0; o < k; ++o)
        cube__memory_set_taint(out[o], cube__taint_union(cube__memory_taint(out[o]), in));
      cube__taint_unref(in);
    }
  }
}

typedef struct cube__replay_failed_ctx {
  cube__stream_t* stream;
  const cube_graph_t* graph;
  size_t first_failed; /* SIZE_MAX: none */
} cube__replay_failed_ctx_t;

static void cube__replay_node_failed(void* user, size_t node, cube_status_t status) {
  cube__replay_failed_ctx_t* f = user;
  if (node < f->graph->node_count) {
    cube__memory_t* out[CUBE_MAX_KERNEL_ARGS];
    uint32_t k = cube__native_node_outputs(f->graph, node, out);
    char what[256];
    cube__native_node_what(f->graph, node, what, sizeof(what));
    cube__taint_fail(f->stream, out, k, NULL, status, what);
    if (node < f->first_failed) f->first_failed = node;
  }
  cube__replay_node_error(f->stream, f->graph, node, status);
}

/* The whole native replay failed: every buffer a node may write is tainted
 * by that one failure (one root, however many nodes write a buffer: a read
 * reports it once). */
static void cube__native_taint_all(cube__stream_t* st, const cube_graph_t* g,
                                   cube_status_t status) {
  char what[96];
  snprintf(what, sizeof(what), "replay of a graph of %zu nodes", g->node_count);
  cube__taint_t* root = cube__taint_root(st, status, what);
  if (!root) return; /* no host memory: nothing is known to be wrong (memory/taint.h) */
  for (size_t i = 0; i < g->node_count; ++i) {
    cube__memory_t* out[CUBE_MAX_KERNEL_ARGS];
    uint32_t k = cube__native_node_outputs(g, i, out);
    for (uint32_t o = 0; o < k; ++o)
      if (out[o]) cube__memory_set_taint(out[o], cube__taint_union(cube__memory_taint(out[o]), root));
  }
  cube__taint_unref(root);
}


/* The replay's scalar substitutes from |first| on (NULL when it has none:
 * no offset is applied to a null pointer). */
static inline const cube__graph_scalar_sub_t* cube__replay_scalars(const cube__replay_task_t* r,
                                                                   size_t first) {
  return r->scalars ? r->scalars + first : NULL;
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
    cube_status_t status = cube__replay_node(s, st, r->subs, cube__replay_scalars(r, first),
                                             next - first, &g->nodes[i], i, scratch);
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
                               k->arg_kinds, args,         NULL,         false,       0};
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
    cube__graph_node_desc(g, i, cube__replay_scalars(r, first), next - first,
                          args + i * CUBE_MAX_KERNEL_ARGS, &descs[i]);
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
  bool any_taint = cube__taint_any(), tainted = false;
  for (size_t k = 0; !status && k < g->slot_count; ++k) {
    uint64_t view;
    cube__memory_t* m = cube__replay_slot(g, r->subs, k, &view);
    if (__builtin_expect(any_taint, 0)) tainted |= cube__memory_taint(m) != NULL;
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
  if (!status && tainted) {
    /* A buffer without valid contents: node by node, each node checked as
     * its own work would be (skipped, passing the taint on). */
    pthread_mutex_unlock(&g->native_lock);
    return false;
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
      cube__graph_node_desc(g, i, cube__replay_scalars(r, first), next - first, args, &d);
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
    cube__replay_failed_ctx_t failed = {st, g, SIZE_MAX};
    status = cube__backend_graph_launch(&s->be, st->backend_stream, g->native,
                                        cube__replay_node_failed, &failed);
    /* Held whatever the launch said: part of it may have been queued. */
    if (events) cube__stream_hold(st, g->want_mems, (uint32_t)g->slot_count);
    if (status)
      cube__native_taint_all(st, g, status);
    else if (failed.first_failed != SIZE_MAX)
      cube__native_taint_forward(st, g, r, failed.first_failed);
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
  /* Profiled or traced, a replay is one record ("graph (N nodes)", a row of
   * the summary), timed where it runs (server/timing.h); its nodes have no
   * records of their own. */
  cube__timing_mark_t m;
  cube__timing_begin(st, &m);
  if (!cube__backend_has_graphs(&s->be) || !g->node_count || !cube__replay_native(s, st, r))
    cube__replay_list(s, st, r);
  if (m.on) {
    char name[48];
    snprintf(name, sizeof(name), "graph (%zu nodes)", g->node_count);
    cube__timed_desc_t d = {CUBE__TRACE_GRAPH, name, {g->node_count, 0, 0}};
    if (!m.ev0) cube__stream_push_error(st, cube__backend_sync(&s->be, st->backend_stream));
    cube__timing_end(st, &m, &d, UINT64_MAX);
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
