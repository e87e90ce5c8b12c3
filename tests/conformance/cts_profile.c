/* cube_client_profile, profile levels and the log (docs/cubecl.md, "Profiling levels"). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"
#include "cube/dlpack_types.h"

typedef struct cts_prof {
  cube_client_t* c;
  cube_kernel_t* k;
  cube_handle_t x, y, out;
  uint32_t n;
  int calls;
} cts_prof_t;

static cube_status_t cts_prof_launch(void* p) {
  cts_prof_t* s = p;
  s->calls++;
  cube_arg_t args[5] = {cube_arg_buffer(s->x), cube_arg_buffer(s->y), cube_arg_buffer(s->out),
                        cube_arg_f32(2.0f), cube_arg_u32(s->n)};
  return cube_client_launch(s->c, s->k, cube_count_static((s->n + 255) / 256, 1, 1), 5, args);
}

static void cts_prof_setup(cube_client_t* c, cts_prof_t* s, float* x, uint32_t n) {
  memset(s, 0, sizeof(*s));
  s->c = c;
  s->n = n;
  const cube_arg_kind_t kinds[5] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_F32,
                                    CUBE_ARG_U32};
  cube_dim_t dim = {256, 1, 1};
  REQUIRE_OK(cts_kernel_create("saxpy_profiled", cts_k_saxpy, dim, 0, 5, kinds, &s->k));
  cube_test_fill_random(x, (size_t)n * 4, 8000);
  for (uint32_t i = 0; i < n; ++i) x[i] = (float)(i % 1000);
  REQUIRE_OK(cube_client_create_from_slice(c, x, (size_t)n * 4, &s->x));
  REQUIRE_OK(cube_client_create_from_slice(c, x, (size_t)n * 4, &s->y));
  REQUIRE_OK(cts_poisoned(c, (size_t)n * 4, &s->out));
}

static void cts_prof_teardown(cts_prof_t* s) {
  cube_handle_release(s->x);
  cube_handle_release(s->y);
  cube_handle_release(s->out);
  cube_kernel_release(s->k);
}

CUBE_TEST(profile_launch_duration) {
  CTS_CLIENT(c);
  const uint32_t n = 1000003;
  float* x = malloc((size_t)n * 4);
  REQUIRE(x);
  cts_prof_t s;
  cts_prof_setup(c, &s, x, n);
  cube_profile_duration_t d;
  memset(&d, 0, sizeof(d));
  d.method = (cube_timing_method_t)77;
  CHECK_OK(cube_client_profile(c, cts_prof_launch, &s, "saxpy region", &d));
  CHECK(s.calls == 1);
  CHECK(d.end_ns >= d.start_ns);
  CHECK(cube_profile_duration_ns(&d) > 0);
  CHECK(d.method == cube_client_properties(c)->timing_method);
  if (cts_backend()->backend == CUBE_BACKEND_CPU) CHECK(d.method == CUBE_TIMING_DEVICE);
  /* The work inside was finished when profile returned: the output is
   * complete without a further sync. */
  float* got = NULL;
  size_t size = 0;
  REQUIRE_OK(cts_read_alloc(c, s.out, (void**)&got, &size));
  int ok = size == (size_t)n * 4;
  for (uint32_t i = 0; ok && i < n; ++i) ok = cts_saxpy_match(got[i], 2.0f, x[i], x[i]);
  CHECK(ok);
  free(got);
  /* Durations of two profiles do not overlap. */
  cube_profile_duration_t d2;
  CHECK_OK(cube_client_profile(c, cts_prof_launch, &s, NULL, &d2));
  CHECK(d2.start_ns >= d.end_ns);
  CHECK(cube_client_profile_level(c) == CUBE_PROFILE_NONE || getenv("CUBE_PROFILE"));
  CHECK_OK(cube_client_flush(c));
  cts_prof_teardown(&s);
  free(x);
  CTS_END(c);
}

