// cube-test-libs: cube_mod_memory
/* A sliced pool's release queue and size bins (src/memory/pool_internal.h,
 * "Release queue and size bins"): random reservations and releases against
 * a model, releases from other threads while the owner reserves, and the
 * slices a reservation looks at with many live ones. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "check.h"
#include "memory/pool_internal.h"
#include "test_memory_mm.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)

typedef struct {
  test_storage_t ts;
  cube__mm_t* mm;
  cube__pool_t* pool; /* the one sliced pool */
} fixture_t;

static bool open_sliced(fixture_t* f, uint64_t page, uint64_t alignment) {
  cube__pool_options_t p = {.kind = CUBE_POOL_SLICED, .page_size = page, .max_alloc_size = page};
  cube__mm_options_t o = {.name = "test memory", .custom = &p, .custom_count = 1,
                          .max_page_size = page};
  if (!test_mm_open(&f->ts, &o, alignment, &f->mm)) return false;
  cube__pool_t* list[CUBE_MAX_POOLS];
  cube__mm_pool_list(f->mm, list);
  f->pool = list[0];
  return f->pool->kind == CUBE_POOL_SLICED;
}

static void close_fixture(fixture_t* f) { test_mm_close(&f->ts, f->mm); }

static cube__memory_t* reserve(cube__mm_t* mm, uint64_t size) { return test_mm_reserve(mm, size); }

