/* bench_scaling: how cost grows (docs/benchmarks.md, "How cost grows").
 * Four curves, each point the median of >= 5 trials with the spread:
 *
 *   pool      pool hit (cube_client_empty + cube_handle_release of 256 bytes,
 *             which hits the pool) in ns per pair while 10^3 ... 10^6 other
 *             256-byte buffers are live on the same device;
 *   launch    launches per second of an empty kernel with 1, 2, 4, 8, 16
 *             submitting threads, each with its own client and stream, on
 *             device 0 and spread over several devices (CPU: 4 logical
 *             devices; CUDA: every GPU when there are more than one);
 *   cpu       CPU kernel throughput (dialect saxpy, memory-bound, and a
 *             dialect kernel of 64 dependent FMAs per element, compute-bound)
 *             on 1, 2, 4, 8, 16 cores against the same loop under OpenMP on
 *             the same number of threads;
 *   transfer  upload (cube_client_create_from_slice from ordinary memory) and
 *             download (cube_client_read_into ordinary memory) rates from
 *             4 KiB to 4 GiB, on CUBE_BACKEND's device 0.
 *
 *   bench_scaling [quick] [pool] [launch] [cpu] [transfer]
 *
 * Sections: named by argument or CUBE_BENCH_ONLY=pool,launch,...; none named
 * runs all. "quick" (or CUBE_BENCH_QUICK=1) shrinks every curve to a few
 * small points and 5 short trials (the smoke test).
 *
 * Output: human lines, and one machine-readable line per point:
 *   curve <name> <x> <median> <min> <max> <unit>
 * (bench/plot_scaling.py reads those and draws one PNG per curve), and
 * "skip <name> <x> <reason>" for a point not measured.
 *
 * A pool point whose live set is projected to take longer to grow than
 * CUBE_BENCH_POOL_BUDGET_S seconds (default 30) is skipped with the
 * projection (a pool whose hit grows with the live set, as the sliced pool's
 * did before its release queue and bins: docs/benchmarks.md).
 *
 * Trials alternate: the launch curve measures every thread count once per
 * round; the CPU curve alternates cube and OpenMP at each point; the transfer
 * curve alternates upload and download. The pool curve cannot alternate
 * (the live set only grows): its trials at one size are consecutive.
 *
 * The devices: the CPU sections use logical CPU devices, so the bench sets
 * CUBE_CPU_DEVICES=9 when it is unset (0: pool, launches, transfers; 0-3:
 * launches on several devices; 4-8: one device per core count of the cpu
 * curve, each limited to that many threads through cube_cpu_params_t).
 * A backend that is absent is reported on one line and the bench exits 0.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench_scaling"
#include "bench_common.h"
#include "cube/backends/cpu.h"
#include "cube/cube.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Under ThreadSanitizer the OpenMP loops run on the calling thread only:
 * libgomp is not instrumented, so its team's barriers are invisible to TSan
 * and every hand-off of the loops' data would be reported as a race. */
#if defined(__SANITIZE_THREAD__)
#define BENCH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BENCH_TSAN 1
#endif
#endif
#ifndef BENCH_TSAN
#define BENCH_TSAN 0
#endif

enum { TRIALS = 5, CPU_DEVICES_NEEDED = 9, LAUNCH_DEVICES = 4, CORES_DEVICE0 = 4 };

static bool g_quick;
static cube_backend_t g_backend;

/* Median, min and max of |n| values (sorted in place). */
static void spread(double* v, int n, double* med, double* lo, double* hi) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  *med = median_sorted(v, n);
  *lo = v[0];
  *hi = v[n - 1];
}

static void curve_line(const char* name, double x, double* v, int n, const char* unit) {
  double med, lo, hi;
  spread(v, n, &med, &lo, &hi);
  printf("curve %s %.0f %.6g %.6g %.6g %s\n", name, x, med, lo, hi, unit);
}

static size_t device_count(cube_backend_t b) {
  size_t n = 0;
  cube_status_t s = cube_enumerate_devices(b, NULL, 0, &n);
  if (s) {
    fail_status("cube_enumerate_devices", s);
    return 0;
  }
  return n;
}

