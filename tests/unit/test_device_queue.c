// cube-test-libs: cube_mod_queue
/* Device queue tests (ports of CubeCL's device-handle tests), each case in threaded and
 * inline mode where it applies. Every case uses its own device key (type
 * 1000 threaded, 1001 inline) and shuts it down at the end, so that the
 * cases also run together in one process. Tasks never use CHECK (they may
 * run on the runner thread): they record into their state or payload and
 * the test checks on its own thread. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/options.h"
#include "base/status.h"
#include "check.h"
#include "platform/platform.h"
#include "queue/device_queue.h"

#define T_THREADED 1000u
#define T_INLINE 1001u
#define FIFO_PRODUCERS 8
#define FIFO_PER_PRODUCER 20000

static cube__device_key_t key_for(cube_queue_mode_t mode, uint32_t index) {
  cube__device_key_t k = {mode == CUBE_QUEUE_INLINE ? T_INLINE : T_THREADED, index};
  return k;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------
 * The counter service (several vtables share its functions)
 * ------------------------------------------------------------------------- */

typedef struct counter_args {
  atomic_int creates;
  int tag;
  long create_sleep_us;
} counter_args_t;

typedef struct counter {
  int tag;
  uint64_t value;
  /* FIFO check */
  uint64_t expected[FIFO_PRODUCERS];
  uint64_t fifo_errors;
  /* alignment check */
  uint64_t misaligned;
  uint64_t aligned_runs;
  /* task_failed */
  int failures;
  uint64_t failed_stream;
  cube_status_code_t failed_code;
  /* stream ids seen by tasks */
  uint64_t seen_stream;
} counter_t;

/* Destruction log (tags), appended by counter_destroy. */
static int g_destroy_log[64];
static atomic_int g_destroy_n;

static cube_status_t counter_create(cube__device_key_t key, void* arg, void** out) {
  (void)key;
  counter_args_t* a = (counter_args_t*)arg;
  if (a) {
    atomic_fetch_add(&a->creates, 1);
    if (a->create_sleep_us) sleep_us(a->create_sleep_us);
  }
  counter_t* c = (counter_t*)calloc(1, sizeof(*c));
  if (!c) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "counter: no memory");
  c->tag = a ? a->tag : 0;
  *out = c;
  return CUBE_OK;
}

static void counter_destroy(void* state) {
  counter_t* c = (counter_t*)state;
  int i = atomic_fetch_add(&g_destroy_n, 1);
  if (i >= 0 && i < 64) g_destroy_log[i] = c->tag;
  free(c);
}

static void counter_task_failed(void* state, uint64_t stream_id, cube_status_t status) {
  counter_t* c = (counter_t*)state;
  c->failures++;
  c->failed_stream = stream_id;
  c->failed_code = cube_status_code(status);
  cube_status_free(status);
}

static const cube__service_vtable_t counter_vt = {"counter", counter_create, counter_destroy,
                                                  counter_task_failed};
static const cube__service_vtable_t other_vt = {"other", counter_create, counter_destroy,
                                                counter_task_failed};
static const cube__service_vtable_t quiet_vt = {"quiet", counter_create, counter_destroy, NULL};
static const cube__service_vtable_t nest_vts[8] = {
    {"nest0", counter_create, counter_destroy, counter_task_failed},
    {"nest1", counter_create, counter_destroy, counter_task_failed},
    {"nest2", counter_create, counter_destroy, counter_task_failed},
    {"nest3", counter_create, counter_destroy, counter_task_failed},
    {"nest4", counter_create, counter_destroy, counter_task_failed},
    {"nest5", counter_create, counter_destroy, counter_task_failed},
    {"nest6", counter_create, counter_destroy, counter_task_failed},
    {"nest7", counter_create, counter_destroy, counter_task_failed},
};

/* ---------------------------------------------------------------------------
 * Tasks
 * ------------------------------------------------------------------------- */

static cube_status_t task_inc(void* state, void* payload) {
  (void)payload;
  ((counter_t*)state)->value++;
  return CUBE_OK;
}

static cube_status_t task_read(void* state, void* payload) {
  *(uint64_t*)payload = ((counter_t*)state)->value;
  return CUBE_OK;
}

static cube_status_t task_inc_read(void* state, void* payload) {
  counter_t* c = (counter_t*)state;
  *(uint64_t*)payload = ++c->value;
  return CUBE_OK;
}

static cube_status_t task_fail(void* state, void* payload) {
  (void)state;
  (void)payload;
  return cube__status_make(CUBE_STATUS_INTERNAL, "boom");
}

static uint64_t read_value(cube__service_t* s) {
  uint64_t v = UINT64_MAX;
  CHECK_OK(cube__submit_blocking(s, cube__stream_current_id(), task_read, &v));
  return v;
}

static cube__service_t* get_service(cube__device_key_t key, cube_queue_mode_t mode,
                                    const cube__service_vtable_t* vt) {
  cube__service_t* s = NULL;
  cube_status_t st = cube__service_get(key, mode, vt, NULL, &s);
  if (st != CUBE_OK) {
    fprintf(stderr, "service_get(%s): %s\n", vt->name, cube_status_message(st));
    cube_status_free(st);
    cube_test_failures++;
    return NULL;
  }
  return s;
}

/* ---------------------------------------------------------------------------
 * tests.rs: concurrent increment
 * ------------------------------------------------------------------------- */

typedef struct {
  cube__service_t* s;
  pthread_barrier_t* barrier;
  int failures;
} inc_thread_t;

static void* inc_thread(void* p) {
  inc_thread_t* t = (inc_thread_t*)p;
  pthread_barrier_wait(t->barrier);
  cube_status_t st = cube__submit(t->s, cube__stream_current_id(), task_inc, NULL, 0, NULL);
  if (st != CUBE_OK) t->failures++;
  cube_status_free(st);
  return NULL;
}

static void concurrent_increment(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 1);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  enum { N = 10 };
  pthread_t th[N];
  inc_thread_t args[N];
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, N);
  for (int i = 0; i < N; ++i) {
    args[i] = (inc_thread_t){s, &barrier, 0};
    REQUIRE(pthread_create(&th[i], NULL, inc_thread, &args[i]) == 0);
  }
  for (int i = 0; i < N; ++i) {
    pthread_join(th[i], NULL);
    CHECK(args[i].failures == 0);
  }
  pthread_barrier_destroy(&barrier);
  CHECK_EQ_U64(read_value(s), 10);
  cube__queue_shutdown(key);
}

CUBE_TEST(concurrent_increment_threaded) { concurrent_increment(CUBE_QUEUE_THREADED); }
CUBE_TEST(concurrent_increment_inline) { concurrent_increment(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * tests.rs: recursive execution, different state
 * ------------------------------------------------------------------------- */

typedef struct {
  cube__service_t* other;
} nested_payload_t;

/* A task of service A that submits (fire-and-forget) and calls (blocking)
 * into service B of the same device; both run at once on this thread. */
static cube_status_t task_call_other(void* state, void* payload) {
  counter_t* c = (counter_t*)state;
  nested_payload_t* p = (nested_payload_t*)payload;
  c->value++;
  uint64_t before = 0, after = 0;
  CUBE_RETURN_IF_ERROR(
      cube__submit_blocking(p->other, cube__stream_current_id(), task_read, &before));
  CUBE_RETURN_IF_ERROR(
      cube__submit(p->other, cube__stream_current_id(), task_inc, NULL, 0, NULL));
  CUBE_RETURN_IF_ERROR(
      cube__submit_blocking(p->other, cube__stream_current_id(), task_inc_read, &after));
  if (after != before + 2)
    return cube__status_make(CUBE_STATUS_INTERNAL, "nested submit did not run at once: %llu -> %llu",
                             (unsigned long long)before, (unsigned long long)after);
  return CUBE_OK;
}

static cube_status_t task_snapshot(void* state, void* payload) {
  memcpy(payload, state, sizeof(counter_t));
  return CUBE_OK;
}

static counter_t snapshot(cube__service_t* s) {
  counter_t c;
  memset(&c, 0xff, sizeof(c));
  CHECK_OK(cube__submit_blocking(s, cube__stream_current_id(), task_snapshot, &c));
  return c;
}

static void recursive_execution_different_state(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 2);
  cube__service_t* a = get_service(key, mode, &counter_vt);
  cube__service_t* b = get_service(key, mode, &other_vt);
  REQUIRE(a && b);
  nested_payload_t p = {b};
  CHECK_OK(cube__submit(a, cube__stream_current_id(), task_call_other, &p, sizeof(p), NULL));
  CHECK_EQ_U64(read_value(b), 2);
  counter_t ca = snapshot(a);
  CHECK_EQ_U64(ca.value, 1);
  CHECK(ca.failures == 0);
  /* The same nesting from a blocking call. */
  CHECK_OK(cube__submit_blocking(a, cube__stream_current_id(), task_call_other, &p));
  CHECK_EQ_U64(read_value(b), 4);
  CHECK_EQ_U64(read_value(a), 2);
  cube__queue_shutdown(key);
}

CUBE_TEST(recursive_execution_different_state_threaded) {
  recursive_execution_different_state(CUBE_QUEUE_THREADED);
}
CUBE_TEST(recursive_execution_different_state_inline) {
  recursive_execution_different_state(CUBE_QUEUE_INLINE);
}

/* ---------------------------------------------------------------------------
 * tests_recursive.rs: recursive execution, same state
 * ------------------------------------------------------------------------- */

static atomic_int g_same_state_drops;

static void drop_count_same_state(void* payload) {
  (void)payload;
  atomic_fetch_add(&g_same_state_drops, 1);
}

typedef struct {
  cube__service_t* self;
  int blocking; /* 0: nested submit, 1: nested submit_blocking */
} self_call_t;

static cube_status_t task_call_self(void* state, void* payload) {
  (void)state;
  self_call_t* p = (self_call_t*)payload;
  uint64_t token = 5;
  if (p->blocking) return cube__submit_blocking(p->self, cube__stream_current_id(), task_read, &token);
  return cube__submit(p->self, cube__stream_current_id(), task_inc, &token, sizeof(token),
                      drop_count_same_state);
}

static void recursive_execution_same_state(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 3);
  cube__service_t* a = get_service(key, mode, &counter_vt);
  REQUIRE(a);
  atomic_store(&g_same_state_drops, 0);
  char devname[32];
  snprintf(devname, sizeof(devname), "device type%u:3", key.type);
  self_call_t p = {a, 0};
  CHECK_STATUS(cube__submit_blocking(a, cube__stream_current_id(), task_call_self, &p),
               CUBE_STATUS_FAILED_PRECONDITION, "re-entrant", "'counter'", devname);
  CHECK(atomic_load(&g_same_state_drops) == 1); /* the refused payload was dropped */
  p.blocking = 1;
  CHECK_STATUS(cube__submit_blocking(a, cube__stream_current_id(), task_call_self, &p),
               CUBE_STATUS_FAILED_PRECONDITION, "re-entrant", "'counter'", devname);
  /* From a fire-and-forget task the refusal goes to task_failed. */
  p.blocking = 0;
  CHECK_OK(cube__submit(a, cube__stream_current_id(), task_call_self, &p, sizeof(p), NULL));
  counter_t c = snapshot(a);
  CHECK(c.failures == 1);
  CHECK(c.failed_code == CUBE_STATUS_FAILED_PRECONDITION);
  CHECK_EQ_U64(c.value, 0);
  CHECK(atomic_load(&g_same_state_drops) == 2);
  /* The service still works. */
  CHECK_OK(cube__submit(a, cube__stream_current_id(), task_inc, NULL, 0, NULL));
  CHECK_EQ_U64(read_value(a), 1);
  cube__queue_shutdown(key);
}

