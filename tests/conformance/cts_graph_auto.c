/* Conformance: automatic capture (CUBE_GRAPHS=auto, cube/graph.h and
 * docs/graphs.md, "Automatic capture"): results and errors equal eager
 * execution's with random data, falling back when the sequence changes,
 * steps on new buffers, other streams, threads, off by default. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

enum { AN = 1031 }; /* elements: not a multiple of the cube dim */

/* A client of device 0 with automatic capture (warm-up 2) and, when |log| is
 * not NULL, profile level exec logging into it. */
static cube_status_t auto_client(cube_graphs_mode_t graphs, cts_log_t* log, cube_client_t** out) {
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.graphs = graphs;
  o.graphs_warmup = 2;
  if (log) {
    o.profile_level = CUBE_PROFILE_EXEC;
    o.log_fn = cts_log_fn;
    o.log_user = log;
  }
  return cube_client_init(cts_device(0), &o, out);
}

#define AUTO_CLIENT(var, graphs, log)                                          \
  cube_client_t* var = NULL;                                                   \
  do {                                                                         \
    cube_status_t a_s_ = auto_client((graphs), (log), &var);                   \
    if (cube_status_code(a_s_) == CUBE_STATUS_UNAVAILABLE) {                   \
      cube_status_free(a_s_);                                                  \
      CUBE_SKIP("backend %s unavailable", cts_backend()->name);                \
    }                                                                          \
    REQUIRE_OK(a_s_);                                                          \
  } while (0)

static cube_kernel_t* auto_add_kernel(const char* name) {
  static const cube_arg_kind_t kinds[4] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
                                           CUBE_ARG_U32};
  cube_kernel_t* k = NULL;
  if (cube_status_consume(
          cts_kernel_create(name, cts_k_add_u32, ((cube_dim_t){64, 1, 1}), 0, 4, kinds, &k)))
    return NULL;
  return k;
}

static cube_count_t auto_count(uint32_t n) { return cube_count_static((n + 63) / 64, 1, 1); }

/* out = in + add over |n| elements. */
static cube_status_t auto_add(cube_client_t* c, cube_kernel_t* k, cube_handle_t in,
                              cube_handle_t out, uint32_t add, uint32_t n) {
  cube_arg_t a[4] = {cube_arg_buffer(in), cube_arg_buffer(out), cube_arg_u32(add),
                     cube_arg_u32(n)};
  return cube_client_launch(c, k, auto_count(n), 4, a);
}

static cube_graph_auto_stats_t auto_stats(cube_client_t* c) {
  cube_graph_auto_stats_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  CHECK_OK(cube_client_graph_auto_stats(c, &s));
  return s;
}

static void auto_print_stats(const char* when, const cube_graph_auto_stats_t* s) {
  fprintf(stderr,
          "%s: graphs %llu, steps replayed %llu, launches replayed %llu, fallbacks %llu, "
          "interruptions %llu\n",
          when, (unsigned long long)s->graphs, (unsigned long long)s->steps_replayed,
          (unsigned long long)s->launches_replayed, (unsigned long long)s->fallbacks,
          (unsigned long long)s->interruptions);
}

//===----------------------------------------------------------------------===//
// Random programs against the host
//===----------------------------------------------------------------------===//

enum { RB = 4, RL = 6 }; /* buffers, launches per step */

typedef struct auto_op {
  int src, dst;
  uint32_t add;
} auto_op_t;

/* A step of RL launches over RB buffers (buffer 0 is the input, written
 * every step; in place and aliased arguments included). */
static void auto_program(uint64_t seed, auto_op_t* ops) {
  uint64_t s = seed;
  for (int i = 0; i < RL; ++i) {
    ops[i].src = (int)(cube_test_rand(&s) % RB);
    ops[i].dst = 1 + (int)(cube_test_rand(&s) % (RB - 1));
    ops[i].add = (uint32_t)cube_test_rand(&s);
  }
}

static void auto_host_step(const auto_op_t* ops, uint32_t (*b)[AN]) {
  for (int i = 0; i < RL; ++i)
    for (int e = 0; e < AN; ++e) b[ops[i].dst][e] = b[ops[i].src][e] + ops[i].add;
}

/* 16 steps of a random program, the program changed at step 8 (one scalar):
 * every step's buffers equal the host's, and the counts say what ran. */
