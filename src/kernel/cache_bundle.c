/* Bundles (cube/bundle.h): the entries of the cache directory made for one
 * device, in one file.
 *
 * Format 1, integers little-endian:
 *   "CUBEBNDL"  u32 format (1)  u32 header length H
 *   header: H bytes of "key=value\n" lines (cube, backend, device, entries)
 *   entries, each: u8 kind length K, the kind, 16 bytes of key (hi, lo as
 *     u64), u32 metadata length M, the metadata, u64 payload length N, the
 *     payload
 *   XXH3-128 of everything before it (hi, lo as u64)
 * The file is checked whole before any entry is stored, and the entries
 * are stored all or none (cube__bundle_store_all). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "base/options.h"
#include "base/status.h"
#include "cube/cube.h"
#include "kernel/cache_internal.h"
#include "platform/private_file.h"

#define CUBE__BUNDLE_MAGIC "CUBEBNDL"
#define CUBE__BUNDLE_FORMAT 1u

/* A buffered writer that hashes what it writes. */
typedef struct cube__bw {
  int fd;
  XXH3_state_t hash;
  bool failed;
  int err;
} cube__bw_t;

static void cube__bw_put(cube__bw_t* w, const void* p, size_t n) {
  if (w->failed) return;
  XXH3_128bits_update(&w->hash, p, n);
  if (!cube__kc_write_full(w->fd, p, n)) {
    w->failed = true;
    w->err = errno;
  }
}

static void cube__bw_u32(cube__bw_t* w, uint32_t v) {
  unsigned char b[4];
  cube__kc_put_u32(b, v);
  cube__bw_put(w, b, 4);
}

static void cube__bw_u64(cube__bw_t* w, uint64_t v) {
  unsigned char b[8];
  cube__kc_put_u64(b, v);
  cube__bw_put(w, b, 8);
}

static bool cube__bundle_is_kernel(const char* kind) { return strcmp(kind, "tune") != 0; }

