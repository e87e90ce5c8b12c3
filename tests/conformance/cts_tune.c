/* Tunable operations (cube/tune.h) on every backend: anchoring, validity,
 * a wrong candidate rejected, tuning once under concurrency (threads and two
 * processes), persistence across processes, corrupt and stale records,
 * CUBE_TUNE=off, the policies of cube/execution.h over tunable launches, and
 * the fallback when the winner cannot run another shape of its bucket. Each
 * case uses a cache directory of its own.
 *
 * The operation: y = a * x + y over n floats (in place: tuning must not apply
 * it more than once, and each candidate must see the caller's y), with
 * candidates that differ by cube dim, by elements per unit, by busy work, one
 * that computes nothing (the fastest, and wrong) and one whose cube dim no
 * device allows. */
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cts.h"
#include "kernel/cache.h"
#include "kernel/cache_internal.h"

static const char* k_src =
    "CUBE_KERNEL(saxpy_tuned, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a,\n"
    "            uint32_t n) {\n"
    "#if WRONG\n"
    "  /* computes nothing */\n"
    "#elif PER_UNIT == 2\n"
    "  uint64_t i = 2 * (uint64_t)ABSOLUTE_POS;\n"
    "  if (i < n) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "  if (i + 1 < n) CUBE_STORE(y, i + 1, a * CUBE_LOAD(x, i + 1) + CUBE_LOAD(y, i + 1));\n"
    "#else\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < n) {\n"
    "    float v = a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i);\n"
    "#if SLOW\n"
    "    float t = v;\n"
    "    for (uint32_t k = 0; k < SLOW; ++k) t = t * 1.0000001f + 1e-7f;\n"
    "    if (t == 12345.5f) v += 1.0f;\n"
    "#endif\n"
    "    CUBE_STORE(y, i, v);\n"
    "  }\n"
    "#endif\n"
    "}\n";

typedef struct cand_spec {
  const char* name;
  uint32_t dim;
  uint32_t per_unit;
  uint32_t slow;  /* busy iterations per element, 0: none */
  bool wrong;
  bool even_only; /* validity: n must be even */
} cand_spec_t;

static cube_status_t count_fn(void* user, size_t n_args, const cube_arg_t* args,
                              cube_count_t* out) {
  (void)n_args;
  const cand_spec_t* s = user;
  uint64_t per_cube = (uint64_t)s->dim * s->per_unit;
  uint32_t n = args[3].v.u32;
  *out = cube_count_static((uint32_t)((n + per_cube - 1) / per_cube), 1, 1);
  return CUBE_OK;
}

static cube_status_t even_only(void* user, const cube_device_properties_t* props, size_t n_args,
                               const cube_arg_t* args) {
  (void)user;
  (void)props;
  (void)n_args;
  if (args[3].v.u32 % 2)
    return cube_status_make(CUBE_STATUS_INVALID_ARGUMENT, "needs an even n, n is %u",
                            args[3].v.u32);
  return CUBE_OK;
}

static cube_status_t key_fn(void* user, const cube_device_properties_t* props, size_t n_args,
                            const cube_arg_t* args, cube_tune_key_t* out) {
  (void)user;
  (void)props;
  (void)n_args;
  out->count = 1;
  out->values[0] = cube_tune_anchor(args[3].v.u32, 1u << 30);
  return CUBE_OK;
}

typedef struct op_set {
  cube_tune_op_t* op;
  cube_kernel_t* kernels[8];
  uint32_t count;
} op_set_t;

/* An operation over |specs| (|n| of them); candidate 0 is the reference
 * when |reference|. */
static cube_status_t make_op(const char* name, const char* version, const cand_spec_t* specs,
                             uint32_t n, bool reference, double budget, op_set_t* out) {
  memset(out, 0, sizeof(*out));
  cube_tune_candidate_t cands[8];
  for (uint32_t i = 0; i < n; ++i) {
    char per[8], slow[16], dim[16];
    snprintf(per, sizeof(per), "%u", specs[i].per_unit);
    snprintf(slow, sizeof(slow), "%uu", specs[i].slow);
    snprintf(dim, sizeof(dim), "%u", specs[i].dim);
    /* DIM: a unit of its own for each candidate (a cube dim alone does not
     * change the compiled text). */
    cube_define_t defs[4] = {{"PER_UNIT", per}, {"SLOW", slow}, {"WRONG", specs[i].wrong ? "1" : "0"},
                             {"DIM", dim}};
    cube_kernel_desc_t d;
    cube_kernel_desc_initialize(&d);
    d.name = specs[i].name;
    d.source = k_src;
    d.entry = "saxpy_tuned";
    d.cube_dim = (cube_dim_t){specs[i].dim, 1, 1};
    d.defines = defs;
    d.define_count = 4;
    cube_status_t st = cube_kernel_create(&d, &out->kernels[i]);
    if (st) return st;
    out->count = i + 1;
    cands[i] = (cube_tune_candidate_t){specs[i].name, out->kernels[i], count_fn,
                                       specs[i].even_only ? even_only : NULL, (void*)&specs[i]};
  }
  cube_tune_op_desc_t od;
  cube_tune_op_desc_initialize(&od);
  od.name = name;
  od.version = version;
  od.candidates = cands;
  od.candidate_count = n;
  od.key = key_fn;
  od.reference = reference ? 0 : -1;
  od.outputs = 1u << 1;
  od.compare = CUBE_TUNE_COMPARE_F32;
  od.rtol = 1e-5;
  od.atol = 1e-6;
  od.budget_s = budget;
  return cube_tune_op_create(&od, &out->op);
}

static void free_op(op_set_t* s) {
  cube_tune_op_release(s->op);
  for (uint32_t i = 0; i < s->count; ++i) cube_kernel_release(s->kernels[i]);
  memset(s, 0, sizeof(*s));
}