CUBE_TEST(graph_auto_random_steps_match_eager) {
  cts_log_t log;
  cts_log_init(&log);
  AUTO_CLIENT(c, CUBE_GRAPHS_AUTO, &log);
  cube_kernel_t* k = auto_add_kernel("auto_add");
  REQUIRE(k);
  static uint32_t host[RB][AN];
  cube_handle_t h[RB];
  for (int b = 0; b < RB; ++b) {
    cube_test_fill_random(host[b], sizeof(host[b]), 9000 + (uint64_t)b);
    REQUIRE_OK(cube_client_create_from_slice(c, host[b], sizeof(host[b]), &h[b]));
  }
  auto_op_t ops[RL];
  auto_program(9100, ops);
  enum { STEPS = 16, CHANGE = 8 };
  for (int step = 1; step <= STEPS; ++step) {
    if (step == CHANGE) ops[RL / 2].add ^= 0x5A5A5A5Au;
    cube_test_fill_random(host[0], sizeof(host[0]), 9200 + (uint64_t)step);
    CHECK_OK(cube_client_write(c, h[0], host[0], sizeof(host[0])));
    for (int i = 0; i < RL; ++i)
      CHECK_OK(auto_add(c, k, h[ops[i].src], h[ops[i].dst], ops[i].add, AN));
    auto_host_step(ops, host);
    for (int b = 0; b < RB; ++b) {
      if (!cts_read_equals(c, h[b], host[b], sizeof(host[b]))) {
        fprintf(stderr, "step %d, buffer %d differs\n", step, b);
        CHECK(0);
      }
    }
  }
  CHECK_OK(cube_client_sync(c));
  /* Steps 1, 2 eager (the second recorded), 3 to 7 replayed; step 8 falls
   * back at its changed launch and is not learned; 9, 10 eager, 11 to 16
   * replayed. */
  cube_graph_auto_stats_t s = auto_stats(c);
  CHECK_EQ_U64(s.graphs, 2);
  CHECK_EQ_U64(s.steps_replayed, 11);
  CHECK_EQ_U64(s.launches_replayed, 11 * RL);
  CHECK_EQ_U64(s.fallbacks, 1);
  CHECK_EQ_U64(s.interruptions, 0);
  char after[64];
  snprintf(after, sizeof(after), "after launch %d of %d", RL / 2, RL);
  CHECK(cts_log_find(&log, "graph auto", "fell back", after, "scalar", (const char*)NULL) >= 0);
  CHECK(cts_log_find(&log, "graph auto", "replayed as one graph", (const char*)NULL) >= 0);
  if (s.steps_replayed != 11 || cts_log_find(&log, "fell back", (const char*)NULL) < 0) {
    auto_print_stats("random steps", &s);
    cts_log_dump(&log);
  }
  for (int b = 0; b < RB; ++b) cube_handle_release(h[b]);
  cube_kernel_release(k);
  CTS_END(c);
  cts_log_free(&log);
}

//===----------------------------------------------------------------------===//
// Falling back
//===----------------------------------------------------------------------===//

typedef struct auto_chain {
  cube_client_t* c;
  cube_kernel_t* add;
  cube_kernel_t* add2; /* the same code, another kernel */
  cube_handle_t in, x, y, small;
  uint32_t data[AN];
} auto_chain_t;

/* One step: x = in + 3, y = x + |b|; reads y and checks it. */
static void auto_chain_step(auto_chain_t* f, uint64_t seed, uint32_t b, cube_kernel_t* second,
                            cube_handle_t second_out) {
  cube_test_fill_random(f->data, sizeof(f->data), seed);
  CHECK_OK(cube_client_write(f->c, f->in, f->data, sizeof(f->data)));
  CHECK_OK(auto_add(f->c, f->add, f->in, f->x, 3, AN));
  uint32_t n = second_out.id == f->small.id ? AN / 2 : AN;
  cube_arg_t a[4] = {cube_arg_buffer(f->x), cube_arg_buffer(second_out), cube_arg_u32(b),
                     cube_arg_u32(n)};
  CHECK_OK(cube_client_launch(f->c, second, auto_count(AN), 4, a)); /* the count of AN */
  static uint32_t want[AN];
  for (uint32_t i = 0; i < n; ++i) want[i] = f->data[i] + 3 + b;
  CHECK(cts_read_equals(f->c, second_out, want, n * sizeof(uint32_t)));
}

/* The same two-launch step, warmed up and replayed; then one step that
 * differs in a scalar, one in a kernel, one in a buffer's size, one that
 * ends early, one that goes on, one with a dynamic count: each falls back
 * at the launch that differs (the log says which, and why), its results
 * are right, and the step after the next warm-up is replayed again. */
