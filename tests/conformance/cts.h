/* The conformance suite: written once against the public API, run for every
 * backend (and queue variant) listed in tests/CMakeLists.txt
 * (CUBE_CTS_BACKENDS). `cube_cts --backend <name> <case>` runs one case.
 *
 * Backend names: "<backend>" (threaded queue) or "<backend>-inline" (inline
 * queue), e.g. "cpu", "cpu-inline". A new backend is one word in
 * CUBE_CTS_BACKENDS. A backend that is unavailable here makes every case
 * skip (exit 77), never pass.
 */
#ifndef CUBE_CTS_H_
#define CUBE_CTS_H_

#include "check.h"
#include "cube/cube.h"

typedef struct cts_backend {
  const char* name;       /* as on the command line */
  cube_backend_t backend;
  const char* queue_mode; /* value for CUBE_DEVICE_QUEUE, NULL = default */
} cts_backend_t;

/* The backend this process runs the suite for. */
const cts_backend_t* cts_backend(void);

/* Device |index| of the backend under test. */
cube_device_id_t cts_device(uint32_t index);

/* A client of device 0 (REQUIREs success; skips the case when the backend is
 * absent, via CTS_CLIENT below). */
#define CTS_CLIENT(var)                                                        \
  cube_client_t* var = NULL;                                                   \
  do {                                                                         \
    cube_status_t cts_s_ = cube_client_load(cts_device(0), &var);              \
    if (cube_status_code(cts_s_) == CUBE_STATUS_UNAVAILABLE) {                 \
      cube_status_free(cts_s_);                                                \
      CUBE_SKIP("backend %s unavailable", cts_backend()->name);                \
    }                                                                          \
    REQUIRE_OK(cts_s_);                                                        \
  } while (0)

/* Skips the case unless the backend has at least |n| devices. */
#define CTS_REQUIRE_DEVICES(n)                                                 \
  do {                                                                         \
    if (cube_device_count(cts_backend()->backend) < (size_t)(n))               \
      CUBE_SKIP("needs %d devices of %s", (int)(n), cts_backend()->name);      \
  } while (0)

/* Reads |h| and compares it with |expect| (|n| bytes). */
int cts_read_equals(cube_client_t* c, cube_handle_t h, const void* expect, size_t n);


/* Helpers shared by the cases (cts_kernels.c) ------------------------------ */

#include <pthread.h>
#include <stdatomic.h>

/* Ends a case: releases |c| (may be NULL) and shuts the library down, which
 * must leave nothing behind (run under ASan/LSan). */
#define CTS_END(c)                                                             \
  do {                                                                         \
    cube_client_release(c);                                                    \
    cube_shutdown();                                                           \
  } while (0)

/* The byte every poisoned output starts as. */
#define CTS_POISON 0xCD

/* Creates a native kernel with the listed argument kinds (REQUIREs success). */
cube_status_t cts_kernel_create(const char* name, cube_cpu_kernel_fn fn, cube_dim_t dim,
                                uint64_t shared, uint32_t arg_count,
                                const cube_arg_kind_t* kinds, cube_kernel_t** out);
#define CTS_KERNEL(var, name, fn, dimx, shared, ...)                            \
  cube_kernel_t* var = NULL;                                                   \
  do {                                                                         \
    const cube_arg_kind_t cts_k_[] = {__VA_ARGS__};                            \
    cube_dim_t cts_d_ = {(dimx), 1, 1};                                        \
    REQUIRE_OK(cts_kernel_create((name), (fn), cts_d_, (shared),               \
                                 (uint32_t)(sizeof(cts_k_) / sizeof(cts_k_[0])), cts_k_, &var)); \
  } while (0)

/* A handle holding |n| bytes of CTS_POISON (REQUIRE-style: returns the status). */
cube_status_t cts_poisoned(cube_client_t* c, size_t n, cube_handle_t* out);

/* Reads |h| into a new malloc'ed buffer (*out, *out_size); caller frees. */
cube_status_t cts_read_alloc(cube_client_t* c, cube_handle_t h, void** out, size_t* out_size);

/* Linear index of the cube (x fastest) and the number of cubes. */
static inline uint64_t cts_cube_index(const cube_cpu_cube_t* cube) {
  return cube->cube_pos[0] + (uint64_t)cube->cube_count[0] *
                                 (cube->cube_pos[1] + (uint64_t)cube->cube_count[1] * cube->cube_pos[2]);
}

/* Shared kernels ---------------------------------------------------------- */

/* out[i] = a * x[i] + y[i] for i < n; args: x, y, out (f32 buffers), f32 a, u32 n.
 * Unit u of cube k handles element k * dim.x + u. */
int cts_k_saxpy(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);
/* The host reference of one element (the same expression). */
float cts_saxpy1(float a, float x, float y);

/* out[i] = in[i] + add for i < n (u32); args: in, out, u32 add, u32 n. */
int cts_k_add_u32(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);

/* Copies min(len(in), len(out)) bytes; one cube does it all; args: in, out. */
int cts_k_copy(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);

/* Returns args[4].i32 at the cube (args[1].u32, args[2].u32, args[3].u32),
 * 0 elsewhere; args: buffer (unused), u32 x, u32 y, u32 z, i32 code. */
int cts_k_fail(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);

/* A gate: the kernel cts_k_gate (args: one buffer, unused) spins until
 * cts_gate_open() (or 60 s pass: then it fails with 99). Only for queued
 * (non-blocking) clients: inline mode would run it on the caller. */
void cts_gate_close(void);
void cts_gate_open(void);
int cts_k_gate(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);

/* Log collection (a cube_log_fn). */
typedef struct cts_log {
  pthread_mutex_t lock;
  char** lines;
  size_t count, capacity;
} cts_log_t;
void cts_log_init(cts_log_t* log);
void cts_log_fn(void* user, const char* line);
/* Index of the first line containing every listed word (NULL-terminated), or -1. */
long cts_log_find(cts_log_t* log, const char* word, ...);
void cts_log_dump(cts_log_t* log);
void cts_log_clear(cts_log_t* log);
void cts_log_free(cts_log_t* log);

/* A path "<CUBE_TEST_TMPDIR or /tmp>/<name>.<pid>" in |buf|. */
const char* cts_tmp_path(char* buf, size_t size, const char* name);

/* Sleeps |ms| milliseconds (never used for assertions, only to give other
 * threads a chance). */
void cts_sleep_ms(unsigned ms);

/* True if |s| contains every listed word (NULL-terminated). */
int cts_contains(const char* s, ...);

#endif /* CUBE_CTS_H_ */
