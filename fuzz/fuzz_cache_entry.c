/* fuzz_cache_entry: the kernel cache's disk entries (src/kernel/cache.h).
 *
 * A private CUBE_CACHE_DIR (mkdtemp under TMPDIR, removed at exit) holds the
 * entry <dir>/v2/<32 hex>.<kind> of one fixed key. The first input byte picks
 * how the file is made:
 *   0  the remaining bytes are the whole file;
 *   1  a valid entry is framed around the bytes (header computed here), then
 *      a few fuzzed mutations (xor, truncate, append) are applied;
 *   2  cube__cache_disk_store writes the payload (must load back exactly),
 *      then the file is mutated as in 1;
 *   3  no file, a directory, or a symlink to a valid entry (O_NOFOLLOW).
 * Then cube__cache_disk_load must return exactly the stored payload when the
 * file is a valid entry (checked here independently: magic, version, length,
 * XXH3-64) and NOT_FOUND otherwise (a corrupt file is deleted); never crash
 * and never leak (LeakSanitizer runs with libFuzzer). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/status.h"
#include "fuzz_input.h"
#include "kernel/cache.h"

/* "CUBEKC02", u32 version, u32 metadata length, u64 payload length, u64
 * XXH3-64 of metadata and payload (kernel/cache_internal.h, format 2). */
#define HEADER 32
#define MAX_FILE (64 * 1024)

static char g_dir[PATH_MAX];
static char g_sub[PATH_MAX];

static void cleanup_dir(void) {
  if (g_dir[0]) fz_rm_tree(g_dir);
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fz_private_dir("cube-fuzz-cache", g_dir, sizeof(g_dir));
  snprintf(g_sub, sizeof(g_sub), "%s/v2", g_dir);
  if (mkdir(g_sub, 0700) != 0) {
    perror("fuzz_cache_entry: mkdir");
    abort();
  }
  setenv("CUBE_CACHE_DIR", g_dir, 1);
  atexit(cleanup_dir);
  return 0;
}

static void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= (uint32_t)p[i] << (8 * i);
  return v;
}

/* The format, checked independently of the library. */
static bool entry_valid(const uint8_t* file, size_t n) {
  if (n < HEADER) return false;
  if (memcmp(file, "CUBEKC02", 8) != 0) return false;
  if (get_u32(file + 8) != 2) return false;
  uint32_t m = get_u32(file + 12);
  if (m > 4096 || (uint64_t)m > n - HEADER) return false;
  if (get_u64(file + 16) != (uint64_t)(n - HEADER - m)) return false;
  return XXH3_64bits(file + HEADER, n - HEADER) == get_u64(file + 24);
}

/* The metadata length of a valid entry. */
static size_t meta_len(const uint8_t* file) { return get_u32(file + 12); }

static size_t frame(const uint8_t* payload, size_t n, uint8_t* out) {
  memcpy(out, "CUBEKC02", 8);
  put_u32(out + 8, 2);
  put_u32(out + 12, 0); /* no metadata */
  put_u64(out + 16, n);
  put_u64(out + 24, XXH3_64bits(payload, n));
  if (n) memcpy(out + HEADER, payload, n);
  return HEADER + n;
}

static void write_file(const char* path, const uint8_t* d, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FZ_ASSERT(fd >= 0, "open %s: %s", path, strerror(errno));
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, d + done, n - done);
    FZ_ASSERT(w > 0, "write %s: %s", path, strerror(errno));
    done += (size_t)w;
  }
  close(fd);
}

static size_t read_file(const char* path, uint8_t* out, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  FZ_ASSERT(fd >= 0, "open %s: %s", path, strerror(errno));
  size_t done = 0;
  for (;;) {
    ssize_t r = read(fd, out + done, cap - done);
    if (r <= 0) break;
    done += (size_t)r;
    if (done == cap) break;
  }
  close(fd);
  return done;
}

/* Fuzzed mutations of |buf| (|*n| bytes, capacity |cap|). */
static void mutate(fz_t* f, uint8_t* buf, size_t* n, size_t cap) {
  unsigned count = fz_u8(f) % 5;
  for (unsigned i = 0; i < count; ++i) {
    uint8_t kind = fz_u8(f);
    uint16_t pos = fz_u16(f);
    uint8_t val = fz_u8(f);
    switch (kind % 4) {
      case 0: /* flip a byte (biased to the header) */
        if (*n) buf[(kind & 4) ? pos % (*n < HEADER ? *n : HEADER) : pos % *n] ^= (uint8_t)(val | 1);
        break;
      case 1: /* truncate */
        *n = *n ? pos % *n : 0;
        break;
      case 2: /* append */
        for (unsigned k = 0; k < (val & 15) + 1u && *n < cap; ++k) buf[(*n)++] = (uint8_t)(val + k);
        break;
      default: /* overwrite the length field */
        if (*n >= HEADER) put_u64(buf + 16, (kind & 8) ? (uint64_t)pos : get_u64(buf + 16) + val);
        break;
    }
  }
}

