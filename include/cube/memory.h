/* cube/memory.h: memory accounting types, allocation modes and the memory
 * report that out-of-memory errors carry.
 *
 * Device memory is managed by pools (CubeCL's design): sliced pages, exclusive
 * pages and a persistent pool, one set per logical stream. Counts below follow
 * CubeCL's MemoryUsage: number_allocs counts live slices, not device
 * allocations; bytes_reserved counts what the pools hold from the backend.
 *
 * Extending these structs. cube_memory_report_t is an output struct with a
 * struct_size (cube/cube.h, "Struct sizes"). cube_memory_usage_t and
 * cube_pool_report_t have none: they are plain values that also live inside
 * other structs (each pool report holds a usage, the report holds an array
 * of pool reports and a total), where a struct_size of their own could not
 * say anything the outer struct_size does not, and would have to be kept
 * right in every copy. They are frozen: new figures go into new fields at the
 * end of cube_memory_report_t.
 *
 * Thread safety: the functions here are thread-safe.
 */
#ifndef CUBE_MEMORY_H_
#define CUBE_MEMORY_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube_memory_usage {
  uint64_t number_allocs;  /* live slices */
  uint64_t bytes_in_use;   /* sum of requested sizes of live slices */
  uint64_t bytes_padding;  /* alignment padding of live slices */
  uint64_t bytes_reserved; /* bytes the pools hold from the backend */
} cube_memory_usage_t;

typedef enum cube_allocation_mode_e {
  CUBE_ALLOCATION_AUTO = 0,       /* dynamic pools (default) */
  CUBE_ALLOCATION_PERSISTENT = 1, /* exact-size buffers that are kept (weights) */
} cube_allocation_mode_t;

typedef enum cube_pool_kind_e {
  CUBE_POOL_SLICED = 0,
  CUBE_POOL_EXCLUSIVE = 1,
  CUBE_POOL_PERSISTENT = 2,
} cube_pool_kind_t;

#define CUBE_MAX_POOLS 32

typedef struct cube_pool_report {
  cube_pool_kind_t kind;
  uint64_t page_size;          /* sliced: page size; exclusive: max alloc; persistent: 0 */
  uint64_t max_alloc_size;     /* largest request the pool accepts */
  uint64_t pages;              /* storage buffers held now */
  uint64_t pages_peak;         /* most storage buffers held at once */
  uint64_t largest_free_block; /* largest free slice in any page of the pool */
  cube_memory_usage_t usage;
} cube_pool_report_t;

/* Per-pool report of a stream (cube_client_memory_report), also carried by
 * out-of-memory statuses (cube_status_oom_report). An output struct: set
 * struct_size (0 = this header's layout) before the call. */
typedef struct cube_memory_report {
  size_t struct_size;
  uint32_t pool_count;
  cube_pool_report_t pools[CUBE_MAX_POOLS];
  cube_memory_usage_t total;  /* sum over the pools above */
  uint64_t device_reserved;   /* reserved by every stream of the device */
  uint64_t memory_limit;      /* CUBE_MEMORY_LIMIT or the server option; 0 = none */
} cube_memory_report_t;

/* If |status| is an out-of-memory error, writes |out_requested| (bytes asked
 * for; may be NULL) and |out_report| (the pools of the stream that failed, at
 * the time of the failure, all zero when the status carries none; may be
 * NULL) and returns true. |out_report| is written under the output-struct
 * rules (min(struct_size, library size) bytes; struct_size then says how
 * many); a struct_size smaller than the struct_size field leaves it as it
 * was. Returns false, writing nothing, for any other status (and for the
 * static status made when memory for a status itself ran out). */
bool cube_status_oom_report(cube_status_t status, uint64_t* out_requested,
                            cube_memory_report_t* out_report);

/* Writes a human-readable usage line into |buf| of |buf_size| bytes (like
 * CubeCL's Display: in use, reserved, efficiency, padding overhead; sizes in
 * binary units, "1.50 MiB", as in every memory message), truncated to fit,
 * and returns |buf| (NULL when |buf| is NULL; unchanged when buf_size is 0).
 * A NULL |usage| writes "(no memory usage)". */
const char* cube_memory_usage_format(const cube_memory_usage_t* usage, char* buf,
                                     size_t buf_size);


/* Memory snapshots, tags and the ledger (docs/observability.md) ------------ */

