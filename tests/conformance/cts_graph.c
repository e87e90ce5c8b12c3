/* Conformance: graphs (cube/graph.h): capture, replay, rebinding, what a
 * capture refuses, lifetimes, several threads, collectives in a capture. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

enum { GN = 1031 }; /* elements: not a multiple of the cube dim */

static cube_kernel_t* graph_add_kernel(void) {
  static const cube_arg_kind_t kinds[4] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
                                           CUBE_ARG_U32};
  cube_kernel_t* k = NULL;
  if (cube_status_consume(
          cts_kernel_create("add", cts_k_add_u32, ((cube_dim_t){64, 1, 1}), 0, 4, kinds, &k)))
    return NULL;
  return k;
}

static cube_count_t graph_count(void) { return cube_count_static((GN + 63) / 64, 1, 1); }

/* Captures x = in + 3, y = x + 4 on |c|'s stream. */
static cube_status_t graph_capture_chain(cube_client_t* c, cube_kernel_t* add, cube_handle_t in,
                                         cube_handle_t x, cube_handle_t y, cube_graph_t** out) {
  cube_arg_t a1[4] = {cube_arg_buffer(in), cube_arg_buffer(x), cube_arg_u32(3), cube_arg_u32(GN)};
  cube_arg_t a2[4] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_u32(4), cube_arg_u32(GN)};
  cube_status_t st = cube_client_capture_begin(c);
  if (!st) st = cube_client_launch(c, add, graph_count(), 4, a1);
  if (!st) st = cube_client_launch(c, add, graph_count(), 4, a2);
  if (st) {
    cube_graph_t* g = NULL;
    cube_status_free(cube_client_capture_end(c, &g));
    cube_graph_release(g);
    return st;
  }
  return cube_client_capture_end(c, out);
}

static void graph_plus(const uint32_t* in, uint32_t add, uint32_t* out) {
  for (int i = 0; i < GN; ++i) out[i] = in[i] + add;
}

/* The chain most cases use: random input |in| (its contents in |data|),
 * poisoned x and y, and the graph x = in + 3, y = x + 4 captured on them. */
typedef struct graph_chain {
  cube_kernel_t* add;
  cube_handle_t in, x, y;
  cube_graph_t* g;
  uint32_t data[GN];
  uint32_t poison[GN];
} graph_chain_t;

static cube_status_t graph_chain_setup(cube_client_t* c, uint64_t seed, graph_chain_t* f) {
  memset(f, 0, sizeof(*f));
  f->add = graph_add_kernel();
  if (!f->add) return cube_status_make(CUBE_STATUS_INTERNAL, "graph_chain_setup: no kernel");
  cube_test_fill_random(f->data, sizeof(f->data), seed);
  memset(f->poison, CTS_POISON, sizeof(f->poison));
  cube_status_t st = cube_client_create_from_slice(c, f->data, sizeof(f->data), &f->in);
  if (!st) st = cts_poisoned(c, sizeof(f->data), &f->x);
  if (!st) st = cts_poisoned(c, sizeof(f->data), &f->y);
  if (!st) st = graph_capture_chain(c, f->add, f->in, f->x, f->y, &f->g);
  return st;
}

static void graph_chain_teardown(graph_chain_t* f) {
  cube_graph_release(f->g);
  cube_handle_release(f->in);
  cube_handle_release(f->x);
  cube_handle_release(f->y);
  cube_kernel_release(f->add);
}

/* Captured launches do not run at capture; each replay runs them on the
 * buffers' contents of that moment, as eager launches would. */
CUBE_TEST(graph_replay_matches_eager) {
  CTS_CLIENT(c);
  graph_chain_t f;
  REQUIRE_OK(graph_chain_setup(c, 8100, &f));
  CHECK_EQ_U64(cube_graph_node_count(f.g), 2);
  CHECK_EQ_U64(cube_graph_slot_count(f.g), 3);
  /* Nothing ran at capture. */
  CHECK(cts_read_equals(c, f.y, f.poison, sizeof(f.poison)));
  uint32_t in[GN], want[GN];
  for (int round = 0; round < 3; ++round) {
    cube_test_fill_random(in, sizeof(in), 8110 + (uint64_t)round);
    CHECK_OK(cube_client_write(c, f.in, in, sizeof(in)));
    CHECK_OK(cube_client_write(c, f.y, f.poison, sizeof(f.poison)));
    CHECK_OK(cube_client_replay(c, f.g, 0, NULL));
    graph_plus(in, 3, want);
    CHECK(cts_read_equals(c, f.x, want, sizeof(want)));
    graph_plus(in, 7, want);
    CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  }
  CHECK_OK(cube_client_sync(c));
  graph_chain_teardown(&f);
  CTS_END(c);
}

/* A write captured in the graph is replayed with the captured bytes. */
CUBE_TEST(graph_captured_write) {
  CTS_CLIENT(c);
  cube_kernel_t* add = graph_add_kernel();
  REQUIRE(add);
  uint32_t data[GN], other[GN], want[GN];
  cube_test_fill_random(data, sizeof(data), 8200);
  cube_test_fill_random(other, sizeof(other), 8201);
  cube_handle_t hin, hx;
  REQUIRE_OK(cts_poisoned(c, sizeof(data), &hin));
  REQUIRE_OK(cts_poisoned(c, sizeof(data), &hx));
  cube_arg_t a[4] = {cube_arg_buffer(hin), cube_arg_buffer(hx), cube_arg_u32(9), cube_arg_u32(GN)};
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cube_client_write(c, hin, data, sizeof(data)));
  memset(data + 1, 0, sizeof(uint32_t)); /* the graph copied it */
  CHECK_OK(cube_client_launch(c, add, graph_count(), 4, a));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  cube_test_fill_random(data, sizeof(data), 8200); /* as captured */
  CHECK_OK(cube_client_write(c, hin, other, sizeof(other)));
  CHECK(cts_read_equals(c, hin, other, sizeof(other)));
  CHECK_OK(cube_client_replay(c, g, 0, NULL));
  CHECK(cts_read_equals(c, hin, data, sizeof(data)));
  graph_plus(data, 9, want);
  CHECK(cts_read_equals(c, hx, want, sizeof(want)));
  cube_graph_release(g);
  cube_handle_release(hin);
  cube_handle_release(hx);
  cube_kernel_release(add);
  CTS_END(c);
}

/* Substitutes for the input and the output: the replay reads and writes
 * them, and the captured buffers keep what they had. */
CUBE_TEST(graph_rebinding) {
  CTS_CLIENT(c);
  graph_chain_t f;
  REQUIRE_OK(graph_chain_setup(c, 8300, &f));
  uint32_t in2[GN], want[GN];
  cube_test_fill_random(in2, sizeof(in2), 8301);
  cube_handle_t hin2, hy2;
  REQUIRE_OK(cube_client_create_from_slice(c, in2, sizeof(in2), &hin2));
  REQUIRE_OK(cts_poisoned(c, sizeof(in2), &hy2));
  uint32_t s_in = 99, s_x = 99, s_y = 99;
  CHECK_OK(cube_graph_slot_of(f.g, c, f.in, &s_in));
  CHECK_OK(cube_graph_slot_of(f.g, c, f.x, &s_x));
  CHECK_OK(cube_graph_slot_of(f.g, c, f.y, &s_y));
  CHECK(s_in == 0 && s_x == 1 && s_y == 2); /* order of first use */
  CHECK_STATUS(cube_graph_slot_of(f.g, c, hin2, &s_in), CUBE_STATUS_NOT_FOUND,
               "cube_graph_slot_of", "3 slots");
  cube_graph_binding_t b[2] = {{0, hin2}, {2, hy2}};
  CHECK_OK(cube_client_replay(c, f.g, 2, b));
  graph_plus(in2, 7, want);
  CHECK(cts_read_equals(c, hy2, want, sizeof(want)));
  CHECK(cts_read_equals(c, f.y, f.poison, sizeof(f.poison)));
  graph_plus(in2, 3, want);
  CHECK(cts_read_equals(c, f.x, want, sizeof(want)));
  /* And as captured again. */
  CHECK_OK(cube_client_replay(c, f.g, 0, NULL));
  graph_plus(f.data, 7, want);
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  cube_handle_release(hin2);
  cube_handle_release(hy2);
  graph_chain_teardown(&f);
  CTS_END(c);
}

/* Substitutes that are refused: released, of another size, a slot out of
 * range or named twice, NULL bindings; nothing runs. */
