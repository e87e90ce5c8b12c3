/* bench_pool_calls: a driver for counting instructions of the pool-hit path
 * (cube_client_empty + cube_handle_release of the same size, again and
 * again) under callgrind, where wall times on a shared VM are too noisy.
 *
 *   bench_pool_calls [pairs [bytes]]     (defaults: 100000 pairs of 1 MiB)
 *   bench_pool_calls launch [launches]   (default 100000)
 *   bench_pool_calls tune [launches]     (default 100000)
 *   bench_pool_calls steps [steps]       (default 1000)
 *   bench_pool_calls held [steps]        (default 1000)
 *   bench_pool_calls read [rounds]       (default 100000)
 *   bench_pool_calls replay [replays]    (default 1000)
 *   bench_pool_calls upload [pairs [bytes]]  (defaults: 100000 pairs of 64 bytes)
 *
 * "launch" counts a launch instead: cube_client_launch of a native kernel of
 * four arguments (three buffers and a u32, the most a queue cell holds
 * inline) on a CPU device with the inline queue, so that the whole path
 * (client checks, the queued record, the server's task, the backend) runs on
 * the measured thread; the kernel's body is one store. A sync after the loop
 * is outside the counted region. On another backend (CUBE_BACKEND) the same
 * kernel is written in the dialect; with CUBE_TRACE set the loop's launches
 * are traced (what recording costs the launch path).
 *
 * "steps" launches the same kernel in steps of 100 launches, each ended by
 * cube_client_flush (a boundary of automatic capture), and counts all of it;
 * "held" counts launches 1 to 99 of each step only (not the 100th, which
 * completes an automatic step and runs its replay, nor the flush). Run them
 * with CUBE_GRAPHS=auto and without: per launch, the whole path and the held
 * launch against the eager one.
 * "replay" captures one such step of 100 launches as a graph and counts its
 * replays (per launch: the graph's share of one node).
 * "tune" counts cube_tune_op_launch of an operation whose one candidate is
 * that kernel, tuned before the loop (a key function of one anchored u32 and
 * a count function): the launch that hits its tuning record. Its
 * instructions per launch minus those of "launch" are what the hit adds.
 * "read" counts the round trip of bench_runtime's section [4] on the same
 * inline-queue CPU device: a launch of a kernel that stores a u32, then
 * cube_client_read_one of those 4 bytes (checked) and the release of the
 * result.
 *
 * "upload" counts cube_client_create_from_slice of |bytes| bytes and the
 * release of its handle: the pool hit plus the upload that runs on the
 * calling thread (the CPU's memcpy; on CUDA the backend's host-to-device
 * copy), i.e. the path a recovery must exclude (docs/failures.md,
 * "Recovery").
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
#include <string.h>

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
#define CALLGRIND_TOGGLE_COLLECT do { } while (0)
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

/* Uploads of |bytes| bytes from |data| into new buffers, released at once. */
__attribute__((noinline)) static int upload_loop(cube_client_t* c, const void* data, size_t bytes,
                                                 uint64_t pairs) {
  for (uint64_t i = 0; i < pairs; ++i) {
    cube_handle_t h;
    cube_status_t s = cube_client_create_from_slice(c, data, bytes, &h);
    if (s) {
      fail_status("cube_client_create_from_slice", s);
      return 1;
    }
    cube_handle_release(h);
  }
  return 0;
}

static int bench_store_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args,
                              uint32_t n) {
  (void)cube;
  (void)n;
  *(uint32_t*)args[2].buffer.data = args[3].u32;
  return 0;
}

__attribute__((noinline)) static int launch_loop(cube_client_t* c, cube_kernel_t* k,
                                                 const cube_arg_t* args, uint64_t launches) {
  for (uint64_t i = 0; i < launches; ++i) {
    cube_status_t s = cube_client_launch(c, k, cube_count_static(1, 1, 1), 4, args);
    if (s) {
      fail_status("cube_client_launch", s);
      return 1;
    }
  }
  return 0;
}

enum { STEP_LAUNCHES = 100 };

static cube_status_t tune_count(void* user, size_t n, const cube_arg_t* args, cube_count_t* out) {
  (void)user;
  (void)n;
  (void)args;
  *out = cube_count_static(1, 1, 1);
  return CUBE_OK;
}

