/* What the three pool kinds share: the page array, storage allocation,
 * usage and reports, and dispatch by kind. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "memory/pool_internal.h"

static void cube__pool_init_common(cube__pool_t* pool, cube_pool_kind_t kind, uint64_t alignment,
                                   const cube__storage_ops_t* storage, cube__mm_t* mm) {
  memset(pool, 0, sizeof(*pool));
  pool->kind = kind;
  pool->alignment = alignment ? alignment : 1;
  pool->storage = storage;
  pool->mm = mm;
  atomic_init(&pool->released, NULL);
}

void cube__pool_init(cube__pool_t* pool, const cube__pool_options_t* options, uint64_t alignment,
                     const cube__storage_ops_t* storage, cube__mm_t* mm) {
  cube__pool_init_common(pool, options->kind, alignment, storage, mm);
  pool->page_size = options->page_size; /* exclusive: the granule of a fitted pool, or 0 */
  pool->max_alloc_size = options->max_alloc_size;
  pool->dealloc_period = options->dealloc_period;
  pool->cur_avg_size = (double)options->max_alloc_size / 2.0;
  if (options->alignment) pool->alignment = options->alignment;
  pool->capped = options->capped;
  pool->cap_enforced = options->capped;
  pool->cap = options->cap;
  if (options->name[0]) snprintf(pool->name, sizeof(pool->name), "%s", options->name);
}

void cube__pool_init_persistent(cube__pool_t* pool, uint64_t alignment,
                                const cube__storage_ops_t* storage, cube__mm_t* mm) {
  cube__pool_init_common(pool, CUBE_POOL_PERSISTENT, alignment, storage, mm);
  pool->max_alloc_size = UINT64_MAX;
}

void cube__pool_deinit(cube__pool_t* pool) {
  cube__pool_drain(pool); /* a queued descriptor is recycled, not detached */
  while (pool->page_count > 0) cube__pool_remove_page(pool, pool->page_count - 1);
  while (pool->spare_slices) {
    cube__slice_t* s = pool->spare_slices;
    pool->spare_slices = s->next;
    free(s);
  }
  pool->spare_slice_count = 0;
  free(pool->pages);
  free(pool->buckets);
  free(pool->bins);
  pool->pages = NULL;
  pool->buckets = NULL;
  pool->bins = NULL;
  pool->unmerged = 0;
  pool->page_cap = pool->bucket_count = pool->bucket_cap = 0;
}

static bool cube__sliced_accept(const cube__pool_t* pool, uint64_t size) {
  uint64_t padding = cube__padding(size, pool->alignment);
  if (size > UINT64_MAX - padding || size + padding > pool->page_size) return false;
  if (size <= pool->max_alloc_size) return true;
  /* (page - size) * 5 < page, without overflow. */
  return pool->page_size > 0 && pool->page_size - size <= (pool->page_size - 1) / 5;
}

bool cube__pool_accept(const cube__pool_t* pool, uint64_t size) {
  switch (pool->kind) {
    case CUBE_POOL_SLICED:
      return cube__sliced_accept(pool, size);
    case CUBE_POOL_EXCLUSIVE:
      return size <= pool->max_alloc_size;
    case CUBE_POOL_PERSISTENT:
      return true;
  }
  return false;
}

uint64_t cube__pool_max_request(const cube__pool_t* pool) {
  switch (pool->kind) {
    case CUBE_POOL_SLICED: {
      /* The largest size whose padded size fits a page; if the 20 % rule
       * rejects it, it rejects every smaller size too. */
      uint64_t top = pool->page_size / pool->alignment * pool->alignment;
      if (cube__sliced_accept(pool, top)) return top;
      return pool->max_alloc_size < top ? pool->max_alloc_size : top;
    }
    case CUBE_POOL_EXCLUSIVE:
      return pool->max_alloc_size;
    case CUBE_POOL_PERSISTENT:
      return UINT64_MAX;
  }
  return 0;
}

cube_status_t cube__pool_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                     bool* out_found) {
  switch (pool->kind) {
    case CUBE_POOL_SLICED:
      return cube__sliced_try_reserve(pool, size, m, out_found);
    case CUBE_POOL_EXCLUSIVE:
      return cube__exclusive_try_reserve(pool, size, m, out_found);
    case CUBE_POOL_PERSISTENT:
      return cube__persistent_try_reserve(pool, size, m, out_found);
  }
  *out_found = false;
  return CUBE_OK;
}

cube_status_t cube__pool_alloc(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                               bool* out_storage_oom) {
  *out_storage_oom = false;
  switch (pool->kind) {
    case CUBE_POOL_SLICED:
      return cube__sliced_alloc(pool, size, m, out_storage_oom);
    case CUBE_POOL_EXCLUSIVE:
      return cube__exclusive_alloc(pool, size, m, out_storage_oom);
    case CUBE_POOL_PERSISTENT:
      return cube__persistent_alloc(pool, size, m, out_storage_oom);
  }
  return cube__status_make(CUBE_STATUS_INTERNAL, "memory pool: unknown kind %d", (int)pool->kind);
}

void cube__pool_cleanup(cube__pool_t* pool, uint64_t alloc_nr, bool explicit_cleanup) {
  switch (pool->kind) {
    case CUBE_POOL_SLICED:
      cube__sliced_cleanup(pool, explicit_cleanup);
      break;
    case CUBE_POOL_EXCLUSIVE:
      cube__exclusive_cleanup(pool, alloc_nr, explicit_cleanup);
      break;
    case CUBE_POOL_PERSISTENT:
      cube__persistent_cleanup(pool, explicit_cleanup);
      break;
  }
}