CUBE_TEST(graph_bad_substitutes) {
  CTS_CLIENT(c);
  graph_chain_t f;
  REQUIRE_OK(graph_chain_setup(c, 8400, &f));
  cube_handle_t gone, small;
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &gone));
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data) - 4, &small));
  cube_handle_release(gone);
  cube_graph_binding_t b1[1] = {{2, gone}};
  CHECK_STATUS(cube_client_replay(c, f.g, 1, b1), CUBE_STATUS_NOT_FOUND, "cube_client_replay",
               "bindings[0].with");
  cube_graph_binding_t b2[1] = {{2, small}};
  CHECK_STATUS(cube_client_replay(c, f.g, 1, b2), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_replay", "views 4120 bytes; slot 2 views 4124");
  cube_graph_binding_t b3[1] = {{3, f.y}};
  CHECK_STATUS(cube_client_replay(c, f.g, 1, b3), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_replay", "slot 3", "3 slots");
  cube_graph_binding_t b4[2] = {{2, f.y}, {2, f.x}};
  CHECK_STATUS(cube_client_replay(c, f.g, 2, b4), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_replay", "second time");
  CHECK_STATUS(cube_client_replay(c, f.g, 1, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_replay", "bindings is NULL");
  CHECK_STATUS(cube_client_replay(c, NULL, 0, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_replay", "graph is NULL");
  CHECK(cts_read_equals(c, f.y, f.poison, sizeof(f.poison))); /* nothing ran */
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(small);
  graph_chain_teardown(&f);
  CTS_END(c);
}

/* What a capture refuses names the call; a refused call leaves the capture
 * going, and the stream works as before once it ends. No launch here: it
 * runs on every backend. */
CUBE_TEST(graph_capture_refusals) {
  CTS_CLIENT(c);
  uint8_t a[64], b[64];
  cube_test_fill_random(a, sizeof(a), 8500);
  cube_test_fill_random(b, sizeof(b), 8501);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, a, sizeof(a), &h));
  cube_graph_t* g = NULL;
  CHECK_STATUS(cube_client_capture_end(c, &g), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_capture_end", "not capturing");
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_STATUS(cube_client_capture_begin(c), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_capture_begin", "capturing a graph already");
  cube_bytes_t* out = NULL;
  CHECK_STATUS(cube_client_read_one(c, h, &out), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_read_one", "capturing a graph", "a read");
  uint8_t into[64];
  CHECK_STATUS(cube_client_read_into(c, h, into, sizeof(into)), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_read_into", "a read");
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_FAILED_PRECONDITION, "cube_client_sync",
               "a sync");
  CHECK_STATUS(cube_client_flush(c), CUBE_STATUS_FAILED_PRECONDITION, "cube_client_flush",
               "a flush");
  cube_future_t* f = NULL;
  CHECK_STATUS(cube_client_sync_async(c, &f), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_sync_async", "a sync");
  cube_handle_t e = CUBE_HANDLE_NULL;
  CHECK_STATUS(cube_client_empty(c, 100, &e), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_empty", "allocation from the stream's pools");
  CHECK_STATUS(cube_client_create_from_slice(c, a, sizeof(a), &e),
               CUBE_STATUS_FAILED_PRECONDITION, "cube_client_create_from_slice", "allocation");
  CHECK_STATUS(cube_client_memory_cleanup(c), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_memory_cleanup", "cleanup");
  /* Collectives are recorded (graph_collectives_*); the set-up of a
   * communicator is not. */
  cube_device_id_t devs[1] = {cts_device(0)};
  CHECK_STATUS(cube_client_ensure_init_collective(c, 1, devs), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_ensure_init_collective", "capturing a graph",
               "the set-up of a communicator");
  /* to_client allocates on the destination (and reads without a transport). */
  cube_handle_t moved = CUBE_HANDLE_NULL;
  CHECK_STATUS(cube_client_to_client(c, h, c, &moved), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_to_client", "capturing a graph");
  /* A write is captured, not run. */
  CHECK_OK(cube_client_write(c, h, b, sizeof(b)));
  CHECK_STATUS(cube_client_replay(c, g, 0, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_replay", "graph is NULL");
  REQUIRE_OK(cube_client_capture_end(c, &g));
  CHECK_EQ_U64(cube_graph_node_count(g), 1);
  CHECK(cts_read_equals(c, h, a, sizeof(a))); /* the captured write did not run */
  CHECK_OK(cube_client_replay(c, g, 0, NULL));
  CHECK(cts_read_equals(c, h, b, sizeof(b)));
  /* Replays do not nest in a capture. */
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_STATUS(cube_client_replay(c, g, 0, NULL), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_replay", "graphs do not nest");
  cube_graph_t* empty = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &empty));
  CHECK_EQ_U64(cube_graph_node_count(empty), 0);
  CHECK_OK(cube_client_replay(c, empty, 0, NULL));
  CHECK_OK(cube_client_sync(c));
  cube_graph_release(empty);
  cube_graph_release(g);
  cube_handle_release(h);
  CTS_END(c);
}

/* The graph keeps its buffers: the input's handle is released before the
 * replays, the output's after them, and everything is let go with the graph
 * (LSan in the sanitizer builds). */
CUBE_TEST(graph_outlives_handles) {
  CTS_CLIENT(c);
  graph_chain_t f;
  REQUIRE_OK(graph_chain_setup(c, 8600, &f));
  cube_handle_release(f.in);
  cube_handle_release(f.x);
  f.in = f.x = CUBE_HANDLE_NULL;
  /* Allocations of the same size must not take the graph's buffers. */
  cube_handle_t other;
  REQUIRE_OK(cube_client_empty(c, sizeof(f.data), &other));
  uint32_t junk[GN], want[GN];
  memset(junk, 0x11, sizeof(junk));
  CHECK_OK(cube_client_write(c, other, junk, sizeof(junk)));
  CHECK_OK(cube_client_replay(c, f.g, 0, NULL));
  graph_plus(f.data, 7, want);
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  cube_handle_release(f.y);
  f.y = CUBE_HANDLE_NULL;
  CHECK_OK(cube_client_replay(c, f.g, 0, NULL)); /* on memory only the graph holds */
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(other);
  graph_chain_teardown(&f);
  CTS_END(c);
}

typedef struct graph_thread {
  cube_device_id_t device;
  cube_graph_t* graph;
  uint64_t seed;
  int failures;
} graph_thread_t;

static void* graph_thread_main(void* p) {
  graph_thread_t* t = p;
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(t->device, &c))) {
    t->failures++;
    return NULL;
  }
  uint32_t in[GN], want[GN];
  cube_handle_t hin = CUBE_HANDLE_NULL, hx = CUBE_HANDLE_NULL, hy = CUBE_HANDLE_NULL;
  if (cube_status_consume(cube_client_empty(c, sizeof(in), &hin)) ||
      cube_status_consume(cube_client_empty(c, sizeof(in), &hx)) ||
      cube_status_consume(cube_client_empty(c, sizeof(in), &hy)))
    t->failures++;
  for (int i = 0; i < 20 && !t->failures; ++i) {
    cube_test_fill_random(in, sizeof(in), t->seed * 100 + (uint64_t)i);
    cube_graph_binding_t b[3] = {{0, hin}, {1, hx}, {2, hy}};
    if (cube_status_consume(cube_client_write(c, hin, in, sizeof(in))) ||
        cube_status_consume(cube_client_replay(c, t->graph, 3, b)))
      t->failures++;
    graph_plus(in, 7, want);
    if (!cts_read_equals(c, hy, want, sizeof(want))) t->failures++;
  }
  cube_handle_release(hin);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_client_release(c);
  return NULL;
}

/* One graph, replayed from four threads at once, each on its own stream with
 * its own buffers bound. */
CUBE_TEST(graph_replay_several_threads) {
  CTS_CLIENT(c);
  graph_chain_t f;
  REQUIRE_OK(graph_chain_setup(c, 8700, &f));
  enum { T = 4 };
  pthread_t th[T];
  graph_thread_t w[T];
  for (int i = 0; i < T; ++i) {
    w[i] = (graph_thread_t){cts_device(0), f.g, 8710 + (uint64_t)i, 0};
    REQUIRE(pthread_create(&th[i], NULL, graph_thread_main, &w[i]) == 0);
  }
  for (int i = 0; i < T; ++i) {
    pthread_join(th[i], NULL);
    CHECK_EQ_U64(w[i].failures, 0);
  }
  graph_chain_teardown(&f);
  CTS_END(c);
}

/* Scalar substitutes: a replay runs with the new values, the next one as
 * captured again; substitutes of buffers and scalars together; every bad
 * scalar is refused and nothing runs. */
CUBE_TEST(graph_scalar_rebinding) {
  CTS_CLIENT(c);
  graph_chain_t f;
  REQUIRE_OK(graph_chain_setup(c, 8700, &f));
  uint32_t want[GN], in2[GN];
  /* Node 0 is x = in + 3, node 1 is y = x + 4; argument 2 is the addend. */
  cube_graph_scalar_t s1[1] = {{0, 2, cube_arg_u32(10)}};
  CHECK_OK(cube_client_replay_with(c, f.g, 0, NULL, 1, s1));
  graph_plus(f.data, 10, want);
  CHECK(cts_read_equals(c, f.x, want, sizeof(want)));
  graph_plus(f.data, 14, want);
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  /* As captured: the substitute was for that replay only. */
  CHECK_OK(cube_client_replay(c, f.g, 0, NULL));
  graph_plus(f.data, 7, want);
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  /* Both nodes' scalars and a new input in one replay, 8 times with new
   * values each time. */
  cube_handle_t hin2;
  cube_test_fill_random(in2, sizeof(in2), 8701);
  REQUIRE_OK(cube_client_create_from_slice(c, in2, sizeof(in2), &hin2));
  for (uint32_t round = 0; round < 8; ++round) {
    uint32_t a = 1000u * round + 17u, b = 77u * round + 5u;
    cube_graph_scalar_t s2[2] = {{1, 2, cube_arg_u32(b)}, {0, 2, cube_arg_u32(a)}};
    cube_graph_binding_t bind[1] = {{0, round % 2 ? f.in : hin2}};
    CHECK_OK(cube_client_replay_with(c, f.g, 1, bind, 2, s2));
    graph_plus(round % 2 ? f.data : in2, a + b, want);
    CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  }
  /* What is refused; y keeps the last result. */
  cube_graph_scalar_t bad[2];
  bad[0] = (cube_graph_scalar_t){2, 2, cube_arg_u32(1)};
  CHECK_STATUS(cube_client_replay_with(c, f.g, 0, NULL, 1, bad), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_replay", "scalars[0]", "node 2", "2 nodes");
  bad[0] = (cube_graph_scalar_t){0, 0, cube_arg_u32(1)};
  CHECK_STATUS(cube_client_replay_with(c, f.g, 0, NULL, 1, bad), CUBE_STATUS_INVALID_ARGUMENT,
               "argument 0 is a buffer");
  bad[0] = (cube_graph_scalar_t){0, 4, cube_arg_u32(1)};
  CHECK_STATUS(cube_client_replay_with(c, f.g, 0, NULL, 1, bad), CUBE_STATUS_INVALID_ARGUMENT,
               "has 4 arguments, not an argument 4");
  bad[0] = (cube_graph_scalar_t){1, 3, cube_arg_i32(1)};
  CHECK_STATUS(cube_client_replay_with(c, f.g, 0, NULL, 1, bad), CUBE_STATUS_INVALID_ARGUMENT,
               "scalars[0]", "argument 3 is u32", "the value is i32");
  bad[0] = (cube_graph_scalar_t){1, 2, cube_arg_u32(1)};
  bad[1] = (cube_graph_scalar_t){1, 2, cube_arg_u32(2)};
  CHECK_STATUS(cube_client_replay_with(c, f.g, 0, NULL, 2, bad), CUBE_STATUS_INVALID_ARGUMENT,
               "node 1, argument 2 twice");
  CHECK_STATUS(cube_client_replay_with(c, f.g, 0, NULL, 1, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "scalars is NULL");
  graph_plus(in2, 7000u + 17u + 77u * 7u + 5u, want);
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  cube_handle_release(hin2);
  graph_chain_teardown(&f);
  CTS_END(c);
}

/* A write node has no scalars. */
CUBE_TEST(graph_scalar_of_a_write_refused) {
  CTS_CLIENT(c);
  uint32_t data[64];
  cube_test_fill_random(data, sizeof(data), 8750);
  cube_handle_t h;
  REQUIRE_OK(cts_poisoned(c, sizeof(data), &h));
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cube_client_write(c, h, data, sizeof(data)));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  cube_graph_scalar_t s[1] = {{0, 0, cube_arg_u32(1)}};
  CHECK_STATUS(cube_client_replay_with(c, g, 0, NULL, 1, s), CUBE_STATUS_INVALID_ARGUMENT,
               "node 0 is a write");
  uint8_t poison[sizeof(data)];
  memset(poison, CTS_POISON, sizeof(poison));
  CHECK(cts_read_equals(c, h, poison, sizeof(poison)));
  cube_graph_release(g);
  cube_handle_release(h);
  CTS_END(c);
}

/* Counters of the mock CUDA driver's graph calls, when it is the driver. */
typedef struct graph_mock_stats {
  uint64_t instantiates, launches, kernel_updates, copy_updates, live;
} graph_mock_stats_t;

#include <dlfcn.h>
static bool graph_mock_stats(graph_mock_stats_t* out) {
  memset(out, 0, sizeof(*out));
#ifdef CUBE_MOCK_CUDA_PATH
  void* h = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  void (*fn)(graph_mock_stats_t*) =
      (void (*)(graph_mock_stats_t*))(uintptr_t)dlsym(h, "cube_mock_cuda_graph_stats");
  if (fn) fn(out);
  dlclose(h);
  return fn != NULL;
#else
  return false;
#endif
}

/* Whether this backend replays graphs natively (the graph slots of its
 * table): CUDA (a CUDA graph) and the CPU (the nodes resolved once). */
static bool graph_native_backend(void) {
  return cts_backend()->backend == CUBE_BACKEND_CUDA ||
         cts_backend()->backend == CUBE_BACKEND_CPU;
}

/* Nodes that fail in a replay: each failure is deferred to the stream on its
 * own, naming the graph and the node, and every other node runs, as their
 * eager launches would. The failing kernel is the native cts_k_fail in
 * Checked mode where the backend runs native kernels (then the CPU's graph
 * is native), else its dialect twin in Validate mode (node by node). */
static void graph_failures_round(cube_client_t* c, bool native_expected) {
  static const cube_arg_kind_t kinds[5] = {CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32,
                                           CUBE_ARG_U32, CUBE_ARG_I32};
  cube_kernel_t* fail = NULL;
  REQUIRE_OK(cts_kernel_create("graph_fail", cts_k_fail, ((cube_dim_t){1, 1, 1}), 0, 5, kinds,
                               &fail));
  cube_kernel_t* add = graph_add_kernel();
  REQUIRE(add);
  uint32_t in[GN], want[GN];
  cube_handle_t hin, hx, hy, hz, hb, hb3;
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hin));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hx));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hy));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hz));
  /* A buffer for each failing node: a failed node leaves its buffer without
   * valid contents, and a node using such a buffer is not run. */
  REQUIRE_OK(cts_poisoned(c, 64, &hb));
  REQUIRE_OK(cts_poisoned(c, 64, &hb3));
  uint8_t poison[64];
  memset(poison, CTS_POISON, sizeof(poison));
  cube_arg_t a0[4] = {cube_arg_buffer(hin), cube_arg_buffer(hx), cube_arg_u32(3),
                      cube_arg_u32(GN)};
  cube_arg_t a2[4] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_u32(4), cube_arg_u32(GN)};
  cube_arg_t a4[4] = {cube_arg_buffer(hy), cube_arg_buffer(hz), cube_arg_u32(5), cube_arg_u32(GN)};
  /* Node 1 fails at cube (1, 0, 0) with code 7, node 3 at (0, 1, 0) with 9. */
  cube_arg_t f1[5] = {cube_arg_buffer(hb), cube_arg_u32(1), cube_arg_u32(0), cube_arg_u32(0),
                      cube_arg_i32(7)};
  cube_arg_t f3[5] = {cube_arg_buffer(hb3), cube_arg_u32(0), cube_arg_u32(1), cube_arg_u32(0),
                      cube_arg_i32(9)};
  bool native_kernel = cts_native_kernels();
  cube_count_t fc = cube_count_static(2, 2, 1);
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cube_client_launch(c, add, graph_count(), 4, a0));
  CHECK_OK(native_kernel ? cube_client_launch(c, fail, fc, 5, f1) : cts_launch_fail(c, fail, fc, 5, f1));
  CHECK_OK(cube_client_launch(c, add, graph_count(), 4, a2));
  CHECK_OK(native_kernel ? cube_client_launch(c, fail, fc, 5, f3) : cts_launch_fail(c, fail, fc, 5, f3));
  CHECK_OK(cube_client_launch(c, add, graph_count(), 4, a4));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  CHECK_EQ_U64(cube_graph_node_count(g), 5);
  for (int round = 0; round < 3; ++round) {
    cube_test_fill_random(in, sizeof(in), 8900 + (uint64_t)round);
    CHECK_OK(cube_client_write(c, hin, in, sizeof(in)));
    CHECK_OK(cube_client_replay(c, g, 0, NULL));
    cube_status_t st = cube_client_flush(c);
    CHECK(cube_status_code(st) == CUBE_STATUS_LAUNCH_FAILED);
    CHECK_EQ_U64(cube_status_count(st), 2);
    const char* m = cube_status_message(st);
    CHECK(cts_contains(m, "replay of a graph of 5 nodes: node 1", "node 3", "graph_fail",
                       (const char*)NULL));
    if (native_kernel) CHECK(cts_contains(m, "cube (1, 0, 0)", "error 7", "cube (0, 1, 0)",
                                          "error 9", (const char*)NULL));
    cube_status_free(st);
    graph_plus(in, 3, want);
    CHECK(cts_read_equals(c, hx, want, sizeof(want)));
    graph_plus(in, 7, want);
    CHECK(cts_read_equals(c, hy, want, sizeof(want)));
    graph_plus(in, 12, want);
    CHECK(cts_read_equals(c, hz, want, sizeof(want)));
    /* The failed nodes' buffers name their own failures; written whole,
     * they are valid for the next round. */
    CHECK(cts_read_lost(c, hb, "launch of kernel 'graph_fail' (node 1 of a graph)",
                        native_kernel ? "error 7" : "", (const char*)NULL));
    CHECK(cts_read_lost(c, hb3, "launch of kernel 'graph_fail' (node 3 of a graph)",
                        native_kernel ? "error 9" : "", (const char*)NULL));
    CHECK_OK(cube_client_write(c, hb, poison, sizeof(poison)));
    CHECK_OK(cube_client_write(c, hb3, poison, sizeof(poison)));
  }
  CHECK(cube_graph_is_native(g) == (native_expected && native_kernel));
  CHECK_OK(cube_client_sync(c));
  cube_graph_release(g);
  cube_handle_t hs[] = {hin, hx, hy, hz, hb, hb3};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); ++i) cube_handle_release(hs[i]);
  cube_kernel_release(add);
  cube_kernel_release(fail);
}

