// cube-test-libs: cube_static
/* The CPU fault guard (CUBE_CPU_FAULT_GUARD=1; docs/failures.md, "A CPU kernel
 * that faults"): a kernel that faults fails its launch, its outputs are
 * tainted, and the process goes on; a fault anywhere else, or without the
 * guard, still ends the process, and a handler the program installed before
 * is still called. The process-ending cases run in children. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/options.h"
#include "check.h"
#include "cube/cube.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

enum { N = 4096, DIM = 64 };

/* out[i] = 2 * in[i] over the cube's DIM elements; the cube whose x is the
 * u32 argument (when < the count) stores through a wild pointer first. */
static int wild_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)n;
  const float* in = args[0].buffer.data;
  float* out = args[1].buffer.data;
  uint32_t bad = args[2].u32;
  uint32_t x = cube->cube_pos[0];
  if (x == bad || bad == UINT32_MAX) {
    volatile int* volatile wild = (volatile int*)(uintptr_t)0x10;
    *wild = 1;
  }
  for (uint32_t u = 0; u < DIM; ++u) out[x * DIM + u] = 2.0f * in[x * DIM + u];
  return 0;
}

static cube_kernel_t* make_wild(void) {
  static const cube_arg_kind_t kinds[3] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "wild";
  d.cube_dim = (cube_dim_t){1, 1, 1};
  d.arg_kinds = kinds;
  d.arg_count = 3;
  d.cpu_fn = wild_kernel;
  d.read_only_args = 1u << 0; /* in: a failed launch spoils out only */
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fprintf(stderr, "cube_kernel_create: %s\n", cube_status_message(s));
    cube_status_free(s);
  }
  return k;
}

static void guard_on(int on) {
  if (on)
    setenv("CUBE_CPU_FAULT_GUARD", "1", 1);
  else
    unsetenv("CUBE_CPU_FAULT_GUARD");
  cube__options_reset();
}

/* One launch of |k| over N / DIM cubes with cube |bad| faulting; returns the
 * status of the sync after it. */
static cube_status_t launch_sync(cube_client_t* c, cube_kernel_t* k, cube_handle_t in,
                                 cube_handle_t out, uint32_t bad) {
  cube_arg_t a[3] = {cube_arg_buffer(in), cube_arg_buffer(out), cube_arg_u32(bad)};
  cube_status_t s = cube_client_launch(c, k, cube_count_static(N / DIM, 1, 1), 3, a);
  if (s) return s;
  return cube_client_sync(c);
}

static int read_doubled(cube_client_t* c, cube_handle_t out, const float* in) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, out, &b);
  if (s) {
    fprintf(stderr, "read: %s\n", cube_status_message(s));
    cube_status_free(s);
    return 0;
  }
  const float* got = cube_bytes_const_data(b);
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += got[i] != 2.0f * in[i];
  cube_bytes_release(b);
  return bad == 0;
}

CUBE_TEST(guard_turns_a_fault_into_a_launch_failure) {
  guard_on(1);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c));
  cube_kernel_t* k = make_wild();
  REQUIRE(k);
  float in[N];
  uint64_t seed = 99;
  for (int i = 0; i < N; ++i) in[i] = (float)(cube_test_rand(&seed) % 1000) - 500.0f;
  cube_handle_t hin, hout, hout2;
  REQUIRE_OK(cube_client_create_from_slice(c, in, sizeof(in), &hin));
  REQUIRE_OK(cube_client_empty(c, sizeof(in), &hout));
  REQUIRE_OK(cube_client_empty(c, sizeof(in), &hout2));
  /* Cube 37 faults: the launch fails, naming the kernel, the cube, the
   * signal and the address. */
  cube_status_t s = launch_sync(c, k, hin, hout, 37);
#ifdef UNDER_TSAN
  /* ThreadSanitizer keeps SIGSEGV: the guard refuses, the launch fails. */
  CHECK_STATUS(s, CUBE_STATUS_UNSUPPORTED, "CUBE_CPU_FAULT_GUARD", "ThreadSanitizer");
  cube_handle_release(hin);
  cube_handle_release(hout);
  cube_handle_release(hout2);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
  guard_on(0);
  return;
