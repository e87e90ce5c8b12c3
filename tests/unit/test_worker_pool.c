// cube-test-libs: cube_mod_base
/* The process's worker pool (src/platform): every item exactly once, contiguous chunks,
 * unique participants, concurrent jobs, early stop, restart. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "platform/worker_pool.h"
#include "base/options.h"
#include "check.h"
#include "platform/platform.h"

/* Pools of several threads even on a one-core machine, so that the
 * multi-participant paths always run. Each case is its own process. The
 * option table reads the environment once; cube_shutdown re-reads it, and
 * at this level (no client layer) that is cube__options_reset. */
static void use_threads(const char* n) {
  setenv("CUBE_CPU_THREADS", n, 1);
  cube__options_reset();
}

//===----------------------------------------------------------------------===//
// Every item once
//===----------------------------------------------------------------------===//

typedef struct {
  uint8_t* hits; /* per item; a plain byte: a double visit is a data race */
  atomic_uint_fast64_t sum;
  atomic_uint calls;
  uint32_t size;
  atomic_uint bad_participant;
} count_ctx_t;

static int count_items(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  count_ctx_t* c = p;
  if (participant >= c->size) atomic_fetch_add(&c->bad_participant, 1);
  uint64_t s = 0;
  for (uint64_t i = begin; i < end; ++i) {
    c->hits[i]++;
    s += i;
  }
  atomic_fetch_add(&c->sum, s);
  atomic_fetch_add(&c->calls, 1);
  return 0;
}

static void run_count(cube__worker_pool_t* pool, uint64_t n, uint64_t min_chunk) {
  count_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.hits = calloc(n ? n : 1, 1);
  REQUIRE(c.hits);
  c.size = cube__worker_pool_size(pool);
  CHECK(cube__worker_pool_run(pool, n, min_chunk, count_items, &c) == 0);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < n; ++i) wrong += c.hits[i] != 1;
  CHECK_EQ_U64(wrong, 0);
  CHECK_EQ_U64(atomic_load(&c.sum), n ? n * (n - 1) / 2 : 0);
  CHECK_EQ_U64(atomic_load(&c.bad_participant), 0);
  free(c.hits);
}

CUBE_TEST(sum_large_range_each_item_once) {
  use_threads("4");
  cube__worker_pool_t* pool = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  CHECK_EQ_U64(cube__worker_pool_size(pool), 4);
  run_count(pool, 10000003, 1);
  run_count(pool, 10000003, 4096);
  run_count(pool, 12345, 1000); /* fewer shares than participants */
  run_count(pool, 7, 1);        /* fewer items than participants */
  cube__worker_pool_release(pool);
}

CUBE_TEST(default_size_is_cpu_count) {
  unsetenv("CUBE_CPU_THREADS");
  cube__worker_pool_t* pool = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  uint32_t want = cube__cpu_count();
  if (want > 1024) want = 1024;
  CHECK_EQ_U64(cube__worker_pool_size(pool), want);
  run_count(pool, 1000003, 1);
  cube__worker_pool_release(pool);
}

CUBE_TEST(invalid_thread_count_is_reported) {
  cube__worker_pool_t* pool = NULL;
  use_threads("0");
  CHECK_STATUS(cube__worker_pool_acquire(&pool), CUBE_STATUS_INVALID_ARGUMENT, "CUBE_CPU_THREADS",
               "'0'");
  use_threads("1025");
  CHECK_STATUS(cube__worker_pool_acquire(&pool), CUBE_STATUS_INVALID_ARGUMENT, "CUBE_CPU_THREADS",
               "'1025'");
  use_threads("many");
  CHECK_STATUS(cube__worker_pool_acquire(&pool), CUBE_STATUS_INVALID_ARGUMENT, "CUBE_CPU_THREADS",
               "many");
  use_threads("1");
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  CHECK_EQ_U64(cube__worker_pool_size(pool), 1);
  run_count(pool, 100003, 1);
  cube__worker_pool_release(pool);
}

//===----------------------------------------------------------------------===//
// Chunk shape and participant numbers
//===----------------------------------------------------------------------===//

#define MAX_CHUNKS 100000
#define MAX_PARTICIPANTS 64

typedef struct {
  uint64_t begin, end;
  uint32_t participant;
} chunk_rec_t;

