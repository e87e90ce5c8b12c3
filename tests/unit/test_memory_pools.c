// cube-test-libs: cube_mod_memory
/* The memory manager and its pools (ports of CubeCL's unit tests of
 * memory_manage.rs and handle.rs). Dummy device: max page 128 MiB,
 * alignment 32, unless a case says otherwise. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>

#include "check.h"
#include "memory/pool_internal.h"
#include "test_memory_mm.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)
#define DUMMY_MAX_PAGE (128 * MiB)
#define DUMMY_ALIGN 32

typedef struct {
  test_storage_t ts;
  cube__mm_t* mm;
} fixture_t;

static bool open_with(fixture_t* f, const cube__mm_options_t* o, uint64_t alignment) {
  return test_mm_open(&f->ts, o, alignment, &f->mm);
}

static bool open_config(fixture_t* f, cube_memory_config_t config) {
  cube__mm_options_t o = {.name = "test memory", .config = config, .max_page_size = DUMMY_MAX_PAGE};
  return open_with(f, &o, DUMMY_ALIGN);
}

static bool open_custom(fixture_t* f, const cube__pool_options_t* pools, uint32_t n,
                        uint64_t alignment) {
  cube__mm_options_t o = {.name = "test memory", .custom = pools, .custom_count = n,
                          .max_page_size = DUMMY_MAX_PAGE};
  return open_with(f, &o, alignment);
}

static void close_fixture(fixture_t* f) { test_mm_close(&f->ts, f->mm); }

static cube__memory_t* reserve(cube__mm_t* mm, uint64_t size) { return test_mm_reserve(mm, size); }

static void drop(cube__memory_t* m) { cube__memory_handle_unref(m); }

static cube_memory_usage_t usage_of(cube__mm_t* mm) {
  cube_memory_usage_t u;
  cube__mm_usage(mm, &u);
  return u;
}

static cube__pool_options_t sliced(uint64_t page, uint64_t max_slice) {
  return (cube__pool_options_t){.kind = CUBE_POOL_SLICED, .page_size = page, .max_alloc_size = max_slice};
}

static cube__pool_options_t exclusive(uint64_t max_alloc, uint64_t period) {
  return (cube__pool_options_t){.kind = CUBE_POOL_EXCLUSIVE, .max_alloc_size = max_alloc, .dealloc_period = period};
}

static uint64_t storage_id_of(const cube__memory_t* m) {
  const cube__storage_t* st = NULL;
  return cube__memory_resolve(m, &st, NULL, NULL) ? st->id : 0;
}

/* memory_manage.rs ----------------------------------------------------- */

CUBE_TEST(test_handle_mutability) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  cube__memory_t* m = reserve(f.mm, 10);
  REQUIRE(m != NULL);
  CHECK(cube__memory_can_mut(m));
  cube__memory_handle_ref(m); /* a clone */
  CHECK(!cube__memory_can_mut(m));
  cube__memory_handle_unref(m);
  CHECK(cube__memory_can_mut(m));
  drop(m);
  close_fixture(&f);
}

CUBE_TEST(test_memory_usage) {
  fixture_t f;
  cube__pool_options_t pools[] = {exclusive(512, 0)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* m = reserve(f.mm, 100);
  REQUIRE(m != NULL);
  cube_memory_usage_t u1 = usage_of(f.mm);
  CHECK_EQ_U64(u1.bytes_in_use, 100);
  CHECK(u1.bytes_reserved >= 100 && u1.bytes_reserved <= 512);
  drop(m);
  m = reserve(f.mm, 100);
  REQUIRE(m != NULL);
  cube_memory_usage_t u2 = usage_of(f.mm);
  CHECK_EQ_U64(u2.number_allocs, u1.number_allocs);
  CHECK_EQ_U64(u2.bytes_in_use, u1.bytes_in_use);
  CHECK_EQ_U64(u2.bytes_padding, u1.bytes_padding);
  CHECK_EQ_U64(u2.bytes_reserved, u1.bytes_reserved);
  CHECK_EQ_U64(f.ts.allocs, 1);
  drop(m);
  close_fixture(&f);
}

CUBE_TEST(alloc_two_chunks_on_one_page) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(2048, 2048)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 512);
  cube__memory_t* b = reserve(f.mm, 512);
  REQUIRE(a && b);
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(u.number_allocs, 2);
  CHECK_EQ_U64(u.bytes_in_use, 1024);
  CHECK_EQ_U64(u.bytes_reserved, 2048);
  CHECK_EQ_U64(storage_id_of(a), storage_id_of(b));
  drop(a);
  drop(b);
  close_fixture(&f);
}

CUBE_TEST(alloc_reuses_storage) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(512, 512)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 512);
  REQUIRE(a != NULL);
  drop(a);
  a = reserve(f.mm, 512);
  REQUIRE(a != NULL);
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(u.number_allocs, 1);
  CHECK_EQ_U64(u.bytes_in_use, 512);
  CHECK_EQ_U64(u.bytes_reserved, 512);
  CHECK_EQ_U64(f.ts.allocs, 1);
  drop(a);
  close_fixture(&f);
}

CUBE_TEST(alloc_allocs_new_storage) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(1024, 1024)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 768);
  cube__memory_t* b = reserve(f.mm, 768);
  REQUIRE(a && b);
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(u.number_allocs, 2);
  CHECK_EQ_U64(u.bytes_in_use, 1536);
  CHECK_EQ_U64(u.bytes_reserved, 2048);
  CHECK(storage_id_of(a) != storage_id_of(b));
  drop(a);
  drop(b);
  close_fixture(&f);
}

CUBE_TEST(alloc_respects_alignment_size) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(500, 500)};
  REQUIRE(open_custom(&f, pools, 1, 50));
  cube__memory_t* a = reserve(f.mm, 40);
  cube__memory_t* b = reserve(f.mm, 40);
  REQUIRE(a && b);
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(u.bytes_padding, 20);
  uint64_t offset = 0;
  CHECK(cube__memory_resolve(b, NULL, &offset, NULL));
  CHECK_EQ_U64(offset, 50);
  drop(a);
  drop(b);
  close_fixture(&f);
}

CUBE_TEST(allocs_on_correct_page) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(100, 100), sliced(200, 200), sliced(300, 300),
                                  sliced(400, 400)};
  REQUIRE(open_custom(&f, pools, 4, 10));
  cube__memory_t* m[4];
  for (int i = 0; i < 4; ++i) {
    m[i] = reserve(f.mm, 50 + 100 * (uint64_t)i);
    REQUIRE(m[i] != NULL);
  }
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(u.bytes_in_use, 800);
  CHECK(u.bytes_reserved >= 1000);
  cube_memory_report_t r = {0};
  cube__mm_report(f.mm, &r);
  for (int i = 0; i < 4; ++i) CHECK_EQ_U64(r.pools[i].pages, 1);
  for (int i = 0; i < 4; ++i) drop(m[i]);
  close_fixture(&f);
}

