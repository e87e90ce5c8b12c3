/* The CUDA backend's native graphs: a server graph's nodes as one CUgraph,
 * a chain in capture order, instantiated once into a CUgraphExec; a
 * rebinding updates the parameters of the nodes it changes
 * (cuGraphExecKernelNodeSetParams, cuGraphExecMemcpyNodeSetParams) instead
 * of instantiating again. The bytes of the write nodes are copied once into
 * pinned memory the graph owns, so that their copies are asynchronous and
 * stay valid for every replay. A copy between two device buffers is a 1-D
 * device-to-device memcpy node, updated in place when either buffer changes.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_backend_internal.h"
#include "base/status.h"
#include "kernel/kernel.h"

typedef struct cube__cuda_graph {
  CUgraph graph;
  CUgraphExec exec;
  size_t count;
  CUgraphNode* nodes;   /* count */
  unsigned char* host;  /* pinned: the write nodes' bytes (NULL when none) */
  uint64_t* host_at;    /* count: a write node's bytes in |host| */
  CUevent last;         /* recorded after each launch: the destroy waits for it */
  bool launched;
  unsigned epoch;       /* the device's epoch when it was made */
} cube__cuda_graph_t;

/* A graph of a lost device, or of its context before a recovery reset it:
 * its driver objects are gone (or answer with the fault). */
static bool cube__cuda_graph_stale(cube__backend_device_t* d, const cube__cuda_graph_t* g) {
  return atomic_load(&d->lost) || g->epoch != atomic_load(&d->epoch);
}

static cube_status_t cube__cuda_graph_stale_status(cube__backend_device_t* d,
                                                   const cube__cuda_graph_t* g) {
  return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "cuda:%u: a graph of %zu nodes made before the device was recovered "
                           "(its context was reset since): capture it again",
                           d->index, g->count);
}

static bool cube__cuda_has_graphs(const cube__cuda_driver_t* cu) {
  return cu->GraphCreate && cu->GraphAddKernelNode && cu->GraphAddMemcpyNode &&
         cu->GraphAddEmptyNode && cu->GraphInstantiateWithFlags &&
         cu->GraphExecKernelNodeSetParams && cu->GraphExecMemcpyNodeSetParams && cu->GraphLaunch &&
         cu->GraphExecDestroy && cu->GraphDestroy;
}

/* The kernel node's parameters, marshalled into |p| (which they point into). */
static cube_status_t cube__cuda_kernel_params(cube__backend_device_t* d,
                                              const cube__launch_t* l, cube__cuda_params_t* p,
                                              CUDA_KERNEL_NODE_PARAMS_v2* out, bool* out_empty) {
  cube__cuda_fn_t f;
  CUBE_RETURN_IF_ERROR(cube__cuda_launch_check(d, l, &f, out_empty));
  if (*out_empty) return CUBE_OK;
  if (l->mode == CUBE_EXEC_VALIDATE)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "cuda:%u: kernel '%s' in Validate mode cannot be a graph node (its "
                             "bounds record is read back after each launch)",
                             d->index, l->name ? l->name : "?");
  cube__cuda_marshal(l, p);
  p->timing = 0; /* a node's kernel is not timed by itself (a replay is one record) */
  p->params[p->n++] = &p->timing;
  memset(out, 0, sizeof(*out));
  out->func = f.fn;
  out->gridDimX = l->count[0];
  out->gridDimY = l->count[1];
  out->gridDimZ = l->count[2];
  out->blockDimX = l->dim.x;
  out->blockDimY = l->dim.y;
  out->blockDimZ = l->dim.z;
  out->kernelParams = p->params;
  return CUBE_OK;
}

static void cube__cuda_copy_params(const cube__graph_node_desc_t* n, const void* src,
                                   CUDA_MEMCPY3D* m) {
  memset(m, 0, sizeof(*m));
  m->srcMemoryType = CU_MEMORYTYPE_HOST;
  m->srcHost = src;
  m->srcPitch = n->width;
  m->srcHeight = n->height;
  m->dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m->dstDevice = (CUdeviceptr)(uintptr_t)n->dst->ptr + n->dst_offset;
  m->dstPitch = n->height > 1 ? n->pitch : n->width;
  m->dstHeight = n->height;
  m->WidthInBytes = n->width;
  m->Height = n->height;
  m->Depth = 1;
}