typedef struct {
  chunk_rec_t* recs;
  atomic_uint count;
  uint32_t size;
  atomic_uint in_use[MAX_PARTICIPANTS];    /* participant busy right now */
  atomic_uintptr_t owner[MAX_PARTICIPANTS]; /* the thread seen with that number */
  atomic_uint violations;
} chunk_ctx_t;

static int record_chunk(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  chunk_ctx_t* c = p;
  if (participant >= c->size || participant >= MAX_PARTICIPANTS) {
    atomic_fetch_add(&c->violations, 1);
    return 0;
  }
  unsigned zero = 0;
  if (!atomic_compare_exchange_strong(&c->in_use[participant], &zero, 1))
    atomic_fetch_add(&c->violations, 1); /* two threads with one number at once */
  uintptr_t self = (uintptr_t)pthread_self(), none = 0;
  if (!atomic_compare_exchange_strong(&c->owner[participant], &none, self) && none != self)
    atomic_fetch_add(&c->violations, 1); /* one number, two threads, one job */
  /* A little work per item so that several threads get to take part. */
  volatile uint64_t sink = 0;
  for (uint64_t i = begin; i < end; ++i) sink += i * i;
  (void)sink;
  unsigned k = atomic_fetch_add(&c->count, 1);
  if (k < MAX_CHUNKS) c->recs[k] = (chunk_rec_t){begin, end, participant};
  atomic_store(&c->in_use[participant], 0);
  return 0;
}