typedef struct cube_client_s cube_client_t; /* cube/client.h */

/* Allocation tracking: every allocation made while it is on is stamped with
 * its time and the calling thread's innermost tag, and allocations and
 * releases go into a ring of the device's most recent
 * CUBE_MEMORY_EVENT_RING events (older ones are dropped, and counted).
 * Off until this call, cube_memory_tag_push or cube_handle_set_tag turn it
 * on; then on until the process exits (off, the
 * allocation path pays one load and a branch for it). Thread-safe; cannot
 * fail. */
void cube_memory_tracking_enable(void);
#define CUBE_MEMORY_EVENT_RING 4096
/* Longest tag in bytes (without the NUL). */
#define CUBE_MEMORY_TAG_MAX 63

/* Opens a tag scope on the calling thread: allocations the thread makes
 * through any client until the matching pop carry |tag| (the innermost
 * scope wins; scopes nest up to 32 deep). The tag is copied (at most 4096
 * distinct tags per process). Turns tracking on. Fails with
 * INVALID_ARGUMENT (NULL client, NULL, empty or too long tag),
 * FAILED_PRECONDITION (32 scopes open, 4096 tags) or OUT_OF_MEMORY. The
 * stack is per thread: thread-safe. */
CUBE_MUST_USE_RESULT cube_status_t cube_memory_tag_push(cube_client_t* client, const char* tag);
/* Closes the calling thread's innermost tag scope, which must have been
 * opened with |client|: FAILED_PRECONDITION otherwise, or when none is
 * open. Pop a scope before releasing its client: no other client closes it,
 * and its tag stays on the thread's allocations. Thread-safe (the scopes
 * are the calling thread's). */
CUBE_MUST_USE_RESULT cube_status_t cube_memory_tag_pop(cube_client_t* client);

/* Writes a JSON snapshot of |client|'s device (the schema is
 * docs/schemas/memory-snapshot.schema.json): every stream's pools with
 * their pages and slices, every live allocation (size, stream, pool, age,
 * tag), bytes by tag, the recent allocation and release events and the
 * ledger (cube_client_memory_ledger). Taken after the calling stream's
 * queued work (as cube_client_memory_usage), each stream's pools under its
 * own lock, one stream after the other: streams other threads use at the
 * same time may move between two of them. Its totals are the figures of
 * cube_client_memory_usage_device at that moment.
 *
 * cube_client_memory_snapshot writes the file |path|, which must not exist
 * (created with O_EXCL | O_NOFOLLOW, mode 0600); cube_client_memory_snapshot_json
 * returns the document in *out_json, NUL-terminated, which the caller frees
 * with free(). Fail with INVALID_ARGUMENT (NULL arguments), the stream's
 * deferred errors (FAILED_PRECONDITION), OUT_OF_MEMORY (host memory), or
 * UNAVAILABLE naming the path and errno when the file cannot be created or
 * written (a partial file is removed). Thread-safe. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_snapshot(cube_client_t* client,
                                                               const char* path);
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_snapshot_json(cube_client_t* client,
                                                                    char** out_json);

/* What a device's memory is used by, against what its driver reports
 * (docs/observability.md, "The memory ledger"). Device bytes:
 *   pools + modules + collectives + context + unaccounted == driver_used
 * always holds (unaccounted is the signed remainder: negative when cube's
 * own figures exceed the driver's). |staging| is pinned host memory and is
 * not part of that sum: the driver does not count it as device memory.
 * Where the driver reports nothing (CPU, OpenCL), driver_reports is false,
 * driver_used is cube's own sum and unaccounted 0. An output struct: set
 * struct_size (0 = this header's layout) before the call. */
typedef struct cube_memory_ledger {
  size_t struct_size;
  bool driver_reports;  /* driver_used and driver_total are the driver's (CUDA: cuMemGetInfo) */
  uint64_t pools;       /* storage every stream's pools hold (cube_memory_report_t.device_reserved) */
  uint64_t staging;     /* pinned host memory of the staging pools (not device memory) */
  uint64_t modules;     /* loaded kernel modules (CUDA: the bytes of their images) */
  uint64_t collectives; /* device memory collectives hold outside the pools (cube: none) */
  uint64_t context;     /* used when the device was opened (its context and whatever else
                           was there then), plus the backend's own small device buffers */
  int64_t unaccounted;  /* driver_used - (pools + modules + collectives + context) */
  uint64_t driver_used; /* the whole device, every process */
  uint64_t driver_total;
} cube_memory_ledger_t;

