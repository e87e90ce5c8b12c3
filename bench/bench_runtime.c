/* bench_runtime: cube's runtime overheads on the CPU backend, each measured
 * beside a baseline taken in the same run (absolute figures drift between
 * runs and machines; ratios are what docs/benchmarks.md ("Targets")
 * compares).
 *
 *   1. caller-side cost of cube_client_launch (threaded and inline queue)
 *   2. allocation + release through the pools vs malloc / posix_memalign
 *   3. launch + sync round trip of an empty kernel
 *   4. launch + read back of a 4-byte result
 *   5. upload (create_from_slice) and download (read_one) of 64 MiB vs memcpy
 *   7. graph replay of 100 empty kernels vs the same eager launches, and
 *      automatic capture (CUBE_GRAPHS=auto) of steps of 100 launches vs the
 *      same steps launched eagerly
 *   6. saxpy over 16M floats: native kernel vs a plain C loop (vs OpenMP when
 *      built with -fopenmp)
 *
 * Sections 2, 5 and 6 run their systems in alternating rounds
 * (bench_rounds.h): each figure the median of >= 5 rounds (CUBE_BENCH_ROUNDS
 * raises it) with min and max, each ratio the median of the per-round ratios
 * (both sides from the same round) with min and max.
 *
 * Arguments: "quick" (or CUBE_BENCH_QUICK=1) runs 2 rounds and shrinks
 * sections 2, 5 and 6 (10,000 allocations, 4 MiB, 1M floats) for the smoke
 * test bench.runtime_smoke (not results). CUBE_BENCH_ONLY=saxpy runs
 * section 6 alone, CUBE_BENCH_ONLY=trace section 8 alone.
 *
 * Four CPU devices: cpu:0 runs with the threaded queue, cpu:1 with the inline
 * queue, cpu:2 and cpu:3 the same with automatic capture on (graphs auto);
 * CUBE_CPU_DEVICES=4 is set here before the first cube call.
 *
 * Every other figure is the median and the minimum over repeated trials after
 * warm-up trials, timed with CLOCK_MONOTONIC. On time lines "ratio vs B" =
 * median time / B's median time (lower is better); on lines that end in
 * "(of GB/s)" it is GB/s / B's GB/s (higher is better). GB/s = 1e9 bytes per second; for copies it counts
 * the bytes copied once (the baselines table counts read + written, 2x).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define BENCH_NAME "bench_runtime"
#include "bench_common.h"
#include "bench_rounds.h"
#include "cube/cube.h"

//===----------------------------------------------------------------------===//
// Timing and statistics
//===----------------------------------------------------------------------===//



/* "name: median X us (min Y), ratio vs B Z" */
static void line_time(const char* name, stats_t s, const char* base_name, stats_t base) {
  printf("%-58s median %9.3f us (min %9.3f), ratio vs %s %.2f\n", name, s.median_us,
         s.min_us, base_name, s.median_us / base.median_us);
}

static void line_base(const char* name, stats_t s) {
  printf("%-58s median %9.3f us (min %9.3f), baseline\n", name, s.median_us, s.min_us);
}

static double gbps(double bytes, double us) { return bytes / (us * 1e3); }

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

static int k_empty(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  (void)args;
  (void)n;
  return 0;
}

/* result(out, value): out[0] = value + 1 (a u32). */
static int k_result(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  if (n != 2 || args[0].buffer.len < 4) return 1;
  uint32_t v = args[1].u32 + 1;
  memcpy(args[0].buffer.data, &v, 4);
  return 0;
}

#define SAXPY_DIM 256u

/* saxpy(x, y, a): y[i] = a * x[i] + y[i] for the 256 units of this cube. */
static int k_saxpy(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)n;
  const float* restrict x = args[0].buffer.data;
  float* restrict y = args[1].buffer.data;
  const float a = args[2].f32;
  uint64_t len = args[1].buffer.len / sizeof(float);
  uint64_t begin = (uint64_t)cube->cube_pos[0] * cube->cube_dim[0];
  uint64_t end = begin + cube->cube_dim[0];
  if (end > len) end = len;
  for (uint64_t i = begin; i < end; ++i) y[i] = a * x[i] + y[i];
  return 0;
}

static void saxpy_plain(uint64_t n, float a, const float* restrict x, float* restrict y) {
  for (uint64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

#ifdef _OPENMP
static void saxpy_omp(uint64_t n, float a, const float* restrict x, float* restrict y) {
  int64_t nn = (int64_t)n;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < nn; ++i) y[i] = a * x[i] + y[i];
}
#endif

static cube_kernel_t* make_kernel(const char* name, uint32_t dim, const cube_arg_kind_t* kinds,
                                  uint32_t nargs, cube_cpu_kernel_fn fn) {
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = name;
  d.cube_dim = (cube_dim_t){dim, 1, 1};
  d.arg_kinds = kinds;
  d.arg_count = nargs;
  d.cpu_fn = fn;
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fail_status("cube_kernel_create", s);
    exit(1);
  }
  return k;
}

//===----------------------------------------------------------------------===//
// Contexts
//===----------------------------------------------------------------------===//

static int cmp_dbl(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static cube_client_t* g_threaded; /* cpu:0 */
static cube_client_t* g_inline;   /* cpu:1 */
static cube_client_t* g_auto_threaded; /* cpu:2, graphs auto */
static cube_client_t* g_auto_inline;   /* cpu:3, graphs auto */
static cube_kernel_t* g_k_empty;
static cube_kernel_t* g_k_result;
static cube_kernel_t* g_k_saxpy;
static volatile uint8_t g_sink;

/* N launches back to back and the sync after them, timed together. */
static uint64_t trial_launches_synced(cube_client_t* c, uint64_t n) {
  cube_count_t one = cube_count_static(1, 1, 1);
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < n; ++i) TRY("cube_client_launch", cube_client_launch(c, g_k_empty, one, 0, NULL));
  TRY("cube_client_sync", cube_client_sync(c));
  return now_ns() - t0;
}


/* 1. Launch cost ------------------------------------------------------------ */

static uint64_t trial_launch(void* ctx, uint64_t iters) {
  cube_client_t* c = ctx;
  cube_count_t one = cube_count_static(1, 1, 1);
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    cube_status_t s = cube_client_launch(c, g_k_empty, one, 0, NULL);
    if (s) fail_status("cube_client_launch", s);
  }
  uint64_t t1 = now_ns();
  TRY("cube_client_sync", cube_client_sync(c)); /* not timed */
  return t1 - t0;
}

