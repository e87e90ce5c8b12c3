// cube-test-libs: cube_static
/* A server's log lines and the program's log callback (profile/profiler.h;
 * cube_log_fn in cube/profile.h: "never under a lock that a cube call could
 * need"). The callback used to run under the profiler's own lock, so a
 * callback that read the profile summary (or anything else that takes that
 * lock) hung its device for good. Now the callback runs under no lock; lines
 * that come while it runs wait in a bounded queue that the delivering thread
 * empties, so the callback still sees one line at a time. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cube/cube.h"
#include "profile/profiler.h"

enum { THREADS = 6, LINES = 400 };

typedef struct sink {
  cube__profiler_t* p;
  atomic_int inside;   /* threads in the callback now */
  atomic_int most;     /* the most ever there at once */
  atomic_int depth_hi; /* the deepest nesting on one thread */
  pthread_mutex_t mu;  /* guards the fields below (only the test's own lock) */
  long next[THREADS];  /* the next sequence number each thread's lines must carry */
  long out_of_order;
  long delivered;
  long nested_asked, nested_seen;
  long summaries_read;
} sink_t;

static _Thread_local int tl_depth;

static void sink_fn(void* user, const char* line) {
  sink_t* s = user;
  int now = atomic_fetch_add(&s->inside, 1) + 1;
  int most = atomic_load(&s->most);
  while (now > most && !atomic_compare_exchange_weak(&s->most, &most, now)) {
  }
  if (++tl_depth > atomic_load(&s->depth_hi)) atomic_store(&s->depth_hi, tl_depth);
  int t;
  long seq;
  if (sscanf(line, "thread %d line %ld", &t, &seq) == 2 && t >= 0 && t < THREADS) {
    pthread_mutex_lock(&s->mu);
    if (seq != s->next[t]) s->out_of_order++;
    s->next[t] = seq + 1;
    s->delivered++;
    pthread_mutex_unlock(&s->mu);
    /* Every 50th line: what a program's callback may do. Reading the summary
     * takes the table's lock; logging again from here must neither recurse
     * nor deadlock: the nested line comes after this call returns. */
    if (seq % 50 == 0) {
      cube_profile_summary_t sum;
      if (cube__profiler_snapshot(s->p, false, &sum)) {
        pthread_mutex_lock(&s->mu);
        s->summaries_read++;
        pthread_mutex_unlock(&s->mu);
      }
      cube_profile_summary_deinitialize(&sum);
      pthread_mutex_lock(&s->mu);
      s->nested_asked++;
      pthread_mutex_unlock(&s->mu);
      cube__profiler_log(s->p, "nested after thread %d line %ld", t, seq);
    }
  } else if (strncmp(line, "nested after", 12) == 0) {
    pthread_mutex_lock(&s->mu);
    s->nested_seen++;
    pthread_mutex_unlock(&s->mu);
  }
  --tl_depth;
  atomic_fetch_sub(&s->inside, 1);
}

typedef struct writer {
  sink_t* s;
  int id;
} writer_t;

static void* writer_main(void* arg) {
  writer_t* w = arg;
  for (long i = 0; i < LINES; ++i) {
    cube__profiler_record(w->s->p, CUBE_PROFILE_ROW_KERNEL, "k", 1 + (uint64_t)i);
    cube__profiler_log(w->s->p, "thread %d line %ld", w->id, i);
  }
  return NULL;
}

/* Six threads log 400 numbered lines each while the callback reads the
 * summary and logs from inside itself: every line arrives once, each
 * thread's in its order, one at a time, never nested; nothing hangs. */
CUBE_TEST(callback_sees_one_line_at_a_time_and_may_call_in) {
  cube__profiler_t p;
  sink_t s;
  memset(&s, 0, sizeof(s));
  s.p = &p;
  pthread_mutex_init(&s.mu, NULL);
  REQUIRE(cube__profiler_init(&p, CUBE_PROFILE_BASIC, sink_fn, &s) == CUBE_OK);
  pthread_t th[THREADS];
  writer_t w[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    w[i] = (writer_t){&s, i};
    REQUIRE(pthread_create(&th[i], NULL, writer_main, &w[i]) == 0);
  }
  for (int i = 0; i < THREADS; ++i) pthread_join(th[i], NULL);
  CHECK_EQ_U64((uint64_t)s.delivered, (uint64_t)THREADS * LINES);
  CHECK_EQ_U64((uint64_t)s.out_of_order, 0);
  for (int i = 0; i < THREADS; ++i) CHECK_EQ_U64((uint64_t)s.next[i], LINES);
  CHECK_EQ_U64((uint64_t)atomic_load(&s.most), 1);
  CHECK_EQ_U64((uint64_t)atomic_load(&s.depth_hi), 1);
  CHECK_EQ_U64((uint64_t)s.nested_asked, (uint64_t)THREADS * (LINES / 50));
  CHECK_EQ_U64((uint64_t)s.nested_seen, (uint64_t)s.nested_asked);
  CHECK_EQ_U64((uint64_t)s.summaries_read, (uint64_t)s.nested_asked);
  cube_profile_summary_t sum;
  REQUIRE(cube__profiler_snapshot(&p, false, &sum));
  CHECK_EQ_U64(sum.row_count, 1);
  if (sum.row_count == 1) CHECK_EQ_U64(sum.rows[0].count, (uint64_t)THREADS * LINES);
  cube_profile_summary_deinitialize(&sum);
  cube__profiler_deinit(&p);
  pthread_mutex_destroy(&s.mu);
}

