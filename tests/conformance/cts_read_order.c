/* Reads in stream order, wherever they run: a read whose device has nothing
 * queued before it runs on the calling thread (docs/architecture.md, "How a
 * call travels"), any other is a task on the runner. Either way it sees
 * exactly the work queued before it on its stream, takes the stream's
 * deferred errors, and an asynchronous read's future carries the same
 * outcome. These cases race reads against launches and writes from several
 * threads on one shared (pinned) stream, where both paths are taken. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

enum { CTS_RO_THREADS = 4 };

/* A small deterministic generator (each thread its own). */
static uint64_t cts_ro_next(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* The shared part of a race: one pinned-stream client used by every thread,
 * and a buffer of one u32 slot per thread. Thread t writes the values 1, 2,
 * 3 ... into its slot (a 4-byte view), in its own order; |issued[t]| is
 * raised before each write is queued, |queued[t]| once the call returned. A
 * read of the whole buffer issued after |queued[u]| was seen must show slot u
 * at least at that value (the write is ahead of it in the stream), and never
 * a value not yet issued when the read returned. */
typedef struct cts_ro_shared {
  cube_client_t* pinned;
  cube_kernel_t* add; /* NULL: writes only */
  cube_handle_t slots;
  cube_handle_t zero; /* one u32 of 0: the add kernel's input for a slot */
  atomic_uint issued[CTS_RO_THREADS];
  atomic_uint queued[CTS_RO_THREADS];
  int iterations;
} cts_ro_shared_t;

typedef struct cts_ro_thread {
  cts_ro_shared_t* sh;
  int index;
  int failures;
  int rounds;
  char first[256];
} cts_ro_thread_t;

static void cts_ro_fail(cts_ro_thread_t* w, const char* what, cube_status_t s) {
  if (!w->failures++)
    snprintf(w->first, sizeof(w->first), "thread %d: %s%s%s", w->index, what, s ? ": " : "",
             s ? cube_status_message(s) : "");
  cube_status_free(s);
}

/* Reads |h| (|n| bytes) by the method |how| selects (read_one, read_into,
 * read_async + wait, read of two handles) into |out|. */
static cube_status_t cts_ro_read(cube_client_t* c, cube_handle_t h, size_t n, unsigned how,
                                 uint8_t* out) {
  cube_bytes_t* b[2] = {NULL, NULL};
  cube_status_t s = CUBE_OK;
  switch (how % 4) {
    case 0:
      s = cube_client_read_one(c, h, &b[0]);
      break;
    case 1:
      return cube_client_read_into(c, h, out, n);
    case 2: {
      cube_future_t* f = NULL;
      s = cube_client_read_async(c, 1, &h, &f);
      if (!s) s = cube_future_wait(f, UINT64_MAX, &b[0]);
      cube_future_release(f);
      break;
    }
    default: {
      cube_handle_t two[2] = {h, h};
      s = cube_client_read(c, 2, two, b);
      if (!s && (!b[1] || cube_bytes_size(b[1]) != n ||
                 memcmp(cube_bytes_const_data(b[0]), cube_bytes_const_data(b[1]), n) != 0))
        s = cube_status_make(CUBE_STATUS_INTERNAL, "the two results of one read differ");
      break;
    }
  }
  if (!s && (!b[0] || cube_bytes_size(b[0]) != n))
    s = cube_status_make(CUBE_STATUS_INTERNAL, "read %zu bytes, expected %zu",
                         b[0] ? cube_bytes_size(b[0]) : 0, n);
  if (!s) memcpy(out, cube_bytes_const_data(b[0]), n);
  cube_bytes_release_array(b, 2);
  return s;
}

/* Queues the next value of this thread's slot: cube_client_write, or a
 * launch of the add kernel (slot = 0 + value) on even values when there is
 * a kernel. */
static cube_status_t cts_ro_put_slot(cts_ro_thread_t* w, cube_handle_t view, uint32_t v) {
  cts_ro_shared_t* sh = w->sh;
  if (sh->add && (v & 1) == 0) {
    cube_arg_t a[4] = {cube_arg_buffer(sh->zero), cube_arg_buffer(view), cube_arg_u32(v),
                       cube_arg_u32(1)};
    return cube_client_launch(sh->pinned, sh->add, cube_count_static(1, 1, 1), 4, a);
  }
  return cube_client_write(sh->pinned, view, &v, sizeof(v));
}

/* Checks one read of the slots buffer against the bounds seen around it. */
static void cts_ro_check_slots(cts_ro_thread_t* w, const uint32_t* got, const uint32_t* lo,
                               const uint32_t* hi, uint32_t mine) {
  for (int u = 0; u < CTS_RO_THREADS; ++u) {
    int bad = u == w->index ? got[u] != mine : (got[u] < lo[u] || got[u] > hi[u]);
    if (bad) {
      char what[160];
      snprintf(what, sizeof(what), "slot %d read %u, expected %u..%u (own value %u)", u, got[u],
               lo[u], hi[u], mine);
      cts_ro_fail(w, what, NULL);
    }
  }
}

static void* cts_ro_main(void* p) {
  cts_ro_thread_t* w = p;
  cts_ro_shared_t* sh = w->sh;
  cube_client_t* c = sh->pinned;
  uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(w->index + 1);
  cube_handle_t view = CUBE_HANDLE_NULL;
  cube_status_t s = cube_handle_offset_view(sh->slots, (uint64_t)w->index * 4,
                                            (uint64_t)(CTS_RO_THREADS - 1 - w->index) * 4, &view);
  if (s) {
    cts_ro_fail(w, "offset_view", s);
    return NULL;
  }
  uint8_t* in = malloc(4 * 3001 + 8);
  uint8_t* out = malloc(4 * 3001 + 8);
  uint8_t* want = malloc(4 * 3001 + 8);
  if (!in || !out || !want) {
    cts_ro_fail(w, "no host memory", NULL);
    goto done;
  }
  for (int it = 0; it < sh->iterations && w->failures == 0; ++it) {
    /* Own buffers, random contents of odd sizes: created, (launched on,)
     * read back at once, nothing synchronised in between. */
    uint32_t n = 1 + (uint32_t)(cts_ro_next(&rng) % 3000);
    size_t tail = 1 + (size_t)(cts_ro_next(&rng) % 3); /* bytes past the kernel's reach */
    size_t bytes = (size_t)n * 4;
    cube_test_fill_random(in, bytes, cts_ro_next(&rng));
    cube_handle_t hin = CUBE_HANDLE_NULL, hout = CUBE_HANDLE_NULL;
    if ((s = cube_client_create_from_slice(c, in, bytes, &hin))) {
      cts_ro_fail(w, "create_from_slice", s);
      break;
    }
    if ((s = cts_poisoned(c, bytes + tail, &hout))) {
      cts_ro_fail(w, "poisoned", s);
      cube_handle_release(hin);
      break;
    }
    uint32_t add = (uint32_t)cts_ro_next(&rng);
    memset(want, CTS_POISON, bytes + tail);
    if (sh->add) {
      cube_arg_t a[4] = {cube_arg_buffer(hin), cube_arg_buffer(hout), cube_arg_u32(add),
                         cube_arg_u32(n)};
      if ((s = cube_client_launch(c, sh->add, cube_count_static((n + 63) / 64, 1, 1), 4, a)))
        cts_ro_fail(w, "launch", s);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t x;
        memcpy(&x, in + 4 * i, 4);
        x += add;
        memcpy(want + 4 * i, &x, 4);
      }
    } else {
      /* Writes only: a write of the input over the front of the output. */
      cube_handle_t front = CUBE_HANDLE_NULL;
      s = cube_handle_offset_view(hout, 0, tail, &front);
      if (!s) s = cube_client_write(c, front, in, bytes);
      if (s) cts_ro_fail(w, "write", s);
      cube_handle_release(front);
      memcpy(want, in, bytes);
    }
    memset(out, 0, bytes + tail);
    if ((s = cts_ro_read(c, hout, bytes + tail, (unsigned)it + (unsigned)w->index, out)))
      cts_ro_fail(w, "read of the output", s);
    else if (memcmp(out, want, bytes + tail) != 0)
      cts_ro_fail(w, "the output differs (stale, partial or over the tail)", NULL);
    cube_handle_release(hin);
    cube_handle_release(hout);

    /* The shared slots: this thread's next value, then a read of all. */
    uint32_t v = (uint32_t)it + 1;
    atomic_store(&sh->issued[w->index], v);
    if ((s = cts_ro_put_slot(w, view, v))) cts_ro_fail(w, "slot write", s);
    atomic_store(&sh->queued[w->index], v);
    uint32_t lo[CTS_RO_THREADS], hi[CTS_RO_THREADS], got[CTS_RO_THREADS];
    for (int u = 0; u < CTS_RO_THREADS; ++u) lo[u] = atomic_load(&sh->queued[u]);
    if ((s = cts_ro_read(c, sh->slots, sizeof(got), (unsigned)it * 3u, (uint8_t*)got))) {
      cts_ro_fail(w, "read of the slots", s);
      break;
    }
    for (int u = 0; u < CTS_RO_THREADS; ++u) hi[u] = atomic_load(&sh->issued[u]);
    cts_ro_check_slots(w, got, lo, hi, v);
    w->rounds++;
  }
done:
  cube_handle_release(view);
  free(in);
  free(out);
  free(want);
  return NULL;
}