static cube_client_t* load(cube_backend_t b, uint32_t index) {
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load((cube_device_id_t){b, index}, &c);
  if (s) {
    fail_status("cube_client_load", s);
    return NULL;
  }
  return c;
}

/* 1. Pool hit against live buffers ------------------------------------------- */

enum { POOL_BYTES = 256 };

/* Seconds a pool point may spend growing its live set (CUBE_BENCH_POOL_BUDGET_S, default 30). */
static double pool_budget_s(void) {
  const char* v = getenv("CUBE_BENCH_POOL_BUDGET_S");
  double b = v && *v ? atof(v) : 30.0;
  return b > 0 ? b : 30.0;
}

static uint64_t pool_trial(cube_client_t* c, uint64_t pairs) {
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < pairs; ++i) {
    cube_handle_t h;
    cube_status_t s = cube_client_empty(c, POOL_BYTES, &h);
    if (s) {
      fail_status("cube_client_empty", s);
      break;
    }
    cube_handle_release(h);
  }
  return now_ns() - t0;
}

static void bench_pool(void) {
  static const uint64_t full[] = {10, 100, 1000, 10000, 100000, 1000000};
  static const uint64_t quick[] = {100, 1000};
  const uint64_t* live = g_quick ? quick : full;
  int points = g_quick ? 2 : 6;
  uint64_t pairs_max = g_quick ? 2000 : 200000;
  printf("\n[pool] pool hit: cube_client_empty(%d bytes) + cube_handle_release, ns per pair,\n"
         "       at most %" PRIu64 " pairs (about 0.1 s) per trial, %d trials, while N other "
         "%d-byte buffers are live\n",
         POOL_BYTES, pairs_max, TRIALS, POOL_BYTES);
  cube_client_t* c = load(g_backend, 0);
  if (!c) return;
  uint64_t max = live[points - 1];
  cube_handle_t* held = malloc(max * sizeof(cube_handle_t));
  if (!held) {
    fprintf(stderr, BENCH_NAME ": no memory for %" PRIu64 " handles\n", max);
    g_failures++;
    cube_client_release(c);
    return;
  }
  uint64_t n = 0;
  double last_hit_ns = 0;
  for (int p = 0; p < points; ++p) {
    /* Growing the live set costs about one hit per buffer added; when the hit
     * grows with the live set, growing to live[p] is projected from the last
     * point as (added) x (last hit) x (live[p] / last live), and a point
     * projected past the budget is skipped with the projection. */
    if (p > 0) {
      double projected_s = (double)(live[p] - n) * last_hit_ns * ((double)live[p] / (double)n) / 1e9;
      if (projected_s > pool_budget_s()) {
        printf("  %8" PRIu64 " live: skipped: growing the live set is projected at %.0f s "
               "(%.1f us per hit at %" PRIu64 " live, growing with the live set), budget %.0f s "
               "(CUBE_BENCH_POOL_BUDGET_S)\n",
               live[p], projected_s, last_hit_ns / 1e3, n, pool_budget_s());
        printf("skip pool_hit %" PRIu64 " projected %.0f s\n", live[p], projected_s);
        continue;
      }
    }
    uint64_t t0 = now_ns();
    for (; n < live[p]; ++n) {
      cube_status_t s = cube_client_empty(c, POOL_BYTES, &held[n]);
      if (s) {
        fail_status("cube_client_empty (live set)", s);
        break;
      }
    }
    if (n < live[p]) break;
    double fill_ms = (double)(now_ns() - t0) / 1e6;
    /* Warm-up (the hit size's slot is in the pool) and the estimate that
     * sizes a trial at about 0.1 s. */
    uint64_t probe = 20;
    double est = (double)pool_trial(c, probe) / (double)probe;
    uint64_t pairs = (uint64_t)(0.1e9 / (est > 1 ? est : 1));
    if (pairs > pairs_max) pairs = pairs_max;
    if (pairs < 20) pairs = 20;
    double v[TRIALS];
    for (int t = 0; t < TRIALS; ++t) v[t] = (double)pool_trial(c, pairs) / (double)pairs;
    double med, lo, hi;
    double w[TRIALS];
    memcpy(w, v, sizeof(v));
    spread(w, TRIALS, &med, &lo, &hi);
    last_hit_ns = med;
    printf("  %8" PRIu64 " live: %9.1f ns per pair (min %.1f, max %.1f), %" PRIu64
           " pairs per trial; growing the live set took %.1f ms\n",
           live[p], med, lo, hi, pairs, fill_ms);
    curve_line("pool_hit", (double)live[p], v, TRIALS, "ns");
  }
  for (uint64_t i = 0; i < n; ++i) cube_handle_release(held[i]);
  free(held);
  TRY("cube_client_sync", cube_client_sync(c));
  cube_client_release(c);
}

