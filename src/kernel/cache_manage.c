/* The kernel cache directory as users manage it: stats, clear, list, prune
 * and the least recently used eviction behind CUBE_CACHE_MAX (cube/cache.h).
 * Every walk reads "<dir>/v2" once; files that are not entries (a README, a
 * symbolic link, a directory) are left alone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/abi.h"
#include "base/options.h"
#include "base/status.h"
#include "cube/cube.h"
#include "kernel/cache_internal.h"

/* One file of the directory. */
typedef struct cube__kc_file {
  char name[56];
  uint64_t size;
  struct timespec mtime;
  bool entry; /* else a temporary file */
} cube__kc_file_t;

/* The entries and temporary files of "<dir>/v2" (a missing directory has
 * none), into a malloc'd array. */
static cube_status_t cube__kc_scan(const cube__kc_dir_t* d, cube__kc_file_t** out,
                                   size_t* out_count, char* sub, size_t sub_size) {
  *out = NULL;
  *out_count = 0;
  CUBE_RETURN_IF_ERROR(cube__kc_subdir(d, sub, sub_size));
  DIR* dir = opendir(sub);
  if (!dir) {
    if (errno == ENOENT || errno == ENOTDIR) return CUBE_OK; /* nothing stored */
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "cube kernel cache: cannot read '%s': %s",
                             sub, strerror(errno));
  }
  int dfd = dirfd(dir);
  size_t count = 0, cap = 0;
  cube__kc_file_t* files = NULL;
  cube_status_t st = CUBE_OK;
  struct dirent* de;
  while ((de = readdir(dir)) != NULL) {
    const char* name = de->d_name;
    bool entry = cube__kc_is_entry_name(name);
    if (!entry && !cube__kc_is_temp_name(name)) continue;
    if (strlen(name) >= sizeof(files->name)) continue;
    struct stat fst;
    if (fstatat(dfd, name, &fst, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(fst.st_mode)) continue;
    if (count == cap) {
      size_t ncap = cap ? cap * 2 : 64;
      cube__kc_file_t* grown = realloc(files, ncap * sizeof(*files));
      if (!grown) {
        st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                               "cube kernel cache: no host memory to list '%s'", sub);
        break;
      }
      files = grown;
      cap = ncap;
    }
    cube__kc_file_t* f = &files[count++];
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->size = (uint64_t)fst.st_size;
    f->mtime = fst.st_mtim;
    f->entry = entry;
  }
  closedir(dir);
  if (st) {
    free(files);
    return st;
  }
  *out = files;
  *out_count = count;
  return CUBE_OK;
}

static int cube__kc_older_first(const void* a, const void* b) {
  const cube__kc_file_t* x = a;
  const cube__kc_file_t* y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Deletes |name| in |sub|; ENOENT (another process was first) is fine. */
static cube_status_t cube__kc_unlink(const char* sub, const char* name, const char* fn) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/%s", sub, name);
  if (unlink(path) != 0 && errno != ENOENT)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "%s: cannot delete '%s': %s", fn, path,
                             strerror(errno));
  return CUBE_OK;
}

cube_status_t cube__kc_evict(const cube__kc_dir_t* d, uint64_t max_bytes, const char* keep,
                             uint64_t* out_removed, uint64_t* out_bytes) {
  if (out_removed) *out_removed = 0;
  if (out_bytes) *out_bytes = 0;
  char sub[PATH_MAX];
  cube__kc_file_t* files;
  size_t n;
  CUBE_RETURN_IF_ERROR(cube__kc_scan(d, &files, &n, sub, sizeof(sub)));
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i)
    if (files[i].entry) total += files[i].size;
  qsort(files, n, sizeof(*files), cube__kc_older_first);
  cube_status_t first = CUBE_OK;
  for (size_t i = 0; i < n && total > max_bytes; ++i) {
    if (!files[i].entry || (keep && strcmp(files[i].name, keep) == 0)) continue;
    cube_status_t st = cube__kc_unlink(sub, files[i].name, "cube kernel cache: eviction");
    if (st) {
      if (!first) first = st;
      else cube_status_free(st);
      continue;
    }
    total -= files[i].size;
    if (out_removed) (*out_removed)++;
    if (out_bytes) *out_bytes += files[i].size;
  }
  free(files);
  return first;
}

/* Stats and clear ----------------------------------------------------------- */