typedef struct cts_prof_fail {
  cube_client_t* c;
  cube_kernel_t* fail;
  cube_handle_t h;
} cts_prof_fail_t;

static cube_status_t cts_prof_failing_launch(void* p) {
  cts_prof_fail_t* f = p;
  cube_arg_t a[5] = {cube_arg_buffer(f->h), cube_arg_u32(1), cube_arg_u32(0), cube_arg_u32(0),
                     cube_arg_i32(13)};
  return cts_launch_fail(f->c, f->fail, cube_count_static(2, 1, 1), 5, a);
}

static cube_status_t cts_prof_bad_call(void* p) {
  cts_prof_fail_t* f = p;
  cube_handle_t h;
  return cube_client_empty(f->c, 0, &h);
}

CUBE_TEST(profile_failing_launch_reported_by_profile) {
  CTS_CLIENT(c);
  cts_prof_fail_t f = {c, NULL, CUBE_HANDLE_NULL};
  const cube_arg_kind_t kinds[5] = {CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32, CUBE_ARG_U32, CUBE_ARG_I32};
  cube_dim_t dim = {1, 1, 1};
  REQUIRE_OK(cts_kernel_create("cts_fail_in_profile", cts_k_fail, dim, 0, 5, kinds, &f.fail));
  REQUIRE_OK(cube_client_empty(c, 8, &f.h));
  cube_profile_duration_t d;
  CHECK_STATUS(cube_client_profile(c, cts_prof_failing_launch, &f, "failing", &d),
               CUBE_STATUS_LAUNCH_FAILED, "cts_fail_in_profile");
  CHECK_OK(cube_client_flush(c)); /* the stream stays clean */
  CHECK_OK(cube_client_sync(c));
  /* The failed launch left f.h without valid contents: written whole before
   * each launch that is to fail again (one on a tainted buffer is not run). */
  static const uint8_t zeros[8] = {0};
  CHECK(cts_read_lost(c, f.h, "cts_fail_in_profile", (const char*)NULL));
  CHECK_OK(cube_client_write(c, f.h, zeros, sizeof(zeros)));
  /* The fn's own status comes back too. */
  CHECK_STATUS(cube_client_profile(c, cts_prof_bad_call, &f, "bad", &d), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_empty");
  CHECK_OK(cube_client_flush(c));
  /* A failure queued before the profile stays on the stream. */
  CHECK_OK(cts_prof_failing_launch(&f));
  CHECK_STATUS(cube_client_profile(c, cts_prof_bad_call, &f, "bad", &d), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_empty");
  CHECK_STATUS(cube_client_flush(c), CUBE_STATUS_LAUNCH_FAILED, "cts_fail_in_profile");
  CHECK_OK(cube_client_flush(c));
  CHECK_OK(cube_client_write(c, f.h, zeros, sizeof(zeros)));
  /* A failing launch inside a profile that otherwise succeeds: reported by
   * the profile only. */
  CHECK_STATUS(cube_client_profile(c, cts_prof_failing_launch, &f, NULL, &d), CUBE_STATUS_LAUNCH_FAILED,
               "cts_fail_in_profile", cts_native_kernels() ? "1, 0, 0" : "");
  CHECK_OK(cube_client_sync(c));
  /* Profiling works afterwards. */
  uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  cube_handle_t h2;
  REQUIRE_OK(cube_client_create_from_slice(c, bytes, 8, &h2));
  CHECK(cts_read_equals(c, h2, bytes, 8));
  cube_handle_release(h2);
  cube_handle_release(f.h);
  cube_kernel_release(f.fail);
  CTS_END(c);
}

/* A client with its own server options: profile |level|, logs into |log|. */
static cube_status_t cts_client_with_log(cube_profile_level_t level, cts_log_t* log, cube_client_t** out) {
  return cts_client_logging(level, cts_log_fn, log, out);
}

static void cts_launch_named(cube_client_t* c, cube_kernel_t* k, cube_handle_t h, int times) {
  cube_arg_t a = cube_arg_buffer(h);
  for (int i = 0; i < times; ++i) CHECK_OK(cube_client_launch(c, k, cube_count_static(2, 3, 4), 1, &a));
}

/* True if a line of |log| has a cell equal to |name| and a cell equal to |count|. */
static int cts_table_row(cts_log_t* log, const char* name, const char* count) {
  int found = 0;
  pthread_mutex_lock(&log->lock);
  for (size_t i = 0; i < log->count && !found; ++i) {
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", log->lines[i]);
    int has_name = 0, has_count = 0;
    for (char* cell = strtok(buf, "|"); cell; cell = strtok(NULL, "|")) {
      while (isspace((unsigned char)*cell)) ++cell;
      size_t l = strlen(cell);
      while (l && isspace((unsigned char)cell[l - 1])) cell[--l] = 0;
      if (strcmp(cell, name) == 0) has_name = 1;
      if (strcmp(cell, count) == 0) has_count = 1;
    }
    found = has_name && has_count;
  }
  pthread_mutex_unlock(&log->lock);
  return found;
}

/* The launches the summary counts as compiles: the "Num Computed" of rows
 * of kind "compile" or "cache load" (dialect kernels on first launch). */
static unsigned cts_compile_rows(cts_log_t* log) {
  unsigned total = 0;
  pthread_mutex_lock(&log->lock);
  for (size_t i = 0; i < log->count; ++i) {
    if (!strstr(log->lines[i], "| compile ") && !strstr(log->lines[i], "| cache load ")) continue;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", log->lines[i]);
    int cell_no = 0;
    for (char* cell = strtok(buf, "|"); cell; cell = strtok(NULL, "|"), ++cell_no)
      if (cell_no == 3) total += (unsigned)strtoul(cell, NULL, 10);
  }
  pthread_mutex_unlock(&log->lock);
  return total;
}

typedef struct cts_named {
  cube_client_t* c;
  cube_kernel_t* k;
  cube_handle_t h;
} cts_named_t;

static cube_status_t cts_named_launch(void* p) {
  cts_named_t* n = p;
  cube_arg_t a = cube_arg_buffer(n->h);
  return cube_client_launch(n->c, n->k, cube_count_static(1, 1, 1), 1, &a);
}

CUBE_TEST(profile_level_basic_summary) {
  cts_log_t log;
  cts_log_init(&log);
  cube_client_t* c = NULL;
  cube_status_t st = cts_client_with_log(CUBE_PROFILE_BASIC, &log, &c);
  if (cube_status_code(st) == CUBE_STATUS_UNAVAILABLE) {
    cube_status_free(st);
    cts_log_free(&log);
    CUBE_SKIP("backend unavailable");
  }
  REQUIRE_OK(st);
  CHECK(cube_client_profile_level(c) == CUBE_PROFILE_BASIC);
  CTS_KERNEL(k1, "k1", cts_k_nop, 1, 0, CUBE_ARG_BUFFER);
  CTS_KERNEL(k2, "k2", cts_k_nop, 1, 0, CUBE_ARG_BUFFER);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 16, &h));
  cts_launch_named(c, k1, h, 3);
  cts_launch_named(c, k2, h, 1);
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_log_find(&log, "Total", (const char*)NULL) >= 0);
  CHECK(cts_table_row(&log, "k1", "3"));
  CHECK(cts_table_row(&log, "k2", "1"));
  char total[16];
  /* Compiles and cache loads are rows of their own, outside the total:
   * Total counts the four launches, each once. */
  snprintf(total, sizeof(total), "%u", 4u);
  CHECK(cts_table_row(&log, "Total", total));
  if (cts_backend()->backend != CUBE_BACKEND_CPU || getenv("CUBE_CTS_DIALECT"))
    CHECK(cts_compile_rows(&log) <= 2u); /* k1 and k2 at most once each */
  CHECK(cts_log_find(&log, "Executing", (const char*)NULL) < 0); /* not at basic */
  if (!cts_table_row(&log, "k1", "3") || !cts_table_row(&log, "Total", total)) cts_log_dump(&log);
  /* The summary resets after it was printed. */
  cts_log_clear(&log);
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_log_find(&log, "k1", (const char*)NULL) < 0);
  cts_launch_named(c, k2, h, 2);
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_table_row(&log, "k2", "2"));
  CHECK(!cts_table_row(&log, "k1", "3"));
  /* Named profiles show up in the summary as well. */
  cts_log_clear(&log);
  cts_named_t nl = {c, k1, h};
  cube_profile_duration_t d;
  CHECK_OK(cube_client_profile(c, cts_named_launch, &nl, "my_region", &d));
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_table_row(&log, "my_region", "1"));
  CHECK(cts_table_row(&log, "region", "1")); /* its kind: not added to the total */
  CHECK(cts_table_row(&log, "Total", "1"));  /* the launch inside, counted once */
  CHECK(cts_table_row(&log, "k1", "1"));
  if (!cts_table_row(&log, "my_region", "1")) cts_log_dump(&log);
  cube_handle_release(h);
  cube_kernel_release(k1);
  cube_kernel_release(k2);
  CTS_END(c);
  cts_log_free(&log);
}

