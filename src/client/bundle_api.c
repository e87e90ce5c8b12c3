/* The client API of bundles (cube/bundle.h): the device identity of the
 * client, then the kernel cache's bundle functions (kernel/cache_bundle.c). */
#include <stdio.h>
#include <string.h>

#include "base/abi.h"
#include "client/client_internal.h"
#include "kernel/cache.h"

static cube_status_t cube__bundle_info_out(const char* fn, const cube__bundle_head_t* h,
                                           cube_bundle_info_t* out) {
  if (!out) return CUBE_OK;
  cube_bundle_info_t i;
  memset(&i, 0, sizeof(i));
  i.struct_size = sizeof(i);
  snprintf(i.version, sizeof(i.version), "%s", h->version);
  snprintf(i.backend, sizeof(i.backend), "%s", h->backend);
  snprintf(i.device, sizeof(i.device), "%s", h->device);
  i.entries = h->entries;
  i.kernels = h->kernels;
  i.tunings = h->tunings;
  i.bytes = h->bytes;
  return cube__struct_write(fn, "out_info->struct_size", &cube__struct_bundle_info, out, &i);
}

static cube_status_t cube__bundle_check_out(const char* fn, const cube_bundle_info_t* out) {
  if (out && out->struct_size && out->struct_size < sizeof(size_t))
    return CUBE_INVALID("%s: out_info->struct_size %zu is smaller than the struct_size field", fn,
                        out->struct_size);
  return CUBE_OK;
}

cube_status_t cube_bundle_export(cube_client_t* c, const char* path, cube_bundle_info_t* out_info) {
  static const char fn[] = "cube_bundle_export";
  CUBE__CHECK_CLIENT(c, fn);
  if (!path || !*path) return CUBE_INVALID("%s: path is NULL or empty", fn);
  CUBE_RETURN_IF_ERROR(cube__bundle_check_out(fn, out_info));
  char identity[512];
  cube__server_device_identity(c->server, identity, sizeof(identity));
  cube__bundle_head_t h;
  cube_status_t st =
      cube__bundle_export(path, cube_backend_name(c->server->id.backend), identity, &h);
  if (st) return cube__status_annotate(st, "%s", fn);
  return cube__bundle_info_out(fn, &h, out_info);
}

cube_status_t cube_bundle_describe(const char* path, cube_bundle_info_t* out_info) {
  static const char fn[] = "cube_bundle_describe";
  if (!path || !*path) return CUBE_INVALID("%s: path is NULL or empty", fn);
  CUBE__CHECK_OUT(out_info, fn, "out_info");
  CUBE_RETURN_IF_ERROR(cube__bundle_check_out(fn, out_info));
  cube__bundle_head_t h;
  cube_status_t st = cube__bundle_import(path, NULL, &h);
  if (st) return cube__status_annotate(st, "%s", fn);
  return cube__bundle_info_out(fn, &h, out_info);
}

cube_status_t cube_bundle_import(cube_client_t* c, const char* path, cube_bundle_info_t* out_info) {
  static const char fn[] = "cube_bundle_import";
  CUBE__CHECK_CLIENT(c, fn);
  if (!path || !*path) return CUBE_INVALID("%s: path is NULL or empty", fn);
  CUBE_RETURN_IF_ERROR(cube__bundle_check_out(fn, out_info));
  char identity[512];
  cube__server_device_identity(c->server, identity, sizeof(identity));
  cube__bundle_head_t h;
  cube_status_t st = cube__bundle_import(path, identity, &h);
  if (st) {
    /* What was read of the file still describes it (a refusal's why). */
    if (h.version[0]) cube_status_free(cube__bundle_info_out(fn, &h, out_info));
    return cube__status_annotate(st, "%s", fn);
  }
  return cube__bundle_info_out(fn, &h, out_info);
}
