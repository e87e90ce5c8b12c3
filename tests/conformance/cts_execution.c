/* Execution policies (cube/execution.h): compile-only launches compile and
 * cache their kernels and run nothing, reads read nothing back (zeros), the
 * statistics count what happened (also from another thread, while it
 * happens), overrides nest and end in order, and a second process finds
 * everything compiled. Each case uses a cache directory of its own. */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cts.h"

/* cts_k_add_u32's dialect twin made as a dialect kernel on every backend,
 * with a define of its own (a different kernel for each |variant|). */
static cube_kernel_t* add_kernel(unsigned variant) {
  char v[32];
  snprintf(v, sizeof(v), "%u", variant);
  cube_define_t def = {"CTS_VARIANT", v};
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.name = variant == 1 ? "add_one" : "add_two";
  d.source = cts_k_add_u32_dialect;
  d.entry = "cts_k_add_u32";
  d.cube_dim = (cube_dim_t){32, 1, 1};
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

enum { N = 100 };

static cube_status_t launch_add(cube_client_t* c, cube_kernel_t* k, cube_handle_t in,
                                cube_handle_t out, uint32_t add) {
  cube_arg_t a[] = {cube_arg_buffer(in), cube_arg_buffer(out), cube_arg_u32(add), cube_arg_u32(N)};
  return cube_client_launch(c, k, cube_count_static((N + 31) / 32, 1, 1), 4, a);
}

static cube_execution_stats_t stats_of(cube_execution_override_t* o) {
  cube_execution_stats_t s;
  memset(&s, 0, sizeof(s));
  cube_status_t st = cube_execution_override_stats(o, &s);
  if (st) {
    fprintf(stderr, "stats: %s\n", cube_status_message(st));
    cube_status_free(st);
  }
  return s;
}

/* The helper process: compile-only over the same kernels in the directory
 * its parent filled: everything loads, nothing compiles. */
static void helper_loads_everything(void) {
  int bad = 0;
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(cts_device(0), &c))) _exit(10);
  cube_kernel_t* k1 = add_kernel(1);
  cube_kernel_t* k2 = add_kernel(2);
  uint32_t zeros[N] = {0};
  cube_handle_t in, out;
  if (cube_status_consume(cube_client_create_from_slice(c, zeros, sizeof(zeros), &in)) ||
      cube_status_consume(cube_client_empty(c, sizeof(zeros), &out)))
    _exit(11);
  cube_execution_override_t* o = NULL;
  if (cube_status_consume(cube_client_execution_begin(c, CUBE_EXECUTION_COMPILE_ONLY, &o))) _exit(12);
  bad += cube_status_consume(launch_add(c, k1, in, out, 1)) != 0;
  bad += cube_status_consume(launch_add(c, k2, in, out, 2)) != 0;
  bad += cube_status_consume(cube_execution_override_end(o)) != 0;
  cube_execution_stats_t s = stats_of(o);
  if (s.kernels_registered != 2 || s.kernels_loaded != 2 || s.kernels_compiled != 0) {
    fprintf(stderr, "helper: registered %llu, loaded %llu, compiled %llu\n",
            (unsigned long long)s.kernels_registered, (unsigned long long)s.kernels_loaded,
            (unsigned long long)s.kernels_compiled);
    bad++;
  }
  cube_execution_override_release(o);
  cube_handle_release(in);
  cube_handle_release(out);
  cube_kernel_release(k1);
  cube_kernel_release(k2);
  cube_client_release(c);
  cube_shutdown();
  _exit(bad ? 20 : 0);
}

