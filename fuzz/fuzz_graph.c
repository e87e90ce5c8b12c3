/* fuzz_graph: capture and replay (include/cube/graph.h) on the CPU backend,
 * against a model of what each replay must compute.
 *
 * Two buffers of 256 u32 are cut into views (16, 32 or 64 elements at
 * multiples of 16); a capture records up to 12 nodes: launches of a native
 * kernel dst[i] = dst[i] * 3 + src[i] + k over two views of one length
 * (the same view, or views that do not overlap), writes of a view, copies
 * between two views that do not overlap. Then up to 6 replays, each with
 * substitutes for some slots (a view of the slot's length) and new values
 * for some launches' k; and, between them, eager launches, released view
 * handles, a failed replay or two.
 *
 * Checked: no crash, no sanitizer report, no leak; the capture's checks
 * (slot_of finds each view the capture used, the node and slot counts);
 * after every replay both buffers read exactly what the model computed with
 * the substitutes; a replay that would make a copy's source and
 * destination overlap is refused (INVALID_ARGUMENT) and runs nothing; a
 * released substitute is NOT_FOUND; a scalar for a node that is not a
 * launch, or of another kind, is INVALID_ARGUMENT. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"
#include "fuzz_input.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "fuzz_graph: check failed at line %d: %s\n", __LINE__, #cond); \
      abort();                                                                       \
    }                                                                                \
  } while (0)

#define CHECK_OK(expr)                                                                         \
  do {                                                                                         \
    cube_status_t st_ = (expr);                                                                \
    if (st_) {                                                                                 \
      fprintf(stderr, "fuzz_graph: line %d: %s: %s\n", __LINE__, #expr,                        \
              cube_status_message(st_));                                                       \
      abort();                                                                                 \
    }                                                                                          \
  } while (0)

#define ELEMS 256u
#define MAX_VIEWS 12
#define MAX_NODES 12

static cube_client_t* g_client;
static cube_kernel_t* g_kernel;
/* FUZZ_VERBOSE=1: what the inputs did, at exit. */
static unsigned long g_replays, g_refused, g_nodes, g_graphs;

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
    fprintf(stderr, "fuzz_graph: %lu graphs, %lu nodes, %lu replays run, %lu refused\n",
            g_graphs, g_nodes, g_replays, g_refused);
  cube_kernel_release(g_kernel);
  cube_client_release(g_client);
  g_client = NULL;
  cube_shutdown();
}

static void init_once(void) {
  if (g_client) return;
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.queue_mode = getenv("CUBE_FUZZ_THREADED") ? CUBE_QUEUE_THREADED : CUBE_QUEUE_INLINE;
  CHECK_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &o, &g_client));
  static const cube_arg_kind_t kinds[] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof d);
  d.name = "fuzz_graph_step";
  d.cube_dim = (cube_dim_t){1, 1, 1};
  d.arg_kinds = kinds;
  d.arg_count = 3;
  d.read_only_args = 2; /* src */
  d.cpu_fn = step_kernel;
  CHECK_OK(cube_kernel_create(&d, &g_kernel));
  atexit(at_exit);
}

/* The model ------------------------------------------------------------------ */

typedef struct view {
  uint32_t base, start, len; /* in elements */
  cube_handle_t h;
  bool live;
} view_t;

typedef enum { N_LAUNCH, N_WRITE, N_COPY } node_kind_t;

typedef struct node {
  node_kind_t kind;
  uint32_t a, b; /* views: launch dst, src; write target; copy src, dst */
  uint32_t k;
  uint32_t data[64]; /* a write's data */
} node_t;

static uint32_t model[2][ELEMS];
static view_t views[MAX_VIEWS];
static uint32_t nviews;

static bool overlap(const view_t* x, const view_t* y) {
  return x->base == y->base && x->start < y->start + y->len && y->start < x->start + x->len;
}
static bool same(const view_t* x, const view_t* y) {
  return x->base == y->base && x->start == y->start && x->len == y->len;
}
static uint32_t* at(const view_t* v) { return &model[v->base][v->start]; }

static void model_launch(const view_t* dst, const view_t* src, uint32_t k) {
  uint32_t tmp[64];
  memcpy(tmp, at(src), dst->len * 4); /* src is dst or apart from it */
  uint32_t* d = at(dst);
  for (uint32_t i = 0; i < dst->len; ++i) d[i] = d[i] * 3u + tmp[i] + k;
}

static void check_buffers(const cube_handle_t base[2]) {
  cube_bytes_t* out[2] = {NULL, NULL};
  CHECK_OK(cube_client_read(g_client, 2, base, out));
  for (int b = 0; b < 2; ++b) {
    CHECK(cube_bytes_size(out[b]) == ELEMS * 4);
    if (memcmp(cube_bytes_const_data(out[b]), model[b], ELEMS * 4) != 0) {
      const uint32_t* got = cube_bytes_const_data(out[b]);
      for (uint32_t i = 0; i < ELEMS; ++i)
        if (got[i] != model[b][i]) {
          fprintf(stderr, "fuzz_graph: buffer %d element %u is %u, the model says %u\n", b, i,
                  got[i], model[b][i]);
          break;
        }
      abort();
    }
    cube_bytes_release(out[b]);
  }
}

