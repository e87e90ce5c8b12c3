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

#ifdef __cplusplus
}
#endif

#endif /* CUBE_MEMORY_H_ */
