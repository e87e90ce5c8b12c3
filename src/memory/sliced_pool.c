/* SlicedPool: fixed-size pages carved into slices (docs/cubecl.md, "Memory: pools and slices"). */
#include <inttypes.h>

#include "base/status.h"
#include "memory/pool_internal.h"

cube_status_t cube__sliced_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                       bool* out_found) {
  *out_found = false;
  for (uint32_t i = 0; i < pool->page_count; ++i) {
    cube__page_t* page = pool->pages[i];
    cube__page_coalesce(page);
    CUBE_RETURN_IF_ERROR(cube__page_try_reserve(page, size, pool->alignment, m, out_found));
    if (*out_found) return CUBE_OK;
  }
  return CUBE_OK;
}

cube_status_t cube__sliced_alloc(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                 bool* out_storage_oom) {
  cube__page_t* page = NULL;
  if (pool->mm) cube__mm_make_room(pool->mm, pool->page_size, size);
  CUBE_RETURN_IF_ERROR(cube__pool_add_page(pool, pool->page_size, &page, out_storage_oom));
  bool found = false;
  CUBE_RETURN_IF_ERROR(cube__page_try_reserve(page, size, pool->alignment, m, &found));
  if (!found) {
    /* accept() guarantees size + padding <= page_size; the storage gave less. */
    return cube__status_make(CUBE_STATUS_INTERNAL,
                             "sliced pool: %" PRIu64 " bytes do not fit a new page of %" PRIu64
                             " bytes (storage returned %" PRIu64 ")",
                             size, pool->page_size, page->storage.size);
  }
  return CUBE_OK;
}

/* Explicit only: sliced pages are never released implicitly. */
void cube__sliced_cleanup(cube__pool_t* pool, bool explicit_cleanup) {
  if (!explicit_cleanup) return;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < pool->page_count; ++i) {
    cube__page_t* page = pool->pages[i];
    cube__page_coalesce(page);
    if (cube__page_is_free(page)) {
      cube__pool_release_page(pool, page);
    } else {
      pool->pages[kept++] = page;
    }
  }
  pool->page_count = kept;
}
