/* ExclusiveMemoryPool: one allocation per page, pages reused by the
 * smallest free_count and aged out by cleanup (docs/cubecl.md, "Memory: pools and slices"). */
#include <inttypes.h>

#include "base/status.h"
#include "memory/pool_internal.h"

#define CUBE__EXCLUSIVE_AVG_DECAY 0.01
/* A free page is released when seen free this many times (counting from
 * its initial free_count), or at once by an explicit cleanup. */
#define CUBE__EXCLUSIVE_ALLOC_AFTER_FREE 5u

/* Fitted: the free page that wastes least among those the request may
 * take (at most an eighth of the page, or less than a granule). */
static cube_status_t cube__fitted_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                              bool* out_found) {
  uint64_t padding = cube__padding(size, pool->alignment);
  if (size > UINT64_MAX - padding) return CUBE_OK;
  uint64_t effective = size + padding;
  cube__page_t* best = NULL;
  for (uint32_t i = 0; i < pool->page_count; ++i) {
    cube__page_t* page = pool->pages[i];
    uint64_t bytes = page->storage.size;
    if (bytes < effective || (best && bytes >= best->storage.size)) continue;
    uint64_t waste = bytes - effective;
    if (waste >= pool->page_size && waste > bytes / 8) continue;
    if (!cube__slice_check_free(page->first)) continue;
    best = page;
    if (waste < pool->alignment) break; /* exact */
  }
  if (!best) return CUBE_OK;
  cube__slice_bind(best->first, m, size, padding);
  best->free_count = 0;
  *out_found = true;
  return CUBE_OK;
}

cube_status_t cube__exclusive_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                          bool* out_found) {
  *out_found = false;
  if (cube__pool_fitted(pool)) return cube__fitted_try_reserve(pool, size, m, out_found);
  pool->cur_avg_size = pool->cur_avg_size * (1.0 - CUBE__EXCLUSIVE_AVG_DECAY) +
                       (double)size * CUBE__EXCLUSIVE_AVG_DECAY;
  uint64_t padding = cube__padding(size, pool->alignment);
  if (size > UINT64_MAX - padding) return CUBE_OK;
  cube__page_t* best = NULL;
  for (uint32_t i = 0; i < pool->page_count; ++i) {
    cube__page_t* page = pool->pages[i];
    if (page->storage.size < size + padding || !cube__slice_check_free(page->first)) continue;
    if (!best || page->free_count < best->free_count) best = page;
  }
  if (!best) return CUBE_OK;
  cube__slice_bind(best->first, m, size, padding);
  if (best->free_count > 0) best->free_count--;
  *out_found = true;
  return CUBE_OK;
}

cube_status_t cube__exclusive_alloc(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                    bool* out_storage_oom) {
  if (size > pool->max_alloc_size) {
    return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                             "exclusive pool: %" PRIu64 " bytes exceed its maximum of %" PRIu64,
                             size, pool->max_alloc_size);
  }
  bool fitted = cube__pool_fitted(pool);
  uint64_t avg = pool->cur_avg_size > 0 ? (uint64_t)pool->cur_avg_size : 0;
  uint64_t bytes = fitted || avg <= size ? size : avg;
  bytes += cube__padding(bytes, pool->alignment);
  if (fitted) {
    uint64_t round = cube__padding(bytes, pool->page_size);
    if (bytes <= UINT64_MAX - round) bytes += round;
    if (pool->mm) cube__mm_make_room(pool->mm, bytes, size);
  }
  cube__page_t* page = NULL;
  CUBE_RETURN_IF_ERROR(cube__pool_add_page(pool, bytes, &page, out_storage_oom));
  page->free_count = fitted ? 0 : CUBE__EXCLUSIVE_ALLOC_AFTER_FREE - 1;
  cube__slice_bind(page->first, m, size, cube__padding(size, pool->alignment));
  return CUBE_OK;
}

void cube__exclusive_cleanup(cube__pool_t* pool, uint64_t alloc_nr, bool explicit_cleanup) {
  if (!explicit_cleanup && cube__pool_fitted(pool)) return; /* cube__mm_release_idle ages them */
  if (!explicit_cleanup) {
    if (pool->dealloc_period == 0) return; /* never age */
    if (alloc_nr - pool->last_check < pool->dealloc_period / CUBE__EXCLUSIVE_ALLOC_AFTER_FREE) {
      return;
    }
  }
  pool->last_check = alloc_nr;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < pool->page_count; ++i) {
    cube__page_t* page = pool->pages[i];
    if (cube__slice_check_free(page->first)) {
      page->free_count++;
      if (page->free_count >= CUBE__EXCLUSIVE_ALLOC_AFTER_FREE || explicit_cleanup) {
        cube__pool_release_page(pool, page);
        continue;
      }
    }
    pool->pages[kept++] = page;
  }
  pool->page_count = kept;
}
