/* Memory management: managed-memory descriptors, pools and the manager that
 * picks a pool (CubeCL's MemoryManagement). Backend-neutral: storage comes from a
 * cube__storage_ops_t table.
 *
 * Threading: a manager (cube__mm_t) is not thread-safe; its owner (a stream)
 * serialises calls with its own lock. Descriptor reference counts are atomic
 * and may be dropped from any thread. For a slice of a sliced pool, the drop
 * that leaves only the pool's reference marks the count (CUBE__MEMORY_PENDING)
 * and pushes the descriptor onto that pool's release queue (lock-free); the
 * pool's owner takes the queue whole at its next reserve, usage, report or
 * cleanup and frees those slices into its size bins (pool_internal.h). The
 * other pool kinds discover such a descriptor lazily when they next scan, as
 * CubeCL does for every pool. Such a descriptor is nobody else's any more:
 * the manager keeps it (up to CUBE__MM_SPARE_DESCRIPTORS) and hands it out
 * again, re-initialised with a new id, by its next cube__mm_reserve, so a
 * pool hit allocates and frees no host memory.
 *
 * Differences from CubeCL, on purpose:
 *  - A descriptor points at its slice directly (no pool/page/slice indices),
 *    so cleanup that removes pages never invalidates a live binding (CubeCL
 *    issues #1384, #1401) and there is no 65,536-page wrap (#1617).
 *  - A failed storage allocation first runs an explicit cleanup and retries
 *    once (CubeCL HEAD #1468); out-of-memory errors carry a pool report.
 */
#ifndef CUBE_MEMORY_MEMORY_H_
#define CUBE_MEMORY_MEMORY_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cube/options.h"
#include "cube/memory.h"
#include "cube/status.h"

/* Storage ---------------------------------------------------------------- */

/* One buffer obtained from the backend. */
typedef struct cube__storage {
  uint64_t id;        /* unique per storage ops instance */
  void* ptr;          /* host pointer, or device address cast to a pointer */
  uint64_t size;
  void* backend_data; /* the backend's own bookkeeping */
} cube__storage_t;

typedef struct cube__storage_ops {
  void* self;
  uint64_t alignment; /* power of two */
  /* Must return CUBE_STATUS_OUT_OF_MEMORY (any message) when the device has
   * no room; other codes are passed through. */
  cube_status_t (*alloc)(void* self, uint64_t size, cube__storage_t* out);
  void (*dealloc)(void* self, const cube__storage_t* storage);
} cube__storage_ops_t;

/* Descriptors (CubeCL's ManagedMemoryHandle / Binding) --------------------- */

typedef struct cube__slice cube__slice_t; /* private to the pools */
typedef struct cube__mm cube__mm_t;

/* A descriptor's two reference counts share one atomic word, so that a
 * handle reference (both counts) is taken or dropped with one atomic
 * operation: bits 0-31 count every reference (handles, bindings, the pool's
 * slice), bits 32-63 the user handle references only (can_mut). */
#define CUBE__MEMORY_REF UINT64_C(1)
#define CUBE__MEMORY_HANDLE_REF ((UINT64_C(1) << 32) | UINT64_C(1))
/* Bit 31 of the refs: the descriptor is on its sliced pool's release queue
 * (set by the drop that left only the pool's reference, cleared by the pool's
 * owner when it takes the queue). Not a reference: cube__memory_refs masks
 * it; a pool scan treats a pending slice as not yet free. */
#define CUBE__MEMORY_PENDING (UINT64_C(1) << 31)

struct cube__pool;