static cube_status_t launch(const view_t* dst, const view_t* src, uint32_t k) {
  cube_arg_t args[3] = {{.kind = CUBE_ARG_BUFFER, .v.buffer = dst->h},
                        {.kind = CUBE_ARG_BUFFER, .v.buffer = src->h},
                        {.kind = CUBE_ARG_U32, .v.u32 = k}};
  return cube_client_launch(g_client, g_kernel, cube_count_static(1 + k % 3, 1, 1), 3, args);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  init_once();
  fz_t in = fz_make(data, size);
  cube_handle_t base[2];
  for (int b = 0; b < 2; ++b) {
    for (uint32_t i = 0; i < ELEMS; ++i) model[b][i] = (uint32_t)(i * 2654435761u + (uint32_t)b);
    CHECK_OK(cube_client_create_from_slice(g_client, model[b], ELEMS * 4, &base[b]));
  }
  /* Views. */
  nviews = 2 + fz_u8(&in) % (MAX_VIEWS - 1);
  for (uint32_t v = 0; v < nviews; ++v) {
    uint8_t x = fz_u8(&in);
    views[v].base = x & 1;
    views[v].len = 16u << ((x >> 1) % 3);
    views[v].start = ((uint32_t)(x >> 3) * 16u) % (ELEMS - views[v].len + 16) / 16 * 16;
    if (views[v].start + views[v].len > ELEMS) views[v].start = ELEMS - views[v].len;
    CHECK_OK(cube_handle_offset_view(base[views[v].base], (uint64_t)views[v].start * 4,
                                     (uint64_t)(ELEMS - views[v].start - views[v].len) * 4,
                                     &views[v].h));
    views[v].live = true;
  }

  /* The capture: nodes that are valid as eager calls; the model does not
   * run them (a capture runs nothing). */
  node_t nodes[MAX_NODES];
  uint32_t nnodes = 0;
  CHECK_OK(cube_client_capture_begin(g_client));
  uint32_t tries = fz_u8(&in) % (MAX_NODES + 1);
  for (uint32_t t = 0; t < tries; ++t) {
    node_t* n = &nodes[nnodes];
    uint8_t x = fz_u8(&in);
    n->kind = (node_kind_t)(x % 3);
    n->a = fz_u8(&in) % nviews;
    n->b = fz_u8(&in) % nviews;
    n->k = fz_u8(&in);
    const view_t *va = &views[n->a], *vb = &views[n->b];
    if (n->kind == N_WRITE) {
      for (uint32_t i = 0; i < va->len; ++i) n->data[i] = n->k * 7919u + i;
      CHECK_OK(cube_client_write(g_client, va->h, n->data, va->len * 4));
    } else if (va->len != vb->len || (overlap(va, vb) && !(n->kind == N_LAUNCH && same(va, vb)))) {
      continue; /* not a node this harness records */
    } else if (n->kind == N_LAUNCH) {
      CHECK_OK(launch(va, vb, n->k));
    } else {
      CHECK_OK(cube_client_copy(g_client, va->h, vb->h));
    }
    nnodes++;
  }
  cube_graph_t* g = NULL;
  CHECK_OK(cube_client_capture_end(g_client, &g));
  CHECK(cube_graph_node_count(g) == nnodes);
  g_graphs++;
  g_nodes += nnodes;
  /* Every view the capture used has a slot; distinct views, distinct slots. */
  uint32_t slot_of[MAX_VIEWS];
  bool used[MAX_VIEWS] = {false};
  for (uint32_t i = 0; i < nnodes; ++i) {
    used[nodes[i].a] = true;
    if (nodes[i].kind != N_WRITE) used[nodes[i].b] = true;
  }
  size_t distinct = 0;
  for (uint32_t v = 0; v < nviews; ++v) {
    bool first = true;
    for (uint32_t w = 0; w < v; ++w) first &= !(used[w] && same(&views[w], &views[v]));
    if (used[v] && first) ++distinct;
    cube_status_t st = cube_graph_slot_of(g, g_client, views[v].h, &slot_of[v]);
    if (used[v]) {
      CHECK(st == CUBE_OK);
    } else {
      bool alias = false; /* the same view as a used one */
      for (uint32_t w = 0; w < nviews; ++w) alias |= used[w] && same(&views[w], &views[v]);
      CHECK(alias ? st == CUBE_OK : cube_status_code(st) == CUBE_STATUS_NOT_FOUND);
      if (st) slot_of[v] = UINT32_MAX;
      cube_status_free(st);
    }
  }
  CHECK(cube_graph_slot_count(g) == distinct);

  /* Replays. */
  uint32_t replays = fz_u8(&in) % 7;
  for (uint32_t r = 0; r < replays; ++r) {
    /* Substitutes: for a slot, the view it takes this time. */
    uint32_t as[MAX_VIEWS]; /* view index -> the view that stands in for it */
    for (uint32_t v = 0; v < nviews; ++v) as[v] = v;
    cube_graph_binding_t bind[MAX_VIEWS];
    uint32_t nbind = 0;
    bool released_sub = false;
    uint8_t nb = fz_u8(&in) % 4;
    for (uint8_t i = 0; i < nb; ++i) {
      uint32_t v = fz_u8(&in) % nviews, w = fz_u8(&in) % nviews;
      if (!used[v] || views[v].len != views[w].len) continue;
      bool dup = false;
      for (uint32_t j = 0; j < nbind; ++j) dup |= bind[j].slot == slot_of[v];
      if (dup) continue;
      for (uint32_t u = 0; u < nviews; ++u)
        if (used[u] && slot_of[u] == slot_of[v]) as[u] = w;
      bind[nbind++] = (cube_graph_binding_t){slot_of[v], views[w].h};
      released_sub |= !views[w].live;
    }
    /* New k for some launches; sometimes a bad one. */
    cube_graph_scalar_t sc[4];
    uint32_t nsc = 0, ks[MAX_NODES];
    for (uint32_t i = 0; i < nnodes; ++i) ks[i] = nodes[i].k;
    bool bad_scalar = false;
    uint8_t ns = fz_u8(&in) % 3;
    for (uint8_t i = 0; i < ns && nnodes; ++i) {
      uint32_t node = fz_u8(&in) % nnodes;
      bool dup = false;
      for (uint32_t j = 0; j < nsc; ++j) dup |= sc[j].node == node;
      if (dup) continue;
      uint32_t k = fz_u8(&in);
      uint8_t how = fz_u8(&in);
      sc[nsc] = (cube_graph_scalar_t){node, 2, {.kind = CUBE_ARG_U32, .v.u32 = k}};
      if (how == 255) {
        sc[nsc].value.kind = CUBE_ARG_U64;
        bad_scalar = true;
      } else if (nodes[node].kind != N_LAUNCH) {
        bad_scalar = true;
      } else {
        ks[node] = k;
      }
      nsc++;
    }
    /* What the substitutes make of each node. */
    bool copy_overlap = false, racy = false;
    for (uint32_t i = 0; i < nnodes; ++i) {
      if (nodes[i].kind == N_WRITE) continue;
      const view_t *x = &views[as[nodes[i].a]], *y = &views[as[nodes[i].b]];
      if (nodes[i].kind == N_COPY) copy_overlap |= overlap(x, y) && !same(x, y);
      if (nodes[i].kind == N_LAUNCH) racy |= overlap(x, y) && !same(x, y);
    }
    if (racy) continue; /* a kernel over views that partly overlap: no model */
    cube_status_t st = cube_client_replay_with(g_client, g, nbind, bind, nsc, sc);
    if (st) g_refused++;
    if (released_sub && (copy_overlap || bad_scalar)) {
      CHECK(cube_status_code(st) == CUBE_STATUS_NOT_FOUND ||
            cube_status_code(st) == CUBE_STATUS_INVALID_ARGUMENT);
    } else if (released_sub) {
      CHECK(cube_status_code(st) == CUBE_STATUS_NOT_FOUND);
    } else if (copy_overlap || bad_scalar) {
      CHECK(cube_status_code(st) == CUBE_STATUS_INVALID_ARGUMENT);
    } else {
      if (st) fprintf(stderr, "fuzz_graph: replay refused: %s\n", cube_status_message(st));
      CHECK(st == CUBE_OK);
      g_replays++;
      for (uint32_t i = 0; i < nnodes; ++i) {
        const node_t* n = &nodes[i];
        const view_t *x = &views[as[n->a]], *y = &views[as[n->b]];
        if (n->kind == N_WRITE) memcpy(at(x), n->data, x->len * 4);
        if (n->kind == N_LAUNCH) model_launch(x, y, ks[i]);
        if (n->kind == N_COPY && !same(x, y)) memcpy(at(y), at(x), x->len * 4);
      }
    }
    cube_status_free(st);
    /* Between replays: an eager launch, a released view, a check. */
    uint8_t between = fz_u8(&in);
    if ((between & 3) == 1) {
      uint32_t v = fz_u8(&in) % nviews;
      if (views[v].live) {
        CHECK_OK(launch(&views[v], &views[v], between));
        model_launch(&views[v], &views[v], between);
      }
    } else if ((between & 3) == 2) {
      uint32_t v = fz_u8(&in) % nviews;
      if (views[v].live) {
        cube_handle_release(views[v].h);
        views[v].live = false;
      }
    }
    if (between & 4) check_buffers(base);
  }
  check_buffers(base);
  cube_graph_release(g);
  for (uint32_t v = 0; v < nviews; ++v)
    if (views[v].live) cube_handle_release(views[v].h);
  cube_handle_release(base[0]);
  cube_handle_release(base[1]);
  CHECK_OK(cube_client_sync(g_client));
  return 0;
}