CUBE_TEST(allocate_deallocate_reallocate) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  cube__memory_t* m[5];
  for (int i = 0; i < 5; ++i) REQUIRE((m[i] = reserve(f.mm, 1000 * (uint64_t)(i + 1))) != NULL);
  cube_memory_usage_t before = usage_of(f.mm);
  for (int i = 0; i < 5; ++i) drop(m[i]);
  for (int i = 0; i < 5; ++i) REQUIRE((m[i] = reserve(f.mm, 1000 * (uint64_t)(i + 1))) != NULL);
  cube_memory_usage_t after = usage_of(f.mm);
  CHECK_EQ_U64(after.number_allocs, before.number_allocs);
  CHECK_EQ_U64(after.bytes_in_use, before.bytes_in_use);
  CHECK(after.bytes_reserved <= before.bytes_reserved);
  for (int i = 0; i < 5; ++i) drop(m[i]);
  close_fixture(&f);
}

CUBE_TEST(test_fragmentation_resistance) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  const uint64_t sizes[] = {50, 1000, 100, 5000, 200, 10000, 300};
  cube__memory_t* m[7];
  for (int i = 0; i < 7; ++i) REQUIRE((m[i] = reserve(f.mm, sizes[i])) != NULL);
  for (int i = 0; i < 7; i += 2) {
    cube__memory_handle_ref(m[i]); /* a clone ... */
    cube__memory_handle_unref(m[i]); /* ... dropped; the original lives on */
  }
  uint64_t before = usage_of(f.mm).bytes_reserved;
  cube__memory_t* more[3];
  for (int i = 0; i < 3; ++i) REQUIRE((more[i] = reserve(f.mm, sizes[i])) != NULL);
  uint64_t after = usage_of(f.mm).bytes_reserved;
  CHECK((double)after <= 1.1 * (double)before);
  for (int i = 0; i < 7; ++i) drop(m[i]);
  for (int i = 0; i < 3; ++i) drop(more[i]);
  close_fixture(&f);
}

CUBE_TEST(noslice_test_handle_mutability) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES));
  cube__memory_t* m = reserve(f.mm, 10);
  REQUIRE(m != NULL);
  CHECK(cube__memory_can_mut(m));
  cube__memory_handle_ref(m);
  CHECK(!cube__memory_can_mut(m));
  cube__memory_handle_unref(m);
  CHECK(cube__memory_can_mut(m));
  drop(m);
  close_fixture(&f);
}

CUBE_TEST(noslice_alloc_two_chunk) {
  fixture_t f;
  cube__pool_options_t pools[] = {exclusive(1024, 0)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 512);
  cube__memory_t* b = reserve(f.mm, 512);
  REQUIRE(a && b);
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(u.number_allocs, 2);
  CHECK_EQ_U64(u.bytes_in_use, 1024);
  CHECK(u.bytes_reserved >= 1024);
  drop(a);
  drop(b);
  close_fixture(&f);
}

CUBE_TEST(noslice_alloc_reuses_storage) {
  fixture_t f;
  cube__pool_options_t pools[] = {exclusive(1024, 0)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 512);
  REQUIRE(a != NULL);
  drop(a);
  a = reserve(f.mm, 512);
  REQUIRE(a != NULL);
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(u.number_allocs, 1);
  CHECK_EQ_U64(u.bytes_in_use, 512);
  CHECK(u.bytes_reserved >= 512);
  CHECK_EQ_U64(f.ts.allocs, 1);
  drop(a);
  close_fixture(&f);
}

CUBE_TEST(noslice_alloc_allocs_new_storage) {
  fixture_t f;
  cube__pool_options_t pools[] = {exclusive(1024, 0)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 768);
  cube__memory_t* b = reserve(f.mm, 768);
  REQUIRE(a && b);
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(u.number_allocs, 2);
  CHECK_EQ_U64(u.bytes_in_use, 1536);
  CHECK(u.bytes_reserved >= 1536);
  drop(a);
  drop(b);
  close_fixture(&f);
}

CUBE_TEST(noslice_alloc_respects_alignment_size) {
  fixture_t f;
  cube__pool_options_t pools[] = {exclusive(1000, 0)};
  REQUIRE(open_custom(&f, pools, 1, 50));
  cube__memory_t* a = reserve(f.mm, 40);
  cube__memory_t* b = reserve(f.mm, 40);
  REQUIRE(a && b);
  CHECK_EQ_U64(usage_of(f.mm).bytes_padding, 20);
  drop(a);
  drop(b);
  close_fixture(&f);
}

CUBE_TEST(noslice_allocs_on_correct_page) {
  /* As the reference describes it: sliced pools 100..400, alignment 10. */
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(100, 100), sliced(200, 200), sliced(300, 300),
                                  sliced(400, 400)};
  REQUIRE(open_custom(&f, pools, 4, 10));
  cube__memory_t* m[4];
  for (int i = 0; i < 4; ++i) REQUIRE((m[i] = reserve(f.mm, 50 + 100 * (uint64_t)i)) != NULL);
  CHECK_EQ_U64(usage_of(f.mm).bytes_in_use, 800);
  for (int i = 0; i < 4; ++i) drop(m[i]);
  close_fixture(&f);

  /* And with exclusive pools of the same maxima. */
  cube__pool_options_t xpools[] = {exclusive(100, 0), exclusive(200, 0), exclusive(300, 0),
                                   exclusive(400, 0)};
  REQUIRE(open_custom(&f, xpools, 4, 10));
  for (int i = 0; i < 4; ++i) REQUIRE((m[i] = reserve(f.mm, 50 + 100 * (uint64_t)i)) != NULL);
  CHECK_EQ_U64(usage_of(f.mm).bytes_in_use, 800);
  cube_memory_report_t r = {0};
  cube__mm_report(f.mm, &r);
  for (int i = 0; i < 4; ++i) CHECK_EQ_U64(r.pools[i].pages, 1);
  for (int i = 0; i < 4; ++i) drop(m[i]);
  close_fixture(&f);
}

CUBE_TEST(noslice_allocate_deallocate_reallocate) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES));
  cube__memory_t* m[5];
  for (int i = 0; i < 5; ++i) REQUIRE((m[i] = reserve(f.mm, 1000 * (uint64_t)(i + 1))) != NULL);
  cube_memory_usage_t before = usage_of(f.mm);
  for (int i = 0; i < 5; ++i) drop(m[i]);
  for (int i = 0; i < 5; ++i) REQUIRE((m[i] = reserve(f.mm, 1000 * (uint64_t)(i + 1))) != NULL);
  cube_memory_usage_t after = usage_of(f.mm);
  CHECK_EQ_U64(after.number_allocs, before.number_allocs);
  CHECK_EQ_U64(after.bytes_in_use, before.bytes_in_use);
  CHECK_EQ_U64(after.bytes_reserved, before.bytes_reserved);
  for (int i = 0; i < 5; ++i) drop(m[i]);
  close_fixture(&f);
}

/* handle.rs: descriptors ------------------------------------------------ */

