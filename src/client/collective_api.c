/* The client API: moving data between devices (to_client) and collectives
 * (all_reduce, send, recv, sync_collective). Validation here; communicators,
 * the rendezvous and the transports are in src/collective. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/bytes.h"
#include "client/client_internal.h"
#include "collective/collective.h"

//===----------------------------------------------------------------------===//
// Between devices, collectives
//===----------------------------------------------------------------------===//

/* The in-transport path of to_client: dst gets a buffer of |size| bytes, the
 * source sends, the destination receives, and both streams are ordered after
 * the copy (receiver first: in inline mode one thread drives both). A
 * transport carries bytes, not taint (a recv takes the taint of its own
 * input only), so the source's contents are checked after the send, in its
 * device's order: spoiled ones fail the call with DATA_LOST, as the read of
 * the other path does, rather than giving a valid handle of invalid bytes. */
static cube_status_t cube__to_client_p2p(cube_client_t* src, cube_handle_t handle,
                                         cube__memory_t* mem, cube_client_t* dst,
                                         cube_handle_t out) {
  cube_device_id_t a = cube__coll_global_id(src->server->id);
  cube_device_id_t b = cube__coll_global_id(dst->server->id);
  CUBE_RETURN_IF_ERROR(cube_client_send(src, handle, b));
  CUBE_RETURN_IF_ERROR(cube_client_recv(dst, out, a));
  CUBE_RETURN_IF_ERROR(cube_client_sync_collective(dst));
  CUBE_RETURN_IF_ERROR(cube_client_sync_collective(src));
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(src, &stream));
  char where[64];
  snprintf(where, sizeof(where), "copy of memory %" PRIu64, mem->id);
  return cube__server_taint_check(stream, mem, where);
}

/* True when both devices share a collective transport (CPU to CPU). */
static bool cube__p2p_possible(const cube_client_t* src, const cube_client_t* dst) {
  return src->server->id.backend == dst->server->id.backend &&
         cube__coll_transport_for(src->server->id.backend) != NULL;
}

cube_status_t cube_client_to_client(cube_client_t* src, cube_handle_t handle, cube_client_t* dst,
                                    cube_handle_t* out_handle) {
  const char* fn = "cube_client_to_client";
  CUBE__CHECK_CLIENT(src, "cube_client_to_client: src");
  CUBE__CHECK_CLIENT(dst, "cube_client_to_client: dst");
  CUBE__CHECK_OUT(out_handle, fn, "out_handle");
  cube_status_t st;
  if (cube__p2p_possible(src, dst)) {
    cube__handle_info_t info;
    st = cube__client_handle(src, handle, "handle", &info);
    if (st) return cube__status_annotate(st, "%s", fn);
    cube_handle_t out = CUBE_HANDLE_NULL; /* released on failure: empty may not set it */
    st = cube_client_empty(dst, (size_t)cube__handle_view_size(&info), &out);
    if (!st) st = cube__to_client_p2p(src, handle, info.mem, dst, out);
    if (st) {
      cube_handle_release(out);
      return cube__status_annotate(st, "%s", fn);
    }
    *out_handle = out;
    return CUBE_OK;
  }
  /* No transport between these servers: read on src, write on dst (as CubeCL: docs/cubecl.md, "Client: to_client"). */
  cube_bytes_t* b;
  st = cube_client_read_one(src, handle, &b);
  if (st) return cube__status_annotate(st, "%s", fn);
  st = cube_client_create(dst, b, out_handle);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

cube_status_t cube_client_to_client_tensor(cube_client_t* src, const cube_tensor_t* tensor,
                                           cube_client_t* dst, cube_tensor_t* out_tensor) {
  const char* fn = "cube_client_to_client_tensor";
  CUBE__CHECK_CLIENT(src, "cube_client_to_client_tensor: src");
  CUBE__CHECK_CLIENT(dst, "cube_client_to_client_tensor: dst");
  if (!tensor) return CUBE_INVALID("%s: tensor is NULL", fn);
  CUBE__CHECK_OUT(out_tensor, fn, "out_tensor");
  cube_status_t st;
  if (cube__p2p_possible(src, dst) &&
      cube_layout_strides_readable(src->server->props.layout_policy, tensor->rank, tensor->shape,
                                   tensor->strides)) {
    /* Same layout on both sides (one policy per backend): copy the view. */
    cube__handle_info_t info;
    st = cube__client_handle(src, tensor->handle, "tensor->handle", &info);
    if (st) return cube__status_annotate(st, "%s", fn);
    cube_tensor_t t;
    st = cube_client_empty_tensor(dst, tensor->rank, tensor->shape, tensor->elem_size, &t);
    if (st) return cube__status_annotate(st, "%s", fn);
    cube__handle_info_t tinfo;
    st = cube__client_handle(dst, t.handle, fn, &tinfo);
    bool same = !st && memcmp(t.strides, tensor->strides, sizeof(t.strides)) == 0 &&
                cube__handle_view_size(&tinfo) == cube__handle_view_size(&info);
    cube_status_free(st);
    if (same) {
      st = cube__to_client_p2p(src, tensor->handle, info.mem, dst, t.handle);
      if (st) {
        cube_tensor_release(&t);
        return cube__status_annotate(st, "%s", fn);
      }
      *out_tensor = t;
      return CUBE_OK;
    }
    cube_tensor_release(&t);
  }
  cube_bytes_t* b;
  st = cube_client_read_tensor(src, 1, tensor, &b);
  if (st) return cube__status_annotate(st, "%s", fn);
  st = cube_client_create_tensor(dst, b, tensor->rank, tensor->shape, tensor->elem_size,
                                 out_tensor);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

static cube_status_t cube__check_devices(const char* fn, size_t n, const cube_device_id_t* ids) {
  if (n == 0) return CUBE_INVALID("%s: device_count is 0", fn);
  if (!ids) return CUBE_INVALID("%s: devices is NULL", fn);
  for (size_t i = 0; i < n; ++i) {
    if ((unsigned)ids[i].backend >= CUBE__BACKEND_COUNT)
      return CUBE_INVALID("%s: devices[%zu].backend %d is invalid", fn, i, (int)ids[i].backend);
    uint32_t count = cube__coll_global_count(ids[i].backend);
    if (ids[i].index >= count)
      return cube__status_make(CUBE_STATUS_NOT_FOUND, "%s: devices[%zu] = %s:%u does not exist",
                               fn, i, cube_backend_name(ids[i].backend), ids[i].index);
  }
  return CUBE_OK;
}

static cube_status_t cube__no_collectives(const cube_client_t* c, const char* fn) {
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                           "%s: the %s backend has no collective transport yet", fn,
                           c->server->info.name);
}

/* The communicator of |devices| for client |c| and c's place in it. */
static cube_status_t cube__client_comm(cube_client_t* c, const char* fn, size_t n,
                                       const cube_device_id_t* devices, cube__comm_t** comm,
                                       uint32_t* rank) {
  CUBE_RETURN_IF_ERROR(cube__check_devices(fn, n, devices));
  if (!cube__coll_transport_for(c->server->id.backend)) return cube__no_collectives(c, fn);
  return cube__coll_comm_get(fn, n, devices, cube__coll_global_id(c->server->id), comm, rank);
}

cube_status_t cube_client_ensure_init_collective(cube_client_t* c, size_t device_count,
                                                 const cube_device_id_t* devices) {
  const char* fn = "cube_client_ensure_init_collective";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE_RETURN_IF_ERROR(cube__check_devices(fn, device_count, devices));
  /* Set-up, not work a replay repeats (a transport with a comm_init would
   * queue it on the device once): before the capture. */
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_capturing(stream))
    return cube__stream_capture_refusal(stream, fn, "the set-up of a communicator");
  cube__comm_t* comm;
  uint32_t rank;
  CUBE_RETURN_IF_ERROR(cube__client_comm(c, fn, device_count, devices, &comm, &rank));
  /* The host transport needs no per-participant set-up (a transport with a
   * comm_init, NCCL, would queue it on the device here). */
  return CUBE_OK;
}

