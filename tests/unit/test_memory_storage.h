/* A malloc-backed cube__storage_ops_t for the memory tests. It counts
 * allocations and deallocations, and fails with OUT_OF_MEMORY once the live
 * bytes would pass |limit| (0 = no limit) or for the next |fail_next| calls. */
#ifndef CUBE_TEST_MEMORY_STORAGE_H_
#define CUBE_TEST_MEMORY_STORAGE_H_

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "memory/memory.h"

typedef struct test_storage {
  cube__storage_ops_t ops;
  uint64_t next_id;
  uint64_t allocs;      /* successful allocations */
  uint64_t deallocs;
  uint64_t failures;    /* allocations refused */
  uint64_t live_bytes;
  uint64_t limit;       /* 0: none */
  uint32_t fail_next;   /* refuse this many calls with OUT_OF_MEMORY */
  uint32_t fail_other;  /* refuse this many calls with INTERNAL */
  uint64_t last_size;   /* size of the last request */
} test_storage_t;

static inline cube_status_t test_storage_alloc(void* self, uint64_t size, cube__storage_t* out) {
  test_storage_t* ts = (test_storage_t*)self;
  ts->last_size = size;
  if (ts->fail_other > 0) {
    ts->fail_other--;
    ts->failures++;
    return cube__status_make(CUBE_STATUS_INTERNAL, "test storage: injected failure");
  }
  if (ts->fail_next > 0 || (ts->limit && ts->live_bytes + size > ts->limit)) {
    if (ts->fail_next > 0) ts->fail_next--;
    ts->failures++;
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "test storage: %" PRIu64 " bytes do not fit (%" PRIu64
                             " live, limit %" PRIu64 ")",
                             size, ts->live_bytes, ts->limit);
  }
  void* p = malloc(size ? (size_t)size : 1);
  if (!p) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "test storage: malloc failed");
  out->id = ++ts->next_id;
  out->ptr = p;
  out->size = size;
  out->backend_data = NULL;
  ts->allocs++;
  ts->live_bytes += size;
  return CUBE_OK;
}

static inline void test_storage_dealloc(void* self, const cube__storage_t* storage) {
  test_storage_t* ts = (test_storage_t*)self;
  ts->deallocs++;
  ts->live_bytes -= storage->size;
  free(storage->ptr);
}

static inline void test_storage_init(test_storage_t* ts, uint64_t alignment) {
  memset(ts, 0, sizeof(*ts));
  ts->ops.self = ts;
  ts->ops.alignment = alignment;
  ts->ops.alloc = test_storage_alloc;
  ts->ops.dealloc = test_storage_dealloc;
}

/* Allocates one buffer outside any pool (page-level tests). */
static inline cube__storage_t test_storage_buffer(test_storage_t* ts, uint64_t size) {
  cube__storage_t st;
  memset(&st, 0, sizeof(st));
  cube_status_t s = test_storage_alloc(ts, size, &st);
  cube_status_free(s);
  return st;
}

#endif /* CUBE_TEST_MEMORY_STORAGE_H_ */
