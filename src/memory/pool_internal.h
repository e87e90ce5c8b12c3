/* Private to src/memory: slices, pages and the three pool kinds (CubeCL's:
 * docs/cubecl.md, "Memory: pools and slices"). The manager (manager.c) and
 * the unit tests use these; nothing else should.
 *
 * Ownership: a pool owns its pages, a page owns its storage buffer and its
 * slices. A bound slice holds one reference on its descriptor (the "pool's
 * reference"); the descriptor points back at the slice. A slice is free when
 * it holds no descriptor. In exclusive and persistent pools (and pages of
 * no pool), a slice whose descriptor has only the pool's reference left is
 * discovered lazily by cube__slice_check_free, which detaches it
 * (descriptor unbound, reference dropped).
 *
 * Sliced pools are told instead (the release queue and the size bins, below):
 * a reservation costs the same however many slices of the pool are live.
 *
 * Thread-compatible: one thread at a time per pool (the manager's owner);
 * only descriptor reference counts and a sliced pool's release queue
 * (cube__pool_notify) are touched from other threads.
 */
#ifndef CUBE_MEMORY_POOL_INTERNAL_H_
#define CUBE_MEMORY_POOL_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memory/memory.h"

typedef struct cube__page cube__page_t;
typedef struct cube__pool cube__pool_t;

struct cube__slice {
  cube__page_t* page;
  cube__slice_t* prev; /* address order inside the page (sliced pages) */
  cube__slice_t* next;
  uint64_t offset;  /* from the start of the page's storage; fixed while bound */
  uint64_t length;  /* bytes of the page it covers: size + padding while bound */
  uint64_t size;    /* requested size; meaningful while bound */
  uint64_t padding; /* alignment padding; meaningful while bound */
  cube__memory_t* memory; /* bound descriptor (holds one ref on it), NULL = free */
  /* Sliced pools: a free slice is on its pool's bin for its length (in no
   * order), linked by these. */
  cube__slice_t* bin_prev;
  cube__slice_t* bin_next;
  bool binned;
};

struct cube__page {
  cube__pool_t* pool;      /* NULL for a standalone page (tests) */
  cube__storage_t storage; /* never moves: bound descriptors resolve to it */
  cube__slice_t* first;    /* slices in address order, covering the storage
                              exactly (sliced); exclusive and persistent pages
                              have exactly one slice at offset 0 */
  uint32_t slice_count;
  uint32_t free_count;        /* exclusive: aging counter */
  cube__page_t* bucket_next;  /* persistent: next page of the same bucket */
};

/* Padding that rounds |size| up to a multiple of |align| (any align >= 1;
 * storage alignments are powers of two, which need no division). */
static inline uint64_t cube__padding(uint64_t size, uint64_t align) {
  if ((align & (align - 1)) == 0) return align ? (0 - size) & (align - 1) : 0;
  return (align - size % align) % align;
}

/* Slices and pages (page.c) --------------------------------------------- */

/* True when |s| is free. If only the pool's reference on its descriptor is
 * left, detaches it first (descriptor unbound, the reference dropped). */
bool cube__slice_check_free(cube__slice_t* s);

/* Binds free slice |s| to |m| for |size| bytes with |padding|: takes the
 * pool's reference on |m| and points it at |s|. */
void cube__slice_bind(cube__slice_t* s, cube__memory_t* m, uint64_t size, uint64_t padding);

/* Detaches |s| from its descriptor whatever its reference count (used when
 * the storage goes away). */
void cube__slice_detach(cube__slice_t* s);

/* A page over |storage| (copied) with one free slice covering it. NULL when
 * out of host memory. The page does not own the storage's deallocation: the
 * pool (or the test) deallocates it. */
cube__page_t* cube__page_create(cube__pool_t* pool, const cube__storage_t* storage);
/* Detaches every bound slice and frees the page (not the storage). */
void cube__page_destroy(cube__page_t* page);

/* First-fit over the slices in address order: binds |m| to the first free
 * slice of at least size + padding bytes, splitting off the rest as a new
 * free slice. *out_found is false when no slice fits (no error). Fails only
 * when out of host memory. Does not coalesce. */
cube_status_t cube__page_try_reserve(cube__page_t* page, uint64_t size, uint64_t alignment,
                                     cube__memory_t* m, bool* out_found);

/* One run of adjacent free slices that a coalesce merges. */
typedef struct cube__coalesce_job {
  uint32_t start; /* index of the first slice of the run */
  uint32_t count; /* slices in the run (>= 2) */
  uint64_t size;  /* bytes of the merged slice */
} cube__coalesce_job_t;