static uint64_t trial_direct_call(void* ctx, uint64_t iters) {
  (void)ctx;
  cube_cpu_kernel_fn volatile fn = k_empty;
  cube_cpu_cube_t cube;
  memset(&cube, 0, sizeof(cube));
  int acc = 0;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) acc += fn(&cube, NULL, 0);
  uint64_t t1 = now_ns();
  g_sink = (uint8_t)acc;
  return t1 - t0;
}

/* 2. Allocation ------------------------------------------------------------- */

typedef struct alloc_ctx {
  cube_client_t* client;
  size_t size;
} alloc_ctx_t;

static uint64_t trial_pool_alloc(void* p, uint64_t iters) {
  alloc_ctx_t* a = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    cube_handle_t h;
    cube_status_t s = cube_client_empty(a->client, a->size, &h);
    if (s) {
      fail_status("cube_client_empty", s);
      break;
    }
    cube_handle_release(h);
  }
  return now_ns() - t0;
}

static uint64_t trial_malloc(void* p, uint64_t iters) {
  alloc_ctx_t* a = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    uint8_t* m = malloc(a->size);
    if (!m) abort();
    m[0] = (uint8_t)i;
    g_sink = m[0];
    free(m);
  }
  return now_ns() - t0;
}

static uint64_t trial_memalign(void* p, uint64_t iters) {
  alloc_ctx_t* a = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    void* m = NULL;
    if (posix_memalign(&m, 64, a->size) != 0) abort();
    ((uint8_t*)m)[0] = (uint8_t)i;
    g_sink = ((uint8_t*)m)[0];
    free(m);
  }
  return now_ns() - t0;
}

/* 3. Round trips ------------------------------------------------------------ */

static uint64_t trial_launch_sync(void* ctx, uint64_t iters) {
  cube_client_t* c = ctx;
  cube_count_t one = cube_count_static(1, 1, 1);
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    TRY("cube_client_launch", cube_client_launch(c, g_k_empty, one, 0, NULL));
    TRY("cube_client_sync", cube_client_sync(c));
  }
  return now_ns() - t0;
}

/* A thread round trip with no runtime around it: the floor of a threaded
 * queue's launch + sync. */
typedef struct pingpong {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t ping, pong;
  bool stop;
  atomic_uint_fast64_t sping, spong; /* spinning variant */
  atomic_bool sstop;
} pingpong_t;

static void* pong_cond_main(void* p) {
  pingpong_t* pp = p;
  pthread_mutex_lock(&pp->lock);
  for (;;) {
    while (pp->ping == pp->pong && !pp->stop) pthread_cond_wait(&pp->cond, &pp->lock);
    if (pp->stop) break;
    pp->pong = pp->ping;
    pthread_cond_broadcast(&pp->cond);
  }
  pthread_mutex_unlock(&pp->lock);
  return NULL;
}

static uint64_t trial_pingpong_cond(void* p, uint64_t iters) {
  pingpong_t* pp = p;
  uint64_t t0 = now_ns();
  pthread_mutex_lock(&pp->lock);
  for (uint64_t i = 0; i < iters; ++i) {
    pp->ping++;
    pthread_cond_broadcast(&pp->cond);
    while (pp->pong != pp->ping) pthread_cond_wait(&pp->cond, &pp->lock);
  }
  pthread_mutex_unlock(&pp->lock);
  return now_ns() - t0;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Spins with a pause; yields every 1024 polls so that a machine with fewer
 * free cores than spinners still makes progress. */
static inline void spin_poll(unsigned* polls) {
  if ((++*polls & 1023u) == 0) sched_yield();
  else cpu_relax();
}

static void* pong_spin_main(void* p) {
  pingpong_t* pp = p;
  uint64_t seen = 0;
  unsigned polls = 0;
  while (!atomic_load_explicit(&pp->sstop, memory_order_acquire)) {
    uint64_t v = atomic_load_explicit(&pp->sping, memory_order_acquire);
    if (v != seen) {
      seen = v;
      atomic_store_explicit(&pp->spong, v, memory_order_release);
    } else {
      spin_poll(&polls);
    }
  }
  return NULL;
}

static uint64_t trial_pingpong_spin(void* p, uint64_t iters) {
  pingpong_t* pp = p;
  unsigned polls = 0;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    uint64_t v = atomic_fetch_add_explicit(&pp->sping, 1, memory_order_acq_rel) + 1;
    while (atomic_load_explicit(&pp->spong, memory_order_acquire) != v) spin_poll(&polls);
  }
  return now_ns() - t0;
}

/* 4. Launch + read back ------------------------------------------------------ */

typedef struct result_ctx {
  cube_client_t* client;
  cube_handle_t out;
} result_ctx_t;

static uint64_t trial_launch_read(void* p, uint64_t iters) {
  result_ctx_t* r = p;
  cube_count_t one = cube_count_static(1, 1, 1);
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    cube_arg_t args[2] = {cube_arg_buffer(r->out), cube_arg_u32((uint32_t)i)};
    TRY("cube_client_launch", cube_client_launch(r->client, g_k_result, one, 2, args));
    cube_bytes_t* b = NULL;
    cube_status_t s = cube_client_read_one(r->client, r->out, &b);
    if (s) {
      fail_status("cube_client_read_one", s);
      continue;
    }
    uint32_t v;
    memcpy(&v, cube_bytes_const_data(b), 4);
    if (v != (uint32_t)i + 1) {
      fprintf(stderr, "bench_runtime: read back %u, expected %u\n", v, (uint32_t)i + 1);
      g_failures++;
    }
    cube_bytes_release(b);
  }
  return now_ns() - t0;
}

/* 5. Upload / download ------------------------------------------------------- */

typedef struct copy_ctx {
  cube_client_t* client;
  const uint8_t* src;
  uint8_t* dst;
  size_t size;
  cube_handle_t h;
} copy_ctx_t;

static uint64_t trial_upload(void* p, uint64_t iters) {
  copy_ctx_t* c = p;
  uint64_t total = 0;
  for (uint64_t i = 0; i < iters; ++i) {
    cube_handle_t h;
    uint64_t t0 = now_ns();
    cube_status_t s = cube_client_create_from_slice(c->client, c->src, c->size, &h);
    total += now_ns() - t0;
    if (s) {
      fail_status("cube_client_create_from_slice", s);
      continue;
    }
    cube_handle_release(h); /* not timed; the next trial reuses the slice */
  }
  return total;
}