/* The candidates most cases use. */
static const cand_spec_t k_specs[] = {
    {"ref", 64, 1, 0, false, false},
    {"dim128", 128, 1, 0, false, false},
    {"fast_wrong", 64, 1, 0, true, false},
    {"too_big", 8192, 1, 0, false, false},
    {"pairs_even", 64, 2, 0, false, true},
};
#define K_SPECS (uint32_t)(sizeof(k_specs) / sizeof(k_specs[0]))

/* The data of one launch: x, y and the expected y after one saxpy. */
typedef struct data {
  uint32_t n;
  float a;
  float* x;
  float* y0;
  cube_handle_t hx, hy;
} data_t;

static cube_status_t data_make(cube_client_t* c, uint32_t n, uint64_t seed, data_t* d) {
  memset(d, 0, sizeof(*d));
  d->n = n;
  d->a = 1.5f;
  d->x = malloc(n * sizeof(float));
  d->y0 = malloc(n * sizeof(float));
  if (!d->x || !d->y0) return cube_status_make(CUBE_STATUS_OUT_OF_MEMORY, "test data");
  uint64_t s = seed;
  for (uint32_t i = 0; i < n; ++i) {
    d->x[i] = (float)(cube_test_rand(&s) % 1000) / 100.0f;
    d->y0[i] = (float)(cube_test_rand(&s) % 1000) / 10.0f + 1.0f;
  }
  cube_status_t st = cube_client_create_from_slice(c, d->x, n * sizeof(float), &d->hx);
  if (!st) st = cube_client_create_from_slice(c, d->y0, n * sizeof(float), &d->hy);
  return st;
}

static void data_args(const data_t* d, cube_arg_t a[4]) {
  a[0] = cube_arg_buffer(d->hx);
  a[1] = cube_arg_buffer(d->hy);
  a[2] = cube_arg_f32(d->a);
  a[3] = cube_arg_u32(d->n);
}

/* y read back equals |times| saxpys applied to y0. */
static int data_check(cube_client_t* c, const data_t* d, int times) {
  void* got = NULL;
  size_t size = 0;
  cube_status_t st = cts_read_alloc(c, d->hy, &got, &size);
  if (st) {
    fprintf(stderr, "read: %s\n", cube_status_message(st));
    cube_status_free(st);
    return 0;
  }
  const float* y = got;
  int bad = 0;
  for (uint32_t i = 0; i < d->n; ++i) {
    float e = d->y0[i];
    for (int t = 0; t < times; ++t) e = d->a * d->x[i] + e;
    if (fabsf(y[i] - e) > 1e-5f * (1.0f + fabsf(e))) {
      if (bad < 3) fprintf(stderr, "y[%u] = %.9g, expected %.9g\n", i, y[i], e);
      ++bad;
    }
  }
  free(got);
  return bad == 0;
}

static void data_free(data_t* d) {
  cube_handle_release(d->hx);
  cube_handle_release(d->hy);
  free(d->x);
  free(d->y0);
}

static cube_execution_stats_t stats_of(cube_execution_override_t* o) {
  cube_execution_stats_t s;
  memset(&s, 0, sizeof(s));
  cube_status_free(cube_execution_override_stats(o, &s));
  return s;
}

//===----------------------------------------------------------------------===//
// Anchoring, validity, a wrong candidate
//===----------------------------------------------------------------------===//

CUBE_TEST(tune_anchor_buckets) {
  CHECK_EQ_U64(cube_tune_anchor(0, 0), 0);
  CHECK_EQ_U64(cube_tune_anchor(1, 0), 1);
  CHECK_EQ_U64(cube_tune_anchor(3, 0), 4);
  CHECK_EQ_U64(cube_tune_anchor(64, 0), 64);
  CHECK_EQ_U64(cube_tune_anchor(65, 0), 128);
  CHECK_EQ_U64(cube_tune_anchor(5000, 4096), 4096);
  CHECK_EQ_U64(cube_tune_anchor(4000, 4096), 4096);
  CHECK_EQ_U64(cube_tune_anchor(1000, 4096), 1024);
  CHECK_EQ_U64(cube_tune_anchor(UINT64_MAX, 0), UINT64_C(1) << 63);
  CHECK_EQ_U64(cube_tune_anchor((UINT64_C(1) << 40) + 1, 0), UINT64_C(1) << 41);
}

/* One tuning serves the shapes of its bucket; another bucket tunes again. */
CUBE_TEST(tune_anchoring_shares_a_key) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-anchor", dir, sizeof(dir));
  CTS_CLIENT(c);
  op_set_t s;
  REQUIRE_OK(make_op("anchor_op", "1", k_specs, 2, true, 2.0, &s));
  cube_execution_override_t* o = NULL;
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_RUN, &o));
  /* 1000, 1010 and 520 anchor to 1024, 3000 to 4096. */
  const uint32_t sizes[] = {1000, 1010, 520, 3000};
  const uint64_t want_tuned[] = {1, 1, 1, 2};
  for (int k = 0; k < 4; ++k) {
    data_t d;
    REQUIRE_OK(data_make(c, sizes[k], 7 + k, &d));
    cube_arg_t a[4];
    data_args(&d, a);
    CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
    CHECK(data_check(c, &d, 1));
    cube_execution_stats_t st = stats_of(o);
    if (st.keys_tuned != want_tuned[k])
      fprintf(stderr, "after n = %u: %llu keys tuned, expected %llu\n", sizes[k],
              (unsigned long long)st.keys_tuned, (unsigned long long)want_tuned[k]);
    CHECK_EQ_U64(st.keys_tuned, want_tuned[k]);
    CHECK_EQ_U64(st.keys_registered, want_tuned[k]);
    /* The record of each shape is its bucket's. */
    cube_tune_record_t r = {0};
    CHECK_OK(cube_tune_op_record(s.op, c, 4, a, &r));
    CHECK_EQ_U64(r.key.count, 1);
    CHECK_EQ_U64(r.key.values[0], cube_tune_anchor(sizes[k], 0));
    data_free(&d);
  }
  CHECK_OK(cube_execution_override_end(o));
  cube_execution_override_release(o);
  free_op(&s);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

