/* What the files of the kernel cache share (cache.c: keys, the entry format,
 * load and store; cache_manage.c: walks, stats, list, prune, eviction;
 * cache_bundle.c: bundles). Not for the rest of the library: it goes through
 * kernel/cache.h.
 *
 * Disk entry, format 2 ("CUBEKC02"), all integers little-endian:
 *   0  magic "CUBEKC02"
 *   8  u32 format version (2)
 *  12  u32 metadata length M
 *  16  u64 payload length N
 *  24  u64 XXH3-64 of the M + N bytes that follow
 *  32  metadata: "key=value\n" lines (cube, backend, device, name), then
 *  32+M the payload.
 */
#ifndef CUBE_KERNEL_CACHE_INTERNAL_H_
#define CUBE_KERNEL_CACHE_INTERNAL_H_

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kernel/cache.h"

#define CUBE__KC_MAGIC "CUBEKC02"
#define CUBE__KC_FORMAT_VERSION 2u
#define CUBE__KC_SUBDIR "v2"   /* bumped with the format */
#define CUBE__KC_LOCKDIR "locks" /* <dir>/v2/locks: lock files of tunings */
#define CUBE__KC_HEADER_SIZE 32
#define CUBE__KC_MAX_KIND 15
#define CUBE__KC_MAX_META 4096

typedef struct cube__kc_dir {
  bool off;
  bool shared_tmp; /* the /tmp fallback: must be ours (not planted by another user) */
  char path[PATH_MAX];
} cube__kc_dir_t;

/* The directory from CUBE_CACHE_DIR / XDG_CACHE_HOME / HOME (not created). */
cube_status_t cube__kc_dir_resolve(cube__kc_dir_t* d);
/* "<dir>/v2" into |out|. */
cube_status_t cube__kc_subdir(const cube__kc_dir_t* d, char* out, size_t size);
/* mkdir -p with mode 0700 for the directories it creates. */
cube_status_t cube__kc_mkdirs(const char* path);
/* The path of the entry of (|key|, |kind|) in |d| (cache_dir.c). */
cube_status_t cube__kc_entry_path(const cube__kc_dir_t* d, cube__cache_key_t key, const char* kind,
                                  char* out, size_t size);
/* A store into |d| failed with |failure| (borrowed): the directory is
 * reported unusable, once, on stderr and by cube_kernel_cache_dir_status;
 * cube__kc_report_ok: a store there succeeded again. */
void cube__kc_report(const cube__kc_dir_t* d, cube_status_t failure);
void cube__kc_report_ok(const cube__kc_dir_t* d);
/* Frees the strings cube_kernel_cache_dir handed out (cube__cache_shutdown). */
void cube__kc_dir_shutdown(void);
/* The /tmp fallback must be a private directory of this user. */
cube_status_t cube__kc_check_private(const cube__kc_dir_t* d);
bool cube__kc_kind_ok(const char* kind);
/* An entry file name: 32 hex digits, '.', a kind. */
bool cube__kc_is_entry_name(const char* name);
/* A temporary file of a store: ".<32 hex>.<kind>.XXXXXX". */
bool cube__kc_is_temp_name(const char* name);
/* Parses 32 hex digits into a key. */
bool cube__kc_key_from_hex(const char* hex, cube__cache_key_t* out);

/* Whether an opened file may be read: a regular file of this user that
 * neither the group nor others may write. Fills |why| otherwise. */
bool cube__kc_file_trusted(const struct stat* st, char* why, size_t why_size);

size_t cube__kc_read_full(int fd, void* buf, size_t size);
bool cube__kc_write_full(int fd, const void* buf, size_t size);
void cube__kc_put_u32(unsigned char* p, uint32_t v);
void cube__kc_put_u64(unsigned char* p, uint64_t v);
uint32_t cube__kc_get_u32(const unsigned char* p);
uint64_t cube__kc_get_u64(const unsigned char* p);

/* The metadata text of |meta| (and this library's version) into |out|;
 * its length, 0 when |meta| is NULL. */
size_t cube__kc_meta_format(const cube__cache_meta_t* meta, char* out, size_t size);
/* The value of |key| in metadata text |meta| (|len| bytes) into |out| ("" when
 * absent). */
void cube__kc_meta_get(const char* meta, size_t len, const char* key, char* out, size_t size);

/* A whole entry read from an open file |fd| (|st| its fstat): metadata and
 * payload, malloc'd (NUL-terminated metadata). With |verify| the checksum is
 * checked and the payload read; without, only the header and the metadata
 * are (for listings). Returns false with |why| for a malformed entry. */
typedef struct cube__kc_entry {
  uint32_t version;
  char* meta;
  size_t meta_len;
  void* payload;
  size_t payload_len;
} cube__kc_entry_t;
bool cube__kc_entry_read(int fd, uint64_t file_size, bool verify, cube__kc_entry_t* out,
                         char* why, size_t why_size);
void cube__kc_entry_free(cube__kc_entry_t* e);

/* Writes an entry (header, |meta_len| bytes of metadata, payload) into the
 * directory of |d| atomically as "<hex>.<kind>" (temporary file, fsync,
 * rename), then evicts least recently used entries beyond CUBE_CACHE_MAX. */
cube_status_t cube__kc_store_raw(const cube__kc_dir_t* d, cube__cache_key_t key,
                                 const char* kind, const char* meta, size_t meta_len,
                                 const void* data, size_t size);

/* A store in two steps, for bundles (all entries or none): cube__kc_stage
 * writes the entry into a temporary file of the directory (fsync'd),
 * cube__kc_commit renames it into place, cube__kc_unstage deletes it. A
 * failed stage or commit leaves no temporary file. */
typedef struct cube__kc_staged {
  char tmp[PATH_MAX];  /* "" once committed or removed */
  char path[PATH_MAX];
} cube__kc_staged_t;
cube_status_t cube__kc_stage(const cube__kc_dir_t* d, cube__cache_key_t key, const char* kind,
                             const char* meta, size_t meta_len, const void* data, size_t size,
                             cube__kc_staged_t* out);
cube_status_t cube__kc_commit(cube__kc_staged_t* s);
void cube__kc_unstage(cube__kc_staged_t* s);

/* Deletes least recently used entries of |d| (oldest modification time
 * first: a load marks an entry used) until their bytes are at most
 * |max_bytes|; |keep| (a file name, may be NULL) is never deleted. Counts
 * what it deleted into |out_removed| / |out_bytes| (may be NULL). */
cube_status_t cube__kc_evict(const cube__kc_dir_t* d, uint64_t max_bytes, const char* keep,
                             uint64_t* out_removed, uint64_t* out_bytes);

/* Counters reset by cube_kernel_cache_clear. */
void cube__kc_counters_reset(void);
void cube__kc_counters_read(cube_kernel_cache_stats_t* s);

#endif /* CUBE_KERNEL_CACHE_INTERNAL_H_ */
