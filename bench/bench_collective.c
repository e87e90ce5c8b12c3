/* all_reduce bus bandwidth between CPU devices of one process (shared memory):
 * f32 sum over n = 2, 3, 4 devices, sizes 64 KiB .. 64 MiB, all driven from
 * one thread (threaded queues). For each: the median wall time of one round
 * (all_reduce + sync_collective on every device, then a flush of each), and
 * the transport's own record (time from the last arrival to completion).
 * busbw = algbw * 2(n-1)/n (NCCL's convention). Baseline in the same run: one
 * thread's memcpy of the same size between two warm buffers (GB/s).
 *
 *   CUBE_CPU_DEVICES is set to 4 by the bench; BENCH_MAX_MIB caps the size.
 *
 * Under mpiexec (one CPU device per rank): the same over every rank's cpu:0
 * (global ids 0 .. ranks-1), MPI between the ranks; rank 0 prints. */
#define BENCH_NAME "bench_collective"
#include "bench_common.h"
#include "cube/cube.h"

#define MAXDEV 4

typedef struct {
  void* a;
  void* b;
  size_t bytes;
} copy_ctx_t;

static uint64_t copy_trial(void* p, uint64_t iters) {
  copy_ctx_t* x = p;
  uint64_t t0 = now_ns();
  for (uint64_t it = 0; it < iters; ++it) {
    memcpy(x->b, x->a, x->bytes);
    ((volatile char*)x->b)[it % x->bytes] += 1;
  }
  return now_ns() - t0;
}

typedef struct {
  uint32_t n;
  cube_client_t* c[MAXDEV];
  cube_handle_t h[MAXDEV];
  cube_device_id_t ids[MAXDEV];
  double record_busbw; /* from the last round's record */
  double record_us;
} ctx_t;

static uint64_t trial(void* p, uint64_t iters) {
  ctx_t* x = p;
  uint64_t t0 = now_ns();
  for (uint64_t it = 0; it < iters; ++it) {
    for (uint32_t i = 0; i < x->n; ++i)
      TRY("all_reduce", cube_client_all_reduce(x->c[i], x->h[i], x->h[i], CUBE_DTYPE_F32, x->n,
                                               x->ids, CUBE_REDUCE_SUM));
    for (uint32_t i = 0; i < x->n; ++i)
      TRY("sync_collective", cube_client_sync_collective(x->c[i]));
    for (uint32_t i = 0; i < x->n; ++i) TRY("flush", cube_client_flush(x->c[i]));
  }
  uint64_t t = now_ns() - t0;
  cube_collective_record_t r = {0};
  TRY("last_collective", cube_client_last_collective(x->c[0], &r));
  x->record_busbw = r.busbw_gbps;
  x->record_us = (double)r.time_ns / 1000.0;
  return t;
}

