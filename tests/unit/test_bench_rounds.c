// cube-test-libs: cube_static m
/* The alternating rounds of the CPU benches (bench/bench_rounds.h): the
 * median and spread, the order of the systems in each round, the number of
 * rounds, and the runner over scripted systems (per-round ratios, failed
 * rounds). */
#include <math.h>

#include "../../bench/bench_rounds.h"
#include "check.h"

static uint64_t next_rand(uint64_t* s) {
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1Dull;
}

CUBE_TEST(spread_odd_unsorted) {
  const double v[] = {5.0, 1.0, 4.0, 3.0, 2.0};
  double copy[5];
  memcpy(copy, v, sizeof(v));
  spread_t s = spread_of(copy, 5);
  CHECK(s.n_valid == 5);
  CHECK(s.median == 3.0);
  CHECK(s.min == 1.0);
  CHECK(s.max == 5.0);
  CHECK(memcmp(copy, v, sizeof(v)) == 0); /* the input is left as it was */
}

CUBE_TEST(spread_even_unsorted) {
  const double v[] = {4.0, 1.0, 3.5, 2.0};
  spread_t s = spread_of(v, 4);
  CHECK(s.n_valid == 4);
  CHECK(s.median == 2.75); /* (2 + 3.5) / 2 */
  CHECK(s.min == 1.0);
  CHECK(s.max == 4.0);
  const double one[] = {7.25};
  s = spread_of(one, 1);
  CHECK(s.n_valid == 1 && s.median == 7.25 && s.min == 7.25 && s.max == 7.25);
}

/* Failed rounds (NaN, infinities) are left out; none valid gives NaN. */
CUBE_TEST(spread_skips_failed) {
  const double v[] = {NAN, 9.0, INFINITY, 1.0, -INFINITY, 4.0};
  spread_t s = spread_of(v, 6);
  CHECK(s.n_valid == 3);
  CHECK(s.median == 4.0);
  CHECK(s.min == 1.0);
  CHECK(s.max == 9.0);
  const double none[] = {NAN, NAN};
  s = spread_of(none, 2);
  CHECK(s.n_valid == 0);
  CHECK(isnan(s.median) && isnan(s.min) && isnan(s.max));
  s = spread_of(NULL, 0);
  CHECK(s.n_valid == 0 && isnan(s.median));
}

/* Random counts and values: the median has as many values at or below it as
 * at or above it (at least half each), and min / max are the extremes. */
CUBE_TEST(spread_random_against_counts) {
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  for (int trial = 0; trial < 500; ++trial) {
    int n = 1 + (int)(next_rand(&seed) % 64);
    double v[64];
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; ++i) {
      /* Few distinct values, so ties are common. */
      v[i] = (double)(next_rand(&seed) % 17) - 8.0;
      lo = v[i] < lo ? v[i] : lo;
      hi = v[i] > hi ? v[i] : hi;
    }
    spread_t s = spread_of(v, n);
    REQUIRE(s.n_valid == n);
    CHECK(s.min == lo && s.max == hi);
    int le = 0, ge = 0;
    for (int i = 0; i < n; ++i) le += v[i] <= s.median, ge += v[i] >= s.median;
    CHECK(2 * le >= n && 2 * ge >= n);
    if (n % 2) {
      int eq = 0;
      for (int i = 0; i < n; ++i) eq += v[i] == s.median;
      CHECK(eq >= 1); /* odd count: the median is one of the values */
    }
  }
}

/* Every round is a permutation; over n rounds each system runs first once;
 * over 2n rounds every pair of neighbours meets in both orders. */
CUBE_TEST(order_rotates_and_alternates) {
  for (int n = 1; n <= ROUNDS_SYSTEMS_MAX; ++n) {
    int first[ROUNDS_SYSTEMS_MAX] = {0};
    bool before[ROUNDS_SYSTEMS_MAX][ROUNDS_SYSTEMS_MAX];
    memset(before, 0, sizeof(before));
    for (int r = 0; r < 2 * n; ++r) {
      bool seen[ROUNDS_SYSTEMS_MAX] = {false};
      int prev = -1;
      for (int p = 0; p < n; ++p) {
        int i = rounds_order(r, n, p);
        REQUIRE(i >= 0 && i < n);
        CHECK(!seen[i]);
        seen[i] = true;
        if (p == 0 && r < n) first[i]++;
        if (prev >= 0) before[prev][i] = true;
        prev = i;
      }
    }
    for (int i = 0; i < n; ++i) CHECK(first[i] == 1);
    if (n >= 2)
      for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b)
          if (before[a][b]) CHECK(before[b][a]);
  }
  CHECK(rounds_order(3, 0, 0) == 0); /* no systems: no crash */
}

