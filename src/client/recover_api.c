/* Recovery of lost devices and restorable buffers (include/cube/client.h,
 * "Recovery"; src/server/recover.c does the work). */
#include <inttypes.h>

#include "base/status.h"
#include "client/client_internal.h"
#include "client/handles.h"
#include "server/recover.h"

cube_status_t cube_device_recover(cube_device_id_t device) {
  static const char fn[] = "cube_device_recover";
  cube__server_t* s = NULL;
  cube_status_t st = cube__server_get(device, NULL, false, &s);
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
  cube_handle_t h;
  CUBE_RETURN_IF_ERROR(cube_client_create_from_slice(c, data, size, &h));
  cube__handle_info_t info;
  cube_status_t st = cube__client_handle_f(c, h, &info, "%s: handle", fn);
  if (!st) st = cube__server_keep(info.mem, data, size);
  if (st) {
    cube_handle_release(h);
    return cube__status_annotate(st, "%s", fn);
  }
  *out_handle = h;
  return CUBE_OK;
}