void cube__pool_usage(cube__pool_t* pool, cube_memory_usage_t* usage) {
  cube__pool_drain(pool);
  for (uint32_t i = 0; i < pool->page_count; ++i) {
    cube__page_t* page = pool->pages[i];
    if (pool->kind != CUBE_POOL_EXCLUSIVE) {
      cube__page_usage(page, usage);
      continue;
    }
    /* Exclusive: the whole page counts as reserved, not the slice. */
    usage->bytes_reserved += page->storage.size;
    cube__slice_t* s = page->first;
    if (cube__slice_check_free(s)) continue;
    usage->number_allocs += 1;
    usage->bytes_in_use += s->size;
    usage->bytes_padding += s->padding;
  }
}

void cube__pool_report(cube__pool_t* pool, cube_pool_report_t* out) {
  memset(out, 0, sizeof(*out));
  cube__pool_drain(pool);
  out->kind = pool->kind;
  out->page_size = pool->kind == CUBE_POOL_SLICED     ? pool->page_size
                   : pool->kind == CUBE_POOL_EXCLUSIVE ? pool->max_alloc_size
                                                       : 0;
  out->max_alloc_size = cube__pool_max_request(pool);
  out->pages = pool->page_count;
  out->pages_peak = pool->pages_peak;
  for (uint32_t i = 0; i < pool->page_count; ++i) {
    cube__page_t* page = pool->pages[i];
    uint64_t largest = 0;
    if (pool->kind == CUBE_POOL_SLICED) {
      largest = cube__page_largest_free(page);
    } else if (cube__slice_check_free(page->first)) {
      largest = pool->kind == CUBE_POOL_EXCLUSIVE ? page->storage.size : page->first->length;
    }
    if (largest > out->largest_free_block) out->largest_free_block = largest;
  }
  cube__pool_usage(pool, &out->usage);
}

cube_status_t cube__pool_reserve_page_slot(cube__pool_t* pool) {
  if (pool->page_count < pool->page_cap) return CUBE_OK;
  if (pool->page_cap >= UINT32_MAX / 2) {
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "memory pool: too many pages (%u)",
                             pool->page_count);
  }
  uint32_t cap = pool->page_cap ? pool->page_cap * 2 : 8;
  cube__page_t** pages = realloc(pool->pages, (size_t)cap * sizeof(*pages));
  if (!pages) {
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "memory pool: out of host memory growing the page list");
  }
  pool->pages = pages;
  pool->page_cap = cap;
  return CUBE_OK;
}

cube_status_t cube__pool_add_page(cube__pool_t* pool, uint64_t bytes, cube__page_t** out_page,
                                  bool* out_storage_oom) {
  *out_storage_oom = false;
  pool->cap_hit = false;
  if (pool->cap_enforced && (bytes > pool->cap || pool->reserved > pool->cap - bytes)) {
    /* An out-of-memory of the storage as far as the manager is concerned:
     * it cleans up and tries once more, then reports this. */
    char c[32], r[32], b[32];
    *out_storage_oom = true;
    pool->cap_hit = true;
    pool->failed_bytes = bytes;
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "%s is capped at %s (%" PRIu64 " bytes): %s reserved + %s more "
                             "would exceed its cap",
                             pool->name, cube__format_bytes(pool->cap, c, sizeof(c)), pool->cap,
                             cube__format_bytes(pool->reserved, r, sizeof(r)),
                             cube__format_bytes(bytes, b, sizeof(b)));
  }
  CUBE_RETURN_IF_ERROR(cube__pool_reserve_page_slot(pool));
  cube__storage_t storage;
  memset(&storage, 0, sizeof(storage));
  cube_status_t status = pool->storage->alloc(pool->storage->self, bytes, &storage);
  if (status != CUBE_OK) {
    *out_storage_oom = cube_status_code(status) == CUBE_STATUS_OUT_OF_MEMORY;
    pool->failed_bytes = bytes;
    return status;
  }
  cube__page_t* page = cube__page_create(pool, &storage);
  if (!page) {
    pool->storage->dealloc(pool->storage->self, &storage);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "memory pool: out of host memory creating a page");
  }
  pool->pages[pool->page_count++] = page;
  if (pool->page_count > pool->pages_peak) pool->pages_peak = pool->page_count;
  pool->reserved += page->storage.size;
  if (pool->reserved > pool->peak_reserved) pool->peak_reserved = pool->reserved;
  *out_page = page;
  return CUBE_OK;
}

void cube__pool_release_page(cube__pool_t* pool, cube__page_t* page) {
  cube__pool_drain(pool); /* none of its slices is left on the queue */
  cube__storage_t storage = page->storage;
  cube__page_destroy(page); /* detaches descriptors before the storage goes */
  pool->storage->dealloc(pool->storage->self, &storage);
  pool->reserved -= storage.size;
}

void cube__pool_remove_page(cube__pool_t* pool, uint32_t index) {
  cube__pool_release_page(pool, pool->pages[index]);
  memmove(&pool->pages[index], &pool->pages[index + 1],
          (size_t)(pool->page_count - index - 1) * sizeof(*pool->pages));
  pool->page_count--;
}