/* The summary table goes out in one piece: no other thread's line comes
 * between its header and its last row. */
typedef struct table_sink {
  pthread_mutex_t mu;
  char** lines;
  size_t count, cap;
} table_sink_t;

static void table_fn(void* user, const char* line) {
  table_sink_t* t = user;
  pthread_mutex_lock(&t->mu);
  if (t->count == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 256;
    t->lines = realloc(t->lines, t->cap * sizeof(*t->lines));
  }
  t->lines[t->count++] = strdup(line);
  pthread_mutex_unlock(&t->mu);
}

typedef struct noisy {
  cube__profiler_t* p;
  atomic_bool stop;
} noisy_t;

static void* noisy_main(void* arg) {
  noisy_t* n = arg;
  while (!atomic_load(&n->stop)) cube__profiler_log(n->p, "noise");
  return NULL;
}

CUBE_TEST(summary_table_is_not_interleaved) {
  cube__profiler_t p;
  table_sink_t t;
  memset(&t, 0, sizeof(t));
  pthread_mutex_init(&t.mu, NULL);
  REQUIRE(cube__profiler_init(&p, CUBE_PROFILE_BASIC, table_fn, &t) == CUBE_OK);
  noisy_t n = {&p, false};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, noisy_main, &n) == 0);
  int tables = 0;
  for (int round = 0; round < 200; ++round) {
    char name[32];
    for (int k = 0; k < 7; ++k) {
      snprintf(name, sizeof(name), "kernel_%d", k);
      cube__profiler_record(&p, CUBE_PROFILE_ROW_KERNEL, name, 1000 + (uint64_t)k);
    }
    cube__profiler_summary(&p); /* header, 7 rows, Total: 9 lines */
    ++tables;
  }
  atomic_store(&n.stop, true);
  pthread_join(th, NULL);
  int seen = 0, broken = 0;
  for (size_t i = 0; i < t.count; ++i) {
    if (strncmp(t.lines[i], "| Name", 6) != 0) continue;
    ++seen;
    if (i + 9 > t.count) {
      ++broken;
      continue;
    }
    for (size_t j = i + 1; j < i + 9; ++j)
      if (t.lines[j][0] != '|') ++broken;
  }
  CHECK_EQ_U64((uint64_t)seen, (uint64_t)tables);
  CHECK_EQ_U64((uint64_t)broken, 0);
  for (size_t i = 0; i < t.count; ++i) free(t.lines[i]);
  free(t.lines);
  cube__profiler_deinit(&p);
  pthread_mutex_destroy(&t.mu);
}

/* While one thread is in the callback, lines of other threads wait, at most
 * CUBE__LOG_QUEUE_MAX of them; the rest are counted and the count arrives as
 * a line of its own, after the queued ones. A thread that logs never waits
 * for the callback. */
typedef struct gate_sink {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool entered, open;
  long plain, first_note_at, total;
  char note[160];
} gate_sink_t;

static void gate_fn(void* user, const char* line) {
  gate_sink_t* g = user;
  pthread_mutex_lock(&g->mu);
  g->total++;
  if (strcmp(line, "first") == 0) {
    g->entered = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  } else if (strncmp(line, "cube: ", 6) == 0) {
    if (!g->first_note_at) g->first_note_at = g->total;
    snprintf(g->note, sizeof(g->note), "%s", line);
  } else {
    g->plain++;
  }
  pthread_mutex_unlock(&g->mu);
}

static void* first_main(void* arg) {
  cube__profiler_log(arg, "first");
  return NULL;
}

CUBE_TEST(lines_beyond_the_queue_are_counted) {
  cube__profiler_t p;
  gate_sink_t g;
  memset(&g, 0, sizeof(g));
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cv, NULL);
  REQUIRE(cube__profiler_init(&p, CUBE_PROFILE_BASIC, gate_fn, &g) == CUBE_OK);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, first_main, &p) == 0);
  pthread_mutex_lock(&g.mu);
  while (!g.entered) pthread_cond_wait(&g.cv, &g.mu);
  pthread_mutex_unlock(&g.mu);
  /* The other thread is inside the callback and stays there: these calls
   * return at once (were they to wait, this test would never end). */
  const long extra = 777;
  for (long i = 0; i < CUBE__LOG_QUEUE_MAX + extra; ++i) cube__profiler_log(&p, "line %ld", i);
  pthread_mutex_lock(&g.mu);
  CHECK_EQ_U64((uint64_t)g.plain, 0); /* none delivered on this thread */
  g.open = true;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  pthread_join(th, NULL);
  CHECK_EQ_U64((uint64_t)g.plain, CUBE__LOG_QUEUE_MAX);
  CHECK_EQ_U64((uint64_t)g.first_note_at, 1 + CUBE__LOG_QUEUE_MAX + 1);
  char want[160];
  snprintf(want, sizeof(want), "cube: %ld log lines dropped (%d were waiting for the log callback)",
           extra, CUBE__LOG_QUEUE_MAX);
  CHECK(strcmp(g.note, want) == 0);
  if (strcmp(g.note, want) != 0) fprintf(stderr, "note: '%s'\nwant: '%s'\n", g.note, want);
  /* Afterwards lines go straight through again. */
  cube__profiler_log(&p, "after");
  CHECK_EQ_U64((uint64_t)g.plain, CUBE__LOG_QUEUE_MAX + 1);
  cube__profiler_deinit(&p);
  pthread_cond_destroy(&g.cv);
  pthread_mutex_destroy(&g.mu);
}
