/* cube_client_write, cube_client_write_tensor and cube_client_copy: new
 * contents for existing buffers, ordered on the client's stream (the
 * server's write and copy tasks, or a graph's nodes while it captures). */
#include <inttypes.h>
#include <stdio.h>

#include "client/client_internal.h"

cube_status_t cube_client_write(cube_client_t* c, cube_handle_t handle, const void* data,
                                size_t size) {
  static const char fn[] = "cube_client_write";
  CUBE__CHECK_CLIENT(c, fn);
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, handle, &info, "%s: handle", fn));
  uint64_t n = cube__handle_view_size(&info);
  if (size != n)
    return CUBE_INVALID("%s: handle 0x%" PRIx64 " views %" PRIu64 " bytes, size is %zu", fn,
                        handle.id, n, size);
  if (n == 0) return CUBE_OK;
  if (!data) return CUBE_INVALID("%s: data is NULL (%zu bytes to write)", fn, size);
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_auto(stream) && !cube__stream_capturing(stream)) {
    cube__auto_step_end(stream, "a write");
    cube__auto_touch(stream, info.mem);
  }
  cube_status_t st =
      cube__stream_capturing(stream)
          ? cube__graph_record_write(stream, info.mem, info.offset_start, n, n, data, n, 1)
          : cube__server_write_ordered(stream, info.mem, info.offset_start, n, data, n, 1);
  return st ? cube__status_annotate(st, "%s: handle 0x%" PRIx64, fn, handle.id) : CUBE_OK;
}

cube_status_t cube__client_uncaptured_buffer(cube_client_t* c, cube_handle_t handle,
                                             const char* fn, const char* what,
                                             cube__handle_info_t* out_info,
                                             cube__stream_t** out_stream) {
  CUBE__CHECK_CLIENT(c, fn);
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, handle, out_info, "%s: handle", fn));
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_capturing(stream)) return cube__stream_capture_refusal(stream, fn, what);
  if (cube__stream_auto(stream)) {
    cube__auto_step_end(stream, what);
    cube__auto_touch(stream, out_info->mem);
  }
  *out_stream = stream;
  return CUBE_OK;
}

cube_status_t cube_client_accept_contents(cube_client_t* c, cube_handle_t handle) {
  static const char fn[] = "cube_client_accept_contents";
  cube__handle_info_t info;
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_uncaptured_buffer(c, handle, fn,
                                                      "accepting a buffer's contents", &info,
                                                      &stream));
  cube_status_t st = cube__server_accept(stream, info.mem);
  return st ? cube__status_annotate(st, "%s: handle 0x%" PRIx64, fn, handle.id) : CUBE_OK;
}

cube_status_t cube_client_write_tensor(cube_client_t* c, const cube_tensor_t* t, const void* data,
                                       size_t size) {
  static const char fn[] = "cube_client_write_tensor";
  CUBE__CHECK_CLIENT(c, fn);
  if (!t) return CUBE_INVALID("%s: tensor is NULL", fn);
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, t->handle, &info, "%s: tensor->handle", fn));
  cube_layout_desc_t d;
  cube_status_t st =
      cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, t->rank, t->shape, t->elem_size, &d);
  if (st) return cube__status_annotate(st, "%s: tensor", fn);
  if (!cube_layout_strides_readable(c->server->props.layout_policy, t->rank, t->shape,
                                    t->strides))
    return cube__status_make(CUBE_STATUS_UNSUPPORTED,
                             "%s: the tensor's strides are not a layout %s produces (it writes "
                             "%s layouts only)",
                             fn, c->server->props.name,
                             c->server->props.layout_policy == CUBE_LAYOUT_POLICY_PITCHED
                                 ? "pitched row-major"
                                 : "contiguous row-major");
  uint64_t w, h, p, need;
  if (!cube__rows(&d, t->strides, &w, &h, &p, &need))
    return CUBE_INVALID("%s: the tensor (rank %" PRIu32 ", elem_size %" PRIu32
                        ") spans more than 2^64 bytes",
                        fn, t->rank, t->elem_size);
  uint64_t dense = w * h; /* <= need: the pitch is at least the row */
  if (size != dense)
    return CUBE_INVALID("%s: the tensor's %" PRIu64 " elements of %u bytes are %" PRIu64
                        " bytes, size is %zu",
                        fn, h && w ? dense / t->elem_size : 0, t->elem_size, dense, size);
  uint64_t view = cube__handle_view_size(&info);
  if (need > view)
    return CUBE_INVALID("%s: the tensor needs %" PRIu64 " bytes but its handle views %" PRIu64,
                        fn, need, view);
  if (dense == 0) return CUBE_OK;
  if (!data) return CUBE_INVALID("%s: data is NULL (%zu bytes to write)", fn, size);
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_auto(stream) && !cube__stream_capturing(stream)) {
    cube__auto_step_end(stream, "a write");
    cube__auto_touch(stream, info.mem);
  }
  st = cube__stream_capturing(stream)
           ? cube__graph_record_write(stream, info.mem, info.offset_start, view, p, data, w, h)
           : cube__server_write_ordered(stream, info.mem, info.offset_start, p, data, w, h);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

cube_status_t cube_client_copy(cube_client_t* c, cube_handle_t src, cube_handle_t dst) {
  static const char fn[] = "cube_client_copy";
  CUBE__CHECK_CLIENT(c, fn);
  cube__handle_info_t from, to;
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, src, &from, "%s: src", fn));
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, dst, &to, "%s: dst", fn));
  uint64_t n = cube__handle_view_size(&from), m = cube__handle_view_size(&to);
  if (n != m)
    return CUBE_INVALID("%s: src 0x%" PRIx64 " views %" PRIu64 " bytes, dst 0x%" PRIx64
                        " views %" PRIu64 " (the views must be of one size)",
                        fn, src.id, n, dst.id, m);
  if (from.mem == to.mem) {
    /* Views of one buffer: the same view is a copy that changes nothing;
     * overlapping ones are refused (device copies do not define them). */
    uint64_t a = from.offset_start, b = to.offset_start;
    if (a == b || n == 0) return CUBE_OK;
    if ((a < b ? b - a : a - b) < n)
      return CUBE_INVALID("%s: src 0x%" PRIx64 " (bytes [%" PRIu64 ", %" PRIu64
                          ") of its buffer) and dst 0x%" PRIx64 " (bytes [%" PRIu64 ", %" PRIu64
                          ")) overlap: a copy between overlapping views is not defined",
                          fn, src.id, a, a + n, dst.id, b, b + n);
  }
  if (n == 0) return CUBE_OK;
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  cube_status_t st =
      cube__graph_record_copy(stream, from.mem, from.offset_start, to.mem, to.offset_start, n);
  return st ? cube__status_annotate(st, "%s: src 0x%" PRIx64 ", dst 0x%" PRIx64, fn, src.id,
                                    dst.id)
            : CUBE_OK;
}
