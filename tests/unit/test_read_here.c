// cube-test-libs: cube_static
/* Where a read runs (docs/architecture.md, "How a call travels"): on the
 * calling thread when its device has nothing queued before it, else on the
 * device's runner, behind the queued work. The backend's trace hook names
 * the thread of every backend read, so these cases see which path was taken
 * (the conformance cases, tests/conformance/cts_read_order.c, check that both
 * give the same results). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "check.h"
#include "read_check.h"
#include "cube/cube.h"

/* Backend reads seen by the hook, by thread. Set before the calls it counts,
 * read after they returned (the hook runs on the runner or on the caller). */
typedef struct read_trace {
  pthread_t caller;
  atomic_int on_caller, on_runner, elsewhere;
} read_trace_t;

static read_trace_t g_trace;

static void trace_reads(void* user, const cube__backend_call_t* call) {
  read_trace_t* t = user;
  if (call->slot != CUBE__SLOT_READ || call->status >= 0) return; /* before each read */
  char name[32] = "";
  pthread_getname_np(pthread_self(), name, sizeof(name));
  if (pthread_equal(pthread_self(), t->caller))
    atomic_fetch_add(&t->on_caller, 1);
  else if (strncmp(name, "cube-dev-", 9) == 0) /* a device's runner */
    atomic_fetch_add(&t->on_runner, 1);
  else
    atomic_fetch_add(&t->elsewhere, 1);
}

static void trace_start(void) {
  g_trace.caller = pthread_self();
  atomic_store(&g_trace.on_caller, 0);
  atomic_store(&g_trace.on_runner, 0);
  atomic_store(&g_trace.elsewhere, 0);
  cube__backend_set_trace(trace_reads, &g_trace);
}

static void trace_stop(void) { cube__backend_set_trace(NULL, NULL); }

static cube_client_t* client(cube_queue_mode_t mode) {
  setenv("CUBE_CPU_DEVICES", "1", 1);
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.queue_mode = mode;
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &o, &c);
  if (s) {
    fprintf(stderr, "cube_client_init: %s\n", cube_status_message(s));
    cube_status_free(s);
    return NULL;
  }
  return c;
}

/* Every read call once (read, read_one, read_into, read_tensor, both async
 * forms), each after a sync; returns the number of backend reads made. */
static int read_every_way(cube_client_t* c, cube_handle_t h, const uint8_t* data, size_t n,
                          int* ready_at_return) {
  int reads = 0;
  *ready_at_return = 0;
  cube_bytes_t* b[2] = {NULL, NULL};
  uint8_t* into = malloc(n);
  if (!into) return -1;
  cube_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.handle = h;
  t.rank = 1;
  t.shape[0] = n;
  t.strides[0] = 1;
  t.elem_size = 1;
  for (int way = 0; way < 6; ++way) {
    CHECK_OK(cube_client_sync(c));
    cube_future_t* f = NULL;
    switch (way) {
      case 0: {
        cube_handle_t two[2] = {h, h};
        CHECK_OK(cube_client_read(c, 2, two, b));
        reads += 2;
        break;
      }
      case 1:
        CHECK_OK(cube_client_read_one(c, h, &b[0]));
        reads++;
        break;
      case 2:
        memset(into, 0, n);
        CHECK_OK(cube_client_read_into(c, h, into, n));
        CHECK(memcmp(into, data, n) == 0);
        reads++;
        break;
      case 3:
        CHECK_OK(cube_client_read_tensor(c, 1, &t, &b[0]));
        reads++;
        break;
      case 4:
      case 5:
        if (way == 4)
          CHECK_OK(cube_client_read_async(c, 1, &h, &f));
        else
          CHECK_OK(cube_client_read_tensor_async(c, 1, &t, &f));
        *ready_at_return += cube_future_is_ready(f);
        CHECK_OK(cube_future_wait(f, UINT64_MAX, &b[0]));
        cube_future_release(f);
        reads++;
        break;
    }
    for (int i = 0; i < 2; ++i)
      if (b[i]) CHECK(cube_bytes_size(b[i]) == n && memcmp(cube_bytes_const_data(b[i]), data, n) == 0);
    cube_bytes_release_array(b, 2);
  }
  free(into);
  return reads;
}

