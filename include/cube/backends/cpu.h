/* cube/backends/cpu.h: what is particular to the CPU backend. */
#ifndef CUBE_BACKENDS_CPU_H_
#define CUBE_BACKENDS_CPU_H_

#include <stdint.h>

#include "cube/device.h"
#include "cube/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CPU device parameters (cube_server_options_t.backend_params) ----------- */

/* The parameters of one CPU device, given to cube_client_init through
 * cube_server_options_t.backend_params (see cube_backend_params_header_t in
 * cube/options.h for the contract). Every logical CPU device shares the
 * process's worker pool (CUBE_CPU_THREADS threads); what is per device is
 * how much of it the device's launches use. */
typedef struct cube_cpu_params {
  uint32_t struct_size;   /* sizeof(cube_cpu_params_t) */
  cube_backend_t backend; /* CUBE_BACKEND_CPU */
  /* Most threads one launch of this device runs on, the calling runner
   * included: 0 = all of the pool's; more than the pool has = all of them;
   * at most 1024. The device's properties report it (num_cpu_cores). */
  uint32_t threads;
} cube_cpu_params_t;

/* Fills |params| with the defaults (struct_size, backend, threads 0: the
 * whole pool). Thread-safe; NULL is ignored. */
void cube_cpu_params_initialize(cube_cpu_params_t* params);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_BACKENDS_CPU_H_ */
