/* Taint roots and sets (memory/taint.h). */
#include "memory/taint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"

static atomic_uint_fast64_t cube__taint_serial = 1;

static char* cube__taint_strdup(const char* s) {
  size_t n = strlen(s);
  char* c = malloc(n + 1);
  if (c) memcpy(c, s, n + 1);
  return c;
}

static void cube__taint_root_unref(cube__taint_root_t* r) {
  if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
  cube_status_free(r->status);
  free(r->what);
  for (int i = 0; i < CUBE__TAINT_CHAIN; ++i) free(r->chain[i]);
  pthread_mutex_destroy(&r->lock);
  free(r);
}

static cube__taint_t* cube__taint_alloc(void) {
  cube__taint_t* t = calloc(1, sizeof(*t));
  if (t) atomic_init(&t->refs, 1);
  return t;
}

cube__taint_t* cube__taint_create(cube_status_t failure, const char* what) {
  cube__taint_root_t* r = calloc(1, sizeof(*r));
  cube__taint_t* t = cube__taint_alloc();
  char* w = cube__taint_strdup(what ? what : "work");
  cube_status_t s = cube__status_clone(failure);
  if (!r || !t || !w || !s || cube_status_code(s) != cube_status_code(failure)) {
    free(r);
    free(t);
    free(w);
    cube_status_free(s);
    return NULL;
  }
  atomic_init(&r->refs, 1);
  r->serial = atomic_fetch_add_explicit(&cube__taint_serial, 1, memory_order_relaxed);
  r->status = s;
  r->what = w;
  cube__utc_now(r->when, sizeof(r->when));
  pthread_mutex_init(&r->lock, NULL);
  t->roots[0] = r;
  t->count = 1;
  t->last_serial = r->serial;
  return t;
}

cube__taint_t* cube__taint_ref(cube__taint_t* t) {
  if (t) atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
  return t;
}