static uint64_t trial_memcpy(void* p, uint64_t iters) {
  copy_ctx_t* c = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    memcpy(c->dst, c->src, c->size);
    g_sink = c->dst[i % c->size];
  }
  return now_ns() - t0;
}

static uint64_t trial_memcpy_fresh(void* p, uint64_t iters) {
  copy_ctx_t* c = p;
  uint64_t total = 0;
  for (uint64_t i = 0; i < iters; ++i) {
    uint64_t t0 = now_ns();
    uint8_t* d = malloc(c->size);
    if (!d) abort();
    memcpy(d, c->src, c->size);
    g_sink = d[i % c->size];
    total += now_ns() - t0;
    free(d);
  }
  return total;
}

static uint64_t trial_download(void* p, uint64_t iters) {
  copy_ctx_t* c = p;
  uint64_t total = 0;
  for (uint64_t i = 0; i < iters; ++i) {
    cube_bytes_t* b = NULL;
    uint64_t t0 = now_ns();
    cube_status_t s = cube_client_read_one(c->client, c->h, &b);
    total += now_ns() - t0;
    if (s) {
      fail_status("cube_client_read_one", s);
      continue;
    }
    g_sink = ((const uint8_t*)cube_bytes_const_data(b))[i % c->size];
    cube_bytes_release(b); /* not timed */
  }
  return total;
}

/* 7. Graph replay ------------------------------------------------------------ */

enum { GRAPH_NODES = 100 };

typedef struct graph_ctx {
  cube_client_t* client;
  cube_graph_t* graph;
} graph_ctx_t;

/* GRAPH_NODES eager launches, then sync: per-kernel time (iters = kernels). */
static uint64_t trial_eager_kernels(void* p, uint64_t iters) {
  graph_ctx_t* g = p;
  cube_count_t one = cube_count_static(1, 1, 1);
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i)
    TRY("cube_client_launch", cube_client_launch(g->client, g_k_empty, one, 0, NULL));
  TRY("cube_client_sync", cube_client_sync(g->client));
  return now_ns() - t0;
}

/* Replays of the GRAPH_NODES-node graph, then sync: per-kernel time (iters =
 * kernels, a multiple of GRAPH_NODES). */
static uint64_t trial_replay_kernels(void* p, uint64_t iters) {
  graph_ctx_t* g = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters / GRAPH_NODES; ++i)
    TRY("cube_client_replay", cube_client_replay(g->client, g->graph, 0, NULL));
  TRY("cube_client_sync", cube_client_sync(g->client));
  return now_ns() - t0;
}

/* The caller's cost of one replay call (iters = replays; sync not timed). */
static uint64_t trial_replay_call(void* p, uint64_t iters) {
  graph_ctx_t* g = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i)
    TRY("cube_client_replay", cube_client_replay(g->client, g->graph, 0, NULL));
  uint64_t t1 = now_ns();
  TRY("cube_client_sync", cube_client_sync(g->client));
  return t1 - t0;
}

/* Steps of GRAPH_NODES launches of an empty kernel of (buffer, buffer, u32)
 * over STEP_BUFFERS buffers, each step ended by a 4-byte cube_client_write
 * into another buffer (a boundary that waits for nothing, as a loop's next
 * input would be), one sync at the end: the same on an eager device and on
 * one with automatic capture. */
enum { STEP_BUFFERS = 4 };

typedef struct step_ctx {
  cube_client_t* client;
  cube_kernel_t* kernel;
  cube_handle_t buf[STEP_BUFFERS];
  cube_handle_t mark; /* written at each step's end */
  /* The caller's cost of a launch: only launches 1 to GRAPH_NODES - 1 of
   * each step are timed (the last one completes an automatic step and queues
   * its replay; on an inline device the replay runs in that call). */
  bool time_launches_only;
} step_ctx_t;

static void step_launch(step_ctx_t* g, int k) {
  cube_arg_t a[3] = {cube_arg_buffer(g->buf[k % STEP_BUFFERS]),
                     cube_arg_buffer(g->buf[(k + 1) % STEP_BUFFERS]), cube_arg_u32((uint32_t)k)};
  TRY("cube_client_launch", cube_client_launch(g->client, g->kernel, cube_count_static(1, 1, 1),
                                               3, a));
}

static void step_end(step_ctx_t* g, uint64_t i) {
  uint32_t v = (uint32_t)i;
  TRY("cube_client_write", cube_client_write(g->client, g->mark, &v, sizeof(v)));
}

/* iters = kernels (a multiple of GRAPH_NODES); per-kernel time, the final
 * sync included. */
static uint64_t trial_steps(void* p, uint64_t iters) {
  step_ctx_t* g = p;
  uint64_t steps = iters / GRAPH_NODES, total = 0;
  if (!g->time_launches_only) {
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < steps; ++i) {
      for (int k = 0; k < GRAPH_NODES; ++k) step_launch(g, k);
      step_end(g, i);
    }
    TRY("cube_client_sync", cube_client_sync(g->client));
    return now_ns() - t0;
  }
  for (uint64_t i = 0; i < steps; ++i) {
    uint64_t t0 = now_ns();
    for (int k = 0; k < GRAPH_NODES - 1; ++k) step_launch(g, k);
    total += now_ns() - t0;
    step_launch(g, GRAPH_NODES - 1);
    step_end(g, i);
  }
  TRY("cube_client_sync", cube_client_sync(g->client));
  return total * GRAPH_NODES / (GRAPH_NODES - 1); /* per timed launch */
}

static step_ctx_t make_steps(cube_client_t* c, cube_kernel_t* k) {
  step_ctx_t g = {c, k, {CUBE_HANDLE_NULL}, CUBE_HANDLE_NULL, false};
  for (int i = 0; i < STEP_BUFFERS; ++i) TRY("cube_client_empty", cube_client_empty(c, 4096, &g.buf[i]));
  TRY("cube_client_empty", cube_client_empty(c, 4, &g.mark));
  return g;
}

static void free_steps(step_ctx_t* g) {
  for (int i = 0; i < STEP_BUFFERS; ++i) cube_handle_release(g->buf[i]);
  cube_handle_release(g->mark);
}

