/* The memory manager: picks a pool for each request (docs/cubecl.md, "Memory: pools and slices"),
 * retries a storage allocation once after an explicit cleanup, and turns
 * failures into OUT_OF_MEMORY statuses that carry a pool report (the message
 * format is in docs/errors.md, "Out of memory"). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "memory/memory.h"
#include "platform/platform.h"
#include "memory/pool_internal.h"
#include "memory/taint.h"
#include "memory/track.h"

struct cube__mm {
  char* name;
  cube__storage_ops_t storage; /* pools point at this copy */
  uint64_t alignment;
  cube__pool_t pools[CUBE_MAX_POOLS - 1]; /* dynamic pools, tried in order */
  uint32_t pool_count;
  cube__pool_t persistent; /* reported after the dynamic pools */
  uint64_t alloc_reserve_count;
  cube_allocation_mode_t mode;
  cube__persistent_policy_t policy;
  /* The dynamic pool that took the last request of |last_size| bytes
   * (pool_count = none yet): accept() depends on the size and the pool's
   * fixed options only, so the same size picks the same pool. */
  uint64_t last_size;
  uint32_t last_pool;
  /* Descriptors free to reuse (cube__mm_recycle), linked by next_spare. */
  cube__memory_t* spare;
  uint32_t spare_count;
  /* Descriptor ids taken from the process-wide counter a block at a time. */
  uint64_t next_id, end_id;
  /* What the default ladder is made of (cube__mm_install with no pools). */
  cube_memory_config_t config;
  uint64_t max_page_size;
  uint64_t granule;
  bool measuring;
  /* A dynamic pool is fitted: growth gives back free pages first
   * (cube__mm_make_room), syncs give back idle ones (cube__mm_release_idle). */
  bool fitted;
  /* Tracking (memory/track.h). */
  struct cube__mem_ring* ring;
  uint64_t stream_id;
};

#define CUBE__MM_SPARE_DESCRIPTORS 256u
#define CUBE__MM_ID_BLOCK 1024u