typedef struct cube__memory {
  atomic_uint_fast64_t counts; /* refs (low 32 bits) and handle_refs (high 32) */
  uint64_t id;             /* process-unique */
  cube__slice_t* slice;    /* bound slice or NULL; changed only by the owning manager */
  /* Why the contents are not valid (memory/taint.h), NULL when they are:
   * set by the server on the device's runner, released when the descriptor
   * is recycled or freed. */
  _Atomic(struct cube__taint*) taint;
  cube__mm_t* mm;          /* manager owning the slice, NULL while unbound */
  void* owner;             /* free for the user of the module (the server's stream) */
  _Atomic(void*) last_use; /* the server's: the stream that used it last (device streams) */
  atomic_uint_fast64_t auto_tag; /* the server's: the held step of automatic capture that
                                    used it last (src/server/graph_auto.c), 0: none */
  struct cube__memory* next_spare; /* the manager's: its list of descriptors to reuse */
  /* The sliced pool to tell when the drop of a reference leaves only its own
   * (memory/pool_internal.h, "Release queue"): set by the bind before the
   * pool's reference is taken (release), cleared before it is dropped; NULL
   * for the other pool kinds and while unbound. */
  _Atomic(struct cube__pool*) notify;
  struct cube__memory* notify_next; /* link on that pool's release queue */
  /* Allocation tracking (memory/track.h): the tag (interned, NULL: none) and
   * the time of the allocation (cube__now_ns, 0: not recorded). Stamped by
   * the manager while tracking is on; the tag also by cube_handle_set_tag,
   * from any thread. The tag is stored with release and loaded with acquire,
   * so that a snapshot on another thread sees the interned text whole. */
  _Atomic(const char*) tag;
  uint64_t born_ns;
  bool external; /* memory cube did not allocate (cube__memory_create_external) */
  /* The contents a recovery of the device restores (a restorable buffer:
   * cube_client_checkpoint, cube_client_create_restorable), NULL when none:
   * replaced as a whole by the server, freed when the descriptor is
   * recycled or freed. */
  _Atomic(struct cube__keep*) keep;
} cube__memory_t;

/* A host copy of a buffer's contents: |size| bytes (the slice's requested
 * size), taken at one point of its device's order. */
typedef struct cube__keep {
  uint64_t size;
  unsigned char data[];
} cube__keep_t;

/* Replaces |m|'s host copy by |k| (taken over; NULL drops it) and frees the
 * old one. Called in the device's order (the runner, or a caller with the
 * device to itself) or by whoever frees the descriptor. */
void cube__memory_set_keep(cube__memory_t* m, cube__keep_t* k);

/* Copies |len| bytes at |offset| of |m|'s host copy into |out|: 0 done, -1
 * no copy, 1 the range passes the copy's size (*out_size, set with 1 and 0).
 * Thread-safe against a replacement of the copy. */
int cube__memory_copy_keep(cube__memory_t* m, uint64_t offset, uint64_t len, void* out,
                           uint64_t* out_size);

/* A new unbound descriptor with refs = 1, handle_refs = 1 (one handle). NULL
 * when out of host memory. */
cube__memory_t* cube__memory_create(void);

/* Takes |count| consecutive process-unique descriptor ids; returns the first. */
uint64_t cube__memory_take_ids(uint64_t count);

/* The two counts (for tests and checks; a snapshot). */
static inline uint32_t cube__memory_refs(const cube__memory_t* m) {
  return (uint32_t)(atomic_load_explicit(&((cube__memory_t*)m)->counts, memory_order_acquire) &
                    (CUBE__MEMORY_PENDING - 1));
}
static inline uint32_t cube__memory_handle_refs(const cube__memory_t* m) {
  return (uint32_t)(atomic_load_explicit(&((cube__memory_t*)m)->counts, memory_order_acquire) >>
                    32);
}

/* Binding references (keep the slice alive; do not affect can_mut). */
void cube__memory_ref(cube__memory_t* m);
void cube__memory_unref(cube__memory_t* m); /* frees the descriptor at 0 */

/* Handle references (a clone of a handle): refs and handle_refs together. */
void cube__memory_handle_ref(cube__memory_t* m);
void cube__memory_handle_unref(cube__memory_t* m);
/* Turns the caller's handle reference into a binding reference (handle_refs
 * - 1, refs unchanged). */
void cube__memory_handle_to_binding(cube__memory_t* m);

/* handle_refs <= 1 (CubeCL: strong count <= 2, the pool's copy included). */
bool cube__memory_can_mut(const cube__memory_t* m);

/* Only the pool still references the descriptor. */
bool cube__memory_is_free(const cube__memory_t* m);