/* The runs a coalesce would merge (writes at most |cap|, returns the
 * count). Detaches free descriptors but merges nothing. */
uint32_t cube__page_coalesce_jobs(cube__page_t* page, cube__coalesce_job_t* out, uint32_t cap);
/* Merges every run of >= 2 adjacent free slices. Returns the merges done. */
uint32_t cube__page_coalesce(cube__page_t* page);

typedef struct cube__page_block {
  uint64_t offset;
  uint64_t size; /* effective size (length) */
  bool free;
} cube__page_block_t;

/* The slices in address order (writes at most |cap|, returns the count). */
uint32_t cube__page_summary(cube__page_t* page, cube__page_block_t* out, uint32_t cap);

/* True when every slice is free (after detaching). */
bool cube__page_is_free(cube__page_t* page);

/* Largest block a coalesce would give (sum of the longest free run). */
uint64_t cube__page_largest_free(cube__page_t* page);

/* Adds this page's slices to |usage| (reserved = sum of slice lengths). */
void cube__page_usage(cube__page_t* page, cube_memory_usage_t* usage);

/* Pools (pool.c, sliced_pool.c, exclusive_pool.c, persistent_pool.c) ----- */

/* Release queue and size bins (sliced pools) ------------------------------
 *
 * Why not CubeCL's scan: its reservation coalesces every page (a walk of
 * every slice, asking each descriptor whether only the pool's reference is
 * left) and then first-fits from each page's start, so a pool hit costs
 * O(live slices of the pool) (docs/benchmarks.md, "Pool hit against live
 * buffers"). Here the release tells the pool instead, and the pool keeps its
 * free slices where a reservation finds them without walking the live ones:
 *
 *  - The drop of the last reference other than the pool's (any thread;
 *    memory.c) marks the count CUBE__MEMORY_PENDING and pushes the
 *    descriptor onto the pool's |released| stack (lock-free, push only).
 *  - The owner takes the whole stack (one exchange) at its next reserve,
 *    usage, report or cleanup (cube__pool_drain): each descriptor is
 *    recycled and its slice freed, merged at once with a free neighbour on
 *    either side (the slice list is doubly linked), so free runs are always
 *    whole: what CubeCL's coalesce would give, without its walk.
 *  - Free slices sit in size bins (CUBE__BIN_COUNT: four per power of two of
 *    the length). A reservation of e effective bytes takes the shortest that
 *    fits of a few slices of e's own bin, else the shortest of a few slices
 *    of the first non-empty bin above (each fits: a bitmap finds the bin),
 *    and only when there is none walks the rest of e's own bin before the
 *    pool adds a page. So a page is added only when no free run of any page
 *    fits, as before.
 *
 * The alternative weighed, an index of known-free slices rebuilt by the full
 * scan when nothing known fits, keeps the scan: a pool whose pages are full
 * of live slices would pay it on every hit whose slice was freed since the
 * last scan. Reuse order changes: the shortest of a few slices of the
 * tightest bin, not the lowest address; on bench_alloc_churn's traces no
 * row reserves more than with first fit, some less (docs/benchmarks.md). */
#define CUBE__BIN_COUNT 256u
/* Slices of a bin looked at: of the request's own before the bins above,
 * and of the first non-empty bin above. */
#define CUBE__BIN_SCAN 8u

typedef struct cube__bins {
  cube__slice_t* head[CUBE__BIN_COUNT];
  uint64_t map[CUBE__BIN_COUNT / 64]; /* bit set: that bin is not empty */
} cube__bins_t;

/* Counters of a sliced pool's reservations (tests and benches read them). */
typedef struct cube__pool_stats {
  uint64_t reserves;    /* cube__sliced_try_reserve calls */
  uint64_t visited;     /* free slices looked at by them */
  uint64_t max_visited; /* most by one of them */
  uint64_t drained;     /* releases taken from the queue */
  uint64_t merges;      /* free neighbours merged when a slice was freed */
  uint64_t lazy;        /* free slices found by a scan, not by the queue */
} cube__pool_stats_t;

/* Frees bound slice |s| of a sliced pool whose descriptor the owner has
 * taken over (unbound already) and merges it with its free neighbours
 * (page.c). */
void cube__page_free_slice(cube__page_t* page, cube__slice_t* s);