static cube_graph_t* capture_empty_graph(cube_client_t* c) {
  cube_count_t one = cube_count_static(1, 1, 1);
  TRY("cube_client_capture_begin", cube_client_capture_begin(c));
  for (int i = 0; i < GRAPH_NODES; ++i)
    TRY("cube_client_launch", cube_client_launch(c, g_k_empty, one, 0, NULL));
  cube_graph_t* g = NULL;
  TRY("cube_client_capture_end", cube_client_capture_end(c, &g));
  return g;
}

/* 6. saxpy ---------------------------------------------------------------- */

typedef struct saxpy_ctx {
  cube_client_t* client;
  cube_handle_t x, y;
  float* hx;
  float* hy;
  uint64_t n;
  float a;
  uint64_t runs; /* applications to y, for the check */
} saxpy_ctx_t;

static uint64_t trial_saxpy_cube(void* p, uint64_t iters) {
  saxpy_ctx_t* s = p;
  uint32_t cubes = (uint32_t)((s->n + SAXPY_DIM - 1) / SAXPY_DIM);
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    cube_arg_t args[3] = {cube_arg_buffer(s->x), cube_arg_buffer(s->y), cube_arg_f32(s->a)};
    TRY("cube_client_launch (saxpy)",
        cube_client_launch(s->client, g_k_saxpy, cube_count_static(cubes, 1, 1), 3, args));
    TRY("cube_client_sync (saxpy)", cube_client_sync(s->client));
  }
  s->runs += iters;
  return now_ns() - t0;
}

static uint64_t trial_saxpy_plain(void* p, uint64_t iters) {
  saxpy_ctx_t* s = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) saxpy_plain(s->n, s->a, s->hx, s->hy);
  uint64_t t1 = now_ns();
  g_sink = (uint8_t)s->hy[s->n / 2];
  return t1 - t0;
}

#ifdef _OPENMP
static uint64_t trial_saxpy_omp(void* p, uint64_t iters) {
  saxpy_ctx_t* s = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) saxpy_omp(s->n, s->a, s->hx, s->hy);
  uint64_t t1 = now_ns();
  g_sink = (uint8_t)s->hy[s->n / 2];
  return t1 - t0;
}
#endif

