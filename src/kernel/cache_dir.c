/* The kernel cache's directory: where it is (CUBE_CACHE_DIR, resolved on each
 * call), what its entries are named, which files in it may be read, creating
 * it, and whether it can be used, said once per directory on stderr and by
 * cube_kernel_cache_dir_status. The entries themselves are cache.c's. See
 * kernel/cache.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/options.h"
#include "base/status.h"
#include "cube/cube.h"
#include "kernel/cache.h"
#include "kernel/cache_internal.h"
#include "platform/private_file.h"

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

cube_status_t cube__kc_dir_resolve(cube__kc_dir_t* d) {
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
  /* Trailing slashes would double in "<dir>/v2". */
  size_t len = strlen(d->path);
  while (len > 1 && d->path[len - 1] == '/') d->path[--len] = '\0';
  return CUBE_OK;
}

bool cube__kc_kind_ok(const char* kind) {
  if (!kind || !*kind) return false;
  size_t n = 0;
  for (const char* c = kind; *c; ++c, ++n) {
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
    if (!ok || n >= CUBE__KC_MAX_KIND) return false;
  }
  return true;
}

/* "<dir>/v2" */
cube_status_t cube__kc_subdir(const cube__kc_dir_t* d, char* out, size_t size) {
  int n = snprintf(out, size, "%s/%s", d->path, CUBE__KC_SUBDIR);
  if (n < 0 || (size_t)n >= size)
    return CUBE_INVALID("cube kernel cache: directory '%s' is too long", d->path);
  return CUBE_OK;
}

cube_status_t cube__kc_entry_path(const cube__kc_dir_t* d, cube__cache_key_t key,
                                  const char* kind, char* out, size_t size) {
  char hex[33];
  cube__cache_key_hex(key, hex);
  int n = snprintf(out, size, "%s/%s/%s.%s", d->path, CUBE__KC_SUBDIR, hex, kind);
  if (n < 0 || (size_t)n >= size)
    return CUBE_INVALID("cube kernel cache: entry path under '%s' is too long (%d bytes, at most %zu)",
                        d->path, n, size - 1);
  return CUBE_OK;
}

static int cube__kc_hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool cube__kc_is_entry_name(const char* name) {
  for (int i = 0; i < 32; ++i)
    if (cube__kc_hex_digit(name[i]) < 0) return false;
  return name[32] == '.' && cube__kc_kind_ok(name + 33);
}

bool cube__kc_is_temp_name(const char* name) {
  return name[0] == '.' && strspn(name + 1, "0123456789abcdef") == 32 && name[33] == '.';
}

bool cube__kc_key_from_hex(const char* hex, cube__cache_key_t* out) {
  uint64_t v[2] = {0, 0};
  for (int i = 0; i < 32; ++i) {
    int d = cube__kc_hex_digit(hex[i]);
    if (d < 0) return false;
    v[i / 16] = (v[i / 16] << 4) | (uint64_t)d;
  }
  out->hi = v[0];
  out->lo = v[1];
  return true;
}

bool cube__kc_file_trusted(const struct stat* st, char* why, size_t why_size) {
  if (!S_ISREG(st->st_mode)) {
    snprintf(why, why_size, "not a regular file");
    return false;
  }
  if (st->st_uid != geteuid()) {
    snprintf(why, why_size, "owned by uid %lu, not by this user (uid %lu)",
             (unsigned long)st->st_uid, (unsigned long)geteuid());
    return false;
  }
  if (st->st_mode & 022) {
    snprintf(why, why_size, "writable by %s (mode %03o)",
             (st->st_mode & 020) ? "its group" : "others", (unsigned)(st->st_mode & 0777));
    return false;
  }
  return true;
}

/* The /tmp fallback is shared by every user: use it only when the directory
 * is ours and nobody else may write into it. */
cube_status_t cube__kc_check_private(const cube__kc_dir_t* d) {
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
cube_status_t cube__kc_mkdirs(const char* path) {
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
 * anything: the deepest existing component of "<dir>/v2" must be a
 * directory this process may write into (for "<dir>/v2" itself: to add
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
void cube__kc_report(const cube__kc_dir_t* d, cube_status_t failure) {
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
void cube__kc_report_ok(const cube__kc_dir_t* d) {
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

/* Public ------------------------------------------------------------------ */

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

void cube__kc_dir_shutdown(void) {
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