CUBE_TEST(graph_auto_falls_back_when_the_sequence_changes) {
  cts_log_t log;
  cts_log_init(&log);
  AUTO_CLIENT(c, CUBE_GRAPHS_AUTO, &log);
  auto_chain_t f;
  memset(&f, 0, sizeof(f));
  f.c = c;
  f.add = auto_add_kernel("auto_add");
  f.add2 = auto_add_kernel("auto_add_other");
  REQUIRE(f.add && f.add2);
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.in));
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.x));
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.y));
  REQUIRE_OK(cts_poisoned(c, (AN / 2) * sizeof(uint32_t), &f.small));
  uint64_t seed = 9300;
  uint64_t replayed = 0, fallbacks = 0;
  static const char* const why[] = {"scalar", "is kernel 'auto_add_other', not 'auto_add'",
                                    "views 2060 bytes, not 4124"};
  for (int change = 0; change < 3; ++change) {
    /* Warm-up (2 eager steps) and 3 replayed. */
    for (int i = 0; i < 5; ++i) auto_chain_step(&f, seed++, 4, f.add, f.y);
    replayed += 3;
    cube_graph_auto_stats_t s = auto_stats(c);
    CHECK_EQ_U64(s.steps_replayed, replayed);
    CHECK_EQ_U64(s.fallbacks, fallbacks);
    cts_log_clear(&log);
    if (change == 0) auto_chain_step(&f, seed++, 5, f.add, f.y);
    if (change == 1) auto_chain_step(&f, seed++, 4, f.add2, f.y);
    if (change == 2) auto_chain_step(&f, seed++, 4, f.add, f.small);
    s = auto_stats(c);
    CHECK_EQ_U64(s.steps_replayed, replayed);
    CHECK_EQ_U64(s.fallbacks, ++fallbacks);
    long line = cts_log_find(&log, "graph auto", "fell back to eager launches",
                             "after launch 1 of 2", why[change], (const char*)NULL);
    CHECK(line >= 0);
    if (line < 0) cts_log_dump(&log);
  }
  /* A step that ends after its first launch (the read of x is a boundary). */
  for (int i = 0; i < 5; ++i) auto_chain_step(&f, seed++, 4, f.add, f.y);
  replayed += 3;
  cts_log_clear(&log);
  cube_test_fill_random(f.data, sizeof(f.data), seed++);
  CHECK_OK(cube_client_write(c, f.in, f.data, sizeof(f.data)));
  CHECK_OK(auto_add(c, f.add, f.in, f.x, 3, AN));
  static uint32_t want[AN];
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 3;
  CHECK(cts_read_equals(c, f.x, want, sizeof(want)));
  CHECK(cts_log_find(&log, "fell back", "after launch 1 of 2", "the step ended at a read",
                     (const char*)NULL) >= 0);
  ++fallbacks;
  /* A step that goes on after its two launches: the two were replayed, the
   * third runs eagerly. */
  for (int i = 0; i < 5; ++i) auto_chain_step(&f, seed++, 4, f.add, f.y);
  replayed += 3;
  cts_log_clear(&log);
  cube_test_fill_random(f.data, sizeof(f.data), seed++);
  CHECK_OK(cube_client_write(c, f.in, f.data, sizeof(f.data)));
  CHECK_OK(auto_add(c, f.add, f.in, f.x, 3, AN));
  CHECK_OK(auto_add(c, f.add, f.x, f.y, 4, AN));
  CHECK_OK(auto_add(c, f.add, f.y, f.x, 1, AN));
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 8;
  CHECK(cts_read_equals(c, f.x, want, sizeof(want)));
  CHECK(cts_log_find(&log, "fell back", "after launch 2 of 2", "the step went on",
                     (const char*)NULL) >= 0);
  ++replayed;
  ++fallbacks;
  /* A dynamic count (three u32 in a buffer, read when the launch runs). */
  for (int i = 0; i < 5; ++i) auto_chain_step(&f, seed++, 4, f.add, f.y);
  replayed += 3;
  cts_log_clear(&log);
  uint32_t dims[3] = {(AN + 63) / 64, 1, 1};
  cube_handle_t hd;
  REQUIRE_OK(cube_client_create_from_slice(c, dims, sizeof(dims), &hd));
  cube_test_fill_random(f.data, sizeof(f.data), seed++);
  CHECK_OK(cube_client_write(c, f.in, f.data, sizeof(f.data)));
  cube_arg_t a[4] = {cube_arg_buffer(f.in), cube_arg_buffer(f.x), cube_arg_u32(3),
                     cube_arg_u32(AN)};
  CHECK_OK(cube_client_launch(c, f.add, cube_count_dynamic(hd), 4, a));
  CHECK_OK(auto_add(c, f.add, f.x, f.y, 4, AN));
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 7;
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  CHECK(cts_log_find(&log, "fell back", "after launch 0 of 2", "dynamic cube count",
                     (const char*)NULL) >= 0);
  ++fallbacks;
  CHECK_OK(cube_client_sync(c));
  cube_graph_auto_stats_t s = auto_stats(c);
  CHECK_EQ_U64(s.steps_replayed, replayed);
  CHECK_EQ_U64(s.fallbacks, fallbacks);
  CHECK_EQ_U64(s.interruptions, 0);
  if (s.steps_replayed != replayed || s.fallbacks != fallbacks) {
    auto_print_stats("fallbacks", &s);
    cts_log_dump(&log);
  }
  cube_handle_release(hd);
  cube_handle_release(f.in);
  cube_handle_release(f.x);
  cube_handle_release(f.y);
  cube_handle_release(f.small);
  cube_kernel_release(f.add);
  cube_kernel_release(f.add2);
  CTS_END(c);
  cts_log_free(&log);
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

/* Every step uploads a new input, allocates new outputs and releases them
 * after the read (a training loop's pattern): the steps still match, and
 * each replay runs on that step's buffers; none stays allocated after. */
