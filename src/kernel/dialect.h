/* The cube dialect: parsing a kernel's signature out of its source and
 * generating the translation unit each backend compiles (preludes + defines +
 * the user's source under #line + the backend's entry wrapper).
 * docs/dialect.md is the user-facing description.
 *
 * Every function here is pure and thread-safe: it reads its arguments, keeps
 * no state and writes only its out-parameters. Failures are cube_status_t
 * values (cube/status.h) the caller frees; a failed call leaves nothing to
 * free in its out-parameters. The files of the module (dialect_parse.c,
 * dialect_emit.c, dialect_split.c) share dialect_internal.h, which is not for
 * the rest of the library.
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

/* A plain value (no pointers): copy it freely. */
typedef struct cube__signature {
  char entry[128];
  uint32_t count;
  cube__param_t params[CUBE_MAX_KERNEL_ARGS];
  uint32_t line;          /* line of CUBE_KERNEL(entry, ...) in the source */
  bool uses_sync_cube;    /* this kernel (or a helper) calls sync_cube(): on the CPU the
                             entry is split at barriers, or runs units as fibers */
} cube__signature_t;

/* Finds CUBE_KERNEL(entry, ...) in |source| and reads its parameters into
 * |*out_signature|: CUBE_ARRAY(T, name) is a buffer; a scalar is one of
 * uint32_t, int32_t, uint64_t, int64_t, float, double (also unsigned/int/long
 * long spellings). Comments and string literals are ignored.
 * Fails with INVALID_ARGUMENT (NULL arguments, an entry that is no C
 * identifier or not in the source, a malformed parameter; the message names
 * the entry, the line and the parameter) or OUT_OF_MEMORY; |*out_signature|
 * is then unspecified. */
cube_status_t cube__dialect_parse(const char* source, const char* entry,
                                  cube__signature_t* out_signature);

/* The target's own prelude, src/kernel/preludes/<target>.h (static text, never
 * freed); NULL for an unknown target. A generated unit carries the common
 * prelude (preludes/common.h: the execution modes' accessors, the derived
 * positions) before it. */
const char* cube__dialect_prelude(cube__target_t target);

/* The whole translation unit for |target|, in a malloc'd |*out_text| the
 * caller frees (NULL on failure):
 *   "#define CUBE_MODE_{CHECKED,VALIDATE,UNCHECKED} 1" (the preludes read it),
 *   the common prelude, the target's prelude, (CPU) layout _Static_asserts,
 *   the defines, the cube__argidx_<array> defines, "#line 1 \"<entry>.cube\"",
 *   the source, then the entry (docs/dialect.md, "What each backend compiles"):
 *   - CPU: `int cube_kernel_entry(const cube_cpu_cube_t*, const cube_cpu_arg_t*,
 *     uint32_t)` (the native kernel ABI of cube/kernel.h) running the units of
 *     one cube: a loop over units (vectorisable) or, when the kernel calls
 *     sync_cube, loops over units split at the barriers (per-unit locals in
 *     cube->scratch), or as a fallback one fiber per unit with stacks there;
 *   - CUDA: `extern "C" __global__ void cube_kernel_entry(...)`;
 *   - OpenCL: `__kernel void cube_kernel_entry(...)` (the entry's arrays take
 *     a byte offset; the rewrite keeps every line and column where it was).
 * Compiler messages about the source then carry the user's lines and columns
 * (cube__dialect_log_filter drops or rewrites the rest).
 * Fails with INVALID_ARGUMENT (NULL arguments, an unknown target or mode, a
 * malformed signature, a define that is no identifier or whose value has a
 * line break, a CUBE_CPU_FIBER_STACK that is not a decimal multiple of 64 of
 * at least 4096) or OUT_OF_MEMORY. */
cube_status_t cube__dialect_generate(cube__target_t target, const cube__signature_t* signature,
                                     const char* source, const cube_define_t* defines,
                                     uint32_t define_count, cube_execution_mode_t mode,
                                     char** out_text);

/* A text the log filter writes differently: a temporary path, the name the
 * backend gave the unit. */
typedef struct cube__log_alias {
  const char* from;
  const char* to;
} cube__log_alias_t;

/* The compiler's log |log| of the unit cube__dialect_generate made for the
 * kernel |entry| of |source|, rewritten to name the user's file
 * "<entry>.cube" only (docs/errors.md, "Kernel compile errors"): every
 * diagnostic at the user's lines is kept in the compiler's words as
 * "<entry>.cube:<line>:<col>: <severity>: <message>" with the lines quoted
 * under it (PoCL's and NVRTC's layouts are rewritten so; NVRTC's column is
 * read from its caret); an error reported inside the preludes or generated
 * code takes the location of the first note after it at the user's lines
 * (gcc's "in expansion of macro"), or, when no error of the log is at the
 * user's lines, is kept without a line and quoted code; notes pointing
 * elsewhere, error counts ("2 errors generated.") and repeats are dropped;
 * the generator's names (cube__kernel_<entry>, cube_kernel_entry, the OpenCL
 * rewrite's CUBE__EARR) read as the user's, and every |aliases| text (of
 * |alias_count|) is replaced. Malloc'd (the caller frees it); NULL for a NULL
 * |log| or |entry| or when out of host memory. */
char* cube__dialect_log_filter(const char* log, const char* entry, const char* source,
                               const cube__log_alias_t* aliases, uint32_t alias_count);

/* Bytes of cube->scratch the generated CPU entry of |signature|'s kernel,
 * generated with |defines| (|define_count| of them; NULL when 0), needs per
 * worker for a cube of |units| units: 0 when the kernel does not use
 * sync_cube or units <= 1 (one unit runs on the worker's stack), else the
 * fiber layout of preludes/cpu.h, 64 bytes of alignment, 12 bytes per unit
 * rounded up to 64, then CUBE_CPU_FIBER_STACK bytes per unit (the define, or
 * 16384 when it is absent or invalid). The split entry asks for the same, so
 * the kernel behaves the same either way. 0 for a NULL signature; never
 * fails. */
uint64_t cube__dialect_cpu_scratch_size(const cube__signature_t* signature, uint64_t units,
                                        const cube_define_t* defines, uint32_t define_count);

/* What a non-zero return of a generated CPU cube_kernel_entry means, for the
 * launch's error message: 1 scratch too small, 2 argument count mismatch,
 * 3 fiber stack overflow, 4 too many units; any other code "the kernel
 * failed". Static text, never NULL. */
const char* cube__dialect_cpu_entry_error(int code);

#endif /* CUBE_KERNEL_DIALECT_H_ */
