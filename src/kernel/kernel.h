/* Kernel objects (internal layout). Immutable after cube_kernel_create, but
 * for the reference count and the caches filled once: compiled forms and
 * the memo of compiled limits. */
#ifndef CUBE_KERNEL_KERNEL_H_
#define CUBE_KERNEL_KERNEL_H_

#include <stdatomic.h>

#include "base/abi.h"
#include "cube/backends/cpu.h"
#include "cube/kernel.h"

struct cube__signature;

/* One device's answer to "what does the compiled kernel allow": written once
 * by the first launch that asked (|device| goes 0 -> CUBE__LIMITS_WRITING ->
 * the device's index + 1, published with release after the fields), then
 * only read. A launch on another device asks the backend each time. */
#define CUBE__LIMITS_WRITING UINT32_MAX
typedef struct cube__kernel_limits_memo {
  _Atomic uint32_t device;
  uint32_t max_units;
  uint64_t local_memory;
  uint64_t max_local_memory;
} cube__kernel_limits_memo_t;

struct cube_kernel_s {
  /* Every launch takes a reference on the caller's thread and the runner
   * drops it: the count has a cache line of its own, so that the runner's
   * release does not evict the fields below, which every launch reads. */
  _Alignas(64) atomic_uint refs;
  _Alignas(64) uint64_t id;                 /* process-unique, for profiles and cache keys */
  char* name;
  cube_dim_t cube_dim;         /* normalised: no zero component */
  uint32_t arg_count;
  cube_arg_kind_t arg_kinds[CUBE_MAX_KERNEL_ARGS];
  /* The buffer arguments a launch may write (bit i: argument i): every buffer
   * but the dialect's CUBE_ARRAY(const T, x) and desc->read_only_args. A
   * failed or skipped launch taints these (src/server/taint.c). */
  uint64_t written_args;
  uint64_t shared_memory_size;
  cube_cpu_kernel_fn cpu_fn;
  /* Dialect kernels (source != NULL, cpu_fn == NULL). */
  char* source;
  char* entry;
  cube_define_t* defines;           /* copies, sorted by name (one key per set) */
  uint32_t define_count;
  struct cube__signature* signature; /* parsed at creation */
  /* Bytes of one element of each CUBE_ARRAY parameter whose type is a C
   * scalar (a define of the kernel naming one counts), 0 when not known (a
   * typedef, a struct): a launch with a smaller buffer is refused. */
  uint32_t elem_size[CUBE_MAX_KERNEL_ARGS];
  /* Compiled forms per backend and execution mode, filled by the backend on
   * first use; they belong to the process-wide kernel cache, not to the
   * kernel (several kernel objects of one source share them). */
  _Atomic(void*) compiled[CUBE__BACKEND_COUNT][3];
  /* The compiled kernel's own limits per backend and execution mode, as the
   * first device that launched it reported them (cube__server_kernel_limits):
   * later launches on that device read them without a lock or a lookup. */
  cube__kernel_limits_memo_t limits[CUBE__BACKEND_COUNT][3];
};

/* The name of parameter |i| of a dialect kernel ("arg<i>" for native ones). */
const char* cube__kernel_param_name(const cube_kernel_t* k, uint32_t i, char buf[16]);

/* The LAUNCH_FAILED status of a Validate-mode launch whose bounds record |b|
 * has its flag set: "launch of kernel '<name>' (Validate mode): out-of-bounds
 * read of argument 1 ('x', 37 elements) at index 40". Every backend's bounds
 * record has this layout (the GPU preludes write it as 8 u32 words). */
cube_status_t cube__kernel_bounds_status(const cube_kernel_t* k, const char* name,
                                         const cube_bounds_error_t* b);

#endif /* CUBE_KERNEL_KERNEL_H_ */
