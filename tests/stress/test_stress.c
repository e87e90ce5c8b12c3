/* Stress test: 8 threads x 10,000 random operations on two CPU devices.
 *
 * Every thread works on its own logical stream (the default: one stream per
 * calling thread) of a random one of the two devices. Each live handle has a
 * host copy of what it must hold; every read is compared byte for byte with
 * it. Handles travel between threads through a mutex-protected pool (shared
 * handles are never written again), so memory owned by one stream's pools is
 * read, used as a kernel input and finally released by other threads.
 *
 * At the end every handle is released, the pools of both devices are cleaned
 * and their usage must equal what it was before the threads started.
 *
 * Worker threads never touch the harness counters (they are not atomic):
 * they count mismatches and failed calls in atomics that the main thread
 * CHECKs.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cube/cube.h"

#define STRESS_THREADS 8
#define STRESS_OPS 10000
#define STRESS_DEVICES 2
/* Largest buffer (the same under ASan: the run stays well inside its budget). */
#define STRESS_MAX_SIZE (256u * 1024u)
#define STRESS_MAX_LIVE 24   /* live handles per thread */
#define STRESS_POOL_CAP 48   /* shared handles */
#define STRESS_MAX_REPORTS 20

/* Native kernels: 256 units per cube, each unit handles 64 bytes. */
#define K_DIM 256u
#define K_BYTES_PER_UNIT 64u
#define K_BYTES_PER_CUBE (K_DIM * K_BYTES_PER_UNIT)

//===----------------------------------------------------------------------===//
// Counters shared by the workers
//===----------------------------------------------------------------------===//

static atomic_ulong g_mismatches;  /* reads whose bytes differ from the host copy */
static atomic_ulong g_errors;      /* calls that failed */
static atomic_ulong g_reports;     /* messages printed (bounded) */
static atomic_ulong g_reads;       /* reads compared */
static atomic_ulong g_bytes_read;
static atomic_ulong g_launches;
static atomic_ulong g_cross;       /* uses of another thread's handle */

static void report(const char* fmt, const char* a, const char* b) {
  if (atomic_fetch_add(&g_reports, 1) < STRESS_MAX_REPORTS) fprintf(stderr, fmt, a, b);
}

/* Consumes |s|; counts and prints a failure. Returns true on success. */
static bool ok(cube_status_t s, const char* what) {
  if (s == CUBE_OK) return true;
  atomic_fetch_add(&g_errors, 1);
  report("stress: %s failed: %s\n", what, cube_status_message(s));
  cube_status_free(s);
  return false;
}

//===----------------------------------------------------------------------===//
// Expected contents: reference-counted host copies
//===----------------------------------------------------------------------===//

typedef struct blob {
  atomic_int refs;
  size_t size;
  uint8_t data[];
} blob_t;

static blob_t* blob_new(size_t size) {
  blob_t* b = malloc(sizeof(blob_t) + size);
  if (!b) abort();
  atomic_init(&b->refs, 1);
  b->size = size;
  return b;
}
static blob_t* blob_retain(blob_t* b) {
  atomic_fetch_add(&b->refs, 1);
  return b;
}
static void blob_release(blob_t* b) {
  if (b && atomic_fetch_sub(&b->refs, 1) == 1) free(b);
}

/* Random bytes, 8 at a time. */
static void fill_random(uint64_t* rng, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = cube_test_rand(rng);
    memcpy(p + i, &x, 8);
  }
  if (i < n) {
    uint64_t x = cube_test_rand(rng);
    memcpy(p + i, &x, n - i);
  }
}

/* The byte the fill kernel writes at |j|. */
static inline uint8_t pattern_byte(uint32_t seed, uint64_t j) {
  uint64_t x = (j + seed) * 0x9E3779B97F4A7C15ull;
  return (uint8_t)((x >> 56) ^ (uint8_t)j ^ (uint8_t)seed);
}

/* Compares |got| with |want|; counts a mismatch. */
static void compare(cube_bytes_t* got, const blob_t* want, const char* what) {
  atomic_fetch_add(&g_reads, 1);
  size_t n = cube_bytes_size(got);
  atomic_fetch_add(&g_bytes_read, n);
  if (n != want->size || memcmp(cube_bytes_const_data(got), want->data, n) != 0) {
    atomic_fetch_add(&g_mismatches, 1);
    char detail[96];
    size_t first = 0;
    const uint8_t* g = cube_bytes_const_data(got);
    while (first < n && first < want->size && g[first] == want->data[first]) ++first;
    snprintf(detail, sizeof(detail), "got %zu bytes, want %zu, first difference at %zu", n,
             want->size, first);
    report("stress: MISMATCH in %s: %s\n", what, detail);
  }
}

//===----------------------------------------------------------------------===//
// Native kernels
//===----------------------------------------------------------------------===//