CUBE_TEST(graph_auto_new_buffers_each_step) {
  AUTO_CLIENT(c, CUBE_GRAPHS_AUTO, NULL);
  cube_kernel_t* k = auto_add_kernel("auto_add");
  REQUIRE(k);
  enum { STEPS = 12 };
  static uint32_t in[AN], want[AN];
  cube_handle_t keep = CUBE_HANDLE_NULL; /* one output kept a step longer: no reuse pattern */
  for (int step = 0; step < STEPS; ++step) {
    cube_test_fill_random(in, sizeof(in), 9400 + (uint64_t)step);
    cube_handle_t hin, hx, hy;
    REQUIRE_OK(cube_client_create_from_slice(c, in, sizeof(in), &hin));
    REQUIRE_OK(cube_client_empty(c, sizeof(in), &hx));
    REQUIRE_OK(cube_client_empty(c, sizeof(in), &hy));
    CHECK_OK(auto_add(c, k, hin, hx, 10, AN));
    CHECK_OK(auto_add(c, k, hx, hy, 20, AN));
    CHECK_OK(auto_add(c, k, hy, hy, 30, AN)); /* in place: the same view twice */
    for (int i = 0; i < AN; ++i) want[i] = in[i] + 60;
    CHECK(cts_read_equals(c, hy, want, sizeof(want)));
    cube_handle_release(hin);
    cube_handle_release(hx);
    cube_handle_release(keep);
    keep = hy;
  }
  cube_handle_release(keep);
  CHECK_OK(cube_client_sync(c));
  /* The graph keeps no buffer alive between steps: usage is as eager. */
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  cube_graph_auto_stats_t s = auto_stats(c);
  CHECK_EQ_U64(s.graphs, 1);
  CHECK_EQ_U64(s.steps_replayed, STEPS - 2);
  CHECK_EQ_U64(s.launches_replayed, 3 * (STEPS - 2));
  CHECK_EQ_U64(s.fallbacks, 0);
  if (s.steps_replayed != STEPS - 2) auto_print_stats("new buffers", &s);
  cube_kernel_release(k);
  CTS_END(c);
}

/* The aliasing pattern is part of the step: a step whose in-place launch
 * gets two distinct buffers falls back, and computes right. */
CUBE_TEST(graph_auto_aliasing_is_part_of_the_step) {
  cts_log_t log;
  cts_log_init(&log);
  AUTO_CLIENT(c, CUBE_GRAPHS_AUTO, &log);
  cube_kernel_t* k = auto_add_kernel("auto_add");
  REQUIRE(k);
  static uint32_t in[AN], want[AN];
  cube_handle_t hin, hx, hz;
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hin));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hx));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hz));
  for (int step = 0; step < 6; ++step) {
    bool other = step == 5;
    cube_test_fill_random(in, sizeof(in), 9500 + (uint64_t)step);
    CHECK_OK(cube_client_write(c, hin, in, sizeof(in)));
    CHECK_OK(auto_add(c, k, hin, hx, 1, AN));
    CHECK_OK(auto_add(c, k, hx, other ? hz : hx, 2, AN)); /* x += 2, or z = x + 2 */
    for (int i = 0; i < AN; ++i) want[i] = in[i] + 3;
    CHECK(cts_read_equals(c, other ? hz : hx, want, sizeof(want)));
  }
  cube_graph_auto_stats_t s = auto_stats(c);
  CHECK_EQ_U64(s.steps_replayed, 3);
  CHECK_EQ_U64(s.fallbacks, 1);
  CHECK(cts_log_find(&log, "fell back", "after launch 1 of 2",
                     "argument 1 is not the view the step used there before",
                     (const char*)NULL) >= 0);
  cube_handle_release(hin);
  cube_handle_release(hx);
  cube_handle_release(hz);
  cube_kernel_release(k);
  CTS_END(c);
  cts_log_free(&log);
}

/* Automatic capture never refuses an allocation eager launches allow: with
 * room for two 32 KiB pages, a step releases a temporary its held launch
 * uses and allocates another buffer in its place. Eagerly (an inline queue)
 * the temporary is free by then; held, it is not, until the allocation that
 * ran out of memory queues what was held and tries again. */
CUBE_TEST(graph_auto_out_of_memory_as_eager) {
  CTS_REQUIRE_BACKEND();
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.graphs = CUBE_GRAPHS_AUTO;
  o.queue_mode = CUBE_QUEUE_INLINE;
  o.memory_config = CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES;
  o.memory_limit = 64 * 1024;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init(cts_device(0), &o, &c));
  cube_kernel_t* k = auto_add_kernel("auto_add");
  REQUIRE(k);
  enum { BN = 32 * 1024 / 4 };
  static uint32_t in[BN], want[BN];
  cube_handle_t hin;
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hin));
  for (int step = 0; step < 8; ++step) {
    cube_test_fill_random(in, sizeof(in), 9550 + (uint64_t)step);
    CHECK_OK(cube_client_write(c, hin, in, sizeof(in)));
    cube_handle_t tmp, out;
    REQUIRE_OK(cube_client_empty(c, sizeof(in), &tmp));
    CHECK_OK(auto_add(c, k, hin, tmp, 1, BN));
    cube_handle_release(tmp);
    cube_status_t st = cube_client_empty(c, sizeof(in), &out);
    if (st) fprintf(stderr, "step %d: %s\n", step, cube_status_message(st));
    REQUIRE_OK(st);
    CHECK_OK(auto_add(c, k, hin, out, 2, BN));
    for (int i = 0; i < BN; ++i) want[i] = in[i] + 2;
    CHECK(cts_read_equals(c, out, want, sizeof(want)));
    cube_handle_release(out);
  }
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(hin);
  cube_kernel_release(k);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// Errors, other streams, other calls
