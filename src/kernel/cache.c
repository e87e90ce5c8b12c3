/* The kernel cache: XXH3-128 keys, integrity-checked disk entries written
 * atomically (temp file + fsync + rename) and the counters of cube/cache.h;
 * the process-wide key -> artifact map is cache_memory.c. */
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

/* Disk format ---------------------------------------------------------- */

#define CUBE__KC_MAGIC "CUBEKC01"
#define CUBE__KC_FORMAT_VERSION 1u
#define CUBE__KC_SUBDIR "v1"              /* bumped with the format */
#define CUBE__KC_HEADER_SIZE (8 + 4 + 8 + 8) /* magic, version, length, XXH3-64 */
#define CUBE__KC_MAX_KIND 15

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

void cube__cache_count_memory_hit(void) { cube__kc_add(&cube__kc_memory_hits, 1); }

void cube__cache_count_disk_hit(uint64_t load_ns) {
  cube__kc_add(&cube__kc_disk_hits, 1);
  cube__kc_add(&cube__kc_load_ns, load_ns);
}

void cube__cache_count_miss(uint64_t compile_ns, bool failed) {
  cube__kc_add(&cube__kc_misses, 1);
  cube__kc_add(&cube__kc_compile_ns, compile_ns);
  if (failed) cube__kc_add(&cube__kc_compile_failures, 1);
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

/* Strings handed out for the process (cube_kernel_cache_dir) ------------- */

typedef struct cube__kc_string {
  struct cube__kc_string* next;
  char text[];
} cube__kc_string_t;

static pthread_mutex_t cube__kc_strings_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__kc_string_t* cube__kc_strings;

/* A copy of |s| that lives until cube__cache_shutdown; NULL without memory. */
static const char* cube__kc_intern(const char* s) {
  const char* found = NULL;
  pthread_mutex_lock(&cube__kc_strings_lock);
  for (cube__kc_string_t* e = cube__kc_strings; e; e = e->next) {
    if (strcmp(e->text, s) == 0) {
      found = e->text;
      break;
    }
  }
  if (!found) {
    size_t n = strlen(s);
    cube__kc_string_t* e = malloc(sizeof(*e) + n + 1);
    if (e) {
      memcpy(e->text, s, n + 1);
      e->next = cube__kc_strings;
      cube__kc_strings = e;
      found = e->text;
    }
  }
  pthread_mutex_unlock(&cube__kc_strings_lock);
  return found;
}

/* The directory ----------------------------------------------------------- */

typedef struct cube__kc_dir {
  bool off;
  bool shared_tmp; /* the /tmp fallback: must be ours (not planted by another user) */
  char path[PATH_MAX];
} cube__kc_dir_t;

static cube_status_t cube__kc_dir_resolve(cube__kc_dir_t* d) {
  d->off = false;
  d->shared_tmp = false;
  d->path[0] = '\0';
  const char* v = NULL;
  int n;
  if ((v = cube__option_str(CUBE__OPT_CACHE_DIR)) != NULL) {
    if (strcmp(v, "off") == 0) {
      d->off = true;
      return CUBE_OK;
    }
    n = snprintf(d->path, sizeof(d->path), "%s", v);
    if (n < 0 || (size_t)n >= sizeof(d->path))
      return CUBE_INVALID("cube kernel cache: CUBE_CACHE_DIR is %zu bytes long (at most %d)",
                          strlen(v), PATH_MAX - 1);
  } else if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/') {
    n = snprintf(d->path, sizeof(d->path), "%s/cube", v);
    if (n < 0 || (size_t)n >= sizeof(d->path))
      return CUBE_INVALID("cube kernel cache: XDG_CACHE_HOME is %zu bytes long (at most %d)",
                          strlen(v), PATH_MAX - 12);
  } else if ((v = getenv("HOME")) && *v) {
    n = snprintf(d->path, sizeof(d->path), "%s/.cache/cube", v);
    if (n < 0 || (size_t)n >= sizeof(d->path))
      return CUBE_INVALID("cube kernel cache: HOME is %zu bytes long (at most %d)", strlen(v),
                          PATH_MAX - 16);
  } else {
    snprintf(d->path, sizeof(d->path), "/tmp/cube-cache-%lu", (unsigned long)geteuid());
    d->shared_tmp = true;
  }
  /* Trailing slashes would double in "<dir>/v1". */
  size_t len = strlen(d->path);
  while (len > 1 && d->path[len - 1] == '/') d->path[--len] = '\0';
  return CUBE_OK;
}

