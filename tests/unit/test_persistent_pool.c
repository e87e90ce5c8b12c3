// cube-test-libs: cube_mod_memory
/* The persistent pool on its own (ports of CubeCL's persistent_pool.rs tests):
 * alignment 4. */
#include <stdbool.h>

#include "check.h"
#include "memory/pool_internal.h"
#include "test_memory_storage.h"

static cube__memory_t* pool_try(cube__pool_t* pool, uint64_t size) {
  cube__memory_t* m = cube__memory_create();
  bool found = false;
  cube_status_t s = cube__pool_try_reserve(pool, size, m, &found);
  if (s != CUBE_OK || !found) {
    cube_status_free(s);
    cube__memory_unref(m);
    return NULL;
  }
  return m;
}

static cube__memory_t* pool_alloc(cube__pool_t* pool, uint64_t size) {
  cube__memory_t* m = cube__memory_create();
  bool oom = false;
  cube_status_t s = cube__pool_alloc(pool, size, m, &oom);
  if (s != CUBE_OK) {
    fprintf(stderr, "alloc(%" PRIu64 "): %s\n", size, cube_status_message(s));
    cube_status_free(s);
    cube__memory_unref(m);
    return NULL;
  }
  return m;
}

static cube_memory_usage_t pool_usage(cube__pool_t* pool) {
  cube_memory_usage_t u = {0};
  cube__pool_usage(pool, &u);
  return u;
}

CUBE_TEST(persistent_pool_try_reserve_reuses_slice_with_padding) {
  test_storage_t ts;
  test_storage_init(&ts, 4);
  cube__pool_t pool;
  cube__pool_init_persistent(&pool, 4, &ts.ops, NULL);

  cube__memory_t* a = pool_alloc(&pool, 1025);
  REQUIRE(a != NULL);
  cube_memory_usage_t u = pool_usage(&pool);
  CHECK_EQ_U64(u.bytes_padding, 3);
  CHECK_EQ_U64(u.bytes_reserved, 1028);
  CHECK_EQ_U64(ts.last_size, 1028); /* storage of exactly the effective size */

  CHECK(pool_try(&pool, 1025) == NULL);
  cube__memory_handle_unref(a);
  cube__memory_t* b = pool_try(&pool, 1025);
  CHECK(b != NULL);
  CHECK_EQ_U64(ts.allocs, 1);
  cube__memory_handle_unref(b);
  cube__pool_deinit(&pool);
  CHECK_EQ_U64(ts.deallocs, 1);
}

CUBE_TEST(persistent_pool) {
  test_storage_t ts;
  test_storage_init(&ts, 4);
  cube__pool_t pool;
  cube__pool_init_persistent(&pool, 4, &ts.ops, NULL);

  CHECK(pool_try(&pool, 1024) == NULL);
  cube__memory_t* a1 = pool_alloc(&pool, 1024);
  REQUIRE(a1 != NULL);
  CHECK(pool_try(&pool, 1024) == NULL);
  cube__memory_handle_unref(a1);
  cube__memory_t* r = pool_try(&pool, 1024);
  CHECK(r != NULL);
  if (r) cube__memory_handle_unref(r);
  CHECK(pool_try(&pool, 1025) == NULL); /* another effective size */

  cube__memory_t* a2 = pool_alloc(&pool, 1024);
  REQUIRE(a2 != NULL);
  cube_memory_usage_t u = pool_usage(&pool);
  CHECK_EQ_U64(u.bytes_in_use, 1024);
  CHECK_EQ_U64(u.bytes_reserved, 2048);

  cube__memory_t* a3 = pool_try(&pool, 1024);
  REQUIRE(a3 != NULL);
  u = pool_usage(&pool);
  CHECK_EQ_U64(u.bytes_in_use, 2048);
  CHECK_EQ_U64(u.bytes_reserved, 2048);

  cube__memory_handle_unref(a2);
  cube__memory_handle_unref(a3);
  u = pool_usage(&pool);
  CHECK_EQ_U64(u.bytes_in_use, 0);
  CHECK_EQ_U64(u.bytes_reserved, 2048);
  CHECK_EQ_U64(u.number_allocs, 0);
  cube__pool_deinit(&pool);
  CHECK_EQ_U64(ts.allocs, ts.deallocs);
}

/* #1224: alloc and try_reserve key buckets identically (size + padding), so
 * 1025 and 1026 share the 1028-byte bucket. */
CUBE_TEST(persistent_pool_buckets_by_effective_size) {
  test_storage_t ts;
  test_storage_init(&ts, 4);
  cube__pool_t pool;
  cube__pool_init_persistent(&pool, 4, &ts.ops, NULL);
  cube__memory_t* a = pool_alloc(&pool, 1025);
  REQUIRE(a != NULL);
  CHECK(cube__persistent_has_size(&pool, 1025));
  CHECK(cube__persistent_has_size(&pool, 1028));
  CHECK(!cube__persistent_has_size(&pool, 1024));
  CHECK(!cube__persistent_has_size(&pool, 1029));
  cube__memory_handle_unref(a);
  cube__memory_t* b = pool_try(&pool, 1026);
  REQUIRE(b != NULL);
  uint64_t size = 0;
  CHECK(cube__memory_resolve(b, NULL, NULL, &size));
  CHECK_EQ_U64(size, 1026);
  cube_memory_usage_t u = pool_usage(&pool);
  CHECK_EQ_U64(u.bytes_padding, 2);
  cube__memory_handle_unref(b);
  cube__pool_deinit(&pool);
}

/* Explicit cleanup frees every free slice and forgets emptied sizes;
 * implicit cleanup does nothing. */
CUBE_TEST(persistent_pool_cleanup_frees_free_slices) {
  test_storage_t ts;
  test_storage_init(&ts, 4);
  cube__pool_t pool;
  cube__pool_init_persistent(&pool, 4, &ts.ops, NULL);
  cube__memory_t* a = pool_alloc(&pool, 100);
  cube__memory_t* b = pool_alloc(&pool, 200);
  cube__memory_t* c = pool_alloc(&pool, 200);
  cube__memory_t* d = pool_alloc(&pool, 300);
  REQUIRE(a && b && c && d);
  cube__memory_handle_unref(a);
  cube__memory_handle_unref(b);
  cube__pool_cleanup(&pool, 0, false);
  CHECK_EQ_U64(ts.deallocs, 0);
  cube__pool_cleanup(&pool, 0, true);
  CHECK_EQ_U64(ts.deallocs, 2);
  CHECK_EQ_U64(pool.page_count, 2);
  CHECK(!cube__persistent_has_size(&pool, 100));
  CHECK(cube__persistent_has_size(&pool, 200));
  CHECK(cube__persistent_has_size(&pool, 300));
  cube_memory_usage_t u = pool_usage(&pool);
  CHECK_EQ_U64(u.bytes_reserved, 500);
  CHECK_EQ_U64(u.bytes_in_use, 500);
  /* The rebuilt index still finds the survivors. */
  cube__memory_handle_unref(c);
  cube__memory_t* e = pool_try(&pool, 200);
  CHECK(e != NULL);
  if (e) cube__memory_handle_unref(e);
  cube__memory_handle_unref(d);
  cube__pool_deinit(&pool);
  CHECK_EQ_U64(ts.allocs, ts.deallocs);
}