/* Binding a descriptor is seen by every clone (they share it). */
CUBE_TEST(descriptor_binding_visible_through_clones) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  cube__memory_t* m = cube__memory_create();
  REQUIRE(m != NULL);
  CHECK_EQ_U64(cube__memory_refs(m), 1);
  CHECK_EQ_U64(cube__memory_handle_refs(m), 1);
  cube__memory_handle_ref(m);
  cube__memory_t* clone = m;
  CHECK(!cube__memory_resolve(clone, NULL, NULL, NULL)); /* "uninit" */
  CHECK(cube__memory_can_mut(m) == false);
  CHECK_OK(cube__mm_reserve_bind(f.mm, 64, m));
  CHECK(clone->slice != NULL && clone->slice == m->slice);
  CHECK(clone->mm == f.mm);
  uint64_t size = 0;
  CHECK(cube__memory_resolve(clone, NULL, NULL, &size));
  CHECK_EQ_U64(size, 64);
  CHECK_EQ_U64(cube__memory_refs(m), 3); /* two handles + the pool */
  cube__memory_handle_unref(clone);
  CHECK(cube__memory_can_mut(m));
  CHECK(!cube__memory_is_free(m));
  drop(m);
  CHECK_EQ_U64(usage_of(f.mm).number_allocs, 0);
  close_fixture(&f);
}

/* An unbound descriptor is mutable; ids are unique; a bound one cannot be
 * bound again. */
CUBE_TEST(descriptor_location_initialised_by_bind) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  cube__memory_t* a = cube__memory_create();
  cube__memory_t* b = cube__memory_create();
  REQUIRE(a && b);
  CHECK(a->id != b->id);
  CHECK(a->slice == NULL && a->mm == NULL);
  CHECK(cube__memory_can_mut(a));
  CHECK(cube__memory_is_free(a)); /* refs 1 */
  CHECK_OK(cube__mm_reserve_bind(f.mm, 10, a));
  CHECK(a->slice != NULL);
  CHECK_STATUS(cube__mm_reserve_bind(f.mm, 10, a), CUBE_STATUS_FAILED_PRECONDITION,
               "already bound");
  drop(a);
  drop(b);
  close_fixture(&f);
}

/* A binding keeps the slice alive without affecting can_mut. */
CUBE_TEST(binding_keeps_slice_alive) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  cube__memory_t* m = reserve(f.mm, 4096);
  REQUIRE(m != NULL);
  cube__memory_ref(m); /* a binding captured by a queued task */
  CHECK(cube__memory_can_mut(m));
  drop(m); /* the user's handle */
  CHECK_EQ_U64(usage_of(f.mm).number_allocs, 1);
  CHECK(cube__memory_resolve(m, NULL, NULL, NULL));
  cube__memory_t* other = reserve(f.mm, 4096);
  REQUIRE(other != NULL);
  CHECK(other != m);
  cube__memory_unref(m); /* the task finished */
  CHECK_EQ_U64(usage_of(f.mm).number_allocs, 1);
  drop(other);
  close_fixture(&f);
}

/* Pool ladders ------------------------------------------------------------ */

typedef struct {
  uint64_t page, max_slice;
} rung_t;

static void check_subslices(int line, uint64_t max_page, uint64_t align, const rung_t* rungs,
                            uint32_t n, uint64_t tail) {
  cube__pool_options_t p[CUBE_MAX_POOLS];
  uint32_t count = cube__pool_ladder(CUBE_MEMORY_CONFIG_SUBSLICES, max_page, align, 0, p);
  bool ok = count == n + 2 && p[0].kind == CUBE_POOL_EXCLUSIVE && p[0].max_alloc_size == 0 &&
            p[0].dealloc_period == 0;
  for (uint32_t i = 0; ok && i < n; ++i) {
    ok = p[i + 1].kind == CUBE_POOL_SLICED && p[i + 1].page_size == rungs[i].page &&
         p[i + 1].max_alloc_size == rungs[i].max_slice && p[i + 1].dealloc_period == 0;
  }
  ok = ok && p[count - 1].kind == CUBE_POOL_SLICED && p[count - 1].page_size == tail &&
       p[count - 1].max_alloc_size == tail;
  if (!ok) {
    fprintf(stderr, "line %d: ladder for max_page %" PRIu64 ":", line, max_page);
    for (uint32_t i = 0; i < count; ++i) {
      fprintf(stderr, " [%d %" PRIu64 "/%" PRIu64 "]", (int)p[i].kind, p[i].page_size,
              p[i].max_alloc_size);
    }
    fprintf(stderr, "\n");
    cube_test_failures++;
  }
}

CUBE_TEST(ladder_subslices_dummy_512mib) {
  const rung_t r[] = {{8 * MiB, 1 * MiB}, {32 * MiB, 8 * MiB}, {128 * MiB, 64 * MiB}};
  check_subslices(__LINE__, 512 * MiB, 32, r, 3, 512 * MiB);
}

CUBE_TEST(ladder_subslices_reference_table) {
  const rung_t gib8[] = {{8 * MiB, 512 * KiB}, {32 * MiB, 4 * MiB}, {128 * MiB, 32 * MiB},
                         {512 * MiB, 256 * MiB}};
  check_subslices(__LINE__, 2 * GiB, 512, gib8, 4, 2 * GiB);
  const rung_t gib24[] = {{24 * MiB, 1536 * KiB}, {96 * MiB, 12 * MiB}, {384 * MiB, 96 * MiB},
                          {1536 * MiB, 768 * MiB}};
  check_subslices(__LINE__, 6 * GiB, 512, gib24, 4, 6 * GiB);
  const rung_t gib80[] = {{20 * MiB, 640 * KiB}, {80 * MiB, 5 * MiB}, {320 * MiB, 40 * MiB},
                          {1280 * MiB, 320 * MiB}, {5 * GiB, 2560 * MiB}};
  check_subslices(__LINE__, 20 * GiB, 512, gib80, 5, 20 * GiB);
}

CUBE_TEST(ladder_subslices_dummy_128mib_and_small) {
  const rung_t r[] = {{8 * MiB, 2 * MiB}, {32 * MiB, 16 * MiB}};
  check_subslices(__LINE__, 128 * MiB, 32, r, 2, 128 * MiB);
  check_subslices(__LINE__, 16 * MiB, 32, NULL, 0, 16 * MiB);
  /* Unaligned max page: rungs round up, the tail rounds down. */
  const rung_t odd[] = {{8 * MiB + 512, (8 * MiB + 512) / 4}, {32 * MiB + 512, 16 * MiB + 256}};
  check_subslices(__LINE__, 128 * MiB + 1000, 512, odd, 2, 128 * MiB + 512);
}

/* The fitted ladder: zero-size pool, 2 MiB sliced pages taking up to 1 MiB
 * (the max page when smaller), a fitted exclusive pool of the granule up to
 * the max page (rounded down to the alignment). */
CUBE_TEST(ladder_fitted) {
  cube__pool_options_t p[CUBE_MAX_POOLS];
  uint32_t n = cube__pool_ladder(CUBE_MEMORY_CONFIG_FITTED, 6 * GiB + 1000, 512, 2 * MiB, p);
  REQUIRE(n == 3);
  CHECK(p[0].kind == CUBE_POOL_EXCLUSIVE && p[0].max_alloc_size == 0 && p[0].page_size == 0);
  CHECK(p[1].kind == CUBE_POOL_SLICED);
  CHECK_EQ_U64(p[1].page_size, 2 * MiB);
  CHECK_EQ_U64(p[1].max_alloc_size, 1 * MiB);
  CHECK(p[2].kind == CUBE_POOL_EXCLUSIVE);
  CHECK_EQ_U64(p[2].page_size, 2 * MiB);
  CHECK_EQ_U64(p[2].max_alloc_size, 6 * GiB + 512);
  /* A granule that is not a multiple of the alignment rounds up to one; a
   * max page under 2 MiB makes the small pages that size. */
  n = cube__pool_ladder(CUBE_MEMORY_CONFIG_FITTED, 1 * MiB + 100, 4096, 5000, p);
  REQUIRE(n == 3);
  CHECK_EQ_U64(p[1].page_size, 1 * MiB);
  CHECK_EQ_U64(p[1].max_alloc_size, 512 * KiB);
  CHECK_EQ_U64(p[2].page_size, 8192);
  CHECK_EQ_U64(p[2].max_alloc_size, 1 * MiB);
  /* Granule 0: the alignment. */
  n = cube__pool_ladder(CUBE_MEMORY_CONFIG_FITTED, 64 * MiB, 64, 0, p);
  CHECK_EQ_U64(p[n - 1].page_size, 64);
}

