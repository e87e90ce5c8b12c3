/* Aligned host memory (see alloc.h). */
#include "base/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