/* The byte range of unit |u| of |cube| over a buffer of |len| bytes. */
static inline void unit_range(const cube_cpu_cube_t* cube, uint32_t u, uint64_t len,
                              uint64_t* begin, uint64_t* end) {
  uint64_t g = (uint64_t)cube->cube_pos[0] * cube->cube_dim[0] + u;
  uint64_t b = g * K_BYTES_PER_UNIT, e = b + K_BYTES_PER_UNIT;
  if (b > len) b = len;
  if (e > len) e = len;
  *begin = b;
  *end = e;
}

/* fill(out, seed): out[j] = pattern_byte(seed, j). */
static int k_fill(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 2) return 1;
  uint8_t* out = args[0].buffer.data;
  uint64_t len = args[0].buffer.len;
  uint32_t seed = args[1].u32;
  for (uint32_t u = 0; u < cube->cube_dim[0]; ++u) {
    uint64_t b, e;
    unit_range(cube, u, len, &b, &e);
    for (uint64_t j = b; j < e; ++j) out[j] = pattern_byte(seed, j);
  }
  return 0;
}

/* copy(in, out): out[j] = in[j]. */
static int k_copy(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 2 || args[0].buffer.len != args[1].buffer.len) return 2;
  const uint8_t* in = args[0].buffer.data;
  uint8_t* out = args[1].buffer.data;
  uint64_t len = args[1].buffer.len;
  for (uint32_t u = 0; u < cube->cube_dim[0]; ++u) {
    uint64_t b, e;
    unit_range(cube, u, len, &b, &e);
    if (e > b) memcpy(out + b, in + b, (size_t)(e - b));
  }
  return 0;
}

/* add(a, b, out): out[j] = a[j] + b[j] (bytes, mod 256). */
static int k_add(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 3 || args[0].buffer.len != args[2].buffer.len ||
      args[1].buffer.len != args[2].buffer.len)
    return 3;
  const uint8_t* a = args[0].buffer.data;
  const uint8_t* bb = args[1].buffer.data;
  uint8_t* out = args[2].buffer.data;
  uint64_t len = args[2].buffer.len;
  for (uint32_t u = 0; u < cube->cube_dim[0]; ++u) {
    uint64_t b, e;
    unit_range(cube, u, len, &b, &e);
    for (uint64_t j = b; j < e; ++j) out[j] = (uint8_t)(a[j] + bb[j]);
  }
  return 0;
}

static cube_kernel_t* g_fill;
static cube_kernel_t* g_copy;
static cube_kernel_t* g_add;
static cube_client_t* g_clients[STRESS_DEVICES];

static cube_count_t cubes_for(uint64_t len) {
  uint64_t c = (len + K_BYTES_PER_CUBE - 1) / K_BYTES_PER_CUBE;
  return cube_count_static((uint32_t)(c ? c : 1), 1, 1);
}

//===----------------------------------------------------------------------===//
// The shared pool of handles
//===----------------------------------------------------------------------===//

typedef struct entry {
  cube_handle_t h;
  int dev;
  blob_t* want;
} entry_t;

static pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t g_pool[STRESS_POOL_CAP];
static size_t g_pool_count;

/* Puts a retained copy of |e| into the pool; evicts a random entry when full
 * (released by this thread, whichever stream owns it). */
static void pool_put(const entry_t* e, uint64_t* rng) {
  entry_t evicted = {CUBE_HANDLE_NULL, 0, NULL};
  entry_t mine = {cube_handle_retain(e->h), e->dev, blob_retain(e->want)};
  pthread_mutex_lock(&g_pool_lock);
  if (g_pool_count == STRESS_POOL_CAP) {
    size_t i = (size_t)(cube_test_rand(rng) % g_pool_count);
    evicted = g_pool[i];
    g_pool[i] = mine;
  } else {
    g_pool[g_pool_count++] = mine;
  }
  pthread_mutex_unlock(&g_pool_lock);
  if (evicted.want) {
    cube_handle_release(evicted.h);
    blob_release(evicted.want);
  }
}

/* A retained copy of a random pool entry; false when the pool is empty. */
static bool pool_take(entry_t* out, uint64_t* rng) {
  bool found = false;
  pthread_mutex_lock(&g_pool_lock);
  if (g_pool_count) {
    const entry_t* e = &g_pool[cube_test_rand(rng) % g_pool_count];
    out->h = cube_handle_retain(e->h);
    out->dev = e->dev;
    out->want = blob_retain(e->want);
    found = true;
  }
  pthread_mutex_unlock(&g_pool_lock);
  return found;
}

/* Removes and releases a random entry. */
static void pool_evict(uint64_t* rng) {
  entry_t evicted = {CUBE_HANDLE_NULL, 0, NULL};
  pthread_mutex_lock(&g_pool_lock);
  if (g_pool_count) {
    size_t i = (size_t)(cube_test_rand(rng) % g_pool_count);
    evicted = g_pool[i];
    g_pool[i] = g_pool[--g_pool_count];
  }
  pthread_mutex_unlock(&g_pool_lock);
  if (evicted.want) {
    cube_handle_release(evicted.h);
    blob_release(evicted.want);
  }
}

