/* The process's worker pool (see worker_pool.h).
 *
 * Shape of a job: [0, n) is cut into one contiguous *share* per participant,
 * each with its own atomic cursor. A participant first eats its home share
 * from the front in chunks (worker thread w's home is share w % shares, the
 * submitter's share 0: the same share for the same thread at every launch),
 * then moves on to the next shares and takes chunks from their fronts. Every
 * chunk is contiguous and big (n / (size * 8) items, at least min_chunk), so
 * a worker streams through memory; a share whose owner never shows up (its
 * thread is busy with another job) is simply eaten by the others. Cubes are
 * never dealt round-robin: design/cpu-notes.md measured a 5x bandwidth loss.
 *
 * Synchronisation:
 *  - pool->lock guards the list of active jobs, the free list of job
 *    objects, and joining (a joiner takes its participant number and bumps
 *    job->running under the lock). A submitter unlinks its job under the
 *    lock, so nobody can join afterwards; it then waits for job->running to
 *    reach 0 (spin, then futex).
 *  - Chunks are claimed lock-free (CAS on the share cursor).
 *  - Idle workers watch pool->epoch, bumped under the lock whenever a job is
 *    posted (or the pool stops): they spin on it for a while, then sleep on it
 *    as a futex. A poster only makes the futex system call when
 *    pool->sleepers says that someone sleeps, so waking spinning workers
 *    costs one atomic increment.
 *  - Job objects belong to the pool and are recycled, never freed before the
 *    pool: a joiner that has just left a job may still touch its futex word
 *    after the submitter returned (a spurious wake-up at worst).
 */
#include "platform/worker_pool.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "base/status.h"
#include "platform/platform.h"

#define CUBE__POOL_MAX_THREADS 1024u
/* How long an idle worker (or a submitter waiting for its helpers) spins
 * before sleeping. Short enough not to steal a core from other work for
 * long, long enough to catch back-to-back launches. */
#define CUBE__POOL_SPIN_NS 50000u
/* A participant's share is cut into about this many chunks. */
#define CUBE__POOL_CHUNKS_PER_SHARE 8u

typedef struct cube__pool_share {
  _Alignas(64) atomic_uint_fast64_t next; /* first item not yet handed out */
  uint64_t end;                           /* one past the share's last item */
} cube__pool_share_t;

typedef struct cube__pool_job cube__pool_job_t;
struct cube__pool_job {
  /* Written by the submitter before the job is linked; read-only while it
   * is linked (joiners read them after taking pool->lock). */
  cube__range_fn fn;
  void* ctx;
  uint64_t chunk;
  uint32_t share_count;
  uint32_t max_participants; /* the submitter included; <= pool->size */
  /* Guarded by pool->lock. */
  cube__pool_job_t* next; /* active list or free list */
  uint32_t next_participant;
  /* Shared by the participants. */
  _Alignas(64) atomic_int result; /* first non-zero value returned by fn */
  atomic_bool exhausted;          /* a participant found no chunk left */
  atomic_uint running;            /* joiners inside the job (futex word) */
  atomic_uint submitter_sleeping; /* the submitter sleeps on |running| */
  cube__pool_share_t shares[];    /* share_count used, pool size allocated */
};

struct cube__worker_pool {
  uint32_t size;         /* own threads + 1 */
  uint32_t thread_count; /* own threads actually started */
  pthread_t* threads;
  pthread_mutex_t lock;
  cube__pool_job_t* active_head; /* oldest first (lock) */
  cube__pool_job_t* active_tail;
  cube__pool_job_t* free_jobs; /* lock */
  bool stopping;               /* lock */
  uint32_t homes;              /* lock: workers numbered so far (their home shares) */
  _Alignas(64) atomic_uint epoch;
  atomic_uint sleepers;
};

/* The process-wide pool. */
static pthread_mutex_t cube__pool_global_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__worker_pool_t* cube__pool_global;
static uint32_t cube__pool_refs;

//===----------------------------------------------------------------------===//
// Working on a job
//===----------------------------------------------------------------------===//

/* Claims the next chunk of |share|: true with [*out_begin, *out_end). */
static bool cube__share_claim(cube__pool_share_t* share, uint64_t chunk, uint64_t* out_begin,
                              uint64_t* out_end) {
  uint64_t begin = atomic_load_explicit(&share->next, memory_order_relaxed);
  uint64_t end;
  do {
    if (begin >= share->end) return false;
    end = share->end - begin > chunk ? begin + chunk : share->end;
  } while (!atomic_compare_exchange_weak_explicit(&share->next, &begin, end, memory_order_relaxed,
                                                  memory_order_relaxed));
  *out_begin = begin;
  *out_end = end;
  return true;
}