CUBE_TEST(recursive_execution_same_state_threaded) {
  recursive_execution_same_state(CUBE_QUEUE_THREADED);
}
CUBE_TEST(recursive_execution_same_state_inline) {
  recursive_execution_same_state(CUBE_QUEUE_INLINE);
}

/* ---------------------------------------------------------------------------
 * channel.rs: successive blocking increments persist
 * ------------------------------------------------------------------------- */

static void blocking_increments_persist(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 4);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  uint64_t v = 0;
  CHECK_OK(cube__submit_blocking(s, cube__stream_current_id(), task_inc_read, &v));
  CHECK_EQ_U64(v, 1);
  CHECK_OK(cube__submit_blocking(s, cube__stream_current_id(), task_inc_read, &v));
  CHECK_EQ_U64(v, 2);
  cube__queue_shutdown(key);
}

CUBE_TEST(blocking_increments_persist_threaded) { blocking_increments_persist(CUBE_QUEUE_THREADED); }
CUBE_TEST(blocking_increments_persist_inline) { blocking_increments_persist(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * channel.rs: exclusive returns a value; blocking borrows a stack value
 * ------------------------------------------------------------------------- */

typedef struct {
  int a, b, result;
  bool current;
} add_call_t;

static cube_status_t excl_add(void* user) {
  add_call_t* c = (add_call_t*)user;
  c->result = c->a + c->b;
  return CUBE_OK;
}

static void exclusive_returns_value(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 5);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  add_call_t c = {42, 8, 0, false};
  CHECK_OK(cube__exclusive(cube__service_device(s), cube__stream_current_id(), excl_add, &c));
  CHECK(c.result == 50);
  cube__queue_shutdown(key);
}

CUBE_TEST(exclusive_returns_value_threaded) { exclusive_returns_value(CUBE_QUEUE_THREADED); }
CUBE_TEST(exclusive_returns_value_inline) { exclusive_returns_value(CUBE_QUEUE_INLINE); }

static cube_status_t task_set_borrowed(void* state, void* payload) {
  (void)state;
  int* v = (int*)payload;
  *v = 42;
  return *v == 42 ? CUBE_OK : cube__status_make(CUBE_STATUS_INTERNAL, "read back %d", *v);
}

static void blocking_borrows_stack_value(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 6);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  int value = 0;
  CHECK_OK(cube__submit_blocking(s, cube__stream_current_id(), task_set_borrowed, &value));
  CHECK(value == 42);
  cube__queue_shutdown(key);
}