/* A replay is one row of the summary, "graph (N nodes)", counted once per
 * replay; its nodes have no rows of their own. */
CUBE_TEST(profile_graph_replay_one_row) {
  cts_log_t log;
  cts_log_init(&log);
  cube_client_t* c = NULL;
  cube_status_t st = cts_client_with_log(CUBE_PROFILE_BASIC, &log, &c);
  if (cube_status_code(st) == CUBE_STATUS_UNAVAILABLE) {
    cube_status_free(st);
    cts_log_free(&log);
    CUBE_SKIP("backend unavailable");
  }
  REQUIRE_OK(st);
  CTS_KERNEL(k1, "k1", cts_k_nop, 1, 0, CUBE_ARG_BUFFER);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 16, &h));
  REQUIRE_OK(cube_client_capture_begin(c));
  cts_launch_named(c, k1, h, 3);
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  CHECK_OK(cube_client_replay(c, g, 0, NULL));
  CHECK_OK(cube_client_replay(c, g, 0, NULL));
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_table_row(&log, "graph (3 nodes)", "2"));
  CHECK(cts_log_find(&log, "k1", (const char*)NULL) < 0);
  if (!cts_table_row(&log, "graph (3 nodes)", "2")) cts_log_dump(&log);
  cube_graph_release(g);
  cube_handle_release(h);
  cube_kernel_release(k1);
  CTS_END(c);
  cts_log_free(&log);
}

