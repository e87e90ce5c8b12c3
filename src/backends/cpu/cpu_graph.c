/* The CPU backend's native graphs: a server graph's nodes resolved once into
 * prepared launches (the kernel's function, the arguments in the native
 * kernel ABI, the checks done), writes and copies with their host addresses.
 * A replay runs them in order on the runner (or the caller with the device to
 * itself), without the per-launch work of the launch slot: no function
 * lookup, no checks, no argument conversion. A rebinding prepares the nodes
 * it changes again (graph_update). Each node that fails is reported to the
 * server, which defers it to the stream as the node's own launch would be,
 * and the replay goes on with the next node.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "base/status.h"

typedef struct cube__cpu_graph_node {
  cube__graph_node_kind_t kind;
  cube__cpu_prepared_t launch; /* KERNEL: launch.args points into the graph's |args| */
  /* KERNEL that cube__cpu_prepared_direct allows: the cube record its
   * function is called with, built once (cube_pos set per cube). */
  bool direct;
  cube_cpu_cube_t cube;
  cube_cpu_arg_t* args;        /* KERNEL: its CUBE_MAX_KERNEL_ARGS-bounded share of |args| */
  /* WRITE: |height| rows of |width| bytes from |src| into |dst| at
   * |dst_offset|, |pitch| apart. COPY: |width| bytes from |src_storage| at
   * |src_offset|. */
  const cube__storage_t* dst;
  uint64_t dst_offset, pitch, width, height;
  const void* src;
  const cube__storage_t* src_storage;
  uint64_t src_offset;
} cube__cpu_graph_node_t;

typedef struct cube__cpu_graph {
  size_t count;
  cube__cpu_graph_node_t* nodes;
  cube_cpu_arg_t* args; /* every kernel node's arguments, back to back */
} cube__cpu_graph_t;

/* Fills node |n| from |d| (its arguments go to n->args, already placed). */
static cube_status_t cube__cpu_graph_set(cube__backend_device_t* dev, cube__cpu_graph_node_t* n,
                                         const cube__graph_node_desc_t* d) {
  n->kind = d->kind;
  switch (d->kind) {
    case CUBE__GRAPH_NODE_KERNEL: {
      CUBE_RETURN_IF_ERROR(cube__cpu_prepare_launch(dev, &d->launch, n->args, &n->launch));
      n->direct = cube__cpu_prepared_direct(&n->launch);
      memset(&n->cube, 0, sizeof(n->cube));
      memcpy(n->cube.cube_count, n->launch.count, sizeof(n->cube.cube_count));
      memcpy(n->cube.cube_dim, n->launch.dim, sizeof(n->cube.cube_dim));
      n->cube.mode = n->launch.mode;
      return CUBE_OK;
    }
    case CUBE__GRAPH_NODE_WRITE:
      n->dst = d->dst;
      n->dst_offset = d->dst_offset;
      n->pitch = d->pitch;
      n->width = d->width;
      n->height = d->height;
      n->src = d->src;
      return CUBE_OK;
    case CUBE__GRAPH_NODE_COPY:
      n->dst = d->dst;
      n->dst_offset = d->dst_offset;
      n->width = d->width;
      n->src_storage = d->src_storage;
      n->src_offset = d->src_offset;
      return CUBE_OK;
  }
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "cpu: graph node of kind %d", (int)d->kind);
}

void cube__cpu_graph_destroy(cube__backend_device_t* dev, void* graph) {
  (void)dev;
  cube__cpu_graph_t* g = graph;
  if (!g) return;
  free(g->nodes);
  free(g->args);
  free(g);
}