CUBE_TEST(execution_compile_only_compiles_and_runs_nothing) {
  if (cts_role_is("loads_everything")) helper_loads_everything();
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("exec-compile-only", dir, sizeof(dir));
  CTS_CLIENT(c);
  uint32_t in_v[N], pattern[N];
  for (uint32_t i = 0; i < N; ++i) in_v[i] = i * 3u, pattern[i] = 0xC0DE0000u + i;
  cube_handle_t in, out;
  REQUIRE_OK(cube_client_create_from_slice(c, in_v, sizeof(in_v), &in));
  REQUIRE_OK(cube_client_create_from_slice(c, pattern, sizeof(pattern), &out));
  cube_kernel_t* k1 = add_kernel(1);
  cube_kernel_t* k2 = add_kernel(2);
  REQUIRE(k1 && k2);
  CHECK(cube_client_execution_policy(c) == CUBE_EXECUTION_RUN);

  cube_execution_override_t* o = NULL;
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_COMPILE_ONLY, &o));
  CHECK(cube_client_execution_policy(c) == CUBE_EXECUTION_COMPILE_ONLY);
  CHECK(cube_execution_override_policy(o) == CUBE_EXECUTION_COMPILE_ONLY);
  cube_kernel_cache_stats_t k0 = {0}, k1s = {0};
  REQUIRE_OK(cube_kernel_cache_stats(&k0));
  CHECK_OK(launch_add(c, k1, in, out, 1));
  CHECK_OK(launch_add(c, k2, in, out, 2));
  CHECK_OK(launch_add(c, k1, in, out, 1));
  REQUIRE_OK(cube_kernel_cache_stats(&k1s));
  /* Both kernels were compiled by these launches. */
  CHECK_EQ_U64(k1s.misses - k0.misses, 2);
  /* Reads give zeros and touch nothing. */
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_client_read_one(c, out, &b));
  if (b) {
    CHECK_EQ_U64(cube_bytes_size(b), sizeof(pattern));
    const uint32_t* z = cube_bytes_const_data(b);
    int nonzero = 0;
    for (int i = 0; i < N; ++i) nonzero += z[i] != 0;
    CHECK_EQ_U64(nonzero, 0);
    cube_bytes_release(b);
  }
  uint32_t into[N];
  memset(into, 0xFF, sizeof(into));
  CHECK_OK(cube_client_read_into(c, out, into, sizeof(into)));
  CHECK(into[0] == 0 && into[N - 1] == 0);
  cube_future_t* f = NULL;
  CHECK_OK(cube_client_read_async(c, 1, &out, &f));
  if (f) {
    cube_bytes_t* fb = NULL;
    CHECK_OK(cube_future_wait(f, UINT64_MAX, &fb));
    CHECK(fb && cube_bytes_size(fb) == sizeof(pattern) && ((const uint32_t*)cube_bytes_const_data(fb))[7] == 0);
    cube_bytes_release(fb);
    cube_future_release(f);
  }
  /* Bad input still fails. */
  cube_arg_t short_args[] = {cube_arg_buffer(in)};
  CHECK_STATUS(cube_client_launch(c, k1, cube_count_static(1, 1, 1), 1, short_args),
               CUBE_STATUS_INVALID_ARGUMENT, "4 arguments");
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_execution_override_end(o));
  CHECK(cube_client_execution_policy(c) == CUBE_EXECUTION_RUN);

  cube_execution_stats_t s = stats_of(o);
  CHECK_EQ_U64(s.kernels_registered, 2);
  CHECK_EQ_U64(s.kernels_compiled, 2);
  CHECK_EQ_U64(s.kernels_loaded, 0);
  CHECK_EQ_U64(s.kernels_failed, 0);
  CHECK_EQ_U64(s.launches_skipped, 3);
  CHECK_EQ_U64(s.reads_skipped, 3);
  CHECK_EQ_U64(s.keys_registered, 0);

  /* Nothing ran: the output still holds the pattern. */
  CHECK(cts_read_equals(c, out, pattern, sizeof(pattern)));
  /* Now for real: no compile (memory hit), the right result. */
  REQUIRE_OK(cube_kernel_cache_stats(&k0));
  CHECK_OK(launch_add(c, k2, in, out, 2));
  uint32_t expect[N];
  for (int i = 0; i < N; ++i) expect[i] = in_v[i] + 2;
  CHECK(cts_read_equals(c, out, expect, sizeof(expect)));
  REQUIRE_OK(cube_kernel_cache_stats(&k1s));
  CHECK_EQ_U64(k1s.misses - k0.misses, 0);
  /* Statistics stay readable after the end. */
  CHECK_EQ_U64(stats_of(o).launches_skipped, 3);
  cube_execution_override_release(o);
  cube_handle_release(in);
  cube_handle_release(out);
  cube_kernel_release(k1);
  cube_kernel_release(k2);
  CTS_END(c);

  /* A second process over the same directory loads both, compiles none. */
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role("execution_compile_only_compiles_and_runs_nothing",
                                             "loads_everything", -1)),
               0);
  cts_cache_dir_done(dir);
}

