/* Streams (docs/cubecl.md, "Streams"): per-thread streams, pinned streams, cross-stream
 * handles, and exclusive access. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

typedef struct cts_worker {
  cube_client_t* shared; /* use this client object instead of loading one */
  int index;
  int iterations;
  int failures;
  char first_error[256];
  cube_stream_id_t stream;
} cts_worker_t;

static void cts_worker_fail(cts_worker_t* w, const char* what, cube_status_t s) {
  if (!w->failures++)
    snprintf(w->first_error, sizeof(w->first_error), "%s: %s", what,
             s ? cube_status_message(s) : "mismatch");
  cube_status_free(s);
}

static void* cts_worker_main(void* p) {
  cts_worker_t* w = p;
  w->stream = cube_stream_current();
  cube_client_t* c = NULL;
  cube_status_t s = CUBE_OK;
  if (w->shared)
    c = cube_client_retain(w->shared);
  else
    s = cube_client_load(cts_device(0), &c);
  if (s) {
    cts_worker_fail(w, "load", s);
    return NULL;
  }
  if (cube_client_stream(c) != w->stream) cts_worker_fail(w, "client stream is not the thread's", NULL);
  cube_kernel_t* k = NULL;
  const cube_arg_kind_t kinds[4] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32};
  cube_dim_t dim = {64, 1, 1};
  s = cts_kernel_create("add_worker", cts_k_add_u32, dim, 0, 4, kinds, &k);
  if (s) {
    cts_worker_fail(w, "kernel", s);
    cube_client_release(c);
    return NULL;
  }
  const uint32_t n = 10007;
  uint32_t* in = malloc(n * 4);
  for (int it = 0; in && it < w->iterations; ++it) {
    cube_test_fill_random(in, n * 4, 5000 + (uint64_t)w->index * 1000 + (uint64_t)it);
    cube_handle_t hi = CUBE_HANDLE_NULL, ho = CUBE_HANDLE_NULL;
    if ((s = cube_client_create_from_slice(c, in, n * 4, &hi))) {
      cts_worker_fail(w, "create", s);
      break;
    }
    if ((s = cube_client_empty(c, n * 4, &ho))) {
      cts_worker_fail(w, "empty", s);
      cube_handle_release(hi);
      break;
    }
    uint32_t add = (uint32_t)(w->index * 100 + it);
    cube_arg_t args[4] = {cube_arg_buffer(hi), cube_arg_buffer(ho), cube_arg_u32(add), cube_arg_u32(n)};
    if ((s = cube_client_launch(c, k, cube_count_static((n + 63) / 64, 1, 1), 4, args)))
      cts_worker_fail(w, "launch", s);
    cube_bytes_t* b = NULL;
    if ((s = cube_client_read_one(c, ho, &b))) {
      cts_worker_fail(w, "read", s);
    } else {
      const uint32_t* got = cube_bytes_const_data(b);
      int ok = cube_bytes_size(b) == n * 4;
      for (uint32_t i = 0; ok && i < n; ++i) ok = got[i] == in[i] + add;
      if (!ok) cts_worker_fail(w, "result", NULL);
      cube_bytes_release(b);
    }
    cube_handle_release(hi);
    cube_handle_release(ho);
  }
  if ((s = cube_client_sync(c))) cts_worker_fail(w, "sync", s);
  if (w->stream != cube_stream_current()) cts_worker_fail(w, "stream id changed", NULL);
  free(in);
  cube_kernel_release(k);
  cube_client_release(c);
  return NULL;
}

static void cts_two_threads(int shared_client) {
  CTS_CLIENT(c); /* the main thread's stream exists too */
  cube_handle_t h;
  uint8_t junk[100] = {1, 2, 3};
  REQUIRE_OK(cube_client_create_from_slice(c, junk, sizeof(junk), &h));
  cts_worker_t w[2];
  pthread_t th[2];
  for (int i = 0; i < 2; ++i) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].index = i + 1;
    w[i].iterations = 25;
    w[i].shared = shared_client ? c : NULL;
    REQUIRE(pthread_create(&th[i], NULL, cts_worker_main, &w[i]) == 0);
  }
  for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; ++i) {
    if (w[i].failures) fprintf(stderr, "worker %d: %d failures, first: %s\n", i, w[i].failures, w[i].first_error);
    CHECK(w[i].failures == 0);
  }
  /* Each thread is its own stream. */
  CHECK(w[0].stream != w[1].stream);
  CHECK(w[0].stream != cube_stream_current());
  CHECK(w[1].stream != cube_stream_current());
  CHECK(cube_stream_current() == cube_stream_current());
  CHECK(cube_client_stream(c) == cube_stream_current());
  CHECK(cts_read_equals(c, h, junk, sizeof(junk)));
  cube_handle_release(h);
  CTS_END(c);
}