void cube__taint_unref(cube__taint_t* t) {
  if (!t || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
  for (uint32_t i = 0; i < t->count; ++i) cube__taint_root_unref(t->roots[i]);
  free(t);
}

bool cube__taint_has(const cube__taint_t* t, const cube__taint_root_t* r) {
  for (uint32_t i = 0; t && i < t->count; ++i)
    if (t->roots[i] == r) return true;
  return false;
}

/* True when every root of |b| is known to be in |a|: its kept ones kept by
 * |a|, its dropped ones all named and dropped by |a| too. */
bool cube__taint_contains(const cube__taint_t* a, const cube__taint_t* b) {
  if (b->inexact || b->dropped != b->ndrops || b->dropped > a->dropped) return false;
  for (uint32_t i = 0; i < b->count; ++i)
    if (!cube__taint_has(a, b->roots[i])) return false;
  uint32_t i = 0;
  for (uint32_t j = 0; j < b->ndrops; ++j) {
    while (i < a->ndrops && a->drops[i] < b->drops[j]) ++i;
    if (i == a->ndrops || a->drops[i] != b->drops[j]) return false;
  }
  return true;
}

cube__taint_t* cube__taint_union(cube__taint_t* a, cube__taint_t* b) {
  if (!a) return cube__taint_ref(b);
  if (!b || a == b || cube__taint_contains(a, b)) return cube__taint_ref(a);
  if (cube__taint_contains(b, a)) return cube__taint_ref(b);
  cube__taint_t* u = cube__taint_alloc();
  if (!u) return cube__taint_ref(a->count >= b->count ? a : b);
  /* Merge by serial: the earliest failures are the ones kept (a side's
   * dropped roots all come after its kept ones, so none of them is among
   * the earliest of the union). The kept roots past the first ones join the
   * dropped ones of both sides, each serial once. */
  uint32_t i = 0, j = 0;
  uint64_t extra[2 * CUBE__TAINT_ROOTS];
  uint32_t nextra = 0;
  while (i < a->count || j < b->count) {
    cube__taint_root_t* next;
    if (j == b->count || (i < a->count && a->roots[i]->serial < b->roots[j]->serial)) {
      next = a->roots[i++];
    } else if (i == a->count || b->roots[j]->serial < a->roots[i]->serial) {
      next = b->roots[j++];
    } else {
      next = a->roots[i++];
      ++j;
    }
    if (u->count < CUBE__TAINT_ROOTS) {
      atomic_fetch_add_explicit(&next->refs, 1, memory_order_relaxed);
      u->roots[u->count++] = next;
    } else {
      extra[nextra++] = next->serial;
    }
  }
  /* Three ascending lists into one, without repeats; counted past what
   * |drops| holds. */
  const uint64_t* lists[3] = {a->drops, b->drops, extra};
  const uint32_t lens[3] = {a->ndrops, b->ndrops, nextra};
  uint32_t at[3] = {0, 0, 0};
  uint64_t distinct = 0;
  for (;;) {
    uint64_t low = UINT64_MAX;
    for (int l = 0; l < 3; ++l)
      if (at[l] < lens[l] && lists[l][at[l]] < low) low = lists[l][at[l]];
    if (low == UINT64_MAX) break;
    for (int l = 0; l < 3; ++l)
      if (at[l] < lens[l] && lists[l][at[l]] == low) ++at[l];
    if (u->ndrops < CUBE__TAINT_DROPS) u->drops[u->ndrops++] = low;
    ++distinct;
  }
  /* Roots a side dropped without naming them (past its |drops|) may be
   * ones the other side has, unless all of the other's came after them
   * (failures that happened later): else the union's count is a lower
   * bound. */
  bool overlap_a = a->dropped > a->ndrops && b->roots[0]->serial <= a->last_serial;
  bool overlap_b = b->dropped > b->ndrops && a->roots[0]->serial <= b->last_serial;
  u->inexact = a->inexact || b->inexact || overlap_a || overlap_b;
  u->last_serial = a->last_serial > b->last_serial ? a->last_serial : b->last_serial;
  if (!u->inexact) {
    u->dropped = distinct + (a->dropped - a->ndrops) + (b->dropped - b->ndrops);
  } else {
    uint64_t most = a->dropped > b->dropped ? a->dropped : b->dropped;
    u->dropped = most > distinct ? most : distinct;
  }
  return u;
}

void cube__taint_note(cube__taint_t* t, const char* what) {
  for (uint32_t i = 0; t && i < t->count; ++i) {
    cube__taint_root_t* r = t->roots[i];
    pthread_mutex_lock(&r->lock);
    if (r->spoiled < CUBE__TAINT_CHAIN) r->chain[r->spoiled] = cube__taint_strdup(what);
    r->spoiled++;
    pthread_mutex_unlock(&r->lock);
  }
}

cube_status_t cube__taint_status(const cube__taint_t* t, const char* where) {
  if (!t || !t->count)
    return cube__status_make(CUBE_STATUS_DATA_LOST, "%s: no valid contents", where);
  cube_status_t all = CUBE_OK;
  for (uint32_t i = 0; i < t->count; ++i) {
    cube__taint_root_t* r = t->roots[i];
    char chain[1024];
    size_t o = 0;
    chain[0] = '\0';
    pthread_mutex_lock(&r->lock);
    uint64_t n = r->spoiled;
    for (uint64_t k = 0; k < n && k < CUBE__TAINT_CHAIN && o < sizeof(chain); ++k)
      o += (size_t)snprintf(chain + o, sizeof(chain) - o, "%s%s", k ? ", " : "",
                            r->chain[k] ? r->chain[k] : "(no memory to say)");
    pthread_mutex_unlock(&r->lock);
    cube_status_t s;
    if (n == 0)
      s = cube__status_make(CUBE_STATUS_DATA_LOST, "%s: no valid contents: %s failed at %s: %s",
                            where, r->what, r->when, cube_status_message(r->status));
    else
      s = cube__status_make(CUBE_STATUS_DATA_LOST,
                            "%s: no valid contents: %s failed at %s: %s; spoiled by it: %s%s "
                            "(%" PRIu64 " in all)",
                            where, r->what, r->when, cube_status_message(r->status), chain,
                            n > CUBE__TAINT_CHAIN ? ", ..." : "", n);
    all = cube__status_join(all, s);
  }
  if (t->dropped)
    all = cube__status_join(all, cube__status_make(CUBE_STATUS_DATA_LOST,
                                                   "%s: and %s%" PRIu64 " more failure%s", where,
                                                   t->inexact ? "at least " : "", t->dropped,
                                                   t->dropped == 1 ? "" : "s"));
  return all;
}

atomic_uint_fast64_t cube__tainted_buffers = 0;

void cube__memory_set_taint(cube__memory_t* m, cube__taint_t* t) {
  /* Counted before the pointer is set, uncounted after it is cleared: a
   * launch that sees the count 0 finds no taint set before it. */
  if (t) atomic_fetch_add_explicit(&cube__tainted_buffers, 1, memory_order_acq_rel);
  cube__taint_t* old = atomic_exchange_explicit(&m->taint, t, memory_order_acq_rel);
  if (old) atomic_fetch_sub_explicit(&cube__tainted_buffers, 1, memory_order_acq_rel);
  cube__taint_unref(old);
}