CUBE_TEST(ladder_exclusive_pages_preset) {
  cube__pool_options_t p[CUBE_MAX_POOLS];
  uint32_t n = cube__pool_ladder(CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES, 128 * MiB, 32, 0, p);
  CHECK_EQ_U64(n, 24);
  CHECK_EQ_U64(p[0].max_alloc_size, 32 * KiB);
  CHECK_EQ_U64(p[n - 1].max_alloc_size, 128 * MiB);
  for (uint32_t i = 0; i < n; ++i) {
    CHECK(p[i].kind == CUBE_POOL_EXCLUSIVE);
    CHECK_EQ_U64(p[i].max_alloc_size % 32, 0);
    CHECK_EQ_U64(p[i].dealloc_period, 5000);
    if (i > 0) CHECK(p[i].max_alloc_size > p[i - 1].max_alloc_size);
    /* log-spaced: exp(ln 32K + (ln max - ln 32K) i / 23), truncated, aligned */
    double v = exp(log(32768.0) + (log(128.0 * MiB) - log(32768.0)) * i / 23.0);
    uint64_t want = ((uint64_t)v + 31) / 32 * 32;
    CHECK_EQ_U64(p[i].max_alloc_size, want);
  }
  /* Large buckets get longer periods: 5000 * round(1 + size / GiB). */
  n = cube__pool_ladder(CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES, 8 * GiB, 512, 0, p);
  CHECK_EQ_U64(n, 24);
  CHECK_EQ_U64(p[n - 1].max_alloc_size, 8 * GiB);
  CHECK_EQ_U64(p[n - 1].dealloc_period, 45000);
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t want = 5000 * (uint64_t)llround(1.0 + (double)p[i].max_alloc_size / (double)GiB);
    CHECK_EQ_U64(p[i].dealloc_period, want);
  }
  /* Consecutive duplicates after alignment are removed. */
  n = cube__pool_ladder(CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES, 64 * KiB, 4096, 0, p);
  CHECK(n < 24);
  CHECK_EQ_U64(p[0].max_alloc_size, 32 * KiB);
  CHECK_EQ_U64(p[n - 1].max_alloc_size, 64 * KiB);
  for (uint32_t i = 1; i < n; ++i) CHECK(p[i].max_alloc_size > p[i - 1].max_alloc_size);
}

/* Zero-byte requests go to SubSlices' pool 0 (exclusive, max 0). */
CUBE_TEST(zero_size_goes_to_pool_zero) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  cube__memory_t* m = reserve(f.mm, 0);
  REQUIRE(m != NULL);
  cube_memory_report_t r = {0};
  cube__mm_report(f.mm, &r);
  CHECK_EQ_U64(r.pool_count, 5);
  CHECK_EQ_U64(r.pools[0].pages, 1);
  CHECK_EQ_U64(r.pools[0].usage.number_allocs, 1);
  CHECK_EQ_U64(r.pools[1].pages, 0);
  uint64_t size = 1;
  CHECK(cube__memory_resolve(m, NULL, NULL, &size));
  CHECK_EQ_U64(size, 0);
  drop(m);
  close_fixture(&f);
}

/* Pool rules ------------------------------------------------------------ */

CUBE_TEST(sliced_accept_rule) {
  test_storage_t ts;
  test_storage_init(&ts, 1);
  cube__pool_t pool;
  cube__pool_options_t o = sliced(1000, 100);
  cube__pool_init(&pool, &o, 1, &ts.ops, NULL);
  CHECK(cube__pool_accept(&pool, 0));
  CHECK(cube__pool_accept(&pool, 100));  /* <= max slice */
  CHECK(!cube__pool_accept(&pool, 101)); /* wastes 89.9 % */
  CHECK(!cube__pool_accept(&pool, 800)); /* wastes exactly 20 % */
  CHECK(cube__pool_accept(&pool, 801));  /* wastes 19.9 % */
  CHECK(cube__pool_accept(&pool, 1000));
  CHECK(!cube__pool_accept(&pool, 1001));
  CHECK_EQ_U64(cube__pool_max_request(&pool), 1000);
  cube__pool_deinit(&pool);
  /* The padded size must fit the page. */
  cube__pool_init(&pool, &o, 32, &ts.ops, NULL);
  CHECK(cube__pool_accept(&pool, 992));
  CHECK(!cube__pool_accept(&pool, 993)); /* 1024 bytes with padding */
  CHECK_EQ_U64(cube__pool_max_request(&pool), 992);
  cube__pool_deinit(&pool);
}

/* A fresh exclusive pool's first page is at least half its maximum
 * (cur_avg_size starts at max/2, EMA decay 0.01). */