CUBE_TEST(streams_two_threads_independent) { cts_two_threads(0); }

/* One client object used by two threads at once: each call goes to the
 * calling thread's stream. */
CUBE_TEST(streams_two_threads_one_client) { cts_two_threads(1); }

static void cts_launch_failing(cube_client_t* c, cube_kernel_t* k, cube_handle_t h, int code) {
  cube_arg_t a[5] = {cube_arg_buffer(h), cube_arg_u32(0), cube_arg_u32(0), cube_arg_u32(0), cube_arg_i32(code)};
  CHECK_OK(cts_launch_fail(c, k, cube_count_static(1, 1, 1), 5, a));
}

CUBE_TEST(streams_pinned_stream_errors_separate) {
  CTS_CLIENT(c);
  cube_client_t* p = NULL;
  REQUIRE_OK(cube_client_clone(c, &p));
  cube_stream_id_t sid = cube_stream_id_new();
  CHECK(sid != cube_stream_current());
  CHECK(cube_stream_id_new() != sid);
  cube_client_set_stream(p, sid);
  CHECK(cube_client_stream(p) == sid);
  CHECK(cube_client_stream(c) == cube_stream_current());
  CTS_KERNEL(fail, "cts_fail_pinned", cts_k_fail, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32,
             CUBE_ARG_U32, CUBE_ARG_I32);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 64, &h));
  /* Each failure leaves h without valid contents (taint): written whole
   * again before the next failing launch, which would not run on it. */
  static const uint8_t zeros[64] = {0};
  /* An error on the pinned stream is not the thread stream's. */
  cts_launch_failing(p, fail, h, 5);
  CHECK_OK(cube_client_sync(c));
  CHECK_STATUS(cube_client_sync(p), CUBE_STATUS_LAUNCH_FAILED, "cts_fail_pinned");
  CHECK_OK(cube_client_sync(p));
  CHECK_OK(cube_client_write(c, h, zeros, sizeof(zeros)));
  /* And the other way round. */
  cts_launch_failing(c, fail, h, 6);
  CHECK_OK(cube_client_sync(p));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_LAUNCH_FAILED, "cts_fail_pinned");
  CHECK_OK(cube_client_flush(c));
  CHECK_OK(cube_client_write(c, h, zeros, sizeof(zeros)));
  CHECK_OK(cube_client_sync(c));
  /* A clone made after pinning shares the stream; earlier clones do not. */
  cube_client_t* q = NULL;
  REQUIRE_OK(cube_client_clone(p, &q));
  CHECK(cube_client_stream(q) == sid);
  cts_launch_failing(q, fail, h, 7);
  CHECK_STATUS(cube_client_flush(p), CUBE_STATUS_LAUNCH_FAILED, "cts_fail_pinned");
  cube_client_unset_stream(p);
  CHECK(cube_client_stream(p) == cube_stream_current());
  CHECK(cube_client_stream(q) == sid);
  /* memory accounting is per stream as well */
  cube_memory_usage_t uc, uq;
  CHECK_OK(cube_client_memory_usage(c, &uc));
  CHECK_OK(cube_client_memory_usage(q, &uq));
  CHECK_EQ_U64(uc.number_allocs, 1);
  CHECK_EQ_U64(uq.number_allocs, 0);
  cube_handle_release(h);
  cube_kernel_release(fail);
  cube_client_release(q);
  cube_client_release(p);
  CTS_END(c);
}