/* The bound storage, the byte offset of the slice inside it and the slice's
 * requested size. False when unbound. Safe from any thread while the caller
 * holds a reference (a bound slice's fields never change). */
bool cube__memory_resolve(const cube__memory_t* m, const cube__storage_t** out_storage,
                          uint64_t* out_offset, uint64_t* out_size);

/* External memory ---------------------------------------------------------
 *
 * Memory that someone else allocated and owns (a DLPack tensor of another
 * library), seen by the layers above as a bound descriptor like any other:
 * it resolves to a storage of its own, in no pool and no manager, so memory
 * usage, cleanup and the pools never see it. Its life is its references:
 * when the last one goes (a handle, a binding of queued work, a resource, a
 * graph, a hold), |release|(user) runs once, on the thread that dropped it,
 * and the descriptor frees itself. */
typedef void (*cube__external_release_fn)(void* user);

/* A new descriptor over |storage| (copied: ptr, size and backend_data are the
 * backend's view of the memory; its id is replaced by a process-unique one)
 * with refs 1 and handle_refs 1 (the caller's handle reference), resolving
 * to offset 0 and |storage->size| bytes. NULL when out of host memory: then
 * |release| does not run. Thread-safe. */
cube__memory_t* cube__memory_create_external(const cube__storage_t* storage,
                                             cube__external_release_fn release, void* user);
/* Drops the release of external |m| (its creator failed to hand it out and
 * still owns the memory): the last reference then only frees the
 * descriptor. Only before |m| was shared. */
void cube__memory_external_forget(cube__memory_t* m);

/* Manager configuration (docs/cubecl.md, "Memory: the page ladder and configuration") ---- */

typedef struct cube__pool_options {
  cube_pool_kind_t kind;   /* CUBE_POOL_SLICED or CUBE_POOL_EXCLUSIVE */
  uint64_t page_size;      /* sliced: page size; exclusive: 0 (CubeCL's pool) or the granule
                              of a fitted pool (pool_internal.h, cube__pool_fitted) */
  uint64_t max_alloc_size; /* sliced: max slice size; exclusive: max_alloc_size */
  uint64_t dealloc_period; /* exclusive: allocations between aging checks x5; 0 = never */
  /* Installed configurations (cube_client_memory_install) only; zero in the
   * ladders. */
  uint64_t alignment; /* of slices inside a page; 0: the storage's */
  bool capped;        /* the pool reserves at most |cap| bytes of storage */
  uint64_t cap;
  char name[32];      /* "" : "pool <index>" */
} cube__pool_options_t;

typedef enum cube__persistent_policy_e {
  CUBE__PERSISTENT_ENABLED = 0,  /* initial Auto, mode changes honoured */
  CUBE__PERSISTENT_DISABLED = 1, /* always Auto */
  CUBE__PERSISTENT_ENFORCED = 2, /* always Persistent */
} cube__persistent_policy_t;

typedef struct cube__mm_options {
  const char* name;                   /* "device memory", "pinned host memory" */
  cube_memory_config_t config;        /* FITTED, SUBSLICES or EXCLUSIVE_PAGES ladder ... */
  const cube__pool_options_t* custom; /* ... or these pools, in order, when non-NULL */
  uint32_t custom_count;
  uint64_t max_page_size;             /* device property */
  uint64_t granule;                   /* FITTED: storage sizes are rounded up to it (0: the
                                         alignment) */
  cube__persistent_policy_t persistent;
  cube_allocation_mode_t mode;        /* initial mode */
} cube__mm_options_t;

/* Fills |out| (capacity CUBE_MAX_POOLS) with the pools of |config| for
 * |max_page_size|, |alignment| and (FITTED) |granule|, and returns their
 * count (docs/cubecl.md, "Memory: the page ladder and configuration";
 * SubSlices: zero-size exclusive pool, ladder smallest page first, tail
 * pool; ExclusivePages: 24 log-spaced buckets 32 KiB..max_page; Fitted:
 * zero-size pool, 2 MiB sliced pages for requests up to 1 MiB, a fitted
 * exclusive pool of granule |granule| up to max_page: docs/observability.md,
 * "Memory that is not wasted"). */
