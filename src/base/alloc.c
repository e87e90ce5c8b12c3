/* Aligned host memory (see alloc.h). */
#include "base/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void* cube__aligned_alloc(size_t size, size_t alignment) {
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  void* p = NULL;
  if (posix_memalign(&p, alignment, size ? size : 1) != 0) return NULL;
  return p;
}

void* cube__aligned_calloc(size_t size, size_t alignment) {
  /* Large blocks come from mmap through calloc and are zero without touching
   * the pages; use calloc when its natural alignment suffices. */
  if (alignment <= 16) return calloc(1, size ? size : 1);
  void* p = cube__aligned_alloc(size, alignment);
  if (p) memset(p, 0, size);
  return p;
}

void cube__aligned_free(void* p) { free(p); }

void* cube__array_grow(void* p, size_t* cap, size_t need, size_t elem) {
  if (need <= *cap) return p;
  size_t c = *cap ? *cap * 2 : 16;
  while (c < need) {
    if (c > SIZE_MAX / 2) return NULL;
    c *= 2;
  }
  if (elem && c > SIZE_MAX / elem) return NULL;
  void* q = realloc(p, c * elem);
  if (q) *cap = c;
  return q;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

void cube__prefault(const void* p, size_t n, bool write) {
  /* The page size, read once (threads may race to store the same value). */
  static atomic_size_t page_size;
  size_t page = atomic_load_explicit(&page_size, memory_order_relaxed);
  if (!page) {
    long ps = sysconf(_SC_PAGESIZE);
    page = ps > 0 ? (size_t)ps : 4096;
    atomic_store_explicit(&page_size, page, memory_order_relaxed);
  }
  if (!p || n < 2 * page) return;
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(page - 1);
  uintptr_t hi = ((uintptr_t)p + n + page - 1) & ~(uintptr_t)(page - 1);
  const uintptr_t at[3] = {lo, lo + ((hi - lo) / 2 & ~(uintptr_t)(page - 1)), hi - page};
  bool missing = false;
  for (int i = 0; i < 3 && !missing; ++i) {
    unsigned char v = 0;
    /* mincore fails for memory that is not a mapping: nothing to do then. */
    if (mincore((void*)at[i], page, &v) != 0) return;
    missing = (v & 1) == 0;
  }
  if (!missing) return;
  (void)madvise((void*)lo, hi - lo, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
}