static void cts_ro_race(int with_kernel, int iterations) {
  CTS_CLIENT(c);
  cts_ro_shared_t sh;
  memset(&sh, 0, sizeof(sh));
  sh.iterations = iterations;
  REQUIRE_OK(cube_client_clone(c, &sh.pinned));
  cube_client_set_stream(sh.pinned, cube_stream_id_new());
  if (with_kernel) {
    const cube_arg_kind_t kinds[4] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32};
    cube_dim_t dim = {64, 1, 1};
    REQUIRE_OK(cts_kernel_create("cts_read_order_add", cts_k_add_u32, dim, 0, 4, kinds, &sh.add));
  }
  uint32_t zero[CTS_RO_THREADS] = {0};
  REQUIRE_OK(cube_client_create_from_slice(sh.pinned, zero, sizeof(zero), &sh.slots));
  REQUIRE_OK(cube_client_create_from_slice(sh.pinned, zero, 4, &sh.zero));
  pthread_t th[CTS_RO_THREADS];
  cts_ro_thread_t w[CTS_RO_THREADS];
  for (int i = 0; i < CTS_RO_THREADS; ++i) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].sh = &sh;
    w[i].index = i;
    REQUIRE(pthread_create(&th[i], NULL, cts_ro_main, &w[i]) == 0);
  }
  for (int i = 0; i < CTS_RO_THREADS; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < CTS_RO_THREADS; ++i) {
    if (w[i].failures) fprintf(stderr, "%d failures, first: %s\n", w[i].failures, w[i].first);
    CHECK_EQ_U64(w[i].failures, 0);
    CHECK_EQ_U64(w[i].rounds, iterations);
  }
  /* Everything ran: the slots hold each thread's last value. */
  uint32_t last[CTS_RO_THREADS];
  for (int i = 0; i < CTS_RO_THREADS; ++i) last[i] = (uint32_t)iterations;
  CHECK(cts_read_equals(sh.pinned, sh.slots, last, sizeof(last)));
  CHECK_OK(cube_client_sync(sh.pinned));
  cube_handle_release(sh.slots);
  cube_handle_release(sh.zero);
  cube_kernel_release(sh.add);
  cube_client_release(sh.pinned);
  CTS_END(c);
}