/* A COPY node's parameters: |width| bytes, device to device, as one row. */
static void cube__cuda_device_copy_params(const cube__graph_node_desc_t* n, CUDA_MEMCPY3D* m) {
  memset(m, 0, sizeof(*m));
  m->srcMemoryType = CU_MEMORYTYPE_DEVICE;
  m->srcDevice = (CUdeviceptr)(uintptr_t)n->src_storage->ptr + n->src_offset;
  m->srcPitch = n->width;
  m->srcHeight = 1;
  m->dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m->dstDevice = (CUdeviceptr)(uintptr_t)n->dst->ptr + n->dst_offset;
  m->dstPitch = n->width;
  m->dstHeight = 1;
  m->WidthInBytes = n->width;
  m->Height = 1;
  m->Depth = 1;
}

void cube__cuda_graph_destroy(cube__backend_device_t* d, void* graph) {
  cube__cuda_graph_t* g = graph;
  if (!g) return;
  CUBE__CUDA_SCOPE(d->ctx);
  const cube__cuda_driver_t* cu = d->cu;
  /* The pinned bytes are the source of copies a launch may still run. A lost
   * device's graph stays with the driver; its host side is freed below. */
  bool stale = cube__cuda_graph_stale(d, g);
  if (g->last && !stale) {
    if (g->launched) (void)cu->EventSynchronize(g->last);
    (void)cu->EventDestroy(g->last);
  }
  if (!stale) {
    if (g->exec) (void)cu->GraphExecDestroy(g->exec);
    if (g->graph) (void)cu->GraphDestroy(g->graph);
    if (g->host) (void)cu->MemFreeHost(g->host);
  }
  free(g->nodes);
  free(g->host_at);
  free(g);
}

cube_status_t cube__cuda_graph_create(cube__backend_device_t* d,
                                      const cube__graph_node_desc_t* nodes, size_t count,
                                      void** out_graph) {
  const cube__cuda_driver_t* cu = d->cu;
  if (!cube__cuda_has_graphs(cu))
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "cuda:%u: the driver (version %d) has no graph API", d->index,
                             cu->version);
  CUBE__CUDA_SCOPE(d->ctx);
  cube__cuda_graph_t* g = calloc(1, sizeof(*g));
  if (!g) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cuda:%u: graph: no host memory", d->index);
  g->count = count;
  g->epoch = atomic_load(&d->epoch);
  g->nodes = calloc(count ? count : 1, sizeof(*g->nodes));
  g->host_at = calloc(count ? count : 1, sizeof(*g->host_at));
  cube_status_t st = CUBE_OK;
  if (!g->nodes || !g->host_at)
    st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cuda:%u: graph: no host memory", d->index);
  uint64_t bytes = 0;
  for (size_t i = 0; !st && i < count; ++i) {
    if (nodes[i].kind != CUBE__GRAPH_NODE_WRITE) continue;
    g->host_at[i] = bytes;
    bytes += (nodes[i].width * nodes[i].height + 63) & ~(uint64_t)63;
  }
  CUresult r = CUDA_SUCCESS;
  if (!st && bytes) {
    void* host = NULL;
    r = cu->MemHostAlloc(&host, bytes, 0);
    if (r != CUDA_SUCCESS)
      st = cube__cuda_error(r, CUBE_STATUS_OUT_OF_MEMORY,
                            "cuda:%u: graph: %" PRIu64 " bytes of pinned memory for its writes",
                            d->index, bytes);
    g->host = host;
  }
  if (!st) {
    r = cu->GraphCreate(&g->graph, 0);
    if (r != CUDA_SUCCESS) st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuGraphCreate", d->index);
  }
  for (size_t i = 0; !st && i < count; ++i) {
    const cube__graph_node_desc_t* n = &nodes[i];
    const CUgraphNode* dep = i ? &g->nodes[i - 1] : NULL;
    size_t deps = i ? 1 : 0;
    if (n->kind == CUBE__GRAPH_NODE_KERNEL) {
      cube__cuda_params_t p;
      CUDA_KERNEL_NODE_PARAMS_v2 kp;
      bool empty = false;
      st = cube__cuda_kernel_params(d, &n->launch, &p, &kp, &empty);
      if (st) break;
      r = empty ? cu->GraphAddEmptyNode(&g->nodes[i], g->graph, dep, deps)
                : cu->GraphAddKernelNode(&g->nodes[i], g->graph, dep, deps, &kp);
    } else if (n->kind == CUBE__GRAPH_NODE_WRITE) {
      unsigned char* src = g->host + g->host_at[i];
      memcpy(src, n->src, (size_t)(n->width * n->height));
      CUDA_MEMCPY3D m;
      cube__cuda_copy_params(n, src, &m);
      r = cu->GraphAddMemcpyNode(&g->nodes[i], g->graph, dep, deps, &m, d->ctx);
    } else if (n->kind == CUBE__GRAPH_NODE_COPY) {
      CUDA_MEMCPY3D m;
      cube__cuda_device_copy_params(n, &m);
      r = cu->GraphAddMemcpyNode(&g->nodes[i], g->graph, dep, deps, &m, d->ctx);
    } else {
      st = cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "cuda:%u: graph node %zu of kind %d",
                             d->index, i, (int)n->kind);
      break;
    }
    if (r != CUDA_SUCCESS)
      st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: adding node %zu of %zu to a graph",
                            d->index, i, count);
  }
  if (!st) {
    r = cu->GraphInstantiateWithFlags(&g->exec, g->graph, 0);
    if (r != CUDA_SUCCESS)
      st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: instantiating a graph of %zu nodes",
                            d->index, count);
  }
  if (!st) {
    r = cu->EventCreate(&g->last, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) st = cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: graph: an event", d->index);
  }
  if (st) {
    cube__cuda_graph_destroy(d, g);
    return st;
  }
  *out_graph = g;
  return CUBE_OK;
}

