/* A manager's part of a memory snapshot (docs/observability.md, "Memory
 * snapshots"; the document's shape is docs/schemas/memory-snapshot.schema.json)
 * and the per-tag totals that snapshots and out-of-memory messages give.
 * The caller holds the lock that serialises the manager (memory.h). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "memory/memory.h"
#include "memory/pool_internal.h"

static const char* cube__snapshot_kind(cube_pool_kind_t kind) {
  switch (kind) {
    case CUBE_POOL_SLICED:
      return "sliced";
    case CUBE_POOL_EXCLUSIVE:
      return "exclusive";
    case CUBE_POOL_PERSISTENT:
      return "persistent";
  }
  return "unknown";
}

static bool cube__json_num(cJSON* o, const char* key, double v) {
  return cJSON_AddNumberToObject(o, key, v) != NULL;
}

static bool cube__snapshot_usage(cJSON* parent, const char* key, const cube_memory_usage_t* u) {
  cJSON* o = cJSON_AddObjectToObject(parent, key);
  return o && cube__json_num(o, "number_allocs", (double)u->number_allocs) &&
         cube__json_num(o, "bytes_in_use", (double)u->bytes_in_use) &&
         cube__json_num(o, "bytes_padding", (double)u->bytes_padding) &&
         cube__json_num(o, "bytes_reserved", (double)u->bytes_reserved);
}

static bool cube__snapshot_allocation(cJSON* allocations, const cube__mm_t* mm, uint64_t stream,
                                      uint32_t pool, uint32_t page, const cube__slice_t* s,
                                      uint64_t now_ns) {
  cube__memory_t* m = s->memory;
  cJSON* a = cJSON_CreateObject();
  if (!a) return false;
  cJSON_AddItemToArray(allocations, a);
  const char* tag = atomic_load_explicit(&m->tag, memory_order_acquire);
  bool ok = cube__json_num(a, "id", (double)m->id) && cube__json_num(a, "stream", (double)stream) &&
            cJSON_AddStringToObject(a, "memory", cube__mm_name(mm)) &&
            cube__json_num(a, "pool", pool) && cube__json_num(a, "page", page) &&
            cube__json_num(a, "offset", (double)s->offset) &&
            cube__json_num(a, "size", (double)s->size) &&
            cube__json_num(a, "padding", (double)s->padding);
  if (!ok) return false;
  char text[3 * 64 + 1]; /* tags are the program's bytes: the file is UTF-8 all the same */
  if (!(tag ? cJSON_AddStringToObject(a, "tag", cube__utf8_text(tag, text, sizeof(text)))
            : cJSON_AddNullToObject(a, "tag")))
    return false;
  if (m->born_ns && now_ns >= m->born_ns)
    return cube__json_num(a, "age_ns", (double)(now_ns - m->born_ns));
  return cJSON_AddNullToObject(a, "age_ns") != NULL;
}