/* Between systems of a round: lets OpenMP's spinning team go to sleep. */
static void settle_ms(void) {
  struct timespec ts = {0, 30 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* A rate line over the round figures of system |i| (bench_rounds.h). */
static void line_fig_bw(const rounds_t* r, int i, const char* name, double bytes) {
  spread_t f = rounds_figure(r, i);
  if (!f.n_valid) {
    printf("%-58s no valid round\n", name);
    return;
  }
  printf("%-58s median %9.1f us (min %9.1f, max %9.1f) = %6.2f GB/s (%.2f-%.2f)\n", name,
         f.median, f.min, f.max, gbps(bytes, f.median), gbps(bytes, f.max), gbps(bytes, f.min));
}

/* A time line over the round figures of system |i|. */
static void line_fig_us(const rounds_t* r, int i, const char* name) {
  spread_t f = rounds_figure(r, i);
  if (!f.n_valid) printf("%-58s no valid round\n", name);
  else printf("%-58s median %9.3f us (min %9.3f, max %9.3f)\n", name, f.median, f.min, f.max);
}

/* The per-round time ratio of |a| over |b| (lower is better). */
static spread_t line_round_ratio_time(const rounds_t* r, const char* name, int a, int b) {
  spread_t s = rounds_ratio(r, a, b, false);
  printf("%-58s ", name);
  print_ratio_spread(s, r->n_rounds);
  return s;
}

/* The per-round GB/s ratio of |a| over |b|: "median of N alternating rounds
 * X.XXx (min A, max B)". */
static spread_t line_round_ratio(const rounds_t* r, const char* name, int a, int b) {
  spread_t s = rounds_ratio(r, a, b, true);
  printf("%-58s ", name);
  print_ratio_spread(s, r->n_rounds);
  return s;
}

//===----------------------------------------------------------------------===//
// Header
//===----------------------------------------------------------------------===//

static void print_header(void) {
  print_machine("bench_runtime", cube_version());
#if defined(__clang__)
  printf("compiler: clang %s", __clang_version__);
#elif defined(__GNUC__)
  printf("compiler: gcc %s", __VERSION__);
#else
  printf("compiler: unknown");
#endif
#ifdef __OPTIMIZE__
  printf(", optimised");
#else
  printf(", not optimised");
#endif
#ifdef _OPENMP
  printf(", OpenMP %d (%d threads)\n", _OPENMP, omp_get_max_threads());
#else
  printf(", no OpenMP (built without -fopenmp)\n");
#endif
  printf("devices: cpu:0 threaded queue, cpu:1 inline queue, cpu:2/cpu:3 the same with graphs "
         "auto; %s\n",
         cube_client_info(g_threaded)->version);
  printf("each line: median and min per operation over trials after warm-up (sections [2], [5] "
         "and [6]: median, min and max over\nalternating rounds, their ratios the median of "
         "per-round ratios);\n"
         "ratio vs B = time / B's time, or on lines ending \"(of GB/s)\" GB/s / B's GB/s\n"
         "(GB = 1e9 bytes; a copy's bytes are counted once)\n\n");
}

//===----------------------------------------------------------------------===//
// Main
//===----------------------------------------------------------------------===//

int main(int argc, char** argv) {
  if (setenv("CUBE_CPU_DEVICES", "4", 1) != 0) return 1;
  bool quick = bench_quick_env();
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "quick") != 0) {
      fprintf(stderr, "bench_runtime: unknown argument '%s' (quick; CUBE_BENCH_ONLY=saxpy or "
                      "trace runs one section)\n", argv[a]);
      return 2;
    }
    quick = true;
  }
  bool adjusted = false;
  const int rounds = rounds_parse(getenv("CUBE_BENCH_ROUNDS"), quick, &adjusted);
  if (adjusted)
    fprintf(stderr, "bench_runtime: CUBE_BENCH_ROUNDS='%s' taken as %d (%d to %d)\n",
            getenv("CUBE_BENCH_ROUNDS"), rounds, ROUNDS_MIN, ROUNDS_MAX);

  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.queue_mode = CUBE_QUEUE_THREADED;
  cube_status_t s = cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &o, &g_threaded);
  if (s) {
    fail_status("cube_client_init cpu:0 (threaded)", s);
    return 1;
  }
  cube_server_options_initialize(&o);
  o.queue_mode = CUBE_QUEUE_INLINE;
  s = cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 1}, &o, &g_inline);
  if (s) {
    fail_status("cube_client_init cpu:1 (inline)", s);
    return 1;
  }
  for (int i = 0; i < 2; ++i) {
    cube_server_options_initialize(&o);
    o.queue_mode = i ? CUBE_QUEUE_INLINE : CUBE_QUEUE_THREADED;
    o.graphs = CUBE_GRAPHS_AUTO;
    s = cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 2u + (uint32_t)i}, &o,
                         i ? &g_auto_inline : &g_auto_threaded);
    if (s) {
      fail_status("cube_client_init cpu:2/3 (graphs auto)", s);
      return 1;
    }
  }
  if (cube_client_is_blocking(g_threaded) || !cube_client_is_blocking(g_inline)) {
    fprintf(stderr, "bench_runtime: queue modes were not applied (threaded blocking %d, inline "
                    "blocking %d)\n",
            cube_client_is_blocking(g_threaded), cube_client_is_blocking(g_inline));
    g_failures++;
  }

  static const cube_arg_kind_t result_kinds[2] = {CUBE_ARG_BUFFER, CUBE_ARG_U32};
  static const cube_arg_kind_t saxpy_kinds[3] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_F32};
  g_k_empty = make_kernel("empty", 1, NULL, 0, k_empty);
  g_k_result = make_kernel("result", 1, result_kinds, 2, k_result);
  g_k_saxpy = make_kernel("saxpy", SAXPY_DIM, saxpy_kinds, 3, k_saxpy);

  print_header();
  fflush(stdout);
  /* CUBE_BENCH_ONLY naming trace runs section [8] alone (bench_common.h). */
  if (bench_only_set() && bench_wanted("trace")) goto trace_section;
  /* CUBE_BENCH_ONLY naming saxpy runs section [6] alone. */
  if (bench_only_set() && bench_wanted("saxpy")) goto saxpy_section;

  /* 1. Caller-side launch cost: N back-to-back launches / N. */
  {
    const uint64_t n = 100000;
    printf("[1] caller-side cost of cube_client_launch, empty native kernel, 1 cube "
           "(N = %llu back to back, then sync, not timed)\n",
           (unsigned long long)n);
    stats_t direct = measure(trial_direct_call, NULL, n, 1, 7);
    stats_t thr = measure(trial_launch, g_threaded, n, 1, 7);
    stats_t inl = measure(trial_launch, g_inline, n, 1, 7);
    line_base("direct call of the kernel function (no runtime):", direct);
    line_time("launch, threaded queue:", thr, "direct call", direct);
    line_time("launch, inline queue:", inl, "direct call", direct);
    line_time("launch, threaded queue (vs inline):", thr, "inline", inl);
    printf("  target: threaded <= 0.500 us -> %s\n\n", thr.median_us <= 0.5 ? "met" : "NOT met");
    fflush(stdout);
  }

  /* 2. Allocation + release through the pools, in alternating rounds. */
  {
    printf("[2] allocation + release (pool hit: the same size again and again); %d alternating "
           "rounds, each system's round figure the median of 3 trials\n", rounds);
    static const size_t sizes[2] = {1u << 20, 4u << 10};
    static const char* names[2] = {"1 MiB", "4 KiB"};
    for (int i = 0; i < 2; ++i) {
      alloc_ctx_t a = {g_threaded, sizes[i]};
      alloc_ctx_t b = {g_inline, sizes[i]};
      const uint64_t n = quick ? 10000 : 100000;
      rounds_t R;
      rounds_init(&R, rounds, NULL);
      int i_m = rounds_add(&R, "malloc", trial_malloc, &a, n, 1, 3);
      int i_pm = rounds_add(&R, "posix_memalign", trial_memalign, &a, n, 1, 3);
      int i_pt = rounds_add(&R, "pool threaded", trial_pool_alloc, &a, n, 1, 3);
      int i_pi = rounds_add(&R, "pool inline", trial_pool_alloc, &b, n, 1, 3);
      rounds_run(&R);
      char label[96];
      snprintf(label, sizeof(label), "malloc + touch + free, %s:", names[i]);
      line_fig_us(&R, i_m, label);
      snprintf(label, sizeof(label), "posix_memalign(64) + touch + free, %s:", names[i]);
      line_fig_us(&R, i_pm, label);
      snprintf(label, sizeof(label), "cube_client_empty + release, %s (threaded dev):", names[i]);
      line_fig_us(&R, i_pt, label);
      snprintf(label, sizeof(label), "cube_client_empty + release, %s (inline dev):", names[i]);
      line_fig_us(&R, i_pi, label);
      snprintf(label, sizeof(label), "  posix_memalign vs malloc, %s (time):", names[i]);
      line_round_ratio_time(&R, label, i_pm, i_m);
      snprintf(label, sizeof(label), "  pool hit, threaded dev, vs malloc, %s (time):", names[i]);
      line_round_ratio_time(&R, label, i_pt, i_m);
      snprintf(label, sizeof(label), "  pool hit, inline dev, vs malloc, %s (time):", names[i]);
      line_round_ratio_time(&R, label, i_pi, i_m);
      spread_t pt = rounds_figure(&R, i_pt);
      printf("  target: pool hit <= 0.200 us (median of the round figures) -> %s\n",
             !pt.n_valid ? "not measured" : pt.median <= 0.2 ? "met" : "NOT met");
    }
    printf("\n");
    fflush(stdout);
  }

  /* 3. Launch + sync round trip. */
  stats_t rt_thr, rt_inl;
  {
    printf("[3] launch + sync round trip, empty kernel, 1 cube\n");
    pingpong_t pp;
    memset(&pp, 0, sizeof(pp));
    pthread_mutex_init(&pp.lock, NULL);
    pthread_cond_init(&pp.cond, NULL);
    atomic_init(&pp.sping, 0);
    atomic_init(&pp.spong, 0);
    atomic_init(&pp.sstop, false);
    pthread_t th;
    pthread_create(&th, NULL, pong_cond_main, &pp);
    stats_t cond = measure(trial_pingpong_cond, &pp, 20000, 1, 7);
    pthread_mutex_lock(&pp.lock);
    pp.stop = true;
    pthread_cond_broadcast(&pp.cond);
    pthread_mutex_unlock(&pp.lock);
    pthread_join(th, NULL);
    pthread_create(&th, NULL, pong_spin_main, &pp);
    stats_t spin = measure(trial_pingpong_spin, &pp, 20000, 1, 7);
    atomic_store(&pp.sstop, true);
    pthread_join(th, NULL);
    pthread_mutex_destroy(&pp.lock);
    pthread_cond_destroy(&pp.cond);

    rt_thr = measure(trial_launch_sync, g_threaded, 20000, 1, 7);
    rt_inl = measure(trial_launch_sync, g_inline, 20000, 1, 7);
    line_base("thread ping-pong, spinning atomics (no runtime):", spin);
    line_time("thread ping-pong, mutex + condvar (sleeping):", cond, "spin ping-pong", spin);
    line_time("launch + sync, threaded queue:", rt_thr, "spin ping-pong", spin);
    line_time("launch + sync, inline queue:", rt_inl, "spin ping-pong", spin);
    line_time("launch + sync, threaded queue (vs inline):", rt_thr, "inline", rt_inl);
    printf("  target: empty launch + sync <= 10 us on 2 cores -> threaded %s, inline %s\n\n",
           rt_thr.median_us <= 10.0 ? "met" : "NOT met",
           rt_inl.median_us <= 10.0 ? "met" : "NOT met");
    fflush(stdout);
  }

  /* 4. Launch + read back of a 4-byte result. */
  {
    printf("[4] launch + read back of a 4-byte result (kernel writes a u32, read_one)\n");
    result_ctx_t rt = {g_threaded, CUBE_HANDLE_NULL}, ri = {g_inline, CUBE_HANDLE_NULL};
    TRY("cube_client_empty", cube_client_empty(g_threaded, 4, &rt.out));
    TRY("cube_client_empty", cube_client_empty(g_inline, 4, &ri.out));
    stats_t t = measure(trial_launch_read, &rt, 20000, 1, 7);
    stats_t i = measure(trial_launch_read, &ri, 20000, 1, 7);
    line_time("launch + read_one, threaded queue:", t, "launch + sync (threaded)", rt_thr);
    line_time("launch + read_one, inline queue:", i, "launch + sync (inline)", rt_inl);
    cube_handle_release(rt.out);
    cube_handle_release(ri.out);
    printf("\n");
    fflush(stdout);
  }

  /* 5. Upload / download of 64 MiB, in alternating rounds. */
  {
    const size_t size = quick ? (4u << 20) : (64u << 20);
    const int per = quick ? 1 : 3;
    printf("[5] upload / download of %zu MiB from / into pageable memory; %d alternating rounds, "
           "each system's round figure the median of %d trial(s)%s\n", size >> 20, rounds, per,
           quick ? " -- QUICK MODE: not a result" : "");
    uint8_t* src = malloc(size);
    uint8_t* dst = malloc(size);
    if (!src || !dst) abort();
    for (size_t i = 0; i < size; ++i) src[i] = (uint8_t)(i * 131u + 7u);
    memset(dst, 1, size);
    copy_ctx_t c = {g_threaded, src, dst, size, CUBE_HANDLE_NULL};
    copy_ctx_t ci = {g_inline, src, dst, size, CUBE_HANDLE_NULL};
    copy_ctx_t cu = c, cui = ci; /* the uploads' own contexts (no resident handle) */
    TRY("cube_client_create_from_slice", cube_client_create_from_slice(g_threaded, src, size, &c.h));
    TRY("cube_client_create_from_slice", cube_client_create_from_slice(g_inline, src, size, &ci.h));
    rounds_t R;
    rounds_init(&R, rounds, NULL);
    int i_mc = rounds_add(&R, "memcpy", trial_memcpy, &c, 1, 2, per);
    int i_mf = rounds_add(&R, "malloc + memcpy", trial_memcpy_fresh, &c, 1, 1, per);
    int i_up = rounds_add(&R, "upload threaded", trial_upload, &cu, 1, 2, per);
    int i_upi = rounds_add(&R, "upload inline", trial_upload, &cui, 1, 2, per);
    int i_dn = rounds_add(&R, "download threaded", trial_download, &c, 1, 2, per);
    int i_dni = rounds_add(&R, "download inline", trial_download, &ci, 1, 2, per);
    rounds_run(&R);
    /* The content must survive the round trip. */
    cube_bytes_t* b = NULL;
    s = cube_client_read_one(g_threaded, c.h, &b);
    if (s) {
      fail_status("cube_client_read_one", s);
    } else {
      if (cube_bytes_size(b) != size || memcmp(cube_bytes_const_data(b), src, size) != 0) {
        fprintf(stderr, "bench_runtime: %zu MiB round trip differs\n", size >> 20);
        g_failures++;
      }
      cube_bytes_release(b);
    }
    cube_handle_release(c.h);
    cube_handle_release(ci.h);
    const double sz = (double)size;
    line_fig_bw(&R, i_mc, "memcpy into a touched buffer:", sz);
    line_fig_bw(&R, i_mf, "malloc + memcpy into fresh memory:", sz);
    line_fig_bw(&R, i_up, "upload: create_from_slice (threaded dev):", sz);
    line_fig_bw(&R, i_upi, "upload: create_from_slice (inline dev):", sz);
    line_fig_bw(&R, i_dn, "download: read_one (threaded dev):", sz);
    line_fig_bw(&R, i_dni, "download: read_one (inline dev):", sz);
    line_round_ratio(&R, "malloc + memcpy vs memcpy (of GB/s):", i_mf, i_mc);
    line_round_ratio(&R, "upload, threaded dev, vs memcpy (of GB/s):", i_up, i_mc);
    line_round_ratio(&R, "upload, inline dev, vs memcpy (of GB/s):", i_upi, i_mc);
    line_round_ratio(&R, "download, threaded dev, vs memcpy (of GB/s):", i_dn, i_mc);
    line_round_ratio(&R, "download, inline dev, vs memcpy (of GB/s):", i_dni, i_mc);
    line_round_ratio(&R, "download, threaded dev, vs fresh memcpy (of GB/s):", i_dn, i_mf);
    printf("\n");
    free(src);
    free(dst);
    fflush(stdout);
  }

