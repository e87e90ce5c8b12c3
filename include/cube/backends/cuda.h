/* cube/backends/cuda.h: what is particular to the CUDA backend. */
#ifndef CUBE_BACKENDS_CUDA_H_
#define CUBE_BACKENDS_CUDA_H_

#include <stdbool.h>
#include <stdint.h>

#include "cube/device.h"
#include "cube/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA device parameters (cube_server_options_t.backend_params) ---------- */

/* Which staging copies use non-temporal stores (CUBE_CUDA_STREAM_COPY's
 * words down, up, 1, 0 in this order). */
typedef enum cube_cuda_stream_copy_e {
  CUBE_CUDA_STREAM_COPY_DOWN = 0, /* downloads only: where it pays (docs/benchmarks.md) */
  CUBE_CUDA_STREAM_COPY_UP = 1,
  CUBE_CUDA_STREAM_COPY_BOTH = 2,
  CUBE_CUDA_STREAM_COPY_NONE = 3,
} cube_cuda_stream_copy_t;

/* The parameters of one CUDA device, given to cube_client_init through
 * cube_server_options_t.backend_params (see cube_backend_params_header_t in
 * cube/options.h for the contract). cube_cuda_params_initialize fills them
 * from the option table, so a field left alone keeps the environment's
 * value. Without parameters a device takes the same defaults. */
typedef struct cube_cuda_params {
  uint32_t struct_size;   /* sizeof(cube_cuda_params_t) */
  cube_backend_t backend; /* CUBE_BACKEND_CUDA */
  /* Bytes per pinned staging chunk: 64 KiB to 64 MiB, a multiple of 4 KiB
   * (CUBE_CUDA_STAGING_CHUNK, default 4 MiB). The ring holds at most 128 MiB
   * (and 4 to 64 chunks). */
  uint64_t staging_chunk;
  /* Threads that share the host copies of one large transfer: 1 to 256, at
   * most the worker pool's (larger values use the whole pool); 0 = up to 16
   * (CUBE_CUDA_COPY_THREADS, default 0). */
  uint32_t copy_threads;
  cube_cuda_stream_copy_t stream_copy; /* CUBE_CUDA_STREAM_COPY, default DOWN */
  /* Stream-ordered cuMemAllocAsync where the GPU has memory pools; false:
   * plain cuMemAlloc pages (CUBE_CUDA_ASYNC_ALLOC, default true). */
  bool async_alloc;
} cube_cuda_params_t;

/* Fills |params| with struct_size, backend and the option table's values
 * (CUBE_CUDA_STAGING_CHUNK, CUBE_CUDA_COPY_THREADS, CUBE_CUDA_STREAM_COPY,
 * CUBE_CUDA_ASYNC_ALLOC; a malformed environment value gives the default,
 * and cube_client_init reports it). Available whether or not the CUDA
 * backend is built. Thread-safe; NULL is ignored. */
void cube_cuda_params_initialize(cube_cuda_params_t* params);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_BACKENDS_CUDA_H_ */
