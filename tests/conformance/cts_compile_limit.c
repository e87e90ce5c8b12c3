/* The compile time limit (CUBE_COMPILE_TIMEOUT): a compile past it is
 * stopped, the launch fails with DEADLINE_EXCEEDED naming the kernel and the
 * limit, and the device goes on with its next work. On the CPU the compiler
 * (a child process) and what it started are killed; OpenCL and NVRTC builds
 * cannot be interrupted and finish in the background, storing their binary in
 * the kernel cache (docs/autotune.md, "The compile time limit"). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cts.h"

static const char* k_scale_src =
    "CUBE_KERNEL(scale, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + SALT);\n"
    "}\n";

/* A kernel no cache has seen: SALT is this process's pid and |n|. */
static cube_kernel_t* salted_kernel(const char* name, unsigned n) {
  char salt[64];
  snprintf(salt, sizeof(salt), "(0.0f * %ldu + 0.0f * %uu)", (long)getpid(), n);
  cube_define_t def = {"SALT", salt};
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.name = name;
  d.source = k_scale_src;
  d.entry = "scale";
  d.cube_dim = (cube_dim_t){64, 1, 1};
  d.defines = &def;
  d.define_count = 1;
  cube_kernel_t* k = NULL;
  cube_status_t st = cube_kernel_create(&d, &k);
  if (st) {
    fprintf(stderr, "kernel: %s\n", cube_status_message(st));
    cube_status_free(st);
  }
  return k;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { N = 1000 };

/* Launches |k| on x -> y with a = 2 and returns the launch's status (or, on
 * a backend that compiles on the stream, the next sync's). */
static cube_status_t launch_and_sync(cube_client_t* c, cube_kernel_t* k, cube_handle_t x,
                                     cube_handle_t y) {
  cube_arg_t a[] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_f32(2.0f)};
  cube_status_t st = cube_client_launch(c, k, cube_count_static((N + 63) / 64, 1, 1), 3, a);
  if (st) return st;
  return cube_client_sync(c);
}

/* A compile past the limit fails its launch, and the device goes on: a
 * launch queued behind it (into another buffer: the failed launch's output
 * is tainted, docs/failures.md) runs and is right; the failed launch's
 * output says why it holds nothing. */
CUBE_TEST(compile_limit_fails_the_launch_and_the_device_goes_on) {
  CTS_REQUIRE_BACKEND();
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  cts_cache_dir_fresh("compile-limit", dir, sizeof(dir));
  CTS_CLIENT(c);
  float xs[N];
  for (int i = 0; i < N; ++i) xs[i] = (float)i;
  cube_handle_t x, y, y2;
  REQUIRE_OK(cube_client_create_from_slice(c, xs, sizeof(xs), &x));
  REQUIRE_OK(cube_client_empty(c, sizeof(xs), &y));
  REQUIRE_OK(cube_client_empty(c, sizeof(xs), &y2));
  cube_kernel_t* slow = salted_kernel("slow_scale", 1);
  cube_kernel_t* other = salted_kernel("other_scale", 2);
  REQUIRE(slow && other);
  /* The other kernel compiled before the limit: a memory hit afterwards. */
  REQUIRE_OK(cube_client_precompile(c, 1, &other, CUBE_EXEC_CHECKED));

  /* 1 ms: less than any real compile (clang, PoCL, NVRTC take tens of ms). */
  REQUIRE_OK(cube_option_set("CUBE_COMPILE_TIMEOUT", "0.001"));
  cube_kernel_cache_stats_t s0 = {0}, s1 = {0};
  REQUIRE_OK(cube_kernel_cache_stats(&s0));
  double t0 = now_s();
  cube_arg_t a[] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_f32(2.0f)};
  cube_status_t st = cube_client_launch(c, slow, cube_count_static((N + 63) / 64, 1, 1), 3, a);
  /* On a backend that compiles on the stream (CPU) the launch is queued: the
   * next launch is queued behind it and must run. */
  bool deferred = st == CUBE_OK;
  cube_arg_t a2[] = {cube_arg_buffer(x), cube_arg_buffer(y2), cube_arg_f32(2.0f)};
  cube_status_t st2 = cube_client_launch(c, other, cube_count_static((N + 63) / 64, 1, 1), 3, a2);
  CHECK_OK(st2);
  cube_status_t sync = cube_client_sync(c);
  double took = now_s() - t0;
  cube_status_t failure = deferred ? sync : st;
  if (!deferred) CHECK_OK(sync);
  CHECK_STATUS(failure, CUBE_STATUS_DEADLINE_EXCEEDED, "slow_scale");
  CHECK(took < 10.0);
  REQUIRE_OK(cube_kernel_cache_stats(&s1));
  CHECK(s1.compile_failures >= s0.compile_failures + 1);
  /* The other kernel ran after the failed compile. */
  float got[N];
  if (deferred) /* it ran on the stream and failed there: y is tainted */
    CHECK_STATUS(cube_client_read_into(c, y, got, sizeof(got)), CUBE_STATUS_DATA_LOST,
                 "slow_scale", "compile time limit");
  CHECK_OK(cube_client_read_into(c, y2, got, sizeof(got)));
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += got[i] != 2.0f * xs[i];
  CHECK_EQ_U64(bad, 0);

  /* Without the limit the same kernel compiles and runs. */
  REQUIRE_OK(cube_option_set("CUBE_COMPILE_TIMEOUT", NULL));
  CHECK_OK(launch_and_sync(c, slow, x, y2));
  cube_handle_release(x);
  cube_handle_release(y);
  cube_handle_release(y2);
  cube_kernel_release(slow);
  cube_kernel_release(other);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