CUBE_TEST(blocking_borrows_stack_value_threaded) {
  blocking_borrows_stack_value(CUBE_QUEUE_THREADED);
}
CUBE_TEST(blocking_borrows_stack_value_inline) { blocking_borrows_stack_value(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * channel.rs: 32 submits then one blocking call
 * ------------------------------------------------------------------------- */

static void submits_then_blocking(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 7);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  for (int i = 0; i < 32; ++i)
    CHECK_OK(cube__submit(s, cube__stream_current_id(), task_inc, NULL, 0, NULL));
  CHECK_EQ_U64(read_value(s), 32);
  cube__queue_shutdown(key);
}

CUBE_TEST(submits_then_blocking_threaded) { submits_then_blocking(CUBE_QUEUE_THREADED); }
CUBE_TEST(submits_then_blocking_inline) { submits_then_blocking(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * channel.rs: a single submit plus flush runs within 1 s (no blocking call)
 * ------------------------------------------------------------------------- */

typedef struct {
  atomic_int* flag;
} flag_payload_t;

static cube_status_t task_set_flag(void* state, void* payload) {
  (void)state;
  atomic_store(((flag_payload_t*)payload)->flag, 1);
  return CUBE_OK;
}

static void submit_flush_runs(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 8);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  /* Let the runner go to sleep first, so that the wake-up path is used. */
  sleep_us(20000);
  atomic_int flag;
  atomic_init(&flag, 0);
  flag_payload_t p = {&flag};
  CHECK_OK(cube__submit(s, cube__stream_current_id(), task_set_flag, &p, sizeof(p), NULL));
  cube__device_flush(cube__service_device(s));
  uint64_t deadline = cube__now_ns() + 1000000000ull;
  while (!atomic_load(&flag) && cube__now_ns() < deadline) sleep_us(100);
  CHECK(atomic_load(&flag) == 1);
  cube__queue_shutdown(key);
}

CUBE_TEST(submit_flush_runs_within_1s_threaded) { submit_flush_runs(CUBE_QUEUE_THREADED); }
CUBE_TEST(submit_flush_runs_within_1s_inline) { submit_flush_runs(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * channel.rs: payload drops run exactly once, after execution
 * ------------------------------------------------------------------------- */

typedef struct {
  atomic_int* drops;
  atomic_int* runs;
  atomic_int* drops_seen_at_run;
} drop_small_t;

static cube_status_t task_drop_probe(void* state, void* payload) {
  (void)state;
  drop_small_t* p = (drop_small_t*)payload;
  atomic_store(p->drops_seen_at_run, atomic_load(p->drops));
  atomic_fetch_add(p->runs, 1);
  return CUBE_OK;
}

static void drop_probe(void* payload) { atomic_fetch_add(((drop_small_t*)payload)->drops, 1); }

static void drop_once_after_execution(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 9);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  atomic_int drops, runs, seen;
  atomic_init(&drops, 0);
  atomic_init(&runs, 0);
  atomic_init(&seen, -1);
  drop_small_t p = {&drops, &runs, &seen};
  CHECK_OK(cube__submit(s, cube__stream_current_id(), task_drop_probe, &p, sizeof(p), drop_probe));
  (void)read_value(s);
  CHECK(atomic_load(&runs) == 1);
  CHECK(atomic_load(&drops) == 1);
  CHECK(atomic_load(&seen) == 0); /* not dropped before it ran */
  cube__queue_shutdown(key);
  CHECK(atomic_load(&drops) == 1);
}

CUBE_TEST(drop_once_after_execution_threaded) { drop_once_after_execution(CUBE_QUEUE_THREADED); }
CUBE_TEST(drop_once_after_execution_inline) { drop_once_after_execution(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * channel.rs: 128-byte payload (inline path), 8 KiB payload (heap path)
 * ------------------------------------------------------------------------- */

typedef struct {
  uint64_t a;
  unsigned char fill[112];
  uint64_t b;
} payload128_t;
_Static_assert(sizeof(payload128_t) == 128, "payload128_t");

typedef struct {
  uint64_t a;
  unsigned char fill[8192 - 16];
  uint64_t b;
} payload8k_t;
_Static_assert(sizeof(payload8k_t) == 8192, "payload8k_t");

static bool fill_ok(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != (unsigned char)(i * 7 + 3)) return false;
  return true;
}
static void fill_set(unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(i * 7 + 3);
}

static cube_status_t task_sum128(void* state, void* payload) {
  payload128_t* p = (payload128_t*)payload;
  if (!fill_ok(p->fill, sizeof(p->fill))) return cube__status_make(CUBE_STATUS_INTERNAL, "bad copy");
  ((counter_t*)state)->value = p->a + p->b;
  return CUBE_OK;
}

static cube_status_t task_sum8k(void* state, void* payload) {
  payload8k_t* p = (payload8k_t*)payload;
  if (!fill_ok(p->fill, sizeof(p->fill))) return cube__status_make(CUBE_STATUS_INTERNAL, "bad copy");
  ((counter_t*)state)->value = p->a + p->b;
  return CUBE_OK;
}

static void payload_128_inline(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 10);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  payload128_t p;
  p.a = 42;
  p.b = 42;
  fill_set(p.fill, sizeof(p.fill));
  CHECK_OK(cube__submit(s, cube__stream_current_id(), task_sum128, &p, sizeof(p), NULL));
  memset(&p, 0, sizeof(p)); /* the queue holds its own copy */
  counter_t c = snapshot(s);
  CHECK_EQ_U64(c.value, 84);
  CHECK(c.failures == 0);
  cube__queue_shutdown(key);
}

CUBE_TEST(payload_128_inline_path_threaded) { payload_128_inline(CUBE_QUEUE_THREADED); }
CUBE_TEST(payload_128_inline_path_inline) { payload_128_inline(CUBE_QUEUE_INLINE); }

static void payload_8k_heap(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 11);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  payload8k_t* p = (payload8k_t*)malloc(sizeof(*p));
  REQUIRE(p);
  p->a = 7;
  p->b = 7;
  fill_set(p->fill, sizeof(p->fill));
  CHECK_OK(cube__submit(s, cube__stream_current_id(), task_sum8k, p, sizeof(*p), NULL));
  memset(p, 0, sizeof(*p));
  free(p);
  counter_t c = snapshot(s);
  CHECK_EQ_U64(c.value, 14);
  CHECK(c.failures == 0);
  cube__queue_shutdown(key);
}

CUBE_TEST(payload_8k_heap_path_threaded) { payload_8k_heap(CUBE_QUEUE_THREADED); }
CUBE_TEST(payload_8k_heap_path_inline) { payload_8k_heap(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * channel.rs: drop of an inline-stored (and of a heap-stored) payload once
 * ------------------------------------------------------------------------- */

typedef struct {
  atomic_int* drops;
  unsigned char pad[128 - sizeof(atomic_int*)];
} drop128_t;

typedef struct {
  atomic_int* drops;
  unsigned char pad[4096 - sizeof(atomic_int*)];
} drop4k_t;

static cube_status_t task_nop(void* state, void* payload) {
  (void)state;
  (void)payload;
  return CUBE_OK;
}

static void drop128(void* payload) { atomic_fetch_add(((drop128_t*)payload)->drops, 1); }
static void drop4k(void* payload) { atomic_fetch_add(((drop4k_t*)payload)->drops, 1); }

static void payload_drop_once(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 12);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  atomic_int d1, d2;
  atomic_init(&d1, 0);
  atomic_init(&d2, 0);
  drop128_t p1;
  memset(&p1, 0, sizeof(p1));
  p1.drops = &d1;
  drop4k_t* p2 = (drop4k_t*)calloc(1, sizeof(*p2));
  REQUIRE(p2);
  p2->drops = &d2;
  CHECK_OK(cube__submit(s, cube__stream_current_id(), task_nop, &p1, sizeof(p1), drop128));
  CHECK_OK(cube__submit(s, cube__stream_current_id(), task_nop, p2, sizeof(*p2), drop4k));
  free(p2);
  (void)read_value(s);
  CHECK(atomic_load(&d1) == 1);
  CHECK(atomic_load(&d2) == 1);
  cube__queue_shutdown(key);
  CHECK(atomic_load(&d1) == 1);
  CHECK(atomic_load(&d2) == 1);
}

CUBE_TEST(inline_payload_drop_once_threaded) { payload_drop_once(CUBE_QUEUE_THREADED); }
CUBE_TEST(inline_payload_drop_once_inline) { payload_drop_once(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * channel.rs: 4 threads racing service_get create it exactly once
 * ------------------------------------------------------------------------- */

typedef struct {
  cube__device_key_t key;
  cube_queue_mode_t mode;
  counter_args_t* args;
  pthread_barrier_t* barrier;
  cube__service_t* got;
  int failures;
} race_thread_t;

static void* race_thread(void* p) {
  race_thread_t* t = (race_thread_t*)p;
  pthread_barrier_wait(t->barrier);
  cube_status_t st = cube__service_get(t->key, t->mode, &counter_vt, t->args, &t->got);
  if (st != CUBE_OK) t->failures++;
  cube_status_free(st);
  return NULL;
}

static void create_once_under_race(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 13);
  enum { N = 4 };
  counter_args_t args;
  atomic_init(&args.creates, 0);
  args.tag = 13;
  args.create_sleep_us = 2000;
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, N);
  pthread_t th[N];
  race_thread_t t[N];
  for (int i = 0; i < N; ++i) {
    t[i] = (race_thread_t){key, mode, &args, &barrier, NULL, 0};
    REQUIRE(pthread_create(&th[i], NULL, race_thread, &t[i]) == 0);
  }
  for (int i = 0; i < N; ++i) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&barrier);
  CHECK(atomic_load(&args.creates) == 1);
  for (int i = 0; i < N; ++i) {
    CHECK(t[i].failures == 0);
    CHECK(t[i].got != NULL && t[i].got == t[0].got);
  }
  CHECK(cube__service_exists(key, &counter_vt));
  CHECK(!cube__service_exists(key, &other_vt));
  cube__queue_shutdown(key);
}

CUBE_TEST(create_once_under_race_threaded) { create_once_under_race(CUBE_QUEUE_THREADED); }
CUBE_TEST(create_once_under_race_inline) { create_once_under_race(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * channel.rs: failing blocking call / exclusive, then the next call works
 * ------------------------------------------------------------------------- */

typedef struct {
  atomic_int drops;
} owned_t;

/* Takes ownership of its payload: drops it, then fails. */
static cube_status_t task_consume_and_fail(void* state, void* payload) {
  (void)state;
  atomic_fetch_add(&((owned_t*)payload)->drops, 1);
  return cube__status_make(CUBE_STATUS_INTERNAL, "boom: the task failed on purpose");
}

static void failing_blocking_then_works(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 14);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  owned_t o;
  atomic_init(&o.drops, 0);
  CHECK_STATUS(cube__submit_blocking(s, cube__stream_current_id(), task_consume_and_fail, &o),
               CUBE_STATUS_INTERNAL, "boom");
  CHECK(atomic_load(&o.drops) == 1);
  CHECK_EQ_U64(read_value(s), 0);
  counter_t c = snapshot(s);
  CHECK(c.failures == 0); /* blocking failures go to the caller, not task_failed */
  cube__queue_shutdown(key);
}

CUBE_TEST(failing_blocking_then_works_threaded) { failing_blocking_then_works(CUBE_QUEUE_THREADED); }
CUBE_TEST(failing_blocking_then_works_inline) { failing_blocking_then_works(CUBE_QUEUE_INLINE); }

static cube_status_t excl_fail(void* user) {
  atomic_fetch_add(&((owned_t*)user)->drops, 1);
  return cube__status_make(CUBE_STATUS_INTERNAL, "boom: exclusive failed on purpose");
}

static cube_status_t excl_seven(void* user) {
  *(int*)user = 7;
  return CUBE_OK;
}

static void failing_exclusive_then_works(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 15);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  cube__device_t* d = cube__service_device(s);
  owned_t o;
  atomic_init(&o.drops, 0);
  CHECK_STATUS(cube__exclusive(d, cube__stream_current_id(), excl_fail, &o), CUBE_STATUS_INTERNAL,
               "boom");
  CHECK(atomic_load(&o.drops) == 1);
  int v = 0;
  CHECK_OK(cube__exclusive(d, cube__stream_current_id(), excl_seven, &v));
  CHECK(v == 7);
  cube__queue_shutdown(key);
}

CUBE_TEST(failing_exclusive_then_works_threaded) {
  failing_exclusive_then_works(CUBE_QUEUE_THREADED);
}
CUBE_TEST(failing_exclusive_then_works_inline) { failing_exclusive_then_works(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * channel.rs: payload pointers are 64-byte aligned (inline and heap)
 * ------------------------------------------------------------------------- */

static cube_status_t task_check_aligned(void* state, void* payload) {
  counter_t* c = (counter_t*)state;
  c->aligned_runs++;
  if (((uintptr_t)payload & 63u) != 0) c->misaligned++;
  return CUBE_OK;
}

static void payload_alignment(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 16);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  unsigned char* buf = (unsigned char*)malloc(8192 + 1);
  REQUIRE(buf);
  memset(buf, 1, 8192 + 1);
  const size_t sizes[] = {1, 8, 64, 128, CUBE__TASK_INLINE_BYTES, CUBE__TASK_INLINE_BYTES + 1,
                          1000, 8192};
  size_t n = sizeof(sizes) / sizeof(sizes[0]);
  for (size_t i = 0; i < n; ++i)
    /* from an odd source address, to show the copy is realigned */
    CHECK_OK(cube__submit(s, cube__stream_current_id(), task_check_aligned, buf + 1, sizes[i],
                          NULL));
  free(buf);
  counter_t c = snapshot(s);
  CHECK_EQ_U64(c.aligned_runs, n);
  CHECK_EQ_U64(c.misaligned, 0);
  cube__queue_shutdown(key);
}

CUBE_TEST(payload_alignment_threaded) { payload_alignment(CUBE_QUEUE_THREADED); }
CUBE_TEST(payload_alignment_inline) { payload_alignment(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * reentrant.rs: 8 different services nested inside each other's tasks
 * ------------------------------------------------------------------------- */

typedef struct {
  cube__service_t* chain[8];
  int level;
  int blocking;
} nest_payload_t;

static cube_status_t task_nest(void* state, void* payload) {
  counter_t* c = (counter_t*)state;
  nest_payload_t p = *(nest_payload_t*)payload;
  c->value++;
  if (p.level == 7) return CUBE_OK;
  p.level++;
  if (p.blocking)
    return cube__submit_blocking(p.chain[p.level], cube__stream_current_id(), task_nest, &p);
  return cube__submit(p.chain[p.level], cube__stream_current_id(), task_nest, &p, sizeof(p), NULL);
}

static void nested_services(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 17);
  nest_payload_t p;
  memset(&p, 0, sizeof(p));
  for (int i = 0; i < 8; ++i) {
    p.chain[i] = get_service(key, mode, &nest_vts[i]);
    REQUIRE(p.chain[i]);
  }
  p.blocking = 1;
  CHECK_OK(cube__submit_blocking(p.chain[0], cube__stream_current_id(), task_nest, &p));
  p.blocking = 0;
  CHECK_OK(cube__submit(p.chain[0], cube__stream_current_id(), task_nest, &p, sizeof(p), NULL));
  for (int i = 0; i < 8; ++i) {
    counter_t c = snapshot(p.chain[i]);
    CHECK_EQ_U64(c.value, 2);
    CHECK(c.failures == 0);
  }
  cube__queue_shutdown(key);
}

CUBE_TEST(nested_eight_services_threaded) { nested_services(CUBE_QUEUE_THREADED); }
CUBE_TEST(nested_eight_services_inline) { nested_services(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * FIFO per producer: 8 threads x 20,000 submits
 * ------------------------------------------------------------------------- */

typedef struct {
  uint32_t producer;
  uint64_t seq;
} fifo_payload_t;

static cube_status_t task_fifo(void* state, void* payload) {
  counter_t* c = (counter_t*)state;
  fifo_payload_t* p = (fifo_payload_t*)payload;
  if (p->producer >= FIFO_PRODUCERS || c->expected[p->producer] != p->seq) c->fifo_errors++;
  if (p->producer < FIFO_PRODUCERS) c->expected[p->producer] = p->seq + 1;
  c->value++;
  return CUBE_OK;
}

typedef struct {
  cube__service_t* s;
  uint32_t producer;
  pthread_barrier_t* barrier;
  int failures;
} fifo_thread_t;

static void* fifo_thread(void* arg) {
  fifo_thread_t* t = (fifo_thread_t*)arg;
  pthread_barrier_wait(t->barrier);
  for (uint64_t i = 0; i < FIFO_PER_PRODUCER; ++i) {
    fifo_payload_t p = {t->producer, i};
    cube_status_t st = cube__submit(t->s, cube__stream_current_id(), task_fifo, &p, sizeof(p), NULL);
    if (st != CUBE_OK) t->failures++;
    cube_status_free(st);
  }
  return NULL;
}

static void fifo_per_producer(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 18);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, FIFO_PRODUCERS);
  pthread_t th[FIFO_PRODUCERS];
  fifo_thread_t t[FIFO_PRODUCERS];
  for (uint32_t i = 0; i < FIFO_PRODUCERS; ++i) {
    t[i] = (fifo_thread_t){s, i, &barrier, 0};
    REQUIRE(pthread_create(&th[i], NULL, fifo_thread, &t[i]) == 0);
  }
  for (int i = 0; i < FIFO_PRODUCERS; ++i) {
    pthread_join(th[i], NULL);
    CHECK(t[i].failures == 0);
  }
  pthread_barrier_destroy(&barrier);
  counter_t c = snapshot(s);
  CHECK_EQ_U64(c.value, (uint64_t)FIFO_PRODUCERS * FIFO_PER_PRODUCER);
  CHECK_EQ_U64(c.fifo_errors, 0);
  for (int i = 0; i < FIFO_PRODUCERS; ++i) CHECK_EQ_U64(c.expected[i], FIFO_PER_PRODUCER);
  cube__queue_shutdown(key);
}

CUBE_TEST(fifo_per_producer_threaded) { fifo_per_producer(CUBE_QUEUE_THREADED); }
CUBE_TEST(fifo_per_producer_inline) { fifo_per_producer(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * Shutdown runs what is queued and destroys each service once, newest first
 * ------------------------------------------------------------------------- */

static atomic_int g_gate;
static atomic_int g_shutdown_runs;
static atomic_int g_shutdown_drops;

static cube_status_t task_gated(void* state, void* payload) {
  (void)state;
  (void)payload;
  while (!atomic_load(&g_gate)) sched_yield();
  atomic_fetch_add(&g_shutdown_runs, 1);
  return CUBE_OK;
}

static cube_status_t task_count_run(void* state, void* payload) {
  (void)payload;
  ((counter_t*)state)->value++;
  atomic_fetch_add(&g_shutdown_runs, 1);
  return CUBE_OK;
}

static void drop_count_shutdown(void* payload) {
  (void)payload;
  atomic_fetch_add(&g_shutdown_drops, 1);
}

static void shutdown_runs_queued(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 19);
  counter_args_t a1, a2;
  atomic_init(&a1.creates, 0);
  atomic_init(&a2.creates, 0);
  a1.tag = 101;
  a2.tag = 102;
  a1.create_sleep_us = a2.create_sleep_us = 0;
  cube__service_t *s1 = NULL, *s2 = NULL;
  REQUIRE_OK(cube__service_get(key, mode, &counter_vt, &a1, &s1));
  REQUIRE_OK(cube__service_get(key, mode, &other_vt, &a2, &s2));
  atomic_store(&g_gate, mode == CUBE_QUEUE_INLINE); /* inline runs at once: no gate */
  atomic_store(&g_shutdown_runs, 0);
  atomic_store(&g_shutdown_drops, 0);
  atomic_store(&g_destroy_n, 0);
  enum { N = 500 };
  uint64_t token = 1;
  CHECK_OK(cube__submit(s1, cube__stream_current_id(), task_gated, &token, sizeof(token),
                        drop_count_shutdown));
  for (int i = 0; i < N; ++i)
    CHECK_OK(cube__submit(i % 2 ? s2 : s1, cube__stream_current_id(), task_count_run, &token,
                          sizeof(token), drop_count_shutdown));
  if (mode != CUBE_QUEUE_INLINE) CHECK(atomic_load(&g_shutdown_runs) == 0); /* still queued */
  atomic_store(&g_gate, 1);
  cube__queue_shutdown(key);
  CHECK(atomic_load(&g_shutdown_runs) == N + 1);
  CHECK(atomic_load(&g_shutdown_drops) == N + 1);
  CHECK(atomic_load(&g_destroy_n) == 2);
  CHECK(g_destroy_log[0] == 102); /* newest first */
  CHECK(g_destroy_log[1] == 101);
  CHECK(!cube__service_exists(key, &counter_vt));
  CHECK(!cube__service_exists(key, &other_vt));
  /* A later get creates a fresh device and state. */
  cube__service_t* again = NULL;
  REQUIRE_OK(cube__service_get(key, mode, &counter_vt, &a1, &again));
  CHECK(atomic_load(&a1.creates) == 2);
  CHECK_EQ_U64(read_value(again), 0);
  cube__queue_shutdown(key);
  CHECK(atomic_load(&g_destroy_n) == 3);
  /* Shutting down an unknown device is a no-op. */
  cube__queue_shutdown(key);
}

CUBE_TEST(shutdown_runs_queued_and_destroys_threaded) { shutdown_runs_queued(CUBE_QUEUE_THREADED); }
CUBE_TEST(shutdown_runs_queued_and_destroys_inline) { shutdown_runs_queued(CUBE_QUEUE_INLINE); }

/* A destroy function may call into other services of its device. */
static const cube__service_vtable_t* g_user_target;
static cube__device_key_t g_user_key;
static atomic_int g_user_destroy_calls;

static void user_destroy(void* state) {
  cube__service_t* target = NULL;
  cube_status_t st = cube__service_get(g_user_key, CUBE_QUEUE_DEFAULT, g_user_target, NULL, &target);
  uint64_t v = 0;
  if (st == CUBE_OK) st = cube__submit_blocking(target, cube__stream_current_id(), task_read, &v);
  if (st == CUBE_OK && v == 3) atomic_fetch_add(&g_user_destroy_calls, 1);
  cube_status_free(st);
  free(state);
}

static const cube__service_vtable_t user_vt = {"user", counter_create, user_destroy,
                                               counter_task_failed};

static void shutdown_destroy_uses_other_service(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 20);
  cube__service_t* base = get_service(key, mode, &counter_vt);
  cube__service_t* user = get_service(key, mode, &user_vt); /* created after: destroyed first */
  REQUIRE(base && user);
  for (int i = 0; i < 3; ++i)
    CHECK_OK(cube__submit(base, cube__stream_current_id(), task_inc, NULL, 0, NULL));
  g_user_target = &counter_vt;
  g_user_key = key;
  atomic_store(&g_user_destroy_calls, 0);
  cube__queue_shutdown(key);
  CHECK(atomic_load(&g_user_destroy_calls) == 1);
}

CUBE_TEST(shutdown_destroy_uses_other_service_threaded) {
  shutdown_destroy_uses_other_service(CUBE_QUEUE_THREADED);
}
CUBE_TEST(shutdown_destroy_uses_other_service_inline) {
  shutdown_destroy_uses_other_service(CUBE_QUEUE_INLINE);
}

static void shutdown_all_devices(cube_queue_mode_t mode) {
  cube__device_key_t k1 = key_for(mode, 21), k2 = key_for(mode, 22);
  cube__service_t* s1 = get_service(k1, mode, &counter_vt);
  cube__service_t* s2 = get_service(k2, mode, &counter_vt);
  REQUIRE(s1 && s2);
  CHECK_OK(cube__submit(s1, cube__stream_current_id(), task_inc, NULL, 0, NULL));
  CHECK_OK(cube__submit(s2, cube__stream_current_id(), task_inc, NULL, 0, NULL));
  cube__queue_shutdown_all();
  CHECK(!cube__service_exists(k1, &counter_vt));
  CHECK(!cube__service_exists(k2, &counter_vt));
}

CUBE_TEST(shutdown_all_threaded) { shutdown_all_devices(CUBE_QUEUE_THREADED); }
CUBE_TEST(shutdown_all_inline) { shutdown_all_devices(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * insert: ALREADY_EXISTS for an existing service
 * ------------------------------------------------------------------------- */

static void insert_already_exists(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 23);
  counter_t* mine = (counter_t*)calloc(1, sizeof(*mine));
  REQUIRE(mine);
  mine->value = 11;
  cube__service_t* s = NULL;
  REQUIRE_OK(cube__service_insert(key, mode, &counter_vt, mine, &s));
  CHECK(cube__service_exists(key, &counter_vt));
  CHECK_EQ_U64(read_value(s), 11);
  counter_t* second = (counter_t*)calloc(1, sizeof(*second));
  REQUIRE(second);
  cube__service_t* s2 = (cube__service_t*)(uintptr_t)1;
  CHECK_STATUS(cube__service_insert(key, mode, &counter_vt, second, &s2),
               CUBE_STATUS_ALREADY_EXISTS, "counter");
  CHECK(s2 == NULL);
  free(second); /* not taken */
  /* get returns the inserted state. */
  cube__service_t* got = get_service(key, mode, &counter_vt);
  CHECK(got == s);
  /* A service created by get cannot be inserted either. */
  cube__service_t* other = get_service(key, mode, &other_vt);
  CHECK(other != NULL);
  counter_t* third = (counter_t*)calloc(1, sizeof(*third));
  REQUIRE(third);
  CHECK_STATUS(cube__service_insert(key, mode, &other_vt, third, NULL), CUBE_STATUS_ALREADY_EXISTS,
               "other");
  free(third);
  cube__queue_shutdown(key); /* destroys |mine| */
}

CUBE_TEST(insert_already_exists_threaded) { insert_already_exists(CUBE_QUEUE_THREADED); }
CUBE_TEST(insert_already_exists_inline) { insert_already_exists(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * Calls from inside exclusive on the same device run inline
 * ------------------------------------------------------------------------- */

typedef struct {
  cube__service_t* s;
  pthread_t excl_thread;
  pthread_t task_thread;
  bool current_in_excl;
  bool current_in_task;
  bool submit_ran_at_once;
  bool nested_excl_ran;
  cube_status_t error;
} excl_ctx_t;

static cube_status_t task_where(void* state, void* payload) {
  (void)state;
  excl_ctx_t* x = (excl_ctx_t*)payload;
  x->task_thread = pthread_self();
  x->current_in_task = cube__device_is_current(cube__service_device(x->s));
  return CUBE_OK;
}

static cube_status_t excl_inner(void* user) {
  *(bool*)user = true;
  return CUBE_OK;
}

static cube_status_t excl_calls(void* user) {
  excl_ctx_t* x = (excl_ctx_t*)user;
  cube__device_t* d = cube__service_device(x->s);
  x->excl_thread = pthread_self();
  x->current_in_excl = cube__device_is_current(d);
  CUBE_RETURN_IF_ERROR(cube__submit_blocking(x->s, cube__stream_current_id(), task_where, x));
  uint64_t before = 0, after = 0;
  CUBE_RETURN_IF_ERROR(cube__submit_blocking(x->s, cube__stream_current_id(), task_read, &before));
  CUBE_RETURN_IF_ERROR(cube__submit(x->s, cube__stream_current_id(), task_inc, NULL, 0, NULL));
  CUBE_RETURN_IF_ERROR(cube__submit_blocking(x->s, cube__stream_current_id(), task_read, &after));
  x->submit_ran_at_once = after == before + 1;
  return cube__exclusive(d, cube__stream_current_id(), excl_inner, &x->nested_excl_ran);
}

static void blocking_inside_exclusive(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 24);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  cube__device_t* d = cube__service_device(s);
  CHECK(!cube__device_is_current(d));
  CHECK(cube__device_is_blocking(d) == (mode == CUBE_QUEUE_INLINE));
  CHECK(cube__device_key(d).type == key.type && cube__device_key(d).index == key.index);
  excl_ctx_t x;
  memset(&x, 0, sizeof(x));
  x.s = s;
  CHECK_OK(cube__exclusive(d, cube__stream_current_id(), excl_calls, &x));
  CHECK(x.current_in_excl);
  CHECK(x.current_in_task);
  CHECK(pthread_equal(x.excl_thread, x.task_thread));
  if (mode == CUBE_QUEUE_INLINE) CHECK(pthread_equal(x.excl_thread, pthread_self()));
  else CHECK(!pthread_equal(x.excl_thread, pthread_self()));
  CHECK(x.submit_ran_at_once);
  CHECK(x.nested_excl_ran);
  CHECK(!cube__device_is_current(d));
  cube__queue_shutdown(key);
}

CUBE_TEST(blocking_inside_exclusive_runs_inline_threaded) {
  blocking_inside_exclusive(CUBE_QUEUE_THREADED);
}
CUBE_TEST(blocking_inside_exclusive_runs_inline_inline) {
  blocking_inside_exclusive(CUBE_QUEUE_INLINE);
}

/* ---------------------------------------------------------------------------
 * Stream ids: a task sees its submitter's stream id
 * ------------------------------------------------------------------------- */

static cube_status_t task_record_stream(void* state, void* payload) {
  (void)payload;
  ((counter_t*)state)->seen_stream = cube__stream_current_id();
  return CUBE_OK;
}

typedef struct {
  cube__service_t* s;
  uint64_t my_id;
  uint64_t seen_submit;
  uint64_t seen_blocking;
  uint64_t seen_explicit;
  uint64_t explicit_id;
  uint64_t my_id_after;
  int failures;
} stream_thread_t;

static void* stream_thread(void* arg) {
  stream_thread_t* t = (stream_thread_t*)arg;
  t->my_id = cube__stream_current_id();
  counter_t c;
  cube_status_t st = cube__submit(t->s, t->my_id, task_record_stream, NULL, 0, NULL);
  if (st == CUBE_OK) st = cube__submit_blocking(t->s, t->my_id, task_snapshot, &c);
  if (st == CUBE_OK) t->seen_submit = c.seen_stream;
  if (st == CUBE_OK) st = cube__submit_blocking(t->s, t->my_id, task_record_stream, NULL);
  if (st == CUBE_OK) st = cube__submit_blocking(t->s, t->my_id, task_snapshot, &c);
  if (st == CUBE_OK) t->seen_blocking = c.seen_stream;
  t->explicit_id = cube__stream_new_id();
  if (st == CUBE_OK) st = cube__submit_blocking(t->s, t->explicit_id, task_record_stream, NULL);
  if (st == CUBE_OK) st = cube__submit_blocking(t->s, t->my_id, task_snapshot, &c);
  if (st == CUBE_OK) t->seen_explicit = c.seen_stream;
  t->my_id_after = cube__stream_current_id();
  if (st != CUBE_OK) t->failures++;
  cube_status_free(st);
  return NULL;
}

static void stream_id_matches_submitter(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 25);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  uint64_t main_id = cube__stream_current_id();
  CHECK(cube__stream_current_id() == main_id); /* stable */
  stream_thread_t t[2];
  for (int i = 0; i < 2; ++i) {
    memset(&t[i], 0, sizeof(t[i]));
    t[i].s = s;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, stream_thread, &t[i]) == 0);
    pthread_join(th, NULL);
    CHECK(t[i].failures == 0);
    CHECK(t[i].my_id != main_id);
    CHECK_EQ_U64(t[i].seen_submit, t[i].my_id);
    CHECK_EQ_U64(t[i].seen_blocking, t[i].my_id);
    CHECK_EQ_U64(t[i].seen_explicit, t[i].explicit_id);
    CHECK_EQ_U64(t[i].my_id_after, t[i].my_id); /* restored after the inline run */
    CHECK(t[i].explicit_id != t[i].my_id);
  }
  /* Ids come from one counter, in order of first use. */
  CHECK(t[1].my_id > t[0].explicit_id);
  CHECK(t[0].explicit_id > t[0].my_id);
  uint64_t fresh = cube__stream_new_id();
  CHECK(fresh > t[1].explicit_id);
  CHECK(cube__stream_current_id() == main_id);
  cube__queue_shutdown(key);
}

CUBE_TEST(stream_id_matches_submitter_threaded) { stream_id_matches_submitter(CUBE_QUEUE_THREADED); }
CUBE_TEST(stream_id_matches_submitter_inline) { stream_id_matches_submitter(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * Fire-and-forget failures go to task_failed (or stderr)
 * ------------------------------------------------------------------------- */

static void task_failure_reported(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 26);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  cube__service_t* q = get_service(key, mode, &quiet_vt);
  REQUIRE(s && q);
  uint64_t sid = cube__stream_new_id();
  CHECK_OK(cube__submit(s, sid, task_fail, NULL, 0, NULL));
  counter_t c = snapshot(s);
  CHECK(c.failures == 1);
  CHECK(c.failed_code == CUBE_STATUS_INTERNAL);
  CHECK_EQ_U64(c.failed_stream, sid);
  /* Without a handler the failure is logged and freed (ASan checks the free). */
  CHECK_OK(cube__submit(q, sid, task_fail, NULL, 0, NULL));
  CHECK_EQ_U64(read_value(q), 0);
  cube__queue_shutdown(key);
}

CUBE_TEST(task_failure_reported_threaded) { task_failure_reported(CUBE_QUEUE_THREADED); }
CUBE_TEST(task_failure_reported_inline) { task_failure_reported(CUBE_QUEUE_INLINE); }

/* ---------------------------------------------------------------------------
 * Threaded only: the runner thread's name; tasks run on it
 * ------------------------------------------------------------------------- */

typedef struct {
  char name[32];
  bool current;
} runner_info_t;

static cube_status_t task_runner_info(void* state, void* payload) {
  (void)state;
  runner_info_t* r = (runner_info_t*)payload;
  pthread_getname_np(pthread_self(), r->name, sizeof(r->name));
  r->current = true;
  return CUBE_OK;
}

CUBE_TEST(runner_thread_named_threaded) {
  cube__device_key_t key = key_for(CUBE_QUEUE_THREADED, 27);
  cube__service_t* s = get_service(key, CUBE_QUEUE_THREADED, &counter_vt);
  REQUIRE(s);
  runner_info_t r;
  memset(&r, 0, sizeof(r));
  CHECK_OK(cube__submit_blocking(s, cube__stream_current_id(), task_runner_info, &r));
  CHECK(strcmp(r.name, "cube-dev-1000-2") == 0); /* "cube-dev-1000-27" cut to 15 chars */
  CHECK(r.current);
  cube__queue_shutdown(key);
}

/* ---------------------------------------------------------------------------
 * Mode selection by CUBE_DEVICE_QUEUE; misuse is refused, not aborted
 * ------------------------------------------------------------------------- */

/* CUBE_DEVICE_QUEUE (NULL: unset), made visible: the option table reads
 * the environment once, and again after cube_shutdown, which is
 * cube__options_reset at this level (no client layer). */
static void queue_env(const char* mode) {
  if (mode)
    setenv("CUBE_DEVICE_QUEUE", mode, 1);
  else
    unsetenv("CUBE_DEVICE_QUEUE");
  cube__options_reset();
}

CUBE_TEST(env_queue_mode) {
  cube__device_key_t k1 = {1002, 1}, k2 = {1002, 2}, k3 = {1002, 3}, k4 = {1002, 4};
  cube__service_t* s = NULL;
  queue_env("inline");
  CHECK_OK(cube__service_get(k1, CUBE_QUEUE_DEFAULT, &counter_vt, NULL, &s));
  CHECK(s && cube__device_is_blocking(cube__service_device(s)));
  /* The device keeps its mode whatever a later call asks for. */
  cube__service_t* s2 = NULL;
  CHECK_OK(cube__service_get(k1, CUBE_QUEUE_THREADED, &other_vt, NULL, &s2));
  CHECK(s2 && cube__service_device(s2) == cube__service_device(s));
  queue_env("threaded");
  CHECK_OK(cube__service_get(k2, CUBE_QUEUE_DEFAULT, &counter_vt, NULL, &s));
  CHECK(s && !cube__device_is_blocking(cube__service_device(s)));
  queue_env("sideways");
  s = (cube__service_t*)(uintptr_t)1;
  CHECK_STATUS(cube__service_get(k3, CUBE_QUEUE_DEFAULT, &counter_vt, NULL, &s),
               CUBE_STATUS_INVALID_ARGUMENT, "CUBE_DEVICE_QUEUE", "sideways");
  CHECK(s == NULL);
  /* An explicit mode does not read the variable. */
  CHECK_OK(cube__service_get(k3, CUBE_QUEUE_INLINE, &counter_vt, NULL, &s));
  queue_env(NULL);
  CHECK_OK(cube__service_get(k4, CUBE_QUEUE_DEFAULT, &counter_vt, NULL, &s));
  CHECK(s && !cube__device_is_blocking(cube__service_device(s)));
  cube__queue_shutdown(k1);
  cube__queue_shutdown(k2);
  cube__queue_shutdown(k3);
  cube__queue_shutdown(k4);
}

static const cube__service_vtable_t no_create_vt = {"no-create", NULL, NULL, NULL};

CUBE_TEST(invalid_arguments_refused) {
  cube__device_key_t key = {1002, 5};
  cube__service_t* s = NULL;
  CHECK_STATUS(cube__service_get(key, CUBE_QUEUE_THREADED, NULL, NULL, &s),
               CUBE_STATUS_INVALID_ARGUMENT, "vtable");
  CHECK_STATUS(cube__service_get(key, CUBE_QUEUE_THREADED, &no_create_vt, NULL, &s),
               CUBE_STATUS_INVALID_ARGUMENT, "no-create");
  CHECK_STATUS(cube__service_get(key, CUBE_QUEUE_THREADED, &counter_vt, NULL, NULL),
               CUBE_STATUS_INVALID_ARGUMENT, "NULL");
  REQUIRE_OK(cube__service_get(key, CUBE_QUEUE_THREADED, &counter_vt, NULL, &s));
  CHECK_STATUS(cube__submit(NULL, 0, task_inc, NULL, 0, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "service");
  CHECK_STATUS(cube__submit(s, 0, NULL, NULL, 0, NULL), CUBE_STATUS_INVALID_ARGUMENT, "task");
  CHECK_STATUS(cube__submit(s, 0, task_inc, NULL, 8, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "payload");
  CHECK_STATUS(cube__submit_blocking(s, 0, NULL, NULL), CUBE_STATUS_INVALID_ARGUMENT, "task");
  CHECK_STATUS(cube__exclusive(NULL, 0, excl_seven, NULL), CUBE_STATUS_INVALID_ARGUMENT, "device");
  cube__queue_shutdown(key);
}

/* A create function asking for its own service is refused, not deadlocked. */
static cube_status_t self_create(cube__device_key_t key, void* arg, void** out);
static const cube__service_vtable_t self_vt = {"self-create", self_create, counter_destroy, NULL};
static cube_status_t g_self_create_status;

static cube_status_t self_create(cube__device_key_t key, void* arg, void** out) {
  cube__service_t* s = NULL;
  g_self_create_status = cube__service_get(key, CUBE_QUEUE_DEFAULT, &self_vt, arg, &s);
  return counter_create(key, NULL, out);
}

CUBE_TEST(create_requesting_itself_refused) {
  cube__device_key_t key = {1002, 6};
  cube__service_t* s = NULL;
  CHECK_OK(cube__service_get(key, CUBE_QUEUE_THREADED, &self_vt, NULL, &s));
  CHECK_STATUS(g_self_create_status, CUBE_STATUS_FAILED_PRECONDITION, "self-create");
  g_self_create_status = CUBE_OK;
  cube__queue_shutdown(key);
}

/* ---------------------------------------------------------------------------
 * Threaded only: a full ring makes producers wait, nothing is lost
 * ------------------------------------------------------------------------- */

static void* open_gate_later(void* arg) {
  (void)arg;
  sleep_us(20000);
  atomic_store(&g_gate, 1);
  return NULL;
}

CUBE_TEST(ring_full_producer_waits_threaded) {
  cube__device_key_t key = key_for(CUBE_QUEUE_THREADED, 28);
  cube__service_t* s = get_service(key, CUBE_QUEUE_THREADED, &counter_vt);
  REQUIRE(s);
  atomic_store(&g_gate, 0);
  atomic_store(&g_shutdown_runs, 0);
  CHECK_OK(cube__submit(s, cube__stream_current_id(), task_gated, NULL, 0, NULL));
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, open_gate_later, NULL) == 0);
  enum { N = 5000 }; /* > 4 rings' worth while the runner is held */
  for (int i = 0; i < N; ++i)
    CHECK_OK(cube__submit(s, cube__stream_current_id(), task_inc, NULL, 0, NULL));
  CHECK(atomic_load(&g_gate) == 1); /* we could not have queued them all before */
  pthread_join(th, NULL);
  CHECK_EQ_U64(read_value(s), N);
  CHECK(atomic_load(&g_shutdown_runs) == 1);
  cube__queue_shutdown(key);
}

/* Threaded only: a submit wakes a sleeping runner without any flush. */
CUBE_TEST(submit_wakes_sleeping_runner_threaded) {
  cube__device_key_t key = key_for(CUBE_QUEUE_THREADED, 29);
  cube__service_t* s = get_service(key, CUBE_QUEUE_THREADED, &counter_vt);
  REQUIRE(s);
  for (int round = 0; round < 30; ++round) {
    sleep_us(round % 3 == 0 ? 2000 : 30 * round); /* asleep, or about to sleep */
    atomic_int flag;
    atomic_init(&flag, 0);
    flag_payload_t p = {&flag};
    CHECK_OK(cube__submit(s, cube__stream_current_id(), task_set_flag, &p, sizeof(p), NULL));
    uint64_t deadline = cube__now_ns() + 1000000000ull;
    while (!atomic_load(&flag) && cube__now_ns() < deadline) sched_yield();
    REQUIRE(atomic_load(&flag) == 1);
  }
  cube__queue_shutdown(key);
}

/* ---------------------------------------------------------------------------
 * cube__submit_here: work that runs on the submitting thread when the device
 * has nothing before it, else is queued in the same place
 * ------------------------------------------------------------------------- */

/* What one here-task saw, wherever it ran. */
typedef struct here_probe {
  pthread_t caller;
  int ran;               /* times it ran (here or queued) */
  int on_caller;         /* ran on |caller| */
  int current;           /* cube__device_is_current held inside */
  uint64_t value;        /* the counter's value when it ran */
  uint64_t stream;       /* the current stream id inside */
  int prepared;          /* prepare ran */
  cube_status_t ret;     /* what here returns (consumed by the queue) */
  cube__service_t* other; /* a service of the same device to call inside, or NULL */
  cube__service_t* self;  /* this service, to call (refused) inside, or NULL */
  cube_status_t nested_other, nested_self;
  long sleep_us;         /* inside, before returning */
  atomic_int* entered;   /* set once inside, or NULL */
} here_probe_t;

static cube_status_t here_probe_run(void* state, here_probe_t* p) {
  counter_t* c = state;
  if (p->entered) atomic_store(p->entered, 1);
  p->ran++;
  p->on_caller = pthread_equal(pthread_self(), p->caller);
  p->value = c->value;
  p->stream = cube__stream_current_id();
  if (p->self) p->current = cube__device_is_current(cube__service_device(p->self));
  if (p->other) p->nested_other = cube__submit_blocking(p->other, p->stream, task_inc, NULL);
  if (p->self) p->nested_self = cube__submit_blocking(p->self, p->stream, task_inc, NULL);
  if (p->sleep_us) sleep_us(p->sleep_us);
  cube_status_t r = p->ret;
  p->ret = CUBE_OK;
  return r;
}

static cube_status_t here_fn(void* state, void* arg) { return here_probe_run(state, arg); }

/* The queued form: the payload holds the probe's address. */
static cube_status_t here_task_fn(void* state, void* payload) {
  return here_probe_run(state, *(here_probe_t**)payload);
}

static cube_status_t here_prepare(void* payload, void* arg) {
  here_probe_t* p = arg;
  p->prepared++;
  *(here_probe_t**)payload = p;
  return CUBE_OK;
}

static cube_status_t here_prepare_fail(void* payload, void* arg) {
  (void)payload;
  ((here_probe_t*)arg)->prepared++;
  return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "prepare: no memory (test)");
}

static cube__here_task_t here_task(here_probe_t* p, uint64_t wait_ns) {
  cube__here_task_t t = {here_fn, p, here_task_fn, sizeof(here_probe_t*), here_prepare, p, NULL,
                         wait_ns, false};
  return t;
}

static void here_probe_init(here_probe_t* p) {
  memset(p, 0, sizeof(*p));
  p->caller = pthread_self();
}

/* Nothing queued (a blocking call just returned: its cell is released before
 * the caller wakes): the work runs here, at once, with the device to itself
 * (calls into another service run inline, into its own are refused), its
 * status is the call's, and later work runs after it. */
static void submit_here_idle(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 30);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  cube__service_t* o = get_service(key, mode, &other_vt);
  REQUIRE(s && o);
  uint64_t sid = cube__stream_new_id();
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 3; ++i) CHECK_OK(cube__submit(s, sid, task_inc, NULL, 0, NULL));
    CHECK_EQ_U64(read_value(s), (uint64_t)round * 3 + 3);
    here_probe_t p;
    here_probe_init(&p);
    p.other = o;
    p.self = s;
    if (round % 2) p.ret = cube__status_make(CUBE_STATUS_ABORTED, "here failed (test)");
    cube__here_task_t t = here_task(&p, 0);
    bool here = false;
    cube_status_t st = cube__submit_here(s, sid, &t, &here);
    CHECK(here);
    CHECK(p.ran == 1 && p.on_caller && p.prepared == 0 && p.current);
    CHECK_EQ_U64(p.value, (uint64_t)round * 3 + 3);
    CHECK_EQ_U64(p.stream, sid);
    CHECK_OK(p.nested_other);
    CHECK_STATUS(p.nested_self, CUBE_STATUS_FAILED_PRECONDITION, "re-entrant");
    if (round % 2)
      CHECK_STATUS(st, CUBE_STATUS_ABORTED, "here failed");
    else
      CHECK_OK(st);
    CHECK(!cube__device_is_current(cube__service_device(s)));
  }
  counter_t* c = cube__service_state_unsafe(s);
  CHECK_EQ_U64(c->failures, 0); /* here's failures are the caller's, not task_failed's */
  cube__queue_shutdown(key);
}