CUBE_TEST(execution_compile_only_reports_a_compile_error) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("exec-compile-error", dir, sizeof(dir));
  CTS_CLIENT(c);
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.source = "CUBE_KERNEL(broken, CUBE_ARRAY(float, y)) {\n  y[0] = undeclared_name;\n}\n";
  d.entry = "broken";
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  cube_handle_t y;
  REQUIRE_OK(cube_client_empty(c, 64, &y));
  cube_execution_override_t* o = NULL;
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_COMPILE_ONLY, &o));
  cube_arg_t a[] = {cube_arg_buffer(y)};
  /* Under the override the compile error is the launch's status, on every
   * backend. */
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 1, a),
               CUBE_STATUS_COMPILATION_FAILED, "undeclared_name");
  CHECK_OK(cube_execution_override_end(o));
  cube_execution_stats_t s = stats_of(o);
  CHECK_EQ_U64(s.kernels_registered, 1);
  CHECK_EQ_U64(s.kernels_failed, 1);
  CHECK_EQ_U64(s.kernels_compiled, 0);
  CHECK_EQ_U64(s.launches_skipped, 0);
  cube_execution_override_release(o);
  cube_handle_release(y);
  cube_kernel_release(k);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

CUBE_TEST(execution_overrides_nest_and_end_in_order) {
  CTS_REQUIRE_BACKEND();
  CTS_CLIENT(c);
  cube_client_t* clone = NULL;
  REQUIRE_OK(cube_client_clone(c, &clone));
  cube_execution_override_t *outer = NULL, *inner = NULL;
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_COMPILE_ONLY, &outer));
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_COMPILE_AND_TUNE, &inner));
  CHECK(cube_client_execution_policy(c) == CUBE_EXECUTION_COMPILE_AND_TUNE);
  /* A retained reference is the same client object; a clone is another. */
  CHECK(cube_client_execution_policy(cube_client_retain(c)) == CUBE_EXECUTION_COMPILE_AND_TUNE);
  cube_client_release(c);
  CHECK(cube_client_execution_policy(clone) == CUBE_EXECUTION_RUN);
  CHECK_STATUS(cube_execution_override_end(outer), CUBE_STATUS_FAILED_PRECONDITION,
               "reverse order");
  CHECK_OK(cube_execution_override_end(inner));
  CHECK(cube_client_execution_policy(c) == CUBE_EXECUTION_COMPILE_ONLY);
  CHECK_STATUS(cube_execution_override_end(inner), CUBE_STATUS_FAILED_PRECONDITION,
               "ended already");
  CHECK_OK(cube_execution_override_end(outer));
  CHECK(cube_client_execution_policy(c) == CUBE_EXECUTION_RUN);
  /* An override left in force ends with its client. */
  cube_execution_override_t* left = NULL;
  REQUIRE_OK(cube_client_execution_begin(clone, CUBE_EXECUTION_COMPILE_ONLY, &left));
  cube_client_release(clone);
  CHECK_STATUS(cube_execution_override_end(left), CUBE_STATUS_FAILED_PRECONDITION,
               "ended already");
  /* Bad input. */
  cube_execution_override_t* x = NULL;
  CHECK_STATUS(cube_client_execution_begin(c, (cube_execution_policy_t)7, &x),
               CUBE_STATUS_INVALID_ARGUMENT, "policy 7");
  CHECK_STATUS(cube_client_execution_begin(NULL, CUBE_EXECUTION_COMPILE_ONLY, &x),
               CUBE_STATUS_INVALID_ARGUMENT, "NULL");
  CHECK_STATUS(cube_client_execution_begin(c, CUBE_EXECUTION_COMPILE_ONLY, NULL),
               CUBE_STATUS_INVALID_ARGUMENT, "out_override");
  CHECK_STATUS(cube_execution_override_end(NULL), CUBE_STATUS_INVALID_ARGUMENT, "NULL");
  cube_execution_stats_t s = {.struct_size = 4};
  CHECK_STATUS(cube_execution_override_stats(outer, &s), CUBE_STATUS_INVALID_ARGUMENT,
               "struct_size");
  CHECK(strcmp(cube_execution_policy_name(CUBE_EXECUTION_COMPILE_AND_TUNE), "compile-and-tune") == 0);
  CHECK(strcmp(cube_execution_policy_name((cube_execution_policy_t)9), "unknown") == 0);
  cube_execution_override_release(outer);
  cube_execution_override_release(inner);
  cube_execution_override_release(left);
  CTS_END(c);
}