//===----------------------------------------------------------------------===//

static cube_status_t auto_noop(void* user) {
  (void)user;
  return CUBE_OK;
}

/* A failing launch in a replayed step is the deferred error the eager step
 * gave: the same code and the same message. */
CUBE_TEST(graph_auto_errors_as_eager) {
  AUTO_CLIENT(c, CUBE_GRAPHS_AUTO, NULL);
  static const cube_arg_kind_t kinds[5] = {CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32,
                                           CUBE_ARG_U32, CUBE_ARG_I32};
  cube_kernel_t* fail = NULL;
  REQUIRE_OK(cts_kernel_create("auto_fail", cts_k_fail, ((cube_dim_t){1, 1, 1}), 0, 5, kinds,
                               &fail));
  cube_kernel_t* k = auto_add_kernel("auto_add");
  REQUIRE(k);
  cube_handle_t hb, hx;
  REQUIRE_OK(cts_poisoned(c, 64, &hb));
  REQUIRE_OK(cts_poisoned(c, sizeof(uint32_t) * AN, &hx));
  char first[1024] = "";
  uint8_t poison[64];
  memset(poison, CTS_POISON, sizeof(poison));
  for (int step = 0; step < 6; ++step) {
    /* hb holds no valid contents after each failure (a launch on it would
     * not run): written whole before the step. */
    CHECK_OK(cube_client_write(c, hb, poison, sizeof(poison)));
    CHECK_OK(auto_add(c, k, hx, hx, 1, AN));
    cube_arg_t a[5] = {cube_arg_buffer(hb), cube_arg_u32(1), cube_arg_u32(0), cube_arg_u32(0),
                       cube_arg_i32(42)};
    CHECK_OK(cts_launch_fail(c, fail, cube_count_static(2, 1, 1), 5, a));
    cube_status_t st = cube_client_flush(c);
    CHECK(cube_status_code(st) == CUBE_STATUS_LAUNCH_FAILED);
    CHECK_EQ_U64(cube_status_count(st), 1);
    if (step == 0) snprintf(first, sizeof(first), "%s", cube_status_message(st));
    if (strcmp(first, cube_status_message(st)) != 0) {
      fprintf(stderr, "step %d: '%s', eager gave '%s'\n", step, cube_status_message(st), first);
      CHECK(0);
    }
    cube_status_free(st);
  }
  CHECK(strstr(first, "auto_fail") != NULL);
  cube_graph_auto_stats_t s = auto_stats(c);
  CHECK_EQ_U64(s.steps_replayed, 4);
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(hb);
  cube_handle_release(hx);
  cube_kernel_release(fail);
  cube_kernel_release(k);
  CTS_END(c);
}

/* A held step whose buffer another stream reads: the read sees the held
 * launches' results (the order of the calls), the rest of that step runs
 * eagerly, and the next step is replayed with the graph kept. The same for
 * a write on the other stream, an exclusive call and a client's release. */