saxpy_section:
  /* 6. saxpy over 16M floats, in alternating rounds (bench_rounds.h). */
  {
    const uint64_t n = quick ? (1u << 20) : (16u << 20);
    const double bytes = 12.0 * (double)n;
    const int per = quick ? 1 : 3, warm = quick ? 1 : 3;
    printf("[6] saxpy y = a*x + y over %lluM floats (12 bytes per element), cube_dim 256, %llu "
           "cubes; %d alternating rounds, each system's round figure the median of %d trial(s)%s\n",
           (unsigned long long)(n >> 20), (unsigned long long)(n / SAXPY_DIM), rounds, per,
           quick ? " -- QUICK MODE: not a result" : "");
    float* hx = malloc(n * sizeof(float));
    float* hy = malloc(n * sizeof(float));
    if (!hx || !hy) abort();
    for (uint64_t i = 0; i < n; ++i) {
      hx[i] = 1.0f;
      hy[i] = 0.0f;
    }
    saxpy_ctx_t sc = {g_threaded, CUBE_HANDLE_NULL, CUBE_HANDLE_NULL, hx, hy, n, 0.5f, 0};
    TRY("create x", cube_client_create_from_slice(g_threaded, hx, n * sizeof(float), &sc.x));
    TRY("create y", cube_client_create_from_slice(g_threaded, hy, n * sizeof(float), &sc.y));
    saxpy_ctx_t si = {g_inline, CUBE_HANDLE_NULL, CUBE_HANDLE_NULL, hx, hy, n, 0.5f, 0};
    TRY("create x", cube_client_create_from_slice(g_inline, hx, n * sizeof(float), &si.x));
    TRY("create y", cube_client_create_from_slice(g_inline, hy, n * sizeof(float), &si.y));

    rounds_t R;
    rounds_init(&R, rounds, settle_ms);
    int i_plain = rounds_add(&R, "plain C", trial_saxpy_plain, &sc, 1, warm > 2 ? 2 : warm, per);
#ifdef _OPENMP
    int i_omp = rounds_add(&R, "OpenMP", trial_saxpy_omp, &sc, 1, warm, per);
#endif
    int i_ct = rounds_add(&R, "cube threaded", trial_saxpy_cube, &sc, 1, warm, per);
    int i_ci = rounds_add(&R, "cube inline", trial_saxpy_cube, &si, 1, warm, per);
    rounds_run(&R);
    line_fig_bw(&R, i_plain, "plain C loop (1 thread):", bytes);
#ifdef _OPENMP
    line_fig_bw(&R, i_omp, "OpenMP parallel for loop:", bytes);
#else
    printf("%-58s not built with -fopenmp\n", "OpenMP parallel for loop:");
#endif
    line_fig_bw(&R, i_ct, "cube native kernel, launch + sync (threaded dev):", bytes);
    line_fig_bw(&R, i_ci, "cube native kernel, launch + sync (inline dev):", bytes);
#ifdef _OPENMP
    line_round_ratio(&R, "OpenMP vs plain C loop (of GB/s):", i_omp, i_plain);
    spread_t vs_omp =
        line_round_ratio(&R, "cube native, threaded dev, vs OpenMP (of GB/s):", i_ct, i_omp);
    line_round_ratio(&R, "cube native, inline dev, vs OpenMP (of GB/s):", i_ci, i_omp);
#endif
    line_round_ratio(&R, "cube native, threaded dev, vs plain C (of GB/s):", i_ct, i_plain);
    line_round_ratio(&R, "cube native, inline dev, vs plain C (of GB/s):", i_ci, i_plain);
#ifdef _OPENMP
    printf("  target (on the median of the per-round ratios): native >= 0.9x the OpenMP loop -> "
           "%s\n", !vs_omp.n_valid ? "not measured" : vs_omp.median >= 0.9 ? "met" : "NOT met");
#endif
    /* Check the device result: y = runs * a * 1.0 everywhere (exact). */
    saxpy_ctx_t* all[2] = {&sc, &si};
    for (int k = 0; k < 2; ++k) {
      cube_bytes_t* b = NULL;
      s = cube_client_read_one(all[k]->client, all[k]->y, &b);
      if (s) {
        fail_status("read saxpy result", s);
        continue;
      }
      const float* y = cube_bytes_const_data(b);
      float want = (float)all[k]->runs * all[k]->a;
      uint64_t bad = 0;
      for (uint64_t i = 0; i < n; ++i) bad += y[i] != want;
      if (bad) {
        fprintf(stderr, "bench_runtime: saxpy result wrong in %llu of %llu elements\n",
                (unsigned long long)bad, (unsigned long long)n);
        g_failures++;
      }
      cube_bytes_release(b);
      cube_handle_release(all[k]->x);
      cube_handle_release(all[k]->y);
    }
    free(hx);
    free(hy);
    fflush(stdout);
  }
  if (bench_only_set() && bench_wanted("saxpy")) goto finish;

  /* 7. Graph replay against eager launches of the same kernels. */
  {
    printf("[7] graph replay: %d empty native kernels (1 cube each) captured once; per kernel, "
           "launches or replays then sync (timed together)\n",
           GRAPH_NODES);
    graph_ctx_t thr = {g_threaded, capture_empty_graph(g_threaded)};
    graph_ctx_t inl = {g_inline, capture_empty_graph(g_inline)};
    const uint64_t kernels = 200 * GRAPH_NODES;
    stats_t e_thr = measure(trial_eager_kernels, &thr, kernels, 1, 7);
    stats_t r_thr = measure(trial_replay_kernels, &thr, kernels, 1, 7);
    stats_t e_inl = measure(trial_eager_kernels, &inl, kernels, 1, 7);
    stats_t r_inl = measure(trial_replay_kernels, &inl, kernels, 1, 7);
    stats_t call = measure(trial_replay_call, &thr, 200, 1, 7);
    line_base("eager launches + sync, per kernel, threaded:", e_thr);
    line_time("graph replay + sync, per kernel, threaded:", r_thr, "eager", e_thr);
    line_base("eager launches + sync, per kernel, inline:", e_inl);
    line_time("graph replay + sync, per kernel, inline:", r_inl, "eager", e_inl);
    line_time("cube_client_replay call (100 nodes), threaded:", call, "eager kernel", e_thr);
    printf("  target: replay per kernel <= 0.25x an eager launch -> threaded %s, inline %s\n\n",
           r_thr.median_us <= 0.25 * e_thr.median_us ? "met" : "NOT met",
           r_inl.median_us <= 0.25 * e_inl.median_us ? "met" : "NOT met");
    cube_graph_release(thr.graph);
    cube_graph_release(inl.graph);

    /* Automatic capture: the same steps on eager devices (cpu:0, cpu:1) and
     * on devices with graphs auto (cpu:2, cpu:3). */
    printf("  automatic capture: steps of %d launches of an empty native kernel (buffer, buffer, "
           "u32; %d buffers), each ended by a 4-byte cube_client_write, a sync after the last; "
           "per kernel\n",
           GRAPH_NODES, STEP_BUFFERS);
    static const cube_arg_kind_t step_kinds[3] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32};
    cube_kernel_t* k3 = make_kernel("empty3", 1, step_kinds, 3, k_empty);
    step_ctx_t se_thr = make_steps(g_threaded, k3), se_inl = make_steps(g_inline, k3);
    step_ctx_t sa_thr = make_steps(g_auto_threaded, k3), sa_inl = make_steps(g_auto_inline, k3);
    const uint64_t step_kernels = 100 * GRAPH_NODES;
    stats_t es_thr = measure(trial_steps, &se_thr, step_kernels, 1, 7);
    stats_t as_thr = measure(trial_steps, &sa_thr, step_kernels, 1, 7);
    stats_t es_inl = measure(trial_steps, &se_inl, step_kernels, 1, 7);
    stats_t as_inl = measure(trial_steps, &sa_inl, step_kernels, 1, 7);
    se_thr.time_launches_only = sa_thr.time_launches_only = true;
    se_inl.time_launches_only = sa_inl.time_launches_only = true;
    stats_t ec_thr = measure(trial_steps, &se_thr, step_kernels, 1, 7);
    stats_t ac_thr = measure(trial_steps, &sa_thr, step_kernels, 1, 7);
    stats_t ec_inl = measure(trial_steps, &se_inl, step_kernels, 1, 7);
    stats_t ac_inl = measure(trial_steps, &sa_inl, step_kernels, 1, 7);
    line_base("eager steps, per kernel, threaded:", es_thr);
    line_time("auto graphs steps, per kernel, threaded:", as_thr, "eager", es_thr);
    line_base("eager steps, per kernel, inline:", es_inl);
    line_time("auto graphs steps, per kernel, inline:", as_inl, "eager", es_inl);
    line_base("launch in a step (caller), eager, threaded:", ec_thr);
    line_time("launch in a step (caller), auto: held, threaded:", ac_thr, "eager", ec_thr);
    line_base("launch in a step (caller, runs it), eager, inline:", ec_inl);
    line_time("launch in a step (caller), auto: held, inline:", ac_inl, "eager", ec_inl);
    /* The auto lines measured replays: every step after the warm-up. */
    const uint64_t steps = 16 * (step_kernels / GRAPH_NODES); /* 2 x (1 warm-up + 7) trials */
    for (int i = 0; i < 2; ++i) {
      cube_client_t* c = i ? g_auto_inline : g_auto_threaded;
      cube_graph_auto_stats_t st;
      memset(&st, 0, sizeof(st));
      st.struct_size = sizeof(st);
      TRY("cube_client_graph_auto_stats", cube_client_graph_auto_stats(c, &st));
      printf("  auto, %s: %llu of %llu steps replayed (%llu launches), %llu fallbacks, %llu "
             "interruptions\n",
             i ? "inline" : "threaded", (unsigned long long)st.steps_replayed,
             (unsigned long long)steps, (unsigned long long)st.launches_replayed,
             (unsigned long long)st.fallbacks, (unsigned long long)st.interruptions);
      if (st.steps_replayed + 2 != steps || st.fallbacks) {
        fprintf(stderr, "bench_runtime: automatic capture did not replay every step after the "
                        "warm-up\n");
        g_failures++;
      }
    }
    printf("  target: a held launch cheaper than an eager one -> threaded %s, inline %s\n\n",
           ac_thr.median_us < ec_thr.median_us ? "met" : "NOT met",
           ac_inl.median_us < ec_inl.median_us ? "met" : "NOT met");
    free_steps(&se_thr);
    free_steps(&se_inl);
    free_steps(&sa_thr);
    free_steps(&sa_inl);
    cube_kernel_release(k3);
    fflush(stdout);
  }

