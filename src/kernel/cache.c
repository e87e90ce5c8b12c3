/* The kernel cache: XXH3-128 keys, integrity-checked disk entries written
 * atomically (temp file + fsync + rename), the locks of tunings and the
 * counters of cube/cache.h; the directory (where it is, entry names, which
 * files may be read, whether it can be used) is cache_dir.c, the
 * process-wide key -> artifact map cache_memory.c, walks, stats, listing,
 * pruning and eviction cache_manage.c, bundles cache_bundle.c. */
#include "kernel/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "base/abi.h"
#include "base/fault.h"
#include "base/options.h"
#include "base/status.h"
#include "platform/private_file.h"
#include "cube/cube.h"
#include "kernel/cache_internal.h"
#include "kernel/compile_limit.h"

/* Counters -------------------------------------------------------------- */

static atomic_uint_fast64_t cube__kc_memory_hits;
static atomic_uint_fast64_t cube__kc_disk_hits;
static atomic_uint_fast64_t cube__kc_misses;
static atomic_uint_fast64_t cube__kc_compile_failures;
static atomic_uint_fast64_t cube__kc_corrupt;
static atomic_uint_fast64_t cube__kc_compile_ns;
static atomic_uint_fast64_t cube__kc_load_ns;

static void cube__kc_add(atomic_uint_fast64_t* c, uint64_t v) {
  atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}
static uint64_t cube__kc_get(atomic_uint_fast64_t* c) {
  return atomic_load_explicit(c, memory_order_relaxed);
}

static _Thread_local cube__cache_outcome_t* cube__kc_outcome;

void cube__cache_outcome_begin(cube__cache_outcome_t* record) {
  memset(record, 0, sizeof(*record));
  cube__kc_outcome = record;
}

void cube__cache_outcome_end(void) { cube__kc_outcome = NULL; }

void cube__cache_count_memory_hit(void) {
  cube__kc_add(&cube__kc_memory_hits, 1);
  if (cube__kc_outcome) cube__kc_outcome->memory_hits++;
}

void cube__cache_count_disk_hit(const char* kernel, uint64_t start_ns, uint64_t load_ns) {
  if (cube__trace_on()) {
    char name[96];
    cube__trace_prefix_name(name, sizeof(name), "cache load ", kernel ? kernel : "?");
    cube__trace_host(CUBE__TRACE_CACHE_LOAD, name, start_ns, load_ns, 0);
  }
  cube__kc_add(&cube__kc_disk_hits, 1);
  cube__kc_add(&cube__kc_load_ns, load_ns);
  if (cube__kc_outcome) cube__kc_outcome->disk_hits++;
}

void cube__cache_count_miss(uint64_t compile_ns, bool failed) {
  cube__kc_add(&cube__kc_misses, 1);
  cube__kc_add(&cube__kc_compile_ns, compile_ns);
  if (failed) cube__kc_add(&cube__kc_compile_failures, 1);
  if (cube__kc_outcome) {
    cube__kc_outcome->misses++;
    if (failed) cube__kc_outcome->failures++;
  }
}

/* Keys -------------------------------------------------------------------- */

cube__cache_key_t cube__cache_key(const char* const* parts) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  uint64_t count = 0;
  for (const char* const* p = parts; p && *p; ++p, ++count) {
    /* Each part as (u64 little-endian length, bytes): boundaries matter. */
    uint64_t len = strlen(*p);
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = (unsigned char)(len >> (8 * i));
    XXH3_128bits_update(&state, le, sizeof(le));
    XXH3_128bits_update(&state, *p, (size_t)len);
  }
  /* The part count closes the list: (x) and (x, "") differ. */
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = (unsigned char)(count >> (8 * i));
  XXH3_128bits_update(&state, le, sizeof(le));
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  cube__cache_key_t key = {h.high64, h.low64};
  return key;
}

void cube__cache_key_hex(cube__cache_key_t key, char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    out[i] = digits[(key.hi >> (60 - 4 * i)) & 0xf];
    out[16 + i] = digits[(key.lo >> (60 - 4 * i)) & 0xf];
  }
  out[32] = '\0';
}

