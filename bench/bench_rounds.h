/* Alternating rounds for the CPU benches (docs/benchmarks.md, "Targets"):
 * a set of named systems (one timed trial each: a trial_fn and its context),
 * run in R rounds. Each round runs every system once, in an order that
 * rotates and reverses from round to round (so none always runs first, and
 * none always follows the same neighbour), and yields one figure per system:
 * the median per-operation time of that round's few trials. A ratio between
 * two systems is taken per round (both figures from the same round, so a
 * neighbour's load that comes and goes hits both sides alike), then reported
 * as the median of the per-round ratios with their min and max.
 *
 * R is at least ROUNDS_MIN (5); CUBE_BENCH_ROUNDS raises it (up to
 * ROUNDS_MAX). Quick mode (the benches' "quick" argument or
 * CUBE_BENCH_QUICK=1, used by the smoke tests) runs ROUNDS_QUICK rounds: its
 * figures are not results.
 *
 * The statistics (spread_of, rounds_order, rounds_parse) are pure functions,
 * tested in tests/unit/test_bench_rounds.c; the runner takes its clock and
 * failure count from bench_common.h. */
#ifndef CUBE_BENCH_ROUNDS_H_
#define CUBE_BENCH_ROUNDS_H_

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#define ROUNDS_MIN 5
#define ROUNDS_QUICK 2
#define ROUNDS_MAX 64
#define ROUNDS_SYSTEMS_MAX 12

/* The median, min and max of the finite values among the first |n| of |v|
 * (at most 64 are read); |n_valid| says how
 * many there were (NaN and infinities are failed rounds, left out). With no
 * finite value every figure is NaN. |v| is not changed. */
typedef struct spread {
  double median, min, max;
  int n_valid;
} spread_t;

static inline spread_t spread_of(const double* v, int n) {
  spread_t s = {NAN, NAN, NAN, 0};
  double t[ROUNDS_MAX > MAX_TRIALS ? ROUNDS_MAX : MAX_TRIALS];
  int k = 0;
  for (int i = 0; i < n && k < (int)(sizeof(t) / sizeof(t[0])); ++i)
    if (isfinite(v[i])) t[k++] = v[i];
  if (!k) return s;
  qsort(t, (size_t)k, sizeof(double), cmp_double);
  s.median = median_sorted(t, k);
  s.min = t[0];
  s.max = t[k - 1];
  s.n_valid = k;
  return s;
}

/* The system that runs at position |pos| of round |round| among |n|: even
 * rounds rotate the list forward by |round|, odd rounds run it backwards
 * from |round|, so over n rounds each system runs first once and each pair
 * of neighbours meets in both orders. */
static inline int rounds_order(int round, int n, int pos) {
  if (n <= 0) return 0;
  return round % 2 == 0 ? (pos + round) % n : ((round - pos) % n + n) % n;
}

/* The number of rounds: ROUNDS_QUICK in quick mode; else |env| (the value of
 * CUBE_BENCH_ROUNDS, NULL or "" when unset) when it is a number in
 * [ROUNDS_MIN, ROUNDS_MAX], else the nearest bound. |*adjusted| (may be
 * NULL) says that |env| was set and not taken as written. */
static inline int rounds_parse(const char* env, bool quick, bool* adjusted) {
  if (adjusted) *adjusted = false;
  if (quick) return ROUNDS_QUICK;
  if (!env || !*env) return ROUNDS_MIN;
  char* end = NULL;
  errno = 0;
  long v = strtol(env, &end, 10);
  bool number = errno == 0 && end != env && *end == '\0';
  int r = !number || v < ROUNDS_MIN ? ROUNDS_MIN : v > ROUNDS_MAX ? ROUNDS_MAX : (int)v;
  if (adjusted) *adjusted = !number || r != v;
  return r;
}