static cube_status_t tune_key(void* user, const cube_device_properties_t* props, size_t n,
                              const cube_arg_t* args, cube_tune_key_t* out) {
  (void)user;
  (void)props;
  (void)n;
  out->count = 1;
  out->values[0] = cube_tune_anchor(args[3].v.u32, 0);
  return CUBE_OK;
}

__attribute__((noinline)) static int tune_loop(cube_client_t* c, cube_tune_op_t* op,
                                               const cube_arg_t* args, uint64_t launches) {
  for (uint64_t i = 0; i < launches; ++i) {
    cube_status_t s = cube_tune_op_launch(op, c, 4, args);
    if (s) {
      fail_status("cube_tune_op_launch", s);
      return 1;
    }
  }
  return 0;
}

/* Steps of STEP_LAUNCHES launches ended by a flush; |held_only|: launches 1
 * to STEP_LAUNCHES - 1 of each step are collected, the rest is not. */
__attribute__((noinline)) static int steps_loop(cube_client_t* c, cube_kernel_t* k,
                                                const cube_arg_t* args, uint64_t steps,
                                                bool held_only) {
  for (uint64_t i = 0; i < steps; ++i) {
    for (int j = 0; j < STEP_LAUNCHES; ++j) {
      if (held_only && j == STEP_LAUNCHES - 1) {
        CALLGRIND_TOGGLE_COLLECT;
      }
      cube_status_t s = cube_client_launch(c, k, cube_count_static(1, 1, 1), 4, args);
      if (s) {
        fail_status("cube_client_launch", s);
        return 1;
      }
    }
    cube_status_t s = cube_client_flush(c);
    if (held_only) {
      CALLGRIND_TOGGLE_COLLECT;
    }
    if (s) {
      fail_status("cube_client_flush", s);
      return 1;
    }
  }
  return 0;
}

/* Replays of |g| (STEP_LAUNCHES launches captured once). */
__attribute__((noinline)) static int replay_loop(cube_client_t* c, cube_graph_t* g,
                                                 uint64_t replays) {
  for (uint64_t i = 0; i < replays; ++i) {
    cube_status_t s = cube_client_replay(c, g, 0, NULL);
    if (s) {
      fail_status("cube_client_replay", s);
      return 1;
    }
  }
  return 0;
}

/* mode 0: launch; 1: steps; 2: held; 3: replays of a captured step; 4: a
 * tuned operation's launch that hits. */