CUBE_TEST(submit_here_idle_runs_on_caller_threaded) { submit_here_idle(CUBE_QUEUE_THREADED); }
CUBE_TEST(submit_here_idle_runs_on_caller_inline) { submit_here_idle(CUBE_QUEUE_INLINE); }

/* Threaded: with the runner busy, the work is queued in the call's place:
 * after what was queued before, before what is queued after. A wait shorter
 * than the busy task queues too; a wait that outlasts it runs the work here
 * once the task finished. */
CUBE_TEST(submit_here_queues_behind_busy_runner_threaded) {
  cube__device_key_t key = key_for(CUBE_QUEUE_THREADED, 31);
  cube__service_t* s = get_service(key, CUBE_QUEUE_THREADED, &counter_vt);
  REQUIRE(s);
  uint64_t sid = cube__stream_current_id();
  atomic_store(&g_gate, 0);
  CHECK_OK(cube__submit(s, sid, task_inc, NULL, 0, NULL));
  CHECK_OK(cube__submit(s, sid, task_gated, NULL, 0, NULL));
  here_probe_t p[2];
  here_probe_init(&p[0]);
  here_probe_init(&p[1]);
  cube__here_task_t t0 = here_task(&p[0], 0), t1 = here_task(&p[1], 2000000 /* 2 ms */);
  bool here = true;
  uint64_t t_start = cube__now_ns();
  CHECK_OK(cube__submit_here(s, sid, &t0, &here));
  CHECK(!here && p[0].prepared == 1);
  here = true;
  CHECK_OK(cube__submit_here(s, sid, &t1, &here));
  CHECK(!here && p[1].prepared == 1);
  CHECK(cube__now_ns() - t_start >= 2000000); /* it did wait */
  CHECK_OK(cube__submit(s, sid, task_inc, NULL, 0, NULL));
  CHECK(p[0].ran == 0 && p[1].ran == 0); /* behind the gate */
  atomic_store(&g_gate, 1);
  CHECK_EQ_U64(read_value(s), 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(p[i].ran == 1 && !p[i].on_caller);
    CHECK_EQ_U64(p[i].value, 1); /* after the first inc, before the last */
    CHECK_EQ_U64(p[i].stream, sid);
  }
  /* A wait that outlasts the busy task: here, after it. */
  atomic_store(&g_gate, 0);
  CHECK_OK(cube__submit(s, sid, task_gated, NULL, 0, NULL));
  CHECK_OK(cube__submit(s, sid, task_inc, NULL, 0, NULL));
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, open_gate_later, NULL) == 0); /* after 20 ms */
  here_probe_t q;
  here_probe_init(&q);
  cube__here_task_t tq = here_task(&q, 10000000000ull /* 10 s */);
  here = false;
  CHECK_OK(cube__submit_here(s, sid, &tq, &here));
  pthread_join(th, NULL);
  CHECK(here && q.ran == 1 && q.on_caller && q.prepared == 0);
  CHECK_EQ_U64(q.value, 3);
  CHECK_EQ_U64(read_value(s), 3);
  cube__queue_shutdown(key);
}

