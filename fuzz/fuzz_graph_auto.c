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
#include "fuzz_views.h"

#define CHECK(cond) FZ_CHECK(cond)
#define CHECK_OK(expr) FZ_CHECK_OK(expr)

#define MAX_VIEWS 10
#define MAX_STEP 5
#define MAX_ROUNDS 14

static cube_client_t* g_clients[3]; /* by warm-up - 1 */
static cube_kernel_t* g_kernel;
static unsigned long g_rounds, g_replayed, g_fallbacks;

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
  g_kernel = fv_kernel_create("fuzz_auto_step");
  atexit(at_exit);
}

typedef struct launch {
  uint32_t dst, src, k;
} launch_t;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  init_once();
  fz_t in = fz_make(data, size);
  cube_client_t* c = g_clients[fz_u8(&in) % 3];
  if (!c) c = g_clients[0];
  cube_handle_t base[2];
  fv_view_t views[MAX_VIEWS];
  const uint32_t nviews = 2 + fz_u8(&in) % (MAX_VIEWS - 1);
  fv_setup(c, &in, base, views, nviews);
  /* The step. */
  launch_t step[MAX_STEP];
  uint32_t nstep = 0;
  const uint32_t want = 1 + fz_u8(&in) % MAX_STEP;
  for (uint32_t t = 0; t < want * 2 && nstep < want; ++t) {
    launch_t l = {fz_u8(&in) % nviews, fz_u8(&in) % nviews, fz_u8(&in)};
    if (!fv_launchable(&views[l.dst], &views[l.src])) continue;
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
      if (!fv_launchable(&views[as[run[i].dst]], &views[as[run[i].src]])) {
        for (uint32_t v = 0; v < nviews; ++v) as[v] = v;
        break;
      }
    }
    for (uint32_t i = 0; i < nrun; ++i) {
      const fv_view_t *d = &views[as[run[i].dst]], *s = &views[as[run[i].src]];
      CHECK_OK(fv_launch(c, g_kernel, d, s, run[i].k));
      fv_model_launch(d, s, run[i].k);
    }
    g_rounds++;
    /* A boundary. */
    uint8_t b = fz_u8(&in);
    switch (b % 5) {
      case 0:
        fv_check(c, base, "fuzz_graph_auto");
        break;
      case 1: {
        const fv_view_t* v = &views[fz_u8(&in) % nviews];
        uint32_t w[64];
        for (uint32_t e = 0; e < v->len; ++e) w[e] = b * 40503u + e;
        CHECK_OK(cube_client_write(c, v->h, w, v->len * 4));
        memcpy(fv_at(v), w, v->len * 4);
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
  fv_check(c, base, "fuzz_graph_auto");
  fv_teardown(c, base, views, nviews);
  return 0;
}