static int cmp_chunk(const void* a, const void* b) {
  const chunk_rec_t *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

CUBE_TEST(chunks_contiguous_and_participants_unique) {
  use_threads("8");
  cube__worker_pool_t* pool = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  const uint32_t size = cube__worker_pool_size(pool);
  REQUIRE(size == 8);
  const uint64_t n = 2000000, min_chunk = 1000;
  uint32_t max_seen_participants = 0;
  for (int round = 0; round < 20; ++round) {
    chunk_ctx_t* c = calloc(1, sizeof(*c));
    REQUIRE(c);
    c->recs = calloc(MAX_CHUNKS, sizeof(chunk_rec_t));
    REQUIRE(c->recs);
    c->size = size;
    CHECK(cube__worker_pool_run(pool, n, min_chunk, record_chunk, c) == 0);
    unsigned count = atomic_load(&c->count);
    REQUIRE(count <= MAX_CHUNKS);
    CHECK_EQ_U64(atomic_load(&c->violations), 0);
    qsort(c->recs, count, sizeof(chunk_rec_t), cmp_chunk);
    /* The chunks tile [0, n): no gap, no overlap. */
    uint64_t at = 0, small = 0;
    uint32_t seen = 0;
    for (unsigned i = 0; i < count; ++i) {
      CHECK_EQ_U64(c->recs[i].begin, at);
      CHECK(c->recs[i].end > c->recs[i].begin);
      if (c->recs[i].end - c->recs[i].begin < min_chunk) ++small;
      at = c->recs[i].end;
      seen |= 1u << c->recs[i].participant;
    }
    CHECK_EQ_U64(at, n);
    /* Big contiguous chunks: about 8 per participant (n / (size * 8) items
     * each), only the tail of a share may be shorter; never item by item. */
    CHECK(count <= size * 8 + size);
    CHECK(small <= size);
    CHECK(c->recs[0].begin == 0 && c->recs[0].end - c->recs[0].begin >= n / (size * 8));
    uint32_t participants = (uint32_t)__builtin_popcount(seen);
    if (participants > max_seen_participants) max_seen_participants = participants;
    free(c->recs);
    free(c);
  }
  printf("most participants in one job: %u of %u\n", max_seen_participants, size);
  CHECK(max_seen_participants >= 1);
  cube__worker_pool_release(pool);
}

//===----------------------------------------------------------------------===//
// Concurrent jobs
//===----------------------------------------------------------------------===//

typedef struct {
  cube__worker_pool_t* pool;
  uint64_t n;
  int rounds;
  int failures;
  uint32_t seed;
} submitter_t;

static int add_range(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  (void)participant;
  uint32_t* data = p;
  for (uint64_t i = begin; i < end; ++i) data[i] += (uint32_t)i;
  return 0;
}

static void* submitter_main(void* arg) {
  submitter_t* s = arg;
  uint32_t* data = calloc(s->n, sizeof(uint32_t));
  if (!data) {
    s->failures++;
    return NULL;
  }
  for (int r = 0; r < s->rounds; ++r) {
    uint64_t n = s->n - (uint64_t)((s->seed + (uint32_t)r * 7919u) % 1000u);
    memset(data, 0, s->n * sizeof(uint32_t));
    if (cube__worker_pool_run(s->pool, n, 64, add_range, data) != 0) s->failures++;
    for (uint64_t i = 0; i < s->n; ++i) {
      uint32_t want = i < n ? (uint32_t)i : 0;
      if (data[i] != want) {
        s->failures++;
        break;
      }
    }
  }
  free(data);
  return NULL;
}

CUBE_TEST(two_threads_run_jobs_at_once) {
  use_threads("4");
  cube__worker_pool_t* pool = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  enum { SUBMITTERS = 3 };
  submitter_t subs[SUBMITTERS];
  pthread_t threads[SUBMITTERS];
  for (int i = 0; i < SUBMITTERS; ++i) {
    subs[i] = (submitter_t){pool, 200000 + (uint64_t)i * 3331, 200, 0, (uint32_t)i * 13u};
    REQUIRE(pthread_create(&threads[i], NULL, submitter_main, &subs[i]) == 0);
  }
  for (int i = 0; i < SUBMITTERS; ++i) {
    pthread_join(threads[i], NULL);
    CHECK_EQ_U64(subs[i].failures, 0);
  }
  cube__worker_pool_release(pool);
}

//===----------------------------------------------------------------------===//
// Stopping
//===----------------------------------------------------------------------===//

typedef struct {
  uint64_t fail_at;
  int code;
  atomic_uint_fast64_t done;
} stop_ctx_t;

static int fail_on_item(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  (void)participant;
  stop_ctx_t* c = p;
  if (c->fail_at >= begin && c->fail_at < end) return c->code;
  volatile uint64_t sink = 0;
  for (uint64_t i = begin; i < end; ++i) sink += i;
  (void)sink;
  atomic_fetch_add(&c->done, end - begin);
  return 0;
}

static int fail_always(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  (void)begin;
  (void)end;
  atomic_fetch_add((atomic_uint*)p, 1);
  return (int)participant + 100;
}

CUBE_TEST(nonzero_return_stops_the_job) {
  use_threads("4");
  cube__worker_pool_t* pool = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  const uint64_t n = 10000000;
  stop_ctx_t c = {0, 42, 0};
  CHECK(cube__worker_pool_run(pool, n, 1, fail_on_item, &c) == 42);
  /* The chunk holding item 0 never completes; how much else ran depends on
   * timing (the others finish the chunk in hand and take no more). */
  CHECK(atomic_load(&c.done) < n);
  printf("items run besides the failing chunk at item 0: %llu of %llu\n",
         (unsigned long long)atomic_load(&c.done), (unsigned long long)n);

  stop_ctx_t d = {n - 1, -3, 0};
  CHECK(cube__worker_pool_run(pool, n, 1, fail_on_item, &d) == -3);
  CHECK(atomic_load(&d.done) < n);

  /* Every participant fails on its first chunk and takes no second one:
   * at most one call per participant, out of 32 chunks. */
  for (int round = 0; round < 50; ++round) {
    atomic_uint calls = 0;
    int rc = cube__worker_pool_run(pool, n, 1, fail_always, &calls);
    CHECK(rc >= 100 && rc < 104);
    CHECK(atomic_load(&calls) >= 1 && atomic_load(&calls) <= 4);
  }

  /* The pool is fine afterwards. */
  run_count(pool, 1000003, 1);
  cube__worker_pool_release(pool);
}

//===----------------------------------------------------------------------===//
// Edge sizes, many small jobs, restart
//===----------------------------------------------------------------------===//

typedef struct {
  atomic_uint calls;
  uint64_t begin, end;
  uint32_t participant;
  pthread_t thread;
} one_call_t;

static int note_call(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  one_call_t* c = p;
  atomic_fetch_add(&c->calls, 1);
  c->begin = begin;
  c->end = end;
  c->participant = participant;
  c->thread = pthread_self();
  return 0;
}

CUBE_TEST(zero_and_one_item) {
  use_threads("4");
  cube__worker_pool_t* pool = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  one_call_t c;
  memset(&c, 0, sizeof(c));
  CHECK(cube__worker_pool_run(pool, 0, 1, note_call, &c) == 0);
  CHECK_EQ_U64(atomic_load(&c.calls), 0);

  CHECK(cube__worker_pool_run(pool, 1, 1, note_call, &c) == 0);
  CHECK_EQ_U64(atomic_load(&c.calls), 1);
  CHECK(c.begin == 0 && c.end == 1 && c.participant == 0);
  CHECK(pthread_equal(c.thread, pthread_self()));

  /* n <= min_chunk: one call on the caller. */
  memset(&c, 0, sizeof(c));
  CHECK(cube__worker_pool_run(pool, 500, 500, note_call, &c) == 0);
  CHECK_EQ_U64(atomic_load(&c.calls), 1);
  CHECK(c.begin == 0 && c.end == 500 && pthread_equal(c.thread, pthread_self()));

  /* min_chunk 0 is taken as 1. */
  memset(&c, 0, sizeof(c));
  CHECK(cube__worker_pool_run(pool, 1, 0, note_call, &c) == 0);
  CHECK_EQ_U64(atomic_load(&c.calls), 1);
  cube__worker_pool_release(pool);
}

static int sum_small(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  (void)participant;
  atomic_uint_fast64_t* sum = p;
  uint64_t s = 0;
  for (uint64_t i = begin; i < end; ++i) s += i + 1;
  atomic_fetch_add_explicit(sum, s, memory_order_relaxed);
  return 0;
}

CUBE_TEST(many_small_jobs) {
  use_threads("4");
  cube__worker_pool_t* pool = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  const int jobs = 100000;
  uint64_t t0 = cube__now_ns();
  uint64_t bad = 0;
  for (int j = 0; j < jobs; ++j) {
    atomic_uint_fast64_t sum = 0;
    uint64_t n = 16 + (uint64_t)(j % 64);
    if (cube__worker_pool_run(pool, n, 1, sum_small, &sum) != 0) ++bad;
    if (atomic_load(&sum) != n * (n + 1) / 2) ++bad;
  }
  uint64_t t1 = cube__now_ns();
  CHECK_EQ_U64(bad, 0);
  printf("%d jobs of 16..79 items (min_chunk 1, 4 participants): %.3f s, %.2f us per job\n", jobs,
         (double)(t1 - t0) / 1e9, (double)(t1 - t0) / 1e3 / jobs);
  CHECK(t1 - t0 < 60ull * 1000000000ull);
  cube__worker_pool_release(pool);
}

CUBE_TEST(acquire_release_twice_restarts_threads) {
  use_threads("3");
  for (int round = 0; round < 2; ++round) {
    cube__worker_pool_t *a = NULL, *b = NULL;
    REQUIRE_OK(cube__worker_pool_acquire(&a));
    REQUIRE_OK(cube__worker_pool_acquire(&b));
    CHECK(a == b); /* one pool per process */
    CHECK_EQ_U64(cube__worker_pool_size(a), 3);
    run_count(a, 1000003, 1);
    cube__worker_pool_release(b);
    run_count(a, 1000003, 1); /* still alive with one reference */
    cube__worker_pool_release(a);
  }
  /* A new size is honoured once the last reference is gone. */
  use_threads("2");
  cube__worker_pool_t* c = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&c));
  CHECK_EQ_U64(cube__worker_pool_size(c), 2);
  run_count(c, 100003, 1);
  cube__worker_pool_release(c);
}