static bool cube__kc_kind_ok(const char* kind) {
  if (!kind || !*kind) return false;
  size_t n = 0;
  for (const char* c = kind; *c; ++c, ++n) {
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
    if (!ok || n >= CUBE__KC_MAX_KIND) return false;
  }
  return true;
}

/* "<dir>/v1" */
static cube_status_t cube__kc_subdir(const cube__kc_dir_t* d, char* out, size_t size) {
  int n = snprintf(out, size, "%s/%s", d->path, CUBE__KC_SUBDIR);
  if (n < 0 || (size_t)n >= size)
    return CUBE_INVALID("cube kernel cache: directory '%s' is too long", d->path);
  return CUBE_OK;
}

static cube_status_t cube__kc_entry_path(const cube__kc_dir_t* d, cube__cache_key_t key,
                                         const char* kind, char* out, size_t size) {
  char hex[33];
  cube__cache_key_hex(key, hex);
  int n = snprintf(out, size, "%s/%s/%s.%s", d->path, CUBE__KC_SUBDIR, hex, kind);
  if (n < 0 || (size_t)n >= size)
    return CUBE_INVALID("cube kernel cache: entry path under '%s' is too long (%d bytes, at most %zu)",
                        d->path, n, size - 1);
  return CUBE_OK;
}

/* An entry file name: 32 hex digits, '.', a kind. */
static bool cube__kc_is_entry_name(const char* name) {
  for (int i = 0; i < 32; ++i) {
    char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return name[32] == '.' && cube__kc_kind_ok(name + 33);
}

/* The /tmp fallback is shared by every user: use it only when the directory
 * is ours and nobody else may write into it. */
static cube_status_t cube__kc_check_private(const cube__kc_dir_t* d) {
  if (!d->shared_tmp) return CUBE_OK;
  struct stat st;
  if (lstat(d->path, &st) != 0)
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "cube kernel cache: cannot stat '%s': %s",
                             d->path, strerror(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cube kernel cache: '%s' is not a private directory of uid %lu "
                             "(owner %lu, mode %03o); the disk cache is not used",
                             d->path, (unsigned long)geteuid(), (unsigned long)st.st_uid,
                             (unsigned)(st.st_mode & 07777));
  return CUBE_OK;
}

/* mkdir -p with mode 0700 for the directories it creates. */
static cube_status_t cube__kc_mkdirs(const char* path) {
  char buf[PATH_MAX];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(buf))
    return CUBE_INVALID("cube kernel cache: cannot create directory '%s': bad length %zu", path, n);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) {
      int e = errno;
      return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                               "cube kernel cache: cannot create directory '%s': %s", buf,
                               strerror(e));
    }
    buf[i] = saved;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cube kernel cache: '%s' exists and is not a directory", path);
  return CUBE_OK;
}

/* Unusable directories ------------------------------------------------------ */

#define CUBE__KC_WHY (PATH_MAX + 256) /* a path and a few words */

/* Why the directory of |d| cannot hold the disk cache, without creating
 * anything: the deepest existing component of "<dir>/v1" must be a
 * directory this process may write into (for "<dir>/v1" itself: to add
 * entries; for an ancestor: to create the rest). Empty |why| when usable. */
