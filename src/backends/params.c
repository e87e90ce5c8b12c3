/* Backend parameters: the public initializers (cube/backends/<name>.h) and
 * the header checks (params.h). */
#include "backends/params.h"

#include <stdio.h>
#include <string.h>

#include "base/options.h"
#include "base/status.h"
#include "cube/backends/cpu.h"
#include "cube/backends/cuda.h"

void cube_cpu_params_initialize(cube_cpu_params_t* params) {
  if (!params) return;
  memset(params, 0, sizeof(*params));
  params->struct_size = (uint32_t)sizeof(*params);
  params->backend = CUBE_BACKEND_CPU;
  params->threads = 0;
}

void cube_cuda_params_initialize(cube_cuda_params_t* params) {
  if (!params) return;
  memset(params, 0, sizeof(*params));
  params->struct_size = (uint32_t)sizeof(*params);
  params->backend = CUBE_BACKEND_CUDA;
  params->staging_chunk = cube__option_size(CUBE__OPT_CUDA_STAGING_CHUNK);
  params->copy_threads = cube__option_has_value(CUBE__OPT_CUDA_COPY_THREADS)
                             ? cube__option_u32(CUBE__OPT_CUDA_COPY_THREADS)
                             : 0;
  /* CUBE_CUDA_STREAM_COPY's words are cube_cuda_stream_copy_t's, in order. */
  params->stream_copy = (cube_cuda_stream_copy_t)cube__option_enum(CUBE__OPT_CUDA_STREAM_COPY);
  params->async_alloc = cube__option_bool(CUBE__OPT_CUDA_ASYNC_ALLOC);
}

static const char* cube__params_backend_name(cube_backend_t b) {
  const char* n = cube_backend_name(b);
  return n ? n : "unknown";
}

cube_status_t cube__backend_params_check_header(const void* params, cube_device_id_t device) {
  if (!params) return CUBE_OK;
  cube_backend_params_header_t h;
  memcpy(&h, params, sizeof(h));
  if (h.struct_size < sizeof(h))
    return CUBE_INVALID("backend_params: struct_size %u is smaller than its header (%zu bytes); "
                        "fill the struct with cube_<backend>_params_initialize",
                        h.struct_size, sizeof(h));
  if (h.backend != device.backend)
    return CUBE_INVALID("backend_params are for backend %s (tag %d), the device is %s:%u",
                        cube__params_backend_name(h.backend), (int)h.backend,
                        cube__params_backend_name(device.backend), device.index);
  return CUBE_OK;
}

cube_status_t cube__backend_params_take(const cube_server_options_t* options,
                                        cube_backend_t backend, const char* what,
                                        size_t min_size, size_t size, void* out) {
  if (!options || !options->backend_params) return CUBE_OK;
  cube_backend_params_header_t h;
  memcpy(&h, options->backend_params, sizeof(h));
  if (h.backend != backend)
    return CUBE_INVALID("%s: backend_params are for backend %s (tag %d), not %s", what,
                        cube__params_backend_name(h.backend), (int)h.backend,
                        cube__params_backend_name(backend));
  if (h.struct_size < min_size || h.struct_size > size)
    return CUBE_INVALID("%s: backend_params.struct_size is %u; cube_%s_params_t is %zu bytes%s "
                        "(fill it with cube_%s_params_initialize)",
                        what, h.struct_size, cube__params_backend_name(backend), size,
                        min_size < size ? " or an earlier version's size" : "",
                        cube__params_backend_name(backend));
  memcpy(out, options->backend_params, h.struct_size);
  return CUBE_OK;
}