static void pool_clear(void) {
  pthread_mutex_lock(&g_pool_lock);
  for (size_t i = 0; i < g_pool_count; ++i) {
    cube_handle_release(g_pool[i].h);
    blob_release(g_pool[i].want);
  }
  g_pool_count = 0;
  pthread_mutex_unlock(&g_pool_lock);
}

//===----------------------------------------------------------------------===//
// One worker thread
//===----------------------------------------------------------------------===//

typedef struct worker {
  int index;
  /* The kinds of operation and their devices come from |op_rng| alone, so
   * each thread's sequence of 10,000 operations is fixed by its seed. Sizes,
   * contents and picks come from |rng|; what a cross-thread operation finds
   * in the shared pool depends on timing. */
  uint64_t op_rng;
  uint64_t rng;
  entry_t live[STRESS_MAX_LIVE];
  size_t live_count;
  /* Work queued on this thread's stream of a device since its last sync. */
  bool dirty[STRESS_DEVICES];
  uint64_t ops_done;
} worker_t;

static uint64_t rnd(worker_t* w, uint64_t n) { return n ? cube_test_rand(&w->rng) % n : 0; }

/* Random size in [1, STRESS_MAX_SIZE], mostly small, often odd. */
static size_t random_size(worker_t* w) {
  uint64_t r = rnd(w, 100);
  size_t max = r < 50 ? 1024 : r < 80 ? 32 * 1024 : STRESS_MAX_SIZE;
  size_t n = 1 + (size_t)rnd(w, max);
  if (rnd(w, 2)) n |= 1;
  if (n > STRESS_MAX_SIZE) n = STRESS_MAX_SIZE - 1;
  return n;
}

static void live_release_at(worker_t* w, size_t i) {
  cube_handle_release(w->live[i].h);
  blob_release(w->live[i].want);
  w->live[i] = w->live[--w->live_count];
}

/* Takes ownership of |h| and |want|. */
static void live_add(worker_t* w, cube_handle_t h, int dev, blob_t* want) {
  if (w->live_count == STRESS_MAX_LIVE) live_release_at(w, (size_t)rnd(w, w->live_count));
  w->live[w->live_count++] = (entry_t){h, dev, want};
}

static entry_t* live_pick(worker_t* w) {
  return w->live_count ? &w->live[rnd(w, w->live_count)] : NULL;
}

static bool op_create(worker_t* w, int dev) {
  size_t n = random_size(w);
  blob_t* b = blob_new(n);
  fill_random(&w->rng, b->data, n);
  cube_handle_t h;
  if (!ok(cube_client_create_from_slice(g_clients[dev], b->data, n, &h), "create_from_slice")) {
    blob_release(b);
    return false;
  }
  if (cube_handle_size(h) != n) {
    atomic_fetch_add(&g_mismatches, 1);
    report("stress: %s%s: handle size differs from the slice size\n", "create_from_slice", "");
  }
  w->dirty[dev] = true;
  live_add(w, h, dev, b);
  return true;
}

static void read_check(worker_t* w, const entry_t* e, const char* what) {
  cube_bytes_t* got = NULL;
  if (!ok(cube_client_read_one(g_clients[e->dev], e->h, &got), what)) return;
  compare(got, e->want, what);
  cube_bytes_release(got);
  (void)w;
}

static void op_empty_fill(worker_t* w, int dev) {
  size_t n = random_size(w);
  cube_handle_t h;
  if (!ok(cube_client_empty(g_clients[dev], n, &h), "empty")) return;
  uint32_t seed = (uint32_t)cube_test_rand(&w->rng);
  cube_arg_t args[2] = {cube_arg_buffer(h), cube_arg_u32(seed)};
  if (!ok(cube_client_launch(g_clients[dev], g_fill, cubes_for(n), 2, args), "launch fill")) {
    cube_handle_release(h);
    return;
  }
  atomic_fetch_add(&g_launches, 1);
  w->dirty[dev] = true;
  blob_t* b = blob_new(n);
  for (size_t j = 0; j < n; ++j) b->data[j] = pattern_byte(seed, j);
  live_add(w, h, dev, b);
  if (rnd(w, 2)) read_check(w, &w->live[w->live_count - 1], "read after fill");
}

