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

#include <stdbool.h>

#include "check.h"
#include "cube/cube.h"

typedef struct cts_backend {
  const char* name;       /* as on the command line */
  cube_backend_t backend;
  const char* queue_mode; /* value for CUBE_DEVICE_QUEUE, NULL = default */
} cts_backend_t;

/* Why |case_name| cannot run on |variant| (tests/conformance/cts_variants.c),
 * or NULL when it must pass there. */
const char* cts_unsupported_reason(const char* variant, const char* case_name);

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

/* Skips the case when the backend is unavailable here (for cases that make
 * their clients with cube_client_init and options instead of CTS_CLIENT). */
#define CTS_REQUIRE_BACKEND()                                                  \
  do {                                                                         \
    cube_status_t cts_b_ = cube_backend_status(cts_backend()->backend);        \
    if (cube_status_code(cts_b_) == CUBE_STATUS_UNAVAILABLE) {                 \
      cube_status_free(cts_b_);                                                \
      CUBE_SKIP("backend %s unavailable", cts_backend()->name);                \
    }                                                                          \
    cube_status_free(cts_b_);                                                  \
  } while (0)

/* Skips the case unless the backend has at least |n| devices. */
#define CTS_REQUIRE_DEVICES(n)                                                 \
  do {                                                                         \
    if (cube_test_device_count(cts_backend()->backend) < (size_t)(n))               \
      CUBE_SKIP("needs %d devices of %s", (int)(n), cts_backend()->name);      \
  } while (0)

/* Reads |h| and compares it with |expect| (|n| bytes). */
int cts_read_equals(cube_client_t* c, cube_handle_t h, const void* expect, size_t n);

/* Reads |h|, which must hold no valid contents (a failure spoiled them:
 * taint, docs/failures.md): 1 when the read is DATA_LOST and its message
 * holds every listed word (NULL-terminated); else prints what it got and
 * returns 0. */
int cts_read_lost(cube_client_t* c, cube_handle_t h, ...);


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

/* Kernels: every shared native kernel cts_k_foo (a cube_cpu_kernel_fn) has a
 * dialect twin, the string cts_k_foo_dialect holding CUBE_KERNEL(cts_k_foo,
 * ...) with the same parameters, semantics and outputs. cts_kernel_create and
 * CTS_KERNEL pick the native kernel when cts_native_kernels() is true, the
 * twin otherwise (then |shared| is ignored: a twin declares its CUBE_SHARED).
 * The kernel keeps |name| either way (errors and profiles name it); the
 * native kernel's read_only_args are the twin's CUBE_ARRAY(const ...)
 * parameters, so that a failure taints the same buffers on both. A kernel
 * without a twin does not compile here: give it one, or create it with
 * cube_kernel_create in a case that skips without native kernels. */
cube_status_t cts_kernel_create_twin(const char* name, cube_cpu_kernel_fn fn, const char* source,
                                     const char* entry, cube_dim_t dim, uint64_t shared,
                                     uint32_t arg_count, const cube_arg_kind_t* kinds,
                                     cube_kernel_t** out);