/* Runs chunks of |job| as |participant| until none is left or the job
 * stopped, starting with share |home| % share_count: a thread's own fixed
 * number (the submitter's is 0), so that a thread gets the same part of the
 * range launch after launch whatever order the threads joined in, and may
 * find that part still in its own caches, as with OpenMP's static schedule
 * (docs/benchmarks.md, fifth session of 2026-12-04). */
static void cube__job_work(cube__pool_job_t* job, uint32_t participant, uint32_t home) {
  const uint32_t shares = job->share_count;
  uint32_t s = home % shares;
  for (uint32_t k = 0; k < shares; ++k) {
    cube__pool_share_t* share = &job->shares[s];
    uint64_t begin, end;
    for (;;) {
      if (atomic_load_explicit(&job->result, memory_order_relaxed) != 0) return;
      if (!cube__share_claim(share, job->chunk, &begin, &end)) break;
      int rc = job->fn(job->ctx, begin, end, participant);
      if (rc != 0) {
        int expected = 0;
        atomic_compare_exchange_strong_explicit(&job->result, &expected, rc,
                                                memory_order_relaxed, memory_order_relaxed);
        return;
      }
    }
    if (++s == shares) s = 0;
  }
  atomic_store_explicit(&job->exhausted, true, memory_order_relaxed);
}

/* A joiner leaves |job|. Touches only atomics after the decrement: the
 * submitter may return (and the job be recycled) at once. */
static void cube__job_leave(cube__pool_job_t* job) {
  if (atomic_fetch_sub_explicit(&job->running, 1, memory_order_seq_cst) == 1 &&
      atomic_load_explicit(&job->submitter_sleeping, memory_order_seq_cst))
    cube__futex_wake(&job->running, 1);
}

/* The submitter waits for every joiner of its (unlinked) job to leave. */
static void cube__job_wait(cube__pool_job_t* job) {
  uint64_t start = 0;
  for (unsigned i = 1;; ++i) {
    if (atomic_load_explicit(&job->running, memory_order_acquire) == 0) return;
    cube__cpu_relax();
    if ((i & 63) == 0) {
      uint64_t now = cube__now_ns();
      if (!start)
        start = now;
      else if (now - start > CUBE__POOL_SPIN_NS)
        break;
    }
  }
  atomic_store_explicit(&job->submitter_sleeping, 1, memory_order_seq_cst);
  for (;;) {
    unsigned r = atomic_load_explicit(&job->running, memory_order_seq_cst);
    if (r == 0) break;
    cube__futex_wait(&job->running, r, UINT64_MAX);
  }
  atomic_store_explicit(&job->submitter_sleeping, 0, memory_order_relaxed);
}

/* The oldest job a worker can help with, or NULL. Under pool->lock. */
static cube__pool_job_t* cube__pool_find_job(cube__worker_pool_t* pool) {
  for (cube__pool_job_t* job = pool->active_head; job; job = job->next) {
    if (job->next_participant >= job->max_participants) continue;
    if (atomic_load_explicit(&job->exhausted, memory_order_relaxed)) continue;
    if (atomic_load_explicit(&job->result, memory_order_relaxed) != 0) continue;
    return job;
  }
  return NULL;
}

/* Waits until pool->epoch differs from |seen| (or a spurious wake-up). */
static void cube__pool_idle(cube__worker_pool_t* pool, unsigned seen) {
  uint64_t start = 0;
  for (unsigned i = 1;; ++i) {
    if (atomic_load_explicit(&pool->epoch, memory_order_acquire) != seen) return;
    cube__cpu_relax();
    if ((i & 63) == 0) {
      uint64_t now = cube__now_ns();
      if (!start)
        start = now;
      else if (now - start > CUBE__POOL_SPIN_NS)
        break;
    }
  }
  atomic_fetch_add_explicit(&pool->sleepers, 1, memory_order_seq_cst);
  cube__futex_wait(&pool->epoch, seen, UINT64_MAX);
  atomic_fetch_sub_explicit(&pool->sleepers, 1, memory_order_relaxed);
}

static void* cube__pool_worker_main(void* arg) {
  cube__worker_pool_t* pool = arg;
  pthread_mutex_lock(&pool->lock);
  const uint32_t home = ++pool->homes; /* 1 .. size - 1: this thread's share */
  while (!pool->stopping) {
    cube__pool_job_t* job = cube__pool_find_job(pool);
    if (job) {
      uint32_t participant = job->next_participant++;
      atomic_fetch_add_explicit(&job->running, 1, memory_order_relaxed);
      pthread_mutex_unlock(&pool->lock);
      cube__job_work(job, participant, home);
      cube__job_leave(job);
    } else {
      unsigned seen = atomic_load_explicit(&pool->epoch, memory_order_relaxed);
      pthread_mutex_unlock(&pool->lock);
      cube__pool_idle(pool, seen);
    }
    pthread_mutex_lock(&pool->lock);
  }
  pthread_mutex_unlock(&pool->lock);
  return NULL;
}