static void op_tensors(worker_t* w, int dev) {
  size_t count = 2 + (size_t)rnd(w, 2);
  cube_layout_desc_t descs[3];
  blob_t* blobs[3];
  const void* data[3];
  size_t sizes[3];
  for (size_t i = 0; i < count; ++i) {
    static const uint32_t elem_sizes[4] = {1, 2, 4, 8};
    uint32_t es = elem_sizes[rnd(w, 4)];
    uint32_t rank = 1 + (uint32_t)rnd(w, 3);
    uint64_t shape[3];
    uint64_t total = es;
    for (uint32_t d = 0; d < rank; ++d) {
      uint64_t lim = rank == 1 ? 4000 : rank == 2 ? 90 : 24;
      shape[d] = 1 + rnd(w, lim);
      total *= shape[d];
    }
    cube_status_t s = cube_layout_desc_initialize(
        rnd(w, 2) ? CUBE_LAYOUT_OPTIMIZED : CUBE_LAYOUT_CONTIGUOUS, rank, shape, es, &descs[i]);
    if (!ok(s, "layout_desc_init")) {
      for (size_t j = 0; j < i; ++j) blob_release(blobs[j]);
      return;
    }
    blobs[i] = blob_new((size_t)total);
    fill_random(&w->rng, blobs[i]->data, (size_t)total);
    data[i] = blobs[i]->data;
    sizes[i] = (size_t)total;
  }
  cube_tensor_t t[3];
  if (!ok(cube_client_create_tensors_from_slices(g_clients[dev], count, descs, data, sizes, t),
          "create_tensors_from_slices")) {
    for (size_t i = 0; i < count; ++i) blob_release(blobs[i]);
    return;
  }
  w->dirty[dev] = true;
  /* Read them back together as tensors (dense content) ... */
  cube_bytes_t* got[3] = {NULL, NULL, NULL};
  if (ok(cube_client_read_tensor(g_clients[dev], count, t, got), "read_tensor")) {
    for (size_t i = 0; i < count; ++i) {
      compare(got[i], blobs[i], "read_tensor");
      cube_bytes_release(got[i]);
    }
  }
  /* ... then keep the sub-handles as ordinary handles (the view of each is
   * its tensor's bytes: contiguous on the CPU). */
  for (size_t i = 0; i < count; ++i) {
    if (cube_handle_size(t[i].handle) != sizes[i]) {
      atomic_fetch_add(&g_mismatches, 1);
      report("stress: %s%s: tensor handle size differs from its data\n", "create_tensors", "");
      cube_tensor_release(&t[i]);
      blob_release(blobs[i]);
      continue;
    }
    live_add(w, t[i].handle, dev, blobs[i]);
  }
}

static void op_read_async(worker_t* w) {
  entry_t* first = live_pick(w);
  if (!first) return;
  int dev = first->dev;
  /* 1-3 handles of the same device. */
  cube_handle_t hs[3];
  blob_t* want[3];
  size_t n = 0;
  hs[n] = first->h;
  want[n++] = blob_retain(first->want);
  size_t extra = (size_t)rnd(w, 3);
  for (size_t i = 0; i < w->live_count && n < 1 + extra; ++i) {
    if (w->live[i].dev != dev || w->live[i].h.id == first->h.id) continue;
    hs[n] = w->live[i].h;
    want[n++] = blob_retain(w->live[i].want);
  }
  cube_future_t* f = NULL;
  if (ok(cube_client_read_async(g_clients[dev], n, hs, &f), "read_async")) {
    /* Other work may go on before the wait: a create on the same stream. */
    if (rnd(w, 2)) op_create(w, dev);
    cube_bytes_t* got[3] = {NULL, NULL, NULL};
    if (ok(cube_future_wait(f, UINT64_MAX, got), "future_wait")) {
      for (size_t i = 0; i < n; ++i) {
        compare(got[i], want[i], "read_async");
        cube_bytes_release(got[i]);
      }
    }
    cube_future_release(f);
  }
  for (size_t i = 0; i < n; ++i) blob_release(want[i]);
}

/* copy(in -> new out); |in| may belong to another thread. */
static void launch_copy(worker_t* w, const entry_t* in) {
  int dev = in->dev;
  size_t n = (size_t)cube_handle_size(in->h);
  if (n == 0) {
    atomic_fetch_add(&g_errors, 1);
    report("stress: %s%s: input handle has size 0\n", "copy", "");
    return;
  }
  cube_handle_t out;
  if (!ok(cube_client_empty(g_clients[dev], n, &out), "empty (copy output)")) return;
  cube_arg_t args[2] = {cube_arg_buffer(in->h), cube_arg_buffer(out)};
  if (!ok(cube_client_launch(g_clients[dev], g_copy, cubes_for(n), 2, args), "launch copy")) {
    cube_handle_release(out);
    return;
  }
  atomic_fetch_add(&g_launches, 1);
  w->dirty[dev] = true;
  live_add(w, out, dev, blob_retain(in->want));
  if (rnd(w, 2)) read_check(w, &w->live[w->live_count - 1], "read after copy");
}