/* The status names the kernel, the limit and the option. */
CUBE_TEST(compile_limit_status_names_kernel_and_limit) {
  CTS_REQUIRE_BACKEND();
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  cts_cache_dir_fresh("compile-limit-words", dir, sizeof(dir));
  CTS_CLIENT(c);
  cube_kernel_t* k = salted_kernel("named_kernel", 3);
  REQUIRE(k);
  REQUIRE_OK(cube_option_set("CUBE_COMPILE_TIMEOUT", "0.002"));
  /* Precompiling reports the compile's own status, on every backend. */
  cube_status_t st = cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED);
  REQUIRE_OK(cube_option_set("CUBE_COMPILE_TIMEOUT", NULL));
  CHECK(cube_status_code(st) == CUBE_STATUS_DEADLINE_EXCEEDED);
  const char* m = cube_status_message(st);
  if (!cts_contains(m, "named_kernel", "0.002 s", "CUBE_COMPILE_TIMEOUT", NULL))
    fprintf(stderr, "message: %s\n", m);
  CHECK(cts_contains(m, "named_kernel", "0.002 s", "CUBE_COMPILE_TIMEOUT", NULL));
  cube_status_free(st);
  cube_kernel_release(k);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

/* Where the compiler is a child process (the CPU backend), it and what it
 * started are killed at the limit: a compiler that sleeps is gone at once. */