static const char* cube__pool_kind_name(cube_pool_kind_t kind) {
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

cube_status_t cube__mm_check_pools(const char* name, const cube__pool_options_t* pools,
                                   uint32_t count, uint64_t alignment) {
  if (count == 0 || count > CUBE_MAX_POOLS - 1) {
    return CUBE_INVALID("%s: %u custom pools given (must be 1 to %d)", name, count, CUBE_MAX_POOLS - 1);
  }
  for (uint32_t i = 0; i < count; ++i) {
    const cube__pool_options_t* p = &pools[i];
    if (p->kind != CUBE_POOL_SLICED && p->kind != CUBE_POOL_EXCLUSIVE) {
      return CUBE_INVALID("%s: pool %u has kind %d (must be sliced or exclusive)", name, i,
                          (int)p->kind);
    }
    uint64_t a = p->alignment ? p->alignment : alignment;
    if (p->alignment && ((p->alignment & (p->alignment - 1)) || p->alignment % alignment)) {
      return CUBE_INVALID("%s: pool %u: alignment %" PRIu64 " is not a power of two that is a "
                          "multiple of the device's alignment %" PRIu64,
                          name, i, p->alignment, alignment);
    }
    if (p->kind == CUBE_POOL_EXCLUSIVE && p->max_alloc_size % a) {
      return CUBE_INVALID("%s: exclusive pool %u: max_alloc_size %" PRIu64
                          " is not a multiple of the alignment %" PRIu64,
                          name, i, p->max_alloc_size, a);
    }
    if (memchr(p->name, '\0', sizeof(p->name)) == NULL) {
      return CUBE_INVALID("%s: pool %u: the name is not NUL-terminated within %zu bytes", name, i,
                          sizeof(p->name));
    }
  }
  return CUBE_OK;
}

/* (Re)initialises the dynamic pools of |mm| from |pools|. */
static void cube__mm_init_pools(cube__mm_t* mm, const cube__pool_options_t* pools, uint32_t count) {
  mm->pool_count = count;
  mm->fitted = false;
  for (uint32_t i = 0; i < count; ++i) {
    cube__pool_init(&mm->pools[i], &pools[i], mm->alignment, &mm->storage, mm);
    if (cube__pool_fitted(&mm->pools[i])) mm->fitted = true;
    mm->pools[i].index = i;
    if (!mm->pools[i].name[0]) snprintf(mm->pools[i].name, sizeof(mm->pools[i].name), "pool %u", i);
  }
  mm->last_pool = count;
  mm->last_size = 0;
}

cube_status_t cube__mm_create(const cube__mm_options_t* options, const cube__storage_ops_t* storage,
                              cube__mm_t** out_mm) {
  if (!options || !storage || !out_mm || !storage->alloc || !storage->dealloc) {
    return CUBE_INVALID("cube__mm_create: options, storage (with alloc and dealloc) and out_mm "
                        "are required");
  }
  *out_mm = NULL;
  const char* name = options->name ? options->name : "memory";
  if (storage->alignment == 0) {
    return CUBE_INVALID("%s: storage alignment 0 is invalid (must be >= 1)", name);
  }
  cube__pool_options_t ladder[CUBE_MAX_POOLS];
  const cube__pool_options_t* pools = options->custom;
  uint32_t count = options->custom_count;
  if (!pools) {
    count = cube__pool_ladder(options->config, options->max_page_size, storage->alignment,
                              options->granule, ladder);
    pools = ladder;
  }
  CUBE_RETURN_IF_ERROR(cube__mm_check_pools(name, pools, count, storage->alignment));

  cube__mm_t* mm = calloc(1, sizeof(*mm));
  char* name_copy = strdup(name);
  if (!mm || !name_copy) {
    free(mm);
    free(name_copy);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: out of host memory", name);
  }
  mm->name = name_copy;
  mm->storage = *storage;
  mm->alignment = storage->alignment;
  mm->config = options->config;
  mm->max_page_size = options->max_page_size;
  mm->granule = options->granule;
  cube__mm_init_pools(mm, pools, count);
  cube__pool_init_persistent(&mm->persistent, mm->alignment, &mm->storage, mm);
  mm->persistent.index = count;
  snprintf(mm->persistent.name, sizeof(mm->persistent.name), "persistent pool");
  mm->policy = options->persistent;
  switch (options->persistent) {
    case CUBE__PERSISTENT_DISABLED:
      mm->mode = CUBE_ALLOCATION_AUTO;
      break;
    case CUBE__PERSISTENT_ENFORCED:
      mm->mode = CUBE_ALLOCATION_PERSISTENT;
      break;
    default:
      mm->mode = options->mode;
      break;
  }
  *out_mm = mm;
  return CUBE_OK;
}

void cube__mm_destroy(cube__mm_t* mm) {
  if (!mm) return;
  for (uint32_t i = 0; i < mm->pool_count; ++i) cube__pool_deinit(&mm->pools[i]);
  cube__pool_deinit(&mm->persistent);
  while (mm->spare) {
    cube__memory_t* m = mm->spare;
    mm->spare = m->next_spare;
    free(m);
  }
  free(mm->name);
  free(mm);
}

/* cube__mm_recycle's other cases, out of line so that its usual one (onto
 * the spare list) calls nothing: a tainted descriptor, a full spare list,
 * and tracking on (the release goes into the event ring first). */
static __attribute__((noinline)) void cube__mm_recycle_slow(cube__mm_t* mm, cube__memory_t* m) {
  if (cube__mem_tracking() && m->slice) cube__mm_track_release(mm, m->slice, m);
  m->slice = NULL;
  m->mm = NULL;
  /* Its contents go with it: a new buffer starts valid, and not restorable. */
  if (atomic_load_explicit(&m->taint, memory_order_relaxed) != NULL)
    cube__memory_set_taint(m, NULL);
  if (atomic_load_explicit(&m->keep, memory_order_relaxed) != NULL) cube__memory_set_keep(m, NULL);
  if (mm->spare_count >= CUBE__MM_SPARE_DESCRIPTORS) {
    free(m); /* refs was 1 (the pool's): nobody else holds it */
    return;
  }
  m->next_spare = mm->spare;
  mm->spare = m;
  mm->spare_count++;
}

void cube__mm_recycle(cube__mm_t* mm, cube__memory_t* m) {
  if (__builtin_expect(atomic_load_explicit(&m->taint, memory_order_relaxed) != NULL ||
                           atomic_load_explicit(&m->keep, memory_order_relaxed) != NULL ||
                           mm->spare_count >= CUBE__MM_SPARE_DESCRIPTORS || cube__mem_tracking(),
                       0)) {
    cube__mm_recycle_slow(mm, m);
    return;
  }
  m->slice = NULL;
  m->mm = NULL;
  m->next_spare = mm->spare;
  mm->spare = m;
  mm->spare_count++;
}

/* An unbound descriptor with refs = 1, handle_refs = 1: a recycled one when
 * there is one (only this thread can see it: plain stores), else new. */
static cube__memory_t* cube__mm_new_memory(cube__mm_t* mm) {
  cube__memory_t* m = mm->spare;
  if (!m) {
    m = calloc(1, sizeof(*m));
    if (!m) return NULL;
  } else {
    mm->spare = m->next_spare;
    mm->spare_count--;
    m->next_spare = NULL;
    m->owner = NULL;
    atomic_store_explicit(&m->last_use, NULL, memory_order_relaxed);
  }
  atomic_store_explicit(&m->counts, CUBE__MEMORY_HANDLE_REF, memory_order_relaxed);
  if (mm->next_id == mm->end_id) {
    mm->next_id = cube__memory_take_ids(CUBE__MM_ID_BLOCK);
    mm->end_id = mm->next_id + CUBE__MM_ID_BLOCK;
  }
  m->id = mm->next_id++;
  return m;
}

void cube__mm_set_mode(cube__mm_t* mm, cube_allocation_mode_t mode) {
  if (mm->policy == CUBE__PERSISTENT_ENABLED) mm->mode = mode;
}

cube_allocation_mode_t cube__mm_mode(const cube__mm_t* mm) { return mm->mode; }

static void cube__usage_add(cube_memory_usage_t* total, const cube_memory_usage_t* u) {
  total->number_allocs += u->number_allocs;
  total->bytes_in_use += u->bytes_in_use;
  total->bytes_padding += u->bytes_padding;
  total->bytes_reserved += u->bytes_reserved;
}

void cube__mm_usage(cube__mm_t* mm, cube_memory_usage_t* out_usage) {
  memset(out_usage, 0, sizeof(*out_usage));
  for (uint32_t i = 0; i < mm->pool_count; ++i) cube__pool_usage(&mm->pools[i], out_usage);
  cube__pool_usage(&mm->persistent, out_usage);
}

void cube__mm_report(cube__mm_t* mm, cube_memory_report_t* out_report) {
  memset(out_report, 0, sizeof(*out_report));
  for (uint32_t i = 0; i < mm->pool_count; ++i) {
    cube__pool_report(&mm->pools[i], &out_report->pools[i]);
  }
  cube__pool_report(&mm->persistent, &out_report->pools[mm->pool_count]);
  out_report->pool_count = mm->pool_count + 1;
  for (uint32_t i = 0; i < out_report->pool_count; ++i) {
    cube__usage_add(&out_report->total, &out_report->pools[i].usage);
  }
}

void cube__mm_cleanup(cube__mm_t* mm, bool explicit_cleanup) {
  cube__pool_cleanup(&mm->persistent, mm->alloc_reserve_count, explicit_cleanup);
  for (uint32_t i = 0; i < mm->pool_count; ++i) {
    cube__pool_cleanup(&mm->pools[i], mm->alloc_reserve_count, explicit_cleanup);
  }
}

/* Fitted pools (docs/observability.md, "Memory that is not wasted") ------- */

/* The pools may hold at most this share of the bytes in use when they grow. */
#define CUBE__MM_FIT_NUM 21u
#define CUBE__MM_FIT_DEN 20u

/* The page of |mm| that gives back most if released: a free page of a
 * fitted pool or a wholly free page of a sliced pool. */
static bool cube__mm_largest_idle(cube__mm_t* mm, uint32_t* out_pool, uint32_t* out_page) {
  uint64_t best = 0;
  bool found = false;
  for (uint32_t p = 0; p < mm->pool_count; ++p) {
    cube__pool_t* pool = &mm->pools[p];
    bool fitted = cube__pool_fitted(pool);
    if (!fitted && pool->kind != CUBE_POOL_SLICED) continue;
    for (uint32_t i = 0; i < pool->page_count; ++i) {
      cube__page_t* page = pool->pages[i];
      if (page->storage.size <= best) continue;
      if (fitted ? !cube__slice_check_free(page->first) : !cube__page_is_free(page)) continue;
      best = page->storage.size;
      *out_pool = p;
      *out_page = i;
      found = true;
    }
  }
  return found;
}

void cube__mm_make_room(cube__mm_t* mm, uint64_t bytes, uint64_t size) {
  if (!mm->fitted) return;
  cube_memory_usage_t u;
  cube__mm_usage(mm, &u); /* also finds the buffers released since the last scan */
  uint64_t in_use = u.bytes_in_use + size;
  uint64_t allowed = in_use / CUBE__MM_FIT_DEN * CUBE__MM_FIT_NUM;
  uint64_t reserved = cube__mm_reserved_bytes(mm);
  while (reserved + bytes > allowed) {
    uint32_t p = 0, i = 0;
    if (!cube__mm_largest_idle(mm, &p, &i)) break;
    reserved -= mm->pools[p].pages[i]->storage.size;
    cube__pool_remove_page(&mm->pools[p], i);
  }
}

uint64_t cube__mm_release_idle(cube__mm_t* mm) {
  if (!mm->fitted) return 0;
  uint64_t before = cube__mm_reserved_bytes(mm);
  for (uint32_t p = 0; p < mm->pool_count; ++p) {
    cube__pool_t* pool = &mm->pools[p];
    if (!cube__pool_fitted(pool)) continue;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < pool->page_count; ++i) {
      cube__page_t* page = pool->pages[i];
      if (cube__slice_check_free(page->first) && page->free_count++ >= 1) {
        cube__pool_release_page(pool, page);
        continue;
      }
      pool->pages[kept++] = page;
    }
    pool->page_count = kept;
  }
  return before - cube__mm_reserved_bytes(mm);
}

