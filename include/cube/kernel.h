/* cube/kernel.h: kernels, launch arguments, cube counts and dimensions.
 *
 * Vocabulary (CubeCL's): a unit is a thread, a cube is a block/work-group, a
 * plane is a warp/sub-group. A launch runs count.x*count.y*count.z cubes of
 * dim.x*dim.y*dim.z units.
 *
 * Native CPU kernels: a C function called once per cube (with the cube's
 * position) on a worker thread of the CPU backend; it loops over the units of
 * the cube itself. It returns 0, or a non-zero code that fails the launch
 * (reported by the next flush/sync/read on the stream, reference §2.6).
 *
 * Kernel objects are immutable after creation and thread-safe.
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
  CUBE_ARG_KIND_COUNT
} cube_arg_kind_t;

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

static inline cube_arg_t cube_arg_buffer(cube_handle_t h) {
  cube_arg_t a; a.kind = CUBE_ARG_BUFFER; a.v.buffer = h; return a;
}
static inline cube_arg_t cube_arg_u32(uint32_t x) { cube_arg_t a; a.kind = CUBE_ARG_U32; a.v.u32 = x; return a; }
static inline cube_arg_t cube_arg_i32(int32_t x) { cube_arg_t a; a.kind = CUBE_ARG_I32; a.v.i32 = x; return a; }
static inline cube_arg_t cube_arg_u64(uint64_t x) { cube_arg_t a; a.kind = CUBE_ARG_U64; a.v.u64 = x; return a; }
static inline cube_arg_t cube_arg_i64(int64_t x) { cube_arg_t a; a.kind = CUBE_ARG_I64; a.v.i64 = x; return a; }
static inline cube_arg_t cube_arg_f32(float x) { cube_arg_t a; a.kind = CUBE_ARG_F32; a.v.f32 = x; return a; }
static inline cube_arg_t cube_arg_f64(double x) { cube_arg_t a; a.kind = CUBE_ARG_F64; a.v.f64 = x; return a; }

/* Native CPU kernel ABI ------------------------------------------------- */

/* A resolved argument as a native kernel sees it. */
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

/* Returns 0 on success; any other value fails the launch. */
typedef int (*cube_cpu_kernel_fn)(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args,
                                  uint32_t arg_count);

/* Kernels ----------------------------------------------------------------- */

typedef struct cube_kernel_s cube_kernel_t;

#define CUBE_MAX_KERNEL_ARGS 64

/* A compile-time define (CubeCL's comptime): "#define name value". */
typedef struct cube_define {
  const char* name;  /* a C identifier */
  const char* value; /* may be NULL or "" (defined, empty) */
} cube_define_t;

typedef struct cube_kernel_desc {
  const char* name;                 /* shown in errors and profiles (copied); NULL = entry */
  cube_dim_t cube_dim;              /* units per cube; {0,0,0} means {1,1,1} */
  const cube_arg_kind_t* arg_kinds; /* signature; for dialect kernels NULL = from the source */
  uint32_t arg_count;               /* <= CUBE_MAX_KERNEL_ARGS */
  uint64_t shared_memory_size;      /* native kernels: bytes of cube-local scratch per cube */
  cube_cpu_kernel_fn cpu_fn;        /* a native kernel for the CPU backend, or NULL */
  /* A kernel in the cube dialect (docs/dialect.md), compiled by each backend on
   * first launch (or cube_kernel_precompile) and cached. */
  const char* source;               /* dialect source text (copied) */
  const char* entry;                /* the CUBE_KERNEL to run */
  const cube_define_t* defines;     /* compile-time defines (copied) */
  uint32_t define_count;
} cube_kernel_desc_t;

/* Creates a kernel: native (cpu_fn) or dialect (source + entry; the source is
 * parsed now, so a missing entry or a malformed CUBE_KERNEL declaration fails
 * here, naming the line; compile errors come at first launch). Fails with
 * INVALID_ARGUMENT (naming the field) for a missing name or function, a zero
 * cube dimension component, too many args or an unknown arg kind. Thread-safe. */
CUBE_MUST_USE_RESULT cube_status_t cube_kernel_create(const cube_kernel_desc_t* desc,
                                                      cube_kernel_t** out_kernel);
cube_kernel_t* cube_kernel_retain(cube_kernel_t* kernel);
void cube_kernel_release(cube_kernel_t* kernel);
const char* cube_kernel_name(const cube_kernel_t* kernel);
cube_dim_t cube_kernel_cube_dim(const cube_kernel_t* kernel);
uint32_t cube_kernel_arg_count(const cube_kernel_t* kernel);

/* Helpers of reference §2.4 ---------------------------------------------- */

/* Spreads |num_cubes| over (x,y,z) under |max_count| (CubeCL's
 * CubeCountSelection): while x > max_x: x = ceil(x/2), y *= 2; then the same
 * for y into z. |out_exact| is true when x*y*z == num_cubes (else the kernel
 * must bounds-check). */
CUBE_MUST_USE_RESULT cube_status_t cube_count_select(uint64_t num_cubes, const uint32_t max_count[3],
                                cube_count_t* out_count, bool* out_exact);

/* CubeCL's CubeDim::new for |working_units| on a device: planes of
 * plane_size_max units; on a device whose units run on CPU cores
 * (num_cpu_cores > 0, no streaming multiprocessors) min(cores, units) of
 * them, on a GPU up to 8 (a power of two), within max_units_per_cube.
 * (1, 1, 1) for NULL |props|. Thread-safe. */
cube_dim_t cube_dim_for_units(const cube_device_properties_t* props, uint64_t working_units);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_KERNEL_H_ */
