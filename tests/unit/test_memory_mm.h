/* A memory manager over the malloc-backed test storage (test_memory_storage.h),
 * for the tests of the manager and its pools: open one, reserve through it
 * (a failure counts as a test failure and gives NULL), and close it checking
 * that every storage buffer came back. */
#ifndef CUBE_TEST_MEMORY_MM_H_
#define CUBE_TEST_MEMORY_MM_H_

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "check.h"
#include "memory/pool_internal.h"
#include "test_memory_storage.h"

static inline bool test_mm_open(test_storage_t* ts, const cube__mm_options_t* o,
                                uint64_t alignment, cube__mm_t** out_mm) {
  test_storage_init(ts, alignment);
  *out_mm = NULL;
  cube_status_t s = cube__mm_create(o, &ts->ops, out_mm);
  if (s != CUBE_OK) {
    fprintf(stderr, "cube__mm_create: %s\n", cube_status_message(s));
    cube_status_free(s);
    return false;
  }
  return true;
}

/* Destroys the manager; every storage buffer must have been returned. */
static inline void test_mm_close(test_storage_t* ts, cube__mm_t* mm) {
  cube__mm_destroy(mm);
  CHECK_EQ_U64(ts->allocs, ts->deallocs);
  CHECK_EQ_U64(ts->live_bytes, 0);
}

static inline cube__memory_t* test_mm_reserve(cube__mm_t* mm, uint64_t size) {
  cube__memory_t* m = NULL;
  cube_status_t s = cube__mm_reserve(mm, size, &m);
  if (s != CUBE_OK) {
    fprintf(stderr, "reserve(%" PRIu64 "): %s\n", size, cube_status_message(s));
    cube_status_free(s);
    cube_test_failures++;
    return NULL;
  }
  return m;
}

#endif /* CUBE_TEST_MEMORY_MM_H_ */