cube_status_t cube__bundle_export(const char* path, const char* backend, const char* device,
                                  cube__bundle_head_t* out) {
  memset(out, 0, sizeof(*out));
  snprintf(out->version, sizeof(out->version), "%s", CUBE_VERSION_STRING);
  snprintf(out->backend, sizeof(out->backend), "%s", backend);
  snprintf(out->device, sizeof(out->device), "%s", device);
  cube__kc_dir_t d;
  CUBE_RETURN_IF_ERROR(cube__kc_dir_resolve(&d));
  if (d.off)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "bundle export: the disk cache is off (CUBE_CACHE_DIR=off)");
  CUBE_RETURN_IF_ERROR(cube__kc_check_private(&d));
  char sub[PATH_MAX];
  CUBE_RETURN_IF_ERROR(cube__kc_subdir(&d, sub, sizeof(sub)));

  /* The entries of this device and version (read whole: checked). */
  cube_kernel_cache_entry_t* list = NULL;
  size_t n = 0;
  CUBE_RETURN_IF_ERROR(cube_kernel_cache_list(&list, &n));
  size_t keep = 0;
  for (size_t i = 0; i < n; ++i) {
    cube_kernel_cache_entry_t* e = &list[i];
    if (e->readable && strcmp(e->version, CUBE_VERSION_STRING) == 0 &&
        strcmp(e->device, device) == 0)
      list[keep++] = *e;
  }
  if (!keep) {
    cube_kernel_cache_list_free(list);
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "bundle export: the cache directory '%s' holds no entry of cube %s "
                             "for device '%s' (run the program, or a compile-and-tune warm-up, "
                             "first)",
                             d.path, CUBE_VERSION_STRING, device);
  }

  char tmp[PATH_MAX];
  int pn = snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
  if (pn < 0 || (size_t)pn >= sizeof(tmp)) {
    cube_kernel_cache_list_free(list);
    return CUBE_INVALID("bundle export: path '%s' is too long", path);
  }
  cube__bw_t w = {0};
  w.fd = mkostemp(tmp, O_CLOEXEC); /* O_CREAT | O_EXCL, mode 0600 */
  if (w.fd < 0) {
    int e = errno;
    cube_kernel_cache_list_free(list);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "bundle export: cannot create a temporary file '%s': %s", tmp,
                             strerror(e));
  }
  XXH3_INITSTATE(&w.hash);
  XXH3_128bits_reset(&w.hash);
  char header[1024];
  int hn = snprintf(header, sizeof(header), "cube=%s\nbackend=%s\ndevice=%s\nentries=%zu\n",
                    CUBE_VERSION_STRING, backend, device, keep);
  if (hn < 0 || (size_t)hn >= sizeof(header)) hn = (int)strlen(header);
  cube__bw_put(&w, CUBE__BUNDLE_MAGIC, 8);
  cube__bw_u32(&w, CUBE__BUNDLE_FORMAT);
  cube__bw_u32(&w, (uint32_t)hn);
  cube__bw_put(&w, header, (size_t)hn);
  cube_status_t st = CUBE_OK;
  for (size_t i = 0; i < keep && !w.failed && !st; ++i) {
    char epath[PATH_MAX + 64];
    snprintf(epath, sizeof(epath), "%s/%s", sub, list[i].file);
    int fd = open(epath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat fst;
    char why[160];
    cube__kc_entry_t ent;
    if (fd < 0 || fstat(fd, &fst) != 0 || !cube__kc_file_trusted(&fst, why, sizeof(why)) ||
        !cube__kc_entry_read(fd, (uint64_t)fst.st_size, true, &ent, why, sizeof(why))) {
      /* Gone or damaged since the listing: left out. */
      if (fd >= 0) close(fd);
      continue;
    }
    close(fd);
    cube__cache_key_t key;
    cube__kc_key_from_hex(list[i].file, &key);
    const char* kind = list[i].file + 33;
    unsigned char kl = (unsigned char)strlen(kind);
    cube__bw_put(&w, &kl, 1);
    cube__bw_put(&w, kind, kl);
    cube__bw_u64(&w, key.hi);
    cube__bw_u64(&w, key.lo);
    cube__bw_u32(&w, (uint32_t)ent.meta_len);
    cube__bw_put(&w, ent.meta, ent.meta_len);
    cube__bw_u64(&w, (uint64_t)ent.payload_len);
    cube__bw_put(&w, ent.payload, ent.payload_len);
    cube__kc_entry_free(&ent);
    out->entries++;
    if (cube__bundle_is_kernel(kind))
      out->kernels++;
    else
      out->tunings++;
  }
  cube_kernel_cache_list_free(list);
  XXH128_hash_t h = XXH3_128bits_digest(&w.hash);
  unsigned char trailer[16];
  cube__kc_put_u64(trailer, h.high64);
  cube__kc_put_u64(trailer + 8, h.low64);
  if (!w.failed && !cube__kc_write_full(w.fd, trailer, 16)) {
    w.failed = true;
    w.err = errno;
  }
  const char* step = w.failed ? "write" : NULL;
  int e = w.err;
  if (!step && out->entries != keep) {
    /* The count in the header must be what the file holds. */
    step = "an entry changed while it was written";
    e = EAGAIN;
  }
  if (!step && fsync(w.fd) != 0) step = "fsync", e = errno;
  struct stat fst;
  if (!step && fstat(w.fd, &fst) == 0) out->bytes = (uint64_t)fst.st_size;
  if (close(w.fd) != 0 && !step) step = "close", e = errno;
  if (!step && rename(tmp, path) != 0) step = "rename", e = errno;
  if (step) {
    (void)unlink(tmp);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "bundle export: writing '%s' failed at %s: %s",
                             path, step, strerror(e));
  }
  return CUBE_OK;
}

/* A reader over the mapped file. */
typedef struct cube__br {
  const unsigned char* p;
  size_t at, end;
  bool bad;
} cube__br_t;

static const unsigned char* cube__br_take(cube__br_t* r, size_t n) {
  if (r->bad || n > r->end - r->at) {
    r->bad = true;
    return NULL;
  }
  const unsigned char* q = r->p + r->at;
  r->at += n;
  return q;
}

static uint32_t cube__br_u32(cube__br_t* r) {
  const unsigned char* q = cube__br_take(r, 4);
  return q ? cube__kc_get_u32(q) : 0;
}

static uint64_t cube__br_u64(cube__br_t* r) {
  const unsigned char* q = cube__br_take(r, 8);
  return q ? cube__kc_get_u64(q) : 0;
}

/* One entry of the bundle (pointers into the mapping). */
typedef struct cube__bundle_entry {
  char kind[CUBE__KC_MAX_KIND + 1];
  cube__cache_key_t key;
  const char* meta;
  size_t meta_len;
  const void* payload;
  size_t payload_len;
} cube__bundle_entry_t;