uint32_t cube__pool_ladder(cube_memory_config_t config, uint64_t max_page_size,
                           uint64_t alignment, uint64_t granule, cube__pool_options_t* out);

/* The manager ------------------------------------------------------------- */

cube_status_t cube__mm_create(const cube__mm_options_t* options, const cube__storage_ops_t* storage,
                              cube__mm_t** out_mm);

/* Deallocates every storage buffer. Descriptors still bound are detached
 * (slice = NULL, the pool's reference dropped) and fail to resolve. */
void cube__mm_destroy(cube__mm_t* mm);

/* Reserves |size| bytes and returns a new descriptor bound to them with
 * refs = 2 (caller + pool) and handle_refs = 1 (as CubeCL's MemoryManagement::reserve). The
 * descriptor is a recycled one when the manager has one (see the top). */
cube_status_t cube__mm_reserve(cube__mm_t* mm, uint64_t size, cube__memory_t** out_memory);

/* Out of memory, cube__mm_reserve and cube__mm_reserve_bind fail with an
 * OUT_OF_MEMORY status that carries |size| (cube_status_oom_report's
 * requested bytes) and the pools' report, and reads
 *   "<name>: <size> requested: <why>"
 * followed by one line per pool ("\n  pool <i> <kind> (...): ..."), sizes in
 * the binary units of cube__format_bytes. cube__mm_oom_locate turns such a
 * status (consumed) of |mm| into the caller's:
 *   "<what>: out of memory: <size> of <name> requested on <where>: <why>"
 * and the pool lines, e.g. "cube_client_empty: out of memory: 95.37 MiB
 * (100000000 bytes) of device memory requested on cpu:0 stream 0: ...".
 * Any other status is annotated with
 * "<what>: on <where>". */
cube_status_t cube__mm_oom_locate(const cube__mm_t* mm, cube_status_t status, const char* what,
                                  const char* where);

/* Reserves |size| bytes and binds them to the client-created, unbound |m|
 * (takes the pool's reference on it). CubeCL's initialize_memory. */
cube_status_t cube__mm_reserve_bind(cube__mm_t* mm, uint64_t size, cube__memory_t* m);

void cube__mm_set_mode(cube__mm_t* mm, cube_allocation_mode_t mode); /* policy permitting */
cube_allocation_mode_t cube__mm_mode(const cube__mm_t* mm);

/* Usage over every pool (docs/cubecl.md, "Client: memory_usage,
 * memory_cleanup"); scans for free slices first. */
void cube__mm_usage(cube__mm_t* mm, cube_memory_usage_t* out_usage);

/* Per-pool report (total filled; device_reserved and memory_limit left 0). */
void cube__mm_report(cube__mm_t* mm, cube_memory_report_t* out_report);

/* Cleanup (docs/cubecl.md, "Memory: cleanup"): explicit frees fully free
 * sliced pages, free exclusive pages and free persistent slices; implicit
 * only ages exclusive pages. */
void cube__mm_cleanup(cube__mm_t* mm, bool explicit_cleanup);

/* Gives back the pages of fitted pools that stayed free and unused since
 * the previous call (the server calls it at each sync): a buffer released
 * for good is gone after two syncs, one that a loop reuses between syncs
 * stays. Returns the bytes given back. */
uint64_t cube__mm_release_idle(cube__mm_t* mm);

/* Replaces the storage ops (same alignment required), e.g. when the pools
 * outlive the object their ops pointed at. */
void cube__mm_rebind_storage(cube__mm_t* mm, const cube__storage_ops_t* storage);

/* Recovery of a lost device (src/server/recover.c) ------------------------ */

/* For every page of |mm| (free pages included: an explicit cleanup first
 * gives those back), |renew|(user, storage) replaces the page's storage by
 * memory of the device's new context in place (ptr and backend_data; id and
 * size stay), and then |live|(user, m) runs for each descriptor bound to a
 * slice of it. A failed |renew| stops the walk and is returned (the pages
 * after it keep their old storage). */