/* 2. Launches per second against submitting threads ------------------------ */

static int k_empty_native(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  (void)args;
  (void)n;
  return 0;
}

static const char* const k_empty_src = "CUBE_KERNEL(empty, uint32_t unused) {}\n";

typedef struct launch_worker {
  pthread_t thread;
  cube_client_t* client; /* the thread's own, pinned to its own stream */
  cube_kernel_t* kernel;
  cube_arg_t arg;
  uint32_t nargs;
  uint64_t launches;
  pthread_barrier_t* start;
} launch_worker_t;

static void* launch_thread(void* p) {
  launch_worker_t* w = p;
  cube_count_t one = cube_count_static(1, 1, 1);
  pthread_barrier_wait(w->start);
  for (uint64_t i = 0; i < w->launches; ++i) {
    cube_status_t s = cube_client_launch(w->client, w->kernel, one, w->nargs, &w->arg);
    if (s) {
      fail_status("cube_client_launch", s);
      break;
    }
  }
  TRY("cube_client_sync", cube_client_sync(w->client));
  return NULL;
}

/* One trial: |threads| threads, thread i on device i % |devices|, each
 * submitting |per_thread| launches and syncing its stream; launches per
 * second over the whole (from the common start to the last sync). */
static double launch_trial(cube_client_t** dev_clients, uint32_t devices, cube_kernel_t* k,
                           uint32_t nargs, int threads, uint64_t per_thread) {
  launch_worker_t w[16];
  pthread_barrier_t start;
  int made = 0;
  for (int i = 0; i < threads; ++i) {
    memset(&w[i], 0, sizeof(w[i]));
    cube_status_t s = cube_client_clone(dev_clients[(uint32_t)i % devices], &w[i].client);
    if (s) {
      fail_status("cube_client_clone", s);
      break;
    }
    cube_client_set_stream(w[i].client, cube_stream_id_new());
    w[i].kernel = k;
    w[i].arg = cube_arg_u32(1);
    w[i].nargs = nargs;
    w[i].launches = per_thread;
    w[i].start = &start;
    /* The stream's first use (creating it) is outside the timed region. */
    TRY("cube_client_sync", cube_client_sync(w[i].client));
    made++;
  }
  /* The barrier counts the threads made (fewer than asked after a failed
   * clone, which is counted as a failure) and this one. */
  pthread_barrier_init(&start, NULL, (unsigned)made + 1);
  for (int i = 0; i < made; ++i) pthread_create(&w[i].thread, NULL, launch_thread, &w[i]);
  pthread_barrier_wait(&start);
  uint64_t t0 = now_ns();
  for (int i = 0; i < made; ++i) pthread_join(w[i].thread, NULL);
  uint64_t dt = now_ns() - t0;
  for (int i = 0; i < made; ++i) cube_client_release(w[i].client);
  pthread_barrier_destroy(&start);
  return made ? (double)per_thread * (double)made / ((double)dt / 1e9) : 0.0;
}

