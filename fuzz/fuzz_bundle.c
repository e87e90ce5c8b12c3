/* fuzz_bundle: bundle import (src/kernel/cache_bundle.c, cube/bundle.h) of a
 * file decoded from the input, into a private CUBE_CACHE_DIR.
 *
 * The first input byte picks how the file is made:
 *   0  the remaining bytes are the whole file;
 *   1  "CUBEBNDL", format 1, the remaining bytes, then their XXH3-128: a
 *      file whose checksum holds around a fuzzed header and entries;
 *   2  a well-formed bundle built from the input (a header naming this cube
 *      version and the device "fuzzdev", or a fuzzed one; up to 8 entries
 *      of fuzzed kind, key, metadata and payload; the entry count the header
 *      states, right or off by one), checksummed, then sometimes one byte
 *      flipped or the file cut short.
 * The file is described (cube__bundle_import without a device), then
 * imported for "fuzzdev".
 *
 * Checked: no crash, no sanitizer report, no leak; a failure is a status
 * with a message; for a bundle of mode 2 left intact, the description's
 * counts are the entries built, and when the import succeeds every entry
 * (the last one of each key and kind) loads back from the cache directory
 * byte for byte; a file that is not a bundle (mode 0 without the magic) is
 * refused; an import that fails adds no entry to the directory. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "cube/cube.h"
#include "cube/status.h"
#include "fuzz_input.h"
#include "kernel/cache.h"

#define CHECK(cond) FZ_CHECK(cond)

#define MAX_FILE (256 * 1024)
#define MAX_ENTRIES 8

static char g_dir[PATH_MAX];
static char g_cache[PATH_MAX];
static char g_file[PATH_MAX];

static void cleanup_dir(void) {
  if (g_dir[0]) fz_rm_tree(g_dir);
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fz_private_dir("cube-fuzz-bundle", g_dir, sizeof(g_dir));
  atexit(cleanup_dir);
  snprintf(g_cache, sizeof(g_cache), "%s/cache", g_dir);
  snprintf(g_file, sizeof(g_file), "%s/in.bundle", g_dir);
  setenv("CUBE_CACHE_DIR", g_cache, 1);
  unsetenv("CUBE_CACHE_MAX");
  return 0;
}

/* A growing byte buffer (bounded by MAX_FILE + the framing). */
typedef struct buf {
  unsigned char* p;
  size_t n, cap;
} buf_t;

static void put(buf_t* b, const void* p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = (b->n + n) * 2;
    unsigned char* q = realloc(b->p, cap);
    if (!q) abort();
    b->p = q;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
}

static void put_u32(buf_t* b, uint32_t v) {
  unsigned char x[4];
  for (int i = 0; i < 4; ++i) x[i] = (unsigned char)(v >> (8 * i));
  put(b, x, 4);
}

static void put_u64(buf_t* b, uint64_t v) {
  unsigned char x[8];
  for (int i = 0; i < 8; ++i) x[i] = (unsigned char)(v >> (8 * i));
  put(b, x, 8);
}

static void put_sum(buf_t* b) {
  XXH128_hash_t h = XXH3_128bits(b->p, b->n);
  put_u64(b, h.high64);
  put_u64(b, h.low64);
}

typedef struct entry {
  char kind[16];
  cube__cache_key_t key;
  const uint8_t* payload;
  size_t payload_len;
} entry_t;