static void cube__kc_probe(const cube__kc_dir_t* d, char* why, size_t why_size) {
  why[0] = '\0';
  if (d->off) return;
  char p[PATH_MAX];
  if (cube__kc_subdir(d, p, sizeof(p)) != CUBE_OK) {
    snprintf(why, why_size, "the path is too long");
    return;
  }
  for (;;) {
    struct stat st;
    if (stat(p, &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        snprintf(why, why_size, "'%s' is not a directory", p);
      } else if (access(p, W_OK | X_OK) != 0) {
        int e = errno;
        snprintf(why, why_size, "'%s' is not writable: %s", p, strerror(e));
      }
      break;
    }
    int e = errno;
    /* ENOTDIR: a file above it, found further up. EACCES and others: a
     * parent that cannot be searched. */
    if (e != ENOENT && e != ENOTDIR) {
      snprintf(why, why_size, "cannot use '%s': %s", p, strerror(e));
      break;
    }
    char* slash = strrchr(p, '/');
    if (!slash) break; /* a relative path: the working directory is tried on store */
    if (slash == p) {
      if (p[1] == '\0') break; /* "/" itself: cannot be missing */
      slash[1] = '\0';
    } else {
      *slash = '\0';
    }
  }
  if (!why[0] && d->shared_tmp) {
    cube_status_t st = cube__kc_check_private(d);
    if (st && cube_status_code(st) != CUBE_STATUS_NOT_FOUND) /* absent: created as ours */
      snprintf(why, why_size, "%s", cube_status_message(st));
    cube_status_free(st);
  }
}

/* The directories reported in this process: each once (a line on stderr),
 * with the reason of the last store that failed there (kept for
 * cube_kernel_cache_dir_status; cleared by a store that succeeds). */
#define CUBE__KC_REPORTED 16
static struct {
  uint64_t path_hash;
  bool failing;
  char why[CUBE__KC_WHY];
} cube__kc_reported[CUBE__KC_REPORTED];
static size_t cube__kc_reported_count;
static pthread_mutex_t cube__kc_reported_lock = PTHREAD_MUTEX_INITIALIZER;

static cube_status_t cube__kc_unusable(const char* dir, const char* why) {
  return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                           "cube kernel cache: directory '%s' is unusable: %s; compiled kernels "
                           "are kept in memory only (set CUBE_CACHE_DIR to a writable directory, "
                           "or to off)",
                           dir, why);
}

/* A store into |d| failed with |failure| (a directory-level failure: the
 * directory cannot be made, is not one, or takes no file). Logs it once per
 * directory and process. */
static void cube__kc_report(const cube__kc_dir_t* d, cube_status_t failure) {
  char why[CUBE__KC_WHY];
  cube__kc_probe(d, why, sizeof(why));
  if (!why[0]) {
    /* The probe sees nothing wrong (e.g. a full disk): the store's own words. */
    const char* m = cube_status_message(failure);
    const char* prefix = "cube kernel cache: ";
    if (strncmp(m, prefix, strlen(prefix)) == 0) m += strlen(prefix);
    snprintf(why, sizeof(why), "%s", m);
  }
  uint64_t h = XXH3_64bits(d->path, strlen(d->path));
  bool log = false;
  pthread_mutex_lock(&cube__kc_reported_lock);
  size_t i = 0;
  while (i < cube__kc_reported_count && cube__kc_reported[i].path_hash != h) ++i;
  if (i == cube__kc_reported_count && i < CUBE__KC_REPORTED) {
    cube__kc_reported[i].path_hash = h;
    cube__kc_reported_count++;
    log = true;
  }
  if (i < cube__kc_reported_count) {
    cube__kc_reported[i].failing = true;
    snprintf(cube__kc_reported[i].why, sizeof(cube__kc_reported[i].why), "%s", why);
  }
  pthread_mutex_unlock(&cube__kc_reported_lock);
  if (log)
    fprintf(stderr,
            "cube: kernel cache directory '%s' is unusable: %s; compiled kernels are kept in "
            "memory only (set CUBE_CACHE_DIR to a writable directory, or to off)\n",
            d->path, why);
}

