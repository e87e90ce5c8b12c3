/* cube/kernel.h: kernels, launch arguments, cube counts and dimensions.
 *
 * Vocabulary (CubeCL's): a unit is a thread, a cube is a block/work-group, a
 * plane is a warp/sub-group. A launch runs count.x*count.y*count.z cubes of
 * dim.x*dim.y*dim.z units.
 *
 * Two kinds of kernel:
 *  - dialect kernels: source text in the cube dialect (docs/dialect.md),
 *    compiled by each backend on first launch (or cube_client_precompile)
 *    and kept in the kernel cache (cube/cache.h);
 *  - native CPU kernels: a C function called once per cube by the CPU
 *    backend; their ABI (cube_cpu_kernel_fn and the records it is handed) is
 *    in cube/backends/cpu.h.
 *
 * Ownership: cube_kernel_create returns a kernel with one reference, owned by
 * the caller (cube_kernel_retain / cube_kernel_release). A launch holds its
 * own reference until it ran, so a kernel may be released right after
 * queuing it. Kernels are immutable after creation; they belong to no device
 * and may be launched on any.
 *
 * Thread safety: every function here is thread-safe, and a kernel may be
 * used from several threads at once.
 */
#ifndef CUBE_KERNEL_H_
#define CUBE_KERNEL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/device.h"
#include "cube/handle.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube_dim {
  uint32_t x, y, z;
} cube_dim_t;

typedef enum cube_count_kind_e {
  CUBE_COUNT_STATIC = 0,
  CUBE_COUNT_DYNAMIC = 1, /* three u32 {x,y,z} read from |handle| when the launch runs */
} cube_count_kind_t;

typedef struct cube_count {
  cube_count_kind_t kind;
  uint32_t x, y, z;     /* static */
  cube_handle_t handle; /* dynamic: borrowed for the call */
} cube_count_t;

/* A static count of x*y*z cubes; a dynamic one read from |h| (three u32 in
 * its first 12 bytes) when the launch runs. Plain values. */
static inline cube_count_t cube_count_static(uint32_t x, uint32_t y, uint32_t z) {
  cube_count_t c = {CUBE_COUNT_STATIC, x, y, z, {0}};
  return c;
}
static inline cube_count_t cube_count_dynamic(cube_handle_t h) {
  cube_count_t c = {CUBE_COUNT_DYNAMIC, 0, 0, 0, h};
  return c;
}

typedef enum cube_execution_mode_e {
  CUBE_EXEC_CHECKED = 0,   /* out-of-bounds reads give 0, writes are dropped */
  CUBE_EXEC_VALIDATE = 1,  /* out-of-bounds access is reported as an error */
  CUBE_EXEC_UNCHECKED = 2, /* no bounds checks */
} cube_execution_mode_t;

typedef enum cube_arg_kind_e {
  CUBE_ARG_BUFFER = 0,
  CUBE_ARG_U32 = 1,
  CUBE_ARG_I32 = 2,
  CUBE_ARG_U64 = 3,
  CUBE_ARG_I64 = 4,
  CUBE_ARG_F32 = 5,
  CUBE_ARG_F64 = 6,
} cube_arg_kind_t;

/* "buffer", "u32", ...: a static string; "unknown" for an invalid value. */
const char* cube_arg_kind_name(cube_arg_kind_t kind);

/* One launch argument: the kind says which member is set. Handles are
 * borrowed for the call; the launch keeps the memory alive until it ran. */
typedef struct cube_arg {
  cube_arg_kind_t kind;
  union {
    cube_handle_t buffer;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
  } v;
} cube_arg_t;

/* Launch arguments of each kind (plain values; a buffer argument borrows the
 * handle for the launch call). */