static void op_add(worker_t* w) {
  entry_t* a = live_pick(w);
  if (!a) return;
  int dev = a->dev;
  size_t n = a->want->size;
  cube_handle_t ah = cube_handle_retain(a->h);
  blob_t* aw = blob_retain(a->want);
  blob_t* bw = blob_new(n);
  fill_random(&w->rng, bw->data, n);
  cube_handle_t bh, out;
  if (!ok(cube_client_create_from_slice(g_clients[dev], bw->data, n, &bh), "create (add input)"))
    goto done_a;
  if (!ok(cube_client_empty(g_clients[dev], n, &out), "empty (add output)")) goto done_b;
  cube_arg_t args[3] = {cube_arg_buffer(ah), cube_arg_buffer(bh), cube_arg_buffer(out)};
  if (!ok(cube_client_launch(g_clients[dev], g_add, cubes_for(n), 3, args), "launch add")) {
    cube_handle_release(out);
    goto done_b;
  }
  atomic_fetch_add(&g_launches, 1);
  w->dirty[dev] = true;
  blob_t* ow = blob_new(n);
  for (size_t j = 0; j < n; ++j) ow->data[j] = (uint8_t)(aw->data[j] + bw->data[j]);
  /* Keep the second input sometimes; else release it at once: the queued
   * launch keeps it alive. */
  if (rnd(w, 4) == 0) live_add(w, bh, dev, blob_retain(bw));
  else cube_handle_release(bh);
  bh = CUBE_HANDLE_NULL;
  live_add(w, out, dev, ow);
  if (rnd(w, 2)) read_check(w, &w->live[w->live_count - 1], "read after add");
done_b:
  cube_handle_release(bh);
done_a:
  cube_handle_release(ah);
  blob_release(aw);
  blob_release(bw);
}

/* Makes a handle of this thread visible to the others. Work queued on this
 * stream (uploads, the kernel that wrote it) is ordered with another
 * stream's work only through a sync. */
static void op_share(worker_t* w) {
  entry_t* e = live_pick(w);
  if (!e) return;
  if (w->dirty[e->dev]) {
    if (!ok(cube_client_sync(g_clients[e->dev]), "sync before share")) return;
    w->dirty[e->dev] = false;
  }
  pool_put(e, &w->rng);
}

static void op_cross(worker_t* w) {
  entry_t e;
  if (!pool_take(&e, &w->rng)) return;
  atomic_fetch_add(&g_cross, 1);
  if (rnd(w, 2)) {
    read_check(w, &e, "cross-stream read");
  } else {
    launch_copy(w, &e);
  }
  /* Sometimes the last reference of this thread goes right away, while a
   * queued launch may still use it. */
  cube_handle_release(e.h);
  blob_release(e.want);
}

static void do_op(worker_t* w) {
  int dev = (int)(cube_test_rand(&w->op_rng) % STRESS_DEVICES);
  uint64_t r = cube_test_rand(&w->op_rng) % 1000;
  if (r < 170) {
    op_create(w, dev);
  } else if (r < 270) {
    op_empty_fill(w, dev);
  } else if (r < 410) {
    entry_t* e = live_pick(w);
    if (e) read_check(w, e, "read_one");
  } else if (r < 530) {
    if (w->live_count) live_release_at(w, (size_t)rnd(w, w->live_count));
  } else if (r < 570) {
    op_share(w);
  } else if (r < 660) {
    op_cross(w);
  } else if (r < 710) {
    op_tensors(w, dev);
  } else if (r < 790) {
    op_read_async(w);
  } else if (r < 850) {
    entry_t* e = live_pick(w);
    if (e) {
      entry_t copy = {cube_handle_retain(e->h), e->dev, blob_retain(e->want)};
      launch_copy(w, &copy);
      cube_handle_release(copy.h);
      blob_release(copy.want);
    }
  } else if (r < 900) {
    op_add(w);
  } else if (r < 940) {
    (void)ok(cube_client_flush(g_clients[dev]), "flush");
  } else if (r < 965) {
    if (ok(cube_client_sync(g_clients[dev]), "sync")) w->dirty[dev] = false;
  } else if (r < 975) {
    (void)ok(cube_client_memory_cleanup(g_clients[dev]), "memory_cleanup");
  } else if (r < 985) {
    pool_evict(&w->rng);
  } else {
    /* A create followed at once by a read on the other device. */
    if (op_create(w, 1 - dev)) read_check(w, &w->live[w->live_count - 1], "read after create");
  }
  if (w->live_count == 0) op_create(w, dev);
}

/* Soak mode: CUBE_SOAK_SECONDS=N runs each thread until N seconds have passed
 * (at least STRESS_OPS operations) instead of exactly STRESS_OPS (make soak). */
static double g_soak_seconds;
static double g_soak_start;
static double now_s(void);