size_t cube__kc_read_full(int fd, void* buf, size_t size) {
  size_t done = 0;
  while (done < size) {
    size_t chunk = size - done;
    if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
    ssize_t r = read(fd, (char*)buf + done, chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += (size_t)r;
  }
  return done;
}

bool cube__kc_write_full(int fd, const void* buf, size_t size) {
  size_t done = 0;
  while (done < size) {
    size_t chunk = size - done;
    if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
    ssize_t w = write(fd, (const char*)buf + done, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    done += (size_t)w;
  }
  return true;
}

void cube__kc_put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
void cube__kc_put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
uint32_t cube__kc_get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
uint64_t cube__kc_get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Deletes |path| if it is still the file |st| describes (a writer may have
 * renamed a good entry over it since we read it) and counts it as corrupt. */
static void cube__kc_remove_corrupt(const char* path, const struct stat* st) {
  struct stat now;
  if (!st || (lstat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino))
    (void)unlink(path);
  cube__kc_add(&cube__kc_corrupt, 1);
}

/* Metadata ----------------------------------------------------------------- */

/* Appends "key=value\n" with newlines and NULs of |value| as spaces. */
static size_t cube__kc_meta_line(char* out, size_t size, size_t at, const char* key,
                                 const char* value) {
  if (!value) return at;
  int n = snprintf(out + at, at < size ? size - at : 0, "%s=", key);
  if (n < 0) return at;
  at += (size_t)n;
  for (const char* c = value; *c && at + 2 < size; ++c) out[at++] = (*c == '\n' || *c == '\r') ? ' ' : *c;
  if (at + 1 < size) out[at++] = '\n';
  if (at < size) out[at] = '\0';
  return at;
}

size_t cube__kc_meta_format(const cube__cache_meta_t* meta, char* out, size_t size) {
  if (size) out[0] = '\0';
  if (!meta) return 0;
  size_t at = 0;
  at = cube__kc_meta_line(out, size, at, "cube", CUBE_VERSION_STRING);
  at = cube__kc_meta_line(out, size, at, "backend", meta->backend);
  at = cube__kc_meta_line(out, size, at, "device", meta->device);
  at = cube__kc_meta_line(out, size, at, "name", meta->name);
  return at < size ? at : size - 1;
}

void cube__kc_meta_get(const char* meta, size_t len, const char* key, char* out, size_t size) {
  if (size) out[0] = '\0';
  size_t klen = strlen(key);
  const char* end = meta + len;
  for (const char* line = meta; line && line < end;) {
    const char* nl = memchr(line, '\n', (size_t)(end - line));
    const char* stop = nl ? nl : end;
    if ((size_t)(stop - line) > klen && memcmp(line, key, klen) == 0 && line[klen] == '=') {
      size_t n = (size_t)(stop - line) - klen - 1;
      if (n >= size) n = size ? size - 1 : 0;
      if (size) {
        memcpy(out, line + klen + 1, n);
        out[n] = '\0';
      }
      return;
    }
    line = nl ? nl + 1 : NULL;
  }
}

/* Entries ------------------------------------------------------------------ */

void cube__kc_entry_free(cube__kc_entry_t* e) {
  free(e->meta);
  free(e->payload);
  e->meta = NULL;
  e->payload = NULL;
}

bool cube__kc_entry_read(int fd, uint64_t file_size, bool verify, cube__kc_entry_t* out,
                         char* why, size_t why_size) {
  memset(out, 0, sizeof(*out));
  unsigned char header[CUBE__KC_HEADER_SIZE];
  if (file_size < CUBE__KC_HEADER_SIZE) {
    snprintf(why, why_size, "short file: %llu bytes, the header alone is %d",
             (unsigned long long)file_size, CUBE__KC_HEADER_SIZE);
    return false;
  }
  if (pread(fd, header, sizeof(header), 0) != (ssize_t)sizeof(header)) {
    snprintf(why, why_size, "header read failed (file of %llu bytes)",
             (unsigned long long)file_size);
    return false;
  }
  if (memcmp(header, "CUBEKC", 6) != 0) {
    snprintf(why, why_size, "bad magic (expected \"%s\")", CUBE__KC_MAGIC);
    return false;
  }
  uint32_t version = cube__kc_get_u32(header + 8);
  out->version = version;
  if (version != CUBE__KC_FORMAT_VERSION || memcmp(header, CUBE__KC_MAGIC, 8) != 0) {
    snprintf(why, why_size, "format version %u, expected %u", version, CUBE__KC_FORMAT_VERSION);
    return false;
  }
  uint32_t meta_len = cube__kc_get_u32(header + 12);
  uint64_t length = cube__kc_get_u64(header + 16);
  uint64_t checksum = cube__kc_get_u64(header + 24);
  if (meta_len > CUBE__KC_MAX_META) {
    snprintf(why, why_size, "metadata length %u is more than %d", meta_len, CUBE__KC_MAX_META);
    return false;
  }
  if (length != file_size - CUBE__KC_HEADER_SIZE - meta_len ||
      file_size < (uint64_t)CUBE__KC_HEADER_SIZE + meta_len) {
    snprintf(why, why_size, "payload length %llu in the header, the file holds %lld",
             (unsigned long long)length,
             (long long)file_size - CUBE__KC_HEADER_SIZE - (long long)meta_len);
    return false;
  }
  if (length > (uint64_t)SIZE_MAX - 1) {
    snprintf(why, why_size, "payload length %llu is too large", (unsigned long long)length);
    return false;
  }
  out->meta = malloc((size_t)meta_len + 1);
  if (!out->meta) {
    snprintf(why, why_size, "no host memory for %u bytes of metadata", meta_len);
    return false;
  }
  if (meta_len && pread(fd, out->meta, meta_len, CUBE__KC_HEADER_SIZE) != (ssize_t)meta_len) {
    snprintf(why, why_size, "short read of %u metadata bytes", meta_len);
    cube__kc_entry_free(out);
    return false;
  }
  out->meta[meta_len] = '\0';
  out->meta_len = meta_len;
  out->payload_len = (size_t)length;
  if (!verify) return true;
  out->payload = malloc(length ? (size_t)length : 1);
  if (!out->payload) {
    snprintf(why, why_size, "no host memory for %llu payload bytes", (unsigned long long)length);
    cube__kc_entry_free(out);
    return false;
  }
  if (lseek(fd, CUBE__KC_HEADER_SIZE + (off_t)meta_len, SEEK_SET) < 0 ||
      cube__kc_read_full(fd, out->payload, (size_t)length) != length) {
    snprintf(why, why_size, "short read of %llu payload bytes", (unsigned long long)length);
    cube__kc_entry_free(out);
    return false;
  }
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, out->meta, meta_len);
  XXH3_64bits_update(&state, out->payload, (size_t)length);
  uint64_t actual = XXH3_64bits_digest(&state);
  if (actual != checksum) {
    snprintf(why, why_size, "checksum %016llx, the header says %016llx",
             (unsigned long long)actual, (unsigned long long)checksum);
    cube__kc_entry_free(out);
    return false;
  }
  return true;
}

/* Disk -------------------------------------------------------------------- */

cube_status_t cube__cache_entry_path(cube__cache_key_t key, const char* kind, char* out,
                                     size_t size) {
  if (!out || size == 0) return CUBE_INVALID("cube__cache_entry_path: no output buffer");
  out[0] = '\0';
  if (!cube__kc_kind_ok(kind))
    return CUBE_INVALID("cube kernel cache: kind '%s' is invalid (1-%d letters or digits)",
                        kind ? kind : "(null)", CUBE__KC_MAX_KIND);
  cube__kc_dir_t d;
  CUBE_RETURN_IF_ERROR(cube__kc_dir_resolve(&d));
  if (d.off)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cube kernel cache: the disk cache is off (CUBE_CACHE_DIR=off)");
  return cube__kc_entry_path(&d, key, kind, out, size);
}

cube_status_t cube__cache_disk_load(cube__cache_key_t key, const char* kind, void** out_data,
                                    size_t* out_size) {
  if (!out_data || !out_size) return CUBE_INVALID("cube__cache_disk_load: NULL output");
  *out_data = NULL;
  *out_size = 0;
  if (!cube__kc_kind_ok(kind))
    return CUBE_INVALID("cube kernel cache: kind '%s' is invalid (1-%d letters or digits)",
                        kind ? kind : "(null)", CUBE__KC_MAX_KIND);
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "cube kernel cache: load");
  if (d.off)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "cube kernel cache: the disk cache is off (CUBE_CACHE_DIR=off)");
  st = cube__kc_check_private(&d);
  if (st) {
    cube_status_free(st);
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "cube kernel cache: no usable directory at '%s'", d.path);
  }
  char path[PATH_MAX];
  CUBE_RETURN_IF_ERROR(cube__kc_entry_path(&d, key, kind, path, sizeof(path)));

  /* Only an entry this user wrote is loaded: a link, a file of another
   * user or one that others may write is refused (on the opened descriptor,
   * platform/private_file.h), said once on stderr, and rebuilt: the store
   * renames a fresh entry over it. */
  cube__file_refusal_t refusal;
  char refused[160];
  int fd = cube__file_open_trusted(path, &refusal, refused, sizeof(refused));
  if (fd < 0) {
    if (refusal == CUBE__FILE_ABSENT)
      return cube__status_make(CUBE_STATUS_NOT_FOUND, "cube kernel cache: no entry '%s'", path);
    if (refusal == CUBE__FILE_UNREADABLE)
      return cube__status_make(CUBE_STATUS_NOT_FOUND, "cube kernel cache: no entry '%s': %s",
                               path, refused);
    fprintf(stderr, "cube: kernel cache entry '%s' is not used: %s; it is rebuilt\n", path,
            refused);
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "cube kernel cache: entry '%s' is refused (%s); to be rebuilt", path,
                             refused);
  }
  struct stat fst;
  char why[160];
  if (fstat(fd, &fst) != 0) {
    snprintf(why, sizeof(why), "fstat: %s", strerror(errno));
    close(fd);
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "cube kernel cache: '%s': %s", path, why);
  }
  if (!cube__kc_file_trusted(&fst, why, sizeof(why))) {
    /* Not ours to read, nor to delete: a store replaces it (rename). */
    close(fd);
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "cube kernel cache: '%s' is not used: %s",
                             path, why);
  }
  cube__kc_entry_t e;
  if (!cube__kc_entry_read(fd, (uint64_t)fst.st_size, true, &e, why, sizeof(why))) {
    close(fd);
    if (strstr(why, "no host memory"))
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cube kernel cache: loading '%s': %s",
                               path, why);
    cube__kc_remove_corrupt(path, &fst);
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "cube kernel cache: entry '%s' is corrupt (%s); deleted, to be rebuilt",
                             path, why);
  }
  /* Used now: the clock of the least recently used eviction. */
  const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  (void)futimens(fd, times);
  close(fd);
  free(e.meta);
  *out_data = e.payload;
  *out_size = e.payload_len;
  return CUBE_OK;
}