CUBE_TEST(streams_handle_used_on_another_stream) {
  CTS_CLIENT(c);
  cube_client_t* a = NULL;
  cube_client_t* b = NULL;
  REQUIRE_OK(cube_client_clone(c, &a));
  REQUIRE_OK(cube_client_clone(c, &b));
  cube_client_set_stream(a, cube_stream_id_new());
  cube_client_set_stream(b, cube_stream_id_new());
  CHECK(cube_client_stream(a) != cube_client_stream(b));
  const uint32_t n = 50021;
  uint32_t* in = malloc(n * 4);
  REQUIRE(in);
  cube_test_fill_random(in, n * 4, 5100);
  CTS_KERNEL(k, "add", cts_k_add_u32, 128, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32);
  cube_handle_t hin, hout;
  REQUIRE_OK(cube_client_create_from_slice(a, in, n * 4, &hin));   /* stream A's pools */
  REQUIRE_OK(cts_poisoned(c, n * 4, &hout));                       /* thread stream */
  cube_arg_t args[4] = {cube_arg_buffer(hin), cube_arg_buffer(hout), cube_arg_u32(9), cube_arg_u32(n)};
  CHECK_OK(cube_client_launch(b, k, cube_count_static((n + 127) / 128, 1, 1), 4, args)); /* on B */
  for (uint32_t i = 0; i < n; ++i) in[i] += 9;
  CHECK(cts_read_equals(b, hout, in, n * 4));
  CHECK(cts_read_equals(a, hout, in, n * 4));
  CHECK(cts_read_equals(c, hout, in, n * 4));
  /* Write on B into A's memory, read on A. */
  cube_arg_t back[4] = {cube_arg_buffer(hout), cube_arg_buffer(hin), cube_arg_u32(1), cube_arg_u32(n)};
  CHECK_OK(cube_client_launch(b, k, cube_count_static((n + 127) / 128, 1, 1), 4, back));
  CHECK_OK(cube_client_sync(b));
  for (uint32_t i = 0; i < n; ++i) in[i] += 1;
  CHECK(cts_read_equals(a, hin, in, n * 4));
  /* Memory belongs to the stream that allocated it. */
  cube_memory_usage_t ua, ub;
  CHECK_OK(cube_client_memory_usage(a, &ua));
  CHECK_OK(cube_client_memory_usage(b, &ub));
  CHECK_EQ_U64(ua.number_allocs, 1);
  CHECK_EQ_U64(ua.bytes_in_use, (uint64_t)n * 4);
  CHECK_EQ_U64(ub.number_allocs, 0);
  cube_handle_release(hin);
  cube_handle_release(hout);
  cube_kernel_release(k);
  cube_client_release(a);
  cube_client_release(b);
  free(in);
  CTS_END(c);
}

/* A write on stream A, a launch (or a copy) reading it on stream B, a read of
 * the result on stream C, then a write on A into the buffer B read, which
 * must wait for B's work (its last use on another stream), and a read of
 * that on C:
 * three threads at once, each with its own three streams, random data every
 * round, a buffer under and one over the OpenCL backend's copy limit
 * (256 KiB), sources overwritten as soon as each write returns. */
typedef struct cts_three {
  cube_client_t* base;
  int index;
  int copy; /* B copies instead of launching a kernel */
  int failures;
  char first_error[256];
} cts_three_t;

static void cts_three_fail(cts_three_t* w, const char* what, cube_status_t s) {
  if (!w->failures++)
    snprintf(w->first_error, sizeof(w->first_error), "%s: %s", what,
             s ? cube_status_message(s) : "mismatch");
  cube_status_free(s);
}