CUBE_TEST(exclusive_first_page_is_half_max) {
  fixture_t f;
  cube__pool_options_t pools[] = {exclusive(1 * MiB, 0)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* m = reserve(f.mm, 100);
  REQUIRE(m != NULL);
  /* avg = 524288 * 0.99 + 100 * 0.01 = 519046.12 -> 519046 -> 519072 */
  CHECK_EQ_U64(f.ts.last_size, 519072);
  drop(m);
  close_fixture(&f);
}

/* Among free pages that fit, the one with the smallest free_count wins. */
CUBE_TEST(exclusive_reuses_page_with_smallest_free_count) {
  fixture_t f;
  cube__pool_options_t pools[] = {exclusive(1024, 0)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 512); /* page A, free_count 4 */
  cube__memory_t* b = reserve(f.mm, 512); /* page B, free_count 4 */
  REQUIRE(a && b);
  uint64_t page_a = storage_id_of(a), page_b = storage_id_of(b);
  drop(b);
  b = reserve(f.mm, 512); /* B again: 3 */
  REQUIRE(b && storage_id_of(b) == page_b);
  drop(b);
  b = reserve(f.mm, 512); /* B again: 2 */
  REQUIRE(b && storage_id_of(b) == page_b);
  drop(b);
  drop(a);
  a = reserve(f.mm, 512); /* A (4) is first, B (2) is smaller */
  REQUIRE(a != NULL);
  CHECK_EQ_U64(storage_id_of(a), page_b);
  CHECK(storage_id_of(a) != page_a);
  CHECK_EQ_U64(f.ts.allocs, 2);
  drop(a);
  close_fixture(&f);
}

/* Implicit cleanup ages exclusive pages every dealloc_period / 5
 * reservations (of the whole manager); a free page's free_count grows by one
 * per pass, shrinks by one per reuse, and the page goes at 5. */
static void reserve_elsewhere(fixture_t* f, int n) {
  for (int i = 0; i < n; ++i) {
    cube__memory_t* m = reserve(f->mm, 2000); /* the sliced pool */
    if (m) drop(m);
  }
}

CUBE_TEST(exclusive_cleanup_ages_free_pages) {
  fixture_t f;
  cube__pool_options_t pools[] = {exclusive(1024, 10), sliced(8192, 8192)};
  REQUIRE(open_custom(&f, pools, 2, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 512); /* #1: new page, free_count 4 */
  REQUIRE(a != NULL);
  drop(a);
  cube__mm_cleanup(f.mm, false); /* 1 reservation since the last pass: too early */
  CHECK_EQ_U64(f.ts.deallocs, 0);
  a = reserve(f.mm, 512); /* #2: reused, 4 -> 3 */
  REQUIRE(a != NULL);
  CHECK_EQ_U64(f.ts.allocs, 1);
  drop(a);
  cube__mm_cleanup(f.mm, false); /* pass: 3 -> 4, kept */
  CHECK_EQ_U64(f.ts.deallocs, 0);
  cube__mm_cleanup(f.mm, false); /* no reservation since: skipped */
  CHECK_EQ_U64(f.ts.deallocs, 0);

  a = reserve(f.mm, 512); /* #3: 4 -> 3, held */
  REQUIRE(a != NULL);
  reserve_elsewhere(&f, 1); /* #4 */
  cube__mm_cleanup(f.mm, false); /* pass: busy page untouched */
  CHECK_EQ_U64(f.ts.deallocs, 0);
  drop(a);
  reserve_elsewhere(&f, 2); /* #5, #6 */
  cube__mm_cleanup(f.mm, false); /* pass: 3 -> 4, kept */
  CHECK_EQ_U64(f.ts.deallocs, 0);
  reserve_elsewhere(&f, 2); /* #7, #8 */
  cube__mm_cleanup(f.mm, false); /* pass: 4 -> 5, released */
  CHECK_EQ_U64(f.ts.deallocs, 1);
  cube_memory_report_t r = {0};
  cube__mm_report(f.mm, &r);
  CHECK_EQ_U64(r.pools[0].pages, 0);
  CHECK_EQ_U64(r.pools[1].pages, 1); /* sliced pages are never aged */
  cube__mm_cleanup(f.mm, true);
  CHECK_EQ_U64(f.ts.deallocs, 2);
  close_fixture(&f);
}

/* dealloc_period 0: never aged implicitly; explicit cleanup still frees. */
CUBE_TEST(exclusive_without_period_never_ages) {
  fixture_t f;
  cube__pool_options_t pools[] = {exclusive(1024, 0)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 512);
  REQUIRE(a != NULL);
  drop(a);
  for (int i = 0; i < 20; ++i) cube__mm_cleanup(f.mm, false);
  CHECK_EQ_U64(f.ts.deallocs, 0);
  cube__mm_cleanup(f.mm, true);
  CHECK_EQ_U64(f.ts.deallocs, 1);
  close_fixture(&f);
}

/* Explicit cleanup returns fully free sliced pages to the storage;
 * implicit cleanup never does. */
CUBE_TEST(cleanup_returns_fully_free_pages) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(1024, 1024)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* m[3];
  for (int i = 0; i < 3; ++i) REQUIRE((m[i] = reserve(f.mm, 1000)) != NULL);
  CHECK_EQ_U64(f.ts.allocs, 3);
  CHECK_EQ_U64(cube__mm_reserved_bytes(f.mm), 3072);
  drop(m[0]);
  drop(m[2]);
  cube__mm_cleanup(f.mm, false);
  CHECK_EQ_U64(f.ts.deallocs, 0);
  cube__mm_cleanup(f.mm, true);
  CHECK_EQ_U64(f.ts.deallocs, 2);
  CHECK_EQ_U64(cube__mm_reserved_bytes(f.mm), 1024);
  cube_memory_report_t r = {0};
  cube__mm_report(f.mm, &r);
  CHECK_EQ_U64(r.pools[0].pages, 1);
  CHECK_EQ_U64(r.pools[0].pages_peak, 3);
  /* The survivor still resolves: its page was not renumbered away. */
  uint64_t size = 0;
  CHECK(cube__memory_resolve(m[1], NULL, NULL, &size));
  CHECK_EQ_U64(size, 1000);
  drop(m[1]);
  cube__mm_cleanup(f.mm, true);
  CHECK_EQ_U64(f.ts.deallocs, 3);
  CHECK_EQ_U64(cube__mm_reserved_bytes(f.mm), 0);
  close_fixture(&f);
}

/* A page with one live slice among free ones is kept. */
CUBE_TEST(cleanup_keeps_partly_used_pages) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(4096, 4096)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 1000);
  cube__memory_t* b = reserve(f.mm, 1000);
  cube__memory_t* c = reserve(f.mm, 1000);
  REQUIRE(a && b && c);
  drop(a);
  drop(c);
  cube__mm_cleanup(f.mm, true);
  CHECK_EQ_U64(f.ts.deallocs, 0);
  cube_memory_report_t r = {0};
  cube__mm_report(f.mm, &r);
  /* Coalesced: [1024 free][1024 b][2048 free]. */
  CHECK_EQ_U64(r.pools[0].largest_free_block, 2048);
  drop(b);
  close_fixture(&f);
}

/* Persistent memory ------------------------------------------------------- */

CUBE_TEST(persistent_mode_and_size_reuse) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  CHECK(cube__mm_mode(f.mm) == CUBE_ALLOCATION_AUTO);
  cube__mm_set_mode(f.mm, CUBE_ALLOCATION_PERSISTENT);
  CHECK(cube__mm_mode(f.mm) == CUBE_ALLOCATION_PERSISTENT);
  cube__memory_t* w = reserve(f.mm, 1000);
  REQUIRE(w != NULL);
  CHECK_EQ_U64(f.ts.last_size, 1024); /* exactly the effective size */
  cube__mm_set_mode(f.mm, CUBE_ALLOCATION_AUTO);

  /* Auto: a size the persistent pool already has goes there too. */
  cube__memory_t* g = reserve(f.mm, 1000);
  cube__memory_t* d = reserve(f.mm, 2000);
  REQUIRE(g && d);
  cube_memory_report_t r = {0};
  cube__mm_report(f.mm, &r);
  const cube_pool_report_t* p = &r.pools[r.pool_count - 1];
  CHECK(p->kind == CUBE_POOL_PERSISTENT);
  CHECK_EQ_U64(p->pages, 2);
  CHECK_EQ_U64(p->usage.bytes_reserved, 2048);
  CHECK_EQ_U64(r.pools[1].pages, 1); /* the 2000 bytes: 8 MiB sliced pool */

  /* Auto also reuses a free persistent buffer of the same size. */
  drop(w);
  uint64_t allocs = f.ts.allocs;
  w = reserve(f.mm, 1000);
  REQUIRE(w != NULL);
  CHECK_EQ_U64(f.ts.allocs, allocs);
  /* Explicit cleanup frees free persistent buffers. */
  drop(g);
  cube__mm_cleanup(f.mm, true);
  cube__mm_report(f.mm, &r);
  CHECK_EQ_U64(r.pools[r.pool_count - 1].pages, 1);
  drop(w);
  drop(d);
  close_fixture(&f);
}

