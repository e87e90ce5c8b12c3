/* SlicedPool: fixed-size pages carved into slices (docs/cubecl.md, "Memory: pools and slices"). */
#include <inttypes.h>
#include <stdatomic.h>

#include "base/status.h"
#include "memory/pool_internal.h"

void cube__pool_notify(cube__pool_t* pool, cube__memory_t* m) {
  cube__memory_t* head = atomic_load_explicit(&pool->released, memory_order_relaxed);
  do {
    m->notify_next = head;
  } while (!atomic_compare_exchange_weak_explicit(&pool->released, &head, m,
                                                  memory_order_release, memory_order_relaxed));
  /* |m| is the owner's now: not touched again. */
}

void cube__pool_drain(cube__pool_t* pool) {
  if (pool->kind != CUBE_POOL_SLICED) return;
  if (!atomic_load_explicit(&pool->released, memory_order_relaxed)) return;
  /* Acquire: pairs with each push's release, which follows its acq_rel drop
   * of the count, so what the releasing threads did happens before. */
  cube__memory_t* m = atomic_exchange_explicit(&pool->released, NULL, memory_order_acquire);
  while (m) {
    cube__memory_t* next = m->notify_next;
    cube__slice_t* s = m->slice;
    m->notify_next = NULL;
    atomic_store_explicit(&m->notify, NULL, memory_order_relaxed);
    /* Only the pool's reference is left and nobody else may take one: the
     * count is ours to clear. */
    atomic_store_explicit(&m->counts, CUBE__MEMORY_REF, memory_order_relaxed);
    s->memory = NULL;
    if (pool->mm)
      cube__mm_recycle(pool->mm, m);
    else
      cube__memory_unref(m); /* unbound already: just frees it */
    cube__page_free_slice(s->page, s);
    pool->stats.drained++;
    m = next;
  }
}

cube_status_t cube__sliced_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                       bool* out_found) {
  *out_found = false;
  cube__pool_drain(pool);
  uint64_t padding = cube__padding(size, pool->alignment);
  if (size > UINT64_MAX - padding) return CUBE_OK;
  uint64_t visited = 0;
  cube__slice_t* s = cube__bins_find(pool, size + padding, &visited);
  if (!s && pool->unmerged) {
    /* Slices a scan found free were binned unmerged: merge every run first,
     * so that no page is added while a merged run would fit. */
    for (uint32_t i = 0; i < pool->page_count; ++i) cube__page_coalesce(pool->pages[i]);
    pool->unmerged = 0;
    s = cube__bins_find(pool, size + padding, &visited);
  }
  pool->stats.reserves++;
  pool->stats.visited += visited;
  if (visited > pool->stats.max_visited) pool->stats.max_visited = visited;
  if (!s) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__page_bind_split(s->page, s, size, padding, m));
  *out_found = true;
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
  cube__pool_drain(pool);
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
  pool->unmerged = 0; /* every page coalesced */
}