/* A store into |d| succeeded: a reason recorded for it is stale. */
static void cube__kc_report_ok(const cube__kc_dir_t* d) {
  pthread_mutex_lock(&cube__kc_reported_lock);
  size_t n = cube__kc_reported_count;
  bool any = false;
  for (size_t i = 0; i < n; ++i) any |= cube__kc_reported[i].failing;
  if (any) {
    uint64_t h = XXH3_64bits(d->path, strlen(d->path));
    for (size_t i = 0; i < n; ++i)
      if (cube__kc_reported[i].path_hash == h) cube__kc_reported[i].failing = false;
  }
  pthread_mutex_unlock(&cube__kc_reported_lock);
}

static size_t cube__kc_read_full(int fd, void* buf, size_t size) {
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

static bool cube__kc_write_full(int fd, const void* buf, size_t size) {
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

static void cube__kc_put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
static void cube__kc_put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t cube__kc_get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t cube__kc_get_u64(const unsigned char* p) {
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
  if (fstat(fd, &fst) != 0) {
    close(fd);
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "cube kernel cache: cannot stat '%s': %s",
                             path, strerror(errno));
  }
  char why[160];
  uint64_t file_size = (uint64_t)fst.st_size;
  unsigned char header[CUBE__KC_HEADER_SIZE];
  void* data = NULL;
  if (file_size < CUBE__KC_HEADER_SIZE) {
    snprintf(why, sizeof(why), "short file: %llu bytes, the header alone is %d",
             (unsigned long long)file_size, CUBE__KC_HEADER_SIZE);
    goto corrupt;
  }
  if (cube__kc_read_full(fd, header, sizeof(header)) != sizeof(header)) {
    snprintf(why, sizeof(why), "header read failed (file of %llu bytes)",
             (unsigned long long)file_size);
    goto corrupt;
  }
  if (memcmp(header, CUBE__KC_MAGIC, 8) != 0) {
    snprintf(why, sizeof(why), "bad magic (expected \"%s\")", CUBE__KC_MAGIC);
    goto corrupt;
  }
  uint32_t version = cube__kc_get_u32(header + 8);
  uint64_t length = cube__kc_get_u64(header + 12);
  uint64_t checksum = cube__kc_get_u64(header + 20);
  if (version != CUBE__KC_FORMAT_VERSION) {
    snprintf(why, sizeof(why), "format version %u, expected %u", version, CUBE__KC_FORMAT_VERSION);
    goto corrupt;
  }
  if (length != file_size - CUBE__KC_HEADER_SIZE) {
    snprintf(why, sizeof(why), "payload length %llu in the header, the file holds %llu",
             (unsigned long long)length, (unsigned long long)(file_size - CUBE__KC_HEADER_SIZE));
    goto corrupt;
  }
  if (length > (uint64_t)SIZE_MAX - 1) {
    snprintf(why, sizeof(why), "payload length %llu is too large", (unsigned long long)length);
    goto corrupt;
  }
  data = malloc(length ? (size_t)length : 1);
  if (!data) {
    close(fd);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "cube kernel cache: cannot allocate %llu bytes to load '%s'",
                             (unsigned long long)length, path);
  }
  size_t got = cube__kc_read_full(fd, data, (size_t)length);
  if (got != length) {
    snprintf(why, sizeof(why), "short read: %zu of %llu payload bytes", got,
             (unsigned long long)length);
    goto corrupt;
  }
  uint64_t actual = XXH3_64bits(data, (size_t)length);
  if (actual != checksum) {
    snprintf(why, sizeof(why), "checksum %016llx, the header says %016llx",
             (unsigned long long)actual, (unsigned long long)checksum);
    goto corrupt;
  }
  close(fd);
  *out_data = data;
  *out_size = (size_t)length;
  return CUBE_OK;

corrupt:
  free(data);
  close(fd);
  cube__kc_remove_corrupt(path, &fst);
  return cube__status_make(CUBE_STATUS_NOT_FOUND,
                           "cube kernel cache: entry '%s' is corrupt (%s); deleted, to be rebuilt",
                           path, why);
}