static const char* const kinds[] = {"so", "cubin", "ptx", "clbin", "tune", "x9"};

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > MAX_FILE) return 0;
  fz_t in = fz_make(data, size);
  const uint8_t mode = fz_u8(&in) % 3;
  buf_t b = {0};
  entry_t entries[MAX_ENTRIES];
  unsigned built = 0;
  bool intact = false;
  if (mode == 0) {
    put(&b, in.p, in.n);
  } else if (mode == 1) {
    put(&b, "CUBEBNDL", 8);
    put_u32(&b, 1);
    put(&b, in.p, in.n);
    put_sum(&b);
  } else {
    const uint8_t shape = fz_u8(&in);
    built = fz_u8(&in) % (MAX_ENTRIES + 1);
    const char* version = (shape & 1) ? "0.0.0-other" : CUBE_VERSION_STRING;
    const char* device = (shape & 2) ? "otherdev" : "fuzzdev";
    const unsigned declared = (shape & 4) ? built + 1 : built;
    char head[256];
    int hl = snprintf(head, sizeof(head), "cube=%s\nbackend=cpu\ndevice=%s\nentries=%u\n",
                      version, device, declared);
    put(&b, "CUBEBNDL", 8);
    put_u32(&b, 1);
    put_u32(&b, (uint32_t)hl);
    put(&b, head, (size_t)hl);
    for (unsigned i = 0; i < built; ++i) {
      entry_t* e = &entries[i];
      snprintf(e->kind, sizeof(e->kind), "%s", kinds[fz_u8(&in) % 6]);
      /* Few distinct keys, so that later entries replace earlier ones. */
      e->key.hi = fz_u8(&in) % 4;
      e->key.lo = 0x9e3779b97f4a7c15ull;
      const uint8_t extra = fz_u8(&in) % 16;
      char meta[128];
      int ml = snprintf(meta, sizeof(meta), "cube=%s\ndevice=%s\nname=k%u\n", version,
                        (shape & 8) && i == built - 1 ? "elsewhere" : device, i);
      const size_t plen = fz_u16(&in) % 2048;
      e->payload_len = plen <= in.n ? plen : in.n;
      e->payload = in.p;
      in.p += e->payload_len;
      in.n -= e->payload_len;
      const uint8_t kl = (uint8_t)strlen(e->kind);
      put(&b, &kl, 1);
      put(&b, e->kind, kl);
      put_u64(&b, e->key.hi);
      put_u64(&b, e->key.lo);
      put_u32(&b, (uint32_t)ml + extra);
      put(&b, meta, (size_t)ml);
      for (uint8_t k = 0; k < extra; ++k) put(&b, "z", 1);
      put_u64(&b, e->payload_len);
      put(&b, e->payload, e->payload_len);
    }
    put_sum(&b);
    intact = !(shape & (1 | 2 | 4 | 8));
    const uint8_t damage = fz_u8(&in);
    if ((damage & 3) == 1 && b.n) {
      b.p[fz_u16(&in) % b.n] ^= (uint8_t)(1u << (damage >> 5));
      intact = false;
    } else if ((damage & 3) == 2 && b.n) {
      b.n = fz_u16(&in) % b.n;
      intact = false;
    }
  }

  /* Write the file fresh (0600, this user). */
  unlink(g_file);
  int fd = open(g_file, O_WRONLY | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0);
  CHECK(b.n == 0 || write(fd, b.p, b.n) == (ssize_t)b.n);
  close(fd);

  const bool verbose = getenv("FUZZ_VERBOSE") != NULL;
  cube__bundle_head_t head;
  cube_status_t st = cube__bundle_import(g_file, NULL, &head);
  if (verbose)
    fprintf(stderr, "mode %u, %zu bytes, intact %d: describe: %s\n", mode, b.n, intact,
            st ? cube_status_message(st) : "ok");
  if (st) {
    CHECK(cube_status_message(st)[0] != '\0');
    cube_status_free(st);
    CHECK(!intact);
  } else if (intact) {
    CHECK(head.entries == built);
  }
  if (mode == 0 && (b.n < 8 || memcmp(b.p, "CUBEBNDL", 8) != 0)) CHECK(st != CUBE_OK);

  fz_rm_tree(g_cache);
  st = cube__bundle_import(g_file, "fuzzdev", &head);
  if (verbose)
    fprintf(stderr, "  import: %s (%u files)\n", st ? cube_status_message(st) : "ok",
            fz_tree(g_cache, false));
  if (st) {
    CHECK(cube_status_message(st)[0] != '\0');
    cube_status_free(st);
    CHECK(!intact);
    /* All or none: nothing of a failed import stays. */
    CHECK(fz_tree(g_cache, false) == 0);
  } else if (intact) {
    for (unsigned i = 0; i < built; ++i) {
      bool later = false;
      for (unsigned j = i + 1; j < built; ++j)
        later |= entries[j].key.hi == entries[i].key.hi &&
                 strcmp(entries[j].kind, entries[i].kind) == 0;
      if (later) continue;
      void* got = NULL;
      size_t got_size = 0;
      st = cube__cache_disk_load(entries[i].key, entries[i].kind, &got, &got_size);
      if (st) {
        fprintf(stderr, "fuzz_bundle: entry %u (%s) does not load back: %s\n", i,
                entries[i].kind, cube_status_message(st));
        abort();
      }
      CHECK(got_size == entries[i].payload_len);
      CHECK(got_size == 0 || memcmp(got, entries[i].payload, got_size) == 0);
      free(got);
    }
  }
  free(b.p);
  return 0;
}
