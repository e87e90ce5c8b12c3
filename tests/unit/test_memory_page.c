// cube-test-libs: cube_mod_memory
/* One sliced page on its own (ports of CubeCL's memory_page.rs tests): page 32 MiB,
 * alignment 4. */
#include <stdbool.h>

#include "check.h"
#include "memory/pool_internal.h"
#include "test_memory_storage.h"

#define MiB (1024ull * 1024ull)

typedef struct {
  test_storage_t ts;
  cube__page_t* page;
} page_fixture_t;

static bool page_open(page_fixture_t* f, uint64_t size) {
  test_storage_init(&f->ts, 4);
  cube__storage_t st = test_storage_buffer(&f->ts, size);
  f->page = cube__page_create(NULL, &st);
  return f->page != NULL;
}

static void page_close(page_fixture_t* f) {
  cube__storage_t st = f->page->storage;
  cube__page_destroy(f->page);
  test_storage_dealloc(&f->ts, &st);
}

/* A descriptor bound to |size| bytes of the page (refs 2: ours + the page's),
 * or NULL when nothing fits. */
static cube__memory_t* page_reserve(cube__page_t* page, uint64_t size) {
  cube__memory_t* m = cube__memory_create();
  if (!m) return NULL;
  bool found = false;
  cube_status_t s = cube__page_try_reserve(page, size, 4, m, &found);
  if (s != CUBE_OK || !found) {
    cube_status_free(s);
    cube__memory_unref(m);
    return NULL;
  }
  return m;
}

typedef struct {
  uint64_t mib;
  bool free;
} block_t;

static int check_blocks(int line, cube__page_t* page, const block_t* want, uint32_t n) {
  cube__page_block_t got[32];
  uint32_t count = cube__page_summary(page, got, 32);
  bool ok = count == n;
  for (uint32_t i = 0; ok && i < n; ++i) {
    ok = got[i].size == want[i].mib * MiB && got[i].free == want[i].free;
  }
  if (!ok) {
    fprintf(stderr, "line %d: blocks are [", line);
    for (uint32_t i = 0; i < count; ++i) {
      fprintf(stderr, "%s%.2f%s", i ? ", " : "", (double)got[i].size / (double)MiB,
              got[i].free ? " free" : "F");
    }
    fprintf(stderr, "]\n");
    cube_test_failures++;
  }
  return ok;
}
#define CHECK_BLOCKS(page, ...)                                                        \
  do {                                                                                 \
    const block_t want_[] = {__VA_ARGS__};                                             \
    check_blocks(__LINE__, (page), want_, (uint32_t)(sizeof(want_) / sizeof(want_[0]))); \
  } while (0)
#define F(n) {n, false}
#define FREE(n) {n, true}

static uint64_t offset_of(const cube__memory_t* m) {
  uint64_t offset = UINT64_MAX;
  cube__memory_resolve(m, NULL, &offset, NULL);
  return offset;
}

CUBE_TEST(test_memory_page) {
  page_fixture_t f;
  REQUIRE(page_open(&f, 32 * MiB));
  cube__memory_t* m = page_reserve(f.page, 16 * MiB);
  REQUIRE(m != NULL);
  CHECK(!cube__memory_is_free(m));
  CHECK(cube__memory_can_mut(m));
  const cube__storage_t* st = NULL;
  uint64_t offset = 99, size = 0;
  CHECK(cube__memory_resolve(m, &st, &offset, &size));
  CHECK(st == &f.page->storage);
  CHECK_EQ_U64(offset, 0);
  CHECK_EQ_U64(size, 16 * MiB);
  cube__memory_handle_unref(m);
  CHECK_BLOCKS(f.page, FREE(16), FREE(16));
  cube__page_coalesce(f.page);
  CHECK_BLOCKS(f.page, FREE(32));
  page_close(&f);
}

CUBE_TEST(test_memory_job) {
  page_fixture_t f;
  REQUIRE(page_open(&f, 32 * MiB));
  cube__memory_t* m = page_reserve(f.page, 16 * MiB);
  REQUIRE(m != NULL);
  cube__memory_handle_unref(m);
  cube__coalesce_job_t jobs[4];
  uint32_t n = cube__page_coalesce_jobs(f.page, jobs, 4);
  REQUIRE(n == 1);
  CHECK_EQ_U64(jobs[0].start, 0);
  CHECK_EQ_U64(jobs[0].count, 2);
  CHECK_EQ_U64(jobs[0].size, 32 * MiB);
  /* The job merges the two free 16 MiB blocks into one 32 MiB block. */
  CHECK_EQ_U64(cube__page_coalesce(f.page), 1);
  CHECK_BLOCKS(f.page, FREE(32));
  CHECK_EQ_U64(cube__page_coalesce_jobs(f.page, jobs, 4), 0);
  page_close(&f);
}