/* Threaded: a failing prepare returns its status and queues nothing; the
 * place it took is stepped over and later work runs. */
CUBE_TEST(submit_here_prepare_failure_threaded) {
  cube__device_key_t key = key_for(CUBE_QUEUE_THREADED, 32);
  cube__service_t* s = get_service(key, CUBE_QUEUE_THREADED, &counter_vt);
  REQUIRE(s);
  uint64_t sid = cube__stream_current_id();
  atomic_store(&g_gate, 0);
  CHECK_OK(cube__submit(s, sid, task_gated, NULL, 0, NULL));
  here_probe_t p;
  here_probe_init(&p);
  cube__here_task_t t = here_task(&p, 0);
  t.prepare = here_prepare_fail;
  bool here = true;
  CHECK_STATUS(cube__submit_here(s, sid, &t, &here), CUBE_STATUS_OUT_OF_MEMORY, "prepare");
  CHECK(!here && p.prepared == 1);
  CHECK_OK(cube__submit(s, sid, task_inc, NULL, 0, NULL));
  atomic_store(&g_gate, 1);
  CHECK_EQ_U64(read_value(s), 1);
  CHECK(p.ran == 0);
  /* Refusals: a payload over a cell, NULL functions. */
  t = here_task(&p, 0);
  t.size = CUBE__TASK_INLINE_BYTES + 1;
  CHECK_STATUS(cube__submit_here(s, sid, &t, &here), CUBE_STATUS_INVALID_ARGUMENT, "payload");
  t = here_task(&p, 0);
  t.here = NULL;
  CHECK_STATUS(cube__submit_here(s, sid, &t, &here), CUBE_STATUS_INVALID_ARGUMENT, "here");
  CHECK_STATUS(cube__submit_here(NULL, sid, &t, &here), CUBE_STATUS_INVALID_ARGUMENT, "service");
  CHECK(p.ran == 0 && !here);
  CHECK_EQ_U64(read_value(s), 1);
  cube__queue_shutdown(key);
}