CUBE_TEST(graph_auto_other_stream_sees_held_work) {
  AUTO_CLIENT(c, CUBE_GRAPHS_AUTO, NULL);
  cube_client_t* other = NULL;
  REQUIRE_OK(cube_client_clone(c, &other));
  cube_client_set_stream(other, cube_stream_id_new());
  auto_chain_t f;
  memset(&f, 0, sizeof(f));
  f.c = c;
  f.add = auto_add_kernel("auto_add");
  REQUIRE(f.add);
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.in));
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.x));
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.y));
  for (int i = 0; i < 3; ++i) auto_chain_step(&f, 9600 + (uint64_t)i, 4, f.add, f.y);
  cube_graph_auto_stats_t s = auto_stats(c);
  CHECK_EQ_U64(s.steps_replayed, 1);
  /* The first launch of a step is held: the other stream's read of x must
   * still come after it. */
  cube_test_fill_random(f.data, sizeof(f.data), 9610);
  CHECK_OK(cube_client_write(c, f.in, f.data, sizeof(f.data)));
  CHECK_OK(auto_add(c, f.add, f.in, f.x, 3, AN));
  static uint32_t want[AN];
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 3;
  CHECK(cts_read_equals(other, f.x, want, sizeof(want)));
  CHECK_OK(auto_add(c, f.add, f.x, f.y, 4, AN));
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 7;
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  s = auto_stats(c);
  CHECK_EQ_U64(s.interruptions, 1);
  CHECK_EQ_U64(s.fallbacks, 0);
  CHECK_EQ_U64(s.steps_replayed, 1);
  /* The same with a write on the other stream into the step's input: the
   * held launch reads the input as it was. */
  auto_chain_step(&f, 9620, 4, f.add, f.y);
  CHECK_EQ_U64(auto_stats(c).steps_replayed, 2);
  cube_test_fill_random(f.data, sizeof(f.data), 9630);
  CHECK_OK(cube_client_write(c, f.in, f.data, sizeof(f.data)));
  CHECK_OK(auto_add(c, f.add, f.in, f.x, 3, AN));
  static uint32_t junk[AN];
  memset(junk, 0x11, sizeof(junk));
  CHECK_OK(cube_client_write(other, f.in, junk, sizeof(junk)));
  CHECK_OK(auto_add(c, f.add, f.x, f.y, 4, AN));
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 7;
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  CHECK_EQ_U64(auto_stats(c).interruptions, 2);
  /* An exclusive call has the device to itself after what was called
   * before: held launches included. */
  auto_chain_step(&f, 9640, 4, f.add, f.y);
  CHECK_EQ_U64(auto_stats(c).steps_replayed, 3);
  cube_test_fill_random(f.data, sizeof(f.data), 9650);
  CHECK_OK(cube_client_write(c, f.in, f.data, sizeof(f.data)));
  CHECK_OK(auto_add(c, f.add, f.in, f.x, 3, AN));
  CHECK_OK(cube_client_exclusive(c, auto_noop, NULL));
  CHECK_EQ_U64(auto_stats(c).interruptions, 3);
  CHECK_OK(auto_add(c, f.add, f.x, f.y, 4, AN));
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 7;
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  /* Releasing a client (here a clone's last reference) queues what its
   * stream holds. */
  auto_chain_step(&f, 9660, 4, f.add, f.y);
  CHECK_EQ_U64(auto_stats(c).steps_replayed, 4);
  cube_test_fill_random(f.data, sizeof(f.data), 9670);
  CHECK_OK(cube_client_write(c, f.in, f.data, sizeof(f.data)));
  CHECK_OK(auto_add(c, f.add, f.in, f.x, 3, AN));
  cube_client_t* clone = NULL;
  REQUIRE_OK(cube_client_clone(c, &clone));
  cube_client_release(clone);
  CHECK_EQ_U64(auto_stats(c).interruptions, 4);
  CHECK_OK(auto_add(c, f.add, f.x, f.y, 4, AN));
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 7;
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_sync(other));
  cube_handle_release(f.in);
  cube_handle_release(f.x);
  cube_handle_release(f.y);
  cube_kernel_release(f.add);
  cube_client_release(other);
  CTS_END(c);
}

/* An explicit capture on a stream under automatic capture records as it
 * always does; the stream learns again after it. */
CUBE_TEST(graph_auto_leaves_explicit_capture_alone) {
  AUTO_CLIENT(c, CUBE_GRAPHS_AUTO, NULL);
  auto_chain_t f;
  memset(&f, 0, sizeof(f));
  f.c = c;
  f.add = auto_add_kernel("auto_add");
  REQUIRE(f.add);
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.in));
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.x));
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.y));
  for (int i = 0; i < 3; ++i) auto_chain_step(&f, 9700 + (uint64_t)i, 4, f.add, f.y);
  cube_test_fill_random(f.data, sizeof(f.data), 9710);
  CHECK_OK(cube_client_write(c, f.in, f.data, sizeof(f.data)));
  CHECK_OK(auto_add(c, f.add, f.in, f.x, 3, AN)); /* held ... */
  REQUIRE_OK(cube_client_capture_begin(c));     /* ... and queued by the capture's start */
  CHECK_OK(auto_add(c, f.add, f.x, f.y, 4, AN));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  CHECK_EQ_U64(cube_graph_node_count(g), 1);
  static uint32_t want[AN];
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 3;
  CHECK(cts_read_equals(c, f.x, want, sizeof(want)));
  CHECK_OK(cube_client_replay(c, g, 0, NULL));
  for (int i = 0; i < AN; ++i) want[i] = f.data[i] + 7;
  CHECK(cts_read_equals(c, f.y, want, sizeof(want)));
  cube_graph_auto_stats_t s = auto_stats(c);
  CHECK_EQ_U64(s.steps_replayed, 1);
  CHECK_EQ_U64(s.fallbacks, 1);
  for (int i = 0; i < 4; ++i) auto_chain_step(&f, 9720 + (uint64_t)i, 4, f.add, f.y);
  CHECK_EQ_U64(auto_stats(c).steps_replayed, 3);
  cube_graph_release(g);
  cube_handle_release(f.in);
  cube_handle_release(f.x);
  cube_handle_release(f.y);
  cube_kernel_release(f.add);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

enum { AS = 40 }; /* steps per thread */

typedef struct auto_thread {
  cube_client_t* shared; /* NULL: load a client (own stream) */
  cube_kernel_t* k;
  uint64_t seed;
  uint32_t a[AS]; /* the first launch's scalar of each step: now and then another step */
  int failures;
} auto_thread_t;