cube_status_t cube__kc_stage(const cube__kc_dir_t* d, cube__cache_key_t key, const char* kind,
                             const char* meta, size_t meta_len, const void* data, size_t size,
                             cube__kc_staged_t* out) {
  char sub[PATH_MAX];
  char* path = out->path;
  char* tmp = out->tmp;
  out->tmp[0] = out->path[0] = '\0';
  CUBE_RETURN_IF_ERROR(cube__kc_subdir(d, sub, sizeof(sub)));
  CUBE_RETURN_IF_ERROR(cube__kc_entry_path(d, key, kind, path, sizeof(out->path)));
  char hex[33];
  cube__cache_key_hex(key, hex);
  int n = snprintf(tmp, sizeof(out->tmp), "%s/.%s.%s.XXXXXX", sub, hex, kind);
  if (n < 0 || (size_t)n >= sizeof(out->tmp)) {
    tmp[0] = '\0';
    return CUBE_INVALID("cube kernel cache: temporary path under '%s' is too long", sub);
  }
  cube_status_t st = cube__kc_mkdirs(sub);
  if (!st) st = cube__kc_check_private(d);
  int fd = -1;
  if (!st) {
    /* mkostemp: O_CREAT|O_EXCL, mode 0600. */
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
      st = cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cube kernel cache: cannot create a temporary file in '%s': %s", sub,
                             strerror(errno));
  }
  if (st) {
    tmp[0] = '\0';
    cube__kc_report(d, st);
    return st;
  }
  unsigned char header[CUBE__KC_HEADER_SIZE];
  memcpy(header, CUBE__KC_MAGIC, 8);
  cube__kc_put_u32(header + 8, CUBE__KC_FORMAT_VERSION);
  cube__kc_put_u32(header + 12, (uint32_t)meta_len);
  cube__kc_put_u64(header + 16, (uint64_t)size);
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, meta, meta_len);
  XXH3_64bits_update(&state, data, size);
  cube__kc_put_u64(header + 24, XXH3_64bits_digest(&state));
  const char* step = NULL;
  if (cube__fault_hit(CUBE__FAULT_CACHE_STORE))
    errno = ENOSPC, step = "write"; /* injected fault: a full disk */
  else if (!cube__kc_write_full(fd, header, sizeof(header)) ||
           !cube__kc_write_full(fd, meta, meta_len) || !cube__kc_write_full(fd, data, size))
    step = "write";
  else if (fsync(fd) != 0)
    step = "fsync";
  int e = errno;
  if (close(fd) != 0 && !step) {
    step = "close";
    e = errno;
  }
  if (step) {
    (void)unlink(tmp);
    tmp[0] = '\0';
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cube kernel cache: storing %zu bytes as '%s' failed at %s: %s", size,
                             path, step, strerror(e));
  }
  return CUBE_OK;
}

