/* bench_pool_calls: a driver for counting instructions of the pool-hit path
 * (cube_client_empty + cube_handle_release of the same size, again and
 * again) under callgrind, where wall times on a shared VM are too noisy.
 *
 *   bench_pool_calls [pairs [bytes]]     (defaults: 100000 pairs of 1 MiB)
 *
 * The device is CUBE_BACKEND's device 0 (the CPU by default; CUDA over the
 * mock driver with CUBE_BACKEND=cuda CUBE_CUDA_DRIVER=.../libcube_mock_cuda.so).
 * One pair runs before the measured loop, so the loop only hits the pool.
 * Under callgrind only the loop is collected (client requests, when
 * valgrind/callgrind.h is installed):
 *
 *   valgrind --tool=callgrind --collect-atstart=no ./build/bench_pool_calls 10000
 *
 * Instructions per pair = Ir of the run / pairs. Without valgrind it prints the
 * wall time per pair. With the mock driver it also checks that the loop made
 * no allocation, free or copy in the driver.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BENCH_NAME "bench_pool_calls"
#include "bench_common.h"
#include "cube/cube.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define HAVE_CALLGRIND 1
#endif
#endif
#ifndef HAVE_CALLGRIND
#define CALLGRIND_TOGGLE_COLLECT
#define RUNNING_ON_VALGRIND 0
#endif

/* The mock driver's counters (tests/mock_cuda), when it is the driver. */
typedef struct mock_stats {
  uint64_t copies, bytes_h2d, bytes_d2h, async_allocs, async_frees, launches, device_bytes_used;
  int pinned_allocations, streams;
  int context_pushes_outstanding;
} mock_stats_t;
typedef void (*mock_stats_fn)(mock_stats_t*);

static mock_stats_fn mock_stats_lookup(void) {
  const char* path = getenv("CUBE_CUDA_DRIVER");
  if (!path) return NULL;
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return NULL;
  return (mock_stats_fn)(uintptr_t)dlsym(h, "cube_mock_cuda_stats");
}

__attribute__((noinline)) static int pool_loop(cube_client_t* c, size_t bytes, uint64_t pairs) {
  for (uint64_t i = 0; i < pairs; ++i) {
    cube_handle_t h;
    cube_status_t s = cube_client_empty(c, bytes, &h);
    if (s) {
      fail_status("cube_client_empty", s);
      return 1;
    }
    cube_handle_release(h);
  }
  return 0;
}

int main(int argc, char** argv) {
  uint64_t pairs = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;
  size_t bytes = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : (size_t)1 << 20;
  cube_client_t* c = NULL;
  cube_device_id_t dev = {cube_backend_default(), 0};
  cube_status_t s = cube_client_load(dev, &c);
  if (s) {
    fail_status("cube_client_load", s);
    return 1;
  }
  if (pool_loop(c, bytes, 1)) return 1; /* the page the loop reuses */
  mock_stats_fn mock = mock_stats_lookup();
  mock_stats_t before = {0}, after = {0};
  if (mock) mock(&before);

  CALLGRIND_TOGGLE_COLLECT;
  uint64_t t0 = now_ns();
  int rc = pool_loop(c, bytes, pairs);
  uint64_t t1 = now_ns();
  CALLGRIND_TOGGLE_COLLECT;

  if (mock) {
    mock(&after);
    uint64_t calls = (after.async_allocs - before.async_allocs) +
                     (after.async_frees - before.async_frees) + (after.copies - before.copies);
    printf("mock driver: %" PRIu64 " allocations, frees or copies during the loop\n", calls);
    if (calls) rc = 1;
  }
  printf("%s: %" PRIu64 " pairs of %zu bytes on %s: %.3f us per pair%s\n", BENCH_NAME, pairs,
         bytes, cube_client_info(c)->name, pairs ? (double)(t1 - t0) / 1e3 / (double)pairs : 0.0,
         RUNNING_ON_VALGRIND ? " (under valgrind)" : "");
  cube_client_release(c);
  cube_shutdown();
  return rc || g_failures;
}