static int launch_main(uint64_t launches, int mode) {
  setenv("CUBE_DEVICE_QUEUE", "inline", 1);
  cube_client_t* c = NULL;
  cube_device_id_t dev = {cube_backend_default(), 0};
  cube_status_t s = cube_client_load(dev, &c);
  if (s) {
    fail_status("cube_client_load", s);
    return 1;
  }
  static const cube_arg_kind_t kinds[4] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER,
                                           CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "store";
  d.cube_dim = (cube_dim_t){1, 1, 1};
  if (dev.backend == CUBE_BACKEND_CPU) {
    d.arg_kinds = kinds;
    d.arg_count = 4;
    d.cpu_fn = bench_store_kernel;
  } else {
    /* The same kernel in the dialect, for the other backends. */
    d.source = "CUBE_KERNEL(store, CUBE_ARRAY(uint32_t, a), CUBE_ARRAY(uint32_t, b),\n"
               "            CUBE_ARRAY(uint32_t, o), uint32_t v) {\n"
               "  if (ABSOLUTE_POS == 0) CUBE_STORE(o, 0, v);\n"
               "}\n";
    d.entry = "store";
  }
  cube_kernel_t* k = NULL;
  s = cube_kernel_create(&d, &k);
  if (s) {
    fail_status("cube_kernel_create", s);
    return 1;
  }
  cube_handle_t h[3];
  for (int i = 0; i < 3; ++i) {
    s = cube_client_empty(c, 64, &h[i]);
    if (s) {
      fail_status("cube_client_empty", s);
      return 1;
    }
  }
  cube_arg_t args[4] = {cube_arg_buffer(h[0]), cube_arg_buffer(h[1]), cube_arg_buffer(h[2]),
                        cube_arg_u32(7)};
  if (launch_loop(c, k, args, 1)) return 1; /* first use: streams, the kernel */
  cube_tune_op_t* op = NULL;
  if (mode == 4) {
    /* The key is tuned here, or its record is read from the cache directory. */
    cube_tune_candidate_t cand = {"store", k, tune_count, NULL, NULL};
    cube_tune_op_desc_t od;
    cube_tune_op_desc_initialize(&od);
    od.name = "bench_pool_calls_hit";
    od.version = "1";
    od.candidates = &cand;
    od.candidate_count = 1;
    od.key = tune_key;
    od.budget_s = 0.1;
    s = cube_tune_op_create(&od, &op);
    if (!s) s = cube_tune_op_launch(op, c, 4, args); /* tunes the key */
    if (s) {
      fail_status("tuning", s);
      return 1;
    }
    if (tune_loop(c, op, args, 1)) return 1;
  }
  /* Steps: the warm-up of automatic capture (two steps seen, one replayed). */
  if (mode && steps_loop(c, k, args, 3, false)) return 1;
  cube_graph_t* g = NULL;
  if (mode == 3) {
    s = cube_client_capture_begin(c);
    if (!s && launch_loop(c, k, args, STEP_LAUNCHES)) return 1;
    if (!s) s = cube_client_capture_end(c, &g);
    if (s) {
      fail_status("capture", s);
      return 1;
    }
    if (replay_loop(c, g, 2)) return 1; /* the first replay prepares the graph */
  }
  CALLGRIND_TOGGLE_COLLECT;
  uint64_t t0 = now_ns();
  int rc = mode == 4 ? tune_loop(c, op, args, launches)
           : mode == 3 ? replay_loop(c, g, launches)
           : mode    ? steps_loop(c, k, args, launches, mode == 2)
                     : launch_loop(c, k, args, launches);
  uint64_t t1 = now_ns();
  CALLGRIND_TOGGLE_COLLECT;
  if (mode && mode < 4) launches *= STEP_LAUNCHES; /* per launch */
  if (g) cube_graph_release(g);
  if (op) cube_tune_op_release(op);
  s = cube_client_sync(c);
  if (s) {
    fail_status("cube_client_sync", s);
    rc = 1;
  }
  printf("%s: %" PRIu64 " launches of 4 arguments on %s (inline queue%s): %.3f us per launch%s\n",
         BENCH_NAME, launches, cube_client_info(c)->name,
         mode == 1   ? ", steps of 100 and a flush"
         : mode == 2 ? ", steps: launches 1-99"
         : mode == 3 ? ", replays of a captured step of 100"
         : mode == 4 ? ", cube_tune_op_launch hitting its record"
                     : "",
         launches ? (double)(t1 - t0) / 1e3 / (double)launches : 0.0,
         RUNNING_ON_VALGRIND ? " (under valgrind)" : "");
  for (int i = 0; i < 3; ++i) cube_handle_release(h[i]);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
  return rc || g_failures;
}

static int bench_result_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args,
                               uint32_t n) {
  (void)cube;
  (void)n;
  uint32_t v = args[1].u32 + 1;
  memcpy(args[0].buffer.data, &v, 4);
  return 0;
}

__attribute__((noinline)) static int read_loop(cube_client_t* c, cube_kernel_t* k,
                                               cube_handle_t out, uint64_t rounds) {
  for (uint64_t i = 0; i < rounds; ++i) {
    cube_arg_t args[2] = {cube_arg_buffer(out), cube_arg_u32((uint32_t)i)};
    cube_status_t s = cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, args);
    cube_bytes_t* b = NULL;
    if (!s) s = cube_client_read_one(c, out, &b);
    if (s) {
      fail_status("launch + cube_client_read_one", s);
      return 1;
    }
    uint32_t v;
    memcpy(&v, cube_bytes_const_data(b), 4);
    cube_bytes_release(b);
    if (v != (uint32_t)i + 1) {
      fprintf(stderr, "%s: read back %u, expected %u\n", BENCH_NAME, v, (uint32_t)i + 1);
      return 1;
    }
  }
  return 0;
}