static void auto_thread_init(auto_thread_t* t, cube_client_t* shared, cube_kernel_t* k,
                             uint64_t seed) {
  memset(t, 0, sizeof(*t));
  t->shared = shared;
  t->k = k;
  t->seed = seed;
  uint64_t s = seed;
  for (int i = 0; i < AS; ++i) t->a[i] = cube_test_rand(&s) % 4 == 0 ? 5 : 6;
}

/* What the rules of docs/graphs.md make of a stream's steps |sig| (warm-up
 * 2, steps that differ at their first launch): replays and fallbacks. */
static void auto_expect(const uint32_t* sig, int n, uint64_t* replays, uint64_t* fallbacks) {
  bool replaying = false;
  uint32_t prev = 0;
  int repeats = 0;
  for (int i = 0; i < n; ++i) {
    if (replaying) {
      if (sig[i] == prev) {
        ++*replays;
        continue;
      }
      ++*fallbacks; /* at the step's first launch: the step is not learned */
      replaying = false;
      repeats = 0;
      continue;
    }
    repeats = repeats && sig[i] == prev ? repeats + 1 : 1;
    prev = sig[i];
    replaying = repeats >= 2;
  }
}

static void* auto_thread_main(void* p) {
  auto_thread_t* t = p;
  cube_client_t* c = t->shared ? cube_client_retain(t->shared) : NULL;
  if (!c && cube_status_consume(cube_client_load(cts_device(0), &c))) {
    t->failures++;
    return NULL;
  }
  static _Thread_local uint32_t in[AN], want[AN];
  cube_handle_t hin = CUBE_HANDLE_NULL, hx = CUBE_HANDLE_NULL, hy = CUBE_HANDLE_NULL;
  if (cube_status_consume(cube_client_empty(c, sizeof(in), &hin)) ||
      cube_status_consume(cube_client_empty(c, sizeof(in), &hx)) ||
      cube_status_consume(cube_client_empty(c, sizeof(in), &hy)))
    t->failures++;
  for (int i = 0; i < AS && !t->failures; ++i) {
    cube_test_fill_random(in, sizeof(in), t->seed * 1000 + (uint64_t)i);
    uint32_t a = t->a[i];
    if (cube_status_consume(cube_client_write(c, hin, in, sizeof(in))) ||
        cube_status_consume(auto_add(c, t->k, hin, hx, a, AN)) ||
        cube_status_consume(auto_add(c, t->k, hx, hy, 7, AN)))
      t->failures++;
    for (int e = 0; e < AN; ++e) want[e] = in[e] + a + 7;
    if (!cts_read_equals(c, hy, want, sizeof(want))) t->failures++;
  }
  cube_handle_release(hin);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_client_release(c);
  return NULL;
}

/* Four threads, each on its own stream, each replaying its own steps (and
 * falling back now and then): every result is right, and the streams
 * replayed and fell back exactly as the rules say for each one's steps. */
CUBE_TEST(graph_auto_several_threads) {
  AUTO_CLIENT(c, CUBE_GRAPHS_AUTO, NULL);
  cube_kernel_t* k = auto_add_kernel("auto_add");
  REQUIRE(k);
  enum { T = 4 };
  pthread_t th[T];
  auto_thread_t w[T];
  uint64_t replays = 0, fallbacks = 0;
  for (int i = 0; i < T; ++i) {
    auto_thread_init(&w[i], NULL, k, 9800 + (uint64_t)i);
    auto_expect(w[i].a, AS, &replays, &fallbacks);
    REQUIRE(pthread_create(&th[i], NULL, auto_thread_main, &w[i]) == 0);
  }
  for (int i = 0; i < T; ++i) {
    pthread_join(th[i], NULL);
    CHECK_EQ_U64(w[i].failures, 0);
  }
  cube_graph_auto_stats_t s = auto_stats(c);
  CHECK(replays >= T); /* the case tests something */
  CHECK_EQ_U64(s.steps_replayed, replays);
  CHECK_EQ_U64(s.launches_replayed, 2 * replays);
  CHECK_EQ_U64(s.fallbacks, fallbacks);
  CHECK_EQ_U64(s.interruptions, 0);
  if (s.steps_replayed != replays) auto_print_stats("threads", &s);
  cube_kernel_release(k);
  CTS_END(c);
}

/* Two threads sharing one pinned stream: their launches are recorded and
 * held under the stream's lock, in one order; every result is right. */
