/* The backend registry: one table per backend compiled in, and the public
 * device enumeration over it. Adding a backend is one case here (see
 * src/backends/null/null_backend.c). */
#include "backends/backend.h"

#include "base/status.h"

const cube__backend_vtable_t* cube__backend_get(cube_backend_t backend) {
  switch (backend) {
    case CUBE_BACKEND_CPU:
      return &cube__backend_cpu;
    case CUBE_BACKEND_NULL:
      return &cube__backend_null;
#ifdef CUBE_HAVE_CUDA
    case CUBE_BACKEND_CUDA:
      return &cube__backend_cuda;
#endif
#ifdef CUBE_HAVE_OPENCL
    case CUBE_BACKEND_OPENCL:
      return &cube__backend_opencl;
#endif
    default:
      return NULL;
  }
}

//===----------------------------------------------------------------------===//
// Enumeration
//===----------------------------------------------------------------------===//

#define CUBE__CHECK_OUT(p, fn, name) \
  do {                               \
    if (!(p)) return CUBE_INVALID("%s: %s is NULL", fn, name); \
  } while (0)

cube_status_t cube_backend_status(cube_backend_t backend) {
  if ((unsigned)backend >= CUBE_BACKEND_COUNT)
    return CUBE_INVALID("cube_backend_status: backend %d is invalid", (int)backend);
  const cube__backend_vtable_t* b = cube__backend_get(backend);
  if (!b)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "backend %s is not built into this library",
                             cube_backend_name(backend));
  return b->availability();
}

size_t cube_device_count(cube_backend_t backend) {
  const cube__backend_vtable_t* b =
      (unsigned)backend < CUBE_BACKEND_COUNT ? cube__backend_get(backend) : NULL;
  if (!b) return 0;
  cube_status_t st = b->availability();
  if (st) {
    cube_status_free(st);
    return 0;
  }
  return b->device_count();
}

size_t cube_device_count_total(void) {
  size_t n = 0;
  for (int b = 0; b < CUBE_BACKEND_COUNT; ++b) n += cube_device_count((cube_backend_t)b);
  return n;
}

cube_status_t cube_enumerate_devices(cube_backend_t backend, cube_device_id_t* out_ids,
                                     size_t capacity, size_t* out_count) {
  CUBE__CHECK_OUT(out_count, "cube_enumerate_devices", "out_count");
  if ((unsigned)backend >= CUBE_BACKEND_COUNT)
    return CUBE_INVALID("cube_enumerate_devices: backend %d is invalid", (int)backend);
  size_t n = cube_device_count(backend);
  for (size_t i = 0; i < n && out_ids && i < capacity; ++i)
    out_ids[i] = (cube_device_id_t){backend, (uint32_t)i};
  *out_count = n;
  return CUBE_OK;
}

cube_status_t cube_enumerate_all_devices(cube_device_id_t* out_ids, size_t capacity,
                                         size_t* out_count) {
  CUBE__CHECK_OUT(out_count, "cube_enumerate_all_devices", "out_count");
  size_t n = 0;
  for (int b = 0; b < CUBE_BACKEND_COUNT; ++b) {
    size_t k = cube_device_count((cube_backend_t)b);
    for (size_t i = 0; i < k; ++i, ++n)
      if (out_ids && n < capacity) out_ids[n] = (cube_device_id_t){(cube_backend_t)b, (uint32_t)i};
  }
  *out_count = n;
  return CUBE_OK;
}