static void* worker_main(void* arg) {
  worker_t* w = arg;
  for (uint64_t i = 0;; ++i) {
    if (i >= STRESS_OPS && (g_soak_seconds <= 0 || now_s() - g_soak_start >= g_soak_seconds)) break;
    do_op(w);
    w->ops_done++;
  }
  /* Final check of everything still live, then release it all. */
  for (size_t i = 0; i < w->live_count; ++i) read_check(w, &w->live[i], "final read");
  while (w->live_count) live_release_at(w, w->live_count - 1);
  /* Let the queued work of this thread's streams finish (it holds bindings). */
  for (int d = 0; d < STRESS_DEVICES; ++d) (void)ok(cube_client_sync(g_clients[d]), "final sync");
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void print_usage(const char* when, int dev, const cube_memory_usage_t* u) {
  fprintf(stderr,
          "stress: cpu:%d %s: number_allocs %llu, bytes_in_use %llu, bytes_padding %llu, "
          "bytes_reserved %llu\n",
          dev, when, (unsigned long long)u->number_allocs, (unsigned long long)u->bytes_in_use,
          (unsigned long long)u->bytes_padding, (unsigned long long)u->bytes_reserved);
}

CUBE_TEST(random_operations) {
  REQUIRE(setenv("CUBE_CPU_DEVICES", "2", 1) == 0);
  const char* soak = getenv("CUBE_SOAK_SECONDS");
  g_soak_seconds = soak ? atof(soak) : 0.0;
  g_soak_start = now_s();
  double t0 = now_s();

  for (int d = 0; d < STRESS_DEVICES; ++d)
    REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, (uint32_t)d}, &g_clients[d]));
  REQUIRE((cube_client_features(g_clients[0])->bits & CUBE_FEATURE_NATIVE_KERNELS) != 0);

  static const cube_arg_kind_t fill_kinds[2] = {CUBE_ARG_BUFFER, CUBE_ARG_U32};
  static const cube_arg_kind_t copy_kinds[2] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER};
  static const cube_arg_kind_t add_kinds[3] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER};
  cube_kernel_desc_t kd = {.name = "stress_fill", .cube_dim = {K_DIM, 1, 1}, .arg_kinds = fill_kinds, .arg_count = 2, .shared_memory_size = 0, .cpu_fn = k_fill};
  REQUIRE_OK(cube_kernel_create(&kd, &g_fill));
  kd = (cube_kernel_desc_t){.name = "stress_copy", .cube_dim = {K_DIM, 1, 1}, .arg_kinds = copy_kinds, .arg_count = 2, .cpu_fn = k_copy};
  REQUIRE_OK(cube_kernel_create(&kd, &g_copy));
  kd = (cube_kernel_desc_t){.name = "stress_add", .cube_dim = {K_DIM, 1, 1}, .arg_kinds = add_kinds, .arg_count = 3, .cpu_fn = k_add};
  REQUIRE_OK(cube_kernel_create(&kd, &g_add));

  cube_memory_usage_t start[STRESS_DEVICES];
  for (int d = 0; d < STRESS_DEVICES; ++d) {
    REQUIRE_OK(cube_client_memory_usage_device(g_clients[d], &start[d]));
    print_usage("start", d, &start[d]);
  }

  static worker_t workers[STRESS_THREADS];
  pthread_t threads[STRESS_THREADS];
  for (int i = 0; i < STRESS_THREADS; ++i) {
    memset(&workers[i], 0, sizeof(workers[i]));
    workers[i].index = i;
    workers[i].op_rng = 0x0DE50000ull + (uint64_t)i * 0x9E3779B1ull;
    workers[i].rng = 0x5EED0000ull + (uint64_t)i * 0x1000193ull;
    REQUIRE(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
  }
  uint64_t ops = 0;
  for (int i = 0; i < STRESS_THREADS; ++i) {
    pthread_join(threads[i], NULL);
    ops += workers[i].ops_done;
  }
  double t1 = now_s();

  pool_clear();
  for (int d = 0; d < STRESS_DEVICES; ++d) CHECK_OK(cube_client_sync(g_clients[d]));

  fprintf(stderr,
          "stress: %llu ops in %.2f s: %lu reads compared (%.1f MiB), %lu launches, %lu "
          "cross-thread uses, %lu mismatches, %lu failed calls\n",
          (unsigned long long)ops, t1 - t0, atomic_load(&g_reads),
          atomic_load(&g_bytes_read) / 1048576.0, atomic_load(&g_launches),
          atomic_load(&g_cross), atomic_load(&g_mismatches), atomic_load(&g_errors));
  if (g_soak_seconds <= 0)
    CHECK_EQ_U64(ops, (uint64_t)STRESS_THREADS * STRESS_OPS);
  else
    CHECK(ops >= (uint64_t)STRESS_THREADS * STRESS_OPS);
  CHECK_EQ_U64(atomic_load(&g_mismatches), 0);
  CHECK_EQ_U64(atomic_load(&g_errors), 0);

  for (int d = 0; d < STRESS_DEVICES; ++d) {
    cube_memory_usage_t before, after;
    CHECK_OK(cube_client_memory_usage_device(g_clients[d], &before));
    print_usage("before cleanup", d, &before);
    CHECK_OK(cube_client_memory_cleanup_device(g_clients[d]));
    CHECK_OK(cube_client_memory_usage_device(g_clients[d], &after));
    print_usage("after cleanup", d, &after);
    CHECK_EQ_U64(after.number_allocs, start[d].number_allocs);
    CHECK_EQ_U64(after.bytes_in_use, start[d].bytes_in_use);
    CHECK_EQ_U64(after.bytes_padding, start[d].bytes_padding);
    CHECK_EQ_U64(after.bytes_reserved, start[d].bytes_reserved);
  }

  cube_kernel_release(g_fill);
  cube_kernel_release(g_copy);
  cube_kernel_release(g_add);
  for (int d = 0; d < STRESS_DEVICES; ++d) cube_client_release(g_clients[d]);
  cube_shutdown();
  fprintf(stderr, "stress: total %.2f s\n", now_s() - t0);
}