static inline cube_arg_t cube_arg_buffer(cube_handle_t h) {
  cube_arg_t a;
  a.kind = CUBE_ARG_BUFFER;
  a.v.buffer = h;
  return a;
}
static inline cube_arg_t cube_arg_u32(uint32_t x) {
  cube_arg_t a;
  a.kind = CUBE_ARG_U32;
  a.v.u32 = x;
  return a;
}
static inline cube_arg_t cube_arg_i32(int32_t x) {
  cube_arg_t a;
  a.kind = CUBE_ARG_I32;
  a.v.i32 = x;
  return a;
}
static inline cube_arg_t cube_arg_u64(uint64_t x) {
  cube_arg_t a;
  a.kind = CUBE_ARG_U64;
  a.v.u64 = x;
  return a;
}
static inline cube_arg_t cube_arg_i64(int64_t x) {
  cube_arg_t a;
  a.kind = CUBE_ARG_I64;
  a.v.i64 = x;
  return a;
}
static inline cube_arg_t cube_arg_f32(float x) {
  cube_arg_t a;
  a.kind = CUBE_ARG_F32;
  a.v.f32 = x;
  return a;
}
static inline cube_arg_t cube_arg_f64(double x) {
  cube_arg_t a;
  a.kind = CUBE_ARG_F64;
  a.v.f64 = x;
  return a;
}

/* The native CPU kernel ABI is in cube/backends/cpu.h; the descriptor below
 * names its types through these tags. */
struct cube_cpu_cube;
union cube_cpu_arg;

/* Kernels ----------------------------------------------------------------- */

typedef struct cube_kernel_s cube_kernel_t;

#define CUBE_MAX_KERNEL_ARGS 64

/* A compile-time define (CubeCL's comptime): "#define name value". */
typedef struct cube_define {
  const char* name;  /* a C identifier */
  const char* value; /* may be NULL or "" (defined, empty) */
} cube_define_t;

/* What cube_kernel_create makes a kernel from (an input struct, see
 * cube/cube.h, "Struct sizes": fill it with cube_kernel_desc_initialize or
 * zero it). Give cpu_fn (a native CPU kernel) or source + entry (a dialect
 * kernel), not both. Everything is copied by cube_kernel_create; the
 * descriptor and what it points to may be freed once it returns. */
typedef struct cube_kernel_desc {
  size_t struct_size;               /* 0 or sizeof(cube_kernel_desc_t) */
  const char* name;                 /* shown in errors and profiles (copied); NULL = entry */
  cube_dim_t cube_dim;              /* units per cube; {0,0,0} means {1,1,1} */
  const cube_arg_kind_t* arg_kinds; /* signature; for dialect kernels NULL = from the source */
  uint32_t arg_count;               /* <= CUBE_MAX_KERNEL_ARGS */
  uint64_t shared_memory_size;      /* native kernels: bytes of cube-local scratch per cube */
  /* A native kernel for the CPU backend (a cube_cpu_kernel_fn of
   * cube/backends/cpu.h), or NULL. */
  int (*cpu_fn)(const struct cube_cpu_cube* cube, const union cube_cpu_arg* args,
                uint32_t arg_count);
  /* A kernel in the cube dialect (docs/dialect.md), compiled by each backend on
   * first launch (or cube_client_precompile) and cached. */
  const char* source;               /* dialect source text (copied) */
  const char* entry;                /* the CUBE_KERNEL to run */
  const cube_define_t* defines;     /* compile-time defines (copied) */
  uint32_t define_count;
  /* The buffer arguments the kernel only reads: bit i for argument i. When a
   * launch fails (or is not run because a buffer it uses holds no valid
   * contents), its other buffer arguments are marked as holding no valid
   * contents (taint: docs/failures.md); these keep theirs. A native
   * kernel's buffers are all taken as written unless marked here; a dialect
   * kernel's CUBE_ARRAY(const T, x) parameters are read-only already (the
   * bits add to them). A bit of an argument that is not a buffer, or past
   * the arguments, is INVALID_ARGUMENT. Appended in the second layout of
   * this struct (0 in the first: every buffer written). */
  uint64_t read_only_args;
} cube_kernel_desc_t;