#define cts_kernel_create(name, fn, dim, shared, arg_count, kinds, out)                  \
  cts_kernel_create_twin((name), fn, fn##_dialect, #fn, (dim), (shared), (arg_count), (kinds), (out))
#define CTS_KERNEL(var, name, fn, dimx, shared, ...)                            \
  cube_kernel_t* var = NULL;                                                   \
  do {                                                                         \
    const cube_arg_kind_t cts_k_[] = {__VA_ARGS__};                            \
    cube_dim_t cts_d_ = {(dimx), 1, 1};                                        \
    REQUIRE_OK(cts_kernel_create((name), fn, cts_d_, (shared),                 \
                                 (uint32_t)(sizeof(cts_k_) / sizeof(cts_k_[0])), cts_k_, &var)); \
  } while (0)

/* True when this run uses native kernels: device 0 of the backend has
 * CUBE_FEATURE_NATIVE_KERNELS (probed once at start-up, cts_main.c) and
 * CUBE_CTS_DIALECT is not 1 (set by the "cpu-dialect" variant). */
bool cts_native_kernels(void);

/* Skips the case when the run has no native kernels; |why| says what of
 * native kernels the case needs. */
#define CTS_REQUIRE_NATIVE(why)                                                \
  do {                                                                         \
    if (!cts_native_kernels())                                                 \
      CUBE_SKIP("%s: needs native kernels (%s)", cts_backend()->name, (why));  \
  } while (0)

/* A handle holding |n| bytes of CTS_POISON (REQUIRE-style: returns the status). */
cube_status_t cts_poisoned(cube_client_t* c, size_t n, cube_handle_t* out);

/* Reads |h| into a new malloc'ed buffer (*out, *out_size); caller frees. */
cube_status_t cts_read_alloc(cube_client_t* c, cube_handle_t h, void** out, size_t* out_size);

/* Layouts: whether |t| has the strides and the size (bytes of its handle's
 * view) that the device gives a tensor of its shape and element size under
 * |strategy|: cube_layout_compute with the device's layout policy and
 * alignment (CPU/OpenCL contiguous; CUDA pitches Optimized rows). Prints the
 * difference when not. *out_size (may be NULL): the expected size. */
int cts_tensor_layout_ok(cube_client_t* c, const cube_tensor_t* t, cube_layout_strategy_t strategy,
                         uint64_t* out_size);

/* True if |t| is dense row-major (its raw view is its content). */
int cts_tensor_dense(const cube_tensor_t* t);

/* Linear index of the cube (x fastest) and the number of cubes. */
static inline uint64_t cts_cube_index(const cube_cpu_cube_t* cube) {
  return cube->cube_pos[0] + (uint64_t)cube->cube_count[0] *
                                 (cube->cube_pos[1] + (uint64_t)cube->cube_count[1] * cube->cube_pos[2]);
}

/* Shared kernels ---------------------------------------------------------- */

/* out[i] = a * x[i] + y[i] for i < n; args: x, y, out (f32 buffers), f32 a, u32 n.
 * Unit u of cube k (linear) handles element k * units + u. */
int cts_k_saxpy(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);
extern const char cts_k_saxpy_dialect[];
/* The host reference of one element (the same expression, rounded twice). */
float cts_saxpy1(float a, float x, float y);
/* True if |got| is a * x + y rounded twice (cts_saxpy1) or once (an FMA: GPU
 * compilers and gcc's -ffp-contract=fast contract the dialect twin), bit for bit. */
int cts_saxpy_match(float got, float a, float x, float y);

/* out[i] = in[i] + add for i < n (u32); args: in, out, u32 add, u32 n. */
int cts_k_add_u32(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);
extern const char cts_k_add_u32_dialect[];

/* Copies min(len(in), len(out)) bytes; one cube does it all; args: in, out. */
int cts_k_copy(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);
extern const char cts_k_copy_dialect[];

/* Fails the launch at the cube (args[1].u32, args[2].u32, args[3].u32) when
 * args[4].i32 != 0, does nothing elsewhere; args: buffer, u32 x, u32 y, u32 z,
 * i32 code. Native: returns the code there ("cube (x, y, z) returned error
 * code"). Dialect twin: unit 0 of that cube stores one element past the end
 * of the buffer, which a Validate launch reports as LAUNCH_FAILED naming the
 * kernel (a Checked launch drops the store): launch it with cts_launch_fail.
 * Either way the failure is deferred to the stream, with LAUNCH_FAILED and the
 * kernel's name; the position and code are in the message only natively
 * (cts_native_kernels()). */
int cts_k_fail(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);
extern const char cts_k_fail_dialect[];
/* cube_client_launch_mode(..., CUBE_EXEC_VALIDATE): how every case launches
 * cts_k_fail, on every backend. */
cube_status_t cts_launch_fail(cube_client_t* c, cube_kernel_t* k, cube_count_t count,
                              uint32_t arg_count, const cube_arg_t* args);

/* Does nothing; args: one buffer (unused). */
int cts_k_nop(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n);
extern const char cts_k_nop_dialect[];

/* A gate holding |c|'s device queue: work queued after cts_gate_hold(c)
 * does not run before cts_gate_open(). Only for queued (non-blocking)
 * clients: in inline mode it would block the caller. With native kernels it
 * queues the native kernel cts_k_gate (spins until the gate opens, or fails
 * with 99 after 60 s) on |c|'s stream; without, another thread runs a task
 * through cube_client_exclusive that blocks the device's runner thread until
 * the gate opens (or 60 s pass: then the task fails and the case with it),
 * and cts_gate_hold returns once that task runs. Work queued before the gate
 * may or may not have run. One gate at a time; cts_gate_open may be called
 * from any thread, and waits for the exclusive task to return. */
int cts_gate_hold(cube_client_t* c); /* 1 = held; else prints why */
void cts_gate_open(void);

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

/* A client of device 0 (its own server) at profile |level| whose log lines go
 * to |fn| with |user|. An UNAVAILABLE status means: skip. */
cube_status_t cts_client_logging(cube_profile_level_t level, cube_log_fn fn, void* user,
                                 cube_client_t** out);

/* Skips the case where no kernel runs (the CUDA mock, the null backend):
 * there no line is logged from inside a device task. */
#define CTS_REQUIRE_KERNEL_LOGS()                                               \
  do {                                                                        \
    CTS_REQUIRE_BACKEND();                                                    \
    if (strncmp(cts_backend()->name, "cuda-mock", 9) == 0 ||                  \
        cts_backend()->backend == CUBE_BACKEND_NULL)                          \
      CUBE_SKIP("no kernel runs here: no log line from inside a task");      \
  } while (0)

/* cts_client_logging into |var|, skipping the case when unavailable. */
#define CTS_CLIENT_LOGGING(var, level, fn, user)                                \
  do {                                                                        \
    cube_status_t cts_init_ = cts_client_logging((level), (fn), (user), &(var)); \
    if (cube_status_code(cts_init_) == CUBE_STATUS_UNAVAILABLE) {             \
      cube_status_free(cts_init_);                                            \
      CUBE_SKIP("backend unavailable");                                       \
    }                                                                         \
    REQUIRE_OK(cts_init_);                                                    \
  } while (0)

/* A path "<CUBE_TEST_TMPDIR or /tmp>/<name>.<pid>" in |buf|. */
const char* cts_tmp_path(char* buf, size_t size, const char* name);

/* Sleeps |ms| milliseconds (never used for assertions, only to give other
 * threads a chance). */
void cts_sleep_ms(unsigned ms);

/* True if |s| contains every listed word (NULL-terminated). */
int cts_contains(const char* s, ...);

/* Cases with helper processes and a cache directory of their own
 * (cts_proc.c) ------------------------------------------------------------ */

#include <sys/types.h>

/* Points CUBE_CACHE_DIR at a new, empty directory "<tmp>/<tag>-<backend>.<pid>"
 * (written to |buf|; created by the library on first store) and shuts the
 * library down so that the next use reads it. */
const char* cts_cache_dir_fresh(const char* tag, char* buf, size_t size);
/* Points CUBE_CACHE_DIR at |dir| (NULL: back to the case's start), then
 * cube_shutdown. */
void cts_cache_dir_use(const char* dir);
/* Removes |dir| when the case passed (kept, and named on stderr, when not),
 * and restores CUBE_CACHE_DIR as it was before cts_cache_dir_fresh. */
void cts_cache_dir_done(const char* dir);

/* The helper role this process was started with (CTS_ROLE=<role>), or
 * NULL. */
const char* cts_role(void);
/* True when this process is a helper with role |name|. */
int cts_role_is(const char* name);
/* Starts this program on the same backend for |case_name| with role |role|
 * (and, when |go_fd| >= 0, the read end of a start pipe as fd 100, which
 * cts_wait_go reads). Returns the pid or -1. */
pid_t cts_spawn_role(const char* case_name, const char* role, int go_fd);
/* The exit status of |pid| (128 + signal when killed, -1 on error). */
int cts_wait_child(pid_t pid);
/* A helper started with a pipe waits until the parent closes it. */
void cts_wait_go(void);

#endif /* CUBE_CTS_H_ */