CUBE_TEST(tune_rejects_a_wrong_candidate_and_skips_invalid_ones) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-wrong", dir, sizeof(dir));
  CTS_CLIENT(c);
  op_set_t s;
  REQUIRE_OK(make_op("wrong_op", "1", k_specs, K_SPECS, true, 2.0, &s));
  data_t d;
  REQUIRE_OK(data_make(c, 4001, 3, &d)); /* odd: pairs_even cannot run it */
  cube_arg_t a[4];
  data_args(&d, a);
  cube_tune_record_t r = {0};
  CHECK_STATUS(cube_tune_op_record(s.op, c, 4, a, &r), CUBE_STATUS_NOT_FOUND, "not been tuned");
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  /* Applied once, on the caller's y (the candidates ran on scratch copies). */
  CHECK(data_check(c, &d, 1));
  memset(&r, 0, sizeof(r));
  REQUIRE_OK(cube_tune_op_record(s.op, c, 4, a, &r));
  CHECK_EQ_U64(r.candidate_count, K_SPECS);
  CHECK(r.origin == CUBE_TUNE_ORIGIN_TUNED);
  CHECK(r.winner == 0 || r.winner == 1);
  /* The right candidates agree with the reference (each saw the caller's y:
   * the operation works in place). */
  CHECK(r.results[0].outcome == CUBE_TUNE_MEASURED || r.results[0].outcome == CUBE_TUNE_ELIMINATED);
  CHECK(r.results[1].outcome == CUBE_TUNE_MEASURED || r.results[1].outcome == CUBE_TUNE_ELIMINATED);
  CHECK(r.results[2].outcome == CUBE_TUNE_WRONG);
  if (!cts_contains(r.results[2].reason, "element", "reference 'ref'", NULL))
    fprintf(stderr, "fast_wrong: %s\n", r.results[2].reason);
  CHECK(cts_contains(r.results[2].reason, "output argument 1", "element", "reference 'ref'", NULL));
  CHECK(r.results[3].outcome == CUBE_TUNE_INVALID);
  CHECK(cts_contains(r.results[3].reason, "8192", "units", NULL));
  CHECK(r.results[4].outcome == CUBE_TUNE_INVALID);
  CHECK(cts_contains(r.results[4].reason, "needs an even n", NULL));
  CHECK(r.results[r.winner].samples >= 1 && r.results[r.winner].best_ns > 0);
  CHECK(strcmp(cube_tune_outcome_name(CUBE_TUNE_WRONG), "wrong") == 0);
  /* A second launch (a lookup) applies it once more. */
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  CHECK(data_check(c, &d, 2));
  /* Running a candidate alone: the wrong one computes nothing. */
  CHECK_OK(cube_tune_op_launch_candidate(s.op, c, 2, 4, a));
  CHECK(data_check(c, &d, 2));
  CHECK_STATUS(cube_tune_op_launch_candidate(s.op, c, 4, 4, a), CUBE_STATUS_INVALID_ARGUMENT,
               "even n");
  CHECK_STATUS(cube_tune_op_launch_candidate(s.op, c, 9, 4, a), CUBE_STATUS_OUT_OF_RANGE,
               "index 9");
  data_free(&d);
  free_op(&s);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

/* Every candidate wrong but the reference, the reference failing: no
 * candidate is chosen. */
CUBE_TEST(tune_without_a_correct_candidate_fails) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-none", dir, sizeof(dir));
  CTS_CLIENT(c);
  static const cand_spec_t specs[] = {{"big_ref", 8192, 1, 0, false, false},
                                      {"nothing", 64, 1, 0, true, false}};
  op_set_t s;
  REQUIRE_OK(make_op("none_op", "1", specs, 2, true, 1.0, &s));
  data_t d;
  REQUIRE_OK(data_make(c, 100, 5, &d));
  cube_arg_t a[4];
  data_args(&d, a);
  /* The reference cannot run: nothing is checked, the other one is
   * measured (unchecked) and runs. */
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  cube_tune_record_t r = {0};
  REQUIRE_OK(cube_tune_op_record(s.op, c, 4, a, &r));
  CHECK(r.results[0].outcome == CUBE_TUNE_INVALID);
  CHECK(r.results[1].outcome == CUBE_TUNE_MEASURED && r.winner == 1);
  data_free(&d);
  free_op(&s);
  /* All invalid: the launch says why, candidate by candidate. */
  static const cand_spec_t bad[] = {{"big1", 8192, 1, 0, false, false},
                                    {"even1", 64, 2, 0, false, true}};
  REQUIRE_OK(make_op("invalid_op", "1", bad, 2, false, 1.0, &s));
  REQUIRE_OK(data_make(c, 101, 5, &d));
  data_args(&d, a);
  cube_status_t st = cube_tune_op_launch(s.op, c, 4, a);
  CHECK(cube_status_code(st) == CUBE_STATUS_FAILED_PRECONDITION ||
        cube_status_code(st) == CUBE_STATUS_INVALID_ARGUMENT);
  CHECK(cts_contains(cube_status_message(st), "big1", "even1", "needs an even n", NULL));
  cube_status_free(st);
  data_free(&d);
  free_op(&s);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

/* The winner of a bucket cannot run an odd n of the same bucket: the next
 * measured candidate that can runs instead. */
CUBE_TEST(tune_winner_invalid_for_another_shape_falls_back) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-fallback", dir, sizeof(dir));
  CTS_CLIENT(c);
  static const cand_spec_t specs[] = {{"slow_any", 64, 1, 3000, false, false},
                                      {"fast_even", 64, 2, 0, false, true}};
  op_set_t s;
  REQUIRE_OK(make_op("fallback_op", "1", specs, 2, true, 2.0, &s));
  data_t d;
  REQUIRE_OK(data_make(c, 4096, 11, &d));
  cube_arg_t a[4];
  data_args(&d, a);
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  CHECK(data_check(c, &d, 1));
  cube_tune_record_t r = {0};
  REQUIRE_OK(cube_tune_op_record(s.op, c, 4, a, &r));
  CHECK_EQ_U64(r.winner, 1);
  data_free(&d);
  REQUIRE_OK(data_make(c, 4095, 12, &d)); /* the same bucket, odd */
  data_args(&d, a);
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  CHECK(data_check(c, &d, 1));
  data_free(&d);
  free_op(&s);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

