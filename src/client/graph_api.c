/* The public graph calls (cube/graph.h): checks here, the graph itself in
 * src/server/graph.c. */
#include <inttypes.h>
#include <stdlib.h>

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

cube_status_t cube_client_replay(cube_client_t* c, cube_graph_t* g, size_t count,
                                 const cube_graph_binding_t* bindings) {
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
  if (st) {
    for (size_t k = 0; subs && k < slots; ++k)
      if (subs[k].mem) cube__memory_unref(subs[k].mem);
    free(subs);
    return st;
  }
  if (cube__stream_auto(stream)) {
    cube__auto_step_end(stream, "a replay");
    for (size_t k = 0; k < slots; ++k)
      cube__auto_touch(stream, subs && subs[k].mem ? subs[k].mem : cube__graph_slot_mem(g, (uint32_t)k));
  }
  st = cube__server_replay(stream, g, subs);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

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