static void launch_curve(const char* name, const char* what, cube_client_t** clients,
                         uint32_t devices, cube_kernel_t* k, uint32_t nargs) {
  static const int counts[] = {1, 2, 4, 8, 16};
  enum { NC = 5 };
  uint64_t total = g_quick ? 2000 : 200000; /* launches per trial, split among threads */
  double v[NC][TRIALS];
  printf("  %s: %" PRIu64 " launches per trial split among the threads, %d rounds\n", what, total,
         TRIALS);
  /* Warm-up round (kernel compiled and loaded, streams and pools made). */
  for (int c = 0; c < NC; ++c)
    (void)launch_trial(clients, devices, k, nargs, counts[c], total / 10 / (uint64_t)counts[c] + 1);
  for (int t = 0; t < TRIALS; ++t)
    for (int c = 0; c < NC; ++c)
      v[c][t] = launch_trial(clients, devices, k, nargs, counts[c], total / (uint64_t)counts[c]);
  double base = 0;
  for (int c = 0; c < NC; ++c) {
    double w[TRIALS], med, lo, hi;
    memcpy(w, v[c], sizeof(w));
    spread(w, TRIALS, &med, &lo, &hi);
    if (c == 0) base = med;
    printf("    %2d threads: %10.0f launches/s (min %.0f, max %.0f), %.2fx one thread\n", counts[c],
           med, lo, hi, med / base);
    curve_line(name, counts[c], v[c], TRIALS, "launches/s");
  }
}

static void bench_launch(void) {
  printf("\n[launch] launches per second of an empty kernel against submitting threads\n"
         "         (each thread: its own client clone and stream; launches, then a sync)\n");
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  printf("  %ld cores online: points beyond that oversubscribe the cores\n", online);
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.cube_dim = (cube_dim_t){1, 1, 1};
  uint32_t nargs;
  const char* kind;
  static const cube_arg_kind_t kinds[1] = {CUBE_ARG_U32};
  if (g_backend == CUBE_BACKEND_CPU) {
    d.name = "empty";
    d.cpu_fn = k_empty_native;
    d.arg_kinds = kinds;
    d.arg_count = 1;
    nargs = 1;
    kind = "native CPU kernel";
  } else {
    d.source = k_empty_src;
    d.entry = "empty";
    nargs = 1;
    kind = "dialect kernel";
  }
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fail_status("cube_kernel_create", s);
    return;
  }
  cube_client_t* clients[LAUNCH_DEVICES] = {0};
  clients[0] = load(g_backend, 0);
  if (!clients[0]) {
    cube_kernel_release(k);
    return;
  }
  char what[160];
  snprintf(what, sizeof(what), "one device (%s, %s)", cube_client_info(clients[0])->name, kind);
  launch_curve("launch_one_device", what, clients, 1, k, nargs);

  size_t ndev = device_count(g_backend);
  uint32_t use = g_backend == CUBE_BACKEND_CPU ? LAUNCH_DEVICES
                 : ndev > LAUNCH_DEVICES       ? LAUNCH_DEVICES
                                               : (uint32_t)ndev;
  if (ndev < 2 || use > ndev) {
    printf("  several devices: skipped (%zu device%s of this backend)\n", ndev,
           ndev == 1 ? "" : "s");
    printf("skip launch_several_devices - %zu device(s)\n", ndev);
  } else {
    bool ok = true;
    for (uint32_t i = 1; i < use && ok; ++i) ok = (clients[i] = load(g_backend, i)) != NULL;
    if (ok) {
      snprintf(what, sizeof(what), "%u devices, thread i on device i %% %u (%s)", use, use, kind);
      launch_curve("launch_several_devices", what, clients, use, k, nargs);
    }
  }
  for (uint32_t i = 0; i < LAUNCH_DEVICES; ++i) cube_client_release(clients[i]);
  cube_kernel_release(k);
}

/* 3. CPU kernel throughput against cores ------------------------------------ */

static const char* const k_saxpy_src =
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

enum { FMA_ROUNDS = 64 };
static const char* const k_fma_src =
    "CUBE_KERNEL(fma64, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) {\n"
    "    float v = CUBE_LOAD(x, i);\n"
    "    for (uint32_t r = 0; r < 64; ++r) v = v * a + 0.5f;\n"
    "    CUBE_STORE(y, i, v);\n"
    "  }\n"
    "}\n";