//===----------------------------------------------------------------------===//
// Concurrency, persistence, corrupt and stale records
//===----------------------------------------------------------------------===//

typedef struct racer {
  cube_client_t* c;
  op_set_t* s;
  uint32_t n;
  atomic_int* start;
  int ok;
} racer_t;

static void* race(void* p) {
  racer_t* r = p;
  data_t d;
  if (cube_status_consume(data_make(r->c, r->n, 100 + r->n, &d))) return NULL;
  cube_arg_t a[4];
  data_args(&d, a);
  atomic_fetch_add(r->start, 1);
  while (atomic_load(r->start) < 4) {
  }
  cube_status_t st = cube_tune_op_launch(r->s->op, r->c, 4, a);
  if (st) fprintf(stderr, "racer: %s\n", cube_status_message(st));
  r->ok = !st && data_check(r->c, &d, 1);
  cube_status_free(st);
  data_free(&d);
  return NULL;
}

CUBE_TEST(tune_concurrent_first_launches_tune_once) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-threads", dir, sizeof(dir));
  CTS_CLIENT(c);
  op_set_t s;
  REQUIRE_OK(make_op("threads_op", "1", k_specs, 3, true, 2.0, &s));
  cube_execution_override_t* o = NULL;
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_RUN, &o));
  atomic_int start = 0;
  racer_t r[4];
  pthread_t t[4];
  for (int i = 0; i < 4; ++i) {
    r[i] = (racer_t){c, &s, 900u + (uint32_t)i * 20u, &start, 0}; /* one bucket: 1024 */
    REQUIRE(pthread_create(&t[i], NULL, race, &r[i]) == 0);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(t[i], NULL);
    CHECK(r[i].ok);
  }
  CHECK_OK(cube_execution_override_end(o));
  cube_execution_stats_t st = stats_of(o);
  CHECK_EQ_U64(st.keys_registered, 1);
  CHECK_EQ_U64(st.keys_tuned, 1);
  CHECK_EQ_U64(st.keys_persisted, 1);
  cube_execution_override_release(o);
  free_op(&s);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

/* A helper process: launches the operation once under a run override and
 * exits with 10 + keys tuned (10: loaded, 11: tuned), or 1..9 on failure;
 * prints its winner's name on stderr when CTS_TUNE_WINNER is set. */
static void helper_launch_once(const char* case_name) {
  (void)case_name;
  cts_wait_go();
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(cts_device(0), &c))) _exit(1);
  op_set_t s;
  if (cube_status_consume(make_op("shared_op", "1", k_specs, 3, true, 2.0, &s))) _exit(2);
  data_t d;
  if (cube_status_consume(data_make(c, 2048, 42, &d))) _exit(3);
  cube_arg_t a[4];
  data_args(&d, a);
  cube_execution_override_t* o = NULL;
  if (cube_status_consume(cube_client_execution_begin(c, CUBE_EXECUTION_RUN, &o))) _exit(4);
  cube_status_t st = cube_tune_op_launch(s.op, c, 4, a);
  if (st) {
    fprintf(stderr, "helper launch: %s\n", cube_status_message(st));
    cube_status_free(st);
    _exit(5);
  }
  if (!data_check(c, &d, 1)) _exit(6);
  cube_execution_stats_t es = stats_of(o);
  cube_tune_record_t r = {0};
  if (cube_status_consume(cube_tune_op_record(s.op, c, 4, a, &r))) _exit(7);
  if (es.keys_tuned == 0 && (es.keys_loaded != 1 || r.origin != CUBE_TUNE_ORIGIN_DISK)) _exit(8);
  if (es.keys_tuned == 1 && (es.keys_persisted != 1 || r.origin != CUBE_TUNE_ORIGIN_TUNED)) _exit(9);
  /* Tuning nothing also means compiling only what runs: the winner. */
  if (es.keys_tuned == 0 && es.kernels_compiled + es.kernels_loaded != 1) _exit(9);
  if (getenv("CTS_TUNE_WINNER")) fprintf(stderr, "winner=%u\n", r.winner);
  int rc = 10 + (int)es.keys_tuned;
  cube_execution_override_release(o);
  data_free(&d);
  free_op(&s);
  cube_client_release(c);
  cube_shutdown();
  _exit(rc);
}

CUBE_TEST(tune_two_processes_tune_once) {
  if (cts_role_is("launch_once")) helper_launch_once("tune_two_processes_tune_once");
  CTS_REQUIRE_BACKEND();
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-processes", dir, sizeof(dir));
  int go[2];
  REQUIRE(pipe2(go, O_CLOEXEC) == 0); /* the children keep only fd 100 */
  pid_t a = cts_spawn_role("tune_two_processes_tune_once", "launch_once", go[0]);
  pid_t b = cts_spawn_role("tune_two_processes_tune_once", "launch_once", go[0]);
  close(go[0]);
  close(go[1]); /* both start now */
  int ra = cts_wait_child(a), rb = cts_wait_child(b);
  if (ra + rb != 21) fprintf(stderr, "helpers exited with %d and %d\n", ra, rb);
  CHECK((ra == 10 && rb == 11) || (ra == 11 && rb == 10));
  /* One record in the directory, named after the operation. */
  cube_kernel_cache_entry_t* e = NULL;
  size_t n = 0;
  CHECK_OK(cube_kernel_cache_list(&e, &n));
  int tunes = 0;
  for (size_t i = 0; i < n; ++i)
    if (strcmp(e[i].kind, "tune") == 0) {
      tunes++;
      CHECK(strcmp(e[i].name, "shared_op") == 0);
      CHECK(strcmp(e[i].backend, cube_backend_name(cts_backend()->backend)) == 0);
    }
  CHECK_EQ_U64(tunes, 1);
  cube_kernel_cache_list_free(e);
  cts_cache_dir_done(dir);
}