cube_status_t cube__cpu_graph_create(cube__backend_device_t* dev,
                                     const cube__graph_node_desc_t* nodes, size_t count,
                                     void** out_graph) {
  size_t arg_total = 0;
  for (size_t i = 0; i < count; ++i)
    if (nodes[i].kind == CUBE__GRAPH_NODE_KERNEL) arg_total += nodes[i].launch.arg_count;
  cube__cpu_graph_t* g = calloc(1, sizeof(*g));
  if (g) {
    g->count = count;
    g->nodes = calloc(count ? count : 1, sizeof(*g->nodes));
    g->args = calloc(arg_total ? arg_total : 1, sizeof(*g->args));
  }
  if (!g || !g->nodes || !g->args) {
    cube__cpu_graph_destroy(dev, g);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cpu: a graph of %zu nodes: no host memory",
                             count);
  }
  size_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    cube__cpu_graph_node_t* n = &g->nodes[i];
    if (nodes[i].kind == CUBE__GRAPH_NODE_KERNEL) {
      n->args = g->args + at;
      at += nodes[i].launch.arg_count;
    }
    cube_status_t st = cube__cpu_graph_set(dev, n, &nodes[i]);
    if (st) {
      /* A node that cannot be prepared (its kernel does not compile, say)
       * fails each replay as its own launch does: node by node. */
      cube__cpu_graph_destroy(dev, g);
      return cube__status_annotate(st, "cpu: node %zu of a graph of %zu", i, count);
    }
  }
  *out_graph = g;
  return CUBE_OK;
}

cube_status_t cube__cpu_graph_update(cube__backend_device_t* dev, void* graph, size_t index,
                                     const cube__graph_node_desc_t* node) {
  cube__cpu_graph_t* g = graph;
  if (index >= g->count)
    return CUBE_INVALID("cpu: graph update of node %zu of %zu", index, g->count);
  cube__cpu_graph_node_t* n = &g->nodes[index];
  if (node->kind != n->kind ||
      (n->kind == CUBE__GRAPH_NODE_KERNEL && node->launch.arg_count != n->launch.arg_count))
    return CUBE_INVALID("cpu: graph update of node %zu: another kind or argument count", index);
  /* On failure the node keeps its old parameters; the server then updates
   * every node before the next launch. */
  cube__cpu_graph_node_t copy = *n;
  cube_cpu_arg_t args[CUBE_MAX_KERNEL_ARGS];
  copy.args = args;
  CUBE_RETURN_IF_ERROR(cube__cpu_graph_set(dev, &copy, node));
  if (n->kind == CUBE__GRAPH_NODE_KERNEL)
    memcpy(n->args, args, (size_t)n->launch.arg_count * sizeof(*args));
  cube_cpu_arg_t* keep = n->args;
  *n = copy;
  n->args = keep;
  n->launch.args = keep;
  return CUBE_OK;
}

/* A direct node's cubes, in order, on this thread (as participant 0). */
static cube_status_t cube__cpu_graph_direct(const cube__cpu_graph_node_t* n) {
  const cube__cpu_prepared_t* p = &n->launch;
  cube_cpu_cube_t cube = n->cube;
  uint32_t* pos = cube.cube_pos;
  for (uint64_t i = 0; i < p->total; ++i) {
    int rc = p->fn(&cube, p->args, p->arg_count);
    if (rc != 0) return cube__cpu_kernel_failed(p, pos, rc);
    if (++pos[0] == p->count[0]) {
      pos[0] = 0;
      if (++pos[1] == p->count[1]) {
        pos[1] = 0;
        ++pos[2];
      }
    }
  }
  return CUBE_OK;
}

cube_status_t cube__cpu_graph_launch(cube__backend_device_t* dev, void* stream, void* graph,
                                     cube__graph_node_failed_fn node_failed, void* user) {
  cube__cpu_graph_t* g = graph;
  cube_status_t first = CUBE_OK;
  for (size_t i = 0; i < g->count; ++i) {
    const cube__cpu_graph_node_t* n = &g->nodes[i];
    cube_status_t st;
    if (n->kind == CUBE__GRAPH_NODE_KERNEL)
      st = n->direct ? cube__cpu_graph_direct(n) : cube__cpu_run_prepared(dev, &n->launch);
    else if (n->kind == CUBE__GRAPH_NODE_WRITE)
      st = cube__cpu_write(dev, stream, n->dst, n->dst_offset, n->pitch, n->src, n->width,
                           n->height);
    else
      st = cube__cpu_copy(dev, stream, n->dst, n->dst_offset, n->src_storage, n->src_offset,
                          n->width);
    if (!st) continue;
    if (node_failed)
      node_failed(user, i, st);
    else
      first = first ? cube__status_join(first, st) : st;
  }
  return first;
}