CUBE_TEST(graph_node_failures_deferred) {
  CTS_CLIENT(c);
  graph_failures_round(c, graph_native_backend());
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 0));
  graph_failures_round(c, false);
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 1));
  CTS_END(c);
}

/* A graph of writes (a 1-D buffer and a pitched 2-D tensor), replayed as
 * captured and with substitutes, back and forth: the same contents on every
 * backend, natively where the backend has graphs (CUDA: instantiated once,
 * rebinding updates its copy nodes; the CPU: resolved once, rebinding
 * resolves the nodes it changes) and node by node elsewhere, or when
 * CUBE_GRAPHS_NATIVE is 0. */
static void graph_writes_round(cube_client_t* c, bool native_expected) {
  const uint64_t shape[2] = {7, 45};
  float a[333], t0[7 * 45], other[333];
  cube_test_fill_random(a, sizeof(a), 8800);
  cube_test_fill_random(t0, sizeof(t0), 8801);
  cube_test_fill_random(other, sizeof(other), 8802);
  cube_handle_t h, h2;
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &h));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &h2));
  cube_tensor_t t, t2;
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, other, sizeof(t0), 2, shape, 4, &t));
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, other, sizeof(t0), 2, shape, 4, &t2));
  graph_mock_stats_t m0, m1;
  bool mock = graph_mock_stats(&m0);
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cube_client_write(c, h, a, sizeof(a)));
  CHECK_OK(cube_client_write_tensor(c, &t, t0, sizeof(t0)));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  CHECK_EQ_U64(cube_graph_node_count(g), 2);
  CHECK(!cube_graph_is_native(g));
  uint32_t sh = 9, st = 9;
  CHECK_OK(cube_graph_slot_of(g, c, h, &sh));
  CHECK_OK(cube_graph_slot_of(g, c, t.handle, &st));
  for (int round = 0; round < 6; ++round) {
    /* New contents everywhere, then a replay that overwrites some. */
    CHECK_OK(cube_client_write(c, h, other, sizeof(other)));
    CHECK_OK(cube_client_write(c, h2, other, sizeof(other)));
    CHECK_OK(cube_client_write_tensor(c, &t, other, sizeof(t0)));
    CHECK_OK(cube_client_write_tensor(c, &t2, other, sizeof(t0)));
    bool sub = round % 3 == 1, sub_t = round % 3 == 2;
    cube_graph_binding_t b[2];
    size_t nb = 0;
    if (sub) b[nb++] = (cube_graph_binding_t){sh, h2};
    if (sub_t) b[nb++] = (cube_graph_binding_t){st, t2.handle};
    CHECK_OK(cube_client_replay(c, g, nb, b));
    CHECK(cts_read_equals(c, sub ? h2 : h, a, sizeof(a)));
    CHECK(cts_read_equals(c, sub ? h : h2, other, sizeof(other)));
    cube_bytes_t* r1 = NULL;
    cube_bytes_t* r2 = NULL;
    CHECK_OK(cube_client_read_tensor(c, 1, sub_t ? &t2 : &t, &r1));
    CHECK_OK(cube_client_read_tensor(c, 1, sub_t ? &t : &t2, &r2));
    CHECK(r1 && cube_bytes_size(r1) == sizeof(t0) &&
          memcmp(cube_bytes_const_data(r1), t0, sizeof(t0)) == 0);
    CHECK(r2 && cube_bytes_size(r2) == sizeof(t0) &&
          memcmp(cube_bytes_const_data(r2), other, sizeof(t0)) == 0);
    cube_bytes_release(r1);
    cube_bytes_release(r2);
  }
  CHECK(cube_graph_is_native(g) == native_expected);
  if (mock && graph_mock_stats(&m1)) {
    /* Rebinding the 1-D write updated its copy node; the pitched one (the
     * driver updates 1-D copies only) was instantiated again each time its
     * destination changed: rounds 2, 3 and 5, after the first build. */
    CHECK_EQ_U64(m1.instantiates - m0.instantiates, native_expected ? 4 : 0);
    CHECK_EQ_U64(m1.launches - m0.launches, native_expected ? 6 : 0);
    if (native_expected) CHECK(m1.copy_updates - m0.copy_updates >= 2);
  }
  cube_graph_release(g);
  if (mock && graph_mock_stats(&m1)) CHECK_EQ_U64(m1.live, m0.live);
  cube_handle_release(h);
  cube_handle_release(h2);
  cube_handle_release(t.handle);
  cube_handle_release(t2.handle);
}