CUBE_TEST(tune_persists_across_processes) {
  if (cts_role_is("launch_once")) helper_launch_once("tune_persists_across_processes");
  CTS_REQUIRE_BACKEND();
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-persist", dir, sizeof(dir));
  /* The first process tunes, the second and third load. */
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role("tune_persists_across_processes", "launch_once", -1)), 11);
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role("tune_persists_across_processes", "launch_once", -1)), 10);
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role("tune_persists_across_processes", "launch_once", -1)), 10);
  /* With the disk cache off, every process tunes. */
  cts_cache_dir_use("off");
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role("tune_persists_across_processes", "launch_once", -1)), 11);
  cts_cache_dir_use(dir);
  cts_cache_dir_done(dir);
}

/* The path of the only "tune" entry of the cache directory. */
static int tune_entry_path(const char* dir, char* out, size_t size) {
  cube_kernel_cache_entry_t* e = NULL;
  size_t n = 0;
  if (cube_status_consume(cube_kernel_cache_list(&e, &n))) return 0;
  int found = 0;
  for (size_t i = 0; i < n; ++i)
    if (strcmp(e[i].kind, "tune") == 0) {
      snprintf(out, size, "%s/v2/%s", dir, e[i].file);
      found++;
    }
  cube_kernel_cache_list_free(e);
  return found == 1;
}

CUBE_TEST(tune_corrupt_or_stale_record_is_tuned_again) {
  if (cts_role_is("launch_once")) helper_launch_once("tune_corrupt_or_stale_record_is_tuned_again");
  CTS_REQUIRE_BACKEND();
  CTS_REQUIRE_DEVICES(1);
  const char* self = "tune_corrupt_or_stale_record_is_tuned_again";
  char dir[PATH_MAX], path[PATH_MAX + 64];
  cts_cache_dir_fresh("tune-corrupt", dir, sizeof(dir));
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role(self, "launch_once", -1)), 11);
  REQUIRE(tune_entry_path(dir, path, sizeof(path)));
  /* A flipped byte in the record: the checksum catches it; tuned again. */
  int fd = open(path, O_RDWR);
  REQUIRE(fd >= 0);
  struct stat st;
  REQUIRE(fstat(fd, &st) == 0);
  char b = 0;
  REQUIRE(pread(fd, &b, 1, st.st_size - 5) == 1);
  b ^= 0x20;
  REQUIRE(pwrite(fd, &b, 1, st.st_size - 5) == 1);
  close(fd);
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role(self, "launch_once", -1)), 11);
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role(self, "launch_once", -1)), 10);
  /* A well-formed entry whose record is stale (another cube version wrote
   * it, under this key): ignored and replaced. */
  REQUIRE(tune_entry_path(dir, path, sizeof(path)));
  const char* slash = strrchr(path, '/');
  cube__cache_key_t key;
  REQUIRE(cube__kc_key_from_hex(slash + 1, &key));
  void* data = NULL;
  size_t size = 0;
  REQUIRE_OK(cube__cache_disk_load(key, "tune", &data, &size));
  char* text = calloc(1, size + 16);
  REQUIRE(text);
  memcpy(text, data, size);
  free(data);
  char* v = strstr(text, "\"cube\":\"" CUBE_VERSION_STRING "\"");
  REQUIRE(v);
  memcpy(v + 8, "9.9.9", 5); /* same length as 0.1.0 */
  REQUIRE_OK(cube__cache_disk_store(key, "tune", text, strlen(text)));
  free(text);
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role(self, "launch_once", -1)), 11);
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role(self, "launch_once", -1)), 10);
  /* Not JSON at all. */
  REQUIRE_OK(cube__cache_disk_store(key, "tune", "{not json", 9));
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role(self, "launch_once", -1)), 11);
  cts_cache_dir_done(dir);
}

/* Another operation version, or other candidates, never reuse a record. */
CUBE_TEST(tune_record_keyed_by_operation_version_and_candidates) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-version", dir, sizeof(dir));
  CTS_CLIENT(c);
  data_t d;
  REQUIRE_OK(data_make(c, 700, 9, &d));
  cube_arg_t a[4];
  data_args(&d, a);
  cube_execution_override_t* o = NULL;
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_RUN, &o));
  op_set_t s;
  REQUIRE_OK(make_op("versioned", "1", k_specs, 2, true, 1.0, &s));
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  free_op(&s);
  REQUIRE_OK(make_op("versioned", "1", k_specs, 2, true, 1.0, &s)); /* same: loaded */
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  free_op(&s);
  REQUIRE_OK(make_op("versioned", "2", k_specs, 2, true, 1.0, &s)); /* new version: tuned */
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  free_op(&s);
  REQUIRE_OK(make_op("versioned", "2", k_specs, 3, true, 1.0, &s)); /* more candidates: tuned */
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  free_op(&s);
  CHECK(data_check(c, &d, 4));
  CHECK_OK(cube_execution_override_end(o));
  cube_execution_stats_t st = stats_of(o);
  CHECK_EQ_U64(st.keys_tuned, 3);
  CHECK_EQ_U64(st.keys_loaded, 1);
  cube_execution_override_release(o);
  data_free(&d);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

//===----------------------------------------------------------------------===//
// Off, budget, policies, bad input
//===----------------------------------------------------------------------===//

