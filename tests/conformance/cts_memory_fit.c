/* Memory that is not wasted (docs/observability.md): the default (fitted)
 * pools hold little more than what is in use, give a released big buffer
 * back, and still hit without a backend call when a size comes back. Each
 * case runs in a fresh process, so the calling thread's stream starts
 * empty. */
#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)

/* The bound the fitted pools keep (docs/observability.md, "Memory that is
 * not wasted"): reserved <= 1.2 x the most in use so far. */
#define FIT_BOUND 1.2

/* The granule fitted pools round storage to (src/server/stream.c). */
static uint64_t fit_granule(void) {
  return cts_backend()->backend == CUBE_BACKEND_CUDA ? 2 * MiB : 64 * KiB;
}

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* The mock CUDA driver's counters, when it is the driver. */
typedef struct fit_mock_stats {
  uint64_t copies, bytes_h2d, bytes_d2h, async_allocs, async_frees, launches, device_bytes_used;
  int pinned_allocations, streams;
  int context_pushes_outstanding;
} fit_mock_stats_t;

static bool fit_mock_stats(fit_mock_stats_t* out) {
  memset(out, 0, sizeof(*out));
#ifdef CUBE_MOCK_CUDA_PATH
  if (cts_backend()->backend != CUBE_BACKEND_CUDA) return false;
  void* h = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  void (*fn)(fit_mock_stats_t*) =
      (void (*)(fit_mock_stats_t*))(uintptr_t)dlsym(h, "cube_mock_cuda_stats");
  if (fn) fn(out);
  dlclose(h);
  return fn != NULL;
#else
  return false;
#endif
}

static uint64_t fit_next(uint64_t* state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

/* bench/bench_alloc_churn's trace at a small scale (sizes 4 KiB..|max|,
 * log-uniform, |live_max| slots), checking after every op that the pools
 * hold at most FIT_BOUND x the most in use so far (with a small page and
 * four granules of slack for the first buffers); returns reserved/peak. */
static double fit_churn(cube_client_t* c, uint64_t seed, int ops, uint32_t live_max, uint64_t max) {
  uint64_t state = seed;
  const double lo = log(4096.0), hi = log((double)max);
  cube_handle_t* h = calloc(live_max, sizeof(*h));
  bool* held = calloc(live_max, sizeof(*held));
  if (!h || !held) abort();
  uint64_t peak_in = 0, peak_res = 0;
  /* The first buffers: a small page and a few granules of rounding. */
  const uint64_t slack = 2 * MiB + 4 * fit_granule();
  int violations = 0;
  for (int i = 0; i < ops; ++i) {
    uint32_t k = (uint32_t)(fit_next(&state) % live_max);
    if (held[k]) {
      cube_handle_release(h[k]);
      held[k] = false;
    } else {
      uint64_t size = (uint64_t)exp(lo + (hi - lo) * (double)(fit_next(&state) % 1000000) / 1e6);
      size += fit_next(&state) % 61; /* odd sizes too */
      cube_status_t s = cube_client_empty(c, (size_t)size, &h[k]);
      if (s) {
        CHECK_OK(s);
        break;
      }
      held[k] = true;
    }
    cube_memory_usage_t u;
    CHECK_OK(cube_client_memory_usage(c, &u));
    if (u.bytes_in_use > peak_in) peak_in = u.bytes_in_use;
    if (u.bytes_reserved > peak_res) peak_res = u.bytes_reserved;
    if ((double)u.bytes_reserved > FIT_BOUND * (double)peak_in + (double)slack &&
        violations++ < 5) {
      fprintf(stderr, "op %d (live <= %u): %" PRIu64 " bytes reserved, %" PRIu64
                      " in use, the most in use so far %" PRIu64 "\n",
              i, live_max, u.bytes_reserved, u.bytes_in_use, peak_in);
    }
  }
  CHECK(violations == 0);
  for (uint32_t k = 0; k < live_max; ++k)
    if (held[k]) cube_handle_release(h[k]);
  free(h);
  free(held);
  CHECK_OK(cube_client_memory_cleanup(c));
  return peak_in ? (double)peak_res / (double)peak_in : 0.0;
}

/* The churn trace keeps reserved/peak under the bound at every op, for few
 * and for many live buffers (live <= 50 is the hard case: the fewer
 * buffers, the more a free one weighs). */
CUBE_TEST(memory_fit_churn_stays_under_the_bound) {
  CTS_CLIENT(c);
  const struct {
    uint64_t seed;
    uint32_t live;
    uint64_t max;
  } rows[] = {{88172645463325252ull, 50, 64 * MiB},
              {0x9e3779b97f4a7c15ull, 100, 16 * MiB},
              {0x2545f4914f6cdd1dull, 20, 64 * MiB}};
  for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); ++r) {
    double ratio = fit_churn(c, rows[r].seed, 3000, rows[r].live, rows[r].max);
    fprintf(stderr, "live <= %u, sizes 4 KiB..%" PRIu64 " MiB: reserved/peak %.3f\n",
            rows[r].live, (uint64_t)(rows[r].max / MiB), ratio);
    CHECK(ratio > 1.0 - 1e-9);
    CHECK(ratio <= FIT_BOUND);
  }
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  CHECK_EQ_U64(u.bytes_reserved, 0); /* the cleanup gave every page back */
  cube_client_release(c);
}