cube_status_t cube_client_shrink_collective(cube_client_t* c, size_t device_count,
                                            const cube_device_id_t* devices,
                                            size_t* out_count, cube_device_id_t* out_devices) {
  const char* fn = "cube_client_shrink_collective";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_count, fn, "out_count");
  CUBE__CHECK_OUT(out_devices, fn, "out_devices");
  CUBE_RETURN_IF_ERROR(cube__check_devices(fn, device_count, devices));
  if (!cube__coll_transport_for(c->server->id.backend)) return cube__no_collectives(c, fn);
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_capturing(stream))
    return cube__stream_capture_refusal(stream, fn, "the shrink of a communicator");
  size_t n = 0;
  CUBE_RETURN_IF_ERROR(cube__coll_shrink(fn, device_count, devices,
                                         cube__coll_global_id(c->server->id), &n, out_devices));
  *out_count = n;
  return CUBE_OK;
}

cube_status_t cube_client_sync_collective(cube_client_t* c) {
  const char* fn = "cube_client_sync_collective";
  CUBE__CHECK_CLIENT(c, fn);
  if (!cube__coll_transport_for(c->server->id.backend)) return cube__no_collectives(c, fn);
  uint64_t timeout;
  cube_status_t st = cube__coll_timeout_ns(&timeout);
  if (st) return cube__status_annotate(st, "%s", fn);
  cube__stream_t* stream;
  st = cube__client_stream(c, &stream);
  if (!st && !cube__stream_capturing(stream) && cube__stream_auto(stream))
    cube__auto_step_end(stream, "a collective");
  if (!st) st = cube__coll_submit_sync(stream, timeout); /* recorded when the stream captures */
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

/* Queues this participant's part (or records it, when the stream captures);
 * takes binding references on the buffers. */
static cube_status_t cube__coll_queue(cube_client_t* c, const char* fn, cube__comm_t* comm,
                                      cube_collective_kind_t kind, cube__coll_part_t* part,
                                      const cube__handle_info_t* src,
                                      const cube__handle_info_t* dst) {
  uint64_t timeout;
  cube_status_t st = cube__coll_timeout_ns(&timeout);
  if (st) return cube__status_annotate(st, "%s", fn);
  cube__stream_t* stream;
  st = cube__client_stream(c, &stream);
  if (st) return cube__status_annotate(st, "%s", fn);
  if (!cube__stream_capturing(stream) && cube__stream_auto(stream)) {
    cube__auto_step_end(stream, "a collective");
    if (src) cube__auto_touch(stream, src->mem);
    if (dst) cube__auto_touch(stream, dst->mem);
  }
  if (src) {
    part->src_mem = src->mem;
    part->src_offset = src->offset_start;
    cube__memory_ref(src->mem);
  }
  if (dst) {
    part->dst_mem = dst->mem;
    part->dst_offset = dst->offset_start;
    cube__memory_ref(dst->mem);
  }
  st = cube__coll_submit(stream, comm, kind, part, timeout);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

cube_status_t cube_client_all_reduce(cube_client_t* c, cube_handle_t src, cube_handle_t dst,
                                     cube_dtype_t dtype, size_t device_count,
                                     const cube_device_id_t* devices, cube_reduce_op_t op) {
  const char* fn = "cube_client_all_reduce";
  CUBE__CHECK_CLIENT(c, fn);
  cube__handle_info_t a, b;
  CUBE_RETURN_IF_ERROR(cube__client_handle(c, src, "cube_client_all_reduce: src", &a));
  CUBE_RETURN_IF_ERROR(cube__client_handle(c, dst, "cube_client_all_reduce: dst", &b));
  if (cube_dtype_size(dtype) == 0) return CUBE_INVALID("%s: dtype %d is invalid", fn, (int)dtype);
  if ((unsigned)op >= CUBE__REDUCE_OP_COUNT)
    return CUBE_INVALID("%s: reduce op %d is invalid", fn, (int)op);
  CUBE_RETURN_IF_ERROR(cube__check_devices(fn, device_count, devices));
  uint64_t na = cube__handle_view_size(&a), nb = cube__handle_view_size(&b);
  if (na != nb)
    return CUBE_INVALID("%s: src views %" PRIu64 " bytes but dst %" PRIu64, fn, na, nb);
  if (na % cube_dtype_size(dtype))
    return CUBE_INVALID("%s: %" PRIu64 " bytes are not a whole number of %s elements (%u bytes)",
                        fn, na, cube_dtype_name(dtype), cube_dtype_size(dtype));
  cube__comm_t* comm;
  cube__coll_part_t part;
  memset(&part, 0, sizeof(part));
  CUBE_RETURN_IF_ERROR(cube__client_comm(c, fn, device_count, devices, &comm, &part.rank));
  part.bytes = na;
  part.dtype = dtype;
  part.op = op;
  return cube__coll_queue(c, fn, comm, CUBE_COLLECTIVE_ALL_REDUCE, &part, &a, &b);
}

static cube_status_t cube__p2p(cube_client_t* c, const char* fn, cube_handle_t h,
                               cube_device_id_t peer, bool is_send) {
  CUBE__CHECK_CLIENT(c, fn);
  cube__handle_info_t info;
  char what[64];
  snprintf(what, sizeof(what), "%s: %s", fn, is_send ? "src" : "dst");
  CUBE_RETURN_IF_ERROR(cube__client_handle(c, h, what, &info));
  cube_device_id_t self = cube__coll_global_id(c->server->id);
  cube_device_id_t set[2] = {self, peer};
  size_t n = self.backend == peer.backend && self.index == peer.index ? 1 : 2;
  CUBE_RETURN_IF_ERROR(cube__check_devices(fn, 2, set));
  cube__comm_t* comm;
  cube__coll_part_t part;
  memset(&part, 0, sizeof(part));
  CUBE_RETURN_IF_ERROR(cube__client_comm(c, fn, n, set, &comm, &part.rank));
  part.peer = n == 1 ? 0 : 1 - part.rank;
  part.bytes = cube__handle_view_size(&info);
  part.dtype = CUBE_DTYPE_U8;
  return cube__coll_queue(c, fn, comm, is_send ? CUBE_COLLECTIVE_SEND : CUBE_COLLECTIVE_RECV,
                          &part, is_send ? &info : NULL, is_send ? NULL : &info);
}

cube_status_t cube_client_send(cube_client_t* c, cube_handle_t src, cube_device_id_t peer) {
  return cube__p2p(c, "cube_client_send", src, peer, true);
}

cube_status_t cube_client_recv(cube_client_t* c, cube_handle_t dst, cube_device_id_t peer) {
  return cube__p2p(c, "cube_client_recv", dst, peer, false);
}

cube_status_t cube_client_last_collective(const cube_client_t* c,
                                          cube_collective_record_t* out_record) {
  const char* fn = "cube_client_last_collective";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_record, fn, "out_record");
  cube_collective_record_t record;
  memset(&record, 0, sizeof(record));
  if (!cube__coll_last_record(c->server->id, &record))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "%s: %s has completed no collective yet", fn,
                             c->server->props.name);
  return cube__struct_write(fn, "out_record->struct_size", &cube__struct_collective_record,
                            out_record, &record);
}
