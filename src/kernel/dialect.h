/* The cube dialect: parsing a kernel's signature out of its source and
 * generating the translation unit each backend compiles (prelude + defines +
 * the user's source under #line + the backend's entry wrapper).
 * docs/dialect.md is the user-facing description.
 *
 * Pure functions; thread-safe.
 */
#ifndef CUBE_KERNEL_DIALECT_H_
#define CUBE_KERNEL_DIALECT_H_

#include <stdbool.h>
#include <stdint.h>

#include "cube/kernel.h"

typedef enum cube__target_e {
  CUBE__TARGET_CPU = 0,    /* host C compiled by cc into a shared object */
  CUBE__TARGET_CUDA = 1,   /* CUDA C for NVRTC */
  CUBE__TARGET_OPENCL = 2, /* OpenCL C 1.2 */
} cube__target_t;

typedef struct cube__param {
  char name[64];
  cube_arg_kind_t kind; /* CUBE_ARG_BUFFER for CUBE_ARRAY(T, name) */
  char type[48];        /* element type of an array ("float"), or the scalar type */
  bool is_const;        /* CUBE_ARRAY(const T, name) */
} cube__param_t;

typedef struct cube__signature {
  char entry[128];
  uint32_t count;
  cube__param_t params[CUBE_MAX_KERNEL_ARGS];
  uint32_t line;          /* line of CUBE_KERNEL(entry, ...) in the source */
  bool uses_sync_cube;    /* this kernel (or a helper) calls sync_cube(): on the CPU the
                             entry is split at barriers, or runs units as fibers */
} cube__signature_t;

/* Finds CUBE_KERNEL(entry, ...) in |source| and reads its parameters:
 * CUBE_ARRAY(T, name) is a buffer; a scalar is one of uint32_t, int32_t,
 * uint64_t, int64_t, float, double (also unsigned/int/long long spellings).
 * Errors are INVALID_ARGUMENT naming the entry, the line and the parameter. */
cube_status_t cube__dialect_parse(const char* source, const char* entry,
                                  cube__signature_t* out_signature);

/* The prelude of |target| (static text). */
const char* cube__dialect_prelude(cube__target_t target);

/* The whole translation unit for |target| (caller frees |*out_text|):
 *   "#define CUBE_MODE_{CHECKED,VALIDATE,UNCHECKED} 1" (the prelude reads it),
 *   the prelude, (CPU) layout _Static_asserts, the defines, the
 *   cube__argidx_<array> defines, "#line 1 \"<entry>.cube\"", the source, then
 *   the entry (docs/dialect.md, "What each backend compiles"):
 *   - CPU: `int cube_kernel_entry(const cube_cpu_cube_t*, const cube_cpu_arg_t*,
 *     uint32_t)` (the native kernel ABI of cube/kernel.h) running the units of
 *     one cube: a loop over units (vectorisable) or, when the kernel calls
 *     sync_cube, loops over units split at the barriers (per-unit locals in
 *     cube->scratch), or as a fallback one fiber per unit with stacks there;
 *   - CUDA: `extern "C" __global__ void cube_kernel_entry(...)`;
 *   - OpenCL: `__kernel void cube_kernel_entry(...)`.
 * Compiler messages then carry the user's line numbers. */
cube_status_t cube__dialect_generate(cube__target_t target, const cube__signature_t* signature,
                                     const char* source, const cube_define_t* defines,
                                     uint32_t define_count, cube_execution_mode_t mode,
                                     char** out_text);

/* Bytes of runtime scratch the CPU entry needs per worker for a cube of
 * |units| units (fiber stacks and contexts when the kernel uses sync_cube
 * and units > 1; 0 otherwise). Kernels whose defines may set
 * CUBE_CPU_FIBER_STACK need cube__dialect_cpu_scratch_size_defines. */
uint64_t cube__dialect_cpu_scratch_size(const cube__signature_t* signature, uint64_t units);

/* Additions (beyond the first contract) -------------------------------------- */

/* Bytes of fiber stack per unit: the value of a CUBE_CPU_FIBER_STACK define
 * (decimal, a multiple of 64, >= 4096) or the default, 16384. */
uint64_t cube__dialect_cpu_fiber_stack(const cube_define_t* defines, uint32_t define_count);

/* cube__dialect_cpu_scratch_size for a kernel whose defines may set
 * CUBE_CPU_FIBER_STACK (the runtime should call this one). */
uint64_t cube__dialect_cpu_scratch_size_defines(const cube__signature_t* signature, uint64_t units,
                                                const cube_define_t* defines,
                                                uint32_t define_count);

/* What a non-zero return of a generated CPU cube_kernel_entry means, for the
 * launch's error message: 1 scratch too small, 2 argument count mismatch,
 * 3 fiber stack overflow, 4 too many units. Static text. */
const char* cube__dialect_cpu_entry_error(int code);

#endif /* CUBE_KERNEL_DIALECT_H_ */