cube_status_t cube__kc_commit(cube__kc_staged_t* s) {
  if (!s->tmp[0]) return CUBE_OK;
  if (rename(s->tmp, s->path) != 0) {
    int e = errno;
    (void)unlink(s->tmp);
    s->tmp[0] = '\0';
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cube kernel cache: storing '%s' failed at rename: %s", s->path,
                             strerror(e));
  }
  s->tmp[0] = '\0';
  return CUBE_OK;
}

void cube__kc_unstage(cube__kc_staged_t* s) {
  if (s->tmp[0]) (void)unlink(s->tmp);
  s->tmp[0] = '\0';
}

cube_status_t cube__kc_store_raw(const cube__kc_dir_t* d, cube__cache_key_t key,
                                 const char* kind, const char* meta, size_t meta_len,
                                 const void* data, size_t size) {
  cube__kc_staged_t s;
  CUBE_RETURN_IF_ERROR(cube__kc_stage(d, key, kind, meta, meta_len, data, size, &s));
  CUBE_RETURN_IF_ERROR(cube__kc_commit(&s));
  cube__kc_report_ok(d);
  uint64_t max = cube__option_size(CUBE__OPT_CACHE_MAX);
  if (max) {
    /* The entry just stored stays, even alone above the limit. */
    const char* keep = strrchr(s.path, '/');
    cube_status_free(cube__kc_evict(d, max, keep ? keep + 1 : s.path, NULL, NULL));
  }
  return CUBE_OK;
}

