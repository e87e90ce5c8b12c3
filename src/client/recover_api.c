/* Recovery of lost devices and restorable buffers (include/cube/client.h,
 * "Recovery"; src/server/recover.c does the work). */
#include <inttypes.h>

#include "base/bytes.h"
#include "base/status.h"
#include "client/client_internal.h"
#include "client/handles.h"
#include "backends/backend.h"
#include "server/recover.h"

cube_status_t cube_device_recover(cube_device_id_t device) {
  static const char fn[] = "cube_device_recover";
  cube__server_t* s = NULL;
  /* Without a server (after cube_shutdown) the device is opened here; one
   * lost before may be reset to open (backend.h). */
  cube__backend_open_may_reset = true;
  cube_status_t st = cube__server_get(device, NULL, false, &s);
  cube__backend_open_may_reset = false;
  if (st) return cube__status_annotate(st, "%s", fn);
  return cube__server_recover(s, fn);
}

cube_status_t cube_client_checkpoint(cube_client_t* c, cube_handle_t handle) {
  static const char fn[] = "cube_client_checkpoint";
  cube__handle_info_t info;
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(
      cube__client_uncaptured_buffer(c, handle, fn, "a checkpoint", &info, &stream));
  cube_status_t st = cube__server_checkpoint(stream, info.mem);
  return st ? cube__status_annotate(st, "%s: handle 0x%" PRIx64, fn, handle.id) : CUBE_OK;
}

cube_status_t cube_client_create_restorable(cube_client_t* c, const void* data, size_t size,
                                            cube_handle_t* out_handle) {
  static const char fn[] = "cube_client_create_restorable";
  CUBE__CHECK_CLIENT(c, fn);
  if (!out_handle) return CUBE_INVALID("%s: out_handle is NULL", fn);
  return cube__client_create_kept(c, fn, data, size, out_handle);
}

cube_status_t cube_client_read_restorable(cube_client_t* c, cube_handle_t handle,
                                          cube_bytes_t** out_bytes) {
  static const char fn[] = "cube_client_read_restorable";
  /* No test of the device's loss: the host copy is what a lost device
   * leaves the program. */
  if (!cube__client_live(c)) return cube__client_refuse(c, fn);
  CUBE__CHECK_OUT(out_bytes, fn, "out_bytes");
  *out_bytes = NULL;
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, handle, &info, "%s: handle", fn));
  uint64_t len = info.buffer_size - info.offset_start - info.offset_end;
  cube_bytes_t* b = NULL;
  CUBE_RETURN_IF_ERROR(cube__bytes_allocate_uninit((size_t)len, &b));
  uint64_t size = 0;
  int r = cube__memory_copy_keep(info.mem, info.offset_start, len, cube_bytes_data(b), &size);
  if (r != 0) {
    cube_bytes_release(b);
    if (r < 0)
      return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                               "%s: handle 0x%" PRIx64 " on %s: its buffer is not restorable "
                               "(no host copy: cube_client_create_restorable or "
                               "cube_client_checkpoint make one)",
                               fn, handle.id, c->server->props.name);
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "%s: handle 0x%" PRIx64 " views bytes [%" PRIu64 ", %" PRIu64
                             ") of its buffer; the host copy holds %" PRIu64,
                             fn, handle.id, info.offset_start, info.offset_start + len, size);
  }
  *out_bytes = b;
  return CUBE_OK;
}