CUBE_TEST(persistent_policy_disabled_and_enforced) {
  fixture_t f;
  cube__mm_options_t o = {.name = "test memory", .config = CUBE_MEMORY_CONFIG_SUBSLICES,
                          .max_page_size = DUMMY_MAX_PAGE,
                          .persistent = CUBE__PERSISTENT_DISABLED,
                          .mode = CUBE_ALLOCATION_PERSISTENT};
  REQUIRE(open_with(&f, &o, DUMMY_ALIGN));
  CHECK(cube__mm_mode(f.mm) == CUBE_ALLOCATION_AUTO);
  cube__mm_set_mode(f.mm, CUBE_ALLOCATION_PERSISTENT);
  CHECK(cube__mm_mode(f.mm) == CUBE_ALLOCATION_AUTO);
  close_fixture(&f);

  o.persistent = CUBE__PERSISTENT_ENFORCED;
  o.mode = CUBE_ALLOCATION_AUTO;
  REQUIRE(open_with(&f, &o, DUMMY_ALIGN));
  CHECK(cube__mm_mode(f.mm) == CUBE_ALLOCATION_PERSISTENT);
  cube__mm_set_mode(f.mm, CUBE_ALLOCATION_AUTO);
  CHECK(cube__mm_mode(f.mm) == CUBE_ALLOCATION_PERSISTENT);
  /* Persistent allocations have no size limit. */
  cube__memory_t* big = reserve(f.mm, 200 * MiB);
  REQUIRE(big != NULL);
  CHECK_EQ_U64(f.ts.last_size, 200 * MiB);
  drop(big);
  close_fixture(&f);

  o.persistent = CUBE__PERSISTENT_ENABLED;
  o.mode = CUBE_ALLOCATION_PERSISTENT;
  REQUIRE(open_with(&f, &o, DUMMY_ALIGN));
  CHECK(cube__mm_mode(f.mm) == CUBE_ALLOCATION_PERSISTENT);
  close_fixture(&f);
}

/* Out of memory ---------------------------------------------------------- */

/* The storage refuses a new page until an explicit cleanup returns a free
 * page of another pool; the manager retries once and succeeds. */
CUBE_TEST(oom_retry_after_cleanup_succeeds) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(1024, 512), sliced(2048, 2048)};
  REQUIRE(open_custom(&f, pools, 2, DUMMY_ALIGN));
  f.ts.limit = 2048;
  cube__memory_t* a = reserve(f.mm, 500); /* pool 0: 1024 live */
  REQUIRE(a != NULL);
  drop(a); /* free, but the page is still held */
  cube__memory_t* b = NULL;
  CHECK_OK(cube__mm_reserve(f.mm, 1500, &b)); /* 1024 + 2048 > limit, then retry */
  REQUIRE(b != NULL);
  CHECK_EQ_U64(f.ts.failures, 1);
  CHECK_EQ_U64(f.ts.deallocs, 1);
  CHECK_EQ_U64(f.ts.allocs, 2);
  CHECK_EQ_U64(cube__mm_reserved_bytes(f.mm), 2048);
  drop(b);
  close_fixture(&f);
}

/* A storage that fails once and then succeeds (transient OOM). */
CUBE_TEST(oom_retry_transient_failure) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  f.ts.fail_next = 1;
  cube__memory_t* a = NULL;
  CHECK_OK(cube__mm_reserve(f.mm, 1000, &a));
  CHECK(a != NULL);
  CHECK_EQ_U64(f.ts.failures, 1);
  CHECK_EQ_U64(f.ts.allocs, 1);
  /* Persistent allocations retry the same way. */
  cube__mm_set_mode(f.mm, CUBE_ALLOCATION_PERSISTENT);
  f.ts.fail_next = 1;
  cube__memory_t* p = NULL;
  CHECK_OK(cube__mm_reserve(f.mm, 3000, &p));
  CHECK(p != NULL);
  CHECK_EQ_U64(f.ts.failures, 2);
  drop(a);
  if (p) drop(p);
  close_fixture(&f);
}

/* No pool takes the size: OUT_OF_MEMORY naming the manager, the size, the
 * largest pool, each pool's largest free block and the totals. */
CUBE_TEST(oom_no_pool_accepts_message_and_report) {
  fixture_t f;
  cube__mm_options_t o = {.name = "device memory", .config = CUBE_MEMORY_CONFIG_SUBSLICES,
                          .max_page_size = DUMMY_MAX_PAGE};
  REQUIRE(open_with(&f, &o, DUMMY_ALIGN));
  cube__memory_t* a = reserve(f.mm, 1000); /* 1024 of an 8 MiB page */
  REQUIRE(a != NULL);
  cube__memory_t* out = (cube__memory_t*)&f; /* must be reset */
  cube_status_t s = cube__mm_reserve(f.mm, 128 * MiB + 1, &out);
  CHECK(out == NULL);
  CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  const char* msg = cube_status_message(s);
  /* The first line: what was asked and why; then one line per pool. */
  CHECK(strncmp(msg, "device memory: 128.00 MiB (134217729 bytes) requested: no pool takes it "
                     "(the largest takes up to 128.00 MiB)\n",
                strlen("device memory: 128.00 MiB (134217729 bytes) requested: no pool takes it "
                       "(the largest takes up to 128.00 MiB)\n")) == 0);
  CHECK(strstr(msg, "\n  pool 1 sliced (pages of 8.00 MiB, takes up to 8.00 MiB): 1 page, "
                    "8.00 MiB reserved, 1000 B in use, largest free block 8.00 MiB\n") != NULL);
  CHECK(strstr(msg, "\n  pool 4 persistent (exact sizes): 0 pages") != NULL);
  size_t lines = 0;
  for (const char* q = msg; *q; ++q) lines += *q == '\n';
  CHECK_EQ_U64(lines, 5); /* the first line, then pools 0 to 4 */
  fprintf(stderr, "message: %s\n", msg);
  uint64_t requested = 0;
  cube_memory_report_t r = {0};
  CHECK(cube_status_oom_report(s, &requested, &r));
  CHECK_EQ_U64(requested, 128 * MiB + 1);
  CHECK_EQ_U64(r.pool_count, 5);
  CHECK(r.pools[0].kind == CUBE_POOL_EXCLUSIVE);
  CHECK_EQ_U64(r.pools[0].max_alloc_size, 0);
  CHECK(r.pools[1].kind == CUBE_POOL_SLICED);
  CHECK_EQ_U64(r.pools[1].page_size, 8 * MiB);
  CHECK_EQ_U64(r.pools[1].max_alloc_size, 8 * MiB); /* 20 % rule takes up to a page */
  CHECK_EQ_U64(r.pools[1].pages, 1);
  CHECK_EQ_U64(r.pools[1].largest_free_block, 8 * MiB - 1024);
  CHECK_EQ_U64(r.pools[2].largest_free_block, 0);
  CHECK_EQ_U64(r.pools[3].page_size, 128 * MiB);
  CHECK(r.pools[4].kind == CUBE_POOL_PERSISTENT);
  CHECK_EQ_U64(r.total.bytes_reserved, 8 * MiB);
  CHECK_EQ_U64(r.total.bytes_in_use, 1000);
  CHECK_EQ_U64(r.total.number_allocs, 1);
  cube_status_free(s);
  drop(a);
  close_fixture(&f);
}