cube_status_t cube__cache_disk_store(cube__cache_key_t key, const char* kind, const void* data,
                                     size_t size) {
  if (!cube__kc_kind_ok(kind))
    return CUBE_INVALID("cube kernel cache: kind '%s' is invalid (1-%d letters or digits)",
                        kind ? kind : "(null)", CUBE__KC_MAX_KIND);
  if (!data && size) return CUBE_INVALID("cube kernel cache: store of %zu bytes from NULL", size);
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "cube kernel cache: store");
  if (d.off) return CUBE_OK;
  char sub[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX];
  CUBE_RETURN_IF_ERROR(cube__kc_subdir(&d, sub, sizeof(sub)));
  CUBE_RETURN_IF_ERROR(cube__kc_entry_path(&d, key, kind, path, sizeof(path)));
  char hex[33];
  cube__cache_key_hex(key, hex);
  int n = snprintf(tmp, sizeof(tmp), "%s/.%s.%s.XXXXXX", sub, hex, kind);
  if (n < 0 || (size_t)n >= sizeof(tmp))
    return CUBE_INVALID("cube kernel cache: temporary path under '%s' is too long", sub);
  st = cube__kc_mkdirs(sub);
  if (!st) st = cube__kc_check_private(&d);
  int fd = -1;
  if (!st) {
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
      st = cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cube kernel cache: cannot create a temporary file in '%s': %s", sub,
                             strerror(errno));
  }
  if (st) {
    cube__kc_report(&d, st);
    return st;
  }
  unsigned char header[CUBE__KC_HEADER_SIZE];
  memcpy(header, CUBE__KC_MAGIC, 8);
  cube__kc_put_u32(header + 8, CUBE__KC_FORMAT_VERSION);
  cube__kc_put_u64(header + 12, (uint64_t)size);
  cube__kc_put_u64(header + 20, XXH3_64bits(data, size));
  const char* step = NULL;
  if (cube__fault_hit(CUBE__FAULT_CACHE_STORE))
    errno = ENOSPC, step = "write"; /* injected fault: a full disk */
  else if (!cube__kc_write_full(fd, header, sizeof(header)) || !cube__kc_write_full(fd, data, size))
    step = "write";
  else if (fsync(fd) != 0)
    step = "fsync";
  int e = errno;
  if (close(fd) != 0 && !step) {
    step = "close";
    e = errno;
  }
  if (!step && rename(tmp, path) != 0) {
    step = "rename";
    e = errno;
  }
  if (step) {
    (void)unlink(tmp);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "cube kernel cache: storing %zu bytes as '%s' failed at %s: %s", size,
                             path, step, strerror(e));
  }
  cube__kc_report_ok(&d);
  return CUBE_OK;
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

/* Public ------------------------------------------------------------------ */

typedef struct cube__kc_scan {
  uint64_t entries, bytes;
  uint64_t removed;
} cube__kc_scan_t;

/* Walks <dir>/v1: counts entries, or deletes entries and temporary files. */
static cube_status_t cube__kc_walk(const cube__kc_dir_t* d, bool remove, cube__kc_scan_t* out) {
  memset(out, 0, sizeof(*out));
  if (d->off) return CUBE_OK;
  char sub[PATH_MAX];
  CUBE_RETURN_IF_ERROR(cube__kc_subdir(d, sub, sizeof(sub)));
  DIR* dir = opendir(sub);
  if (!dir) {
    if (errno == ENOENT || errno == ENOTDIR) return CUBE_OK; /* nothing stored */
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "cube kernel cache: cannot read '%s': %s",
                             sub, strerror(errno));
  }
  int dfd = dirfd(dir);
  cube_status_t first = CUBE_OK;
  struct dirent* de;
  while ((de = readdir(dir)) != NULL) {
    const char* name = de->d_name;
    bool entry = cube__kc_is_entry_name(name);
    /* Temporary files of stores: ".<hex>.<kind>.XXXXXX". */
    bool temp = name[0] == '.' && strspn(name + 1, "0123456789abcdef") == 32 && name[33] == '.';
    if (!entry && !temp) continue;
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (remove) {
      if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT && !first) {
        first = cube__status_make(CUBE_STATUS_UNAVAILABLE,
                                  "cube_kernel_cache_clear: cannot delete '%s/%s': %s", sub, name,
                                  strerror(errno));
      } else {
        out->removed++;
      }
    } else if (entry) {
      out->entries++;
      out->bytes += (uint64_t)st.st_size;
    }
  }
  closedir(dir);
  return first;
}