/* One table over the ranks of an MPI run. */
static int mpi_main(uint32_t rank, uint32_t ranks, uint64_t max_mib) {
  if (rank == 0) {
    printf("\nMPI: %u ranks, one CPU device each\n", ranks);
    printf("| ranks | size | round (median) | algbw | busbw (round) | transport time "
           "| busbw (transport) |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  }
  for (uint64_t bytes = 64 << 10; bytes <= (max_mib << 20); bytes *= 4) {
    ctx_t x;
    memset(&x, 0, sizeof(x));
    x.n = 1;
    cube_device_id_t self = {CUBE_BACKEND_CPU, 0};
    TRY("load", cube_client_load(self, &x.c[0]));
    float* init = calloc(bytes / 4, sizeof(float));
    TRY("create", cube_client_create_from_slice(x.c[0], init, bytes, &x.h[0]));
    free(init);
    cube_device_id_t ids[64];
    for (uint32_t r = 0; r < ranks && r < 64; ++r) ids[r] = (cube_device_id_t){CUBE_BACKEND_CPU, r};
    uint64_t iters = bytes >= (16u << 20) ? 2 : bytes >= (1u << 20) ? 8 : 64;
    double t[7];
    for (int k = -1; k < 7; ++k) {
      uint64_t t0 = now_ns();
      for (uint64_t it = 0; it < iters; ++it) {
        TRY("all_reduce", cube_client_all_reduce(x.c[0], x.h[0], x.h[0], CUBE_DTYPE_F32, ranks,
                                                 ids, CUBE_REDUCE_SUM));
        TRY("sync_collective", cube_client_sync_collective(x.c[0]));
        TRY("flush", cube_client_flush(x.c[0]));
      }
      if (k >= 0) t[k] = (double)(now_ns() - t0) / 1000.0 / (double)iters;
    }
    qsort(t, 7, sizeof(double), cmp_double);
    cube_collective_record_t r = {0};
    TRY("last_collective", cube_client_last_collective(x.c[0], &r));
    double alg = (double)bytes / (t[3] * 1000.0), bus = alg * 2.0 * (ranks - 1) / ranks;
    if (rank == 0)
      printf("| %u | %llu KiB | %.1f us | %.2f GB/s | %.2f GB/s | %.1f us | %.2f GB/s |\n", ranks,
             (unsigned long long)(bytes >> 10), t[3], alg, bus, (double)r.time_ns / 1000.0,
             r.busbw_gbps);
    fflush(stdout);
    cube_handle_release(x.h[0]);
    cube_client_release(x.c[0]);
  }
  cube_shutdown();
  return 0;
}

int main(void) {
  uint64_t max_mib = 64;
  const char* m = getenv("BENCH_MAX_MIB");
  if (m && atoi(m) > 0) max_mib = (uint64_t)atoi(m);
  if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE")) {
    uint32_t rank = 0, ranks = 1;
    TRY("world", cube_collective_world(&rank, &ranks, NULL));
    if (rank == 0) print_machine(BENCH_NAME, cube_version());
    if (ranks > 1) return mpi_main(rank, ranks, max_mib);
  }
  setenv("CUBE_CPU_DEVICES", "4", 1);
  print_machine(BENCH_NAME, cube_version());
  printf("\n| devices | size | round (median) | algbw | busbw (round) | transport time "
         "| busbw (transport) | memcpy |\n");
  printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (uint32_t n = 2; n <= MAXDEV; ++n) {
    for (uint64_t bytes = 64 << 10; bytes <= (max_mib << 20); bytes *= 4) {
      ctx_t x;
      memset(&x, 0, sizeof(x));
      x.n = n;
      float* init = calloc(bytes / 4, sizeof(float));
      for (uint32_t i = 0; i < n; ++i) {
        cube_device_id_t d = {CUBE_BACKEND_CPU, i};
        x.ids[i] = d;
        TRY("load", cube_client_load(d, &x.c[i]));
        TRY("create", cube_client_create_from_slice(x.c[i], init, bytes, &x.h[i]));
      }
      free(init);
      uint64_t iters = bytes >= (16u << 20) ? 2 : bytes >= (1u << 20) ? 8 : 64;
      stats_t s = measure(trial, &x, iters, 1, 7);
      copy_ctx_t cc = {malloc(bytes), malloc(bytes), bytes};
      memset(cc.a, 1, bytes);
      memset(cc.b, 2, bytes);
      stats_t cs = measure(copy_trial, &cc, iters, 1, 7);
      free(cc.a);
      free(cc.b);
      double copy_gbps = (double)bytes / (cs.median_us * 1000.0);
      double alg = (double)bytes / (s.median_us * 1000.0);
      double bus = alg * 2.0 * (n - 1) / n;
      char sz[32];
      if (bytes >= (1u << 20))
        snprintf(sz, sizeof(sz), "%llu MiB", (unsigned long long)(bytes >> 20));
      else
        snprintf(sz, sizeof(sz), "%llu KiB", (unsigned long long)(bytes >> 10));
      printf("| %u | %s | %.1f us | %.2f GB/s | %.2f GB/s | %.1f us | %.2f GB/s | %.2f GB/s |\n", n,
             sz, s.median_us, alg, bus, x.record_us, x.record_busbw, copy_gbps);
      fflush(stdout);
      for (uint32_t i = 0; i < n; ++i) {
        cube_handle_release(x.h[i]);
        cube_client_release(x.c[i]);
      }
    }
  }
  cube_shutdown();
  return 0;
}