uint64_t cube__mm_reserved_bytes(const cube__mm_t* mm) {
  uint64_t total = mm->persistent.reserved;
  for (uint32_t i = 0; i < mm->pool_count; ++i) total += mm->pools[i].reserved;
  return total;
}

/* Appends to a fixed buffer, truncating silently. Big enough for the first
 * line and one line per pool of the largest ladder (25 pools). */
typedef struct cube__msg {
  char text[6144];
  size_t len;
} cube__msg_t;

static void cube__msg_add(cube__msg_t* msg, const char* fmt, ...) CUBE_PRINTF(2, 3);
static void cube__msg_add(cube__msg_t* msg, const char* fmt, ...) {
  if (msg->len >= sizeof(msg->text) - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg->text + msg->len, sizeof(msg->text) - msg->len, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  msg->len += (size_t)n;
  if (msg->len > sizeof(msg->text) - 1) msg->len = sizeof(msg->text) - 1;
}

/* "95.37 MiB (100000000 bytes)", or "1000 B" below a KiB: what the caller
 * asked for, in the units of every memory message plus the exact count. */
static const char* cube__mm_size_text(uint64_t size, char* buf, size_t n) {
  char b[32];
  if (size < 1024)
    snprintf(buf, n, "%" PRIu64 " B", size);
  else
    snprintf(buf, n, "%s (%" PRIu64 " bytes)", cube__format_bytes(size, b, sizeof(b)), size);
  return buf;
}

/* One line per pool: "\n  pool 1 sliced (pages of 8.00 MiB, takes up to
 * 8.00 MiB): 1 page, 8.00 MiB reserved, 1000 B in use, largest free block
 * 8.00 MiB". */
static void cube__mm_pool_lines(cube__msg_t* msg, const cube_memory_report_t* r) {
  for (uint32_t i = 0; i < r->pool_count && i < CUBE_MAX_POOLS; ++i) {
    const cube_pool_report_t* p = &r->pools[i];
    char page[32], max[32], reserved[32], in_use[32], largest[32];
    cube__format_bytes(p->max_alloc_size, max, sizeof(max));
    cube__msg_add(msg, "\n  pool %u %s", i, cube__pool_kind_name(p->kind));
    if (p->kind == CUBE_POOL_SLICED)
      cube__msg_add(msg, " (pages of %s, takes up to %s)",
                    cube__format_bytes(p->page_size, page, sizeof(page)), max);
    else if (p->kind == CUBE_POOL_EXCLUSIVE)
      cube__msg_add(msg, " (takes up to %s)", max);
    else
      cube__msg_add(msg, " (exact sizes)");
    cube__msg_add(msg, ": %" PRIu64 " page%s, %s reserved, %s in use, largest free block %s",
                  p->pages, p->pages == 1 ? "" : "s",
                  cube__format_bytes(p->usage.bytes_reserved, reserved, sizeof(reserved)),
                  cube__format_bytes(p->usage.bytes_in_use, in_use, sizeof(in_use)),
                  cube__format_bytes(p->largest_free_block, largest, sizeof(largest)));
  }
}

/* The OUT_OF_MEMORY status of a request of |size| bytes (docs/errors.md,
 * "Out of memory"): the message is "<name>: <size> requested: <why>" and one
 * line per pool; the status carries |size| and the pools' report. */
static cube_status_t cube__mm_oom(cube__mm_t* mm, uint64_t size, const char* why) {
  cube_memory_report_t report;
  cube__mm_report(mm, &report);
  cube__msg_t msg = {.len = 0};
  msg.text[0] = '\0';
  char sz[64];
  cube__msg_add(&msg, "%s: %s requested: %s", mm->name, cube__mm_size_text(size, sz, sizeof(sz)),
                why);
  cube__mm_pool_lines(&msg, &report);
  return cube__status_oom(size, &report, "%s", msg.text);
}

/* The OOM status of a request of |size| bytes whose storage allocation for
 * |pool| failed with the storage's out-of-memory |storage_status| (consumed)
 * also after a cleanup that freed |freed| bytes. The storage's message is
 * the reason; when the storage asked for was a page, not the request's own
 * bytes, the reason says so. */
static cube_status_t cube__mm_storage_oom(cube__mm_t* mm, const cube__pool_t* pool, uint64_t size,
                                          uint64_t freed, cube_status_t storage_status) {
  char why[1024], page[32], fr[32];
  int n = 0;
  if (pool->kind != CUBE_POOL_PERSISTENT) {
    uint32_t index = (uint32_t)(pool - mm->pools);
    n = snprintf(why, sizeof(why), "a new %s page for pool %u (%s): ",
                 cube__format_bytes(pool->failed_bytes, page, sizeof(page)), index,
                 cube__pool_kind_name(pool->kind));
    if (n < 0 || (size_t)n >= sizeof(why)) n = 0;
  }
  snprintf(why + n, sizeof(why) - (size_t)n, "%s (also after a cleanup that freed %s)",
           cube_status_message(storage_status), cube__format_bytes(freed, fr, sizeof(fr)));
  cube_status_free(storage_status);
  return cube__mm_oom(mm, size, why);
}

/* Allocates new storage in |pool| for |m|; on storage out-of-memory runs an
 * explicit cleanup and tries once more. When that fails too, returns the
 * storage's own status with *out_storage_oom set and the bytes the cleanup
 * freed in *out_freed. */
static cube_status_t cube__mm_alloc_with_retry(cube__mm_t* mm, cube__pool_t* pool, uint64_t size,
                                               cube__memory_t* m, uint64_t* out_freed,
                                               bool* out_storage_oom) {
  *out_freed = 0;
  *out_storage_oom = false;
  bool storage_oom = false;
  cube_status_t status = cube__pool_alloc(pool, size, m, &storage_oom);
  if (status == CUBE_OK) return CUBE_OK;
  if (!storage_oom) return cube__status_annotate(status, "%s: reserve %" PRIu64, mm->name, size);
  cube_status_free(status);

  uint64_t before = cube__mm_reserved_bytes(mm);
  cube__mm_cleanup(mm, true);
  uint64_t freed = before - cube__mm_reserved_bytes(mm);
  status = cube__pool_alloc(pool, size, m, &storage_oom);
  if (status == CUBE_OK) return CUBE_OK;
  if (!storage_oom) return cube__status_annotate(status, "%s: reserve %" PRIu64, mm->name, size);
  *out_freed = freed;
  *out_storage_oom = true;
  return status;
}

static cube_status_t cube__mm_reserve_into(cube__mm_t* mm, uint64_t size, cube__memory_t* m) {
  mm->alloc_reserve_count++;
  bool found = false;
  bool storage_oom = false;
  uint64_t freed = 0;

  /* Persistent: reuse a free buffer of the same effective size in either
   * mode; allocate one when persistent, or when that size lives there. */
  bool persistent_sizes = mm->persistent.bucket_count > 0; /* else neither can hit */
  if (persistent_sizes) {
    CUBE_RETURN_IF_ERROR(cube__pool_try_reserve(&mm->persistent, size, m, &found));
    if (found) return CUBE_OK;
  }
  if (mm->mode == CUBE_ALLOCATION_PERSISTENT ||
      (persistent_sizes && cube__persistent_has_size(&mm->persistent, size))) {
    cube_status_t status =
        cube__mm_alloc_with_retry(mm, &mm->persistent, size, m, &freed, &storage_oom);
    if (status == CUBE_OK || !storage_oom) return status;
    return cube__mm_storage_oom(mm, &mm->persistent, size, freed, status);
  }

  cube__pool_t* pool = NULL;
  if (size == mm->last_size && mm->last_pool < mm->pool_count) {
    pool = &mm->pools[mm->last_pool];
  } else {
    for (uint32_t i = 0; i < mm->pool_count; ++i) {
      if (cube__pool_accept(&mm->pools[i], size)) {
        pool = &mm->pools[i];
        mm->last_size = size;
        mm->last_pool = i;
        break;
      }
    }
  }
  if (!pool) {
    uint64_t largest = 0;
    for (uint32_t i = 0; i < mm->pool_count; ++i) {
      uint64_t max = cube__pool_max_request(&mm->pools[i]);
      if (max > largest) largest = max;
    }
    char why[128], lb[32];
    snprintf(why, sizeof(why), "no pool takes it (the largest takes up to %s)",
             cube__format_bytes(largest, lb, sizeof(lb)));
    return cube__mm_oom(mm, size, why);
  }
  CUBE_RETURN_IF_ERROR(cube__pool_try_reserve(pool, size, m, &found));
  if (found) return CUBE_OK;
  cube_status_t status = cube__mm_alloc_with_retry(mm, pool, size, m, &freed, &storage_oom);
  if (status == CUBE_OK || !storage_oom) return status;
  /* The pool's page does not fit in what the storage has left (a memory limit
   * on a machine whose ladder pages are large: a 1 MiB request can need a
   * 126 MiB page on a 125 GiB host). Before failing, take an exact-size
   * buffer from the persistent pool: it holds just the request. When that
   * fails too, its reason is the one to give: it is about the request's own
   * bytes, where the page's was about a page the caller never asked for. */
  if (pool->cap_hit) return cube__mm_storage_oom(mm, pool, size, freed, status);
  bool exact_oom = false;
  const uint64_t wanted = pool->reserved + pool->failed_bytes;
  cube_status_t exact = cube__pool_alloc(&mm->persistent, size, m, &exact_oom);
  if (exact == CUBE_OK) {
    cube_status_free(status);
    if (wanted > pool->peak_wanted) pool->peak_wanted = wanted;
    return CUBE_OK;
  }
  if (exact_oom) {
    cube_status_free(status);
    return cube__mm_storage_oom(mm, &mm->persistent, size, freed, exact);
  }
  cube_status_free(exact);
  return cube__mm_storage_oom(mm, pool, size, freed, status);
}

cube_status_t cube__mm_oom_locate(const cube__mm_t* mm, cube_status_t status, const char* what,
                                  const char* where) {
  uint64_t requested = 0;
  if (!mm || !status || !cube_status_oom_report(status, &requested, NULL))
    return cube__status_annotate(status, "%s: on %s", what, where);
  /* The first line is "<name>: <size> requested: <why>" (cube__mm_oom). */
  char head[256], sz[64];
  snprintf(head, sizeof(head), "%s: %s requested: ", mm->name,
           cube__mm_size_text(requested, sz, sizeof(sz)));
  const char* msg = cube_status_message(status);
  size_t hn = strlen(head);
  if (strncmp(msg, head, hn) != 0) return cube__status_annotate(status, "%s: on %s", what, where);
  cube_status_t out = cube__status_oom(requested, cube__status_oom_report_mut(status),
                                       "%s: out of memory: %s of %s requested on %s: %s", what,
                                       sz, mm->name, where, msg + hn);
  if (!cube_status_oom_report(out, NULL, NULL)) /* the static status: no host memory */
    return cube__status_annotate(status, "%s: on %s", what, where);
  cube_status_free(status);
  return out;
}

/* Stamps |m| (tag of the thread's scope, time) and records the allocation:
 * out of line, reached only while tracking is on. */
static __attribute__((noinline, cold)) void cube__mm_track_alloc(cube__mm_t* mm,
                                                                 cube__memory_t* m) {
  const char* tag = cube__tag_current();
  atomic_store_explicit(&m->tag, tag, memory_order_release);
  m->born_ns = cube__now_ns();
  if (!mm->ring) return;
  const cube__slice_t* s = m->slice;
  cube__mem_event_t ev = {.t_ns = m->born_ns,
                          .id = m->id,
                          .size = s ? s->size : 0,
                          .stream = mm->stream_id,
                          .tag = tag,
                          .memory = mm->name,
                          .pool = s && s->page->pool ? s->page->pool->index : 0,
                          .kind = CUBE__MEM_EVENT_ALLOC};
  cube__mem_ring_push(mm->ring, &ev);
}

void cube__mm_track_release(cube__mm_t* mm, const cube__slice_t* s, cube__memory_t* m) {
  if (!mm->ring) return;
  cube__mem_event_t ev = {.t_ns = cube__now_ns(),
                          .id = m->id,
                          .size = s->size,
                          .stream = mm->stream_id,
                          .tag = atomic_load_explicit(&m->tag, memory_order_acquire),
                          .memory = mm->name,
                          .pool = s->page->pool ? s->page->pool->index : 0,
                          .kind = CUBE__MEM_EVENT_RELEASE};
  cube__mem_ring_push(mm->ring, &ev);
}

cube_status_t cube__mm_reserve(cube__mm_t* mm, uint64_t size, cube__memory_t** out_memory) {
  if (!mm || !out_memory) return CUBE_INVALID("cube__mm_reserve: mm and out_memory are required");
  *out_memory = NULL;
  cube__memory_t* m = cube__mm_new_memory(mm);
  if (!m) {
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "%s: out of host memory creating a descriptor", mm->name);
  }
  cube_status_t status = cube__mm_reserve_into(mm, size, m);
  if (status != CUBE_OK) {
    cube__memory_unref(m);
    return status;
  }
  if (__builtin_expect(cube__mem_tracking(), 0)) cube__mm_track_alloc(mm, m);
  *out_memory = m;
  return CUBE_OK;
}

