/* Slices and pages: one storage buffer carved into an address-ordered list
 * of slices (CubeCL's MemoryPage; docs/cubecl.md, "Memory: pools and slices"). */
#include <stdatomic.h>
#include <stdlib.h>

#include "base/status.h"
#include "memory/pool_internal.h"

/* The bin of a free slice of |length| bytes: four per power of two (the
 * two bits below the top one), lengths under 4 their own. Monotone: a
 * longer slice never sits in a lower bin. */
static inline uint32_t cube__bin_index(uint64_t length) {
  if (length < 4) return (uint32_t)length;
  uint32_t top = 63u - (uint32_t)__builtin_clzll(length);
  return top * 4u + (uint32_t)((length >> (top - 2u)) & 3u);
}

/* A free slice into the bins of |pool| (binned), or out. */
static inline void cube__bin_insert(cube__pool_t* pool, cube__slice_t* s) {
  cube__bins_t* bins = pool->bins;
  uint32_t i = cube__bin_index(s->length);
  s->bin_prev = NULL;
  s->bin_next = bins->head[i];
  if (s->bin_next) s->bin_next->bin_prev = s;
  bins->head[i] = s;
  bins->map[i / 64] |= UINT64_C(1) << (i % 64);
  s->binned = true;
}

static inline void cube__bin_remove(cube__pool_t* pool, cube__slice_t* s) {
  cube__bins_t* bins = pool->bins;
  uint32_t i = cube__bin_index(s->length);
  if (s->bin_prev)
    s->bin_prev->bin_next = s->bin_next;
  else
    bins->head[i] = s->bin_next;
  if (s->bin_next) s->bin_next->bin_prev = s->bin_prev;
  if (!bins->head[i]) bins->map[i / 64] &= ~(UINT64_C(1) << (i % 64));
  s->bin_prev = s->bin_next = NULL;
  s->binned = false;
}

void cube__slice_detach(cube__slice_t* s) {
  cube__memory_t* m = s->memory;
  if (!m) return;
  atomic_store_explicit(&m->notify, NULL, memory_order_relaxed); /* before the pool's ref goes */
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
   * of the last other reference: what its holder did happens before.
   * A pending count (on a sliced pool's release queue) is not free yet: the
   * queue's drain frees it. */
  if ((uint32_t)atomic_load_explicit(&m->counts, memory_order_acquire) != 1) return false;
  cube__page_t* page = s->page;
  cube__mm_t* mm = page->pool ? page->pool->mm : NULL;
  if (!mm) {
    cube__slice_detach(s);
  } else {
    /* The descriptor is ours alone: the manager reuses it (no atomic needed
     * to drop the pool's reference) and unbinds it (m->slice and m->mm). */
    atomic_store_explicit(&m->notify, NULL, memory_order_relaxed);
    s->memory = NULL;
    cube__mm_recycle(mm, m);
  }
  if (cube__page_binned(page)) {
    /* Not through the queue (a release the queue did not see): binned
     * without merging, as the caller may be walking the slice list; the
     * next reservation that finds no fit coalesces first. */
    cube__bin_insert(page->pool, s);
    page->pool->unmerged++;
    page->pool->stats.lazy++;
  }
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
  /* A sliced pool is told of the release (memory.c, cube__memory_drop): the
   * pool to tell is stored before the release increment that takes the
   * pool's reference, so a drop that reads that count reads it too. */
  atomic_store_explicit(&m->notify, cube__page_binned(s->page) ? s->page->pool : NULL,
                        memory_order_relaxed);
  atomic_fetch_add_explicit(&m->counts, CUBE__MEMORY_REF, memory_order_release);
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
  if (cube__page_binned(page)) {
    if (!pool->bins) pool->bins = calloc(1, sizeof(*pool->bins));
    if (!pool->bins) {
      free(page);
      free(s);
      return NULL;
    }
    cube__bin_insert(pool, s);
  }
  return page;
}

void cube__page_destroy(cube__page_t* page) {
  if (!page) return;
  cube__slice_t* s = page->first;
  while (s) {
    cube__slice_t* next = s->next;
    if (s->binned) cube__bin_remove(page->pool, s);
    cube__slice_detach(s);
    free(s);
    s = next;
  }
  free(page);
}

/* |s| takes binned |old|'s place in bin |index| (the bin of both): a split
 * or a merge that leaves a free run in the same bin unlinks nothing. */
static void cube__bin_replace(cube__pool_t* pool, cube__slice_t* old, cube__slice_t* s,
                              uint32_t index) {
  s->bin_prev = old->bin_prev;
  s->bin_next = old->bin_next;
  if (s->bin_prev)
    s->bin_prev->bin_next = s;
  else
    pool->bins->head[index] = s;
  if (s->bin_next) s->bin_next->bin_prev = s;
  s->binned = true;
  old->bin_prev = old->bin_next = NULL;
  old->binned = false;
}

cube_status_t cube__page_bind_split(cube__page_t* page, cube__slice_t* s, uint64_t size,
                                    uint64_t padding, cube__memory_t* m) {
  uint64_t effective = size + padding;
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
    if (s->binned) {
      uint32_t index = cube__bin_index(s->length);
      if (cube__bin_index(rest->length) == index) {
        cube__bin_replace(page->pool, s, rest, index);
      } else {
        cube__bin_remove(page->pool, s);
        cube__bin_insert(page->pool, rest);
      }
    }
  } else if (s->binned) {
    cube__bin_remove(page->pool, s);
  }
  cube__slice_bind(s, m, size, padding);
  return CUBE_OK;
}