/* Fills |out_ledger| for |client|'s device. INVALID_ARGUMENT for NULL
 * arguments or a struct_size smaller than its own field; the driver's
 * failure to report (CUDA) is that status, naming the call. Thread-safe. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_ledger(cube_client_t* client,
                                                             cube_memory_ledger_t* out_ledger);

/* Memory planning (docs/observability.md, "Memory planning") --------------- */

/* One pool of an installed configuration. */
typedef struct cube_pool_config {
  cube_pool_kind_t kind;   /* CUBE_POOL_SLICED or CUBE_POOL_EXCLUSIVE */
  uint64_t page_size;      /* sliced: bytes of each page (0 < page_size <= max_page_size);
                              exclusive: 0 (CubeCL's exclusive pool) or the granule of a
                              fitted pool (each buffer its own storage rounded up to it, a
                              free one reused within an eighth, given back when the pools
                              grow: docs/observability.md, "Memory that is not wasted") */
  uint64_t max_alloc_size; /* sliced: largest slice (<= page_size); exclusive: largest
                              request, a multiple of the alignment (0: a pool that takes
                              no request, as the default ladder's first; what
                              cube_client_memory_pools reads installs as it is) */
  uint64_t alignment;      /* of slices in a page; 0: the device's; else a power of two that
                              is a multiple of it */
  uint64_t dealloc_period; /* exclusive: allocations between aging passes x5; 0: never */
  bool capped;             /* at most |cap| bytes of pages (false: no cap); a cap is 0 (the
                              pool takes nothing) or at least one page (|page_size|, where
                              it is not 0) */
  uint64_t cap;
  char name[32];           /* for messages, NUL-terminated; "" : "pool <index>" */
} cube_pool_config_t;

/* The dynamic pools of every stream of a device, tried in order for each
 * request (the first that takes its size), and after them the persistent
 * pool (exact sizes, not configurable). An input and output struct: set
 * struct_size (0 = this header's layout). */
typedef struct cube_memory_pools {
  size_t struct_size;
  uint32_t pool_count; /* 1 .. CUBE_MAX_POOLS - 1 */
  cube_pool_config_t pools[CUBE_MAX_POOLS - 1];
} cube_memory_pools_t;

/* Installs |pools| on every stream of |client|'s device, present and
 * future (NULL: the default ladder again). A pool that is capped and full
 * makes a request it would take fail with OUT_OF_MEMORY naming the pool
 * and its cap (no other pool steps in). Refused with FAILED_PRECONDITION,
 * naming the stream and its live buffers, while any buffer of the device is
 * live (after an explicit cleanup); INVALID_ARGUMENT for a configuration
 * that cannot be (naming the pool and the field). Nothing changes on
 * failure. Thread-safe: streams are locked while the pools change. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_install(cube_client_t* client,
                                                              const cube_memory_pools_t* pools);
/* The configuration installed on |client|'s device now (the ladder when none
 * was), written into |out_pools| (an output struct: set struct_size, 0 = this
 * header's layout). INVALID_ARGUMENT for a NULL argument or a struct_size
 * smaller than its own field. Thread-safe. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_pools(cube_client_t* client,
                                                            cube_memory_pools_t* out_pools);
/* Measuring mode: _begin lifts the caps of every stream's pools and starts
 * each pool's peak afresh; _end restores the caps and writes the installed
 * configuration with every pool capped at its peak (the most bytes of pages
 * one stream's pool held at once since _begin, the largest over the
 * streams, not their sum: a cap bounds each stream's pool) into |out_plan| (may be
 * NULL), ready for cube_client_memory_install. Where the device refused a
 * pool a page while measuring (its memory or memory limit was short) and
 * the request took an exact-size buffer instead, the pool's peak counts the
 * page it asked for: under the plan it asks again and, refused the same
 * way, does what it did, where a cap at what it held would have failed the
 * request (the same workload runs under its plan). A second _begin restarts
 * the peaks; an install while measuring keeps the device measuring. _end
 * without _begin is FAILED_PRECONDITION; neither fails otherwise, past the
 * failures every client call shares (cube/client.h). Thread-safe. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_measure_begin(cube_client_t* client);
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_measure_end(cube_client_t* client,
                                                                  cube_memory_pools_t* out_plan);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_MEMORY_H_ */
