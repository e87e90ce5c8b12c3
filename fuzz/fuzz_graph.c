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
#include "fuzz_views.h"

#define CHECK(cond) FZ_CHECK(cond)
#define CHECK_OK(expr) FZ_CHECK_OK(expr)

#define MAX_VIEWS 12
#define MAX_NODES 12

static cube_client_t* g_client;
static cube_kernel_t* g_kernel;
/* FUZZ_VERBOSE=1: what the inputs did, at exit. */
static unsigned long g_replays, g_refused, g_nodes, g_graphs;

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
  g_client = fz_cpu_client(0, 0);
  g_kernel = fv_kernel_create("fuzz_graph_step");
  atexit(at_exit);
}

/* The recorded nodes ----------------------------------------------------------- */

typedef enum { N_LAUNCH, N_WRITE, N_COPY } node_kind_t;

typedef struct node {
  node_kind_t kind;
  uint32_t a, b; /* views: launch dst, src; write target; copy src, dst */
  uint32_t k;
  uint32_t data[64]; /* a write's data */
} node_t;

static fv_view_t views[MAX_VIEWS];
static uint32_t nviews;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  init_once();
  fz_t in = fz_make(data, size);
  cube_handle_t base[2];
  nviews = 2 + fz_u8(&in) % (MAX_VIEWS - 1);
  fv_setup(g_client, &in, base, views, nviews);

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
    const fv_view_t *va = &views[n->a], *vb = &views[n->b];
    if (n->kind == N_WRITE) {
      for (uint32_t i = 0; i < va->len; ++i) n->data[i] = n->k * 7919u + i;
      CHECK_OK(cube_client_write(g_client, va->h, n->data, va->len * 4));
    } else if (n->kind == N_LAUNCH ? !fv_launchable(va, vb)
                                   : va->len != vb->len || fv_overlap(va, vb)) {
      continue; /* not a node this harness records */
    } else if (n->kind == N_LAUNCH) {
      CHECK_OK(fv_launch(g_client, g_kernel, va, vb, n->k));
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
    for (uint32_t w = 0; w < v; ++w) first &= !(used[w] && fv_same(&views[w], &views[v]));
    if (used[v] && first) ++distinct;
    cube_status_t st = cube_graph_slot_of(g, g_client, views[v].h, &slot_of[v]);
    if (used[v]) {
      CHECK(st == CUBE_OK);
    } else {
      bool alias = false; /* the same view as a used one */
      for (uint32_t w = 0; w < nviews; ++w) alias |= used[w] && fv_same(&views[w], &views[v]);
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
      const fv_view_t *x = &views[as[nodes[i].a]], *y = &views[as[nodes[i].b]];
      if (nodes[i].kind == N_COPY) copy_overlap |= fv_overlap(x, y) && !fv_same(x, y);
      if (nodes[i].kind == N_LAUNCH) racy |= !fv_launchable(x, y);
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
        const fv_view_t *x = &views[as[n->a]], *y = &views[as[n->b]];
        if (n->kind == N_WRITE) memcpy(fv_at(x), n->data, x->len * 4);
        if (n->kind == N_LAUNCH) fv_model_launch(x, y, ks[i]);
        if (n->kind == N_COPY && !fv_same(x, y)) memcpy(fv_at(y), fv_at(x), x->len * 4);
      }
    }
    cube_status_free(st);
    /* Between replays: an eager launch, a released view, a check. */
    uint8_t between = fz_u8(&in);
    if ((between & 3) == 1) {
      uint32_t v = fz_u8(&in) % nviews;
      if (views[v].live) {
        CHECK_OK(fv_launch(g_client, g_kernel, &views[v], &views[v], between));
        fv_model_launch(&views[v], &views[v], between);
      }
    } else if ((between & 3) == 2) {
      uint32_t v = fz_u8(&in) % nviews;
      if (views[v].live) {
        cube_handle_release(views[v].h);
        views[v].live = false;
      }
    }
    if (between & 4) fv_check(g_client, base, "fuzz_graph");
  }
  fv_check(g_client, base, "fuzz_graph");
  cube_graph_release(g);
  fv_teardown(g_client, base, views, nviews);
  return 0;
}
