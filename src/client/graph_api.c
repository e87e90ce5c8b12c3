/* The public graph calls (cube/graph.h): checks here, the graph itself in
 * src/server/graph.c. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "client/client_internal.h"
#include "cube/graph.h"

cube_status_t cube_client_capture_begin(cube_client_t* c) {
  static const char fn[] = "cube_client_capture_begin";
  CUBE__CHECK_CLIENT(c, fn);
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_auto(stream) && !cube__stream_capturing(stream))
    cube__auto_step_end(stream, "cube_client_capture_begin");
  cube_status_t st = cube__stream_capture_begin(stream);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

cube_status_t cube_client_capture_end(cube_client_t* c, cube_graph_t** out_graph) {
  static const char fn[] = "cube_client_capture_end";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_graph, fn, "out_graph");
  *out_graph = NULL;
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  cube_status_t st = cube__stream_capture_end(stream, out_graph);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

static int cube__scalar_sub_cmp(const void* a, const void* b) {
  const cube__graph_scalar_sub_t* x = a;
  const cube__graph_scalar_sub_t* y = b;
  if (x->node != y->node) return x->node < y->node ? -1 : 1;
  return x->arg < y->arg ? -1 : x->arg > y->arg ? 1 : 0;
}

/* The checked scalar substitutes of a replay, sorted by node (NULL for 0). */
static cube_status_t cube__replay_scalars(const char* fn, const cube_graph_t* g, size_t count,
                                          const cube_graph_scalar_t* scalars,
                                          cube__graph_scalar_sub_t** out) {
  *out = NULL;
  if (!count) return CUBE_OK;
  if (!scalars) return CUBE_INVALID("%s: scalars is NULL (count %zu)", fn, count);
  cube__graph_scalar_sub_t* subs = malloc(count * sizeof(*subs));
  if (!subs) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  for (size_t i = 0; i < count; ++i) {
    const cube_graph_scalar_t* s = &scalars[i];
    cube_arg_kind_t kind;
    cube_status_t st = cube__graph_scalar_kind(g, s->node, s->arg, &kind);
    if (!st && s->value.kind != kind)
      st = cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                             "node %u: argument %u is %s; the value is %s", s->node, s->arg,
                             cube_arg_kind_name(kind), cube_arg_kind_name(s->value.kind));
    if (st) {
      free(subs);
      return cube__status_annotate(st, "%s: scalars[%zu]", fn, i);
    }
    subs[i].node = s->node;
    subs[i].arg = s->arg;
    memset(&subs[i].value, 0, sizeof(subs[i].value));
    switch (kind) {
      case CUBE_ARG_U32: subs[i].value.u32 = s->value.v.u32; break;
      case CUBE_ARG_I32: subs[i].value.i32 = s->value.v.i32; break;
      case CUBE_ARG_U64: subs[i].value.u64 = s->value.v.u64; break;
      case CUBE_ARG_I64: subs[i].value.i64 = s->value.v.i64; break;
      case CUBE_ARG_F32: subs[i].value.f32 = s->value.v.f32; break;
      case CUBE_ARG_F64: subs[i].value.f64 = s->value.v.f64; break;
      default: break;
    }
  }
  qsort(subs, count, sizeof(*subs), cube__scalar_sub_cmp);
  for (size_t i = 1; i < count; ++i)
    if (subs[i].node == subs[i - 1].node && subs[i].arg == subs[i - 1].arg) {
      uint32_t node = subs[i].node, arg = subs[i].arg;
      free(subs);
      return CUBE_INVALID("%s: scalars name node %u, argument %u twice", fn, node, arg);
    }
  *out = subs;
  return CUBE_OK;
}

cube_status_t cube_client_replay(cube_client_t* c, cube_graph_t* g, size_t count,
                                 const cube_graph_binding_t* bindings) {
  return cube_client_replay_with(c, g, count, bindings, 0, NULL);
}