cube_status_t cube__mm_reserve_bind(cube__mm_t* mm, uint64_t size, cube__memory_t* m) {
  if (!mm || !m) return CUBE_INVALID("cube__mm_reserve_bind: mm and memory are required");
  if (m->slice) {
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: memory %" PRIu64 " is already bound", mm->name, m->id);
  }
  cube_status_t status = cube__mm_reserve_into(mm, size, m);
  if (status == CUBE_OK && cube__mem_tracking()) cube__mm_track_alloc(mm, m);
  return status;
}

void cube__mm_rebind_storage(cube__mm_t* mm, const cube__storage_ops_t* storage) {
  /* The pools point at mm->storage, so updating the copy in place is enough. */
  if (mm && storage && storage->alignment == mm->storage.alignment) mm->storage = *storage;
}

//===----------------------------------------------------------------------===//
// Planning
//===----------------------------------------------------------------------===//

cube_status_t cube__mm_install(cube__mm_t* mm, const cube__pool_options_t* pools, uint32_t count) {
  cube__pool_options_t ladder[CUBE_MAX_POOLS];
  if (!pools) {
    count = cube__pool_ladder(mm->config, mm->max_page_size, mm->alignment, mm->granule, ladder);
    pools = ladder;
  }
  CUBE_RETURN_IF_ERROR(cube__mm_check_pools(mm->name, pools, count, mm->alignment));
  cube__mm_cleanup(mm, true);
  cube_memory_usage_t u;
  cube__mm_usage(mm, &u);
  if (u.number_allocs > 0) {
    char b[32];
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: %" PRIu64 " buffer%s (%s) still live: release them (and wait "
                             "for the work using them) before installing pools",
                             mm->name, u.number_allocs, u.number_allocs == 1 ? "" : "s",
                             cube__format_bytes(u.bytes_in_use, b, sizeof(b)));
  }
  for (uint32_t i = 0; i < mm->pool_count; ++i) cube__pool_deinit(&mm->pools[i]);
  cube__mm_init_pools(mm, pools, count);
  mm->persistent.peak_reserved = mm->persistent.reserved;
  cube__mm_set_measuring(mm, mm->measuring);
  return CUBE_OK;
}