typedef struct {
  cube__service_t* s;
  atomic_int* entered;
  atomic_int* flag;
} here_sleeper_t;

static void* submit_while_here(void* arg) {
  here_sleeper_t* h = arg;
  while (!atomic_load(h->entered)) sched_yield();
  flag_payload_t p = {h->flag};
  cube_status_free(cube__submit(h->s, cube__stream_current_id(), task_set_flag, &p, sizeof(p),
                                NULL));
  return NULL;
}

/* Threaded: a runner that is asleep meanwhile. Thousands of here-runs (more
 * than the ring has cells) leave it nothing to do; it steps over their cells
 * when it wakes. A task queued while a slow here-run holds the device runs
 * once that returns, with no further submission to wake the runner. */
CUBE_TEST(submit_here_sleeping_runner_threaded) {
  cube__device_key_t key = key_for(CUBE_QUEUE_THREADED, 33);
  cube__service_t* s = get_service(key, CUBE_QUEUE_THREADED, &counter_vt);
  REQUIRE(s);
  uint64_t sid = cube__stream_current_id();
  sleep_us(20000); /* the runner sleeps */
  enum { N = 3000 };
  int here_runs = 0;
  for (int i = 0; i < N; ++i) {
    here_probe_t p;
    here_probe_init(&p);
    cube__here_task_t t = here_task(&p, 0);
    bool here = false;
    CHECK_OK(cube__submit_here(s, sid, &t, &here));
    here_runs += here && p.on_caller && p.ran == 1;
    if (i == N / 2) sleep_us(5000);
  }
  CHECK_EQ_U64(here_runs, N);
  CHECK_OK(cube__submit(s, sid, task_inc, NULL, 0, NULL));
  CHECK_EQ_U64(read_value(s), 1);

  for (int round = 0; round < 3; ++round) {
    sleep_us(20000);
    atomic_int entered, flag;
    atomic_init(&entered, 0);
    atomic_init(&flag, 0);
    here_sleeper_t hs = {s, &entered, &flag};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, submit_while_here, &hs) == 0);
    here_probe_t p;
    here_probe_init(&p);
    p.entered = &entered;
    p.sleep_us = 20000; /* long enough for the runner to fall asleep again */
    cube__here_task_t t = here_task(&p, 0);
    bool here = false;
    CHECK_OK(cube__submit_here(s, sid, &t, &here));
    CHECK(here);
    pthread_join(th, NULL);
    uint64_t deadline = cube__now_ns() + 1000000000ull;
    while (!atomic_load(&flag) && cube__now_ns() < deadline) sleep_us(100);
    CHECK(atomic_load(&flag) == 1);
  }
  cube__queue_shutdown(key);
}

