/* Graphs (cube/graph.h): the capture state of a stream and the recorded nodes
 * (launches, writes, copies, and task nodes: work of a layer above that the
 * server runs without knowing it, the collectives' parts). graph_replay.c
 * runs them. */
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
#include "server/graph_internal.h"

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