CUBE_TEST(parse_rounds) {
  bool adj = true;
  CHECK(rounds_parse(NULL, false, &adj) == ROUNDS_MIN && !adj);
  CHECK(rounds_parse("", false, &adj) == ROUNDS_MIN && !adj);
  CHECK(rounds_parse("9", false, &adj) == 9 && !adj);
  CHECK(rounds_parse("5", false, &adj) == 5 && !adj);
  CHECK(rounds_parse("3", false, &adj) == ROUNDS_MIN && adj); /* never below 5 */
  CHECK(rounds_parse("-7", false, &adj) == ROUNDS_MIN && adj);
  CHECK(rounds_parse("abc", false, &adj) == ROUNDS_MIN && adj);
  CHECK(rounds_parse("7x", false, &adj) == ROUNDS_MIN && adj);
  CHECK(rounds_parse("100000", false, &adj) == ROUNDS_MAX && adj);
  CHECK(rounds_parse("99999999999999999999999", false, &adj) == ROUNDS_MIN && adj);
  CHECK(rounds_parse("9", true, &adj) == ROUNDS_QUICK && !adj); /* quick mode wins */
  CHECK(rounds_parse("12", false, NULL) == 12);
}

/* Scripted systems: a per-round "load" multiplies every system's time in
 * that round (a neighbour that comes and goes). Each system's trial returns
 * base * load[its round]; system 2 fails (counts a failure) in round 1. */
typedef struct fake {
  int id;
  double base_ns;
  int trials_per_round;
  int calls;
  int fail_round;
} fake_t;

static const double k_load[7] = {1.0, 3.0, 1.5, 9.0, 1.0, 2.0, 4.0};
static int g_log[7 * 3 * 4];
static int g_log_n;

static uint64_t fake_trial(void* p, uint64_t iters) {
  fake_t* f = p;
  int round = f->calls / f->trials_per_round;
  f->calls++;
  g_log[g_log_n++] = f->id;
  if (round == f->fail_round) g_failures++;
  return (uint64_t)(f->base_ns * k_load[round] * (double)iters);
}

static int g_between;
static void count_between(void) { g_between++; }

CUBE_TEST(runner_per_round_ratios) {
  enum { R = 7, PER = 3 };
  fake_t f[3] = {{0, 1000.0, PER, 0, -1}, {1, 4000.0, PER, 0, -1}, {2, 500.0, PER, 0, 1}};
  rounds_t r;
  rounds_init(&r, R, count_between);
  for (int i = 0; i < 3; ++i)
    CHECK(rounds_add(&r, "fake", fake_trial, &f[i], 10, 0, PER) == i);
  g_log_n = 0;
  g_between = 0;
  int failures = g_failures;
  rounds_run(&r);
  CHECK(g_failures == failures + PER); /* the scripted failures */
  g_failures = failures;
  CHECK(g_between == R * 3);
  CHECK(g_log_n == R * 3 * PER);
  /* The order of each round is rounds_order's; its trials run together. */
  for (int round = 0; round < R; ++round)
    for (int p = 0; p < 3; ++p)
      for (int t = 0; t < PER; ++t)
        CHECK(g_log[(round * 3 + p) * PER + t] == rounds_order(round, 3, p));
  /* Figures: per operation in us; the median over the round loads. */
  spread_t a = rounds_figure(&r, 0);
  CHECK(a.n_valid == R);
  CHECK(fabs(a.median - 2.0) < 1e-9); /* loads sorted: 1 1 1.5 2 3 4 9 */
  CHECK(fabs(a.min - 1.0) < 1e-9 && fabs(a.max - 9.0) < 1e-9);
  /* A ratio from the same round cancels the load: exactly 4 every round. */
  spread_t t = rounds_ratio(&r, 1, 0, false);
  CHECK(t.n_valid == R);
  CHECK(fabs(t.median - 4.0) < 1e-9 && fabs(t.min - 4.0) < 1e-9 && fabs(t.max - 4.0) < 1e-9);
  spread_t q = rounds_ratio(&r, 1, 0, true); /* of rates: the inverse */
  CHECK(fabs(q.median - 0.25) < 1e-9);
  /* The failed round of system 2 is left out of its figure and ratios. */
  spread_t c = rounds_figure(&r, 2);
  CHECK(c.n_valid == R - 1);
  CHECK(isnan(r.sys[2].us[1]));
  spread_t cr = rounds_ratio(&r, 2, 0, true);
  CHECK(cr.n_valid == R - 1 && fabs(cr.median - 2.0) < 1e-9);
  /* Out-of-range systems give no figure. */
  CHECK(rounds_figure(&r, 5).n_valid == 0);
  CHECK(rounds_ratio(&r, -1, 0, true).n_valid == 0);
}

/* Warm-up trials run only before a system's first round; a full set refuses
 * another system. */
CUBE_TEST(runner_warmup_and_capacity) {
  fake_t f = {0, 100.0, 1, 0, -1};
  rounds_t r;
  rounds_init(&r, 5, NULL);
  /* The fake reads its round from its call count: warm-up calls shift it,
   * so give it a one-trial round and count the calls. */
  CHECK(rounds_add(&r, "warm", fake_trial, &f, 1, 2, 1) == 0);
  g_log_n = 0;
  rounds_run(&r);
  CHECK(f.calls == 2 + 5);
  rounds_t full;
  rounds_init(&full, 5, NULL);
  for (int i = 0; i < ROUNDS_SYSTEMS_MAX; ++i)
    CHECK(rounds_add(&full, "x", fake_trial, &f, 1, 0, 1) == i);
  CHECK(rounds_add(&full, "one too many", fake_trial, &f, 1, 0, 1) == -1);
  rounds_t many;
  rounds_init(&many, 1000, NULL);
  CHECK(many.n_rounds == ROUNDS_MAX);
}