/* The storage is full even after cleanup: OUT_OF_MEMORY with the report,
 * the storage's own message and the bytes the cleanup freed. */
CUBE_TEST(oom_storage_exhausted_message_and_report) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(2048, 2048)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  f.ts.limit = 2048;
  cube__memory_t* a = reserve(f.mm, 1500); /* 1504 of 2048; 544 free */
  REQUIRE(a != NULL);
  cube__memory_t* b = NULL;
  cube_status_t s = cube__mm_reserve(f.mm, 1000, &b);
  CHECK(b == NULL);
  CHECK_EQ_U64(f.ts.failures, 3); /* first try, the retry, an exact-size buffer */
  const char* msg = cube_status_message(s);
  CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  /* The request's own bytes are named, never the page's (the exact-size
   * buffer tried last is what the storage's message is about). */
  CHECK(strncmp(msg, "test memory: 1000 B requested: ", 31) == 0);
  CHECK(strstr(msg, "test storage: 1024 bytes do not fit (2048 live, limit 2048)") != NULL);
  CHECK(strstr(msg, "2048 bytes do not fit") == NULL);
  CHECK(strstr(msg, "also after a cleanup that freed 0 B") != NULL);
  CHECK(strstr(msg, "\n  pool 0 sliced (pages of 2.00 KiB, takes up to 2.00 KiB): 1 page, "
                    "2.00 KiB reserved, 1.46 KiB in use, largest free block 544 B") != NULL);
  fprintf(stderr, "message: %s\n", msg);
  uint64_t requested = 0;
  cube_memory_report_t r = {0};
  CHECK(cube_status_oom_report(s, &requested, &r));
  CHECK_EQ_U64(requested, 1000);
  CHECK_EQ_U64(r.pool_count, 2);
  CHECK_EQ_U64(r.pools[0].largest_free_block, 544);
  CHECK_EQ_U64(r.pools[0].pages, 1);
  CHECK_EQ_U64(r.pools[0].usage.bytes_in_use, 1500);
  CHECK_EQ_U64(r.total.bytes_reserved, 2048);
  cube_status_free(s);
  /* Still usable afterwards. */
  cube__memory_t* c = reserve(f.mm, 500);
  CHECK(c != NULL);
  if (c) drop(c);
  drop(a);
  close_fixture(&f);
}

/* Storage errors other than out-of-memory pass through, without a retry. */
CUBE_TEST(storage_error_passes_through) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  f.ts.fail_other = 1;
  cube__memory_t* m = NULL;
  CHECK_STATUS(cube__mm_reserve(f.mm, 100, &m), CUBE_STATUS_INTERNAL, "test memory",
               "injected failure");
  CHECK(m == NULL);
  CHECK_EQ_U64(f.ts.failures, 1);
  close_fixture(&f);
}

/* Threads ----------------------------------------------------------------- */

#define THREAD_HANDLES 64

typedef struct {
  cube__memory_t* handles[THREAD_HANDLES];
  uint64_t sizes[THREAD_HANDLES];
  int resolved_ok;
} drop_job_t;

static void* drop_all(void* arg) {
  drop_job_t* job = arg;
  for (int i = 0; i < THREAD_HANDLES; ++i) {
    const cube__storage_t* st = NULL;
    uint64_t offset = 0, size = 0;
    /* We hold a reference: the slice cannot change under us. */
    if (cube__memory_resolve(job->handles[i], &st, &offset, &size) && size == job->sizes[i] &&
        offset + size <= st->size) {
      job->resolved_ok++;
    }
    cube__memory_handle_unref(job->handles[i]);
  }
  return NULL;
}

/* Handles dropped on another thread are found free by the owner's scan. */
CUBE_TEST(lazy_free_from_another_thread) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  for (int round = 0; round < 20; ++round) {
    drop_job_t job = {.resolved_ok = 0};
    for (int i = 0; i < THREAD_HANDLES; ++i) {
      job.sizes[i] = 100 + (uint64_t)i * 37 + (uint64_t)round;
      REQUIRE((job.handles[i] = reserve(f.mm, job.sizes[i])) != NULL);
    }
    CHECK_EQ_U64(usage_of(f.mm).number_allocs, THREAD_HANDLES);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, drop_all, &job) == 0);
    /* Scan concurrently with the drops. */
    for (int spin = 0; spin < 1000 && usage_of(f.mm).number_allocs > 0; ++spin) {
    }
    pthread_join(t, NULL);
    CHECK_EQ_U64(job.resolved_ok, THREAD_HANDLES);
    cube_memory_usage_t u = usage_of(f.mm);
    CHECK_EQ_U64(u.number_allocs, 0);
    CHECK_EQ_U64(u.bytes_in_use, 0);
  }
  /* Everything fitted in one 8 MiB page, reused every round. */
  CHECK_EQ_U64(f.ts.allocs, 1);
  close_fixture(&f);
}

/* Lifecycle and reports ----------------------------------------------------- */

/* Destroy returns every buffer; descriptors still held are detached. */
CUBE_TEST(destroy_detaches_bound_descriptors) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  cube__memory_t* a = reserve(f.mm, 1000);
  cube__memory_t* b = reserve(f.mm, 20 * MiB);
  REQUIRE(a && b);
  cube__memory_ref(b); /* a binding too */
  close_fixture(&f);
  CHECK(a->slice == NULL && a->mm == NULL);
  CHECK(!cube__memory_resolve(a, NULL, NULL, NULL));
  CHECK(!cube__memory_resolve(b, NULL, NULL, NULL));
  CHECK_EQ_U64(cube__memory_refs(a), 1);
  CHECK_EQ_U64(cube__memory_refs(b), 2);
  drop(a);
  drop(b);
  cube__memory_unref(b);
}

CUBE_TEST(report_lists_every_pool) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  cube__memory_t* m[3];
  for (int i = 0; i < 3; ++i) REQUIRE((m[i] = reserve(f.mm, 7 * MiB)) != NULL);
  drop(m[1]);
  cube_memory_report_t r = {0};
  cube__mm_report(f.mm, &r);
  CHECK_EQ_U64(r.pool_count, 5);
  const uint64_t pages[] = {0, 8 * MiB, 32 * MiB, 128 * MiB};
  for (int i = 0; i < 4; ++i) CHECK_EQ_U64(r.pools[i].page_size, pages[i]);
  CHECK_EQ_U64(r.pools[2].max_alloc_size, 32 * MiB);
  CHECK_EQ_U64(r.pools[1].pages, 3); /* 7 MiB: over 80 % of an 8 MiB page */
  CHECK_EQ_U64(r.pools[1].pages_peak, 3);
  CHECK_EQ_U64(r.pools[1].largest_free_block, 8 * MiB);
  CHECK_EQ_U64(r.pools[1].usage.number_allocs, 2);
  CHECK_EQ_U64(r.pools[4].page_size, 0);
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(r.total.number_allocs, u.number_allocs);
  CHECK_EQ_U64(r.total.bytes_in_use, u.bytes_in_use);
  CHECK_EQ_U64(r.total.bytes_padding, u.bytes_padding);
  CHECK_EQ_U64(r.total.bytes_reserved, u.bytes_reserved);
  CHECK_EQ_U64(r.total.bytes_reserved, cube__mm_reserved_bytes(f.mm));
  CHECK_EQ_U64(r.device_reserved, 0);
  CHECK_EQ_U64(r.memory_limit, 0);
  drop(m[0]);
  drop(m[2]);
  close_fixture(&f);
}