void cube__mm_set_measuring(cube__mm_t* mm, bool measuring) {
  mm->measuring = measuring;
  for (uint32_t i = 0; i < mm->pool_count; ++i) {
    cube__pool_t* p = &mm->pools[i];
    p->cap_enforced = p->capped && !measuring;
    if (measuring) {
      p->peak_reserved = p->reserved;
      p->peak_wanted = 0;
    }
  }
  if (measuring) mm->persistent.peak_reserved = mm->persistent.reserved;
}

uint32_t cube__mm_pools(const cube__mm_t* mm, cube__pool_options_t* out, uint64_t* out_peaks) {
  for (uint32_t i = 0; i < mm->pool_count; ++i) {
    const cube__pool_t* p = &mm->pools[i];
    memset(&out[i], 0, sizeof(out[i]));
    out[i].kind = p->kind;
    out[i].page_size = p->page_size;
    out[i].max_alloc_size = p->max_alloc_size;
    out[i].dealloc_period = p->dealloc_period;
    out[i].alignment = p->alignment;
    out[i].capped = p->capped;
    out[i].cap = p->cap;
    snprintf(out[i].name, sizeof(out[i].name), "%s", p->name);
    if (out_peaks)
      out_peaks[i] = p->peak_reserved > p->peak_wanted ? p->peak_reserved : p->peak_wanted;
  }
  return mm->pool_count;
}