static void saxpy_omp(uint64_t n, float a, const float* restrict x, float* restrict y) {
#ifdef _OPENMP
#pragma omp parallel for simd schedule(static) if (!BENCH_TSAN)
#endif
  for (uint64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

static void fma_omp(uint64_t n, float a, const float* restrict x, float* restrict y) {
#ifdef _OPENMP
#pragma omp parallel for simd schedule(static) if (!BENCH_TSAN)
#endif
  for (uint64_t i = 0; i < n; ++i) {
    float v = x[i];
    for (uint32_t r = 0; r < FMA_ROUNDS; ++r) v = v * a + 0.5f;
    y[i] = v;
  }
}

typedef struct cpu_work {
  const char* name;
  const char* src;
  const char* entry;
  void (*omp)(uint64_t, float, const float*, float*);
  uint64_t n;
  double bytes_per_elem; /* for GB/s; 0: GFLOP/s */
  double flops_per_elem;
} cpu_work_t;

static double work_rate(const cpu_work_t* w, uint64_t ns) {
  double s = (double)ns / 1e9;
  return w->bytes_per_elem > 0 ? w->bytes_per_elem * (double)w->n / s / 1e9
                               : w->flops_per_elem * (double)w->n / s / 1e9;
}

static void cpu_curve(const cpu_work_t* w, cube_client_t** dev, const int* cores, int points,
                      float* x, float* yomp) {
  const char* unit = w->bytes_per_elem > 0 ? "GB/s" : "GFLOP/s";
  printf("  %s over %" PRIu64 " floats (%s)\n", w->name, w->n, unit);
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.cube_dim = (cube_dim_t){256, 1, 1};
  d.source = w->src;
  d.entry = w->entry;
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fail_status("cube_kernel_create", s);
    return;
  }
  char cname[64], oname[64], rname[64];
  snprintf(cname, sizeof(cname), "cpu_%s_cube", w->name);
  snprintf(oname, sizeof(oname), "cpu_%s_openmp", w->name);
  snprintf(rname, sizeof(rname), "cpu_%s_ratio", w->name);
  uint32_t cubes = (uint32_t)((w->n + 255) / 256);
  cube_count_t count = cube_count_static(cubes, 1, 1);
  const float a = 1.0001f;
  for (int p = 0; p < points; ++p) {
    cube_client_t* c = dev[p];
    cube_handle_t hx = CUBE_HANDLE_NULL, hy = CUBE_HANDLE_NULL;
    TRY("cube_client_create_from_slice", cube_client_create_from_slice(c, x, w->n * 4, &hx));
    TRY("cube_client_create_from_slice", cube_client_create_from_slice(c, x, w->n * 4, &hy));
    cube_arg_t args[3] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(a)};
    /* Warm-up: the compile (first point), the pages of y. */
    TRY("cube_client_launch", cube_client_launch(c, k, count, 3, args));
    TRY("cube_client_sync", cube_client_sync(c));
#ifdef _OPENMP
    omp_set_num_threads(cores[p]);
#endif
    w->omp(w->n, a, x, yomp);
    double vc[TRIALS], vo[TRIALS], vr[TRIALS];
    for (int t = 0; t < TRIALS; ++t) {
      uint64_t t0 = now_ns();
      TRY("cube_client_launch", cube_client_launch(c, k, count, 3, args));
      TRY("cube_client_sync", cube_client_sync(c));
      uint64_t t1 = now_ns();
      w->omp(w->n, a, x, yomp);
      uint64_t t2 = now_ns();
      vc[t] = work_rate(w, t1 - t0);
      vo[t] = work_rate(w, t2 - t1);
      vr[t] = vc[t] / vo[t];
    }
    /* cube's y after 1 + TRIALS runs from y = x, against the same
     * recurrence on the host (every 4097th element, relative 1e-4). */
    float* got = malloc(w->n * sizeof(float));
    if (got && cube_client_read_into(c, hy, got, w->n * sizeof(float)) == CUBE_OK) {
      uint64_t wrong = 0;
      for (uint64_t i = 0; i < w->n; i += 4097) {
        float want = x[i];
        if (w->bytes_per_elem > 0) {
          for (int r = 0; r < 1 + TRIALS; ++r) want = a * x[i] + want;
        } else {
          want = x[i];
          for (uint32_t r = 0; r < FMA_ROUNDS; ++r) want = want * a + 0.5f;
        }
        double err = (double)got[i] - (double)want;
        if (err < 0) err = -err;
        if (err > 1e-4 * ((double)(want < 0 ? -want : want) + 1.0)) wrong++;
      }
      if (wrong) {
        fprintf(stderr, BENCH_NAME ": %s on %d cores: %" PRIu64 " sampled elements wrong\n",
                w->name, cores[p], wrong);
        g_failures++;
      }
    } else {
      fprintf(stderr, BENCH_NAME ": %s on %d cores: reading the result failed\n", w->name,
              cores[p]);
      g_failures++;
    }
    free(got);
    cube_handle_release(hx);
    cube_handle_release(hy);
    double mc, lc, hc, mo, lo, ho, mr, lr, hr;
    double tc[TRIALS], to[TRIALS], tr[TRIALS];
    memcpy(tc, vc, sizeof(tc));
    memcpy(to, vo, sizeof(to));
    memcpy(tr, vr, sizeof(tr));
    spread(tc, TRIALS, &mc, &lc, &hc);
    spread(to, TRIALS, &mo, &lo, &ho);
    spread(tr, TRIALS, &mr, &lr, &hr);
#ifdef _OPENMP
    printf("    %2d cores: cube %7.2f %s (%.2f-%.2f), OpenMP %7.2f (%.2f-%.2f), cube/OpenMP "
           "%.2fx (%.2f-%.2f)\n",
           cores[p], mc, unit, lc, hc, mo, lo, ho, mr, lr, hr);
    curve_line(cname, cores[p], vc, TRIALS, unit);
    curve_line(oname, cores[p], vo, TRIALS, unit);
    curve_line(rname, cores[p], vr, TRIALS, "x");
#else
    printf("    %2d cores: cube %7.2f %s (%.2f-%.2f); OpenMP absent (built without it): the "
           "baseline is one thread\n",
           cores[p], mc, unit, lc, hc);
    curve_line(cname, cores[p], vc, TRIALS, unit);
    (void)oname;
    (void)rname;
#endif
  }
  cube_kernel_release(k);
}