//===----------------------------------------------------------------------===//
// Running jobs
//===----------------------------------------------------------------------===//

/* A job object with room for pool->size shares. Under pool->lock. */
static cube__pool_job_t* cube__pool_job_get(cube__worker_pool_t* pool) {
  cube__pool_job_t* job = pool->free_jobs;
  if (job) {
    pool->free_jobs = job->next;
    return job;
  }
  size_t bytes = sizeof(cube__pool_job_t) + (size_t)pool->size * sizeof(cube__pool_share_t);
  job = cube__aligned_alloc(bytes, 64);
  if (!job) return NULL;
  memset(job, 0, bytes);
  return job;
}

int cube__worker_pool_run(cube__worker_pool_t* pool, uint64_t n, uint64_t min_chunk,
                          cube__range_fn fn, void* ctx) {
  return cube__worker_pool_run_at_most(pool, n, min_chunk, UINT32_MAX, fn, ctx);
}

int cube__worker_pool_run_at_most(cube__worker_pool_t* pool, uint64_t n, uint64_t min_chunk,
                                  uint32_t max_participants, cube__range_fn fn, void* ctx) {
  if (n == 0) return 0;
  if (min_chunk == 0) min_chunk = 1;
  uint32_t most = pool && max_participants > pool->size ? pool->size : max_participants;
  /* Small jobs, one-thread pools and one-participant jobs never touch the
   * threads. */
  if (!pool || most <= 1 || n <= min_chunk) return fn(ctx, 0, n, 0);

  uint64_t shares = most;
  if (n / min_chunk < shares) shares = n / min_chunk; /* >= 1: n > min_chunk */
  uint64_t chunk = n / ((uint64_t)most * CUBE__POOL_CHUNKS_PER_SHARE);
  if (chunk < min_chunk) chunk = min_chunk;
  uint64_t chunks = (n + chunk - 1) / chunk;

  pthread_mutex_lock(&pool->lock);
  cube__pool_job_t* job = cube__pool_job_get(pool);
  if (!job) { /* no memory for the job: run it here, correct if slower */
    pthread_mutex_unlock(&pool->lock);
    return fn(ctx, 0, n, 0);
  }
  job->fn = fn;
  job->ctx = ctx;
  job->chunk = chunk;
  job->share_count = (uint32_t)shares;
  job->max_participants = most;
  job->next = NULL;
  job->next_participant = 1; /* the submitter is participant 0 */
  atomic_store_explicit(&job->result, 0, memory_order_relaxed);
  atomic_store_explicit(&job->exhausted, false, memory_order_relaxed);
  atomic_store_explicit(&job->running, 0, memory_order_relaxed);
  atomic_store_explicit(&job->submitter_sleeping, 0, memory_order_relaxed);
  uint64_t base = n / shares, extra = n % shares, at = 0;
  for (uint64_t i = 0; i < shares; ++i) {
    uint64_t len = base + (i < extra ? 1 : 0);
    atomic_store_explicit(&job->shares[i].next, at, memory_order_relaxed);
    job->shares[i].end = at + len;
    at += len;
  }
  if (pool->active_tail)
    pool->active_tail->next = job;
  else
    pool->active_head = job;
  pool->active_tail = job;
  atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_seq_cst);
  pthread_mutex_unlock(&pool->lock);

  /* Wake sleepers only when there are some; spinning workers see the epoch. */
  if (atomic_load_explicit(&pool->sleepers, memory_order_seq_cst) != 0) {
    uint64_t helpers = chunks - 1 < most - 1 ? chunks - 1 : most - 1;
    cube__futex_wake(&pool->epoch, (int)helpers);
  }

  cube__job_work(job, 0, 0);

  /* Unlink: nobody joins from now on. */
  pthread_mutex_lock(&pool->lock);
  cube__pool_job_t** link = &pool->active_head;
  cube__pool_job_t* prev = NULL;
  while (*link != job) {
    prev = *link;
    link = &(*link)->next;
  }
  *link = job->next;
  if (pool->active_tail == job) pool->active_tail = prev;
  bool helpers_inside = atomic_load_explicit(&job->running, memory_order_acquire) != 0;
  pthread_mutex_unlock(&pool->lock);

  if (helpers_inside) cube__job_wait(job);
  int rc = atomic_load_explicit(&job->result, memory_order_acquire);

  pthread_mutex_lock(&pool->lock);
  job->next = pool->free_jobs;
  pool->free_jobs = job;
  pthread_mutex_unlock(&pool->lock);
  return rc;
}

//===----------------------------------------------------------------------===//
// Life cycle
//===----------------------------------------------------------------------===//