#endif
  CHECK_STATUS(s, CUBE_STATUS_LAUNCH_FAILED, "'wild'", "(37, 0, 0)", "SIGSEGV", "0x10",
               "CUBE_CPU_FAULT_GUARD");
  /* Its output is tainted: a read says so and names the fault. */
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_client_read_one(c, hout, &b), CUBE_STATUS_DATA_LOST, "'wild'", "SIGSEGV");
  /* The process and the device go on: the same kernel without a fault, on
   * another buffer, computes the right answer; the tainted buffer, written
   * whole, is valid again and takes a launch. */
  CHECK_OK(launch_sync(c, k, hin, hout2, N));
  CHECK(read_doubled(c, hout2, in));
  float poison[N];
  for (int i = 0; i < N; ++i) poison[i] = -1.0f;
  CHECK_OK(cube_client_write(c, hout, poison, sizeof(poison)));
  CHECK_OK(launch_sync(c, k, hin, hout, N));
  CHECK(read_doubled(c, hout, in));
  /* Every cube faulting, on every worker at once, again and again; each
   * round on a fresh output, then a good launch on another. */
  for (int round = 0; round < 20; ++round) {
    cube_handle_t lost, good;
    REQUIRE_OK(cube_client_empty(c, sizeof(in), &lost));
    REQUIRE_OK(cube_client_empty(c, sizeof(in), &good));
    s = launch_sync(c, k, hin, lost, UINT32_MAX);
    CHECK_STATUS(s, CUBE_STATUS_LAUNCH_FAILED, "'wild'", "SIGSEGV");
    CHECK_OK(launch_sync(c, k, hin, good, N));
    CHECK(read_doubled(c, good, in));
    cube_handle_release(lost);
    cube_handle_release(good);
  }
  cube_handle_release(hin);
  cube_handle_release(hout);
  cube_handle_release(hout2);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
  guard_on(0);
}

/* Runs |body| in a child and returns its wait status. */
static int in_child(void (*body)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

static void fault_in_kernel(void) {
  cube_client_t* c = NULL;
  if (cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c)) _exit(3);
  cube_kernel_t* k = make_wild();
  float in[N] = {0};
  cube_handle_t hin, hout;
  if (cube_client_create_from_slice(c, in, sizeof(in), &hin) || cube_client_empty(c, sizeof(in), &hout))
    _exit(4);
  cube_status_t s = launch_sync(c, k, hin, hout, 5);
  _exit(s ? 10 : 11); /* not reached when the fault ends the process */
}

static void guarded_then_fault_outside(void) {
  guard_on(1);
  cube_client_t* c = NULL;
  if (cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c)) _exit(3);
  cube_kernel_t* k = make_wild();
  float in[N] = {0};
  cube_handle_t hin, hout;
  if (cube_client_create_from_slice(c, in, sizeof(in), &hin) || cube_client_empty(c, sizeof(in), &hout))
    _exit(4);
  cube_status_t s = launch_sync(c, k, hin, hout, 5); /* caught: the handler is in place */
  if (!s || cube_status_code(s) != CUBE_STATUS_LAUNCH_FAILED) _exit(5);
  volatile int* volatile wild = (volatile int*)(uintptr_t)0x20;
  *wild = 1; /* outside any kernel */
  _exit(12);
}

static void own_handler(int sig) {
  (void)sig;
  _exit(42);
}

static void program_handler_kept(void) {
  signal(SIGSEGV, own_handler);
  guarded_then_fault_outside();
}

/* Did the child end by the fault (a signal, or a sanitizer's report and its
 * exit code), not by one of the bodies' own exits (0, 3-5, 10-12)? */
static int ended_by_fault(int status) {
  if (status == -1) return 0;
  if (WIFSIGNALED(status)) return 1;
  if (!WIFEXITED(status)) return 0;
  int code = WEXITSTATUS(status);
  return code != 0 && !(code >= 3 && code <= 5) && !(code >= 10 && code <= 12);
}

CUBE_TEST(fault_without_guard_ends_the_process) {
  guard_on(0);
  int st = in_child(fault_in_kernel);
  if (!ended_by_fault(st)) fprintf(stderr, "child wait status 0x%x\n", st);
  CHECK(ended_by_fault(st));
}

CUBE_TEST(fault_outside_a_kernel_still_ends_the_process) {
#ifdef UNDER_TSAN
  CUBE_SKIP("the guard refuses under ThreadSanitizer");
#endif
  int st = in_child(guarded_then_fault_outside);
  if (!ended_by_fault(st)) fprintf(stderr, "child wait status 0x%x\n", st);
  CHECK(ended_by_fault(st));
  guard_on(0);
}

CUBE_TEST(program_handler_still_called) {
#ifdef UNDER_TSAN
  CUBE_SKIP("the guard refuses under ThreadSanitizer");
#endif
  int st = in_child(program_handler_kept);
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 42)) fprintf(stderr, "child wait status 0x%x\n", st);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42);
  guard_on(0);
}