/* The free slice for |effective| bytes (see above), NULL when none fits;
 * adds the slices looked at to *visited (page.c). */
cube__slice_t* cube__bins_find(cube__pool_t* pool, uint64_t effective, uint64_t* visited);

/* Binds |m| to free slice |s| for |size| bytes with |padding|, splitting off
 * the rest (size + padding onwards) as a new free slice; out of bins first
 * when binned. Fails only when out of host memory (page.c). */
cube_status_t cube__page_bind_split(cube__page_t* page, cube__slice_t* s, uint64_t size,
                                    uint64_t padding, cube__memory_t* m);

/* Any thread: queues |m| (its count just marked pending) on |pool|. */
void cube__pool_notify(cube__pool_t* pool, cube__memory_t* m);
/* The owner: frees the slices of every queued release (sliced pools; no-op
 * for the others). */
void cube__pool_drain(cube__pool_t* pool);

typedef struct cube__bucket {
  uint64_t effective_size;
  cube__page_t* head; /* pages in creation order, linked by bucket_next */
  cube__page_t* tail;
} cube__bucket_t;

struct cube__pool {
  cube_pool_kind_t kind;
  uint64_t page_size;      /* sliced: page size */
  uint64_t max_alloc_size; /* sliced: max slice; exclusive: max alloc */
  uint64_t alignment;
  uint64_t dealloc_period; /* exclusive: 0 = never age implicitly */
  uint64_t last_check;     /* exclusive: alloc_nr of the last aging pass */
  double cur_avg_size;     /* exclusive: EMA of requested sizes */
  const cube__storage_ops_t* storage;
  cube__mm_t* mm;          /* written into descriptors bound here */

  cube__page_t** pages; /* creation order */
  uint32_t page_count;
  uint32_t page_cap;
  uint64_t pages_peak;
  uint64_t reserved; /* sum of storage sizes of |pages| */
  uint64_t failed_bytes; /* the storage size of the last page that could not be had */

  /* Planning (cube__mm_install): at most |cap| bytes reserved when capped,
   * enforced unless the manager measures; the most reserved at once since
   * the pool was made or its manager set measuring; a name for messages. */
  bool capped;
  bool cap_enforced;
  bool cap_hit; /* the last cube__pool_add_page failed on the cap */
  uint64_t cap;
  uint64_t peak_reserved;
  /* The most it would have held where the storage refused it a page and its
   * request took an exact-size buffer of the persistent pool instead
   * (cube__mm_reserve_into): reserved + the refused page. A plan caps the
   * pool at the larger of this and |peak_reserved|, so that under the plan
   * it asks for that page again (and is refused, and diverts, as measured)
   * rather than stopping at its cap. */
  uint64_t peak_wanted;
  uint32_t index; /* in its manager's report */
  char name[32];  /* "pool 3" unless installed with one */

  cube__bucket_t* buckets; /* persistent: sorted by effective_size */
  uint32_t bucket_count;
  uint32_t bucket_cap;

  /* Slice records merged away by a coalesce, kept for the next split (linked
   * by |next|; at most CUBE__POOL_SPARE_SLICES): a pool hit that splits a
   * page's free slice and merges it back later allocates nothing. */
  cube__slice_t* spare_slices;
  uint32_t spare_slice_count;

  /* Sliced: the release queue and the size bins (above; bins made with the
   * first page), and the counters. |unmerged|: free slices binned by a scan
   * without merging their neighbours since the last whole coalesce. */
  _Atomic(cube__memory_t*) released;
  cube__bins_t* bins;
  uint64_t unmerged;
  cube__pool_stats_t stats;
};

#define CUBE__POOL_SPARE_SLICES 64u

/* True when |page|'s free slices are kept in its pool's bins. */
static inline bool cube__page_binned(const cube__page_t* page) {
  return page->pool && page->pool->kind == CUBE_POOL_SLICED;
}

/* A fitted pool (docs/observability.md, "Memory that is not wasted"): an
 * exclusive pool whose page_size is a granule. Each page is one request's
 * storage, its size rounded up to the granule; a free page serves a later
 * request only if it wastes at most an eighth of it (or less than a
 * granule); page->free_count counts the idle passes (cube__mm_release_idle)
 * that found it free and unused since, 0 once bound. */
static inline bool cube__pool_fitted(const cube__pool_t* pool) {
  return pool->kind == CUBE_POOL_EXCLUSIVE && pool->page_size > 0;
}