static void* cts_three_main(void* p) {
  cts_three_t* w = p;
  enum { ROUNDS = 24 };
  const uint32_t sizes[2] = {10007, 70001}; /* 40 KB, 280 KB */
  cube_client_t* cl[3] = {NULL, NULL, NULL};
  cube_kernel_t* k = NULL;
  cube_handle_t hin[2] = {CUBE_HANDLE_NULL, CUBE_HANDLE_NULL};
  cube_handle_t hout[2] = {CUBE_HANDLE_NULL, CUBE_HANDLE_NULL};
  uint32_t* src = malloc(70001 * 4);
  uint32_t* next = malloc(70001 * 4);
  uint32_t* want = malloc(70001 * 4);
  cube_status_t s = src && next && want ? CUBE_OK
                                        : cube_status_make(CUBE_STATUS_OUT_OF_MEMORY, "host");
  for (int i = 0; i < 3 && !s; ++i)
    if (!(s = cube_client_clone(w->base, &cl[i]))) cube_client_set_stream(cl[i], cube_stream_id_new());
  const cube_arg_kind_t kinds[4] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32};
  const cube_dim_t dim = {64, 1, 1};
  if (!s && !w->copy) s = cts_kernel_create("add_three", cts_k_add_u32, dim, 0, 4, kinds, &k);
  for (int j = 0; j < 2 && !s; ++j) {
    s = cts_poisoned(cl[0], sizes[j] * 4, &hin[j]); /* stream A's */
    if (!s) s = cts_poisoned(cl[2], sizes[j] * 4, &hout[j]); /* stream C's */
  }
  if (s) cts_three_fail(w, "setup", s);
  for (int r = 0; r < ROUNDS && !w->failures; ++r) {
    int j = r % 2;
    uint32_t n = sizes[j], add = w->copy ? 0 : (uint32_t)(w->index * 1000 + r);
    cube_test_fill_random(src, n * 4, 6100 + (uint64_t)w->index * 100 + (uint64_t)r);
    cube_test_fill_random(next, n * 4, 6900 + (uint64_t)w->index * 100 + (uint64_t)r);
    for (uint32_t i = 0; i < n; ++i) want[i] = src[i] + add;
    if ((s = cube_client_write(cl[0], hin[j], src, n * 4))) {
      cts_three_fail(w, "write on A", s);
      break;
    }
    memset(src, 0xEE, n * 4);
    cube_arg_t args[4] = {cube_arg_buffer(hin[j]), cube_arg_buffer(hout[j]), cube_arg_u32(add),
                          cube_arg_u32(n)};
    s = w->copy ? cube_client_copy(cl[1], hin[j], hout[j])
                : cube_client_launch(cl[1], k, cube_count_static((n + 63) / 64, 1, 1), 4, args);
    if (s) {
      cts_three_fail(w, w->copy ? "copy on B" : "launch on B", s);
      break;
    }
    /* After B's work read |hin|: this write waits for it. */
    if ((s = cube_client_write(cl[0], hin[j], next, n * 4))) {
      cts_three_fail(w, "second write on A", s);
      break;
    }
    if (!cts_read_equals(cl[2], hout[j], want, n * 4)) cts_three_fail(w, "read of B's result on C", NULL);
    else if (!cts_read_equals(cl[2], hin[j], next, n * 4)) cts_three_fail(w, "read of A's second write on C", NULL);
  }
  for (int i = 0; i < 3; ++i)
    if (cl[i] && (s = cube_client_sync(cl[i]))) cts_three_fail(w, "sync", s);
  for (int j = 0; j < 2; ++j) {
    cube_handle_release(hin[j]);
    cube_handle_release(hout[j]);
  }
  cube_kernel_release(k);
  for (int i = 0; i < 3; ++i) cube_client_release(cl[i]);
  free(src);
  free(next);
  free(want);
  return NULL;
}

static void cts_three_streams(int copy) {
  CTS_CLIENT(c);
  enum { THREADS = 3 };
  cts_three_t w[THREADS];
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].base = c;
    w[i].index = i + 1;
    w[i].copy = copy;
    REQUIRE(pthread_create(&th[i], NULL, cts_three_main, &w[i]) == 0);
  }
  for (int i = 0; i < THREADS; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < THREADS; ++i) {
    if (w[i].failures) fprintf(stderr, "worker %d: %d failures, first: %s\n", i, w[i].failures, w[i].first_error);
    CHECK(w[i].failures == 0);
  }
  CTS_END(c);
}

CUBE_TEST(streams_write_launch_read_on_three_streams) { cts_three_streams(0); }

/* The same with a copy on B: no kernel, so it runs on every backend. */
CUBE_TEST(streams_write_copy_read_on_three_streams) { cts_three_streams(1); }

static void* cts_fail_thread(void* p) {
  cube_kernel_t* k = p;
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(cts_device(0), &c))) return (void*)1;
  cube_handle_t h;
  if (cube_status_consume(cube_client_empty(c, 8, &h))) return (void*)2;
  cube_arg_t a[5] = {cube_arg_buffer(h), cube_arg_u32(0), cube_arg_u32(0), cube_arg_u32(0), cube_arg_i32(1)};
  uintptr_t rc = 0;
  if (cube_status_consume(cts_launch_fail(c, k, cube_count_static(1, 1, 1), 5, a))) rc = 3;
  /* Runs before the error is taken: the failure is on this thread's stream. */
  cube_status_t s = cube_client_sync(c);
  if (cube_status_code(s) != CUBE_STATUS_LAUNCH_FAILED) rc = 4;
  cube_status_free(s);
  cube_handle_release(h);
  cube_client_release(c);
  return (void*)rc;
}