/* A device whose callers issue their own work after a blocking call
 * (cube__device_set_caller_issues): work of the after_blocking kind runs on
 * the caller right after a blocking here-run, and only then (not after a
 * queued submission); the runner, which does not spin after stepping over
 * such cells, is woken by every queued task that follows: none is lost,
 * whether it comes at once or after the runner fell asleep. */
CUBE_TEST(submit_here_after_blocking_caller_issues_threaded) {
  cube__device_key_t key = key_for(CUBE_QUEUE_THREADED, 36);
  cube__service_t* s = get_service(key, CUBE_QUEUE_THREADED, &counter_vt);
  REQUIRE(s);
  cube__device_set_caller_issues(cube__service_device(s), true);
  uint64_t sid = cube__stream_current_id();
  enum { N = 400 };
  int after_here = 0, after_queued = 0;
  for (int i = 0; i < N; ++i) {
    here_probe_t b;
    here_probe_init(&b);
    cube__here_task_t tb = here_task(&b, 20000); /* a blocking call: polls the work ahead */
    bool here = false;
    CHECK_OK(cube__submit_here(s, sid, &tb, &here));
    CHECK(here && b.on_caller);
    /* The work after it runs here. */
    here_probe_t w;
    here_probe_init(&w);
    cube__here_task_t tw = here_task(&w, 0);
    tw.after_blocking = true;
    here = false;
    CHECK_OK(cube__submit_here(s, sid, &tw, &here));
    after_here += here && w.on_caller && w.ran == 1;
    /* A queued task, then after_blocking work: not after a blocking call,
     * so queued behind it. */
    CHECK_OK(cube__submit(s, sid, task_inc, NULL, 0, NULL));
    here_probe_t q;
    here_probe_init(&q);
    cube__here_task_t tq = here_task(&q, 0);
    tq.after_blocking = true;
    here = false;
    CHECK_OK(cube__submit_here(s, sid, &tq, &here));
    after_queued += here;
    if (i % 100 == 99) sleep_us(2000); /* let the runner fall asleep */
    CHECK_EQ_U64(read_value(s), (uint64_t)i + 1); /* the queued task ran */
    CHECK(q.ran == 1);
  }
  CHECK_EQ_U64(after_here, N);
  CHECK_EQ_U64(after_queued, 0);
  cube__queue_shutdown(key);
}