static void cube__pool_stop_and_free(cube__worker_pool_t* pool) {
  pthread_mutex_lock(&pool->lock);
  pool->stopping = true;
  atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_seq_cst);
  pthread_mutex_unlock(&pool->lock);
  cube__futex_wake(&pool->epoch, -1);
  for (uint32_t i = 0; i < pool->thread_count; ++i) pthread_join(pool->threads[i], NULL);
  while (pool->free_jobs) {
    cube__pool_job_t* job = pool->free_jobs;
    pool->free_jobs = job->next;
    cube__aligned_free(job);
  }
  pthread_mutex_destroy(&pool->lock);
  free(pool->threads);
  cube__aligned_free(pool);
}

/* CUBE_CPU_THREADS (the option table accepts 1 to CUBE__POOL_MAX_THREADS),
 * else the cores this process may use. */
_Static_assert(CUBE__POOL_MAX_THREADS == CUBE__OPT_CPU_THREADS_MAX,
               "CUBE_CPU_THREADS accepts what the pool can have");
static cube_status_t cube__pool_threads_wanted(uint32_t* out_size) {
  uint32_t size = 0;
  CUBE_RETURN_IF_ERROR(cube__option_status(CUBE__OPT_CPU_THREADS));
  if (cube__option_has_value(CUBE__OPT_CPU_THREADS)) {
    size = cube__option_u32(CUBE__OPT_CPU_THREADS);
    if (size < 1) size = 1;
    if (size > CUBE__POOL_MAX_THREADS) size = CUBE__POOL_MAX_THREADS;
  } else {
    size = cube__cpu_count();
    if (size < 1) size = 1;
    if (size > CUBE__POOL_MAX_THREADS) size = CUBE__POOL_MAX_THREADS;
  }
  *out_size = size;
  return CUBE_OK;
}

static cube_status_t cube__pool_create(cube__worker_pool_t** out_pool) {
  uint32_t size = 1;
  CUBE_RETURN_IF_ERROR(cube__pool_threads_wanted(&size));
  cube__worker_pool_t* pool = cube__aligned_alloc(sizeof(*pool), 64);
  if (!pool)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cpu worker pool: no memory for the pool");
  memset(pool, 0, sizeof(*pool));
  pool->size = size;
  atomic_init(&pool->epoch, 0);
  atomic_init(&pool->sleepers, 0);
  if (pthread_mutex_init(&pool->lock, NULL) != 0) {
    cube__aligned_free(pool);
    return cube__status_make(CUBE_STATUS_INTERNAL, "cpu worker pool: pthread_mutex_init failed");
  }
  if (size > 1) {
    pool->threads = calloc(size - 1, sizeof(pthread_t));
    if (!pool->threads) {
      pthread_mutex_destroy(&pool->lock);
      cube__aligned_free(pool);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                               "cpu worker pool: no memory for %u threads", size - 1);
    }
  }
  /* A thread that fails to start is simply missing: jobs never wait for a
   * participant, so fewer threads still run every job correctly. pool->size
   * stays the bound on participant numbers (workers read it). */
  uint32_t started = 0;
  for (uint32_t i = 0; i + 1 < size; ++i) {
    char name[16];
    snprintf(name, sizeof(name), "cube-cpu-%u", (i + 1) % 10000u);
    cube_status_t s = cube__thread_create(&pool->threads[started], cube__pool_worker_main, pool,
                                          name, 8u << 20);
    if (s != CUBE_OK) {
      cube_status_free(s);
      break;
    }
    ++started;
  }
  pool->thread_count = started;
  *out_pool = pool;
  return CUBE_OK;
}

cube_status_t cube__worker_pool_acquire(cube__worker_pool_t** out_pool) {
  pthread_mutex_lock(&cube__pool_global_lock);
  if (!cube__pool_global) {
    cube_status_t s = cube__pool_create(&cube__pool_global);
    if (s != CUBE_OK) {
      pthread_mutex_unlock(&cube__pool_global_lock);
      return s;
    }
  }
  ++cube__pool_refs;
  *out_pool = cube__pool_global;
  pthread_mutex_unlock(&cube__pool_global_lock);
  return CUBE_OK;
}

void cube__worker_pool_release(cube__worker_pool_t* pool) {
  if (!pool) return;
  pthread_mutex_lock(&cube__pool_global_lock);
  if (pool == cube__pool_global && cube__pool_refs > 0 && --cube__pool_refs == 0) {
    cube__pool_global = NULL;
    cube__pool_stop_and_free(pool);
  }
  pthread_mutex_unlock(&cube__pool_global_lock);
}

uint32_t cube__worker_pool_size(const cube__worker_pool_t* pool) { return pool ? pool->size : 1; }