CUBE_TEST(create_rejects_bad_options) {
  test_storage_t ts;
  test_storage_init(&ts, 32);
  cube__mm_t* mm = (cube__mm_t*)&ts;
  cube__pool_options_t bad[] = {exclusive(100, 0)}; /* not a multiple of 32 */
  cube__mm_options_t o = {.name = "test memory", .custom = bad, .custom_count = 1};
  CHECK_STATUS(cube__mm_create(&o, &ts.ops, &mm), CUBE_STATUS_INVALID_ARGUMENT, "test memory",
               "multiple of the alignment");
  CHECK(mm == NULL);
  o.custom_count = 0;
  CHECK_STATUS(cube__mm_create(&o, &ts.ops, &mm), CUBE_STATUS_INVALID_ARGUMENT, "custom pools");
  cube__pool_options_t kind[] = {{.kind = CUBE_POOL_PERSISTENT}};
  o.custom = kind;
  o.custom_count = 1;
  CHECK_STATUS(cube__mm_create(&o, &ts.ops, &mm), CUBE_STATUS_INVALID_ARGUMENT, "kind");
  o.custom = NULL;
  ts.ops.alignment = 0;
  CHECK_STATUS(cube__mm_create(&o, &ts.ops, &mm), CUBE_STATUS_INVALID_ARGUMENT, "alignment");
  CHECK_STATUS(cube__mm_create(NULL, &ts.ops, &mm), CUBE_STATUS_INVALID_ARGUMENT, "required");
}

/* A page that no longer fits in what the storage has left (a memory limit
 * below the ladder's page size) does not fail a small request: it gets an
 * exact-size buffer from the persistent pool instead. */
CUBE_TEST(oom_page_falls_back_to_exact_size) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(4096, 4096)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  f.ts.limit = 3000; /* a 4096-byte page can never be had */
  cube__memory_t* a = reserve(f.mm, 1000);
  REQUIRE(a != NULL);
  cube_memory_report_t r = {0};
  cube__mm_report(f.mm, &r);
  CHECK_EQ_U64(r.pools[0].pages, 0);
  CHECK_EQ_U64(r.pools[r.pool_count - 1].usage.bytes_in_use, 1000); /* the persistent pool */
  CHECK_EQ_U64(r.total.bytes_reserved, 1024);                      /* 1000 + padding to 32 */
  /* A second one fits too (2048 <= 3000); a third does not, and fails with the report. */
  cube__memory_t* b = reserve(f.mm, 1000);
  CHECK(b != NULL);
  cube__memory_t* c = NULL;
  cube_status_t s = cube__mm_reserve(f.mm, 1000, &c);
  CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY && c == NULL);
  cube_status_free(s);
  cube__memory_handle_unref(a);
  if (b) cube__memory_handle_unref(b);
  cube__mm_cleanup(f.mm, true);
  cube_memory_usage_t u;
  cube__mm_usage(f.mm, &u);
  CHECK_EQ_U64(u.bytes_reserved, 0);
  close_fixture(&f);
}

/* Recycling (docs/architecture.md, "The pool-hit path") ---------------------- */

/* A descriptor whose only reference left is the pool's is reused by the next
 * reserve: same record, a new id, counts back to a fresh one's, bound to the
 * slice it asked for. One still referenced elsewhere (a binding) is not. */
CUBE_TEST(recycled_descriptor_is_fresh) {
  fixture_t f;
  REQUIRE(open_config(&f, CUBE_MEMORY_CONFIG_SUBSLICES));
  cube__memory_t* a = reserve(f.mm, 1000);
  REQUIRE(a != NULL);
  uint64_t id_a = a->id;
  uint64_t storage_a = storage_id_of(a);
  drop(a);
  cube__memory_t* b = reserve(f.mm, 1000); /* finds |a| free: takes its slice */
  REQUIRE(b != NULL);
  cube__memory_t* c = reserve(f.mm, 1000); /* and now its record */
  REQUIRE(c != NULL);
  CHECK(b != a); /* |a| was found free during b's reserve, after b's record was made */
  CHECK(c == a);
  cube__memory_t* reused = c;
  CHECK(reused->id != id_a);
  CHECK(b->id != c->id);
  CHECK_EQ_U64(cube__memory_refs(reused), 2);
  CHECK_EQ_U64(cube__memory_handle_refs(reused), 1);
  CHECK(reused->slice != NULL && reused->mm == f.mm && reused->owner == NULL);
  CHECK_EQ_U64(storage_id_of(b), storage_a);

  /* A binding keeps the descriptor (and its slice) out of reuse. */
  cube__memory_ref(b);
  drop(b);
  cube__memory_t* d = reserve(f.mm, 1000);
  REQUIRE(d != NULL);
  CHECK(d != b);
  CHECK(b->slice != NULL);
  uint64_t b_offset = 0, d_offset = 0;
  CHECK(cube__memory_resolve(b, NULL, &b_offset, NULL));
  CHECK(cube__memory_resolve(d, NULL, &d_offset, NULL));
  CHECK(b_offset != d_offset);
  cube__memory_unref(b);
  cube_memory_usage_t u = usage_of(f.mm); /* |b| found free and recycled */
  CHECK_EQ_U64(u.number_allocs, 2);
  drop(c);
  drop(d);
  close_fixture(&f);
}

/* Splitting and merging slices over and over (a pool hit in a sliced page)
 * reuses the slice records and leaves the page as it was. */
CUBE_TEST(sliced_page_split_merge_reuses_records) {
  fixture_t f;
  cube__pool_options_t pools[] = {sliced(8 * MiB, 8 * MiB)};
  REQUIRE(open_custom(&f, pools, 1, DUMMY_ALIGN));
  for (int i = 0; i < 1000; ++i) {
    cube__memory_t* m = reserve(f.mm, MiB + (uint64_t)(i % 3) * 100);
    cube__memory_t* n = reserve(f.mm, 3 * MiB);
    REQUIRE(m && n);
    uint64_t off_m = 1, off_n = 0;
    CHECK(cube__memory_resolve(m, NULL, &off_m, NULL) && off_m == 0);
    CHECK(cube__memory_resolve(n, NULL, &off_n, NULL) &&
          off_n == MiB + (uint64_t)(i % 3) * 100 + cube__padding(MiB + (uint64_t)(i % 3) * 100, DUMMY_ALIGN));
    drop(m);
    drop(n);
  }
  CHECK_EQ_U64(f.ts.allocs, 1); /* one page, reused throughout */
  cube_memory_usage_t u = usage_of(f.mm);
  CHECK_EQ_U64(u.number_allocs, 0);
  CHECK_EQ_U64(u.bytes_reserved, 8 * MiB);
  close_fixture(&f);
}