#if BENCH_TSAN
static const char* const k_bench_isa = "; built with TSan: the OpenMP loops run on one thread";
#elif defined(__AVX2__)
static const char* const k_bench_isa = ", AVX2 on";
#else
static const char* const k_bench_isa = ", no AVX2";
#endif

static void bench_cpu(void) {
  printf("\n[cpu] CPU kernel throughput against cores: dialect kernels on a CPU device limited to "
         "N threads\n"
         "      (cube_cpu_params_t.threads) against the same loop under OpenMP with N threads\n"
         "      (the OpenMP loop has the bench's flags: -O3, baseline ISA%s; the CPU\n"
         "      backend compiles kernels with -O3 -march=native)\n",
         k_bench_isa);
  static const int all[] = {1, 2, 4, 8, 16};
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  int usable = (int)online;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) usable = CPU_COUNT(&set);
  int cores[5], points = 0;
  for (int i = 0; i < 5; ++i) {
    if (all[i] > usable) {
      printf("  %d cores: skipped (%d usable by this process)\n", all[i], usable);
      printf("skip cpu %d only %d cores usable\n", all[i], usable);
      continue;
    }
    cores[points++] = all[i];
  }
  size_t ndev = device_count(CUBE_BACKEND_CPU);
  if (ndev < (size_t)(CORES_DEVICE0 + points)) {
    printf("  skipped: %zu CPU devices, %d needed (unset CUBE_CPU_DEVICES or set it to %d)\n", ndev,
           CORES_DEVICE0 + points, CPU_DEVICES_NEEDED);
    printf("skip cpu - too few CPU devices\n");
    return;
  }
  cube_client_t* dev[5] = {0};
  for (int p = 0; p < points; ++p) {
    cube_cpu_params_t cp;
    cube_cpu_params_initialize(&cp);
    cp.threads = (uint32_t)cores[p];
    cube_server_options_t o;
    cube_server_options_initialize(&o);
    o.backend_params = &cp;
    cube_status_t s =
        cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, (uint32_t)(CORES_DEVICE0 + p)}, &o,
                         &dev[p]);
    if (s) {
      fail_status("cube_client_init", s);
      for (int i = 0; i < p; ++i) cube_client_release(dev[i]);
      return;
    }
    printf("  cpu:%d: %u threads per launch\n", CORES_DEVICE0 + p,
           cube_client_properties(dev[p])->hardware.num_cpu_cores);
  }
  uint64_t n_saxpy = g_quick ? (1u << 16) : (1u << 24);
  uint64_t n_fma = g_quick ? (1u << 14) : (1u << 22);
  uint64_t n = n_saxpy > n_fma ? n_saxpy : n_fma;
  float* x = malloc(n * sizeof(float));
  float* y = malloc(n * sizeof(float));
  if (!x || !y) {
    fprintf(stderr, BENCH_NAME ": no memory for %" PRIu64 " floats\n", n);
    g_failures++;
  } else {
    for (uint64_t i = 0; i < n; ++i) {
      x[i] = (float)(i % 1000) * 0.001f;
      y[i] = x[i];
    }
    cpu_work_t saxpy = {"saxpy", k_saxpy_src, "saxpy", saxpy_omp, n_saxpy, 12.0, 0};
    cpu_work_t fma = {"fma64", k_fma_src, "fma64", fma_omp, n_fma, 0, 2.0 * FMA_ROUNDS};
    cpu_curve(&saxpy, dev, cores, points, x, y);
    cpu_curve(&fma, dev, cores, points, x, y);
  }
  free(x);
  free(y);
  for (int p = 0; p < points; ++p) cube_client_release(dev[p]);
}