static bool cube__br_entry(cube__br_t* r, cube__bundle_entry_t* e, char* why, size_t why_size) {
  size_t start = r->at;
  const unsigned char* kl = cube__br_take(r, 1);
  const unsigned char* kind = kl ? cube__br_take(r, *kl) : NULL;
  if (!kind || *kl == 0 || *kl > CUBE__KC_MAX_KIND) {
    snprintf(why, why_size, "entry at byte %zu: bad kind", start);
    return false;
  }
  memcpy(e->kind, kind, *kl);
  e->kind[*kl] = '\0';
  if (!cube__kc_kind_ok(e->kind)) {
    snprintf(why, why_size, "entry at byte %zu: kind '%s' is not letters and digits", start,
             e->kind);
    return false;
  }
  e->key.hi = cube__br_u64(r);
  e->key.lo = cube__br_u64(r);
  uint32_t ml = cube__br_u32(r);
  if (ml > CUBE__KC_MAX_META) {
    snprintf(why, why_size, "entry at byte %zu: metadata of %u bytes", start, ml);
    return false;
  }
  e->meta = (const char*)cube__br_take(r, ml);
  e->meta_len = ml;
  uint64_t pl = cube__br_u64(r);
  e->payload = pl <= SIZE_MAX ? cube__br_take(r, (size_t)pl) : NULL;
  e->payload_len = (size_t)pl;
  if (r->bad || !e->meta || !e->payload) {
    snprintf(why, why_size, "entry at byte %zu runs past the end of the file", start);
    return false;
  }
  return true;
}

/* Stores the |count| entries that start at |first| into the cache
 * directory, all or none: each is written into a temporary file first; when
 * one fails, every temporary file goes and nothing is renamed. Then each is
 * renamed into place (a rename that fails removes the entries this import
 * added before it), and CUBE_CACHE_MAX is applied once. */
static cube_status_t cube__bundle_store_all(const char* path, cube__br_t* r, size_t first,
                                            uint64_t count) {
  cube__kc_dir_t d;
  cube_status_t st = cube__kc_dir_resolve(&d);
  if (st) return st;
  if (d.off)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "bundle import of '%s': the disk cache is off (CUBE_CACHE_DIR=off)",
                             path);
  if (count == 0) return CUBE_OK;
  cube__kc_staged_t* staged = count <= SIZE_MAX / sizeof(*staged) ? calloc((size_t)count, sizeof(*staged)) : NULL;
  bool* existed = calloc((size_t)count, sizeof(bool));
  if (!staged || !existed) {
    free(staged);
    free(existed);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "bundle import of '%s': no memory for the %llu entries' paths", path,
                             (unsigned long long)count);
  }
  char why[256];
  size_t n = 0;
  r->at = first;
  r->bad = false;
  while (n < count && r->at < r->end && !st) {
    cube__bundle_entry_t e;
    if (!cube__br_entry(r, &e, why, sizeof(why))) break; /* checked before */
    st = cube__kc_stage(&d, e.key, e.kind, e.meta, e.meta_len, e.payload, e.payload_len,
                        &staged[n]);
    if (st) {
      st = cube__status_annotate(st, "bundle import of '%s': entry %zu of %llu (nothing imported)",
                                 path, n, (unsigned long long)count);
      break;
    }
    existed[n] = access(staged[n].path, F_OK) == 0;
    n++;
  }
  if (st) {
    for (size_t i = 0; i < n; ++i) cube__kc_unstage(&staged[i]);
  } else {
    for (size_t i = 0; i < n && !st; ++i) {
      st = cube__kc_commit(&staged[i]);
      if (!st) continue;
      st = cube__status_annotate(st, "bundle import of '%s': entry %zu of %zu (nothing imported)",
                                 path, i, n);
      for (size_t j = i + 1; j < n; ++j) cube__kc_unstage(&staged[j]);
      for (size_t j = 0; j < i; ++j)
        if (!existed[j]) (void)unlink(staged[j].path);
    }
  }
  if (!st) {
    uint64_t max = cube__option_size(CUBE__OPT_CACHE_MAX);
    if (max) cube_status_free(cube__kc_evict(&d, max, NULL, NULL, NULL));
  }
  free(staged);
  free(existed);
  return st;
}