CUBE_TEST(compile_limit_kills_the_compiler) {
  CTS_REQUIRE_BACKEND();
  if (cts_backend()->backend != CUBE_BACKEND_CPU) CUBE_SKIP("the compiler is a child process on the cpu backend only");
  char dir[PATH_MAX], script[PATH_MAX], pidfile[PATH_MAX];
  cts_cache_dir_fresh("compile-limit-kill", dir, sizeof(dir));
  cts_tmp_path(script, sizeof(script), "slow-cc.sh");
  cts_tmp_path(pidfile, sizeof(pidfile), "slow-cc.pid");
  unlink(pidfile);
  FILE* f = fopen(script, "w");
  REQUIRE(f);
  /* A compiler that starts a grandchild and waits for it. */
  fprintf(f, "#!/bin/sh\nsleep 60 &\necho $! > '%s'\nwait\nexec cc \"$@\"\n", pidfile);
  fclose(f);
  REQUIRE(chmod(script, 0700) == 0);
  REQUIRE_OK(cube_option_set("CUBE_CC", script));
  REQUIRE_OK(cube_option_set("CUBE_COMPILE_TIMEOUT", "0.5"));
  CTS_CLIENT(c);
  cube_kernel_t* k = salted_kernel("sleepy", 4);
  REQUIRE(k);
  double t0 = now_s();
  cube_status_t st = cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED);
  double took = now_s() - t0;
  CHECK_STATUS(st, CUBE_STATUS_DEADLINE_EXCEEDED, "sleepy");
  CHECK(took >= 0.45 && took < 10.0);
  /* The grandchild (sleep 60) is gone: killed with the process group. */
  long sleeper = 0;
  f = fopen(pidfile, "r");
  CHECK(f != NULL);
  if (f) {
    CHECK(fscanf(f, "%ld", &sleeper) == 1);
    fclose(f);
  }
  if (sleeper > 0) {
    bool alive = true;
    for (int i = 0; i < 200 && alive; ++i) {
      char stat_path[64], state = 0;
      snprintf(stat_path, sizeof(stat_path), "/proc/%ld/stat", sleeper);
      FILE* sf = fopen(stat_path, "r");
      /* Gone, or a zombie waiting for its reaper: dead either way. */
      alive = sf && fscanf(sf, "%*d %*s %c", &state) == 1 && state != 'Z';
      if (sf) fclose(sf);
      if (alive) cts_sleep_ms(10);
    }
    CHECK(!alive);
  }
  REQUIRE_OK(cube_option_set("CUBE_CC", NULL));
  REQUIRE_OK(cube_option_set("CUBE_COMPILE_TIMEOUT", NULL));
  unlink(script);
  unlink(pidfile);
  cube_kernel_release(k);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

/* An in-process compile (OpenCL, NVRTC) cannot be interrupted: left behind
 * at the limit, it ends in the background and stores its binary, which the
 * next launch loads instead of compiling. cube_shutdown waits for it. */
CUBE_TEST(compile_limit_background_build_fills_the_cache) {
  CTS_REQUIRE_BACKEND();
  if (cts_backend()->backend == CUBE_BACKEND_CPU) CUBE_SKIP("the cpu backend kills its compiler");
  char dir[PATH_MAX];
  cts_cache_dir_fresh("compile-limit-bg", dir, sizeof(dir));
  CTS_CLIENT(c);
  cube_kernel_t* k = salted_kernel("background", 5);
  REQUIRE(k);
  REQUIRE_OK(cube_option_set("CUBE_COMPILE_TIMEOUT", "0.001"));
  CHECK_STATUS(cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED),
               CUBE_STATUS_DEADLINE_EXCEEDED, "background");
  REQUIRE_OK(cube_option_set("CUBE_COMPILE_TIMEOUT", NULL));
  cube_client_release(c);
  cube_shutdown(); /* waits for the build left running */
  cube_kernel_cache_entry_t* e = NULL;
  size_t n = 0;
  CHECK_OK(cube_kernel_cache_list(&e, &n));
  int found = 0;
  for (size_t i = 0; i < n; ++i) found += strcmp(e[i].name, "background") == 0;
  CHECK_EQ_U64(found, 1);
  cube_kernel_cache_list_free(e);
  /* A new kernel object of the same source loads the binary: no compile. */
  cube_kernel_t* again = salted_kernel("background", 5);
  REQUIRE(again);
  CTS_CLIENT(c2);
  cube_kernel_cache_stats_t s0 = {0}, s1 = {0};
  REQUIRE_OK(cube_kernel_cache_stats(&s0));
  CHECK_OK(cube_client_precompile(c2, 1, &again, CUBE_EXEC_CHECKED));
  REQUIRE_OK(cube_kernel_cache_stats(&s1));
  CHECK_EQ_U64(s1.misses - s0.misses, 0);
  CHECK_EQ_U64(s1.disk_hits - s0.disk_hits, 1);
  cube_kernel_release(k);
  cube_kernel_release(again);
  CTS_END(c2);
  cts_cache_dir_done(dir);
}