cube_status_t cube_client_replay_with(cube_client_t* c, cube_graph_t* g, size_t count,
                                      const cube_graph_binding_t* bindings, size_t scalar_count,
                                      const cube_graph_scalar_t* scalars) {
  static const char fn[] = "cube_client_replay";
  CUBE__CHECK_CLIENT(c, fn);
  if (!g) return CUBE_INVALID("%s: graph is NULL", fn);
  if (cube__graph_server(g) != c->server)
    return CUBE_INVALID("%s: the graph was captured on %s, not on this client's %s", fn,
                        cube__graph_server(g)->props.name, c->server->props.name);
  if (count && !bindings) return CUBE_INVALID("%s: bindings is NULL (count %zu)", fn, count);
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_capturing(stream))
    return cube__stream_capture_refusal(stream, fn, "a replay (graphs do not nest)");
  size_t slots = cube__graph_slot_count(g);
  cube__graph_sub_t* subs = NULL;
  if (count) {
    subs = calloc(slots ? slots : 1, sizeof(*subs));
    if (!subs) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  }
  cube_status_t st = CUBE_OK;
  for (size_t i = 0; i < count && !st; ++i) {
    uint32_t k = bindings[i].slot;
    if (k >= slots) {
      st = CUBE_INVALID("%s: bindings[%zu] names slot %u; the graph has %zu slots", fn, i, k, slots);
      break;
    }
    if (subs[k].mem) {
      st = CUBE_INVALID("%s: bindings[%zu] names slot %u a second time", fn, i, k);
      break;
    }
    cube__handle_info_t info;
    st = cube__client_handle_f(c, bindings[i].with, &info, "%s: bindings[%zu].with", fn, i);
    if (st) break;
    uint64_t n = cube__handle_view_size(&info), want = cube__graph_slot_len(g, k);
    if (n != want) {
      st = CUBE_INVALID("%s: bindings[%zu].with views %" PRIu64 " bytes; slot %u views %" PRIu64,
                        fn, i, n, k, want);
      break;
    }
    cube__memory_ref(info.mem);
    subs[k] = (cube__graph_sub_t){info.mem, info.offset_start};
  }
  if (!st && subs) {
    st = cube__graph_check_copies(g, subs);
    if (st) st = cube__status_annotate(st, "%s", fn);
  }
  cube__graph_scalar_sub_t* sc = NULL;
  if (!st) st = cube__replay_scalars(fn, g, scalar_count, scalars, &sc);
  if (st) {
    for (size_t k = 0; subs && k < slots; ++k)
      if (subs[k].mem) cube__memory_unref(subs[k].mem);
    free(subs);
    return st;
  }
  if (cube__stream_auto(stream)) {
    cube__auto_step_end(stream, "a replay");
    for (size_t k = 0; k < slots; ++k)
      cube__auto_touch(stream, subs && subs[k].mem ? subs[k].mem
                                                   : cube__graph_slot_mem(g, (uint32_t)k));
  }
  st = cube__server_replay(stream, g, subs, sc, scalar_count);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

bool cube_graph_is_native(const cube_graph_t* g) { return g && cube__graph_is_native(g); }

size_t cube_graph_node_count(const cube_graph_t* g) { return g ? cube__graph_node_count(g) : 0; }

size_t cube_graph_slot_count(const cube_graph_t* g) { return g ? cube__graph_slot_count(g) : 0; }

cube_status_t cube_graph_slot_of(const cube_graph_t* g, cube_client_t* c, cube_handle_t handle,
                                 uint32_t* out_slot) {
  static const char fn[] = "cube_graph_slot_of";
  if (!g) return CUBE_INVALID("%s: graph is NULL", fn);
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_slot, fn, "out_slot");
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, handle, &info, "%s: handle", fn));
  if (!cube__graph_slot_find(g, info.mem, info.offset_start, cube__handle_view_size(&info),
                             out_slot))
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "%s: the graph (%zu slots) does not use the view of handle 0x%" PRIx64,
                             fn, cube__graph_slot_count(g), handle.id);
  return CUBE_OK;
}

void cube_graph_release(cube_graph_t* g) { cube__graph_unref(g); }

cube_status_t cube_client_graph_auto_stats(cube_client_t* c, cube_graph_auto_stats_t* out) {
  static const char fn[] = "cube_client_graph_auto_stats";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out, fn, "out_stats");
  uint64_t n[5];
  cube__auto_stats(c->server, n);
  cube_graph_auto_stats_t stats = {sizeof(stats), n[0], n[1], n[2], n[3], n[4]};
  return cube__struct_write(fn, "out_stats->struct_size", &cube__struct_graph_auto_stats, out,
                            &stats);
}