/* Threaded queue, nothing queued (each read follows a sync): every read
 * runs on the calling thread, and an asynchronous read's future is ready
 * when the call returns. */
CUBE_TEST(idle_device_reads_on_caller_threaded) {
  cube_client_t* c = client(CUBE_QUEUE_THREADED);
  REQUIRE(c);
  REQUIRE(!cube_client_is_blocking(c));
  uint8_t data[777];
  cube_test_fill_random(data, sizeof(data), 81);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  trace_start();
  int ready = 0;
  int reads = read_every_way(c, h, data, sizeof(data), &ready);
  trace_stop();
  CHECK_EQ_U64(atomic_load(&g_trace.on_caller), reads);
  CHECK_EQ_U64(atomic_load(&g_trace.on_runner) + atomic_load(&g_trace.elsewhere), 0);
  CHECK_EQ_U64(ready, 2);
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
}

/* Inline queue: reads always run on the calling thread. */
CUBE_TEST(reads_on_caller_inline) {
  cube_client_t* c = client(CUBE_QUEUE_INLINE);
  REQUIRE(c);
  REQUIRE(cube_client_is_blocking(c));
  uint8_t data[100];
  cube_test_fill_random(data, sizeof(data), 82);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  trace_start();
  int ready = 0;
  int reads = read_every_way(c, h, data, sizeof(data), &ready);
  trace_stop();
  CHECK_EQ_U64(atomic_load(&g_trace.on_caller), reads);
  CHECK_EQ_U64(atomic_load(&g_trace.on_runner) + atomic_load(&g_trace.elsewhere), 0);
  CHECK_EQ_U64(ready, 2);
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
}

/* A gate on the runner: an exclusive task that waits for |open|. */
static atomic_int g_open, g_entered;

static cube_status_t gate_fn(void* user) {
  (void)user;
  atomic_store(&g_entered, 1);
  while (!atomic_load(&g_open)) sched_yield();
  return CUBE_OK;
}

static void* gate_main(void* p) {
  cube_status_free(cube_client_exclusive((cube_client_t*)p, gate_fn, NULL));
  return NULL;
}

typedef struct {
  cube_client_t* c;
  cube_handle_t h;
  cube_bytes_t* out;
  cube_status_t s;
} reader_t;

static void* reader_main(void* p) {
  reader_t* r = p;
  r->s = cube_client_read_one(r->c, r->h, &r->out);
  return NULL;
}

/* Threaded queue, the runner busy: a read is queued behind the work and runs
 * on the runner (an asynchronous read returns a future that is not ready; a
 * synchronous one, after a short wait for the runner, waits for its task);
 * later work runs after it. */