//===----------------------------------------------------------------------===//
// Pool hits from many threads
//===----------------------------------------------------------------------===//

/* Descriptors, slice records and handle slots are recycled on every pool hit
 * (docs/architecture.md, "The pool-hit path"). Eight threads allocate and
 * release buffers of a few sizes at random (so nearly every allocation is a
 * hit on memory, a descriptor and a handle slot just given back); four use
 * their own streams, four share one stream (its pools and lock under
 * contention). Every live buffer holds a tag unique to it, written through its
 * host pointer (CPU): it must be intact when the buffer is released (two live
 * buffers handed overlapping bytes overwrite each other's tag), a released id
 * must be refused even after its slot was reused, a retained handle keeps its
 * bytes after one release, and a read queued just before the release returns
 * the tag although new buffers of that size are handed out and tagged at once
 * (the queued read's binding must keep the memory from being reused). */
#define REUSE_THREADS 8
#define REUSE_SHARED 4 /* threads on the shared stream */
#define REUSE_OPS 4000
#define REUSE_LIVE 12

static const size_t g_reuse_sizes[] = {1, 40, 1000, 4096, 20000};
#define REUSE_SIZE_COUNT (sizeof(g_reuse_sizes) / sizeof(g_reuse_sizes[0]))

typedef struct reuse_buf {
  cube_handle_t h;
  uint8_t* ptr;
  size_t size;
  uint64_t tag;
} reuse_buf_t;

typedef struct reuse_worker {
  int index;
  cube_client_t* client; /* the shared client, or this thread's pinned clone */
  uint64_t rng;
  uint64_t serial;
  reuse_buf_t live[REUSE_LIVE];
  size_t live_count;
} reuse_worker_t;

static cube_client_t* g_reuse_client;
static cube_stream_id_t g_reuse_stream;
static atomic_ulong g_reuse_hits;

static inline uint8_t tag_byte(uint64_t tag, size_t j) {
  return (uint8_t)((tag >> ((j & 7) * 8)) ^ (j >> 3));
}

static void tag_fill(uint8_t* p, size_t n, uint64_t tag) {
  for (size_t j = 0; j < n; ++j) p[j] = tag_byte(tag, j);
}

/* Index of the first byte that is not |tag|'s, or n. */
static size_t tag_check(const uint8_t* p, size_t n, uint64_t tag) {
  for (size_t j = 0; j < n; ++j)
    if (p[j] != tag_byte(tag, j)) return j;
  return n;
}

static void reuse_mismatch(const char* what, size_t size, size_t at) {
  atomic_fetch_add(&g_mismatches, 1);
  char detail[96];
  snprintf(detail, sizeof(detail), "%zu-byte buffer, first wrong byte at %zu", size, at);
  report("stress: pool reuse: %s: %s\n", what, detail);
}

static bool reuse_alloc(reuse_worker_t* w, size_t size, reuse_buf_t* out) {
  cube_handle_t h;
  if (!ok(cube_client_empty(w->client, size, &h), "pool reuse: empty")) return false;
  cube_resource_t* r = NULL;
  if (!ok(cube_client_get_resource(w->client, h, &r), "pool reuse: get_resource")) {
    cube_handle_release(h);
    return false;
  }
  /* The handle keeps the memory; the resource is not needed beyond this. */
  out->ptr = cube_resource_ptr(r);
  cube_resource_release(r);
  out->h = h;
  out->size = size;
  out->tag = ((uint64_t)(w->index + 1) << 56) ^ (++w->serial * 0x9E3779B97F4A7C15ull);
  tag_fill(out->ptr, size, out->tag);
  atomic_fetch_add(&g_reuse_hits, 1);
  return true;
}

/* Checks |b|'s tag and releases it; its id must be dead afterwards. */
static void reuse_release(reuse_buf_t* b, const char* what) {
  size_t at = tag_check(b->ptr, b->size, b->tag);
  if (at != b->size) reuse_mismatch(what, b->size, at);
  cube_handle_release(b->h);
  cube_status_t s = cube_handle_release_checked(b->h);
  if (cube_status_code(s) != CUBE_STATUS_NOT_FOUND || cube_handle_size(b->h) != 0) {
    atomic_fetch_add(&g_errors, 1);
    report("stress: pool reuse: %s: %s\n", "a released id is still usable",
           s ? cube_status_message(s) : "release_checked succeeded");
  }
  cube_status_free(s);
}

static void reuse_drop_at(reuse_worker_t* w, size_t i, const char* what) {
  reuse_release(&w->live[i], what);
  w->live[i] = w->live[--w->live_count];
}