static bool cube__snapshot_pool(cube__mm_t* mm, cube__pool_t* pool, uint64_t stream,
                                uint64_t now_ns, cJSON* pools, cJSON* allocations) {
  cube_pool_report_t r;
  cube__pool_report(pool, &r); /* detaches free descriptors first */
  cJSON* p = cJSON_CreateObject();
  if (!p) return false;
  cJSON_AddItemToArray(pools, p);
  /* Free bytes are those of free slices (a free page, in an exclusive or
   * persistent pool): what a request could take, what the document's free
   * slices add up to. Not reserved - in use - padding: the part of an
   * exclusive page past its one live buffer (the rounding to the granule) is
   * no free block, and counted as free it made a pool of live buffers only
   * read as fragmented to the full (1 - 0 / rounding). */
  uint64_t free_bytes = 0;
  for (uint32_t i = 0; i < pool->page_count; ++i)
    for (cube__slice_t* s = pool->pages[i]->first; s; s = s->next)
      if (!s->memory)
        free_bytes += pool->kind == CUBE_POOL_EXCLUSIVE ? pool->pages[i]->storage.size : s->length;
  double frag = free_bytes ? 1.0 - (double)r.largest_free_block / (double)free_bytes : 0.0;
  char text[3 * sizeof(pool->name) + 1];
  bool ok = cube__json_num(p, "stream", (double)stream) &&
            cJSON_AddStringToObject(p, "memory", cube__mm_name(mm)) &&
            cube__json_num(p, "index", pool->index) &&
            cJSON_AddStringToObject(p, "name", cube__utf8_text(pool->name, text, sizeof(text))) &&
            cJSON_AddStringToObject(p, "kind", cube__snapshot_kind(pool->kind)) &&
            cube__json_num(p, "page_size", (double)r.page_size) &&
            cube__json_num(p, "max_alloc_size", (double)r.max_alloc_size) &&
            cube__json_num(p, "alignment", (double)pool->alignment) &&
            (pool->capped ? cube__json_num(p, "cap", (double)pool->cap)
                          : cJSON_AddNullToObject(p, "cap") != NULL) &&
            cube__json_num(p, "peak_reserved", (double)pool->peak_reserved) &&
            cube__json_num(p, "pages_peak", (double)r.pages_peak) &&
            cube__json_num(p, "largest_free_block", (double)r.largest_free_block) &&
            cube__json_num(p, "free_bytes", (double)free_bytes) &&
            cube__json_num(p, "fragmentation", frag) && cube__snapshot_usage(p, "usage", &r.usage);
  cJSON* pages = ok ? cJSON_AddArrayToObject(p, "pages") : NULL;
  if (!pages) return false;
  for (uint32_t i = 0; i < pool->page_count; ++i) {
    cube__page_t* page = pool->pages[i];
    cJSON* pg = cJSON_CreateObject();
    if (!pg) return false;
    cJSON_AddItemToArray(pages, pg);
    cJSON* slices = NULL;
    if (!cube__json_num(pg, "size", (double)page->storage.size) ||
        !(slices = cJSON_AddArrayToObject(pg, "slices")))
      return false;
    for (cube__slice_t* s = page->first; s; s = s->next) {
      cJSON* sl = cJSON_CreateObject();
      if (!sl) return false;
      cJSON_AddItemToArray(slices, sl);
      /* Exclusive pages: the slice is the request; the page is the rest. */
      uint64_t length = pool->kind == CUBE_POOL_EXCLUSIVE ? page->storage.size : s->length;
      bool live = s->memory != NULL;
      if (!cube__json_num(sl, "offset", (double)s->offset) ||
          !cube__json_num(sl, "length", (double)length) ||
          !cJSON_AddBoolToObject(sl, "free", !live))
        return false;
      if (live) {
        if (!cube__json_num(sl, "id", (double)s->memory->id)) return false;
        if (!cube__snapshot_allocation(allocations, mm, stream, pool->index, i, s, now_ns))
          return false;
      }
    }
  }
  return true;
}

bool cube__mm_snapshot(cube__mm_t* mm, uint64_t stream_id, uint64_t now_ns, void* pools,
                       void* allocations) {
  cube__pool_t* list[CUBE_MAX_POOLS];
  uint32_t n = cube__mm_pool_list(mm, list);
  for (uint32_t i = 0; i < n; ++i)
    if (!cube__snapshot_pool(mm, list[i], stream_id, now_ns, pools, allocations)) return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Totals per tag
//===----------------------------------------------------------------------===//

static void cube__tag_add(cube__tag_total_t* totals, uint32_t* count, uint32_t cap,
                          const char* tag, uint64_t bytes) {
  uint32_t i = 0;
  for (; i < *count; ++i)
    if (totals[i].tag == tag) break;
  if (i == *count) {
    if (*count + 1 < cap) {
      totals[(*count)++] = (cube__tag_total_t){tag, 0, 0};
    } else {
      i = cap - 1;
      if (*count < cap) totals[(*count)++] = (cube__tag_total_t){"(other tags)", 0, 0};
      totals[i].tag = "(other tags)";
    }
  }
  totals[i].bytes += bytes;
  totals[i].count += 1;
}

void cube__mm_tag_totals(cube__mm_t* mm, cube__tag_total_t* totals, uint32_t* count,
                         uint32_t cap) {
  cube__pool_t* list[CUBE_MAX_POOLS];
  uint32_t n = cube__mm_pool_list(mm, list);
  for (uint32_t p = 0; p < n; ++p) cube__pool_drain(list[p]);
  for (uint32_t p = 0; p < n; ++p)
    for (uint32_t i = 0; i < list[p]->page_count; ++i)
      for (cube__slice_t* s = list[p]->pages[i]->first; s; s = s->next) {
        if (cube__slice_check_free(s)) continue;
        cube__tag_add(totals, count, cap,
                      atomic_load_explicit(&s->memory->tag, memory_order_acquire), s->size);
      }
}

static int cube__tag_total_cmp(const void* a, const void* b) {
  const cube__tag_total_t *x = a, *y = b;
  return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

void cube__tag_totals_sort(cube__tag_total_t* totals, uint32_t count) {
  qsort(totals, count, sizeof(*totals), cube__tag_total_cmp);
}