cube_status_t cube__cache_disk_store_meta(cube__cache_key_t key, const char* kind,
                                          const cube__cache_meta_t* meta, const void* data,
                                          size_t size) {
  if (!cube__kc_kind_ok(kind))
    return CUBE_INVALID("cube kernel cache: kind '%s' is invalid (1-%d letters or digits)",
                        kind ? kind : "(null)", CUBE__KC_MAX_KIND);
  if (!data && size) return CUBE_INVALID("cube kernel cache: store of %zu bytes from NULL", size);
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "cube kernel cache: store");
  if (d.off) return CUBE_OK;
  char text[CUBE__KC_MAX_META];
  size_t len = cube__kc_meta_format(meta, text, sizeof(text));
  return cube__kc_store_raw(&d, key, kind, text, len, data ? data : "", size);
}

cube_status_t cube__cache_disk_store(cube__cache_key_t key, const char* kind, const void* data,
                                     size_t size) {
  return cube__cache_disk_store_meta(key, kind, NULL, data, size);
}

void cube__cache_disk_discard(cube__cache_key_t key, const char* kind) {
  char path[PATH_MAX];
  cube_status_t st = cube__cache_entry_path(key, kind, path, sizeof(path));
  if (st) {
    cube_status_free(st);
    cube__kc_add(&cube__kc_corrupt, 1);
    return;
  }
  cube__kc_remove_corrupt(path, NULL);
}