CUBE_TEST(graph_auto_threads_share_a_pinned_stream) {
  AUTO_CLIENT(c, CUBE_GRAPHS_AUTO, NULL);
  cube_client_set_stream(c, cube_stream_id_new());
  cube_kernel_t* k = auto_add_kernel("auto_add");
  REQUIRE(k);
  enum { T = 2 };
  pthread_t th[T];
  auto_thread_t w[T];
  for (int i = 0; i < T; ++i) {
    auto_thread_init(&w[i], c, k, 9900 + (uint64_t)i);
    REQUIRE(pthread_create(&th[i], NULL, auto_thread_main, &w[i]) == 0);
  }
  for (int i = 0; i < T; ++i) {
    pthread_join(th[i], NULL);
    CHECK_EQ_U64(w[i].failures, 0);
  }
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// Off, options, counts
//===----------------------------------------------------------------------===//

/* Without the option nothing is replayed: no graph row in the profile, no
 * "graph auto" line, all counts zero. */
CUBE_TEST(graph_auto_off_by_default) {
  if (getenv("CUBE_GRAPHS") && *getenv("CUBE_GRAPHS"))
    CUBE_SKIP("CUBE_GRAPHS is set in the environment");
  cts_log_t log;
  cts_log_init(&log);
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.profile_level = CUBE_PROFILE_BASIC;
  o.log_fn = cts_log_fn;
  o.log_user = &log;
  cube_client_t* c = NULL;
  cube_status_t st = cube_client_init(cts_device(0), &o, &c);
  if (cube_status_code(st) == CUBE_STATUS_UNAVAILABLE) {
    cube_status_free(st);
    cts_log_free(&log);
    CUBE_SKIP("backend unavailable");
  }
  REQUIRE_OK(st);
  char v[16];
  cube_option_source_t src;
  CHECK_OK(cube_option_get("CUBE_GRAPHS", v, sizeof(v), &src));
  CHECK(strcmp(v, "off") == 0 && src == CUBE_OPTION_SOURCE_DEFAULT);
  auto_chain_t f;
  memset(&f, 0, sizeof(f));
  f.c = c;
  f.add = auto_add_kernel("auto_add");
  REQUIRE(f.add);
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.in));
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.x));
  REQUIRE_OK(cts_poisoned(c, sizeof(f.data), &f.y));
  for (int i = 0; i < 8; ++i) auto_chain_step(&f, 9950 + (uint64_t)i, 4, f.add, f.y);
  CHECK_OK(cube_client_sync(c));
  cube_graph_auto_stats_t s = auto_stats(c);
  CHECK_EQ_U64(s.graphs + s.steps_replayed + s.launches_replayed + s.fallbacks + s.interruptions,
               0);
  CHECK(cts_log_find(&log, "graph (", (const char*)NULL) < 0);
  CHECK(cts_log_find(&log, "graph auto", (const char*)NULL) < 0);
  CHECK(cts_log_find(&log, "auto_add", (const char*)NULL) >= 0); /* the eager launches' rows */
  cube_handle_release(f.in);
  cube_handle_release(f.x);
  cube_handle_release(f.y);
  cube_kernel_release(f.add);
  CTS_END(c);
  cts_log_free(&log);
}

/* The option's values and the counts' call, on every backend (no kernel
 * runs): out-of-range values are refused, auto with only boundaries learns
 * nothing, and the calls it makes boundaries behave as without it. */
CUBE_TEST(graph_auto_options_and_stats) {
  CTS_REQUIRE_BACKEND();
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.graphs = (cube_graphs_mode_t)3;
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_init(cts_device(0), &o, &c), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_init", "graphs 3");
  o.graphs = CUBE_GRAPHS_AUTO;
  o.graphs_warmup = 1001;
  CHECK_STATUS(cube_client_init(cts_device(0), &o, &c), CUBE_STATUS_INVALID_ARGUMENT,
               "options->graphs_warmup", "1001", "CUBE_GRAPHS_WARMUP");
  o.graphs_warmup = 0; /* CUBE_GRAPHS_WARMUP, or 2 */
  REQUIRE_OK(cube_client_init(cts_device(0), &o, &c));
  CHECK_STATUS(cube_client_graph_auto_stats(c, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_graph_auto_stats", "out_stats");
  cube_graph_auto_stats_t s;
  memset(&s, 0, sizeof(s));
  CHECK_STATUS(cube_client_graph_auto_stats(NULL, &s), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_graph_auto_stats");
  s.struct_size = 0; /* this header's layout */
  CHECK_OK(cube_client_graph_auto_stats(c, &s));
  CHECK_EQ_U64(s.struct_size, sizeof(s));
  uint8_t a[64], b[64];
  cube_test_fill_random(a, sizeof(a), 9990);
  cube_test_fill_random(b, sizeof(b), 9991);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, a, sizeof(a), &h));
  for (int i = 0; i < 4; ++i) {
    CHECK_OK(cube_client_write(c, h, i % 2 ? a : b, sizeof(a)));
    CHECK(cts_read_equals(c, h, i % 2 ? a : b, sizeof(a)));
    CHECK_OK(cube_client_flush(c));
    CHECK_OK(cube_client_sync(c));
    cube_memory_usage_t u;
    CHECK_OK(cube_client_memory_usage(c, &u));
  }
  s = auto_stats(c);
  CHECK_EQ_U64(s.graphs + s.steps_replayed + s.fallbacks + s.interruptions, 0);
  cube_handle_release(h);
  CTS_END(c);
}