CUBE_TEST(profile_level_exec_logs_launches) {
  CTS_REQUIRE_BACKEND();
  cts_log_t log;
  cts_log_init(&log);
  cube_client_t* c = NULL;
  REQUIRE_OK(cts_client_with_log(CUBE_PROFILE_EXEC, &log, &c));
  CHECK(cube_client_profile_level(c) == CUBE_PROFILE_EXEC);
  CTS_KERNEL(k1, "k1", cts_k_nop, 1, 0, CUBE_ARG_BUFFER);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 16, &h));
  cts_launch_named(c, k1, h, 2);
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_log_find(&log, "Executing k1", (const char*)NULL) >= 0);
  CHECK(cts_log_find(&log, "Total", (const char*)NULL) < 0); /* no summary at exec */
  size_t n = 0;
  pthread_mutex_lock(&log.lock);
  for (size_t i = 0; i < log.count; ++i) n += strstr(log.lines[i], "Executing k1") != NULL;
  pthread_mutex_unlock(&log.lock);
  CHECK(n == 2);
  if (n != 2) cts_log_dump(&log);
  cube_handle_release(h);
  cube_kernel_release(k1);
  CTS_END(c);
  cts_log_free(&log);
}

CUBE_TEST(profile_env_medium) {
  CTS_REQUIRE_BACKEND();
  setenv("CUBE_PROFILE", "medium", 1);
  cube_shutdown(); /* the environment is read again after it */
  cts_log_t log;
  cts_log_init(&log);
  cube_client_t* c = NULL;
  REQUIRE_OK(cts_client_with_log(CUBE_PROFILE_NONE, &log, &c));
  CHECK(cube_client_profile_level(c) == CUBE_PROFILE_MEDIUM);
  CTS_KERNEL(k1, "k1", cts_k_nop, 1, 0, CUBE_ARG_BUFFER);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 16, &h));
  cts_launch_named(c, k1, h, 3);
  CHECK_OK(cube_client_flush(c));
  CHECK_OK(cube_client_sync(c));
  /* "| <duration> | k1" per launch. */
  size_t n = 0;
  pthread_mutex_lock(&log.lock);
  for (size_t i = 0; i < log.count; ++i) {
    const char* l = log.lines[i];
    size_t len = strlen(l);
    if (l[0] == '|' && len > 5 && strcmp(l + len - 4, "| k1") == 0) ++n;
  }
  pthread_mutex_unlock(&log.lock);
  CHECK(n == 3);
  CHECK(cts_table_row(&log, "k1", "3")); /* and the summary at sync */
  if (n != 3) cts_log_dump(&log);
  cube_handle_release(h);
  cube_kernel_release(k1);
  CTS_END(c);
  cts_log_free(&log);
}