CUBE_TEST(streams_thread_errors_do_not_leak) {
  CTS_CLIENT(c);
  CTS_KERNEL(fail, "cts_fail_thread", cts_k_fail, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32,
             CUBE_ARG_U32, CUBE_ARG_I32);
  for (int i = 0; i < 5; ++i) {
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, cts_fail_thread, fail) == 0);
    void* rc = NULL;
    pthread_join(t, &rc);
    CHECK(rc == NULL);
    if (rc) fprintf(stderr, "thread step %d failed\n", (int)(uintptr_t)rc);
    CHECK_OK(cube_client_flush(c)); /* the main thread's stream is clean */
  }
  cube_kernel_release(fail);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// Exclusive
//===----------------------------------------------------------------------===//

typedef struct cts_excl {
  cube_client_t* c;
  cube_kernel_t* k;
  int ran;
  int failures;
} cts_excl_t;

static cube_status_t cts_excl_fails(void* p) {
  cts_excl_t* e = p;
  e->ran++;
  cube_handle_t h;
  return cube_client_empty(e->c, 0, &h); /* INVALID_ARGUMENT */
}

static cube_status_t cts_excl_ok(void* p) {
  ((cts_excl_t*)p)->ran++;
  return CUBE_OK;
}

CUBE_TEST(exclusive_returns_fn_status) {
  CTS_CLIENT(c);
  cts_excl_t e = {c, NULL, 0, 0};
  CHECK_OK(cube_client_exclusive(c, cts_excl_ok, &e));
  CHECK(e.ran == 1);
  CHECK_STATUS(cube_client_exclusive(c, cts_excl_fails, &e), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_empty");
  CHECK(e.ran == 2);
  CHECK_OK(cube_client_flush(c)); /* the fn's status is not a stream error */
  CTS_END(c);
}

static cube_status_t cts_excl_nested(void* p) {
  cts_excl_t* e = p;
  e->ran++;
  const uint32_t n = 1000;
  uint32_t in[1000];
  cube_test_fill_random(in, sizeof(in), 5200);
  cube_handle_t hi, ho;
  cube_status_t s = cube_client_create_from_slice(e->c, in, sizeof(in), &hi);
  if (s) return s;
  s = cube_client_empty(e->c, sizeof(in), &ho);
  if (s) {
    cube_handle_release(hi);
    return s;
  }
  cube_arg_t args[4] = {cube_arg_buffer(hi), cube_arg_buffer(ho), cube_arg_u32(3), cube_arg_u32(n)};
  s = cube_client_launch(e->c, e->k, cube_count_static(10, 1, 1), 4, args);
  if (!s) s = cube_client_flush(e->c);
  cube_bytes_t* b = NULL;
  if (!s) s = cube_client_read_one(e->c, ho, &b);
  if (!s) {
    const uint32_t* got = cube_bytes_const_data(b);
    for (uint32_t i = 0; i < n; ++i)
      if (got[i] != in[i] + 3) e->failures++;
    cube_bytes_release(b);
  }
  if (!s) s = cube_client_sync(e->c);
  cube_memory_usage_t u;
  if (!s) s = cube_client_memory_usage(e->c, &u);
  cube_handle_release(hi);
  cube_handle_release(ho);
  return s;
}

static cube_status_t cts_excl_nested_twice(void* p) {
  cts_excl_t* e = p;
  e->ran++;
  cube_status_t s = cube_client_exclusive(e->c, cts_excl_nested, e);
  cube_profile_duration_t d;
  if (!s) s = cube_client_profile(e->c, cts_excl_nested, e, "nested", &d);
  return s;
}

CUBE_TEST(exclusive_nested_calls) {
  CTS_CLIENT(c);
  CTS_KERNEL(k, "add", cts_k_add_u32, 100, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32);
  cts_excl_t e = {c, k, 0, 0};
  CHECK_OK(cube_client_exclusive(c, cts_excl_nested, &e));
  CHECK(e.ran == 1);
  CHECK(e.failures == 0);
  /* Exclusive and profile nested inside exclusive run at once too. */
  CHECK_OK(cube_client_exclusive(c, cts_excl_nested_twice, &e));
  CHECK(e.ran == 4);
  CHECK(e.failures == 0);
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  CTS_END(c);
}

/* Another thread keeps launching "counter += 1" (one cube) until told to
 * stop; inside exclusive the counter must not move. */
typedef struct cts_incr {
  cube_handle_t counter;
  cube_kernel_t* k;
  atomic_int launched;
  atomic_int stop;
  int failures;
} cts_incr_t;

static int cts_k_incr(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  if (n != 1 || args[0].buffer.len < 8) return 7;
  uint64_t* v = args[0].buffer.data;
  v[0] += 1;
  return 0;
}

static const char cts_k_incr_dialect[] =
    "CUBE_KERNEL(cts_k_incr, CUBE_ARRAY(uint64_t, v)) {\n"
    "  if (CUBE_POS == 0 && UNIT_POS == 0) CUBE_STORE(v, 0, CUBE_LOAD(v, 0) + 1u);\n"
    "}\n";

static void* cts_incr_thread(void* p) {
  cts_incr_t* t = p;
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(cts_device(0), &c))) {
    t->failures++;
    atomic_store(&t->stop, 1);
    return NULL;
  }
  cube_arg_t a = cube_arg_buffer(t->counter);
  while (!atomic_load(&t->stop)) {
    if (cube_status_consume(cube_client_launch(c, t->k, cube_count_static(1, 1, 1), 1, &a))) {
      t->failures++;
      break;
    }
    int done = atomic_fetch_add(&t->launched, 1) + 1;
    if (done % 16 == 0 && cube_status_consume(cube_client_flush(c))) t->failures++;
    if (done > 2000000) break;
  }
  if (cube_status_consume(cube_client_sync(c))) t->failures++;
  cube_client_release(c);
  return NULL;
}