cube_status_t cube__cuda_graph_update(cube__backend_device_t* d, void* graph, size_t index,
                                      const cube__graph_node_desc_t* n) {
  cube__cuda_graph_t* g = graph;
  if (index >= g->count)
    return CUBE_INVALID("cuda:%u: graph update of node %zu of %zu", d->index, index, g->count);
  if (cube__cuda_graph_stale(d, g)) return cube__cuda_graph_stale_status(d, g);
  CUBE__CUDA_SCOPE(d->ctx);
  CUresult r;
  if (n->kind == CUBE__GRAPH_NODE_KERNEL) {
    cube__cuda_params_t p;
    CUDA_KERNEL_NODE_PARAMS_v2 kp;
    bool empty = false;
    CUBE_RETURN_IF_ERROR(cube__cuda_kernel_params(d, &n->launch, &p, &kp, &empty));
    if (empty) return CUBE_OK; /* an empty node stays empty: counts are not rebound */
    r = d->cu->GraphExecKernelNodeSetParams(g->exec, g->nodes[index], &kp);
  } else if (n->kind == CUBE__GRAPH_NODE_COPY) {
    CUDA_MEMCPY3D m;
    cube__cuda_device_copy_params(n, &m); /* 1-D: the driver updates it in place */
    r = d->cu->GraphExecMemcpyNodeSetParams(g->exec, g->nodes[index], &m, d->ctx);
  } else {
    /* The driver updates 1-D copies only. */
    if (n->height > 1)
      return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                               "cuda:%u: node %zu (a copy of %" PRIu64 " rows with a pitch) cannot "
                               "be updated in place",
                               d->index, index, n->height);
    CUDA_MEMCPY3D m;
    cube__cuda_copy_params(n, g->host + g->host_at[index], &m);
    r = d->cu->GraphExecMemcpyNodeSetParams(g->exec, g->nodes[index], &m, d->ctx);
  }
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: updating node %zu of a graph of %zu",
                            d->index, index, g->count);
  return CUBE_OK;
}

cube_status_t cube__cuda_graph_launch(cube__backend_device_t* d, void* stream, void* graph,
                                      cube__graph_node_failed_fn node_failed, void* user) {
  (void)node_failed; /* the nodes run on the device after the call: failures come later */
  (void)user;
  cube__cuda_graph_t* g = graph;
  if (cube__cuda_graph_stale(d, g)) return cube__cuda_graph_stale_status(d, g);
  CUBE__CUDA_SCOPE(d->ctx);
  CUstream s = cube__cuda_s(stream);
  CUresult r = d->cu->GraphLaunch(g->exec, s);
  if (r == CUDA_SUCCESS) r = d->cu->EventRecord(g->last, s);
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_LAUNCH_FAILED,
                            "cuda:%u: launch of a graph of %zu nodes", d->index, g->count);
  g->launched = true;
  return CUBE_OK;
}