cube_status_t cube__bundle_import(const char* path, const char* device, cube__bundle_head_t* out) {
  memset(out, 0, sizeof(*out));
  /* Opened without following a link and without blocking (a FIFO planted
   * at the path would hold the open until someone writes it), then checked
   * on the descriptor: a regular file of this user that nobody else may
   * write (src/platform/private_file.h). */
  char why[256] = "";
  cube__file_refusal_t refusal;
  int fd = cube__file_open_trusted(path, &refusal, why, sizeof(why));
  if (fd < 0) {
    if (refusal == CUBE__FILE_ABSENT)
      return cube__status_make(CUBE_STATUS_NOT_FOUND, "bundle '%s': %s", path, why);
    if (refusal == CUBE__FILE_UNREADABLE)
      return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION, "bundle '%s': %s", path, why);
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION, "bundle '%s' is not read: %s",
                             path, why);
  }
  struct stat fst;
  if (fstat(fd, &fst) != 0) {
    int e = errno;
    close(fd);
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION, "bundle '%s': fstat: %s", path,
                             strerror(e));
  }
  size_t size = (size_t)fst.st_size;
  out->bytes = (uint64_t)size;
  if (size < 8 + 4 + 4 + 16) {
    close(fd);
    return CUBE_INVALID("bundle '%s' is not a bundle: %zu bytes", path, size);
  }
  void* map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "bundle '%s': mmap of %zu bytes: %s", path,
                             size, strerror(errno));
  const unsigned char* p = map;
  cube_status_t st = CUBE_OK;
  if (memcmp(p, CUBE__BUNDLE_MAGIC, 8) != 0) {
    st = CUBE_INVALID("bundle '%s' is not a bundle (bad magic, expected \"%s\")", path,
                      CUBE__BUNDLE_MAGIC);
    goto done;
  }
  if (cube__kc_get_u32(p + 8) != CUBE__BUNDLE_FORMAT) {
    st = CUBE_INVALID("bundle '%s' has format %u; this cube reads format %u", path,
                      cube__kc_get_u32(p + 8), CUBE__BUNDLE_FORMAT);
    goto done;
  }
  {
    XXH128_hash_t h = XXH3_128bits(p, size - 16);
    if (h.high64 != cube__kc_get_u64(p + size - 16) || h.low64 != cube__kc_get_u64(p + size - 8)) {
      st = cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "bundle '%s' is damaged (truncated or altered): its checksum does not "
                             "match its %zu bytes",
                             path, size);
      goto done;
    }
  }
  cube__br_t r = {p, 12, size - 16, false};
  uint32_t hl = cube__br_u32(&r);
  const char* head = (const char*)cube__br_take(&r, hl);
  if (!head || hl > 4096) {
    st = CUBE_INVALID("bundle '%s': its header runs past the end", path);
    goto done;
  }
  char entries_s[32];
  cube__kc_meta_get(head, hl, "cube", out->version, sizeof(out->version));
  cube__kc_meta_get(head, hl, "backend", out->backend, sizeof(out->backend));
  cube__kc_meta_get(head, hl, "device", out->device, sizeof(out->device));
  cube__kc_meta_get(head, hl, "entries", entries_s, sizeof(entries_s));
  uint64_t declared = strtoull(entries_s, NULL, 10);
  /* Walk the entries once to check and count them. */
  size_t first = r.at;
  for (uint64_t i = 0; r.at < r.end; ++i) {
    cube__bundle_entry_t e;
    if (!cube__br_entry(&r, &e, why, sizeof(why))) {
      st = CUBE_INVALID("bundle '%s': %s", path, why);
      goto done;
    }
    char ev[32], ed[512];
    cube__kc_meta_get(e.meta, e.meta_len, "cube", ev, sizeof(ev));
    cube__kc_meta_get(e.meta, e.meta_len, "device", ed, sizeof(ed));
    if (strcmp(ev, out->version) != 0 || strcmp(ed, out->device) != 0) {
      st = CUBE_INVALID("bundle '%s': entry %llu (%s) was made for another version or device "
                        "than its header says",
                        path, (unsigned long long)i, e.kind);
      goto done;
    }
    out->entries++;
    if (cube__bundle_is_kernel(e.kind))
      out->kernels++;
    else
      out->tunings++;
  }
  if (out->entries != declared) {
    st = CUBE_INVALID("bundle '%s' holds %llu entries, its header says %llu", path,
                      (unsigned long long)out->entries, (unsigned long long)declared);
    goto done;
  }
  if (!device) goto done; /* describe only */
  if (strcmp(out->version, CUBE_VERSION_STRING) != 0) {
    st = cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "bundle '%s' was made by cube %s, this is cube %s: its compiled "
                           "kernels and tuning results do not apply",
                           path, out->version, CUBE_VERSION_STRING);
    goto done;
  }
  if (strcmp(out->device, device) != 0) {
    st = cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "bundle '%s' was made for device '%s', this client's device is '%s'",
                           path, out->device, device);
    goto done;
  }
  st = cube__bundle_store_all(path, &r, first, out->entries);
done:
  munmap(map, size);
  return st;
}
