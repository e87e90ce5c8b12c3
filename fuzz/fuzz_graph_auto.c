/* fuzz_graph_auto: automatic capture (CUBE_GRAPHS=auto, include/cube/graph.h)
 * on the CPU backend, against the eager results it must give.
 *
 * A step of 1 to 5 launches (dst[i] = dst[i] * 3 + src[i] + k over views of
 * two buffers of 256 u32, a launch's two views the same or apart) runs up
 * to 14 times, each time as it was, on other views of the same lengths in
 * the same pattern, with one k changed, one launch fewer, or one view
 * swapped for one that overlaps another (the pattern broken); between two
 * runs a boundary: a read of both buffers (checked), a write of a view, a
 * sync, a flush or a memory usage call. The warm-up (1 to 3 steps) and the
 * queue (inline, or threaded with CUBE_FUZZ_THREADED=1) come from the input.
 *
 * Checked: no crash, no sanitizer report, no leak; every read returns what
 * the same calls made eagerly give (the model); the counts of
 * cube_client_graph_auto_stats never go down. FUZZ_VERBOSE=1 prints what the
 * inputs did at exit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"
#include "fuzz_input.h"

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "fuzz_graph_auto: check failed at line %d: %s\n", __LINE__, #cond); \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

#define CHECK_OK(expr)                                                                         \
  do {                                                                                         \
    cube_status_t st_ = (expr);                                                                \
    if (st_) {                                                                                 \
      fprintf(stderr, "fuzz_graph_auto: line %d: %s: %s\n", __LINE__, #expr,                   \
              cube_status_message(st_));                                                       \
      abort();                                                                                 \
    }                                                                                          \
  } while (0)

#define ELEMS 256u
#define MAX_VIEWS 10
#define MAX_STEP 5
#define MAX_ROUNDS 14

static cube_client_t* g_clients[3]; /* by warm-up - 1 */
static cube_kernel_t* g_kernel;
static unsigned long g_rounds, g_replayed, g_fallbacks;

static int step_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 3) return 2;
  uint32_t* dst = args[0].buffer.data;
  const uint32_t* src = args[1].buffer.data;
  uint64_t len = args[0].buffer.len / 4;
  uint64_t cubes = (uint64_t)cube->cube_count[0];
  uint64_t lo = cube->cube_pos[0] * len / cubes, hi = (cube->cube_pos[0] + 1) * len / cubes;
  for (uint64_t i = lo; i < hi; ++i) dst[i] = dst[i] * 3u + src[i] + args[2].u32;
  return 0;
}

static void at_exit(void) {
  if (getenv("FUZZ_VERBOSE"))
    fprintf(stderr, "fuzz_graph_auto: %lu steps run, %lu replayed, %lu fallbacks\n", g_rounds,
            g_replayed, g_fallbacks);
  cube_kernel_release(g_kernel);
  for (int i = 0; i < 3; ++i) cube_client_release(g_clients[i]);
  cube_shutdown();
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  setenv("CUBE_CPU_DEVICES", "3", 0);
  return 0;
}

static void init_once(void) {
  if (g_kernel) return;
  for (int i = 0; i < 3; ++i) {
    cube_server_options_t o;
    cube_server_options_initialize(&o);
    o.queue_mode = getenv("CUBE_FUZZ_THREADED") ? CUBE_QUEUE_THREADED : CUBE_QUEUE_INLINE;
    o.graphs = CUBE_GRAPHS_AUTO;
    o.graphs_warmup = (uint32_t)i + 1;
    /* A device per warm-up (CUBE_CPU_DEVICES=3, LLVMFuzzerInitialize). */
    cube_status_t st = cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, (uint32_t)i}, &o,
                                        &g_clients[i]);
    if (st) {
      cube_status_free(st);
      g_clients[i] = NULL;
    }
  }
  CHECK(g_clients[0] != NULL);
  static const cube_arg_kind_t kinds[] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof d);
  d.name = "fuzz_auto_step";
  d.cube_dim = (cube_dim_t){1, 1, 1};
  d.arg_kinds = kinds;
  d.arg_count = 3;
  d.read_only_args = 2;
  d.cpu_fn = step_kernel;
  CHECK_OK(cube_kernel_create(&d, &g_kernel));
  atexit(at_exit);
}

