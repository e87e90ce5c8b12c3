/* What cpu_backend.c (devices, storage, launches) shares with cpu_graph.c
 * (native graphs): a launch checked and resolved once, run as often as
 * needed. Nothing outside src/backends/cpu/ includes it. */
#ifndef CUBE_BACKENDS_CPU_INTERNAL_H_
#define CUBE_BACKENDS_CPU_INTERNAL_H_

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_fault_guard.h"
#include "cube/backends/cpu.h"
#include "cube/kernel.h"

/* A launch after its checks: the kernel's function, the arguments in the
 * native kernel ABI and the figures the cube loop needs. */
typedef struct cube__cpu_prepared {
  const cube_kernel_t* kernel;
  const char* name;
  cube_cpu_kernel_fn fn;
  const cube_cpu_arg_t* args; /* |arg_count| entries, the preparer's storage */
  uint32_t arg_count;
  uint32_t count[3];
  uint32_t dim[3];
  cube_execution_mode_t mode;
  uint64_t shared_size;  /* user cube-local memory (native kernels) */
  uint64_t scratch_size; /* runtime scratch (fiber stacks of dialect kernels) */
  uint64_t total;        /* cubes; 0: nothing to run */
  uint64_t min_chunk;    /* cubes a worker takes at least */
} cube__cpu_prepared_t;

/* Checks |l| against the device's limits, finds (or compiles) its function
 * and writes its arguments into |args| (CUBE_MAX_KERNEL_ARGS entries at
 * most, l->arg_count used): the launch slot's checks and failures, nothing
 * run. */
cube_status_t cube__cpu_prepare_launch(cube__backend_device_t* dev, const cube__launch_t* l,
                                       cube_cpu_arg_t* args, cube__cpu_prepared_t* out);

/* Runs a prepared launch to its end on the calling thread, the pool's
 * threads helping: the launch slot's run and failures. */
cube_status_t cube__cpu_run_prepared(cube__backend_device_t* dev, const cube__cpu_prepared_t* p);

/* The LAUNCH_FAILED status of |p| whose cube |pos| returned |code|. */
cube_status_t cube__cpu_kernel_failed(const cube__cpu_prepared_t* p, const uint32_t pos[3],
                                      int code);

/* Whether |p| may run as a plain loop over its cubes on the calling thread:
 * one chunk (the pool would not help), no cube-local memory or scratch
 * (which come from the device's per-participant areas), and no fault guard. */
static inline bool cube__cpu_prepared_direct(const cube__cpu_prepared_t* p) {
  return p->total <= p->min_chunk && p->shared_size == 0 && p->scratch_size == 0 &&
         p->mode != CUBE_EXEC_VALIDATE && !cube__cpu_guard_wanted();
}

/* The write and copy slots (cpu_backend.c). */
cube_status_t cube__cpu_write(cube__backend_device_t* dev, void* stream,
                              const cube__storage_t* dst, uint64_t dst_offset, uint64_t pitch,
                              const void* src, uint64_t width, uint64_t height);
cube_status_t cube__cpu_copy(cube__backend_device_t* dev, void* stream, const cube__storage_t* dst,
                             uint64_t dst_offset, const cube__storage_t* src, uint64_t src_offset,
                             uint64_t bytes);

/* The graph slots (cpu_graph.c): the nodes resolved once into prepared
 * launches, writes and copies, run in order on the calling thread. */
cube_status_t cube__cpu_graph_create(cube__backend_device_t* dev,
                                     const cube__graph_node_desc_t* nodes, size_t count,
                                     void** out_graph);
cube_status_t cube__cpu_graph_update(cube__backend_device_t* dev, void* graph, size_t index,
                                     const cube__graph_node_desc_t* node);
cube_status_t cube__cpu_graph_launch(cube__backend_device_t* dev, void* stream, void* graph,
                                     cube__graph_node_failed_fn node_failed, void* user);
void cube__cpu_graph_destroy(cube__backend_device_t* dev, void* graph);

#endif /* CUBE_BACKENDS_CPU_INTERNAL_H_ */
