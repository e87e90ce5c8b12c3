/* PersistentPool: every slice is its own storage buffer of exactly its
 * effective size, indexed by that size (docs/cubecl.md, "Memory: pools and slices"). */
#include <stdlib.h>

#include "base/status.h"
#include "memory/pool_internal.h"

/* Index of the bucket for |effective| or of where it would go. */
static uint32_t cube__bucket_lower_bound(const cube__pool_t* pool, uint64_t effective) {
  uint32_t lo = 0, hi = pool->bucket_count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (pool->buckets[mid].effective_size < effective) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static cube__bucket_t* cube__bucket_find(const cube__pool_t* pool, uint64_t effective) {
  uint32_t i = cube__bucket_lower_bound(pool, effective);
  if (i < pool->bucket_count && pool->buckets[i].effective_size == effective) {
    return &pool->buckets[i];
  }
  return NULL;
}

/* Appends |page| to its bucket, creating the bucket if needed. The caller
 * ensures room for one more bucket. */
static void cube__bucket_insert(cube__pool_t* pool, cube__page_t* page) {
  uint64_t effective = page->first->length; /* == size + padding, bound or not */
  uint32_t i = cube__bucket_lower_bound(pool, effective);
  page->bucket_next = NULL;
  if (i < pool->bucket_count && pool->buckets[i].effective_size == effective) {
    pool->buckets[i].tail->bucket_next = page;
    pool->buckets[i].tail = page;
    return;
  }
  for (uint32_t j = pool->bucket_count; j > i; --j) pool->buckets[j] = pool->buckets[j - 1];
  pool->buckets[i] = (cube__bucket_t){effective, page, page};
  pool->bucket_count++;
}

static cube_status_t cube__bucket_reserve(cube__pool_t* pool) {
  if (pool->bucket_count < pool->bucket_cap) return CUBE_OK;
  if (pool->bucket_cap >= UINT32_MAX / 2) {
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "persistent pool: too many sizes");
  }
  uint32_t cap = pool->bucket_cap ? pool->bucket_cap * 2 : 8;
  cube__bucket_t* buckets = realloc(pool->buckets, (size_t)cap * sizeof(*buckets));
  if (!buckets) {
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "persistent pool: out of host memory growing the size index");
  }
  pool->buckets = buckets;
  pool->bucket_cap = cap;
  return CUBE_OK;
}

static bool cube__effective_size(const cube__pool_t* pool, uint64_t size, uint64_t* out) {
  uint64_t padding = cube__padding(size, pool->alignment);
  if (size > UINT64_MAX - padding) return false;
  *out = size + padding;
  return true;
}

bool cube__persistent_has_size(const cube__pool_t* pool, uint64_t size) {
  uint64_t effective;
  return cube__effective_size(pool, size, &effective) && cube__bucket_find(pool, effective);
}

cube_status_t cube__persistent_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                           bool* out_found) {
  *out_found = false;
  uint64_t effective;
  if (!cube__effective_size(pool, size, &effective)) return CUBE_OK;
  cube__bucket_t* bucket = cube__bucket_find(pool, effective);
  if (!bucket) return CUBE_OK;
  for (cube__page_t* page = bucket->head; page; page = page->bucket_next) {
    if (!cube__slice_check_free(page->first)) continue;
    cube__slice_bind(page->first, m, size, effective - size);
    *out_found = true;
    return CUBE_OK;
  }
  return CUBE_OK;
}

cube_status_t cube__persistent_alloc(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                     bool* out_storage_oom) {
  *out_storage_oom = false;
  uint64_t effective;
  if (!cube__effective_size(pool, size, &effective)) {
    return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT, "persistent pool: size overflows");
  }
  /* Room in both indexes first, so that nothing needs undoing later. */
  if (!cube__bucket_find(pool, effective)) CUBE_RETURN_IF_ERROR(cube__bucket_reserve(pool));
  cube__page_t* page = NULL;
  CUBE_RETURN_IF_ERROR(cube__pool_add_page(pool, effective, &page, out_storage_oom));
  cube__slice_bind(page->first, m, size, effective - size);
  cube__bucket_insert(pool, page);
  return CUBE_OK;
}

void cube__persistent_cleanup(cube__pool_t* pool, bool explicit_cleanup) {
  if (!explicit_cleanup) return;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < pool->page_count; ++i) {
    cube__page_t* page = pool->pages[i];
    if (cube__slice_check_free(page->first)) {
      cube__pool_release_page(pool, page);
    } else {
      pool->pages[kept++] = page;
    }
  }
  pool->page_count = kept;
  /* Rebuild the index; it can only shrink, so no allocation. */
  pool->bucket_count = 0;
  for (uint32_t i = 0; i < pool->page_count; ++i) cube__bucket_insert(pool, pool->pages[i]);
}