/* Locks -------------------------------------------------------------------- */

cube_status_t cube__cache_lock(cube__cache_key_t key, cube__cache_lock_t* out) {
  out->fd = -1;
  cube__kc_dir_t d;
  CUBE_RETURN_IF_ERROR(cube__kc_dir_resolve(&d));
  if (d.off)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cube kernel cache: the disk cache is off (CUBE_CACHE_DIR=off)");
  char dir[PATH_MAX], path[PATH_MAX], hex[33];
  CUBE_RETURN_IF_ERROR(cube__kc_subdir(&d, dir, sizeof(dir)));
  cube__cache_key_hex(key, hex);
  int n = snprintf(path, sizeof(path), "%s/%s/%s", dir, CUBE__KC_LOCKDIR, hex);
  if (n < 0 || (size_t)n >= sizeof(path))
    return CUBE_INVALID("cube kernel cache: lock path under '%s' is too long", dir);
  *strrchr(path, '/') = '\0';
  cube_status_t st = cube__kc_mkdirs(path);
  if (!st) st = cube__kc_check_private(&d);
  if (st) return st;
  path[strlen(path)] = '/';
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    struct stat fst;
    char why[128];
    if (fd >= 0 && (fstat(fd, &fst) != 0 || !cube__kc_file_trusted(&fst, why, sizeof(why)))) {
      close(fd);
      return cube__status_make(CUBE_STATUS_UNAVAILABLE, "cube kernel cache: lock file '%s': %s",
                               path, why);
    }
  }
  if (fd < 0)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "cube kernel cache: lock file '%s': %s",
                             path, strerror(errno));
  while (flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    int e = errno;
    close(fd);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "cube kernel cache: flock of '%s': %s",
                             path, strerror(e));
  }
  out->fd = fd;
  return CUBE_OK;
}

void cube__cache_unlock(cube__cache_lock_t* lock) {
  if (!lock || lock->fd < 0) return;
  (void)flock(lock->fd, LOCK_UN);
  close(lock->fd);
  lock->fd = -1;
}

/* Counters ----------------------------------------------------------------- */

void cube__kc_counters_reset(void) {
  atomic_store(&cube__kc_memory_hits, 0);
  atomic_store(&cube__kc_disk_hits, 0);
  atomic_store(&cube__kc_misses, 0);
  atomic_store(&cube__kc_compile_failures, 0);
  atomic_store(&cube__kc_corrupt, 0);
  atomic_store(&cube__kc_compile_ns, 0);
  atomic_store(&cube__kc_load_ns, 0);
}

void cube__kc_counters_read(cube_kernel_cache_stats_t* s) {
  s->memory_hits = cube__kc_get(&cube__kc_memory_hits);
  s->disk_hits = cube__kc_get(&cube__kc_disk_hits);
  s->misses = cube__kc_get(&cube__kc_misses);
  s->compile_failures = cube__kc_get(&cube__kc_compile_failures);
  s->corrupt_entries = cube__kc_get(&cube__kc_corrupt);
  s->compile_ns = cube__kc_get(&cube__kc_compile_ns);
  s->load_ns = cube__kc_get(&cube__kc_load_ns);
}

void cube__cache_shutdown(void) {
  /* Compiles left running past CUBE_COMPILE_TIMEOUT store into the cache
   * when they end: nothing of the library runs after the shutdown. */
  cube__compile_limit_drain();
  cube__compile_watch_shutdown();
  cube__cache_memory_clear();

  cube__kc_dir_shutdown();
}