CUBE_TEST(test_scenario) {
  page_fixture_t f;
  REQUIRE(page_open(&f, 32 * MiB));
  cube__page_t* page = f.page;
  cube__memory_t* m4a = page_reserve(page, 4 * MiB);
  cube__memory_t* m15 = page_reserve(page, 15 * MiB);
  cube__memory_t* m8 = page_reserve(page, 8 * MiB);
  cube__memory_t* m4b = page_reserve(page, 4 * MiB);
  REQUIRE(m4a && m15 && m8 && m4b);
  CHECK_BLOCKS(page, F(4), F(15), F(8), F(4), FREE(1));

  cube__memory_t* fail = page_reserve(page, 8 * MiB);
  CHECK(fail == NULL);

  cube__memory_handle_unref(m15);
  cube__memory_t* m9a = page_reserve(page, 9 * MiB);
  REQUIRE(m9a != NULL);
  CHECK_EQ_U64(offset_of(m9a), 4 * MiB);
  CHECK_BLOCKS(page, F(4), F(9), FREE(6), F(8), F(4), FREE(1));
  CHECK(page_reserve(page, 9 * MiB) == NULL);

  cube__memory_handle_unref(m8);
  CHECK(page_reserve(page, 9 * MiB) == NULL); /* 6 + 8 free, not merged yet */
  CHECK_BLOCKS(page, F(4), F(9), FREE(6), FREE(8), F(4), FREE(1));

  cube__page_coalesce(page);
  CHECK_BLOCKS(page, F(4), F(9), FREE(14), F(4), FREE(1));
  CHECK_EQ_U64(offset_of(m4b), 27 * MiB);

  cube__memory_t* m9b = page_reserve(page, 9 * MiB);
  REQUIRE(m9b != NULL);
  CHECK_BLOCKS(page, F(4), F(9), F(9), FREE(5), F(4), FREE(1));

  cube__memory_handle_unref(m4a);
  cube__memory_handle_unref(m4b);
  cube__page_coalesce(page);
  CHECK_EQ_U64(offset_of(m9b), 13 * MiB);
  CHECK_BLOCKS(page, FREE(4), F(9), F(9), FREE(10));

  cube__memory_handle_unref(m9a);
  cube__memory_handle_unref(m9b);
  page_close(&f);
}

/* Effective sizes include the padding; the split starts after it. */
CUBE_TEST(page_split_pads_to_alignment) {
  page_fixture_t f;
  REQUIRE(page_open(&f, 64));
  cube__memory_t* a = page_reserve(f.page, 5); /* 5 + 3 */
  cube__memory_t* b = page_reserve(f.page, 8);
  REQUIRE(a && b);
  CHECK_EQ_U64(offset_of(b), 8);
  cube_memory_usage_t u = {0};
  cube__page_usage(f.page, &u);
  CHECK_EQ_U64(u.number_allocs, 2);
  CHECK_EQ_U64(u.bytes_in_use, 13);
  CHECK_EQ_U64(u.bytes_padding, 3);
  CHECK_EQ_U64(u.bytes_reserved, 64);
  uint64_t size = 0;
  CHECK(cube__memory_resolve(a, NULL, NULL, &size));
  CHECK_EQ_U64(size, 5);
  CHECK_EQ_U64(cube__page_largest_free(f.page), 48);
  cube__memory_handle_unref(a);
  cube__memory_handle_unref(b);
  /* Three free slices in a row: the largest free block is their sum. */
  CHECK_EQ_U64(cube__page_largest_free(f.page), 64);
  CHECK(cube__page_is_free(f.page));
  page_close(&f);
}

/* A reservation that takes the whole free slice does not split it. */
CUBE_TEST(page_exact_fit_does_not_split) {
  page_fixture_t f;
  REQUIRE(page_open(&f, 32));
  cube__memory_t* a = page_reserve(f.page, 32);
  REQUIRE(a != NULL);
  CHECK_EQ_U64(f.page->slice_count, 1);
  CHECK(page_reserve(f.page, 0) == NULL); /* no free slice at all */
  cube__memory_handle_unref(a);
  page_close(&f);
}

/* A descriptor still held when the page goes away is detached, not freed. */
CUBE_TEST(page_destroy_detaches_bound_descriptors) {
  page_fixture_t f;
  REQUIRE(page_open(&f, 1024));
  cube__memory_t* m = page_reserve(f.page, 100);
  REQUIRE(m != NULL);
  page_close(&f);
  CHECK(m->slice == NULL);
  CHECK(!cube__memory_resolve(m, NULL, NULL, NULL));
  CHECK_EQ_U64(cube__memory_refs(m), 1);
  cube__memory_handle_unref(m);
}
