/* cube/backends/cpu.h: the CPU backend's native-kernel ABI and the
 * parameters of a CPU device.
 *
 * A native CPU kernel is a C function (cube_kernel_desc_t.cpu_fn) that the
 * CPU backend calls once per cube, with the cube's position, on one of its
 * worker threads; the function loops over the units of the cube itself. It
 * returns 0, or a non-zero code that fails the launch (reported by the next
 * flush/sync/read on the stream: docs/cubecl.md, "Deferred errors"). Cubes of one launch run
 * concurrently on several workers, in no particular order.
 *
 * Ownership and lifetime: everything a kernel is handed (the cube record, the
 * argument array, the memory the buffer arguments point to, the shared and
 * scratch areas) is valid for that call only; the kernel must not keep
 * pointers to it. Buffer arguments point into device memory the launch holds.
 *
 * The layouts below are an ABI: the dialect compiler of the CPU backend
 * emits the same layouts for compiled kernels, and fields are only ever
 * added at the end.
 */
#ifndef CUBE_BACKENDS_CPU_H_
#define CUBE_BACKENDS_CPU_H_

#include <stdint.h>

#include "cube/device.h"
#include "cube/kernel.h"
#include "cube/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Native kernel ABI -------------------------------------------------------- */

/* A resolved argument as a native kernel sees it; the kernel's arg_kinds say
 * which member is set. */
typedef union cube_cpu_arg {
  struct {
    void* data;   /* start of the handle's view */
    uint64_t len; /* bytes in the view */
  } buffer;
  uint32_t u32;
  int32_t i32;
  uint64_t u64;
  int64_t i64;
  float f32;
  double f64;
} cube_cpu_arg_t;

/* Where a kernel compiled in Validate mode records its first out-of-bounds
 * access (the launch then fails naming the kernel, argument and index). */
typedef struct cube_bounds_error {
  uint32_t flag;     /* 0 = none; set once, atomically */
  uint32_t arg;      /* argument index */
  uint64_t index;    /* element index accessed */
  uint64_t len;      /* elements in the argument */
  uint32_t is_write; /* 1 for a store */
  uint32_t reserved;
} cube_bounds_error_t;

/* The cube a call runs, and the launch around it. */
typedef struct cube_cpu_cube {
  uint32_t cube_pos[3];   /* this cube */
  uint32_t cube_count[3]; /* cubes in the launch */
  uint32_t cube_dim[3];   /* units per cube */
  cube_execution_mode_t mode;
  void* shared;           /* cube-local scratch of the kernel's shared_memory_size */
  uint64_t shared_size;
  uint32_t worker;        /* participant number: unique among the threads running this
                             launch at once, < num_cpu_cores (not a fixed thread id) */
  cube_bounds_error_t* bounds; /* Validate mode: where to record an out-of-bounds access */
  void* scratch;          /* runtime scratch for compiled kernels (fiber stacks) */
  uint64_t scratch_size;
} cube_cpu_cube_t;

/* A native CPU kernel: the type of cube_kernel_desc_t.cpu_fn. Returns 0 on
 * success; any other value fails the launch. Called concurrently for the
 * cubes of a launch: it must be thread-safe with respect to itself. */
typedef int (*cube_cpu_kernel_fn)(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args,
                                  uint32_t arg_count);

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