static uint64_t rng_next(uint64_t* state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

/* The bytes of |m| in its storage. */
static unsigned char* bytes_of(const cube__memory_t* m, uint64_t* out_size) {
  const cube__storage_t* st = NULL;
  uint64_t offset = 0;
  if (!cube__memory_resolve(m, &st, &offset, out_size)) return NULL;
  return (unsigned char*)st->ptr + offset;
}

static void fill(const cube__memory_t* m, unsigned char v) {
  uint64_t size = 0;
  unsigned char* p = bytes_of(m, &size);
  if (p) memset(p, v, size);
}

static bool holds(const cube__memory_t* m, unsigned char v) {
  uint64_t size = 0;
  unsigned char* p = bytes_of(m, &size);
  if (!p) return false;
  for (uint64_t i = 0; i < size; ++i)
    if (p[i] != v) return false;
  return true;
}

/* Checks every page of |pool| (after a drain): the slices cover the page
 * exactly in address order, no two free ones are neighbours, every free
 * slice is binned and every bound one is not, and the bins hold exactly the
 * free slices, each in a bin whose sizes fit it. Returns the free slices. */
static uint64_t check_pages(int line, cube__pool_t* pool) {
  cube__pool_drain(pool);
  uint64_t free_slices = 0;
  bool ok = true;
  for (uint32_t i = 0; i < pool->page_count && ok; ++i) {
    cube__page_t* page = pool->pages[i];
    uint64_t at = 0;
    uint32_t count = 0;
    const cube__slice_t* prev = NULL;
    for (cube__slice_t* s = page->first; s && ok; s = s->next, ++count) {
      ok = s->offset == at && s->prev == prev && s->page == page && s->length > 0;
      ok = ok && (s->memory == NULL) == s->binned;
      ok = ok && !(prev && !prev->memory && !s->memory);
      if (s->memory) ok = ok && s->size + s->padding == s->length && s->memory->slice == s;
      if (!s->memory) free_slices++;
      at += s->length;
      prev = s;
    }
    ok = ok && at == page->storage.size && count == page->slice_count;
  }
  uint64_t binned = 0;
  for (uint32_t b = 0; b < CUBE__BIN_COUNT && ok && pool->bins; ++b) {
    bool bit = (pool->bins->map[b / 64] >> (b % 64)) & 1u;
    ok = bit == (pool->bins->head[b] != NULL);
    for (cube__slice_t* s = pool->bins->head[b]; s && ok; s = s->bin_next) {
      ok = s->binned && !s->memory && (s->bin_next == NULL || s->bin_next->bin_prev == s);
      binned++;
    }
  }
  ok = ok && binned == free_slices;
  if (!ok) {
    fprintf(stderr, "line %d: the pages or the bins are inconsistent (%" PRIu64
                    " free slices, %" PRIu64 " binned)\n",
            line, free_slices, binned);
    cube_test_failures++;
  }
  return free_slices;
}

/* The longest free slice of any page (whole runs: no neighbours are free). */
static uint64_t longest_free(cube__pool_t* pool) {
  uint64_t best = 0;
  for (uint32_t i = 0; i < pool->page_count; ++i)
    for (cube__slice_t* s = pool->pages[i]->first; s; s = s->next)
      if (!s->memory && s->length > best) best = s->length;
  return best;
}

typedef struct {
  cube__memory_t* m;
  uint64_t storage;
  uint64_t offset;
  uint64_t size;
} live_t;

static int live_cmp(const void* a, const void* b) {
  const live_t *x = a, *y = b;
  if (x->storage != y->storage) return x->storage < y->storage ? -1 : 1;
  return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

/* Random reservations (odd sizes) and releases: live buffers never overlap
 * and keep their bytes, usage adds up, a page is added only when no free run
 * of any page fits, and once everything is released every page is one free
 * slice again (freeing merged the neighbours; no cleanup ran). */
CUBE_TEST(random_reserve_release_against_model) {
  fixture_t f;
  const uint64_t page = 64 * KiB, align = 8;
  REQUIRE(open_sliced(&f, page, align));
  enum { OPS = 20000, MAX_LIVE = 400 };
  live_t* live = calloc(MAX_LIVE, sizeof(*live));
  REQUIRE(live != NULL);
  uint32_t n = 0;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  uint64_t pages_added = 0;
  for (int op = 0; op < OPS && cube_test_failures == 0; ++op) {
    uint64_t r = rng_next(&seed);
    bool add = n == 0 || (n < MAX_LIVE && (r % 100) < (op < OPS / 2 ? 60u : 45u));
    if (add) {
      /* Odd sizes, mostly small, now and then most of a page. */
      uint64_t size = (r >> 8) % 8 == 0 ? 1 + (r >> 16) % (page - 1) : 1 + 2 * ((r >> 16) % 1500);
      cube__pool_drain(f.pool);
      uint64_t fits_before = longest_free(f.pool);
      uint32_t pages_before = f.pool->page_count;
      cube__memory_t* m = reserve(f.mm, size);
      REQUIRE(m != NULL);
      uint64_t effective = size + cube__padding(size, align);
      if (f.pool->page_count != pages_before) {
        pages_added++;
        /* A new page only when nothing free fitted. */
        CHECK(fits_before < effective);
      }
      live_t l = {.m = m, .size = size};
      const cube__storage_t* st = NULL;
      uint64_t got_size = 0;
      REQUIRE(cube__memory_resolve(m, &st, &l.offset, &got_size));
      CHECK_EQ_U64(got_size, size);
      CHECK_EQ_U64(l.offset % align, 0);
      l.storage = st->id;
      fill(m, (unsigned char)(m->id * 131u + 7u));
      live[n++] = l;
    } else {
      uint32_t i = (uint32_t)((r >> 8) % n);
      CHECK(holds(live[i].m, (unsigned char)(live[i].m->id * 131u + 7u)));
      cube__memory_handle_unref(live[i].m);
      live[i] = live[--n];
    }
    if (op % 97 == 0) {
      check_pages(__LINE__, f.pool);
      cube_memory_usage_t u;
      cube__mm_usage(f.mm, &u);
      uint64_t in_use = 0;
      for (uint32_t i = 0; i < n; ++i) in_use += live[i].size;
      CHECK_EQ_U64(u.number_allocs, n);
      CHECK_EQ_U64(u.bytes_in_use, in_use);
      CHECK_EQ_U64(u.bytes_reserved, (uint64_t)f.pool->page_count * page);
      /* No two live buffers share a byte. */
      live_t* sorted = malloc(n * sizeof(*sorted) + 1);
      REQUIRE(sorted != NULL);
      memcpy(sorted, live, n * sizeof(*sorted));
      qsort(sorted, n, sizeof(*sorted), live_cmp);
      for (uint32_t i = 1; i < n; ++i)
        if (sorted[i].storage == sorted[i - 1].storage)
          CHECK(sorted[i - 1].offset + sorted[i - 1].size <= sorted[i].offset);
      free(sorted);
    }
  }
  CHECK(pages_added >= 2); /* the sizes made the pool grow */
  while (n > 0) {
    CHECK(holds(live[n - 1].m, (unsigned char)(live[n - 1].m->id * 131u + 7u)));
    cube__memory_handle_unref(live[--n].m);
  }
  uint64_t free_slices = check_pages(__LINE__, f.pool);
  CHECK_EQ_U64(free_slices, f.pool->page_count);
  for (uint32_t i = 0; i < f.pool->page_count; ++i) {
    CHECK_EQ_U64(f.pool->pages[i]->slice_count, 1);
    CHECK_EQ_U64(f.pool->pages[i]->first->length, page);
  }
  CHECK_EQ_U64(f.pool->stats.lazy, 0); /* every release came through the queue */
  CHECK(f.pool->stats.merges > 0);
  free(live);
  close_fixture(&f);
}

/* A released buffer is free at once for usage and counts (the pending mark
 * is not a reference), and its slice is reused by the next fitting request
 * without the pool growing. */
CUBE_TEST(release_is_seen_by_usage_and_reused) {
  fixture_t f;
  REQUIRE(open_sliced(&f, 4 * KiB, 16));
  cube__memory_t* a = reserve(f.mm, 1000);
  cube__memory_t* b = reserve(f.mm, 1000);
  cube__memory_t* c = reserve(f.mm, 1000);
  REQUIRE(a && b && c);
  uint64_t b_offset = 0;
  REQUIRE(cube__memory_resolve(b, NULL, &b_offset, NULL));
  cube__memory_handle_unref(b); /* queued: only the pool's reference left */
  CHECK_EQ_U64(cube__memory_refs(b), 1);
  CHECK(cube__memory_is_free(b));
  cube_memory_usage_t u;
  cube__mm_usage(f.mm, &u);
  CHECK_EQ_U64(u.number_allocs, 2);
  CHECK_EQ_U64(f.pool->stats.drained, 1);
  /* b's hole (1008 bytes) fits 999, not 1100; the tail (1072) fits neither. */
  cube__memory_t* d = reserve(f.mm, 999);
  REQUIRE(d != NULL);
  uint64_t d_offset = 0;
  REQUIRE(cube__memory_resolve(d, NULL, &d_offset, NULL));
  CHECK_EQ_U64(d_offset, b_offset);
  CHECK_EQ_U64(f.pool->page_count, 1);
  cube__memory_handle_unref(a);
  cube__memory_handle_unref(c);
  cube__memory_handle_unref(d);
  cube__mm_usage(f.mm, &u);
  CHECK_EQ_U64(u.number_allocs, 0);
  CHECK_EQ_U64(f.pool->pages[0]->slice_count, 1);
  close_fixture(&f);
}

/* Releases from other threads while the owner reserves -------------------- */

enum { RING = 256, RELEASERS = 3, HANDED = 20000 };

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  cube__memory_t* ring[RING];
  uint32_t head, tail; /* tail - head items */
  bool done;
  uint64_t bad; /* buffers whose bytes changed while live */
  uint64_t released;
} handoff_t;

static void* releaser(void* arg) {
  handoff_t* h = arg;
  for (;;) {
    pthread_mutex_lock(&h->lock);
    while (h->tail == h->head && !h->done) pthread_cond_wait(&h->cond, &h->lock);
    if (h->tail == h->head) {
      pthread_mutex_unlock(&h->lock);
      return NULL;
    }
    cube__memory_t* m = h->ring[h->head++ % RING];
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    /* Resolving is safe while holding a reference; the bytes are ours. */
    bool ok = holds(m, (unsigned char)(m->id * 131u + 7u));
    pthread_mutex_lock(&h->lock);
    if (!ok) h->bad++;
    h->released++;
    pthread_mutex_unlock(&h->lock);
    cube__memory_handle_unref(m);
  }
}

/* The owner reserves random sizes and hands each buffer (its bytes set) to
 * one of three threads that check the bytes and release it; now and then
 * the owner reads usage (a drain racing the pushes). No bytes change while
 * a buffer is live, every release reaches the pool through the queue, and
 * at the end every page is whole again. */
CUBE_TEST(releases_from_threads_while_owner_reserves) {
  fixture_t f;
  REQUIRE(open_sliced(&f, 256 * KiB, 16));
  handoff_t h = {.head = 0};
  pthread_mutex_init(&h.lock, NULL);
  pthread_cond_init(&h.cond, NULL);
  pthread_t t[RELEASERS];
  for (int i = 0; i < RELEASERS; ++i) REQUIRE(pthread_create(&t[i], NULL, releaser, &h) == 0);
  uint64_t seed = 12345;
  for (int i = 0; i < HANDED; ++i) {
    uint64_t size = 1 + 2 * (rng_next(&seed) % 2000);
    cube__memory_t* m = reserve(f.mm, size);
    if (!m) break;
    fill(m, (unsigned char)(m->id * 131u + 7u));
    pthread_mutex_lock(&h.lock);
    while (h.tail - h.head == RING) pthread_cond_wait(&h.cond, &h.lock);
    h.ring[h.tail++ % RING] = m;
    pthread_cond_broadcast(&h.cond);
    pthread_mutex_unlock(&h.lock);
    if (i % 500 == 0) {
      cube_memory_usage_t u;
      cube__mm_usage(f.mm, &u);
      CHECK(u.number_allocs <= RING + RELEASERS + 1);
    }
  }
  pthread_mutex_lock(&h.lock);
  h.done = true;
  pthread_cond_broadcast(&h.cond);
  pthread_mutex_unlock(&h.lock);
  for (int i = 0; i < RELEASERS; ++i) pthread_join(t[i], NULL);
  CHECK_EQ_U64(h.bad, 0);
  CHECK_EQ_U64(h.released, HANDED);
  cube_memory_usage_t u;
  cube__mm_usage(f.mm, &u);
  CHECK_EQ_U64(u.number_allocs, 0);
  check_pages(__LINE__, f.pool);
  for (uint32_t i = 0; i < f.pool->page_count; ++i) CHECK_EQ_U64(f.pool->pages[i]->slice_count, 1);
  CHECK_EQ_U64(f.pool->stats.drained, HANDED);
  CHECK_EQ_U64(f.pool->stats.lazy, 0);
  /* At most the ring, the threads' hands and one more were live at once:
   * about 280 buffers of about 2 KiB, well under 1 MiB, so a few pages. */
  CHECK(f.pool->pages_peak <= 4);
  pthread_mutex_destroy(&h.lock);
  pthread_cond_destroy(&h.cond);
  close_fixture(&f);
}

/* Slices looked at per reservation ------------------------------------------ */

/* With 10,000 live 256-byte buffers (every third released, leaving holes
 * that a 300-byte request does not fit), a hit of 256, 300 or 5000 bytes
 * looks at a bounded number of free slices: never a walk of the live ones
 * (CubeCL's policy looked at every slice of the pool). */
CUBE_TEST(hit_visits_bounded_with_ten_thousand_live) {
  fixture_t f;
  REQUIRE(open_sliced(&f, 2 * MiB, 256));
  enum { LIVE = 10000 };
  cube__memory_t** held = calloc(LIVE, sizeof(*held));
  REQUIRE(held != NULL);
  for (int i = 0; i < LIVE; ++i) {
    held[i] = reserve(f.mm, 256);
    REQUIRE(held[i] != NULL);
  }
  for (int i = 0; i < LIVE; i += 3) {
    cube__memory_handle_unref(held[i]);
    held[i] = NULL;
  }
  cube__pool_drain(f.pool);
  CHECK(check_pages(__LINE__, f.pool) > LIVE / 3); /* the holes stay apart */
  memset(&f.pool->stats, 0, sizeof(f.pool->stats));
  static const uint64_t sizes[] = {256, 300, 5000, 1, 257};
  uint32_t pages = f.pool->page_count;
  for (int round = 0; round < 1000; ++round) {
    for (int k = 0; k < 5; ++k) {
      cube__memory_t* m = reserve(f.mm, sizes[k]);
      REQUIRE(m != NULL);
      cube__memory_handle_unref(m);
    }
  }
  CHECK_EQ_U64(f.pool->stats.reserves, 5000);
  /* Up to CUBE__BIN_SCAN of the own bin, then up to as many of a bin above. */
  CHECK(f.pool->stats.max_visited <= 2 * CUBE__BIN_SCAN);
  CHECK(f.pool->stats.visited <= 5000 * (CUBE__BIN_SCAN + 1));
  CHECK_EQ_U64(f.pool->page_count, pages); /* all served by the pages there */
  for (int i = 0; i < LIVE; ++i)
    if (held[i]) cube__memory_handle_unref(held[i]);
  check_pages(__LINE__, f.pool);
  for (uint32_t i = 0; i < f.pool->page_count; ++i) CHECK_EQ_U64(f.pool->pages[i]->slice_count, 1);
  free(held);
  close_fixture(&f);
}

/* The one free slice that fits sits in the request's own bin behind more
 * than CUBE__BIN_SCAN that do not, and no bin above holds any: the pool
 * still finds it rather than adding a page. */
CUBE_TEST(own_bin_walked_before_the_pool_grows) {
  fixture_t f;
  REQUIRE(open_sliced(&f, 64 * KiB, 16));
  cube__memory_t* holes[10];
  cube__memory_t* seps[11];
  for (int k = 0; k < 10; ++k) {
    seps[k] = reserve(f.mm, 16);
    holes[k] = reserve(f.mm, 1040);
    REQUIRE(seps[k] && holes[k]);
  }
  seps[10] = reserve(f.mm, 16);
  cube__memory_t* big = reserve(f.mm, 1200);
  REQUIRE(seps[10] && big);
  /* The rest of the page, exactly: no free slice is left. */
  cube__memory_t* rest = reserve(f.mm, 64 * KiB - 10 * (16 + 1040) - 16 - 1200);
  REQUIRE(rest != NULL);
  CHECK_EQ_U64(f.pool->page_count, 1);
  CHECK_EQ_U64(check_pages(__LINE__, f.pool), 0);
  uint64_t big_offset = 0;
  REQUIRE(cube__memory_resolve(big, NULL, &big_offset, NULL));
  cube__memory_handle_unref(big); /* freed (binned) first: deepest in its bin */
  CHECK_EQ_U64(check_pages(__LINE__, f.pool), 1);
  for (int k = 0; k < 10; ++k) cube__memory_handle_unref(holes[k]);
  CHECK_EQ_U64(check_pages(__LINE__, f.pool), 11);
  cube__memory_t* m = reserve(f.mm, 1100); /* 1104 bytes: the 1040 holes are too small */
  REQUIRE(m != NULL);
  uint64_t offset = 0;
  REQUIRE(cube__memory_resolve(m, NULL, &offset, NULL));
  CHECK_EQ_U64(offset, big_offset);
  CHECK_EQ_U64(f.pool->page_count, 1);
  CHECK(f.pool->stats.max_visited > CUBE__BIN_SCAN); /* the walk went past the first few */
  cube__memory_handle_unref(m);
  cube__memory_handle_unref(rest);
  for (int k = 0; k < 11; ++k) cube__memory_handle_unref(seps[k]);
  check_pages(__LINE__, f.pool);
  CHECK_EQ_U64(f.pool->pages[0]->slice_count, 1);
  close_fixture(&f);
}

/* The fallback for a release the queue did not see (a scan finds it free:
 * refs 1 and not pending): usage counts it free at once, the scan bins it
 * without merging, and a request that only the merged run fits merges the
 * pages first instead of adding one. Made here by clearing |notify| by hand
 * before the drops, which the library itself never does while bound. */
CUBE_TEST(release_found_by_a_scan_is_merged_before_growth) {
  fixture_t f;
  REQUIRE(open_sliced(&f, 4 * KiB, 16));
  cube__memory_t* a = reserve(f.mm, 2048);
  cube__memory_t* b = reserve(f.mm, 2048);
  REQUIRE(a && b);
  CHECK_EQ_U64(f.pool->page_count, 1);
  atomic_store(&a->notify, NULL);
  atomic_store(&b->notify, NULL);
  cube__memory_handle_unref(a);
  cube__memory_handle_unref(b);
  cube_memory_usage_t u;
  cube__mm_usage(f.mm, &u); /* the scan finds both */
  CHECK_EQ_U64(u.number_allocs, 0);
  CHECK_EQ_U64(f.pool->stats.lazy, 2);
  CHECK_EQ_U64(f.pool->stats.drained, 0);
  CHECK_EQ_U64(f.pool->pages[0]->slice_count, 2); /* not merged yet */
  cube__memory_t* c = reserve(f.mm, 4096);
  REQUIRE(c != NULL);
  CHECK_EQ_U64(f.pool->page_count, 1);
  CHECK_EQ_U64(f.pool->unmerged, 0);
  cube__memory_handle_unref(c);
  check_pages(__LINE__, f.pool);
  CHECK_EQ_U64(f.pool->pages[0]->slice_count, 1);
  close_fixture(&f);
}