cube_status_t cube_kernel_cache_stats(cube_kernel_cache_stats_t* out_stats) {
  const char* fn = "cube_kernel_cache_stats";
  if (!out_stats) return CUBE_INVALID("%s: out_stats is NULL", fn);
  CUBE_RETURN_IF_ERROR(cube__options_check(fn));
  cube_kernel_cache_stats_t s;
  memset(&s, 0, sizeof(s));
  cube__kc_counters_read(&s);
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "%s", fn);
  if (!d.off) {
    char sub[PATH_MAX];
    cube__kc_file_t* files;
    size_t n;
    st = cube__kc_scan(&d, &files, &n, sub, sizeof(sub));
    if (st) return cube__status_annotate(st, "%s", fn);
    for (size_t i = 0; i < n; ++i) {
      if (!files[i].entry) continue;
      s.disk_entries++;
      s.disk_bytes += files[i].size;
    }
    free(files);
  }
  /* Written whole or not at all (cube/cube.h, "Struct sizes"). */
  return cube__struct_write(fn, "out_stats->struct_size", &cube__struct_kernel_cache_stats,
                            out_stats, &s);
}

/* Lock files nobody holds now ("<dir>/v2/locks/<hex>"). */
static void cube__kc_remove_idle_locks(const char* sub) {
  char dir_path[PATH_MAX];
  snprintf(dir_path, sizeof(dir_path), "%s/%s", sub, CUBE__KC_LOCKDIR);
  DIR* dir = opendir(dir_path);
  if (!dir) return;
  int dfd = dirfd(dir);
  struct dirent* de;
  while ((de = readdir(dir)) != NULL) {
    cube__cache_key_t k;
    if (strlen(de->d_name) != 32 || !cube__kc_key_from_hex(de->d_name, &k)) continue;
    int fd = openat(dfd, de->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) (void)unlinkat(dfd, de->d_name, 0);
    close(fd);
  }
  closedir(dir);
}

cube_status_t cube_kernel_cache_clear(void) {
  const char* fn = "cube_kernel_cache_clear";
  CUBE_RETURN_IF_ERROR(cube__options_check(fn));
  cube__kc_counters_reset();
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "%s", fn);
  if (d.off) return CUBE_OK;
  char sub[PATH_MAX];
  cube__kc_file_t* files;
  size_t n;
  st = cube__kc_scan(&d, &files, &n, sub, sizeof(sub));
  if (st) return cube__status_annotate(st, "%s", fn);
  cube_status_t first = CUBE_OK;
  for (size_t i = 0; i < n; ++i) {
    st = cube__kc_unlink(sub, files[i].name, fn);
    if (st && !first) first = st;
    else cube_status_free(st);
  }
  free(files);
  cube__kc_remove_idle_locks(sub);
  return first;
}

/* List ------------------------------------------------------------------------ */

static int cube__kc_recent_first(const void* a, const void* b) {
  const cube_kernel_cache_entry_t* x = a;
  const cube_kernel_cache_entry_t* y = b;
  if (x->last_use != y->last_use) return x->last_use > y->last_use ? -1 : 1;
  return strcmp(x->file, y->file);
}