/* 4. Transfer rate against size -------------------------------------------- */

static uint64_t mem_available(void) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1) break;
  fclose(f);
  return kb * 1024;
}

static void bench_transfer(void) {
  cube_client_t* c = load(g_backend, 0);
  if (!c) return;
  uint64_t max = g_quick ? (64u << 10) : (4ull << 30);
  printf("\n[transfer] upload (create_from_slice from ordinary memory) and download (read_into "
         "ordinary memory)\n"
         "           on %s, 4 KiB to %" PRIu64 " KiB, GB/s (10^9 bytes/s), %d alternating "
         "trials\n",
         cube_client_info(c)->name, max >> 10, TRIALS);
  for (uint64_t size = 4096; size <= max; size *= 4) {
    /* Host: source and destination; the device copy on a CPU device too. */
    uint64_t need = size * (g_backend == CUBE_BACKEND_CPU ? 3 : 2) + (512ull << 20);
    uint64_t avail = mem_available();
    if (avail && need > avail) {
      printf("  %10" PRIu64 " KiB: skipped (%" PRIu64 " MiB needed, %" PRIu64
             " MiB available)\n",
             size >> 10, need >> 20, avail >> 20);
      printf("skip transfer %" PRIu64 " memory\n", size);
      continue;
    }
    uint8_t* src = malloc(size);
    uint8_t* dst = malloc(size);
    if (!src || !dst) {
      printf("  %10" PRIu64 " KiB: skipped (malloc failed)\n", size >> 10);
      printf("skip transfer %" PRIu64 " malloc\n", size);
      free(src);
      free(dst);
      continue;
    }
    for (uint64_t i = 0; i < size; i += 4096) src[i] = (uint8_t)(i >> 12);
    memset(dst, 0, size);
    /* Each trial moves at least 256 MiB (4 MiB in quick mode), or one copy. */
    uint64_t floor_bytes = g_quick ? (4u << 20) : (256u << 20);
    uint64_t iters = size >= floor_bytes ? 1 : floor_bytes / size;
    cube_handle_t h = CUBE_HANDLE_NULL;
    TRY("cube_client_create_from_slice", cube_client_create_from_slice(c, src, size, &h));
    TRY("cube_client_read_into", cube_client_read_into(c, h, dst, size)); /* warm-up */
    double up[TRIALS], down[TRIALS];
    for (int t = 0; t < TRIALS; ++t) {
      uint64_t t0 = now_ns();
      for (uint64_t i = 0; i < iters; ++i) {
        cube_handle_t u;
        cube_status_t s = cube_client_create_from_slice(c, src, size, &u);
        if (s) {
          fail_status("cube_client_create_from_slice", s);
          break;
        }
        cube_handle_release(u);
      }
      TRY("cube_client_sync", cube_client_sync(c));
      uint64_t t1 = now_ns();
      for (uint64_t i = 0; i < iters; ++i) TRY("cube_client_read_into", cube_client_read_into(c, h, dst, size));
      uint64_t t2 = now_ns();
      up[t] = (double)(size * iters) / (double)(t1 - t0);
      down[t] = (double)(size * iters) / (double)(t2 - t1);
    }
    bool same = true;
    for (uint64_t i = 0; i < size; i += 4096) same = same && dst[i] == src[i];
    if (!same) {
      fprintf(stderr, BENCH_NAME ": read of %" PRIu64 " bytes differs from what was uploaded\n",
              size);
      g_failures++;
    }
    cube_handle_release(h);
    TRY("cube_client_sync", cube_client_sync(c));
    double mu, lu, hu, md, ld, hd, tu[TRIALS], td[TRIALS];
    memcpy(tu, up, sizeof(tu));
    memcpy(td, down, sizeof(td));
    spread(tu, TRIALS, &mu, &lu, &hu);
    spread(td, TRIALS, &md, &ld, &hd);
    printf("  %10" PRIu64 " KiB: upload %7.2f GB/s (%.2f-%.2f), download %7.2f GB/s (%.2f-%.2f), "
           "%" PRIu64 " per trial\n",
           size >> 10, mu, lu, hu, md, ld, hd, iters);
    curve_line("transfer_upload", (double)size, up, TRIALS, "GB/s");
    curve_line("transfer_download", (double)size, down, TRIALS, "GB/s");
    free(src);
    free(dst);
  }
  cube_client_release(c);
}