typedef cube_status_t (*cube__mm_renew_fn)(void* user, cube__storage_t* storage);
typedef void (*cube__mm_live_fn)(void* user, cube__memory_t* m);
cube_status_t cube__mm_renew(cube__mm_t* mm, cube__mm_renew_fn renew, cube__mm_live_fn live,
                             void* user);

/* Bytes currently held from storage (sum of page sizes). */
uint64_t cube__mm_reserved_bytes(const cube__mm_t* mm);

/* Planning (docs/observability.md, "Memory planning") --------------------- */

/* Checks |count| pools for a manager |name| whose storage aligns to
 * |alignment|, as cube__mm_create and cube__mm_install do: INVALID_ARGUMENT
 * naming the pool and the field (count outside 1..CUBE_MAX_POOLS - 1, a
 * kind, an alignment that is no power of two multiple of |alignment|, an
 * exclusive pool's max_alloc_size off the alignment, a name without its
 * NUL). Pure and thread-safe. */
cube_status_t cube__mm_check_pools(const char* name, const cube__pool_options_t* pools,
                                   uint32_t count, uint64_t alignment);

/* Replaces the dynamic pools with |pools| (|count| of them; NULL: the
 * ladder of the options the manager was created with). FAILED_PRECONDITION
 * naming the live buffers when any is left after an explicit cleanup (the
 * persistent pool's included); INVALID_ARGUMENT for a pool that cannot be
 * (checked as cube__mm_create does, plus alignment and caps). The manager
 * is unchanged on failure. */
cube_status_t cube__mm_install(cube__mm_t* mm, const cube__pool_options_t* pools, uint32_t count);

/* Measuring mode: caps are not enforced, and every pool's peak restarts at
 * what it holds now. */
void cube__mm_set_measuring(cube__mm_t* mm, bool measuring);

/* The dynamic pools' options (|out| of CUBE_MAX_POOLS - 1), with cap and
 * capped as installed, and each pool's peak of reserved bytes since the
 * manager was made, installed or set measuring, in |out_peaks| (may be
 * NULL): the most it held, or would have held where the storage refused it
 * a page and the request took an exact-size buffer instead. Returns the
 * count. */
uint32_t cube__mm_pools(const cube__mm_t* mm, cube__pool_options_t* out, uint64_t* out_peaks);

/* Tracking (memory/track.h): events of this manager go into |ring| (NULL:
 * none), naming stream |stream_id|. */
struct cube__mem_ring;
void cube__mm_set_ring(cube__mm_t* mm, struct cube__mem_ring* ring, uint64_t stream_id);

/* The manager's name ("device memory"). */
const char* cube__mm_name(const cube__mm_t* mm);

/* Snapshots (memory/snapshot.c) ------------------------------------------- */

/* Bytes and count of live allocations per tag. */
typedef struct cube__tag_total {
  const char* tag; /* interned; NULL: untagged */
  uint64_t bytes;  /* requested sizes */
  uint64_t count;
} cube__tag_total_t;

/* Adds |mm|'s live allocations to |totals| (|*count| entries used of
 * |cap| >= 2): a tag not there yet takes a new entry, and once only one is
 * left, tags without an entry share that last one, tagged "(other tags)". */
void cube__mm_tag_totals(cube__mm_t* mm, cube__tag_total_t* totals, uint32_t* count, uint32_t cap);

/* Sorts |totals| by bytes, largest first. */
void cube__tag_totals_sort(cube__tag_total_t* totals, uint32_t count);

/* Appends |mm|'s pools (with their pages and slices) to the cJSON array
 * |pools| and its live allocations to |allocations| (cJSON*; void* here so
 * that this header needs no cJSON), for stream |stream_id|, ages against
 * |now_ns|. Scans for free slices first (as cube__mm_usage), so that the
 * figures equal cube__mm_usage's. False when host memory ran out. */
bool cube__mm_snapshot(cube__mm_t* mm, uint64_t stream_id, uint64_t now_ns, void* pools,
                       void* allocations);

#endif /* CUBE_MEMORY_MEMORY_H_ */