/* Reads the header and metadata of |sub|/|f| into |e|. */
static void cube__kc_describe(const char* sub, const cube__kc_file_t* f,
                              cube_kernel_cache_entry_t* e) {
  memset(e, 0, sizeof(*e));
  snprintf(e->file, sizeof(e->file), "%s", f->name);
  snprintf(e->kind, sizeof(e->kind), "%s", f->name + 33);
  e->size = f->size;
  e->last_use = (int64_t)f->mtime.tv_sec;
  char path[PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/%s", sub, f->name);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  struct stat fst;
  if (fd < 0 || fstat(fd, &fst) != 0) {
    snprintf(e->why, sizeof(e->why), "cannot open: %s", strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  if (!cube__kc_file_trusted(&fst, e->why, sizeof(e->why))) {
    close(fd);
    return;
  }
  cube__kc_entry_t ent;
  if (cube__kc_entry_read(fd, (uint64_t)fst.st_size, false, &ent, e->why, sizeof(e->why))) {
    e->readable = true;
    cube__kc_meta_get(ent.meta, ent.meta_len, "name", e->name, sizeof(e->name));
    cube__kc_meta_get(ent.meta, ent.meta_len, "backend", e->backend, sizeof(e->backend));
    cube__kc_meta_get(ent.meta, ent.meta_len, "device", e->device, sizeof(e->device));
    cube__kc_meta_get(ent.meta, ent.meta_len, "cube", e->version, sizeof(e->version));
    cube__kc_entry_free(&ent);
  }
  close(fd);
}

cube_status_t cube_kernel_cache_list(cube_kernel_cache_entry_t** out_entries, size_t* out_count) {
  const char* fn = "cube_kernel_cache_list";
  if (!out_entries) return CUBE_INVALID("%s: out_entries is NULL", fn);
  if (!out_count) return CUBE_INVALID("%s: out_count is NULL", fn);
  *out_entries = NULL;
  *out_count = 0;
  CUBE_RETURN_IF_ERROR(cube__options_check(fn));
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "%s", fn);
  if (d.off) return CUBE_OK;
  char sub[PATH_MAX];
  cube__kc_file_t* files;
  size_t n;
  st = cube__kc_scan(&d, &files, &n, sub, sizeof(sub));
  if (st) return cube__status_annotate(st, "%s", fn);
  size_t entries = 0;
  for (size_t i = 0; i < n; ++i) entries += files[i].entry;
  if (!entries) {
    free(files);
    return CUBE_OK;
  }
  cube_kernel_cache_entry_t* out = calloc(entries, sizeof(*out));
  if (!out) {
    free(files);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory for %zu entries",
                             fn, entries);
  }
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (files[i].entry) cube__kc_describe(sub, &files[i], &out[k++]);
  free(files);
  qsort(out, k, sizeof(*out), cube__kc_recent_first);
  *out_entries = out;
  *out_count = k;
  return CUBE_OK;
}

void cube_kernel_cache_list_free(cube_kernel_cache_entry_t* entries) { free(entries); }

/* Prune -------------------------------------------------------------------- */

cube_status_t cube_kernel_cache_prune(uint64_t max_bytes,
                                      cube_kernel_cache_prune_report_t* out_report) {
  const char* fn = "cube_kernel_cache_prune";
  CUBE_RETURN_IF_ERROR(cube__options_check(fn));
  cube_kernel_cache_prune_report_t r;
  memset(&r, 0, sizeof(r));
  r.struct_size = sizeof(r);
  if (!max_bytes) max_bytes = cube__option_size(CUBE__OPT_CACHE_MAX);
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return cube__status_annotate(st, "%s", fn);
  cube_status_t first = CUBE_OK;
  if (!d.off) {
    char sub[PATH_MAX];
    cube__kc_file_t* files;
    size_t n;
    st = cube__kc_scan(&d, &files, &n, sub, sizeof(sub));
    if (st) return cube__status_annotate(st, "%s", fn);
    time_t now = time(NULL);
    for (size_t i = 0; i < n; ++i) {
      cube__kc_file_t* f = &files[i];
      const char* why = NULL;
      if (!f->entry) {
        /* A store in progress is seconds old; an hour means it died. */
        if (now - f->mtime.tv_sec < 3600) continue;
        why = "temporary";
        r.temporary++;
      } else {
        char path[PATH_MAX + 64], reason[160];
        snprintf(path, sizeof(path), "%s/%s", sub, f->name);
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        struct stat fst;
        if (fd < 0) continue; /* gone meanwhile */
        bool ours = fstat(fd, &fst) == 0 && cube__kc_file_trusted(&fst, reason, sizeof(reason));
        cube__kc_entry_t e;
        if (!ours) {
          close(fd);
          continue; /* not ours to judge */
        }
        if (!cube__kc_entry_read(fd, (uint64_t)fst.st_size, true, &e, reason, sizeof(reason))) {
          why = "corrupt";
          r.corrupt++;
        } else {
          char version[64];
          cube__kc_meta_get(e.meta, e.meta_len, "cube", version, sizeof(version));
          if (strcmp(version, CUBE_VERSION_STRING) != 0) {
            why = "other version";
            r.other_version++;
          }
          cube__kc_entry_free(&e);
        }
        close(fd);
      }
      if (!why) continue;
      st = cube__kc_unlink(sub, f->name, fn);
      if (st) {
        if (!first) first = st;
        else cube_status_free(st);
        continue;
      }
      r.removed_bytes += f->size;
      f->entry = false; /* gone: not counted below */
      f->size = 0;
    }
    free(files);
    cube__kc_remove_idle_locks(sub);
    if (max_bytes) {
      uint64_t removed = 0, bytes = 0;
      st = cube__kc_evict(&d, max_bytes, NULL, &removed, &bytes);
      if (st && !first) first = st;
      else cube_status_free(st);
      r.evicted = removed;
      r.removed_bytes += bytes;
    }
    st = cube__kc_scan(&d, &files, &n, sub, sizeof(sub));
    if (!st) {
      for (size_t i = 0; i < n; ++i) {
        if (!files[i].entry) continue;
        r.kept++;
        r.kept_bytes += files[i].size;
      }
      free(files);
    } else if (!first) {
      first = st;
    } else {
      cube_status_free(st);
    }
  }
  if (out_report) {
    cube_status_t w = cube__struct_write(fn, "out_report->struct_size",
                                         &cube__struct_kernel_cache_prune_report, out_report, &r);
    if (w) {
      cube_status_free(first);
      return w;
    }
  }
  return first;
}