cube_status_t cube_kernel_cache_stats(cube_kernel_cache_stats_t* out_stats) {
  const char* fn = "cube_kernel_cache_stats";
  if (!out_stats) return CUBE_INVALID("%s: out_stats is NULL", fn);
  CUBE_RETURN_IF_ERROR(cube__options_check(fn));
  cube_kernel_cache_stats_t s;
  memset(&s, 0, sizeof(s));
  s.memory_hits = cube__kc_get(&cube__kc_memory_hits);
  s.disk_hits = cube__kc_get(&cube__kc_disk_hits);
  s.misses = cube__kc_get(&cube__kc_misses);
  s.compile_failures = cube__kc_get(&cube__kc_compile_failures);
  s.corrupt_entries = cube__kc_get(&cube__kc_corrupt);
  s.compile_ns = cube__kc_get(&cube__kc_compile_ns);
  s.load_ns = cube__kc_get(&cube__kc_load_ns);
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "%s", fn);
  cube__kc_scan_t scan;
  st = cube__kc_walk(&d, false, &scan);
  if (st) return cube__status_annotate(st, "%s", fn);
  s.disk_entries = scan.entries;
  s.disk_bytes = scan.bytes;
  /* Written whole or not at all (cube/cube.h, "Struct sizes"). */
  return cube__struct_write(fn, "out_stats->struct_size", &cube__struct_kernel_cache_stats,
                            out_stats, &s);
}

const char* cube_kernel_cache_dir(void) {
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st || d.off) {
    cube_status_free(st);
    return "";
  }
  const char* s = cube__kc_intern(d.path);
  return s ? s : "";
}

cube_status_t cube_kernel_cache_dir_status(void) {
  CUBE_RETURN_IF_ERROR(cube__options_check("cube_kernel_cache_dir_status"));
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "cube_kernel_cache_dir_status");
  if (d.off) return CUBE_OK;
  char why[CUBE__KC_WHY];
  cube__kc_probe(&d, why, sizeof(why));
  if (!why[0]) {
    /* Nothing wrong to see now; a store in this process may have found
     * otherwise (e.g. no space for a file). */
    uint64_t h = XXH3_64bits(d.path, strlen(d.path));
    pthread_mutex_lock(&cube__kc_reported_lock);
    for (size_t i = 0; i < cube__kc_reported_count; ++i)
      if (cube__kc_reported[i].path_hash == h && cube__kc_reported[i].failing)
        snprintf(why, sizeof(why), "%s", cube__kc_reported[i].why);
    pthread_mutex_unlock(&cube__kc_reported_lock);
  }
  return why[0] ? cube__kc_unusable(d.path, why) : CUBE_OK;
}

cube_status_t cube_kernel_cache_clear(void) {
  CUBE_RETURN_IF_ERROR(cube__options_check("cube_kernel_cache_clear"));
  atomic_store(&cube__kc_memory_hits, 0);
  atomic_store(&cube__kc_disk_hits, 0);
  atomic_store(&cube__kc_misses, 0);
  atomic_store(&cube__kc_compile_failures, 0);
  atomic_store(&cube__kc_corrupt, 0);
  atomic_store(&cube__kc_compile_ns, 0);
  atomic_store(&cube__kc_load_ns, 0);
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "cube_kernel_cache_clear");
  cube__kc_scan_t scan;
  return cube__kc_walk(&d, true, &scan);
}

void cube__cache_shutdown(void) {
  cube__cache_memory_clear();

  pthread_mutex_lock(&cube__kc_strings_lock);
  cube__kc_string_t* e = cube__kc_strings;
  cube__kc_strings = NULL;
  pthread_mutex_unlock(&cube__kc_strings_lock);
  while (e) {
    cube__kc_string_t* next = e->next;
    free(e);
    e = next;
  }
}