CUBE_TEST(tune_off_launches_the_default) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-off", dir, sizeof(dir));
  REQUIRE_OK(cube_option_set("CUBE_TUNE", "off"));
  CTS_CLIENT(c);
  /* Default: the candidate that computes nothing, so that its run shows. */
  op_set_t s;
  static const cand_spec_t specs[] = {{"right", 64, 1, 0, false, false},
                                      {"nothing", 64, 1, 0, true, false}};
  REQUIRE_OK(make_op("off_op", "1", specs, 2, true, 1.0, &s));
  /* make_op leaves the default at 0: the same kernels, default 1. */
  cube_tune_op_desc_t od;
  cube_tune_op_desc_initialize(&od);
  cube_tune_candidate_t cc[2] = {{"right", s.kernels[0], count_fn, NULL, (void*)&specs[0]},
                                 {"nothing", s.kernels[1], count_fn, NULL, (void*)&specs[1]}};
  od.name = "off_op";
  od.candidates = cc;
  od.candidate_count = 2;
  od.key = key_fn;
  od.reference = 0;
  od.outputs = 1u << 1;
  od.compare = CUBE_TUNE_COMPARE_F32;
  od.default_candidate = 1;
  cube_tune_op_t* op = NULL;
  REQUIRE_OK(cube_tune_op_create(&od, &op));
  data_t d;
  REQUIRE_OK(data_make(c, 300, 1, &d));
  cube_arg_t a[4];
  data_args(&d, a);
  cube_execution_override_t* o = NULL;
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_RUN, &o));
  CHECK_OK(cube_tune_op_launch(op, c, 4, a));
  CHECK(data_check(c, &d, 0)); /* the default computed nothing */
  CHECK_OK(cube_execution_override_end(o));
  CHECK_EQ_U64(stats_of(o).keys_tuned, 0);
  cube_tune_record_t r = {0};
  CHECK_STATUS(cube_tune_op_record(op, c, 4, a, &r), CUBE_STATUS_NOT_FOUND, "not been tuned");
  REQUIRE_OK(cube_option_set("CUBE_TUNE", NULL));
  CHECK_OK(cube_tune_op_launch(op, c, 4, a)); /* tuned now: "right" wins */
  CHECK(data_check(c, &d, 1));
  cube_execution_override_release(o);
  cube_tune_op_release(op);
  data_free(&d);
  free_op(&s);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

CUBE_TEST(tune_budget_stops_the_measuring) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-budget", dir, sizeof(dir));
  CTS_CLIENT(c);
  op_set_t s;
  REQUIRE_OK(make_op("budget_op", "1", k_specs, 2, true, 1e-9, &s));
  data_t d;
  REQUIRE_OK(data_make(c, 5000, 2, &d));
  cube_arg_t a[4];
  data_args(&d, a);
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  CHECK(data_check(c, &d, 1));
  cube_tune_record_t r = {0};
  REQUIRE_OK(cube_tune_op_record(s.op, c, 4, a, &r));
  /* The first round completes (one sample of each candidate, so the winner
   * is chosen from all of them), then the budget is spent: no second
   * sample. */
  for (int i = 0; i < 2; ++i) {
    CHECK_EQ_U64(r.results[i].samples, 1);
    CHECK(r.results[i].outcome == CUBE_TUNE_MEASURED ||
          r.results[i].outcome == CUBE_TUNE_ELIMINATED);
  }
  CHECK(r.winner < 2 && r.results[r.winner].outcome == CUBE_TUNE_MEASURED);
  CHECK(r.results[r.winner].best_ns <= r.results[1 - r.winner].best_ns);
  data_free(&d);
  free_op(&s);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

static cube_status_t counting_key_fn(void* user, const cube_device_properties_t* props,
                                     size_t n_args, const cube_arg_t* args, cube_tune_key_t* out) {
  atomic_fetch_add((atomic_uint*)user, 1);
  return key_fn(NULL, props, n_args, args, out);
}

/* The winner is the candidate with the fastest median sample, in the record
 * of the process that tuned and in the one read back from disk; a close
 * finish adds samples to two or more contenders, never to one; the key
 * function runs once per launch, on the launch that tunes and on a hit. */
CUBE_TEST(tune_winner_has_the_fastest_median) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-median", dir, sizeof(dir));
  CTS_CLIENT(c);
  /* Two near-equal candidates and one clearly slower. */
  static const cand_spec_t specs[] = {
      {"ref", 64, 1, 0, false, false},
      {"dim128", 128, 1, 0, false, false},
      {"slow", 64, 1, 64, false, false},
  };
  op_set_t s;
  REQUIRE_OK(make_op("median_op", "1", specs, 3, true, 2.0, &s));
  /* The same operation with a key function that counts its calls. */
  atomic_uint key_calls = 0;
  cube_tune_candidate_t cands[3];
  for (uint32_t i = 0; i < 3; ++i)
    cands[i] = (cube_tune_candidate_t){specs[i].name, s.kernels[i], count_fn, NULL,
                                       (void*)&specs[i]};
  cube_tune_op_desc_t od;
  cube_tune_op_desc_initialize(&od);
  od.name = "median_op";
  od.version = "1";
  od.candidates = cands;
  od.candidate_count = 3;
  od.key = counting_key_fn;
  od.key_user = &key_calls;
  od.reference = 0;
  od.outputs = 1u << 1;
  od.compare = CUBE_TUNE_COMPARE_F32;
  od.rtol = 1e-5;
  od.atol = 1e-6;
  od.budget_s = 2.0;
  cube_tune_op_t* counted = NULL;
  REQUIRE_OK(cube_tune_op_create(&od, &counted));
  data_t d;
  REQUIRE_OK(data_make(c, 3 * 4096 + 5, 21, &d));
  cube_arg_t a[4];
  data_args(&d, a);
  CHECK_OK(cube_tune_op_launch(counted, c, 4, a));
  CHECK_EQ_U64(atomic_load(&key_calls), 1);
  for (int i = 0; i < 5; ++i) CHECK_OK(cube_tune_op_launch(counted, c, 4, a));
  CHECK_EQ_U64(atomic_load(&key_calls), 6);
  CHECK(data_check(c, &d, 6));
  cube_tune_record_t r = {0};
  REQUIRE_OK(cube_tune_op_record(counted, c, 4, a, &r));
  CHECK_EQ_U64(atomic_load(&key_calls), 7);
  CHECK(r.origin == CUBE_TUNE_ORIGIN_TUNED);
  uint32_t measured = 0, finished = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    const cube_tune_result_t* x = &r.results[i];
    CHECK(x->samples <= 15);
    if (x->samples > 7) finished++;
    if (x->outcome != CUBE_TUNE_MEASURED) continue;
    measured++;
    CHECK(x->best_ns > 0 && x->best_ns <= x->median_ns);
    if (x->median_ns < r.results[r.winner].median_ns)
      fprintf(stderr, "candidate %s: median %.1f ns, the winner %s's %.1f ns\n", specs[i].name,
              x->median_ns, specs[r.winner].name, r.results[r.winner].median_ns);
    CHECK(r.results[r.winner].median_ns <= x->median_ns);
  }
  CHECK(measured >= 1 && r.results[r.winner].outcome == CUBE_TUNE_MEASURED);
  /* A close finish has two or more contenders. */
  CHECK(finished != 1);
  /* The record read back from disk by a new operation ranks the same way. */
  cube_tune_op_t* again = NULL;
  REQUIRE_OK(cube_tune_op_create(&od, &again));
  cube_tune_record_t r2 = {0};
  CHECK_OK(cube_tune_op_record(again, c, 4, a, &r2));
  CHECK(r2.origin == CUBE_TUNE_ORIGIN_DISK);
  CHECK_EQ_U64(r2.winner, r.winner);
  for (uint32_t i = 0; i < 3; ++i) CHECK_EQ_U64(r2.results[i].samples, r.results[i].samples);
  cube_tune_op_release(again);
  cube_tune_op_release(counted);
  data_free(&d);
  free_op(&s);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