//===----------------------------------------------------------------------===//
// At most k participants (a device that uses part of the pool)
//===----------------------------------------------------------------------===//

typedef struct {
  uint8_t* hits;
  uint32_t most;
  atomic_uint bad_participant;
  atomic_uint_fast64_t seen; /* bit per participant number */
} most_ctx_t;

static int most_items(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  most_ctx_t* c = p;
  if (participant >= c->most || participant >= 64) {
    atomic_fetch_add(&c->bad_participant, 1);
  } else {
    atomic_fetch_or(&c->seen, (uint_fast64_t)1 << participant);
  }
  volatile uint64_t sink = 0;
  for (uint64_t i = begin; i < end; ++i) {
    c->hits[i]++;
    for (int k = 0; k < 50; ++k) sink += i * (uint64_t)k;
  }
  (void)sink;
  return 0;
}

CUBE_TEST(run_at_most_bounds_participants) {
  use_threads("4");
  cube__worker_pool_t* pool = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  REQUIRE(cube__worker_pool_size(pool) == 4);
  static const uint32_t limits[] = {1, 2, 3, 4, 1000, 0};
  const uint64_t n = 400009;
  for (size_t t = 0; t < sizeof(limits) / sizeof(limits[0]); ++t) {
    most_ctx_t c;
    memset(&c, 0, sizeof(c));
    c.hits = calloc(n, 1);
    REQUIRE(c.hits);
    uint32_t most = limits[t] == 0 ? 1 : limits[t] > 4 ? 4 : limits[t];
    c.most = most;
    CHECK(cube__worker_pool_run_at_most(pool, n, 1, limits[t], most_items, &c) == 0);
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < n; ++i) wrong += c.hits[i] != 1;
    CHECK_EQ_U64(wrong, 0);
    CHECK_EQ_U64(atomic_load(&c.bad_participant), 0);
    uint64_t seen = atomic_load(&c.seen);
    if (most == 1) CHECK_EQ_U64(seen, 1); /* the caller alone */
    /* Not "the caller always works": on a loaded machine the submitter can
     * be descheduled after publishing the job, and spinning workers then
     * take every chunk before it runs (seen on a 2-core host). */
    CHECK(seen != 0 && seen < ((uint64_t)1 << most));
    free(c.hits);
  }
  cube__worker_pool_release(pool);
}