typedef struct cts_excl_watch {
  cube_client_t* c;
  cts_incr_t* incr;
  uint64_t first, second;
  int launched_during;
  cube_status_t err;
} cts_excl_watch_t;

static cube_status_t cts_read_u64(cube_client_t* c, cube_handle_t h, uint64_t* out) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  if (s) return s;
  memcpy(out, cube_bytes_const_data(b), 8);
  cube_bytes_release(b);
  return CUBE_OK;
}

static cube_status_t cts_excl_watch(void* p) {
  cts_excl_watch_t* w = p;
  cube_status_t s = cts_read_u64(w->c, w->incr->counter, &w->first);
  if (s) return s;
  /* Let the other thread try to get launches in. */
  int before = atomic_load(&w->incr->launched);
  for (int i = 0; i < 50; ++i) {
    cts_sleep_ms(2);
    sched_yield();
  }
  w->launched_during = atomic_load(&w->incr->launched) - before;
  return cts_read_u64(w->c, w->incr->counter, &w->second);
}

CUBE_TEST(exclusive_no_interleaving) {
  CTS_CLIENT(c);
  cts_incr_t t;
  memset(&t, 0, sizeof(t));
  atomic_init(&t.launched, 0);
  atomic_init(&t.stop, 0);
  uint64_t zero = 0;
  REQUIRE_OK(cube_client_create_from_slice(c, &zero, 8, &t.counter));
  const cube_arg_kind_t kinds[1] = {CUBE_ARG_BUFFER};
  cube_dim_t dim = {1, 1, 1};
  REQUIRE_OK(cts_kernel_create("incr", cts_k_incr, dim, 0, 1, kinds, &t.k));
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, cts_incr_thread, &t) == 0);
  /* Wait until the other thread is busy launching. */
  while (atomic_load(&t.launched) < 64 && !atomic_load(&t.stop)) sched_yield();
  cts_excl_watch_t w = {c, &t, 0, 0, 0, NULL};
  for (int round = 0; round < 3; ++round) {
    CHECK_OK(cube_client_exclusive(c, cts_excl_watch, &w));
    if (w.first != w.second)
      fprintf(stderr, "round %d: counter moved from %llu to %llu inside exclusive (%d launches meanwhile)\n",
              round, (unsigned long long)w.first, (unsigned long long)w.second, w.launched_during);
    CHECK(w.first == w.second);
  }
  atomic_store(&t.stop, 1);
  pthread_join(th, NULL);
  CHECK(t.failures == 0);
  CHECK_OK(cube_client_sync(c));
  /* Every launch ran exactly once in the end. */
  uint64_t final = 0;
  CHECK_OK(cts_read_u64(c, t.counter, &final));
  CHECK_EQ_U64(final, (uint64_t)atomic_load(&t.launched));
  cube_handle_release(t.counter);
  cube_kernel_release(t.k);
  CTS_END(c);
}