static void* reuse_main(void* arg) {
  reuse_worker_t* w = arg;
  if (w->index < REUSE_SHARED) {
    if (!ok(cube_client_clone(g_reuse_client, &w->client), "pool reuse: clone")) return NULL;
    cube_client_set_stream(w->client, g_reuse_stream);
  } else {
    w->client = cube_client_retain(g_reuse_client);
  }
  for (int op = 0; op < REUSE_OPS; ++op) {
    uint64_t r = cube_test_rand(&w->rng) % 100;
    size_t size = g_reuse_sizes[cube_test_rand(&w->rng) % REUSE_SIZE_COUNT];
    if (w->live_count == 0 || (r < 45 && w->live_count < REUSE_LIVE)) {
      if (reuse_alloc(w, size, &w->live[w->live_count])) w->live_count++;
    } else if (r < 80) {
      reuse_drop_at(w, (size_t)(cube_test_rand(&w->rng) % w->live_count), "tag changed while live");
    } else if (r < 88) {
      /* A retained handle: one release leaves it live, with its bytes. */
      reuse_buf_t* b = &w->live[cube_test_rand(&w->rng) % w->live_count];
      cube_handle_t again = cube_handle_retain(b->h);
      cube_handle_release(b->h);
      if (again.id != b->h.id || cube_handle_size(b->h) != b->size) {
        atomic_fetch_add(&g_errors, 1);
        report("stress: pool reuse: %s%s\n", "a retained handle died at its first release", "");
      }
    } else if (r < 97) {
      /* Read, release at once, hand out and tag new buffers of that size:
       * the read must still see the old tag. */
      size_t i = (size_t)(cube_test_rand(&w->rng) % w->live_count);
      reuse_buf_t old = w->live[i];
      cube_future_t* f = NULL;
      bool queued = ok(cube_client_read_async(w->client, 1, &old.h, &f), "pool reuse: read_async");
      w->live[i] = w->live[--w->live_count];
      reuse_release(&old, "tag changed while live (before a queued read)");
      reuse_buf_t fresh[2];
      int made = 0;
      for (; made < 2; ++made)
        if (!reuse_alloc(w, old.size, &fresh[made])) break;
      if (queued) {
        cube_bytes_t* got = NULL;
        if (ok(cube_future_wait(f, UINT64_MAX, &got), "pool reuse: read")) {
          size_t at = cube_bytes_size(got) == old.size
                          ? tag_check(cube_bytes_const_data(got), old.size, old.tag)
                          : 0;
          if (at != old.size) reuse_mismatch("a queued read saw the memory reused", old.size, at);
          atomic_fetch_add(&g_reads, 1);
          cube_bytes_release(got);
        }
        cube_future_release(f);
      }
      while (made-- > 0) reuse_release(&fresh[made], "tag changed while live (after a read)");
    } else {
      (void)ok(cube_client_memory_cleanup(w->client), "pool reuse: memory_cleanup");
    }
  }
  while (w->live_count) reuse_drop_at(w, w->live_count - 1, "tag changed while live (final)");
  (void)ok(cube_client_sync(w->client), "pool reuse: final sync");
  cube_client_release(w->client);
  return NULL;
}

CUBE_TEST(pool_reuse_many_threads) {
  double t0 = now_s();
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &g_reuse_client));
  g_reuse_stream = cube_stream_id_new();
  cube_memory_usage_t start;
  REQUIRE_OK(cube_client_memory_usage_device(g_reuse_client, &start));

  static reuse_worker_t workers[REUSE_THREADS];
  pthread_t threads[REUSE_THREADS];
  for (int i = 0; i < REUSE_THREADS; ++i) {
    memset(&workers[i], 0, sizeof(workers[i]));
    workers[i].index = i;
    workers[i].rng = 0x8E05E000ull + (uint64_t)i * 0x9E3779B1ull;
    REQUIRE(pthread_create(&threads[i], NULL, reuse_main, &workers[i]) == 0);
  }
  for (int i = 0; i < REUSE_THREADS; ++i) pthread_join(threads[i], NULL);

  fprintf(stderr, "stress: pool reuse: %lu buffers handed out, %lu queued reads, %lu mismatches, "
                  "%lu failed calls in %.2f s\n",
          atomic_load(&g_reuse_hits), atomic_load(&g_reads), atomic_load(&g_mismatches),
          atomic_load(&g_errors), now_s() - t0);
  CHECK_EQ_U64(atomic_load(&g_mismatches), 0);
  CHECK_EQ_U64(atomic_load(&g_errors), 0);
  CHECK(atomic_load(&g_reuse_hits) >= REUSE_THREADS * REUSE_OPS / 3);

  /* Everything was released: the pools hold nothing (usage counts every stream). */
  cube_memory_usage_t after;
  CHECK_OK(cube_client_memory_cleanup_device(g_reuse_client));
  CHECK_OK(cube_client_memory_usage_device(g_reuse_client, &after));
  CHECK_EQ_U64(after.number_allocs, start.number_allocs);
  CHECK_EQ_U64(after.bytes_in_use, start.bytes_in_use);
  cube_client_release(g_reuse_client);
  cube_shutdown();
}