CUBE_TEST(graph_native_writes_rebinding) {
  CTS_CLIENT(c);
  bool native = graph_native_backend();
  graph_writes_round(c, native);
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 0));
  graph_writes_round(c, false);
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 1));
  CTS_END(c);
}

/* A graph of a write and two copies: node 0 writes W, node 1 copies W into
 * B, node 2 copies A into C, where A and C are views of one buffer (slots W,
 * B, A, C in that order). Replayed as captured and with substitutes for the
 * sources and the destinations, against the host each time: natively where
 * the driver has graphs (CUDA: device-to-device memcpy nodes, instantiated
 * once and updated in place), node by node elsewhere or when
 * CUBE_GRAPHS_NATIVE is 0. A substitute that makes a copy's source its
 * destination makes that copy do nothing (and that replay runs node by
 * node); one that makes them overlap is refused. */
enum { GCN = 1031 * 4 + 1 };

typedef struct graph_copy_buffers {
  cube_handle_t w, b, a, cc; /* as captured; a and cc are views of p */
  cube_handle_t p;
  cube_handle_t w2, b2, a2, c2; /* substitutes */
} graph_copy_buffers_t;

/* Every buffer back to known contents: w* = |w_old|, b* poisoned, a = |a1|,
 * a2 = |a2|, c* = |c_old|. */
static void graph_copy_reset(cube_client_t* c, const graph_copy_buffers_t* h, const uint8_t* w_old,
                             const uint8_t* a1, const uint8_t* a2, const uint8_t* c_old,
                             const uint8_t* poison) {
  CHECK_OK(cube_client_write(c, h->w, w_old, GCN));
  CHECK_OK(cube_client_write(c, h->w2, w_old, GCN));
  CHECK_OK(cube_client_write(c, h->b, poison, GCN));
  CHECK_OK(cube_client_write(c, h->b2, poison, GCN));
  CHECK_OK(cube_client_write(c, h->a, a1, GCN));
  CHECK_OK(cube_client_write(c, h->a2, a2, GCN));
  CHECK_OK(cube_client_write(c, h->cc, c_old, GCN));
  CHECK_OK(cube_client_write(c, h->c2, c_old, GCN));
}