/* Fills |desc| with the defaults (every field zero: no name, cube_dim
 * (1, 1, 1), no arguments, no function, no source) and sets struct_size to
 * sizeof(cube_kernel_desc_t). NULL is ignored. */
void cube_kernel_desc_initialize(cube_kernel_desc_t* desc);

/* Creates a kernel: native (cpu_fn) or dialect (source + entry; the source is
 * parsed now, so a missing entry or a malformed CUBE_KERNEL declaration fails
 * here, naming the line; compile errors come at first launch or
 * cube_client_precompile). The caller owns the kernel (one reference).
 * Fails with INVALID_ARGUMENT (naming the field) for a NULL desc or
 * out_kernel, a missing name or function, both cpu_fn and source, a zero
 * cube dimension component or more than 2^32-1 units, too many args, an
 * unknown arg kind, arg kinds that disagree with the source, a define that
 * is not an identifier with a one-line value, or a dialect parse error;
 * UNSUPPORTED for a desc->struct_size this library does not know;
 * OUT_OF_MEMORY. Writes nothing on failure. */
CUBE_MUST_USE_RESULT cube_status_t cube_kernel_create(const cube_kernel_desc_t* desc,
                                                      cube_kernel_t** out_kernel);

/* Adds a reference to |kernel| and returns it; NULL is returned as NULL. */
cube_kernel_t* cube_kernel_retain(cube_kernel_t* kernel);

/* Drops a reference; the last one frees the kernel (launches queued with it
 * hold their own). NULL is accepted. */
void cube_kernel_release(cube_kernel_t* kernel);

/* The kernel's name (desc->name, else the entry): owned by the kernel, valid
 * as long as the caller holds a reference. "" for NULL. */
const char* cube_kernel_name(const cube_kernel_t* kernel);

/* Units per cube, normalised (no zero component); (0, 0, 0) for NULL. */
cube_dim_t cube_kernel_cube_dim(const cube_kernel_t* kernel);

/* Number of arguments (from desc->arg_count, or the dialect source); 0 for
 * NULL. */
uint32_t cube_kernel_arg_count(const cube_kernel_t* kernel);

/* The kind of argument |index| (from desc->arg_kinds, or the dialect
 * source), for bindings that convert their values to the kernel's
 * signature; -1 for NULL or an index past cube_kernel_arg_count. */
int cube_kernel_arg_kind(const cube_kernel_t* kernel, uint32_t index);

/* CubeCL's CubeCountSelection and CubeDim::new --------------------------- */

/* Spreads |num_cubes| over (x,y,z) under |max_count| (CubeCL's
 * CubeCountSelection): while x > max_x: x = ceil(x/2), y *= 2; then the same
 * for y into z. |out_exact| (may be NULL) is true when x*y*z == num_cubes
 * (else the kernel must bounds-check). Fails with INVALID_ARGUMENT for a NULL
 * max_count or out_count or a zero max_count component, OUT_OF_RANGE when the
 * cubes do not fit. Pure arithmetic. */
CUBE_MUST_USE_RESULT cube_status_t cube_count_select(uint64_t num_cubes,
                                                     const uint32_t max_count[3],
                                                     cube_count_t* out_count, bool* out_exact);

/* CubeCL's CubeDim::new for |working_units| on a device: planes of
 * plane_size_max units; on a device whose units run on CPU cores
 * (num_cpu_cores > 0, no streaming multiprocessors) min(cores, units) of
 * them, on a GPU up to 8 (a power of two), within max_units_per_cube.
 * (1, 1, 1) for NULL |props| and for props whose struct_size does not cover
 * the hardware fields. Pure arithmetic. */
cube_dim_t cube_dim_for_units(const cube_device_properties_t* props, uint64_t working_units);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_KERNEL_H_ */
