/* Aligned host memory (see alloc.h). */
#include "base/alloc.h"

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