static void graph_copy_round(cube_client_t* c, bool native_expected) {
  uint8_t* buf = malloc(9 * GCN);
  REQUIRE(buf);
  uint8_t *data = buf, *w_old = buf + GCN, *a1 = buf + 2 * GCN, *a2 = buf + 3 * GCN,
          *c_old = buf + 4 * GCN, *poison = buf + 5 * GCN, *whole = buf + 6 * GCN;
  cube_test_fill_random(data, GCN, 8900);
  cube_test_fill_random(w_old, GCN, 8901);
  cube_test_fill_random(a1, GCN, 8902);
  cube_test_fill_random(a2, GCN, 8903);
  cube_test_fill_random(c_old, GCN, 8904);
  memset(poison, CTS_POISON, GCN);
  /* p: a at [0, GCN), 5 bytes apart from cc at [GCN + 5, 2 GCN + 5). */
  cube_test_fill_random(whole, 2 * GCN + 5, 8905);
  graph_copy_buffers_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, whole, 2 * GCN + 5, &h.p));
  REQUIRE_OK(cube_handle_offset_view(h.p, 0, GCN + 5, &h.a));
  REQUIRE_OK(cube_handle_offset_view(h.p, GCN + 5, 0, &h.cc));
  REQUIRE_OK(cts_poisoned(c, GCN, &h.w));
  REQUIRE_OK(cts_poisoned(c, GCN, &h.b));
  REQUIRE_OK(cts_poisoned(c, GCN, &h.w2));
  REQUIRE_OK(cts_poisoned(c, GCN, &h.b2));
  REQUIRE_OK(cts_poisoned(c, GCN, &h.a2));
  REQUIRE_OK(cts_poisoned(c, GCN, &h.c2));
  graph_mock_stats_t m0, m1;
  bool mock = graph_mock_stats(&m0);
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cube_client_write(c, h.w, data, GCN));
  CHECK_OK(cube_client_copy(c, h.w, h.b));
  CHECK_OK(cube_client_copy(c, h.a, h.cc));
  CHECK_OK(cube_client_copy(c, h.a, h.a)); /* does nothing: not recorded */
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  CHECK_EQ_U64(cube_graph_node_count(g), 3);
  CHECK_EQ_U64(cube_graph_slot_count(g), 4);
  uint32_t sw = 9, sb = 9, sa = 9, sc = 9;
  CHECK_OK(cube_graph_slot_of(g, c, h.w, &sw));
  CHECK_OK(cube_graph_slot_of(g, c, h.b, &sb));
  CHECK_OK(cube_graph_slot_of(g, c, h.a, &sa));
  CHECK_OK(cube_graph_slot_of(g, c, h.cc, &sc));
  CHECK(sw == 0 && sb == 1 && sa == 2 && sc == 3); /* a copy's source first */
  /* Nothing ran at capture. */
  CHECK(cts_read_equals(c, h.b, poison, GCN));
  CHECK(cts_read_equals(c, h.p, whole, 2 * GCN + 5));
  for (int round = 0; round < 8; ++round) {
    graph_copy_reset(c, &h, w_old, a1, a2, c_old, poison);
    bool sub_src = round % 4 == 1 || round % 4 == 3, sub_dst = round % 4 >= 2;
    cube_graph_binding_t bind[4];
    size_t nb = 0;
    if (sub_src) {
      bind[nb++] = (cube_graph_binding_t){sw, h.w2};
      bind[nb++] = (cube_graph_binding_t){sa, h.a2};
    }
    if (sub_dst) {
      bind[nb++] = (cube_graph_binding_t){sb, h.b2};
      bind[nb++] = (cube_graph_binding_t){sc, h.c2};
    }
    CHECK_OK(cube_client_replay(c, g, nb, bind));
    /* The write and the copy of what it wrote, into whichever was bound. */
    CHECK(cts_read_equals(c, sub_src ? h.w2 : h.w, data, GCN));
    CHECK(cts_read_equals(c, sub_src ? h.w : h.w2, w_old, GCN));
    CHECK(cts_read_equals(c, sub_dst ? h.b2 : h.b, data, GCN));
    CHECK(cts_read_equals(c, sub_dst ? h.b : h.b2, poison, GCN));
    /* The copy of a view into another view of its buffer, or substitutes. */
    CHECK(cts_read_equals(c, sub_dst ? h.c2 : h.cc, sub_src ? a2 : a1, GCN));
    CHECK(cts_read_equals(c, sub_dst ? h.cc : h.c2, c_old, GCN));
    CHECK(cts_read_equals(c, h.a, a1, GCN));
    CHECK(cts_read_equals(c, h.a2, a2, GCN));
  }
  CHECK(cube_graph_is_native(g) == native_expected);
  /* The copy's destination bound to its source: that copy does nothing, the
   * rest of the graph runs. */
  graph_copy_reset(c, &h, w_old, a1, a2, c_old, poison);
  cube_graph_binding_t same[1] = {{sc, h.a}};
  CHECK_OK(cube_client_replay(c, g, 1, same));
  CHECK(cts_read_equals(c, h.b, data, GCN));
  CHECK(cts_read_equals(c, h.a, a1, GCN));
  CHECK(cts_read_equals(c, h.cc, c_old, GCN));
  /* Overlapping source and destination through substitutes: refused,
   * nothing runs. */
  cube_handle_t x, x0, xh;
  REQUIRE_OK(cts_poisoned(c, GCN + 2000, &x));
  REQUIRE_OK(cube_handle_offset_view(x, 0, 2000, &x0));
  REQUIRE_OK(cube_handle_offset_view(x, 2000, 0, &xh));
  graph_copy_reset(c, &h, w_old, a1, a2, c_old, poison);
  cube_graph_binding_t overlap[2] = {{sa, x0}, {sc, xh}};
  CHECK_STATUS(cube_client_replay(c, g, 2, overlap), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_replay", "node 2", "slot 2 to slot 3", "overlap");
  cube_graph_binding_t overlap1[1] = {{sc, xh}};
  CHECK_OK(cube_client_replay(c, g, 1, overlap1)); /* a into xh: no overlap */
  CHECK(cts_read_equals(c, xh, a1, GCN));
  cube_graph_binding_t overlap2[1] = {{sa, x0}};
  CHECK_OK(cube_client_replay(c, g, 1, overlap2)); /* x0 into cc */
  graph_copy_reset(c, &h, w_old, a1, a2, c_old, poison);
  CHECK_STATUS(cube_client_replay(c, g, 2, overlap), CUBE_STATUS_INVALID_ARGUMENT, "overlap");
  CHECK(cts_read_equals(c, h.b, poison, GCN));
  CHECK(cts_read_equals(c, h.w, w_old, GCN));
  /* A copy node has no scalars. */
  cube_graph_scalar_t s[1] = {{1, 0, cube_arg_u32(1)}};
  CHECK_STATUS(cube_client_replay_with(c, g, 0, NULL, 1, s), CUBE_STATUS_INVALID_ARGUMENT,
               "node 1 is a copy");
  CHECK_OK(cube_client_sync(c));
  if (mock && graph_mock_stats(&m1)) {
    /* Built once at the first replay; every later rebinding updated nodes
     * in place (1-D copies). The replays natively: 8 rounds and the two
     * accepted overlap checks; the one whose copy did nothing ran node by
     * node. */
    CHECK_EQ_U64(m1.instantiates - m0.instantiates, native_expected ? 1 : 0);
    CHECK_EQ_U64(m1.launches - m0.launches, native_expected ? 10 : 0);
    if (native_expected) CHECK(m1.copy_updates - m0.copy_updates >= 6);
  }
  cube_graph_release(g);
  if (mock && graph_mock_stats(&m1)) CHECK_EQ_U64(m1.live, m0.live);
  cube_handle_t hs[] = {h.w, h.b, h.a, h.cc, h.p, h.w2, h.b2, h.a2, h.c2, x, x0, xh};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); ++i) cube_handle_release(hs[i]);
  free(buf);
}

CUBE_TEST(graph_copy_replay_and_substitutes) {
  CTS_CLIENT(c);
  bool native = graph_native_backend();
  graph_copy_round(c, native);
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 0));
  graph_copy_round(c, false);
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 1));
  CTS_END(c);
}

/* Copies between launches in one graph: x = in + 3, y = copy of x,
 * z = y + 4; substitutes for the copy's destination (which the last launch
 * reads) and for the first launch's input. */
CUBE_TEST(graph_copy_between_launches) {
  CTS_CLIENT(c);
  cube_kernel_t* add = graph_add_kernel();
  REQUIRE(add);
  uint32_t in[GN], in2[GN], want[GN], poison[GN];
  cube_test_fill_random(in, sizeof(in), 8950);
  cube_test_fill_random(in2, sizeof(in2), 8951);
  memset(poison, CTS_POISON, sizeof(poison));
  cube_handle_t hin, hx, hy, hz, hin2, hy2;
  REQUIRE_OK(cube_client_create_from_slice(c, in, sizeof(in), &hin));
  REQUIRE_OK(cube_client_create_from_slice(c, in2, sizeof(in2), &hin2));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hx));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hy));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hz));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hy2));
  cube_arg_t a1[4] = {cube_arg_buffer(hin), cube_arg_buffer(hx), cube_arg_u32(3), cube_arg_u32(GN)};
  cube_arg_t a2[4] = {cube_arg_buffer(hy), cube_arg_buffer(hz), cube_arg_u32(4), cube_arg_u32(GN)};
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cube_client_launch(c, add, graph_count(), 4, a1));
  CHECK_OK(cube_client_copy(c, hx, hy));
  CHECK_OK(cube_client_launch(c, add, graph_count(), 4, a2));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  CHECK_EQ_U64(cube_graph_node_count(g), 3);
  CHECK_EQ_U64(cube_graph_slot_count(g), 4);
  CHECK(cts_read_equals(c, hy, poison, sizeof(poison)));
  for (int round = 0; round < 4; ++round) {
    bool sub_in = round % 2 == 1, sub_y = round >= 2;
    cube_graph_binding_t b[2];
    size_t nb = 0;
    if (sub_in) b[nb++] = (cube_graph_binding_t){0, hin2};
    if (sub_y) b[nb++] = (cube_graph_binding_t){2, hy2};
    CHECK_OK(cube_client_write(c, hy, poison, sizeof(poison)));
    CHECK_OK(cube_client_write(c, hy2, poison, sizeof(poison)));
    CHECK_OK(cube_client_replay(c, g, nb, b));
    const uint32_t* src = sub_in ? in2 : in;
    graph_plus(src, 3, want);
    CHECK(cts_read_equals(c, hx, want, sizeof(want)));
    CHECK(cts_read_equals(c, sub_y ? hy2 : hy, want, sizeof(want)));
    CHECK(cts_read_equals(c, sub_y ? hy : hy2, poison, sizeof(poison)));
    graph_plus(src, 7, want);
    CHECK(cts_read_equals(c, hz, want, sizeof(want)));
  }
  CHECK_OK(cube_client_sync(c));
  cube_graph_release(g);
  cube_handle_t hs[6] = {hin, hx, hy, hz, hin2, hy2};
  for (int i = 0; i < 6; ++i) cube_handle_release(hs[i]);
  cube_kernel_release(add);
  CTS_END(c);
}
/* Collectives in a capture ------------------------------------------------ */