/* Four threads on one pinned stream: launches into poisoned outputs of odd
 * sizes, each read back at once by one of the four read calls, and launches
 * and writes into shared slots checked by reads of all of them. */
CUBE_TEST(read_order_races_launches_pinned_stream) { cts_ro_race(1, 150); }

/* The same with writes only (every backend, kernels or not). */
CUBE_TEST(read_order_races_writes_pinned_stream) { cts_ro_race(0, 200); }

static cube_status_t cts_ro_noop(void* user) {
  (void)user;
  return CUBE_OK;
}

/* A read after a failed launch reports the stream's deferred error, also
 * when the launch finished long before the read (an exclusive no-op waited
 * for it: the read then finds nothing queued and runs on the calling
 * thread), and clears it; for read_async the future carries it. An error of
 * a pinned stream made on another thread is the pinned stream's: a read on
 * it from this thread reports it, this thread's own stream stays clean. */
typedef struct cts_ro_fail_arg {
  cube_client_t* c;
  cube_kernel_t* k;
  cube_handle_t h;
  cube_status_t s;
} cts_ro_fail_arg_t;

static cube_status_t cts_ro_fail_launch(cube_client_t* c, cube_kernel_t* k, cube_handle_t h) {
  cube_arg_t a[5] = {cube_arg_buffer(h), cube_arg_u32(0), cube_arg_u32(0), cube_arg_u32(0),
                     cube_arg_i32(9)};
  return cts_launch_fail(c, k, cube_count_static(1, 1, 1), 5, a);
}

static void* cts_ro_fail_main(void* p) {
  cts_ro_fail_arg_t* a = p;
  a->s = cts_ro_fail_launch(a->c, a->k, a->h);
  if (!a->s) a->s = cube_client_exclusive(a->c, cts_ro_noop, NULL);
  return NULL;
}