/* Quick mode: CUBE_BENCH_QUICK set to anything but "" or "0". */
static inline bool bench_quick_env(void) {
  const char* q = getenv("CUBE_BENCH_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

typedef struct round_system {
  const char* name;
  trial_fn fn;
  void* ctx;
  uint64_t iters; /* operations per trial */
  int warmup;     /* untimed trials before the system's first round */
  int trials;     /* timed trials per round; the round's figure is their median */
  double us[ROUNDS_MAX]; /* per operation, per round; NaN: the round failed */
} round_system_t;

typedef struct rounds {
  int n_rounds;
  int n_systems;
  void (*between)(void); /* run before each system's turn (e.g. a short sleep) */
  round_system_t sys[ROUNDS_SYSTEMS_MAX];
} rounds_t;

static inline void rounds_init(rounds_t* r, int n_rounds, void (*between)(void)) {
  memset(r, 0, sizeof(*r));
  r->n_rounds = n_rounds < 1 ? 1 : n_rounds > ROUNDS_MAX ? ROUNDS_MAX : n_rounds;
  r->between = between;
}

/* Adds a system; its index, or -1 when the set is full (the system is then
 * not measured and its figures are NaN). */
static inline int rounds_add(rounds_t* r, const char* name, trial_fn fn, void* ctx,
                             uint64_t iters, int warmup, int trials) {
  if (r->n_systems >= ROUNDS_SYSTEMS_MAX) return -1;
  round_system_t* s = &r->sys[r->n_systems];
  s->name = name;
  s->fn = fn;
  s->ctx = ctx;
  s->iters = iters ? iters : 1;
  s->warmup = warmup < 0 ? 0 : warmup;
  s->trials = trials < 1 ? 1 : trials > MAX_TRIALS ? MAX_TRIALS : trials;
  for (int i = 0; i < ROUNDS_MAX; ++i) s->us[i] = NAN;
  return r->n_systems++;
}

/* Runs every round. A trial during which the bench counted a failure
 * (g_failures grew) makes that system's round figure NaN. */
static inline void rounds_run(rounds_t* r) {
  for (int round = 0; round < r->n_rounds; ++round) {
    for (int pos = 0; pos < r->n_systems; ++pos) {
      round_system_t* s = &r->sys[rounds_order(round, r->n_systems, pos)];
      if (r->between) r->between();
      int failures = g_failures;
      if (round == 0)
        for (int i = 0; i < s->warmup; ++i) (void)s->fn(s->ctx, s->iters);
      double t[MAX_TRIALS];
      for (int i = 0; i < s->trials; ++i)
        t[i] = (double)s->fn(s->ctx, s->iters) / 1000.0 / (double)s->iters;
      spread_t m = spread_of(t, s->trials);
      s->us[round] = g_failures == failures ? m.median : NAN;
    }
  }
}

/* Per operation, microseconds: the median of the round figures of |sys|. */
static inline spread_t rounds_figure(const rounds_t* r, int sys) {
  if (sys < 0 || sys >= r->n_systems) return spread_of(NULL, 0);
  return spread_of(r->sys[sys].us, r->n_rounds);
}

/* The per-round ratio of |a| over |b|, as the median over rounds with min and
 * max: of rates (b's time / a's time: higher is better, for the same work)
 * when |rate|, else of times (a's time / b's time: lower is better). A round
 * where either failed is left out. */
static inline spread_t rounds_ratio(const rounds_t* r, int a, int b, bool rate) {
  double v[ROUNDS_MAX];
  if (a < 0 || b < 0 || a >= r->n_systems || b >= r->n_systems) return spread_of(NULL, 0);
  for (int i = 0; i < r->n_rounds; ++i) {
    double ta = r->sys[a].us[i], tb = r->sys[b].us[i];
    v[i] = rate ? tb / ta : ta / tb;
  }
  return spread_of(v, r->n_rounds);
}

/* "median of N alternating rounds X.XXx (min A, max B)"; with rounds that
 * failed, "(K of N rounds failed)" after it. */
static inline void print_ratio_spread(spread_t s, int n_rounds) {
  if (!s.n_valid) {
    printf("no valid round of %d\n", n_rounds);
    return;
  }
  printf("median of %d alternating rounds %.2fx (min %.2f, max %.2f)", s.n_valid, s.median, s.min,
         s.max);
  if (s.n_valid < n_rounds) printf(" (%d of %d rounds failed)", n_rounds - s.n_valid, n_rounds);
  printf("\n");
}

#endif /* CUBE_BENCH_ROUNDS_H_ */