/* Each participant is a thread with a client of its own device: it captures
 * its own graph and replays it, as every participant of an eager collective
 * calls it. At most GC_MAX participants (CPU: CUBE_CPU_DEVICES=3). */
enum { GC_MAX = 3, GC_ROUNDS = 6 };

typedef struct gc_part {
  uint32_t rank, n;
  cube_device_id_t devs[GC_MAX];
  pthread_barrier_t* barrier;
  cube_kernel_t* add; /* graph_collectives_between_launches */
  int failures;
} gc_part_t;

/* In a participant's thread (the harness's CHECKs count without a lock). */
#define GC_OK(p, expr)                                                                   \
  do {                                                                                   \
    cube_status_t gc_s_ = (expr);                                                        \
    if (gc_s_) {                                                                         \
      fprintf(stderr, "%s:%d: participant %u: %s failed: %s\n", __FILE__, __LINE__,      \
              (p)->rank, #expr, cube_status_message(gc_s_));                             \
      cube_status_free(gc_s_);                                                           \
      (p)->failures++;                                                                   \
    }                                                                                    \
  } while (0)
#define GC_CHECK(p, cond)                                                                \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "%s:%d: participant %u: CHECK failed: %s\n", __FILE__, __LINE__,   \
              (p)->rank, #cond);                                                         \
      (p)->failures++;                                                                   \
    }                                                                                    \
  } while (0)

/* The random data participant |rank| writes in round |round|. */
static void gc_data(uint32_t* out, uint32_t round, uint32_t rank) {
  cube_test_fill_random(out, GN * sizeof(uint32_t), 9100 + 16 * (uint64_t)round + rank);
}

/* The sum over every participant's data of |round| (u32 wraps, as the
 * reduction does). */
static void gc_sum(uint32_t* out, uint32_t round, uint32_t n) {
  uint32_t d[GN];
  memset(out, 0, GN * sizeof(uint32_t));
  for (uint32_t j = 0; j < n; ++j) {
    gc_data(d, round, j);
    for (int i = 0; i < GN; ++i) out[i] += d[i];
  }
}

/* Runs |fn| on n participants and adds their failures to the case's. */
static void gc_run(uint32_t n, void* (*fn)(void*), cube_kernel_t* add) {
  pthread_t th[GC_MAX];
  gc_part_t p[GC_MAX];
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, n);
  for (uint32_t i = 0; i < n; ++i) {
    memset(&p[i], 0, sizeof(p[i]));
    p[i].rank = i;
    p[i].n = n;
    p[i].barrier = &barrier;
    p[i].add = add;
    for (uint32_t j = 0; j < n; ++j) p[i].devs[j] = cts_device(n - 1 - j); /* any order */
    if (pthread_create(&th[i], NULL, fn, &p[i]) != 0) {
      fprintf(stderr, "gc_run: no thread\n");
      exit(1);
    }
  }
  for (uint32_t i = 0; i < n; ++i) {
    pthread_join(th[i], NULL);
    cube_test_failures += p[i].failures;
  }
  pthread_barrier_destroy(&barrier);
}

/* The participants of this backend (2 or 3) into |n|; skips without two
 * devices or without collectives. */
#define GC_PARTICIPANTS(n)                                                     \
  setenv("CUBE_CPU_DEVICES", "3", 1);                                          \
  CTS_REQUIRE_DEVICES(2);                                                      \
  CTS_CLIENT(c);                                                               \
  if (!(cube_client_features(c)->bits & CUBE_FEATURE_COLLECTIVES)) {           \
    CTS_END(c);                                                                \
    CUBE_SKIP("no collectives");                                               \
  }                                                                            \
  size_t gc_have_ = cube_test_device_count(cts_backend()->backend);            \
  uint32_t n = gc_have_ < GC_MAX ? (uint32_t)gc_have_ : GC_MAX

static void* gc_all_reduce_main(void* arg) {
  gc_part_t* p = arg;
  cube_client_t* c = NULL;
  GC_OK(p, cube_client_load(cts_device(p->rank), &c));
  if (!c) return NULL;
  uint32_t data[GN], before[GN], poison[GN], want[GN];
  uint8_t mark[64], zeros[64];
  memset(poison, CTS_POISON, sizeof(poison));
  memset(zeros, 0, sizeof(zeros));
  cube_test_fill_random(before, sizeof(before), 9000 + p->rank);
  cube_test_fill_random(mark, sizeof(mark), 9010 + p->rank);
  cube_handle_t src = CUBE_HANDLE_NULL, dst = CUBE_HANDLE_NULL, mk = CUBE_HANDLE_NULL;
  GC_OK(p, cube_client_create_from_slice(c, before, sizeof(before), &src));
  GC_OK(p, cube_client_create_from_slice(c, before, sizeof(before), &dst));
  GC_OK(p, cube_client_create_from_slice(c, zeros, sizeof(zeros), &mk));
  /* dst is poisoned first: a replay that ran the all_reduce before the write
   * would leave the poison. The mark is written after the sync. */
  cube_graph_t* g = NULL;
  GC_OK(p, cube_client_capture_begin(c));
  GC_OK(p, cube_client_write(c, dst, poison, sizeof(poison)));
  GC_OK(p, cube_client_all_reduce(c, src, dst, CUBE_DTYPE_U32, p->n, p->devs, CUBE_REDUCE_SUM));
  GC_OK(p, cube_client_sync_collective(c));
  GC_OK(p, cube_client_write(c, mk, mark, sizeof(mark)));
  GC_OK(p, cube_client_capture_end(c, &g));
  GC_CHECK(p, cube_graph_node_count(g) == 4);
  GC_CHECK(p, cube_graph_slot_count(g) == 3);
  uint32_t s_dst = 9, s_src = 9, s_mk = 9;
  GC_OK(p, cube_graph_slot_of(g, c, dst, &s_dst));
  GC_OK(p, cube_graph_slot_of(g, c, src, &s_src));
  GC_OK(p, cube_graph_slot_of(g, c, mk, &s_mk));
  GC_CHECK(p, s_dst == 0 && s_src == 1 && s_mk == 2); /* order of first use */
  /* Nothing ran at capture, on any participant. */
  pthread_barrier_wait(p->barrier);
  GC_CHECK(p, cts_read_equals(c, dst, before, sizeof(before)));
  cube_collective_record_t r = {0};
  cube_status_t none = cube_client_last_collective(c, &r);
  GC_CHECK(p, cube_status_code(none) == CUBE_STATUS_NOT_FOUND);
  cube_status_free(none);
  pthread_barrier_wait(p->barrier);
  for (uint32_t round = 0; round < GC_ROUNDS && g; ++round) {
    gc_data(data, round, p->rank);
    GC_OK(p, cube_client_write(c, src, data, sizeof(data)));
    GC_OK(p, cube_client_write(c, mk, zeros, sizeof(zeros)));
    GC_OK(p, cube_client_replay(c, g, 0, NULL));
    gc_sum(want, round, p->n);
    GC_CHECK(p, cts_read_equals(c, dst, want, sizeof(want)));
    GC_CHECK(p, cts_read_equals(c, mk, mark, sizeof(mark)));
    GC_CHECK(p, cts_read_equals(c, src, data, sizeof(data)));
  }
  GC_CHECK(p, !cube_graph_is_native(g));
  memset(&r, 0, sizeof(r));
  GC_OK(p, cube_client_last_collective(c, &r));
  GC_CHECK(p, r.kind == CUBE_COLLECTIVE_ALL_REDUCE && r.participants == p->n &&
                  r.sequence == GC_ROUNDS - 1 && r.bytes == sizeof(data));
  GC_OK(p, cube_client_sync(c));
  cube_graph_release(g);
  cube_handle_release(src);
  cube_handle_release(dst);
  cube_handle_release(mk);
  cube_client_release(c);
  return NULL;
}

/* An all_reduce captured between writes, with the sync_collective that
 * orders the write after it, on every participant; replayed with new data
 * written between replays, against the host's sum. The graph runs node by
 * node on every backend (a native graph cannot hold the collective). */