CUBE_TEST(read_order_error_after_finished_launch) {
  CTS_CLIENT(c);
  CTS_KERNEL(k, "cts_read_order_fail", cts_k_fail, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_U32,
             CUBE_ARG_U32, CUBE_ARG_U32, CUBE_ARG_I32);
  uint8_t data[37];
  cube_test_fill_random(data, sizeof(data), 7900);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  for (int round = 0; round < 3; ++round) {
    CHECK_OK(cts_ro_fail_launch(c, k, h));
    CHECK_OK(cube_client_exclusive(c, cts_ro_noop, NULL)); /* the launch has run */
    cube_bytes_t* b = NULL;
    uint8_t into[37];
    memset(into, CTS_POISON, sizeof(into));
    if (round == 0) {
      CHECK_STATUS(cube_client_read_one(c, h, &b), CUBE_STATUS_LAUNCH_FAILED,
                   "cts_read_order_fail");
      CHECK(b == NULL);
    } else if (round == 1) {
      cube_future_t* f = NULL;
      REQUIRE_OK(cube_client_read_async(c, 1, &h, &f));
      CHECK_STATUS(cube_future_wait(f, UINT64_MAX, &b), CUBE_STATUS_LAUNCH_FAILED,
                   "cts_read_order_fail");
      CHECK(b == NULL);
      cube_future_release(f);
    } else {
      CHECK_STATUS(cube_client_read_into(c, h, into, sizeof(into)), CUBE_STATUS_LAUNCH_FAILED,
                   "cts_read_order_fail");
      for (size_t i = 0; i < sizeof(into); ++i) CHECK(into[i] == CTS_POISON);
    }
    /* Taken once: the next read says h holds nothing valid (the launch that
     * should have written it failed) until h is written whole. */
    CHECK(cts_read_lost(c, h, "cts_read_order_fail", (const char*)NULL));
    CHECK_OK(cube_client_write(c, h, data, sizeof(data)));
    CHECK(cts_read_equals(c, h, data, sizeof(data)));
    CHECK_OK(cube_client_flush(c));
  }
  /* On a pinned stream, the failure made on another thread. */
  cube_client_t* p = NULL;
  REQUIRE_OK(cube_client_clone(c, &p));
  cube_client_set_stream(p, cube_stream_id_new());
  cts_ro_fail_arg_t a = {p, k, h, CUBE_OK};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, cts_ro_fail_main, &a) == 0);
  pthread_join(th, NULL);
  CHECK_OK(a.s);
  cube_bytes_t* b = NULL;
  /* This thread's stream has no error of its own, but h's contents were
   * spoiled by the failure on the other stream: its read says so, naming
   * that stream. */
  char where[64];
  snprintf(where, sizeof(where), "stream %llu", (unsigned long long)cube_client_stream(p));
  CHECK(cts_read_lost(c, h, "cts_read_order_fail", where, (const char*)NULL));
  CHECK_STATUS(cube_client_read_one(p, h, &b), CUBE_STATUS_LAUNCH_FAILED, "cts_read_order_fail");
  CHECK(b == NULL);
  CHECK_OK(cube_client_write(p, h, data, sizeof(data)));
  CHECK(cts_read_equals(p, h, data, sizeof(data)));
  CHECK(cts_read_equals(c, h, data, sizeof(data)));
  CHECK_OK(cube_client_sync(p));
  cube_client_release(p);
  cube_handle_release(h);
  cube_kernel_release(k);
  CTS_END(c);
}

/* With nothing queued on the device (after a sync), read_async runs during
 * the call: its future is ready when the call returns and holds the data; a
 * future made so can be released unwaited. Right after a queued write it is
 * in order: it sees the write. */
CUBE_TEST(read_order_async_when_idle_is_ready) {
  CTS_CLIENT(c);
  const size_t sizes[] = {1, 5, 4099, 70001};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    size_t n = sizes[k];
    uint8_t* a = malloc(n);
    uint8_t* b = malloc(n);
    REQUIRE(a && b);
    cube_test_fill_random(a, n, 7950 + k);
    cube_test_fill_random(b, n, 7960 + k);
    cube_handle_t h;
    REQUIRE_OK(cube_client_create_from_slice(c, a, n, &h));
    REQUIRE_OK(cube_client_sync(c));
    cube_future_t* f = NULL;
    REQUIRE_OK(cube_client_read_async(c, 1, &h, &f));
    CHECK(cube_future_is_ready(f));
    cube_bytes_t* out = NULL;
    CHECK_OK(cube_future_wait(f, 0, &out));
    CHECK(out && cube_bytes_size(out) == n && memcmp(cube_bytes_const_data(out), a, n) == 0);
    cube_bytes_release(out);
    cube_future_release(f);
    /* Released unwaited: its buffer goes with it. */
    REQUIRE_OK(cube_client_read_async(c, 1, &h, &f));
    cube_future_release(f);
    /* After a queued write: in order, ready or not. */
    CHECK_OK(cube_client_write(c, h, b, n));
    REQUIRE_OK(cube_client_read_async(c, 1, &h, &f));
    out = NULL;
    CHECK_OK(cube_future_wait(f, UINT64_MAX, &out));
    CHECK(out && cube_bytes_size(out) == n && memcmp(cube_bytes_const_data(out), b, n) == 0);
    cube_bytes_release(out);
    cube_future_release(f);
    cube_handle_release(h);
    free(a);
    free(b);
  }
  CHECK_OK(cube_client_sync(c));
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  CTS_END(c);
}
