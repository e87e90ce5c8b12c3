/* Slices and pages: one storage buffer carved into an address-ordered list
 * of slices (CubeCL's MemoryPage; docs/cubecl.md, "Memory: pools and slices"). */
#include <stdlib.h>

#include "base/status.h"
#include "memory/pool_internal.h"

void cube__slice_detach(cube__slice_t* s) {
  cube__memory_t* m = s->memory;
  if (!m) return;
  s->memory = NULL;
  m->slice = NULL;
  m->mm = NULL;
  cube__memory_unref(m);
}

bool cube__slice_check_free(cube__slice_t* s) {
  cube__memory_t* m = s->memory;
  if (!m) return true;
  /* Only the pool's reference left: nobody else can take a new one, so the
   * answer cannot change under us. The acquire load pairs with the release
   * of the last other reference: what its holder did happens before. */
  if (cube__memory_refs(m) > 1) return false;
  cube__mm_t* mm = s->page->pool ? s->page->pool->mm : NULL;
  if (!mm) {
    cube__slice_detach(s);
    return true;
  }
  /* The descriptor is ours alone: the manager reuses it (no atomic needed
   * to drop the pool's reference) and unbinds it (m->slice and m->mm). */
  s->memory = NULL;
  cube__mm_recycle(mm, m);
  return true;
}

/* Slice records: a pool keeps the ones a coalesce merged away for its next
 * split. Pages without a pool (tests) use the heap. */
static cube__slice_t* cube__slice_new(cube__page_t* page) {
  cube__pool_t* pool = page->pool;
  cube__slice_t* s;
  if (pool && pool->spare_slices) {
    s = pool->spare_slices;
    pool->spare_slices = s->next;
    pool->spare_slice_count--;
    *s = (cube__slice_t){0};
  } else {
    s = calloc(1, sizeof(*s));
    if (!s) return NULL;
  }
  s->page = page;
  return s;
}

static void cube__slice_free(cube__page_t* page, cube__slice_t* s) {
  cube__pool_t* pool = page->pool;
  if (pool && pool->spare_slice_count < CUBE__POOL_SPARE_SLICES) {
    s->memory = NULL;
    s->next = pool->spare_slices;
    pool->spare_slices = s;
    pool->spare_slice_count++;
    return;
  }
  free(s);
}

void cube__slice_bind(cube__slice_t* s, cube__memory_t* m, uint64_t size, uint64_t padding) {
  s->size = size;
  s->padding = padding;
  s->length = size + padding;
  s->memory = m;
  cube__memory_ref(m);
  m->mm = s->page->pool ? s->page->pool->mm : NULL;
  m->slice = s; /* last: the slice is complete before it is published */
}

cube__page_t* cube__page_create(cube__pool_t* pool, const cube__storage_t* storage) {
  cube__page_t* page = calloc(1, sizeof(*page));
  cube__slice_t* s = calloc(1, sizeof(*s));
  if (!page || !s) {
    free(page);
    free(s);
    return NULL;
  }
  page->pool = pool;
  page->storage = *storage;
  s->page = page;
  s->length = storage->size;
  page->first = s;
  page->slice_count = 1;
  return page;
}

void cube__page_destroy(cube__page_t* page) {
  if (!page) return;
  cube__slice_t* s = page->first;
  while (s) {
    cube__slice_t* next = s->next;
    cube__slice_detach(s);
    free(s);
    s = next;
  }
  free(page);
}

cube_status_t cube__page_try_reserve(cube__page_t* page, uint64_t size, uint64_t alignment,
                                     cube__memory_t* m, bool* out_found) {
  *out_found = false;
  uint64_t padding = cube__padding(size, alignment);
  if (size > UINT64_MAX - padding) return CUBE_OK;
  uint64_t effective = size + padding;
  for (cube__slice_t* s = page->first; s; s = s->next) {
    if (!cube__slice_check_free(s) || s->length < effective) continue;
    if (s->length > effective) {
      cube__slice_t* rest = cube__slice_new(page);
      if (!rest) {
        return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                                 "memory page: out of host memory splitting a slice");
      }
      rest->offset = s->offset + effective;
      rest->length = s->length - effective;
      rest->prev = s;
      rest->next = s->next;
      if (s->next) s->next->prev = rest;
      s->next = rest;
      page->slice_count++;
    }
    cube__slice_bind(s, m, size, padding);
    *out_found = true;
    return CUBE_OK;
  }
  return CUBE_OK;
}

uint32_t cube__page_coalesce_jobs(cube__page_t* page, cube__coalesce_job_t* out, uint32_t cap) {
  uint32_t jobs = 0, index = 0;
  cube__coalesce_job_t run = {0, 0, 0};
  for (cube__slice_t* s = page->first;; s = s->next, ++index) {
    bool is_free = s && cube__slice_check_free(s);
    if (is_free) {
      if (run.count == 0) {
        run.start = index;
        run.size = 0;
      }
      run.count++;
      run.size += s->length;
      continue;
    }
    if (run.count >= 2) {
      if (jobs < cap) out[jobs] = run;
      jobs++;
    }
    run.count = 0;
    if (!s) break;
  }
  return jobs < cap ? jobs : cap;
}

uint32_t cube__page_coalesce(cube__page_t* page) {
  uint32_t merges = 0;
  for (cube__slice_t* s = page->first; s; s = s->next) {
    if (!cube__slice_check_free(s)) continue;
    while (s->next && cube__slice_check_free(s->next)) {
      cube__slice_t* gone = s->next;
      s->length += gone->length;
      s->next = gone->next;
      if (gone->next) gone->next->prev = s;
      cube__slice_free(page, gone);
      page->slice_count--;
      merges++;
    }
  }
  return merges;
}

uint32_t cube__page_summary(cube__page_t* page, cube__page_block_t* out, uint32_t cap) {
  uint32_t n = 0;
  for (cube__slice_t* s = page->first; s; s = s->next) {
    bool is_free = cube__slice_check_free(s);
    if (n < cap) out[n] = (cube__page_block_t){s->offset, s->length, is_free};
    n++;
  }
  return n < cap ? n : cap;
}

bool cube__page_is_free(cube__page_t* page) {
  for (cube__slice_t* s = page->first; s; s = s->next) {
    if (!cube__slice_check_free(s)) return false;
  }
  return true;
}

uint64_t cube__page_largest_free(cube__page_t* page) {
  uint64_t best = 0, run = 0;
  for (cube__slice_t* s = page->first; s; s = s->next) {
    if (cube__slice_check_free(s)) {
      run += s->length;
      if (run > best) best = run;
    } else {
      run = 0;
    }
  }
  return best;
}

void cube__page_usage(cube__page_t* page, cube_memory_usage_t* usage) {
  for (cube__slice_t* s = page->first; s; s = s->next) {
    usage->bytes_reserved += s->length;
    if (cube__slice_check_free(s)) continue;
    usage->number_allocs += 1;
    usage->bytes_in_use += s->size;
    usage->bytes_padding += s->padding;
  }
}