CUBE_TEST(graph_collectives_all_reduce_replays) {
  GC_PARTICIPANTS(n);
  graph_mock_stats_t m0, m1;
  bool mock = graph_mock_stats(&m0);
  gc_run(n, gc_all_reduce_main, NULL);
  if (mock && graph_mock_stats(&m1)) {
    CHECK_EQ_U64(m1.instantiates - m0.instantiates, 0);
    CHECK_EQ_U64(m1.live, m0.live);
  }
  CTS_END(c);
}

static void* gc_rebinding_main(void* arg) {
  gc_part_t* p = arg;
  cube_client_t* c = NULL;
  GC_OK(p, cube_client_load(cts_device(p->rank), &c));
  if (!c) return NULL;
  uint32_t data[GN], other[GN], poison[GN], want[GN];
  memset(poison, CTS_POISON, sizeof(poison));
  cube_handle_t src = CUBE_HANDLE_NULL, dst = CUBE_HANDLE_NULL, src2 = CUBE_HANDLE_NULL,
                dst2 = CUBE_HANDLE_NULL, x = CUBE_HANDLE_NULL, x2 = CUBE_HANDLE_NULL;
  GC_OK(p, cts_poisoned(c, sizeof(data), &src));
  GC_OK(p, cts_poisoned(c, sizeof(data), &dst));
  GC_OK(p, cts_poisoned(c, sizeof(data), &src2));
  GC_OK(p, cts_poisoned(c, sizeof(data), &dst2));
  GC_OK(p, cts_poisoned(c, sizeof(data), &x));
  GC_OK(p, cts_poisoned(c, sizeof(data), &x2));
  /* src -> dst, and x in place (one slot for both of its views). */
  cube_graph_t* g = NULL;
  GC_OK(p, cube_client_capture_begin(c));
  GC_OK(p, cube_client_all_reduce(c, src, dst, CUBE_DTYPE_U32, p->n, p->devs, CUBE_REDUCE_SUM));
  GC_OK(p, cube_client_all_reduce(c, x, x, CUBE_DTYPE_U32, p->n, p->devs, CUBE_REDUCE_SUM));
  GC_OK(p, cube_client_sync_collective(c));
  GC_OK(p, cube_client_capture_end(c, &g));
  GC_CHECK(p, cube_graph_node_count(g) == 3 && cube_graph_slot_count(g) == 3);
  for (uint32_t round = 0; round < GC_ROUNDS && g; ++round) {
    /* Participants rebind in different rounds: the buffers are each one's own. */
    uint32_t mode = (round + p->rank) % 3; /* 0: as captured, 1: src and x, 2: dst */
    cube_handle_t s_used = mode == 1 ? src2 : src, s_other = mode == 1 ? src : src2;
    cube_handle_t d_used = mode == 2 ? dst2 : dst, d_other = mode == 2 ? dst : dst2;
    cube_handle_t x_used = mode == 1 ? x2 : x, x_other = mode == 1 ? x : x2;
    gc_data(data, round, p->rank);
    gc_data(other, round + 100, p->rank);
    GC_OK(p, cube_client_write(c, s_used, data, sizeof(data)));
    GC_OK(p, cube_client_write(c, s_other, other, sizeof(other)));
    GC_OK(p, cube_client_write(c, d_used, poison, sizeof(poison)));
    GC_OK(p, cube_client_write(c, d_other, poison, sizeof(poison)));
    gc_data(data, round + 200, p->rank);
    GC_OK(p, cube_client_write(c, x_used, data, sizeof(data)));
    GC_OK(p, cube_client_write(c, x_other, poison, sizeof(poison)));
    cube_graph_binding_t b[2];
    size_t nb = 0;
    if (mode == 1) {
      b[nb++] = (cube_graph_binding_t){0, src2};
      b[nb++] = (cube_graph_binding_t){2, x2};
    } else if (mode == 2) {
      b[nb++] = (cube_graph_binding_t){1, dst2};
    }
    GC_OK(p, cube_client_replay(c, g, nb, b));
    gc_sum(want, round, p->n);
    GC_CHECK(p, cts_read_equals(c, d_used, want, sizeof(want)));
    GC_CHECK(p, cts_read_equals(c, d_other, poison, sizeof(poison)));
    GC_CHECK(p, cts_read_equals(c, s_other, other, sizeof(other)));
    gc_sum(want, round + 200, p->n);
    GC_CHECK(p, cts_read_equals(c, x_used, want, sizeof(want)));
    GC_CHECK(p, cts_read_equals(c, x_other, poison, sizeof(poison)));
  }
  GC_OK(p, cube_client_sync(c));
  cube_graph_release(g);
  cube_handle_t hs[] = {src, dst, src2, dst2, x, x2};
  for (size_t i = 0; i < 6; ++i) cube_handle_release(hs[i]);
  cube_client_release(c);
  return NULL;
}

/* A captured all_reduce's src and dst are slots: substitutes for either (and
 * for an in-place all_reduce's one slot) take their place in that replay
 * only; the participants rebind independently of each other. */
CUBE_TEST(graph_collectives_rebinding) {
  GC_PARTICIPANTS(n);
  gc_run(n, gc_rebinding_main, NULL);
  CTS_END(c);
}

static void* gc_send_recv_main(void* arg) {
  gc_part_t* p = arg;
  cube_client_t* c = NULL;
  GC_OK(p, cube_client_load(cts_device(p->rank), &c));
  if (!c) return NULL;
  uint32_t to = (p->rank + 1) % p->n, from = (p->rank + p->n - 1) % p->n;
  uint32_t data[GN], poison[GN], want[GN];
  memset(poison, CTS_POISON, sizeof(poison));
  cube_handle_t src = CUBE_HANDLE_NULL, dst = CUBE_HANDLE_NULL, dst2 = CUBE_HANDLE_NULL;
  GC_OK(p, cts_poisoned(c, sizeof(data), &src));
  GC_OK(p, cts_poisoned(c, sizeof(data), &dst));
  GC_OK(p, cts_poisoned(c, sizeof(data), &dst2));
  /* A ring: each sends to the next and receives from the one before. */
  cube_graph_t* g = NULL;
  GC_OK(p, cube_client_capture_begin(c));
  GC_OK(p, cube_client_send(c, src, cts_device(to)));
  GC_OK(p, cube_client_recv(c, dst, cts_device(from)));
  GC_OK(p, cube_client_sync_collective(c));
  GC_OK(p, cube_client_capture_end(c, &g));
  GC_CHECK(p, cube_graph_node_count(g) == 3 && cube_graph_slot_count(g) == 2);
  pthread_barrier_wait(p->barrier);
  GC_CHECK(p, cts_read_equals(c, dst, poison, sizeof(poison))); /* nothing ran */
  pthread_barrier_wait(p->barrier);
  for (uint32_t round = 0; round < GC_ROUNDS && g; ++round) {
    bool sub = round % 2 == 1;
    gc_data(data, round, p->rank);
    GC_OK(p, cube_client_write(c, src, data, sizeof(data)));
    GC_OK(p, cube_client_write(c, dst, poison, sizeof(poison)));
    GC_OK(p, cube_client_write(c, dst2, poison, sizeof(poison)));
    cube_graph_binding_t b[1] = {{1, dst2}};
    GC_OK(p, cube_client_replay(c, g, sub ? 1 : 0, b));
    gc_data(want, round, from);
    GC_CHECK(p, cts_read_equals(c, sub ? dst2 : dst, want, sizeof(want)));
    GC_CHECK(p, cts_read_equals(c, sub ? dst : dst2, poison, sizeof(poison)));
  }
  cube_collective_record_t r = {0};
  GC_OK(p, cube_client_last_collective(c, &r));
  GC_CHECK(p, (r.kind == CUBE_COLLECTIVE_SEND || r.kind == CUBE_COLLECTIVE_RECV) &&
                  r.bytes == sizeof(data));
  GC_OK(p, cube_client_sync(c));
  cube_graph_release(g);
  cube_handle_release(src);
  cube_handle_release(dst);
  cube_handle_release(dst2);
  cube_client_release(c);
  return NULL;
}

/* send and recv captured on every participant of a ring and replayed, with
 * new data between replays and the receive buffer rebound every other one. */
CUBE_TEST(graph_collectives_send_recv) {
  GC_PARTICIPANTS(n);
  gc_run(n, gc_send_recv_main, NULL);
  CTS_END(c);
}