static int read_main(uint64_t rounds) {
  setenv("CUBE_DEVICE_QUEUE", "inline", 1);
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c);
  if (s) {
    fail_status("cube_client_load", s);
    return 1;
  }
  static const cube_arg_kind_t kinds[2] = {CUBE_ARG_BUFFER, CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "result";
  d.cube_dim = (cube_dim_t){1, 1, 1};
  d.arg_kinds = kinds;
  d.arg_count = 2;
  d.cpu_fn = bench_result_kernel;
  cube_kernel_t* k = NULL;
  cube_handle_t out = CUBE_HANDLE_NULL;
  s = cube_kernel_create(&d, &k);
  if (!s) s = cube_client_empty(c, 4, &out);
  if (s) {
    fail_status("setup", s);
    return 1;
  }
  if (read_loop(c, k, out, 10)) return 1; /* first use: streams, staging pages */
  CALLGRIND_TOGGLE_COLLECT;
  uint64_t t0 = now_ns();
  int rc = read_loop(c, k, out, rounds);
  uint64_t t1 = now_ns();
  CALLGRIND_TOGGLE_COLLECT;
  printf("%s: %" PRIu64 " launches + 4-byte read_one on %s (inline queue): %.3f us per round%s\n",
         BENCH_NAME, rounds, cube_client_info(c)->name,
         rounds ? (double)(t1 - t0) / 1e3 / (double)rounds : 0.0,
         RUNNING_ON_VALGRIND ? " (under valgrind)" : "");
  cube_handle_release(out);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
  return rc || g_failures;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "read") == 0)
    return read_main(argc > 2 ? strtoull(argv[2], NULL, 10) : 100000);
  if (argc > 1 && strcmp(argv[1], "launch") == 0)
    return launch_main(argc > 2 ? strtoull(argv[2], NULL, 10) : 100000, 0);
  if (argc > 1 && strcmp(argv[1], "tune") == 0)
    return launch_main(argc > 2 ? strtoull(argv[2], NULL, 10) : 100000, 4);
  if (argc > 1 && strcmp(argv[1], "replay") == 0)
    return launch_main(argc > 2 ? strtoull(argv[2], NULL, 10) : 1000, 3);
  if (argc > 1 && (strcmp(argv[1], "steps") == 0 || strcmp(argv[1], "held") == 0))
    return launch_main(argc > 2 ? strtoull(argv[2], NULL, 10) : 1000, argv[1][0] == 's' ? 1 : 2);
  bool upload = argc > 1 && strcmp(argv[1], "upload") == 0;
  if (upload) {
    argv++;
    argc--;
  }
  uint64_t pairs = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;
  size_t bytes = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : upload ? 64 : (size_t)1 << 20;
  cube_client_t* c = NULL;
  cube_device_id_t dev = {cube_backend_default(), 0};
  cube_status_t s = cube_client_load(dev, &c);
  if (s) {
    fail_status("cube_client_load", s);
    return 1;
  }
  unsigned char* data = upload ? malloc(bytes ? bytes : 1) : NULL;
  if (upload && !data) return 1;
  for (size_t i = 0; upload && i < bytes; ++i) data[i] = (unsigned char)(i * 131u + 7u);
  /* The page the loop reuses. */
  if (upload ? upload_loop(c, data, bytes, 1) : pool_loop(c, bytes, 1)) return 1;
  mock_stats_fn mock = mock_stats_lookup();
  mock_stats_t before = {0}, after = {0};
  if (mock) mock(&before);

  CALLGRIND_TOGGLE_COLLECT;
  uint64_t t0 = now_ns();
  int rc = upload ? upload_loop(c, data, bytes, pairs) : pool_loop(c, bytes, pairs);
  uint64_t t1 = now_ns();
  CALLGRIND_TOGGLE_COLLECT;

  if (mock) {
    mock(&after);
    /* An upload is a copy: only allocations and frees count then. */
    uint64_t calls = (after.async_allocs - before.async_allocs) +
                     (after.async_frees - before.async_frees) +
                     (upload ? 0 : after.copies - before.copies);
    printf("mock driver: %" PRIu64 " allocations, frees%s during the loop\n", calls,
           upload ? "" : " or copies");
    if (calls) rc = 1;
  }
  printf("%s: %" PRIu64 " %s of %zu bytes on %s: %.3f us per pair%s\n", BENCH_NAME, pairs,
         upload ? "uploads (create_from_slice + release)" : "pairs", bytes,
         cube_client_info(c)->name, pairs ? (double)(t1 - t0) / 1e3 / (double)pairs : 0.0,
         RUNNING_ON_VALGRIND ? " (under valgrind)" : "");
  free(data);
  cube_client_release(c);
  cube_shutdown();
  return rc || g_failures;
}
