/* The kernel cache's storage: a process-wide key -> artifact map in memory and
 * a directory of integrity-checked blobs on disk.
 *
 * Disk entry layout: "CUBEKC01" magic, u32 format version, u64 payload length,
 * u64 XXH3-64 of the payload, then the payload. Written to a temporary file in
 * the same directory, fsync'd, then rename()d into place: readers never see a
 * partial entry, and two processes storing the same key both succeed. A file
 * whose header, length or checksum is wrong counts as corrupt: it is deleted
 * and the caller rebuilds. An entry that another user could have written (a
 * link, a file of another owner, one its group or others may write) is not
 * read (platform/private_file.h): one line on stderr, a miss, and the
 * caller's store replaces it.
 *
 * Thread-safe.
 */
#ifndef CUBE_KERNEL_CACHE_H_
#define CUBE_KERNEL_CACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/cache.h"

typedef struct cube__cache_key {
  uint64_t hi, lo; /* XXH3-128 */
} cube__cache_key_t;

/* Hashes the parts of a key (NULL-terminated list of strings, each hashed
 * with its length so that ("ab","c") != ("a","bc")). */
cube__cache_key_t cube__cache_key(const char* const* parts);
/* 32 hex digits + NUL. */
void cube__cache_key_hex(cube__cache_key_t key, char out[33]);

/* Disk: |kind| is a file suffix ("so", "cubin", "clbin"). Load returns
 * NOT_FOUND on a miss (and on a corrupt entry, which it deletes and counts,
 * and on an entry it does not trust, which it leaves for the store);
 * the payload is malloc'd for the caller. Store never fails the caller's
 * operation for want of a writable directory: it returns the reason, which
 * the caller may ignore. */
cube_status_t cube__cache_disk_load(cube__cache_key_t key, const char* kind, void** out_data,
                                    size_t* out_size);
cube_status_t cube__cache_disk_store(cube__cache_key_t key, const char* kind, const void* data,
                                     size_t size);

/* Where the entry of |key| and |kind| lives ("<dir>/v1/<hex>.<kind>"), for
 * tools and tests. UNAVAILABLE when the disk cache is off. */
cube_status_t cube__cache_entry_path(cube__cache_key_t key, const char* kind, char* out,
                                     size_t size);
/* Deletes the entry of |key| and |kind| and counts it as corrupt: for a caller
 * that found a well-formed entry unusable (e.g. a shared object that does not
 * load). */
void cube__cache_disk_discard(cube__cache_key_t key, const char* kind);

/* Memory: an artifact (e.g. a loaded module) per key, owned by the cache;
 * |destroy| runs at cube__cache_shutdown (cube_kernel_cache_clear keeps
 * loaded artifacts). */
void* cube__cache_memory_get(cube__cache_key_t key);
/* Inserts unless present; returns the artifact now in the cache (the
 * existing one if another thread won, then |artifact| is destroyed). */
void* cube__cache_memory_put(cube__cache_key_t key, void* artifact, void (*destroy)(void*));

/* Counters. */
void cube__cache_count_memory_hit(void);
void cube__cache_count_disk_hit(uint64_t load_ns);
void cube__cache_count_miss(uint64_t compile_ns, bool failed);

/* cube_shutdown: destroys the memory map (every artifact's |destroy| runs;
 * the CPU backend's modules are only retired, never unloaded, so functions
 * taken from them stay callable) and frees the cache's strings
 * (cube_kernel_cache_dir results). The cache stays usable: later calls start
 * with an empty map. */
void cube__cache_shutdown(void);
/* The memory map's part of cube__cache_shutdown: empties it, bumps the
 * generation, then runs every artifact's |destroy| outside the lock. */
void cube__cache_memory_clear(void);
/* Bumped by every cube__cache_shutdown: a holder of a function taken from a
 * cached artifact can tell that it went away. */
uint64_t cube__cache_generation(void);

#endif /* CUBE_KERNEL_CACHE_H_ */
