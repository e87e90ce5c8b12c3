/* The backend registry: one table per backend compiled in. Adding a backend
 * is one case here (see src/backends/null/null_backend.c). */
#include "backends/backend.h"

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
