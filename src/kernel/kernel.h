/* Kernel objects (internal layout). Immutable after cube_kernel_create. */
#ifndef CUBE_KERNEL_KERNEL_H_
#define CUBE_KERNEL_KERNEL_H_

#include <stdatomic.h>

#include "cube/kernel.h"

struct cube_kernel_s {
  atomic_uint refs;
  uint64_t id;                 /* process-unique, for profiles and cache keys */
  char* name;
  cube_dim_t cube_dim;         /* normalised: no zero component */
  uint32_t arg_count;
  cube_arg_kind_t arg_kinds[CUBE_MAX_KERNEL_ARGS];
  uint64_t shared_memory_size;
  cube_cpu_kernel_fn cpu_fn;
};

#endif /* CUBE_KERNEL_KERNEL_H_ */
