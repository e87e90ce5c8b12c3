/* cube/memory.h: memory accounting types, allocation modes and the memory
 * report that out-of-memory errors carry.
 *
 * Device memory is managed by pools (reference §4): sliced pages, exclusive
 * pages and a persistent pool, one set per logical stream. Counts below follow
 * CubeCL's MemoryUsage: number_allocs counts live slices, not device
 * allocations; bytes_reserved counts what the pools hold from the backend.
 */
/* The functions in this header are thread-safe. */
#ifndef CUBE_MEMORY_H_
#define CUBE_MEMORY_H_

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

typedef struct cube_memory_report {
  uint32_t pool_count;
  cube_pool_report_t pools[CUBE_MAX_POOLS];
  cube_memory_usage_t total;  /* sum over the pools above */
  uint64_t device_reserved;   /* reserved by every stream of the device */
  uint64_t memory_limit;      /* CUBE_MEMORY_LIMIT or the server option; 0 = none */
} cube_memory_report_t;

/* If |status| is an out-of-memory error, fills |out_requested| (bytes asked
 * for) and |out_report| (the pools of the stream that failed, at the time of
 * the failure; may be NULL) and returns true. Otherwise returns false. */
bool cube_status_oom_report(cube_status_t status, uint64_t* out_requested,
                            cube_memory_report_t* out_report);

/* Writes a human-readable usage line into |buf| (like CubeCL's Display:
 * in use, reserved, efficiency, padding overhead; sizes in binary units,
 * "1.50 MiB", as in every memory message). Returns |buf|. */
const char* cube_memory_usage_format(const cube_memory_usage_t* usage, char* buf,
                                     size_t buf_size);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_MEMORY_H_ */