typedef struct poller {
  cube_execution_override_t* o;
  atomic_bool stop;
  uint64_t reads, went_back;
} poller_t;

static void* poll_stats(void* p) {
  poller_t* q = p;
  uint64_t last = 0;
  while (!atomic_load(&q->stop)) {
    cube_execution_stats_t s = stats_of(q->o);
    if (s.launches_skipped < last) q->went_back++;
    last = s.launches_skipped;
    q->reads++;
  }
  return NULL;
}

/* Another thread reads the statistics while the launches go on. */
CUBE_TEST(execution_stats_read_from_another_thread) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("exec-stats-thread", dir, sizeof(dir));
  CTS_CLIENT(c);
  cube_kernel_t* k = add_kernel(1);
  REQUIRE(k);
  uint32_t v[N] = {0};
  cube_handle_t in, out;
  REQUIRE_OK(cube_client_create_from_slice(c, v, sizeof(v), &in));
  REQUIRE_OK(cube_client_empty(c, sizeof(v), &out));
  poller_t q = {0};
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_COMPILE_ONLY, &q.o));
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, poll_stats, &q) == 0);
  enum { LAUNCHES = 2000 };
  for (int i = 0; i < LAUNCHES; ++i) CHECK_OK(launch_add(c, k, in, out, 1));
  atomic_store(&q.stop, true);
  pthread_join(t, NULL);
  CHECK_OK(cube_execution_override_end(q.o));
  cube_execution_stats_t s = stats_of(q.o);
  CHECK_EQ_U64(s.launches_skipped, LAUNCHES);
  CHECK_EQ_U64(s.kernels_registered, 1);
  CHECK_EQ_U64(q.went_back, 0);
  CHECK(q.reads > 0);
  cube_execution_override_release(q.o);
  cube_handle_release(in);
  cube_handle_release(out);
  cube_kernel_release(k);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

/* A run override launches for real and counts what the cache did. */
CUBE_TEST(execution_run_override_counts_and_runs) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("exec-run", dir, sizeof(dir));
  CTS_CLIENT(c);
  cube_kernel_t* k = add_kernel(2);
  REQUIRE(k);
  uint32_t v[N];
  for (uint32_t i = 0; i < N; ++i) v[i] = i;
  cube_handle_t in, out;
  REQUIRE_OK(cube_client_create_from_slice(c, v, sizeof(v), &in));
  REQUIRE_OK(cube_client_empty(c, sizeof(v), &out));
  cube_execution_override_t* o = NULL;
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_RUN, &o));
  CHECK_OK(launch_add(c, k, in, out, 5));
  uint32_t expect[N];
  for (int i = 0; i < N; ++i) expect[i] = v[i] + 5;
  CHECK(cts_read_equals(c, out, expect, sizeof(expect)));
  CHECK_OK(cube_execution_override_end(o));
  cube_execution_stats_t s = stats_of(o);
  CHECK_EQ_U64(s.kernels_registered, 1);
  CHECK_EQ_U64(s.kernels_compiled, 1);
  CHECK_EQ_U64(s.launches_skipped, 0);
  CHECK_EQ_U64(s.reads_skipped, 0);
  cube_execution_override_release(o);
  cube_handle_release(in);
  cube_handle_release(out);
  cube_kernel_release(k);
  CTS_END(c);
  cts_cache_dir_done(dir);
}