CUBE_TEST(busy_device_reads_on_runner_threaded) {
  cube_client_t* c = client(CUBE_QUEUE_THREADED);
  REQUIRE(c);
  uint8_t data[4096], other[4096];
  cube_test_fill_random(data, sizeof(data), 83);
  cube_test_fill_random(other, sizeof(other), 84);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  CHECK_OK(cube_client_sync(c));
  atomic_store(&g_open, 0);
  atomic_store(&g_entered, 0);
  pthread_t gate;
  REQUIRE(pthread_create(&gate, NULL, gate_main, c) == 0);
  while (!atomic_load(&g_entered)) sched_yield();
  trace_start();
  cube_future_t* f = NULL;
  CHECK_OK(cube_client_read_async(c, 1, &h, &f));
  CHECK(!cube_future_is_ready(f));
  reader_t r = {c, h, NULL, CUBE_OK};
  pthread_t reader;
  REQUIRE(pthread_create(&reader, NULL, reader_main, &r) == 0);
  CHECK_OK(cube_client_write(c, h, other, sizeof(other))); /* after the first read */
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
  CHECK(!cube_future_is_ready(f));
  CHECK_EQ_U64(atomic_load(&g_trace.on_caller) + atomic_load(&g_trace.on_runner) +
                   atomic_load(&g_trace.elsewhere),
               0);
  atomic_store(&g_open, 1);
  pthread_join(gate, NULL);
  pthread_join(reader, NULL);
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_future_wait(f, UINT64_MAX, &b));
  CHECK(b && cube_bytes_size(b) == sizeof(data) &&
        memcmp(cube_bytes_const_data(b), data, sizeof(data)) == 0);
  cube_bytes_release(b);
  cube_future_release(f);
  /* The other thread's read came before or after the write: either content,
   * whole. */
  CHECK_OK(r.s);
  CHECK(r.out && cube_bytes_size(r.out) == sizeof(data) &&
        (memcmp(cube_bytes_const_data(r.out), data, sizeof(data)) == 0 ||
         memcmp(cube_bytes_const_data(r.out), other, sizeof(other)) == 0));
  /* The queued write's task called the hook too (a write, not counted):
   * the sync orders its end before the hook is cleared. */
  CHECK_OK(cube_client_sync(c));
  trace_stop();
  /* The asynchronous read was queued behind the held runner: it ran there.
   * The other thread's read ran there too when it reached the queue before
   * the gate opened; on a loaded machine (2 cores, sanitizers) that thread
   * may only get there after everything drained, and then it runs on its
   * own thread (counted "elsewhere": not this test's thread, not the
   * runner), after the write, and must see it. This thread's read never ran
   * here. */
  CHECK_EQ_U64(atomic_load(&g_trace.on_caller), 0);
  CHECK(atomic_load(&g_trace.on_runner) >= 1);
  CHECK_EQ_U64(atomic_load(&g_trace.on_runner) + atomic_load(&g_trace.elsewhere), 2);
  if (atomic_load(&g_trace.elsewhere) == 1)
    CHECK(r.out && memcmp(cube_bytes_const_data(r.out), other, sizeof(other)) == 0);
  cube_bytes_release(r.out);
  b = NULL;
  CHECK_OK(cube_client_read_one(c, h, &b));
  CHECK(b && memcmp(cube_bytes_const_data(b), other, sizeof(other)) == 0);
  cube_bytes_release(b);
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
}

/* Launches of the hook's counting: on the calling thread or elsewhere. */
static atomic_int g_launch_here, g_launch_elsewhere;
static void trace_launches(void* user, const cube__backend_call_t* call) {
  (void)user;
  if (call->slot != CUBE__SLOT_LAUNCH || call->status >= 0) return;
  atomic_fetch_add(pthread_equal(pthread_self(), g_trace.caller) ? &g_launch_here
                                                                  : &g_launch_elsewhere,
                   1);
}

static int store_one(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  (void)n;
  uint32_t v = args[1].u32;
  memcpy(args[0].buffer.data, &v, sizeof(v));
  return 0;
}

/* On the CPU backend a launch runs to its end inside the backend's call, so
 * a launch right after a read that ran on the calling thread still goes to
 * the runner (on device backends it would run on the caller:
 * unit.cuda_mock.launch_and_replay_after_a_blocking_call_on_caller). */
CUBE_TEST(cpu_launch_after_read_stays_on_runner) {
  cube_client_t* c = client(CUBE_QUEUE_THREADED);
  REQUIRE(c);
  static const cube_arg_kind_t kinds[2] = {CUBE_ARG_BUFFER, CUBE_ARG_U32};
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.name = "store_one";
  d.arg_kinds = kinds;
  d.arg_count = 2;
  d.cpu_fn = store_one;
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 4, &h));
  CHECK_OK(cube_client_sync(c));
  g_trace.caller = pthread_self();
  atomic_store(&g_launch_here, 0);
  atomic_store(&g_launch_elsewhere, 0);
  cube__backend_set_trace(trace_launches, NULL);
  for (uint32_t i = 0; i < 50; ++i) {
    cube_arg_t a[2] = {cube_arg_buffer(h), cube_arg_u32(i * 7u + 1u)};
    CHECK_OK(cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, a));
    uint32_t want = i * 7u + 1u;
    CHECK(cube_test_read_equals(c, h, &want, sizeof(want)));
  }
  CHECK_OK(cube_client_sync(c));
  cube__backend_set_trace(NULL, NULL);
  CHECK_EQ_U64(atomic_load(&g_launch_here), 0);
  CHECK_EQ_U64(atomic_load(&g_launch_elsewhere), 50);
  cube_handle_release(h);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}