/* A 16.8 MB tensor (the case: 420 MB reserved on the CPU before)
 * holds its size rounded to the granule; released, it goes back at an
 * explicit cleanup, and without one after two syncs that did not reuse it.
 * A small buffer holds one small page, not a ladder page. */
CUBE_TEST(memory_fit_big_tensor_goes_back) {
  CTS_CLIENT(c);
  const uint64_t big = 16800000, g = fit_granule();
  fit_mock_stats_t m0, m1;
  bool mock = fit_mock_stats(&m0);
  cube_memory_usage_t u;
  cube_handle_t h, small;
  REQUIRE_OK(cube_client_empty(c, 1000, &small));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK(u.bytes_reserved <= 2 * MiB);
  const uint64_t base = u.bytes_reserved;
  REQUIRE_OK(cube_client_empty(c, big, &h));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.bytes_reserved - base, round_up(big, g));
  if (mock) {
    fit_mock_stats(&m1);
    CHECK(m1.device_bytes_used - m0.device_bytes_used >= round_up(big, g));
  }
  /* Released and not reused: kept over one sync (a loop may want it back)... */
  cube_handle_release(h);
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.bytes_reserved - base, round_up(big, g));
  /* ...given back at the second. */
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.bytes_reserved, base);
  CHECK_EQ_U64(u.bytes_in_use, 1000);
  /* Reused between syncs, it stays. */
  REQUIRE_OK(cube_client_empty(c, big, &h));
  for (int i = 0; i < 4; ++i) {
    cube_handle_release(h);
    CHECK_OK(cube_client_sync(c));
    REQUIRE_OK(cube_client_empty(c, big - 4096 * (uint64_t)i, &h));
  }
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.bytes_reserved - base, round_up(big, g));
  /* An explicit cleanup gives it back at once. */
  cube_handle_release(h);
  cube_handle_release(small);
  CHECK_OK(cube_client_memory_cleanup(c));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.bytes_reserved, 0);
  if (mock) {
    CHECK_OK(cube_client_sync(c)); /* stream-ordered frees done */
    fit_mock_stats(&m1);
    CHECK_EQ_U64(m1.device_bytes_used, m0.device_bytes_used);
    CHECK_EQ_U64(m1.async_allocs - m0.async_allocs, m1.async_frees - m0.async_frees);
  }
  cube_client_release(c);
}

/* A free buffer serves a later request only when it wastes little: a 1.5
 * MiB request does not take a released 40 MiB buffer, and growing for it
 * gives the 40 MiB back first; a request an eighth smaller does take it. */