static void* gc_launches_main(void* arg) {
  gc_part_t* p = arg;
  cube_client_t* c = NULL;
  GC_OK(p, cube_client_load(cts_device(p->rank), &c));
  if (!c) return NULL;
  uint32_t data[GN], want[GN], d[GN];
  cube_handle_t in = CUBE_HANDLE_NULL, src = CUBE_HANDLE_NULL, dst = CUBE_HANDLE_NULL,
                out = CUBE_HANDLE_NULL;
  GC_OK(p, cts_poisoned(c, sizeof(data), &in));
  GC_OK(p, cts_poisoned(c, sizeof(data), &src));
  GC_OK(p, cts_poisoned(c, sizeof(data), &dst));
  GC_OK(p, cts_poisoned(c, sizeof(data), &out));
  /* src = in + (rank + 1); dst = all_reduce(src); out = dst + 5. */
  cube_arg_t a1[4] = {cube_arg_buffer(in), cube_arg_buffer(src), cube_arg_u32(p->rank + 1),
                      cube_arg_u32(GN)};
  cube_arg_t a2[4] = {cube_arg_buffer(dst), cube_arg_buffer(out), cube_arg_u32(5),
                      cube_arg_u32(GN)};
  cube_graph_t* g = NULL;
  GC_OK(p, cube_client_capture_begin(c));
  GC_OK(p, cube_client_launch(c, p->add, graph_count(), 4, a1));
  GC_OK(p, cube_client_all_reduce(c, src, dst, CUBE_DTYPE_U32, p->n, p->devs, CUBE_REDUCE_SUM));
  GC_OK(p, cube_client_sync_collective(c));
  GC_OK(p, cube_client_launch(c, p->add, graph_count(), 4, a2));
  GC_OK(p, cube_client_capture_end(c, &g));
  GC_CHECK(p, cube_graph_node_count(g) == 4);
  /* A collective node has no scalars. */
  cube_graph_scalar_t bad[1] = {{1, 0, cube_arg_u32(1)}};
  cube_status_t s = cube_client_replay_with(c, g, 0, NULL, 1, bad);
  GC_CHECK(p, cube_status_code(s) == CUBE_STATUS_INVALID_ARGUMENT &&
                  cts_contains(cube_status_message(s), "node 1 is cube_client_all_reduce",
                               "not a launch", (const char*)NULL));
  cube_status_free(s);
  bad[0].node = 2;
  s = cube_client_replay_with(c, g, 0, NULL, 1, bad);
  GC_CHECK(p, cube_status_code(s) == CUBE_STATUS_INVALID_ARGUMENT &&
                  cts_contains(cube_status_message(s), "cube_client_sync_collective",
                               (const char*)NULL));
  cube_status_free(s);
  for (uint32_t round = 0; round < GC_ROUNDS && g; ++round) {
    /* Odd rounds give the first launch's addend a new value on every
     * participant: the sum then has every participant's. */
    bool sc = round % 2 == 1;
    gc_data(data, round, p->rank);
    GC_OK(p, cube_client_write(c, in, data, sizeof(data)));
    cube_graph_scalar_t s1[1] = {{0, 2, cube_arg_u32(1000 * round + p->rank)}};
    GC_OK(p, cube_client_replay_with(c, g, 0, NULL, sc ? 1 : 0, s1));
    memset(want, 0, sizeof(want));
    for (uint32_t j = 0; j < p->n; ++j) {
      gc_data(d, round, j);
      uint32_t add = sc ? 1000 * round + j : j + 1;
      for (int i = 0; i < GN; ++i) want[i] += d[i] + add;
    }
    GC_CHECK(p, cts_read_equals(c, dst, want, sizeof(want)));
    for (int i = 0; i < GN; ++i) want[i] += 5;
    GC_CHECK(p, cts_read_equals(c, out, want, sizeof(want)));
  }
  GC_OK(p, cube_client_sync(c));
  cube_graph_release(g);
  cube_handle_t hs[] = {in, src, dst, out};
  for (size_t i = 0; i < 4; ++i) cube_handle_release(hs[i]);
  cube_client_release(c);
  return NULL;
}

/* An all_reduce captured between launches: the first computes its source,
 * the second (after the captured sync_collective) reads its result; scalar
 * substitutes of the launches still apply, a collective node takes none. */
CUBE_TEST(graph_collectives_between_launches) {
  GC_PARTICIPANTS(n);
  cube_kernel_t* add = graph_add_kernel();
  REQUIRE(add);
  gc_run(n, gc_launches_main, add);
  cube_kernel_release(add);
  CTS_END(c);
}

/* One device alone (every backend with a transport): all_reduce, send and
 * recv to itself and sync_collective, captured and replayed. */
CUBE_TEST(graph_collectives_single_device) {
  CTS_CLIENT(c);
  if (!(cube_client_features(c)->bits & CUBE_FEATURE_COLLECTIVES)) {
    CTS_END(c);
    CUBE_SKIP("no collectives");
  }
  cube_device_id_t devs[1] = {cts_device(0)};
  float v[257], poison[257];
  memset(poison, CTS_POISON, sizeof(poison));
  cube_handle_t src, dst, copy;
  REQUIRE_OK(cts_poisoned(c, sizeof(v), &src));
  REQUIRE_OK(cts_poisoned(c, sizeof(v), &dst));
  REQUIRE_OK(cts_poisoned(c, sizeof(v), &copy));
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cube_client_all_reduce(c, src, dst, CUBE_DTYPE_F32, 1, devs, CUBE_REDUCE_MEAN));
  CHECK_OK(cube_client_send(c, src, devs[0]));
  CHECK_OK(cube_client_recv(c, copy, devs[0]));
  CHECK_OK(cube_client_sync_collective(c));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  CHECK_EQ_U64(cube_graph_node_count(g), 4);
  CHECK_EQ_U64(cube_graph_slot_count(g), 3);
  CHECK(cts_read_equals(c, dst, poison, sizeof(poison)));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 257; ++i) v[i] = (float)(round * 1000 + i) * 0.5f;
    CHECK_OK(cube_client_write(c, src, v, sizeof(v)));
    CHECK_OK(cube_client_replay(c, g, 0, NULL));
    CHECK(cts_read_equals(c, dst, v, sizeof(v)));
    CHECK(cts_read_equals(c, copy, v, sizeof(v)));
  }
  CHECK(!cube_graph_is_native(g));
  CHECK_OK(cube_client_sync(c));
  cube_graph_release(g);
  cube_handle_release(src);
  cube_handle_release(dst);
  cube_handle_release(copy);
  CTS_END(c);
}

typedef struct gc_replayer {
  cube_graph_t* g;
  cube_status_t sync_collective, sync;
} gc_replayer_t;

static void* gc_replay_elsewhere(void* arg) {
  gc_replayer_t* r = arg;
  cube_client_t* c = NULL;
  r->sync = cube_client_load(cts_device(0), &c);
  if (r->sync) return NULL;
  r->sync = cube_client_replay(c, r->g, 0, NULL);
  if (!r->sync) {
    r->sync_collective = cube_client_sync_collective(c);
    r->sync = cube_client_sync(c);
  }
  cube_client_release(c);
  return NULL;
}

/* A replay's collective is the replaying stream's: a graph captured on one
 * thread's stream and replayed on another's defers the failure of its
 * collective (participants that disagree on the size) to the stream of the
 * replay, whose sync returns it; the capturing stream has none. */
CUBE_TEST(graph_collectives_errors_on_the_replay_stream) {
  GC_PARTICIPANTS(n);
  (void)n;
  cube_client_t* c1 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(1), &c1));
  const cube_device_id_t devs[2] = {cts_device(0), cts_device(1)};
  uint8_t bytes[600];
  cube_test_fill_random(bytes, sizeof(bytes), 9200);
  cube_handle_t s0, d0, s1, d1;
  REQUIRE_OK(cube_client_create_from_slice(c, bytes, 400, &s0));
  REQUIRE_OK(cts_poisoned(c, 400, &d0));
  REQUIRE_OK(cube_client_create_from_slice(c1, bytes, 600, &s1));
  REQUIRE_OK(cts_poisoned(c1, 600, &d1));
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cube_client_all_reduce(c, s0, d0, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_SUM));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  CHECK_OK(cube_client_all_reduce(c1, s1, d1, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_SUM));
  gc_replayer_t r = {g, NULL, NULL};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, gc_replay_elsewhere, &r) == 0);
  pthread_join(th, NULL);
  cube_status_t e = r.sync_collective ? r.sync_collective : r.sync;
  CHECK(cube_status_code(e) == CUBE_STATUS_INVALID_ARGUMENT &&
        cts_contains(cube_status_message(e), "400", "600", (const char*)NULL));
  if (r.sync_collective) cube_status_free(r.sync);
  cube_status_free(e);
  CHECK_OK(cube_client_sync_collective(c)); /* the capturing stream: nothing pending */
  CHECK_OK(cube_client_sync(c));
  cube_status_t e1 = cube_client_sync_collective(c1);
  if (!e1) e1 = cube_client_sync(c1);
  CHECK(cube_status_code(e1) == CUBE_STATUS_INVALID_ARGUMENT);
  cube_status_free(e1);
  /* Nothing was written: a read says why (docs/failures.md). */
  CHECK(cts_read_lost(c, d0, "all_reduce of 400 bytes into memory", "participants disagree",
                      (const char*)NULL));
  cube_graph_release(g);
  cube_handle_t hs[] = {s0, d0, s1, d1};
  for (size_t i = 0; i < 4; ++i) cube_handle_release(hs[i]);
  cube_client_release(c1);
  CTS_END(c);
}