/* The warm-up story: compile-only compiles every candidate and runs
 * nothing; compile-and-tune tunes and persists and still runs nothing; a
 * later process compiles and tunes nothing. */
static void helper_warm(void) {
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(cts_device(0), &c))) _exit(1);
  op_set_t s;
  if (cube_status_consume(make_op("warm_op", "1", k_specs, K_SPECS, true, 1.0, &s))) _exit(2);
  data_t d;
  if (cube_status_consume(data_make(c, 3000, 8, &d))) _exit(3);
  cube_arg_t a[4];
  data_args(&d, a);
  cube_execution_override_t* o = NULL;
  if (cube_status_consume(cube_client_execution_begin(c, CUBE_EXECUTION_RUN, &o))) _exit(4);
  if (cube_status_consume(cube_tune_op_launch(s.op, c, 4, a))) _exit(5);
  if (!data_check(c, &d, 1)) _exit(6);
  cube_execution_stats_t es = stats_of(o);
  cube_kernel_cache_stats_t ks = {0};
  if (cube_status_consume(cube_kernel_cache_stats(&ks))) _exit(7);
  fprintf(stderr, "warm helper: tuned %llu loaded %llu compiled %llu cache misses %llu\n",
          (unsigned long long)es.keys_tuned, (unsigned long long)es.keys_loaded,
          (unsigned long long)es.kernels_compiled, (unsigned long long)ks.misses);
  int rc = (es.keys_tuned == 0 && es.keys_loaded == 1 && es.kernels_compiled == 0 &&
            ks.misses == 0)
               ? 0
               : 20;
  cube_execution_override_release(o);
  data_free(&d);
  free_op(&s);
  cube_client_release(c);
  cube_shutdown();
  _exit(rc);
}

CUBE_TEST(tune_policies_warm_a_cache) {
  if (cts_role_is("warm")) helper_warm();
  CTS_REQUIRE_BACKEND();
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-warm", dir, sizeof(dir));
  CTS_CLIENT(c);
  op_set_t s;
  REQUIRE_OK(make_op("warm_op", "1", k_specs, K_SPECS, true, 1.0, &s));
  data_t d;
  REQUIRE_OK(data_make(c, 3000, 8, &d));
  cube_arg_t a[4];
  data_args(&d, a);
  cube_execution_override_t* o = NULL;
  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_COMPILE_ONLY, &o));
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  CHECK_OK(cube_execution_override_end(o));
  cube_execution_stats_t es = stats_of(o);
  CHECK_EQ_U64(es.kernels_registered, K_SPECS);
  CHECK_EQ_U64(es.kernels_compiled, K_SPECS);
  CHECK_EQ_U64(es.keys_registered, 1);
  CHECK_EQ_U64(es.keys_tuned, 0);
  CHECK_EQ_U64(es.launches_skipped, 1);
  cube_execution_override_release(o);
  cube_tune_record_t r = {0};
  CHECK_STATUS(cube_tune_op_record(s.op, c, 4, a, &r), CUBE_STATUS_NOT_FOUND, "not been tuned");

  REQUIRE_OK(cube_client_execution_begin(c, CUBE_EXECUTION_COMPILE_AND_TUNE, &o));
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  CHECK_OK(cube_execution_override_end(o));
  es = stats_of(o);
  CHECK_EQ_U64(es.kernels_compiled, 0); /* compiled by the compile-only pass */
  CHECK_EQ_U64(es.kernels_loaded, K_SPECS);
  CHECK_EQ_U64(es.keys_registered, 1);
  CHECK_EQ_U64(es.keys_tuned, 1);
  CHECK_EQ_U64(es.keys_persisted, 1);
  CHECK_EQ_U64(es.launches_skipped, 2);
  cube_execution_override_release(o);
  /* Nothing ran on the caller's y; the tuning still compared outputs. */
  CHECK(data_check(c, &d, 0));
  CHECK_OK(cube_tune_op_record(s.op, c, 4, a, &r));
  CHECK(r.results[2].outcome == CUBE_TUNE_WRONG);
  CHECK(r.winner == 0 || r.winner == 1 || r.winner == 4);
  data_free(&d);
  free_op(&s);
  CTS_END(c);
  /* A cold process: everything from the directory. */
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role("tune_policies_warm_a_cache", "warm", -1)), 0);
  cts_cache_dir_done(dir);
}

static cube_status_t failing_key(void* user, const cube_device_properties_t* props, size_t n,
                                 const cube_arg_t* args, cube_tune_key_t* out) {
  (void)user;
  (void)props;
  (void)n;
  (void)args;
  (void)out;
  return cube_status_make(CUBE_STATUS_INVALID_ARGUMENT, "the key function refuses");
}