CUBE_TEST(profile_level_full_logs_counts) {
  CTS_REQUIRE_BACKEND();
  cts_log_t log;
  cts_log_init(&log);
  cube_client_t* c = NULL;
  REQUIRE_OK(cts_client_with_log(CUBE_PROFILE_FULL, &log, &c));
  CHECK(cube_client_profile_level(c) == CUBE_PROFILE_FULL);
  CTS_KERNEL(k1, "k1", cts_k_nop, 1, 0, CUBE_ARG_BUFFER);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 16, &h));
  cts_launch_named(c, k1, h, 1);
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_log_find(&log, "k1", "CubeCount", "2, 3, 4", (const char*)NULL) >= 0);
  if (cts_log_find(&log, "k1", "CubeCount", "2, 3, 4", (const char*)NULL) < 0) cts_log_dump(&log);
  cube_handle_release(h);
  cube_kernel_release(k1);
  CTS_END(c);
  cts_log_free(&log);
}

CUBE_TEST(profile_log_file_env) {
  char path[512];
  cts_tmp_path(path, sizeof(path), "cts_profile_log");
  remove(path);
  setenv("CUBE_LOG_FILE", path, 1);
  setenv("CUBE_PROFILE", "exec", 1);
  CTS_CLIENT(c);
  CHECK(cube_client_profile_level(c) == CUBE_PROFILE_EXEC);
  CTS_KERNEL(k1, "k1_to_file", cts_k_nop, 1, 0, CUBE_ARG_BUFFER);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 16, &h));
  cts_launch_named(c, k1, h, 1);
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(h);
  cube_kernel_release(k1);
  CTS_END(c); /* closes the log */
  FILE* f = fopen(path, "r");
  REQUIRE(f);
  char line[512];
  int found = 0;
  while (fgets(line, sizeof(line), f)) found |= strstr(line, "Executing k1_to_file") != NULL;
  fclose(f);
  CHECK(found);
  remove(path);
}

/* What a log callback may call. The server's log callback runs inside the
 * device's own task ("Executing <kernel>" at level exec); from there:
 *  - calls that only read what cube keeps (the profile summary, the memory
 *    report) work. The summary used to hang the device for good: the
 *    callback ran under the lock the summary takes.
 *  - calls that must queue work behind that task are refused, and each
 *    refusal names its call (reads and launches used to say only
 *    "re-entrant use of service ...", naming none). */