CUBE_TEST(memory_fit_reuse_and_give_back_on_growth) {
  CTS_CLIENT(c);
  const uint64_t g = fit_granule();
  cube_memory_usage_t u;
  cube_handle_t a, b;
  REQUIRE_OK(cube_client_empty(c, 40 * MiB, &a));
  cube_handle_release(a);
  REQUIRE_OK(cube_client_empty(c, 40 * MiB - 40 * MiB / 9, &a)); /* within an eighth: reused */
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.bytes_reserved, 40 * MiB);
  cube_handle_release(a);
  REQUIRE_OK(cube_client_empty(c, 3 * MiB / 2 + 7, &b));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 1);
  CHECK_EQ_U64(u.bytes_reserved, round_up(3 * MiB / 2 + 7, g)); /* the 40 MiB went back */
  cube_handle_release(b);
  CHECK_OK(cube_client_memory_cleanup(c));
  cube_client_release(c);
}

/* The pool-hit path: the same sizes again and again (a small sliced one and
 * a fitted one) take no storage from the backend and give none back. */
CUBE_TEST(memory_fit_pool_hit_makes_no_backend_call) {
  CTS_CLIENT(c);
  const size_t sizes[] = {1u << 20, 5u * 1024 * 1024 + 123};
  cube_handle_t h[2];
  for (int i = 0; i < 2; ++i) REQUIRE_OK(cube_client_empty(c, sizes[i], &h[i]));
  for (int i = 0; i < 2; ++i) cube_handle_release(h[i]);
  cube_memory_usage_t u0, u;
  CHECK_OK(cube_client_memory_usage(c, &u0));
  fit_mock_stats_t m0, m1;
  bool mock = fit_mock_stats(&m0);
  for (int round = 0; round < 2000; ++round) {
    for (int i = 0; i < 2; ++i) REQUIRE_OK(cube_client_empty(c, sizes[i], &h[i]));
    if (round % 500 == 0) {
      CHECK_OK(cube_client_memory_usage(c, &u));
      CHECK_EQ_U64(u.bytes_reserved, u0.bytes_reserved);
      CHECK_EQ_U64(u.number_allocs, 2);
    }
    for (int i = 0; i < 2; ++i) cube_handle_release(h[i]);
  }
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.bytes_reserved, u0.bytes_reserved);
  cube_memory_report_t r;
  memset(&r, 0, sizeof(r));
  CHECK_OK(cube_client_memory_report(c, &r));
  uint64_t peak_pages = 0;
  for (uint32_t i = 0; i < r.pool_count; ++i) peak_pages += r.pools[i].pages_peak;
  CHECK_EQ_U64(peak_pages, 2); /* one page each, ever */
  if (mock) {
    fit_mock_stats(&m1);
    CHECK_EQ_U64(m1.async_allocs, m0.async_allocs);
    CHECK_EQ_U64(m1.async_frees, m0.async_frees);
    CHECK_EQ_U64(m1.device_bytes_used, m0.device_bytes_used);
  }
  cube_client_release(c);
}

typedef struct fit_thread {
  cube_client_t* c;
  uint64_t seed;
  double ratio;
} fit_thread_t;

static void* fit_thread_run(void* p) {
  fit_thread_t* t = p;
  t->ratio = fit_churn(t->c, t->seed, 1500, 16, 64 * MiB);
  return NULL;
}

/* Two threads, each on its own stream, churn at once: each stream's pools
 * keep the bound (a stream's growth gives back only its own free pages). */
CUBE_TEST(memory_fit_two_streams_each_under_the_bound) {
  CTS_CLIENT(c);
  cube_client_t* c2 = NULL;
  REQUIRE_OK(cube_client_clone(c, &c2));
  cube_client_set_stream(c, 5);
  cube_client_set_stream(c2, 6);
  fit_thread_t t[2] = {{c, 0x1234567887654321ull, 0.0}, {c2, 0x0fedcba987654321ull, 0.0}};
  pthread_t th[2];
  REQUIRE(pthread_create(&th[0], NULL, fit_thread_run, &t[0]) == 0);
  REQUIRE(pthread_create(&th[1], NULL, fit_thread_run, &t[1]) == 0);
  pthread_join(th[0], NULL);
  pthread_join(th[1], NULL);
  for (int i = 0; i < 2; ++i) {
    fprintf(stderr, "stream %d: reserved/peak %.3f\n", 5 + i, t[i].ratio);
    CHECK(t[i].ratio > 1.0 - 1e-9 && t[i].ratio <= FIT_BOUND);
  }
  cube_client_release(c2);
  cube_client_release(c);
}
