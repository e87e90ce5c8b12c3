/* The backend registry: one line per backend compiled in, and the public
 * device enumeration over it. Adding a backend is one line in the table
 * below (src/backends/null/README.md has the whole recipe). */
#include "backends/backend.h"

#include <stddef.h>

#include "base/abi.h"
#include "base/options.h"
#include "base/status.h"

static const cube__backend_vtable_t* const cube__registry[CUBE__BACKEND_COUNT] = {
    [CUBE_BACKEND_CPU] = &cube__backend_cpu,
#ifdef CUBE_HAVE_CUDA
    [CUBE_BACKEND_CUDA] = &cube__backend_cuda,
#endif
#ifdef CUBE_HAVE_OPENCL
    [CUBE_BACKEND_OPENCL] = &cube__backend_opencl,
#endif
    [CUBE_BACKEND_NULL] = &cube__backend_null,
};

const cube__backend_vtable_t* cube__backend_get(cube_backend_t backend) {
  if ((unsigned)backend >= (unsigned)CUBE__BACKEND_COUNT) return NULL;
  return cube__registry[backend];
}

cube_status_t cube__backend_validate(const cube__backend_vtable_t* vt) {
  if (!vt) return cube__status_make(CUBE_STATUS_UNAVAILABLE, "no backend table");
  const char* name = vt->name ? vt->name : "?";
  if (vt->api_version != CUBE__BACKEND_API_VERSION)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "backend %s: its table has API version %u, this library uses %u",
                             name, vt->api_version, CUBE__BACKEND_API_VERSION);
  const char* missing = !vt->name             ? "name"
                        : !vt->availability   ? "availability"
                        : !vt->device_count   ? "device_count"
                        : !vt->device_create  ? "device_create"
                        : !vt->device_destroy ? "device_destroy"
                        : !vt->alloc          ? "alloc"
                        : !vt->dealloc        ? "dealloc"
                        : !vt->write          ? "write"
                        : !vt->read           ? "read"
                        : !vt->launch         ? "launch"
                        : NULL;
  bool events = vt->event_record || vt->event_wait || vt->event_done || vt->event_sync ||
                vt->event_destroy;
  bool all_events = vt->event_record && vt->event_wait && vt->event_done && vt->event_sync &&
                    vt->event_destroy;
  if (!missing && events && !all_events) missing = "one of the event slots (all or none)";
  if (!missing && (vt->alloc_on != NULL) != (vt->dealloc_on != NULL))
    missing = "alloc_on or dealloc_on (both or neither)";
  if (!missing && (vt->host_alloc != NULL) != (vt->host_dealloc != NULL))
    missing = "host_alloc or host_dealloc (both or neither)";
  bool graphs = vt->graph_create || vt->graph_update || vt->graph_launch || vt->graph_destroy;
  bool all_graphs = vt->graph_create && vt->graph_update && vt->graph_launch && vt->graph_destroy;
  if (!missing && graphs && !all_graphs) missing = "one of the graph slots (all or none)";
  if (missing)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "backend %s: its table lacks %s", name,
                             missing);
  return CUBE_OK;
}

cube_backend_t cube__backend_with_caps(uint32_t caps) {
  for (int b = 0; b < CUBE__BACKEND_COUNT; ++b) {
    const cube__backend_vtable_t* vt = cube__registry[b];
    if (vt && (vt->caps & caps) == caps) return (cube_backend_t)b;
  }
  return CUBE_BACKEND_NONE;
}

/* cube_backend_status without the option check: counting returns no
 * status, so a malformed option counts as unset there. */
static cube_status_t cube__backend_status(cube_backend_t backend) {
  if ((unsigned)backend >= CUBE__BACKEND_COUNT)
    return CUBE_INVALID("cube_backend_status: backend %d is invalid", (int)backend);
  const cube__backend_vtable_t* b = cube__backend_get(backend);
  if (!b)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "backend %s is not built into this library",
                             cube_backend_name(backend));
  CUBE_RETURN_IF_ERROR(cube__backend_validate(b));
  return b->availability();
}

/* Devices of |backend|: 0 when it is not compiled in, out of range or
 * unavailable. */
static size_t cube__backend_count_devices(cube_backend_t backend) {
  const cube__backend_vtable_t* b =
      (unsigned)backend < CUBE__BACKEND_COUNT ? cube__backend_get(backend) : NULL;
  if (!b) return 0;
  cube_status_t st = cube__backend_status(backend);
  if (st) {
    cube_status_free(st);
    return 0;
  }
  return b->device_count();
}

uint32_t cube__backend_device_count(cube_backend_t backend) {
  return (uint32_t)cube__backend_count_devices(backend);
}

//===----------------------------------------------------------------------===//
// Enumeration
//===----------------------------------------------------------------------===//

cube_status_t cube_backend_status(cube_backend_t backend) {
  CUBE_RETURN_IF_ERROR(cube__options_check("cube_backend_status"));
  return cube__backend_status(backend);
}

/* The deprecated spellings of counting (cube/device.h). */
size_t cube_device_count(cube_backend_t backend) { return cube__backend_count_devices(backend); }

size_t cube_device_count_total(void) {
  size_t n = 0;
  for (int b = 0; b < CUBE__BACKEND_COUNT; ++b) n += cube__backend_count_devices((cube_backend_t)b);
  return n;
}

cube_status_t cube_enumerate_devices(cube_backend_t backend, cube_device_id_t* out_ids,
                                     size_t capacity, size_t* out_count) {
  CUBE__CHECK_OUT(out_count, "cube_enumerate_devices", "out_count");
  CUBE_RETURN_IF_ERROR(cube__options_check("cube_enumerate_devices"));
  if ((unsigned)backend >= CUBE__BACKEND_COUNT)
    return CUBE_INVALID("cube_enumerate_devices: backend %d is invalid", (int)backend);
  size_t n = cube__backend_count_devices(backend);
  for (size_t i = 0; i < n && out_ids && i < capacity; ++i)
    out_ids[i] = (cube_device_id_t){backend, (uint32_t)i};
  *out_count = n;
  return CUBE_OK;
}

cube_status_t cube_enumerate_all_devices(cube_device_id_t* out_ids, size_t capacity,
                                         size_t* out_count) {
  CUBE__CHECK_OUT(out_count, "cube_enumerate_all_devices", "out_count");
  CUBE_RETURN_IF_ERROR(cube__options_check("cube_enumerate_all_devices"));
  size_t n = 0;
  for (int b = 0; b < CUBE__BACKEND_COUNT; ++b) {
    size_t k = cube__backend_count_devices((cube_backend_t)b);
    for (size_t i = 0; i < k; ++i, ++n)
      if (out_ids && n < capacity) out_ids[n] = (cube_device_id_t){(cube_backend_t)b, (uint32_t)i};
  }
  *out_count = n;
  return CUBE_OK;
}