trace_section:
  /* 8. The cost of tracing (issue 17): 10,000 small launches + sync, end to
   * end, off and on alternating in each round; on/off per round. */
  {
    enum { ROUNDS = 9 };
    const uint64_t n = 10000;
    printf("[8] tracing on vs off: N = %llu empty launches (1 cube) + sync, end to end, threaded "
           "queue; %d rounds alternating off/on\n",
           (unsigned long long)n, ROUNDS);
    char path[256];
    snprintf(path, sizeof(path), "/tmp/bench_runtime_trace.%ld.json", (long)getpid());
    double off[ROUNDS], on[ROUNDS], ratio[ROUNDS];
    (void)trial_launches_synced(g_threaded, n); /* warm */
    for (int i = 0; i < ROUNDS; ++i) {
      off[i] = (double)trial_launches_synced(g_threaded, n);
      unlink(path);
      TRY("cube_trace_start", cube_trace_start(path));
      on[i] = (double)trial_launches_synced(g_threaded, n);
      TRY("cube_trace_stop", cube_trace_stop());
      unlink(path);
      ratio[i] = on[i] / off[i];
    }
    qsort(off, ROUNDS, sizeof(double), cmp_dbl);
    qsort(on, ROUNDS, sizeof(double), cmp_dbl);
    qsort(ratio, ROUNDS, sizeof(double), cmp_dbl);
    printf("  tracing off: median %.3f us per launch; on: %.3f us\n", off[ROUNDS / 2] / n / 1e3,
           on[ROUNDS / 2] / n / 1e3);
    printf("  ratio on/off per round: median %.3f (min %.3f, max %.3f)\n", ratio[ROUNDS / 2],
           ratio[0], ratio[ROUNDS - 1]);
    printf("  target: <= 1.05 -> %s\n\n", ratio[ROUNDS / 2] <= 1.05 ? "met" : "NOT met");
    fflush(stdout);
  }

finish:
  cube_kernel_release(g_k_empty);
  cube_kernel_release(g_k_result);
  cube_kernel_release(g_k_saxpy);
  cube_client_release(g_threaded);
  cube_client_release(g_inline);
  cube_client_release(g_auto_threaded);
  cube_client_release(g_auto_inline);
  cube_shutdown();
  if (g_failures) {
    printf("\n%d failures (see stderr)\n", g_failures);
    return 1;
  }
  return 0;
}
