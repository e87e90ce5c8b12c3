/* The kernel cache's storage: a process-wide key -> artifact map in memory and
 * a directory of integrity-checked blobs on disk.
 *
 * Disk entry layout (kernel/cache_internal.h): "CUBEKC02" magic, u32 format
 * version, u32 metadata length, u64 payload length, u64 XXH3-64 of metadata
 * and payload, the metadata ("key=value" lines), the payload. Written to a temporary file in
 * the same directory, fsync'd, then rename()d into place: readers never see a
 * partial entry, and two processes storing the same key both succeed. A file
 * whose header, length or checksum is wrong counts as corrupt: it is deleted
 * and the caller rebuilds. An entry that another user could have written (a
 * link, a file of another owner, one its group or others may write) is not
 * read (platform/private_file.h): one line on stderr, a miss, and the
 * caller's store replaces it. A load marks the entry used (its modification
 * time), the clock of the least recently used eviction that keeps the
 * directory within CUBE_CACHE_MAX.
 *
 * Thread-safe.
 */
#ifndef CUBE_KERNEL_CACHE_H_
#define CUBE_KERNEL_CACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace/trace.h" /* compile watches (cube__compile_watch_*) */
#include "cube/cache.h"

typedef struct cube__cache_key {
  uint64_t hi, lo; /* XXH3-128 */
} cube__cache_key_t;

/* Hashes the parts of a key (NULL-terminated list of strings, each hashed
 * with its length so that ("ab","c") != ("a","bc")). */
cube__cache_key_t cube__cache_key(const char* const* parts);
/* 32 hex digits + NUL. */
void cube__cache_key_hex(cube__cache_key_t key, char out[33]);

/* What an entry says about itself (cube cache list, bundles, prune): the
 * kernel or operation it holds, the backend and the device identity it was
 * made for. The library's version is added by the store. Strings are
 * borrowed for the call; a newline in one is stored as a space. */
typedef struct cube__cache_meta {
  const char* name;    /* kernel name, or a tuned operation's name */
  const char* backend; /* "cpu", "opencl", "cuda" */
  const char* device;  /* the device identity (cube_client_device_identity) */
} cube__cache_meta_t;

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
/* As cube__cache_disk_store, with the entry's metadata (NULL: none). */
cube_status_t cube__cache_disk_store_meta(cube__cache_key_t key, const char* kind,
                                          const cube__cache_meta_t* meta, const void* data,
                                          size_t size);

/* A lock of |key| shared by every process using the cache directory (an
 * flock on "<dir>/v2/locks/<hex>", created O_EXCL|O_NOFOLLOW 0600 or opened
 * after checking it is ours): held while one process tunes a key, or builds
 * an OpenCL unit, so that another waits and then finds the result. Blocks.
 * UNAVAILABLE when the disk cache is off or its directory is unusable (the
 * caller goes on without). */
typedef struct cube__cache_lock {
  int fd;
} cube__cache_lock_t;
cube_status_t cube__cache_lock(cube__cache_key_t key, cube__cache_lock_t* out);
void cube__cache_unlock(cube__cache_lock_t* lock);

/* Where the entry of |key| and |kind| lives ("<dir>/v2/<hex>.<kind>"), for
 * tools and tests. UNAVAILABLE when the disk cache is off. */
cube_status_t cube__cache_entry_path(cube__cache_key_t key, const char* kind, char* out,
                                     size_t size);
/* Deletes the entry of |key| and |kind| and counts it as corrupt: for a caller
 * that found a well-formed entry unusable (e.g. a shared object that does not
 * load). */
void cube__cache_disk_discard(cube__cache_key_t key, const char* kind);

/* Bundles (cube/bundle.h; cache_bundle.c). What a bundle's header says. */
typedef struct cube__bundle_head {
  char version[32];
  char backend[16];
  char device[512];
  uint64_t entries, kernels, tunings, bytes;
} cube__bundle_head_t;

/* Writes the entries of the cache directory whose metadata names this cube
 * version and |device| (made on |backend|) into the bundle |path|.
 * FAILED_PRECONDITION when there is none. */
cube_status_t cube__bundle_export(const char* path, const char* backend, const char* device,
                                  cube__bundle_head_t* out_head);
/* Checks the bundle |path| (file, format, checksum) and fills |out_head|;
 * with |device| (may be NULL: describe only) also refuses another cube
 * version or another device, then stores every entry. */
cube_status_t cube__bundle_import(const char* path, const char* device,
                                  cube__bundle_head_t* out_head);

/* Memory: an artifact (e.g. a loaded module) per key, owned by the cache;
 * |destroy| runs at cube__cache_shutdown (cube_kernel_cache_clear keeps
 * loaded artifacts). */
void* cube__cache_memory_get(cube__cache_key_t key);
/* Inserts unless present; returns the artifact now in the cache (the
 * existing one if another thread won, then |artifact| is destroyed). */
void* cube__cache_memory_put(cube__cache_key_t key, void* artifact, void (*destroy)(void*));

/* What the kernel cache did for the compiles made on the calling thread
 * between cube__cache_outcome_begin and _end (execution overrides count
 * kernels compiled and loaded with it). The counting functions below add to
 * the calling thread's record when one is open. */
typedef struct cube__cache_outcome {
  uint32_t memory_hits, disk_hits, misses, failures;
} cube__cache_outcome_t;
void cube__cache_outcome_begin(cube__cache_outcome_t* record);
void cube__cache_outcome_end(void);

/* Counters. */
void cube__cache_count_memory_hit(void);
/* A disk hit of |kernel| whose load started at |start_ns| and took
 * |load_ns| (also a "cache load" record on the trace). */
void cube__cache_count_disk_hit(const char* kernel, uint64_t start_ns, uint64_t load_ns);
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