/* Several threads submit tasks and here-work to one device at once: each
 * here-work, wherever it ran, sees exactly the tasks its thread queued
 * before it (and none it queued after); every one runs once. */
typedef struct {
  cube__service_t* s;
  int index;
  int here_runs, queued_runs;
  here_probe_t* probes; /* one per check */
} here_thread_t;

enum { HERE_THREADS = 4, HERE_ROUNDS = 3000, HERE_EVERY = 3 };

static cube_status_t task_inc_producer(void* state, void* payload) {
  ((counter_t*)state)->expected[*(int*)payload]++;
  return CUBE_OK;
}

static cube_status_t here_check_fn(void* state, void* arg) {
  here_probe_t* p = arg;
  p->ran++;
  p->value = ((counter_t*)state)->expected[p->stream]; /* |stream| holds the thread index */
  return CUBE_OK;
}

static cube_status_t here_check_task(void* state, void* payload) {
  return here_check_fn(state, *(here_probe_t**)payload);
}

static void* here_thread_main(void* arg) {
  here_thread_t* h = arg;
  uint64_t sid = cube__stream_current_id();
  int k = 0;
  for (int i = 0; i < HERE_ROUNDS; ++i) {
    cube_status_free(cube__submit(h->s, sid, task_inc_producer, &h->index, sizeof(int), NULL));
    if (i % HERE_EVERY) continue;
    here_probe_t* p = &h->probes[k++];
    p->stream = (uint64_t)h->index;
    p->sleep_us = i + 1; /* the count it must see */
    cube__here_task_t t = {here_check_fn, p, here_check_task, sizeof(p), here_prepare, p, NULL,
                           (uint64_t)(i % 2) * 20000, false};
    bool here = false;
    cube_status_t st = cube__submit_here(h->s, sid, &t, &here);
    if (st) p->ran = -1000;
    cube_status_free(st);
    if (here)
      h->here_runs++;
    else
      h->queued_runs++;
  }
  return NULL;
}

static void submit_here_many_threads(cube_queue_mode_t mode) {
  cube__device_key_t key = key_for(mode, 34);
  cube__service_t* s = get_service(key, mode, &counter_vt);
  REQUIRE(s);
  here_thread_t h[HERE_THREADS];
  pthread_t th[HERE_THREADS];
  enum { CHECKS = (HERE_ROUNDS + HERE_EVERY - 1) / HERE_EVERY };
  for (int i = 0; i < HERE_THREADS; ++i) {
    h[i] = (here_thread_t){s, i, 0, 0, calloc(CHECKS, sizeof(here_probe_t))};
    REQUIRE(h[i].probes);
  }
  for (int i = 0; i < HERE_THREADS; ++i)
    REQUIRE(pthread_create(&th[i], NULL, here_thread_main, &h[i]) == 0);
  for (int i = 0; i < HERE_THREADS; ++i) pthread_join(th[i], NULL);
  CHECK_OK(cube__submit_blocking(s, cube__stream_current_id(), task_read, &(uint64_t){0}));
  int here_total = 0;
  for (int i = 0; i < HERE_THREADS; ++i) {
    int bad = 0;
    for (int k = 0; k < CHECKS; ++k) {
      here_probe_t* p = &h[i].probes[k];
      bad += p->ran != 1 || p->value != (uint64_t)p->sleep_us;
    }
    CHECK_EQ_U64(bad, 0);
    CHECK_EQ_U64(h[i].here_runs + h[i].queued_runs, CHECKS);
    here_total += h[i].here_runs;
    free(h[i].probes);
  }
  counter_t* c = cube__service_state_unsafe(s);
  for (int i = 0; i < HERE_THREADS; ++i) CHECK_EQ_U64(c->expected[i], HERE_ROUNDS);
  if (mode == CUBE_QUEUE_INLINE) CHECK_EQ_U64(here_total, HERE_THREADS * CHECKS);
  fprintf(stderr, "%d of %d here-tasks ran on their caller\n", here_total,
          HERE_THREADS * (int)CHECKS);
  cube__queue_shutdown(key);
}

CUBE_TEST(submit_here_many_threads_threaded) { submit_here_many_threads(CUBE_QUEUE_THREADED); }
CUBE_TEST(submit_here_many_threads_inline) { submit_here_many_threads(CUBE_QUEUE_INLINE); }