typedef struct cts_from_log {
  cube_client_t* c;
  cube_kernel_t* k;
  cube_handle_t h;
  int calls;
  cube_status_t summary, report;
  cube_status_t refused[7];
} cts_from_log_t;

static const char* const cts_from_log_names[7] = {
    "cube_client_read_one",    "cube_client_read_into",        "cube_client_read_async",
    "cube_client_launch",      "cube_client_launch_unchecked", "cube_client_sync_async",
    "cube_client_to_dlpack"};

static void cts_from_log_fn(void* user, const char* line) {
  (void)line;
  cts_from_log_t* s = user;
  if (s->calls++) return;
  cube_profile_summary_t sum = {0};
  s->summary = cube_client_profile_summary(s->c, 0, &sum);
  if (!s->summary) cube_profile_summary_deinitialize(&sum);
  cube_memory_report_t rep;
  memset(&rep, 0, sizeof(rep));
  s->report = cube_client_memory_report(s->c, &rep);
  cube_bytes_t* b = NULL;
  s->refused[0] = cube_client_read_one(s->c, s->h, &b);
  cube_bytes_release(b);
  unsigned char into[64];
  s->refused[1] = cube_client_read_into(s->c, s->h, into, sizeof(into));
  cube_future_t* f = NULL;
  s->refused[2] = cube_client_read_async(s->c, 1, &s->h, &f);
  if (f) cube_future_release(f);
  cube_arg_t a = cube_arg_buffer(s->h);
  s->refused[3] = cube_client_launch(s->c, s->k, cube_count_static(1, 1, 1), 1, &a);
  s->refused[4] = cube_client_launch_unchecked(s->c, s->k, cube_count_static(1, 1, 1), 1, &a);
  f = NULL;
  s->refused[5] = cube_client_sync_async(s->c, &f);
  if (f) cube_future_release(f);
  cube_dlpack_export_t ex;
  memset(&ex, 0, sizeof(ex));
  ex.handle = s->h;
  ex.dtype = (cube_dlpack_dtype_t){CUBE_DLPACK_UINT, 8, 1};
  ex.rank = 1;
  ex.shape[0] = 64;
  struct DLManagedTensorVersioned* t = NULL;
  s->refused[6] = cube_client_to_dlpack(s->c, &ex, &t);
  if (t && t->deleter) t->deleter(t);
}

CUBE_TEST(log_callback_calls_name_themselves) {
  CTS_REQUIRE_KERNEL_LOGS();
  cts_from_log_t s;
  memset(&s, 0, sizeof(s));
  CTS_CLIENT_LOGGING(s.c, CUBE_PROFILE_EXEC, cts_from_log_fn, &s);
  CTS_KERNEL(k, "nop_logged_calls", cts_k_nop, 1, 0, CUBE_ARG_BUFFER);
  s.k = k;
  REQUIRE_OK(cube_client_empty(s.c, 64, &s.h));
  cube_arg_t a = cube_arg_buffer(s.h);
  REQUIRE_OK(cube_client_launch(s.c, k, cube_count_static(1, 1, 1), 1, &a));
  REQUIRE_OK(cube_client_sync(s.c));
  REQUIRE(s.calls > 0);
  CHECK_OK(s.summary);
  CHECK_OK(s.report);
  for (int i = 0; i < 7; ++i)
    CHECK_STATUS(s.refused[i], CUBE_STATUS_FAILED_PRECONDITION, cts_from_log_names[i],
                 "re-entrant", "log callback");
  /* The device works afterwards. */
  uint8_t bytes[5] = {9, 8, 7, 6, 5};
  cube_handle_t h2;
  REQUIRE_OK(cube_client_create_from_slice(s.c, bytes, 5, &h2));
  CHECK(cts_read_equals(s.c, h2, bytes, 5));
  cube_handle_release(h2);
  cube_handle_release(s.h);
  cube_kernel_release(k);
  cube_client_release(s.c);
}
