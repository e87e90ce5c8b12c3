// cube-test-libs: cube_static
/* How many failures a taint reports past the ones it names (memory/taint.h;
 * docs/failures.md, "What a read says"): a buffer keeps the 8 earliest
 * failures behind its contents and counts the rest ("and <k> more
 * failures"). Taints meet in unions (a launch reads several spoiled
 * buffers), and the count must count each failure once: not the larger of
 * the two counts (too few when they are distinct), not both (too many when
 * they share one). Where that cannot be known, the count says "at least". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cube/cube.h"
#include "memory/taint.h"

/* A taint of one new failure. */
static cube__taint_t* fail_one(int i) {
  cube_status_t s = cube_status_make(CUBE_STATUS_INTERNAL, "failure %d", i);
  char what[32];
  snprintf(what, sizeof(what), "work %d", i);
  cube__taint_t* t = cube__taint_create(s, what);
  cube_status_free(s);
  return t;
}

/* |acc| joined with |t| (both released). */
static cube__taint_t* join(cube__taint_t* acc, cube__taint_t* t) {
  cube__taint_t* u = cube__taint_union(acc, t);
  cube__taint_unref(acc);
  cube__taint_unref(t);
  return u;
}

/* |n| new failures, one after the other, joined. */
static cube__taint_t* failures(int n, int first) {
  cube__taint_t* acc = NULL;
  for (int i = 0; i < n; ++i) acc = join(acc, fail_one(first + i));
  return acc;
}

/* 1 when the read status of |t| names 8 failures and ends with |tail|
 * ("and 4 more failures"); prints what it said otherwise. */
static int says(const cube__taint_t* t, const char* tail) {
  cube_status_t s = cube__taint_status(t, "read");
  const char* m = cube_status_message(s);
  size_t n = strlen(m), k = strlen(tail);
  int ok = cube_status_code(s) == CUBE_STATUS_DATA_LOST && cube_status_count(s) == 9 &&
           n >= k && strcmp(m + n - k, tail) == 0;
  if (!ok) {
    const char* last = strstr(m, "[9]");
    fprintf(stderr, "expected '... %s', got (%zu entries) %s\n", tail,
            (size_t)cube_status_count(s), last ? last : m);
  }
  cube_status_free(s);
  return ok;
}

CUBE_TEST(one_buffer_counts_each_failure) {
  cube__taint_t* a = failures(12, 0);
  REQUIRE(a != NULL);
  CHECK(says(a, "and 4 more failures"));
  cube__taint_t* b = failures(9, 100);
  CHECK(says(b, "and 1 more failure"));
  cube__taint_unref(a);
  cube__taint_unref(b);
}

CUBE_TEST(distinct_failures_add_up) {
  /* 12 and 12 others: 24 failures, 8 named, 16 more (the larger count plus
   * the named ones pushed out said 12). */
  cube__taint_t* a = failures(12, 0);
  cube__taint_t* b = failures(12, 100);
  cube__taint_t* u = cube__taint_union(a, b);
  CHECK(says(u, "and 16 more failures"));
  cube__taint_t* v = cube__taint_union(b, a); /* either order */
  CHECK(says(v, "and 16 more failures"));
  cube__taint_unref(u);
  cube__taint_unref(v);
  cube__taint_unref(a);
  cube__taint_unref(b);
}

CUBE_TEST(shared_failures_count_once) {
  /* a: 9 failures (the 9th dropped); b: that 9th one alone. Their union is
   * the same 9 failures: 1 more, not 2. */
  cube__taint_t* parts[9];
  cube__taint_t* a = NULL;
  for (int i = 0; i < 9; ++i) {
    parts[i] = fail_one(i);
    a = join(a, cube__taint_ref(parts[i]));
  }
  cube__taint_t* u = cube__taint_union(a, parts[8]);
  CHECK(says(u, "and 1 more failure"));
  cube__taint_unref(u);
  /* a with a later one, joined with a again: 10 failures, 2 more. */
  cube__taint_t* later = join(cube__taint_ref(a), fail_one(50));
  u = cube__taint_union(later, a);
  CHECK(says(u, "and 2 more failures"));
  cube__taint_unref(u);
  u = cube__taint_union(a, later);
  CHECK(says(u, "and 2 more failures"));
  cube__taint_unref(u);
  cube__taint_unref(later);
  /* Two buffers spoiled by the same 12 failures, then one new each: 14. */
  cube__taint_t* base = failures(12, 200);
  cube__taint_t* x = join(cube__taint_ref(base), fail_one(300));
  cube__taint_t* y = join(cube__taint_ref(base), fail_one(301));
  u = cube__taint_union(x, y);
  CHECK(says(u, "and 6 more failures"));
  cube__taint_unref(u);
  cube__taint_unref(x);
  cube__taint_unref(y);
  cube__taint_unref(base);
  for (int i = 0; i < 9; ++i) cube__taint_unref(parts[i]);
  cube__taint_unref(a);
}

CUBE_TEST(beyond_the_named_ones_the_count_is_a_lower_bound) {
  /* 100 failures: 8 kept, 56 dropped by serial, 36 only counted; later
   * failures still add up exactly. */
  cube__taint_t* a = failures(100, 0);
  CHECK(says(a, "and 92 more failures"));
  cube__taint_t* b = failures(10, 1000);
  cube__taint_t* u = cube__taint_union(a, b);
  CHECK(says(u, "and 102 more failures"));
  cube__taint_unref(u);
  /* Another taint that shares some of a's failures that a only counts:
   * which ones cannot be known, so the count is at least the larger. */
  cube__taint_t* parts[100];
  cube__taint_t* c = NULL;
  for (int i = 0; i < 100; ++i) {
    parts[i] = fail_one(2000 + i);
    c = join(c, cube__taint_ref(parts[i]));
  }
  cube__taint_t* d = join(cube__taint_ref(parts[90]), fail_one(3000));
  d = join(d, cube__taint_ref(parts[5]));
  for (int i = 0; i < 10; ++i) d = join(d, fail_one(4000 + i));
  u = cube__taint_union(c, d);
  CHECK(says(u, "and at least 92 more failures"));
  cube__taint_unref(u);
  for (int i = 0; i < 100; ++i) cube__taint_unref(parts[i]);
  cube__taint_unref(c);
  cube__taint_unref(d);
  cube__taint_unref(a);
  cube__taint_unref(b);
}