/* main ----------------------------------------------------------------------- */

static bool g_named[4];
static const char* const k_sections[4] = {"pool", "launch", "cpu", "transfer"};

static bool wanted(int i) {
  bool any = false;
  for (int j = 0; j < 4; ++j) any = any || g_named[j];
  if (any) return g_named[i];
  return bench_wanted(k_sections[i]);
}

int main(int argc, char** argv) {
  const char* q = getenv("CUBE_BENCH_QUICK");
  g_quick = q && *q && strcmp(q, "0") != 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "quick") == 0) {
      g_quick = true;
      continue;
    }
    bool known = false;
    for (int j = 0; j < 4; ++j)
      if (strcmp(argv[i], k_sections[j]) == 0) known = g_named[j] = true;
    if (!known) {
      fprintf(stderr, "usage: %s [quick] [pool] [launch] [cpu] [transfer]\n", argv[0]);
      return 2;
    }
  }
  /* OpenMP and cube alternate on the same cores: libgomp's idle team spins
   * after each parallel region (GOMP_SPINCOUNT, default 300000 per wait) and
   * would take the cores from cube's trial that follows (bench_dialect does
   * the same; a value the user set wins). */
  setenv("GOMP_SPINCOUNT", "10000", 0);
  const char* devs = getenv("CUBE_CPU_DEVICES");
  if (!devs || !*devs) setenv("CUBE_CPU_DEVICES", "9", 1);
  print_machine("bench_scaling", cube_version());
  g_backend = cube_backend_default();
  cube_status_t st = cube_backend_status(g_backend);
  if (st) {
    printf("bench_scaling: backend %s absent, nothing measured: %s\n",
           cube_backend_name(g_backend), cube_status_message(st));
    cube_status_free(st);
    return 0;
  }
  printf("backend: %s%s; GOMP_SPINCOUNT=%s\n", cube_backend_name(g_backend),
         g_quick ? " (quick mode)" : "", getenv("GOMP_SPINCOUNT"));
  if (wanted(0)) bench_pool();
  if (wanted(1)) bench_launch();
  if (wanted(2)) bench_cpu();
  if (wanted(3)) bench_transfer();
  cube_shutdown();
  if (g_failures) {
    fprintf(stderr, BENCH_NAME ": %d failures\n", g_failures);
    return 1;
  }
  return 0;
}