//===----------------------------------------------------------------------===//
// The same part of the range for the same thread
//===----------------------------------------------------------------------===//

/* Items that take a while (so every thread has joined before anyone runs out
 * of its own share), each recording the thread that ran it. */
#define HOME_SHARES 4u
#define HOME_PER_SHARE 8u
#define HOME_ITEMS (HOME_SHARES * HOME_PER_SHARE)

typedef struct {
  pthread_t who[HOME_ITEMS];
} home_ctx_t;

static int home_items(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  (void)participant;
  home_ctx_t* c = p;
  for (uint64_t i = begin; i < end; ++i) {
    c->who[i] = pthread_self();
    struct timespec ts = {0, 10000000}; /* 10 ms */
    nanosleep(&ts, NULL);
  }
  return 0;
}

/* Launch after launch, the first item of each share runs on the same thread
 * (a worker's home share is fixed, whatever order the workers joined in), so
 * that the part of the data a thread worked on is still in its caches. The
 * order in which sleeping workers wake up changes from launch to launch; with
 * the share following the join order this failed. */
CUBE_TEST(same_thread_same_share_every_launch) {
  use_threads("4");
  cube__worker_pool_t* pool = NULL;
  REQUIRE_OK(cube__worker_pool_acquire(&pool));
  REQUIRE(cube__worker_pool_size(pool) == HOME_SHARES);
  home_ctx_t first;
  memset(&first, 0, sizeof(first));
  uint32_t moved = 0;
  for (int launch = 0; launch < 8; ++launch) {
    home_ctx_t c;
    memset(&c, 0, sizeof(c));
    CHECK(cube__worker_pool_run(pool, HOME_ITEMS, 1, home_items, &c) == 0);
    if (launch == 0) {
      first = c;
      /* Four threads, one per share. */
      for (uint32_t a = 0; a < HOME_SHARES; ++a)
        for (uint32_t b = a + 1; b < HOME_SHARES; ++b)
          CHECK(!pthread_equal(c.who[a * HOME_PER_SHARE], c.who[b * HOME_PER_SHARE]));
    } else {
      for (uint32_t s = 0; s < HOME_SHARES; ++s)
        moved += !pthread_equal(c.who[s * HOME_PER_SHARE], first.who[s * HOME_PER_SHARE]);
    }
    /* Idle long enough that the workers sleep, and wake in some order. */
    struct timespec idle = {0, 120000000};
    nanosleep(&idle, NULL);
  }
  CHECK_EQ_U64(moved, 0);
  cube__worker_pool_release(pool);
}