static const char* const kinds[] = {"so", "cubin", "clbin", "x0123456789ABCD"};

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz_t f = fz_make(data, size);
  uint8_t mode = fz_u8(&f);
  const char* kind = kinds[(mode >> 2) & 3];
  uint8_t kb = fz_u8(&f);
  char kpart[8];
  snprintf(kpart, sizeof(kpart), "k%u", kb & 7);
  const char* parts[] = {"fuzz_cache_entry", kpart, NULL};
  cube__cache_key_t key = cube__cache_key(parts);
  char hex[33];
  cube__cache_key_hex(key, hex);
  FZ_ASSERT(strlen(hex) == 32, "key hex is %zu chars", strlen(hex));
  for (int i = 0; i < 32; ++i)
    FZ_ASSERT((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f'),
              "key hex '%s' is not lower-case hex", hex);
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s.%s", g_sub, hex, kind);
  char lib_path[PATH_MAX];
  cube_status_t st = cube__cache_entry_path(key, kind, lib_path, sizeof(lib_path));
  FZ_ASSERT(st == CUBE_OK && strcmp(lib_path, path) == 0, "entry path '%s', expected '%s' (%s)",
            lib_path, path, cube_status_message(st));

  static uint8_t file[MAX_FILE + 2 * HEADER + 128];
  size_t n = 0;
  const uint8_t* rest;
  bool present = true;
  switch (mode & 3) {
    case 0:
      n = fz_take(&f, MAX_FILE, &rest);
      memcpy(file, rest, n);
      write_file(path, file, n);
      break;
    case 1: {
      uint16_t plen = fz_u16(&f);
      size_t k = fz_take(&f, plen % 4096, &rest);
      uint8_t payload[4096];
      memcpy(payload, rest, k);
      n = frame(payload, k, file);
      mutate(&f, file, &n, sizeof(file));
      write_file(path, file, n);
      break;
    }
    case 2: {
      uint16_t plen = fz_u16(&f);
      size_t k = fz_take(&f, plen % 4096, &rest);
      uint8_t payload[4096];
      memcpy(payload, rest, k);
      st = cube__cache_disk_store(key, kind, payload, k);
      FZ_ASSERT(st == CUBE_OK, "store of %zu bytes: %s", k, cube_status_message(st));
      n = read_file(path, file, sizeof(file));
      FZ_ASSERT(entry_valid(file, n) && n == HEADER + meta_len(file) + k,
                "stored entry is not in the format");
      FZ_ASSERT(memcmp(file + HEADER + meta_len(file), payload, k) == 0, "stored payload differs");
      void* out = NULL;
      size_t out_n = 1;
      st = cube__cache_disk_load(key, kind, &out, &out_n);
      FZ_ASSERT(st == CUBE_OK && out_n == k && (k == 0 || memcmp(out, payload, k) == 0),
                "stored entry does not load back: %s", cube_status_message(st));
      free(out);
      mutate(&f, file, &n, sizeof(file));
      write_file(path, file, n);
      break;
    }
    default: {
      uint8_t how = fz_u8(&f);
      present = false;
      if (how % 3 == 1) {
        FZ_ASSERT(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
      } else if (how % 3 == 2) {
        char target[PATH_MAX + 8];
        snprintf(target, sizeof(target), "%s.target", path);
        uint8_t payload[16] = "symlinked entry";
        n = frame(payload, sizeof(payload), file);
        write_file(target, file, n);
        FZ_ASSERT(symlink(target, path) == 0, "symlink: %s", strerror(errno));
      }
      break;
    }
  }

  bool valid = present && entry_valid(file, n);
  void* out = (void*)1;
  size_t out_n = 12345;
  st = cube__cache_disk_load(key, kind, &out, &out_n);
  cube_status_code_t code = cube_status_code(st);
  if (valid) {
    FZ_ASSERT(code == CUBE_STATUS_OK, "valid entry of %zu bytes not loaded: %s", n,
              cube_status_message(st));
    const size_t m = meta_len(file);
    FZ_ASSERT(out_n == n - HEADER - m, "loaded %zu bytes, payload is %zu", out_n, n - HEADER - m);
    FZ_ASSERT(out != NULL, "NULL payload on success");
    FZ_ASSERT(out_n == 0 || memcmp(out, file + HEADER + m, out_n) == 0, "loaded payload differs");
    free(out);
    /* The entry stays. */
    struct stat sb;
    FZ_ASSERT(lstat(path, &sb) == 0, "a valid entry was deleted");
  } else {
    FZ_ASSERT(code == CUBE_STATUS_NOT_FOUND, "invalid entry (%zu bytes): %s: %s", n,
              cube_status_code_name(code), cube_status_message(st));
    FZ_ASSERT(out == NULL && out_n == 0, "failed load left outputs set");
    struct stat sb;
    if (present)
      FZ_ASSERT(lstat(path, &sb) != 0, "a corrupt entry was not deleted");
    cube_status_free(st);
  }

  /* Leave the directory empty for the next input. */
  struct stat sb;
  if (lstat(path, &sb) == 0) {
    if (S_ISDIR(sb.st_mode))
      rmdir(path);
    else
      unlink(path);
  }
  char target[PATH_MAX + 8];
  snprintf(target, sizeof(target), "%s.target", path);
  unlink(target);
  return 0;
}