static cube_status_t long_key(void* user, const cube_device_properties_t* props, size_t n,
                              const cube_arg_t* args, cube_tune_key_t* out) {
  (void)user;
  (void)props;
  (void)n;
  (void)args;
  out->count = CUBE_TUNE_KEY_MAX + 1;
  return CUBE_OK;
}

CUBE_TEST(tune_bad_input) {
  CTS_REQUIRE_BACKEND();
  CTS_CLIENT(c);
  op_set_t s;
  REQUIRE_OK(make_op("bad_op", "1", k_specs, 2, true, 1.0, &s));
  cube_tune_candidate_t cc[2] = {{"a", s.kernels[0], count_fn, NULL, (void*)&k_specs[0]},
                                 {"b", s.kernels[1], count_fn, NULL, (void*)&k_specs[1]}};
  cube_tune_op_desc_t od;
  cube_tune_op_t* op = NULL;
#define DESC()                           \
  cube_tune_op_desc_initialize(&od);     \
  od.name = "x";                         \
  od.candidates = cc;                    \
  od.candidate_count = 2;                \
  od.key = key_fn
  DESC();
  CHECK_OK(cube_tune_op_create(&od, &op));
  cube_tune_op_release(op);
  CHECK_STATUS(cube_tune_op_create(NULL, &op), CUBE_STATUS_INVALID_ARGUMENT, "desc is NULL");
  CHECK_STATUS(cube_tune_op_create(&od, NULL), CUBE_STATUS_INVALID_ARGUMENT, "out_op");
  DESC();
  od.name = "bad name";
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "desc->name");
  DESC();
  od.key = NULL;
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "desc->key");
  DESC();
  od.candidate_count = 0;
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "candidate_count");
  DESC();
  od.candidate_count = CUBE_TUNE_MAX_CANDIDATES + 1;
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "candidate_count");
  DESC();
  od.reference = 2;
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "reference");
  DESC();
  od.reference = 0; /* without outputs */
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "outputs");
  DESC();
  od.outputs = 1u << 2; /* a float */
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "argument 2");
  DESC();
  od.default_candidate = 5;
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "default_candidate");
  DESC();
  od.budget_s = -1;
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "budget_s");
  DESC();
  cc[1].name = "a";
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "both named 'a'");
  cc[1].name = "b";
  cc[1].count = NULL;
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "count function");
  cc[1].count = count_fn;
  cube_kernel_desc_t kd;
  cube_kernel_desc_initialize(&kd);
  kd.source = "CUBE_KERNEL(k, CUBE_ARRAY(float, y)) { }\n";
  kd.entry = "k";
  cube_kernel_t* other = NULL;
  REQUIRE_OK(cube_kernel_create(&kd, &other));
  cc[1].kernel = other;
  CHECK_STATUS(cube_tune_op_create(&od, &op), CUBE_STATUS_INVALID_ARGUMENT, "takes 1 arguments");
  cc[1].kernel = s.kernels[1];
  cube_kernel_release(other);
  /* Launches. */
  data_t d;
  REQUIRE_OK(data_make(c, 10, 1, &d));
  cube_arg_t a[4];
  data_args(&d, a);
  CHECK_STATUS(cube_tune_op_launch(NULL, c, 4, a), CUBE_STATUS_INVALID_ARGUMENT, "op is NULL");
  CHECK_STATUS(cube_tune_op_launch(s.op, NULL, 4, a), CUBE_STATUS_INVALID_ARGUMENT, "client");
  CHECK_STATUS(cube_tune_op_launch(s.op, c, 3, a), CUBE_STATUS_INVALID_ARGUMENT, "4 arguments");
  cube_arg_t wrong_kind[4] = {a[0], a[1], cube_arg_u32(1), a[3]};
  CHECK_STATUS(cube_tune_op_launch(s.op, c, 4, wrong_kind), CUBE_STATUS_INVALID_ARGUMENT,
               "argument 2 is u32");
  DESC();
  od.key = failing_key;
  REQUIRE_OK(cube_tune_op_create(&od, &op));
  CHECK_STATUS(cube_tune_op_launch(op, c, 4, a), CUBE_STATUS_INVALID_ARGUMENT,
               "the key function refuses");
  cube_tune_op_release(op);
  DESC();
  od.key = long_key;
  REQUIRE_OK(cube_tune_op_create(&od, &op));
  CHECK_STATUS(cube_tune_op_launch(op, c, 4, a), CUBE_STATUS_INVALID_ARGUMENT, "9 values");
  cube_tune_op_release(op);
#undef DESC
  CHECK(strcmp(cube_tune_op_name(s.op), "bad_op") == 0);
  data_free(&d);
  free_op(&s);
  CTS_END(c);
}

/* The samples are timed as the device times work (events on GPUs and on
 * OpenCL devices with profiling, the host clock elsewhere), and the record
 * says which. Checks no output: it runs where kernels do not (the CUDA mock
 * driver), to exercise the event path of the measuring. */
CUBE_TEST(tune_record_names_the_timing) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX];
  cts_cache_dir_fresh("tune-timing", dir, sizeof(dir));
  CTS_CLIENT(c);
  op_set_t s;
  REQUIRE_OK(make_op("timing_op", "1", k_specs, 2, false, 1.0, &s));
  data_t d;
  REQUIRE_OK(data_make(c, 2000, 4, &d));
  cube_arg_t a[4];
  data_args(&d, a);
  CHECK_OK(cube_tune_op_launch(s.op, c, 4, a));
  CHECK_OK(cube_client_sync(c));
  cube_tune_record_t r = {0};
  REQUIRE_OK(cube_tune_op_record(s.op, c, 4, a, &r));
  CHECK(r.timing == cube_client_properties(c)->timing_method);
  CHECK(r.results[r.winner].outcome == CUBE_TUNE_MEASURED);
  CHECK(r.results[r.winner].samples >= 1);
  CHECK(r.tuning_s >= 0 && r.tuning_s < 60);
  data_free(&d);
  free_op(&s);
  CTS_END(c);
  cts_cache_dir_done(dir);
}
