// cube-test-libs: cube_mod_base
/* The platform layer's cube__prefault: pages of a copy's source or
 * destination mapped ahead of the copy, contents unchanged, and no harm from
 * memory that cannot be prefaulted. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "base/alloc.h"
#include "platform/platform.h"

static size_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

/* Pages of [p, p + n) that are mapped, by mincore (SIZE_MAX: it failed). */
static size_t resident_pages(void* p, size_t n) {
  size_t pages = n / page_size();
  unsigned char* v = calloc(pages, 1);
  if (!v || mincore(p, n, v) != 0) {
    free(v);
    return SIZE_MAX;
  }
  size_t in = 0;
  for (size_t i = 0; i < pages; ++i) in += v[i] & 1;
  free(v);
  return in;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Whether this kernel populates on advice (Linux 5.14 and later): asked
 * directly on a mapping of its own. */
static bool kernel_populates(int advice) {
  size_t n = 4 * page_size();
  void* q = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (q == MAP_FAILED) return false;
  bool ok = madvise(q, n, advice) == 0;
  munmap(q, n);
  return ok;
}

/* A fresh anonymous mapping, never touched (NULL: none). */
static void* fresh(size_t n) {
  void* p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* A mapping of |pages| never touched, prefaulted over [lo, len - hi) for
 * reading or writing: every page is mapped after it (the pages around the
 * range count too) and it still reads as zeros. Skipped where the kernel
 * does not populate on advice (before Linux 5.14). */
static void check_untouched(bool write, size_t pages, size_t lo, size_t hi) {
  const size_t pg = page_size(), n = pages * pg;
  uint8_t* p = fresh(n);
  REQUIRE(p);
  CHECK_EQ_U64(resident_pages(p, n), 0);
  cube__prefault(p + lo, n - lo - hi, write);
  size_t in = resident_pages(p, n);
  REQUIRE(in != SIZE_MAX);
  if (!kernel_populates(write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ)) {
    munmap(p, n);
    CUBE_SKIP("the kernel does not populate on advice (MADV_POPULATE_%s)",
              write ? "WRITE" : "READ");
  }
  CHECK_EQ_U64(in, pages);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) nonzero += p[i] != 0;
  CHECK_EQ_U64(nonzero, 0);
  munmap(p, n);
}

/* A source never touched (an odd offset and length). */
CUBE_TEST(untouched_source_is_mapped) { check_untouched(false, 97, 13, 7); }

/* A destination never touched. */
CUBE_TEST(untouched_destination_is_mapped) { check_untouched(true, 64, 0, 0); }

/* Memory with contents, partly mapped (every third page written): the
 * contents are what they were, byte for byte, after both kinds of prefault;
 * and the pages that were not mapped are now. */
CUBE_TEST(contents_unchanged) {
  const size_t pg = page_size(), n = 90 * pg;
  uint8_t* p = fresh(n);
  REQUIRE(p);
  uint8_t* want = calloc(n, 1);
  REQUIRE(want);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t pgi = 0; pgi < n / pg; pgi += 3)
    for (size_t i = pgi * pg; i < (pgi + 1) * pg; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      p[i] = want[i] = (uint8_t)x;
    }
  cube__prefault(p, n, false);
  CHECK(memcmp(p, want, n) == 0);
  cube__prefault(p, n, true);
  CHECK(memcmp(p, want, n) == 0);
  free(want);
  munmap(p, n);
}

/* Nothing to do, or nothing that can be done: NULL, a range shorter than two
 * pages, memory that is no longer mapped, read-only memory asked for a
 * write. None of them fails or faults. */
CUBE_TEST(harmless_where_it_cannot_act) {
  const size_t pg = page_size(), n = 16 * pg;
  cube__prefault(NULL, n, false);
  uint8_t small[64] = {1};
  cube__prefault(small, sizeof small, true);
  CHECK_EQ_U64(small[0], 1);
  uint8_t* gone = fresh(n);
  REQUIRE(gone);
  REQUIRE(munmap(gone, n) == 0);
  cube__prefault(gone, n, false);
  cube__prefault(gone, n, true);
  uint8_t* ro = mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(ro != MAP_FAILED);
  cube__prefault(ro, n, true); /* refused by the kernel: ignored */
  cube__prefault(ro, n, false);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) nonzero += ro[i] != 0;
  CHECK_EQ_U64(nonzero, 0);
  munmap(ro, n);
}