/* Before a pool of |mm| adds a page of |bytes| for a request of |size|:
 * when |mm| has a fitted pool, gives back free fitted pages and wholly free
 * sliced pages (largest first) until the bytes reserved after the new page
 * are at most CUBE__MM_FIT_NUM / CUBE__MM_FIT_DEN of the bytes in use with
 * the request, or none is left to give (manager.c). */
void cube__mm_make_room(cube__mm_t* mm, uint64_t bytes, uint64_t size);

/* Takes a descriptor whose only reference left is the pool's (its slice
 * just freed by cube__slice_check_free: m->slice still points at it) for
 * reuse, unbinding it, or frees it (manager.c). */
void cube__mm_recycle(cube__mm_t* mm, cube__memory_t* m);

/* Records the release of slice |s| of descriptor |m| into |mm|'s event
 * ring (cube__mm_recycle while tracking is on). */
void cube__mm_track_release(cube__mm_t* mm, const cube__slice_t* s, cube__memory_t* m);

/* Every pool of |mm| in report order (dynamic pools, then the persistent
 * one) into |out| (capacity CUBE_MAX_POOLS); returns the count. */
uint32_t cube__mm_pool_list(cube__mm_t* mm, cube__pool_t** out);

/* |options| describes a sliced or exclusive pool; persistent pools use
 * cube__pool_init_persistent. */
void cube__pool_init(cube__pool_t* pool, const cube__pool_options_t* options, uint64_t alignment,
                     const cube__storage_ops_t* storage, cube__mm_t* mm);
void cube__pool_init_persistent(cube__pool_t* pool, uint64_t alignment,
                                const cube__storage_ops_t* storage, cube__mm_t* mm);
/* Detaches every bound descriptor and deallocates every page. */
void cube__pool_deinit(cube__pool_t* pool);

bool cube__pool_accept(const cube__pool_t* pool, uint64_t size);
/* Largest request the pool accepts (persistent: UINT64_MAX). */
uint64_t cube__pool_max_request(const cube__pool_t* pool);

/* Binds |m| to a free slice of the pool; *out_found false when none. */
cube_status_t cube__pool_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                     bool* out_found);
/* Allocates a new storage buffer for |size| and binds |m| in it. On failure
 * *out_storage_oom tells whether the storage reported OUT_OF_MEMORY (the
 * status is then the storage's own). */
cube_status_t cube__pool_alloc(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                               bool* out_storage_oom);

void cube__pool_usage(cube__pool_t* pool, cube_memory_usage_t* usage);
void cube__pool_report(cube__pool_t* pool, cube_pool_report_t* out);
void cube__pool_cleanup(cube__pool_t* pool, uint64_t alloc_nr, bool explicit_cleanup);

/* Persistent: a bucket for the effective size of |size| exists. */
bool cube__persistent_has_size(const cube__pool_t* pool, uint64_t size);

/* Shared helpers (pool.c). */
cube_status_t cube__pool_reserve_page_slot(cube__pool_t* pool);
/* Allocates |bytes| of storage and appends a page over it. Call
 * cube__pool_reserve_page_slot first. */
cube_status_t cube__pool_add_page(cube__pool_t* pool, uint64_t bytes, cube__page_t** out_page,
                                  bool* out_storage_oom);
/* Detaches the page's slices, deallocates its storage and frees it; the
 * caller takes it out of |pages|. */
void cube__pool_release_page(cube__pool_t* pool, cube__page_t* page);
/* Removes pages[i] (order kept) and releases it. */
void cube__pool_remove_page(cube__pool_t* pool, uint32_t index);

/* Per-kind implementations. */
cube_status_t cube__sliced_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                       bool* out_found);
cube_status_t cube__sliced_alloc(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                 bool* out_storage_oom);
void cube__sliced_cleanup(cube__pool_t* pool, bool explicit_cleanup);

cube_status_t cube__exclusive_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                          bool* out_found);
cube_status_t cube__exclusive_alloc(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                    bool* out_storage_oom);
void cube__exclusive_cleanup(cube__pool_t* pool, uint64_t alloc_nr, bool explicit_cleanup);

cube_status_t cube__persistent_try_reserve(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                           bool* out_found);
cube_status_t cube__persistent_alloc(cube__pool_t* pool, uint64_t size, cube__memory_t* m,
                                     bool* out_storage_oom);
void cube__persistent_cleanup(cube__pool_t* pool, bool explicit_cleanup);

#endif /* CUBE_MEMORY_POOL_INTERNAL_H_ */