void cube__mm_set_ring(cube__mm_t* mm, struct cube__mem_ring* ring, uint64_t stream_id) {
  mm->ring = ring;
  mm->stream_id = stream_id;
}

const char* cube__mm_name(const cube__mm_t* mm) { return mm->name; }

cube_status_t cube__mm_renew(cube__mm_t* mm, cube__mm_renew_fn renew, cube__mm_live_fn live,
                             void* user) {
  cube__mm_cleanup(mm, true);
  cube__pool_t* pools[CUBE_MAX_POOLS];
  uint32_t n = cube__mm_pool_list(mm, pools);
  for (uint32_t p = 0; p < n; ++p) {
    for (uint32_t i = 0; i < pools[p]->page_count; ++i) {
      cube__page_t* page = pools[p]->pages[i];
      CUBE_RETURN_IF_ERROR(renew(user, &page->storage));
      for (cube__slice_t* sl = page->first; sl; sl = sl->next)
        if (sl->memory) live(user, sl->memory);
    }
  }
  return CUBE_OK;
}

uint32_t cube__mm_pool_list(cube__mm_t* mm, cube__pool_t** out) {
  for (uint32_t i = 0; i < mm->pool_count; ++i) out[i] = &mm->pools[i];
  out[mm->pool_count] = &mm->persistent;
  return mm->pool_count + 1;
}