typedef struct view {
  uint32_t base, start, len;
  cube_handle_t h;
} view_t;

static uint32_t model[2][ELEMS];

static bool overlap(const view_t* x, const view_t* y) {
  return x->base == y->base && x->start < y->start + y->len && y->start < x->start + x->len;
}
static bool same(const view_t* x, const view_t* y) {
  return x->base == y->base && x->start == y->start && x->len == y->len;
}

typedef struct launch {
  uint32_t dst, src, k;
} launch_t;

static void check_buffers(cube_client_t* c, const cube_handle_t base[2]) {
  cube_bytes_t* out[2] = {NULL, NULL};
  CHECK_OK(cube_client_read(c, 2, base, out));
  for (int b = 0; b < 2; ++b) {
    const uint32_t* got = cube_bytes_const_data(out[b]);
    for (uint32_t i = 0; i < ELEMS; ++i)
      if (got[i] != model[b][i]) {
        fprintf(stderr, "fuzz_graph_auto: buffer %d element %u is %u, eagerly %u\n", b, i,
                got[i], model[b][i]);
        abort();
      }
    cube_bytes_release(out[b]);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  init_once();
  fz_t in = fz_make(data, size);
  cube_client_t* c = g_clients[fz_u8(&in) % 3];
  if (!c) c = g_clients[0];
  cube_handle_t base[2];
  for (int b = 0; b < 2; ++b) {
    for (uint32_t i = 0; i < ELEMS; ++i) model[b][i] = (uint32_t)(i * 2246822519u + (uint32_t)b);
    CHECK_OK(cube_client_create_from_slice(c, model[b], ELEMS * 4, &base[b]));
  }
  view_t views[MAX_VIEWS];
  const uint32_t nviews = 2 + fz_u8(&in) % (MAX_VIEWS - 1);
  for (uint32_t v = 0; v < nviews; ++v) {
    uint8_t x = fz_u8(&in);
    views[v].base = x & 1;
    views[v].len = 16u << ((x >> 1) % 3);
    views[v].start = ((uint32_t)(x >> 3) * 16u) % (ELEMS - views[v].len + 16);
    if (views[v].start + views[v].len > ELEMS) views[v].start = ELEMS - views[v].len;
    CHECK_OK(cube_handle_offset_view(base[views[v].base], (uint64_t)views[v].start * 4,
                                     (uint64_t)(ELEMS - views[v].start - views[v].len) * 4,
                                     &views[v].h));
  }
  /* The step. */
  launch_t step[MAX_STEP];
  uint32_t nstep = 0;
  const uint32_t want = 1 + fz_u8(&in) % MAX_STEP;
  for (uint32_t t = 0; t < want * 2 && nstep < want; ++t) {
    launch_t l = {fz_u8(&in) % nviews, fz_u8(&in) % nviews, fz_u8(&in)};
    const view_t *d = &views[l.dst], *s = &views[l.src];
    if (d->len != s->len || (overlap(d, s) && !same(d, s))) continue;
    step[nstep++] = l;
  }
  cube_graph_auto_stats_t last;
  memset(&last, 0, sizeof last);
  last.struct_size = sizeof last;
  CHECK_OK(cube_client_graph_auto_stats(c, &last));
  const uint32_t rounds = nstep ? fz_u8(&in) % (MAX_ROUNDS + 1) : 0;
  for (uint32_t r = 0; r < rounds; ++r) {
    /* This round's views: as they were, or another of each length. */
    uint32_t as[MAX_VIEWS];
    for (uint32_t v = 0; v < nviews; ++v) as[v] = v;
    launch_t run[MAX_STEP];
    memcpy(run, step, sizeof run);
    uint32_t nrun = nstep;
    uint8_t how = fz_u8(&in);
    switch (how % 8) {
      case 0: case 1: case 2: case 3:
        break; /* as it was */
      case 4: case 5: { /* the same pattern on other views */
        for (uint32_t v = 0; v < nviews; ++v) {
          uint32_t w = fz_u8(&in) % nviews;
          if (views[w].len == views[v].len) as[v] = w;
        }
        break;
      }
      case 6: /* one k changed, or one launch fewer */
        if (how & 8)
          run[fz_u8(&in) % nrun].k ^= 1u + fz_u8(&in);
        else if (nrun > 1)
          nrun--;
        break;
      default: /* one view swapped for any of its length */
        as[fz_u8(&in) % nviews] = fz_u8(&in) % nviews;
        for (uint32_t v = 0; v < nviews; ++v)
          if (views[as[v]].len != views[v].len) as[v] = v;
        break;
    }
    /* Launches whose views now partly overlap have no eager model: the
     * round runs as it was instead. */
    for (uint32_t i = 0; i < nrun; ++i) {
      const view_t *d = &views[as[run[i].dst]], *s = &views[as[run[i].src]];
      if (overlap(d, s) && !same(d, s)) {
        for (uint32_t v = 0; v < nviews; ++v) as[v] = v;
        break;
      }
    }
    for (uint32_t i = 0; i < nrun; ++i) {
      const view_t *d = &views[as[run[i].dst]], *s = &views[as[run[i].src]];
      cube_arg_t args[3] = {{.kind = CUBE_ARG_BUFFER, .v.buffer = d->h},
                            {.kind = CUBE_ARG_BUFFER, .v.buffer = s->h},
                            {.kind = CUBE_ARG_U32, .v.u32 = run[i].k}};
      CHECK_OK(cube_client_launch(c, g_kernel, cube_count_static(1 + run[i].k % 3, 1, 1), 3, args));
      uint32_t tmp[64];
      memcpy(tmp, &model[s->base][s->start], d->len * 4);
      uint32_t* dst = &model[d->base][d->start];
      for (uint32_t e = 0; e < d->len; ++e) dst[e] = dst[e] * 3u + tmp[e] + run[i].k;
    }
    g_rounds++;
    /* A boundary. */
    uint8_t b = fz_u8(&in);
    switch (b % 5) {
      case 0:
        check_buffers(c, base);
        break;
      case 1: {
        const view_t* v = &views[fz_u8(&in) % nviews];
        uint32_t w[64];
        for (uint32_t e = 0; e < v->len; ++e) w[e] = b * 40503u + e;
        CHECK_OK(cube_client_write(c, v->h, w, v->len * 4));
        memcpy(&model[v->base][v->start], w, v->len * 4);
        break;
      }
      case 2:
        CHECK_OK(cube_client_sync(c));
        break;
      case 3:
        CHECK_OK(cube_client_flush(c));
        break;
      default: {
        cube_memory_usage_t u;
        CHECK_OK(cube_client_memory_usage(c, &u));
        break;
      }
    }
    cube_graph_auto_stats_t now;
    memset(&now, 0, sizeof now);
    now.struct_size = sizeof now;
    CHECK_OK(cube_client_graph_auto_stats(c, &now));
    CHECK(now.graphs >= last.graphs && now.steps_replayed >= last.steps_replayed &&
          now.launches_replayed >= last.launches_replayed && now.fallbacks >= last.fallbacks &&
          now.interruptions >= last.interruptions);
    g_replayed += now.steps_replayed - last.steps_replayed;
    g_fallbacks += now.fallbacks - last.fallbacks;
    last = now;
  }
  check_buffers(c, base);
  for (uint32_t v = 0; v < nviews; ++v) cube_handle_release(views[v].h);
  cube_handle_release(base[0]);
  cube_handle_release(base[1]);
  CHECK_OK(cube_client_sync(c));
  return 0;
}