cube_status_t cube__page_try_reserve(cube__page_t* page, uint64_t size, uint64_t alignment,
                                     cube__memory_t* m, bool* out_found) {
  *out_found = false;
  uint64_t padding = cube__padding(size, alignment);
  if (size > UINT64_MAX - padding) return CUBE_OK;
  uint64_t effective = size + padding;
  for (cube__slice_t* s = page->first; s; s = s->next) {
    if (!cube__slice_check_free(s) || s->length < effective) continue;
    CUBE_RETURN_IF_ERROR(cube__page_bind_split(page, s, size, padding, m));
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

/* Merges free |gone| (s->next) into free |s| (their bins are the caller's). */
static void cube__page_merge_next(cube__page_t* page, cube__slice_t* s) {
  cube__slice_t* gone = s->next;
  if (gone->binned) cube__bin_remove(page->pool, gone);
  s->length += gone->length;
  s->next = gone->next;
  if (gone->next) gone->next->prev = s;
  cube__slice_free(page, gone);
  page->slice_count--;
}

uint32_t cube__page_coalesce(cube__page_t* page) {
  uint32_t merges = 0;
  for (cube__slice_t* s = page->first; s; s = s->next) {
    if (!cube__slice_check_free(s)) continue;
    uint32_t before = merges;
    while (s->next && cube__slice_check_free(s->next)) {
      if (s->binned && before == merges) cube__bin_remove(page->pool, s); /* length changes */
      cube__page_merge_next(page, s);
      merges++;
    }
    if (merges != before && cube__page_binned(page)) cube__bin_insert(page->pool, s);
  }
  return merges;
}

/* Unlinks |keep|->next (free, out of the bins) into |keep|. */
static void cube__page_absorb_next(cube__page_t* page, cube__slice_t* keep) {
  cube__slice_t* gone = keep->next;
  keep->length += gone->length;
  keep->next = gone->next;
  if (gone->next) gone->next->prev = keep;
  cube__slice_free(page, gone);
  page->slice_count--;
}

void cube__page_free_slice(cube__page_t* page, cube__slice_t* s) {
  /* Free neighbours are binned (queue or scan), so they are whole runs
   * unless a scan binned them unmerged: one step each way is enough. The
   * merged run keeps a neighbour's place in the bins when it stays in the
   * same bin (the common case: a slice freed next to a page's free tail). */
  cube__pool_t* pool = page->pool;
  cube__slice_t* prev = s->prev;
  cube__slice_t* next = s->next;
  bool prev_free = prev && !prev->memory;
  bool next_free = next && !next->memory;
  cube__slice_t* keep = prev_free ? prev : s;
  cube__slice_t* anchor = prev_free ? prev : next_free ? next : NULL;
  uint64_t length = keep->length + (prev_free ? s->length : 0) + (next_free ? next->length : 0);
  bool same = false;
  if (prev_free && next_free) cube__bin_remove(pool, next);
  if (anchor) {
    uint32_t index = cube__bin_index(anchor->length);
    same = cube__bin_index(length) == index;
    if (!same)
      cube__bin_remove(pool, anchor);
    else if (anchor != keep)
      cube__bin_replace(pool, anchor, keep, index);
  }
  if (prev_free) {
    cube__page_absorb_next(page, prev);
    pool->stats.merges++;
  }
  if (next_free) {
    cube__page_absorb_next(page, keep);
    pool->stats.merges++;
  }
  if (!same) cube__bin_insert(pool, keep);
}

cube__slice_t* cube__bins_find(cube__pool_t* pool, uint64_t effective, uint64_t* visited) {
  cube__bins_t* bins = pool->bins;
  if (!bins) return NULL;
  uint32_t own = cube__bin_index(effective);
  /* A few of the request's own bin: the tightest fits. */
  cube__slice_t* s = bins->head[own];
  cube__slice_t* best = NULL;
  for (uint32_t n = 0; s && n < CUBE__BIN_SCAN; ++n, s = s->bin_next) {
    ++*visited;
    if (s->length == effective) return s;
    if (s->length > effective && (!best || s->length < best->length)) best = s;
  }
  if (best) return best;
  /* Any slice of a bin above fits: the first non-empty one. */
  for (uint32_t i = own + 1; i < CUBE__BIN_COUNT;) {
    uint64_t word = bins->map[i / 64] >> (i % 64);
    if (word) {
      /* The shortest of a few there: the rest of the run stays long. */
      cube__slice_t* pick = bins->head[i + (uint32_t)__builtin_ctzll(word)];
      cube__slice_t* c = pick;
      for (uint32_t n = 0; c && n < CUBE__BIN_SCAN; ++n, c = c->bin_next) {
        ++*visited;
        if (c->length < pick->length) pick = c;
      }
      return pick;
    }
    i = (i / 64 + 1) * 64;
  }
  /* The rest of the own bin, before the pool grows. */
  for (; s; s = s->bin_next) {
    ++*visited;
    if (s->length >= effective) return s;
  }
  return NULL;
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
