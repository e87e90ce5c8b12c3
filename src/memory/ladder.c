/* Default pool configurations (docs/cubecl.md, "Memory: the page ladder and configuration"). */
#include <math.h>

#include "memory/memory.h"

#define CUBE__MIB (1024ull * 1024ull)
#define CUBE__GIB (1024ull * CUBE__MIB)
#define CUBE__LADDER_STOP (32ull * CUBE__MIB)
#define CUBE__EXCLUSIVE_MIN_BUCKET (32ull * 1024ull)
#define CUBE__EXCLUSIVE_BUCKETS 24

static uint64_t cube__ladder_round_up(uint64_t x, uint64_t a) {
  uint64_t r = x % a;
  return r ? x + (a - r) : x;
}

/* At most CUBE_MAX_POOLS - 1 dynamic pools: a memory report also lists the
 * persistent pool. */
#define CUBE__LADDER_CAP (CUBE_MAX_POOLS - 1)

static uint32_t cube__ladder_subslices(uint64_t max_page, uint64_t a, cube__pool_options_t* out) {
  uint32_t n = 0;
  out[n++] = (cube__pool_options_t){.kind = CUBE_POOL_EXCLUSIVE, .page_size = 0, .max_alloc_size = 0, .dealloc_period = 0};

  /* Computed largest first, listed smallest first. The step cap also stops
   * the loop when a huge alignment keeps |current| from shrinking. */
  cube__pool_options_t steps[CUBE__LADDER_CAP];
  uint32_t count = 0;
  uint64_t current = max_page;
  for (unsigned k = 1; current >= CUBE__LADDER_STOP && count < CUBE__LADDER_CAP - 2; ++k) {
    current = cube__ladder_round_up(current / 4, a);
    uint64_t max_slice = k < 64 ? current >> k : 0;
    steps[count++] = (cube__pool_options_t){.kind = CUBE_POOL_SLICED, .page_size = current, .max_alloc_size = max_slice, .dealloc_period = 0};
  }
  while (count > 0) out[n++] = steps[--count];

  uint64_t tail = max_page / a * a;
  out[n++] = (cube__pool_options_t){.kind = CUBE_POOL_SLICED, .page_size = tail, .max_alloc_size = tail, .dealloc_period = 0};
  return n;
}

static uint32_t cube__ladder_exclusive(uint64_t max_page, uint64_t a, cube__pool_options_t* out) {
  uint32_t n = 0;
  double ln_min = log((double)CUBE__EXCLUSIVE_MIN_BUCKET);
  double ln_max = log((double)(max_page ? max_page : 1));
  for (int i = 0; i < CUBE__EXCLUSIVE_BUCKETS; ++i) {
    double v = exp(ln_min + (ln_max - ln_min) * (double)i / (double)(CUBE__EXCLUSIVE_BUCKETS - 1));
    uint64_t size = v >= 18446744073709549568.0 ? UINT64_MAX / a * a : (uint64_t)v;
    size = cube__ladder_round_up(size, a);
    if (n > 0 && out[n - 1].max_alloc_size == size) continue;
    uint64_t period = 5000u * (uint64_t)llround(1.0 + (double)size / (double)CUBE__GIB);
    out[n++] = (cube__pool_options_t){.kind = CUBE_POOL_EXCLUSIVE, .page_size = 0, .max_alloc_size = size, .dealloc_period = period};
  }
  return n;
}

/* The fitted ladder (docs/observability.md, "Memory that is not wasted"):
 * zero-size requests in pool 0 as in SubSlices; requests up to half a small
 * page sliced in pages of CUBE__FIT_SMALL_PAGE (or max_page when smaller),
 * so that a stream's first small buffer holds 2 MiB, not a ladder page;
 * every larger request in a fitted exclusive pool: a storage buffer of its
 * own size rounded up to |granule|, which the manager gives back when the
 * pools would grow past what is in use (cube__mm_make_room). */
#define CUBE__FIT_SMALL_PAGE (2ull * CUBE__MIB)

static uint32_t cube__ladder_fitted(uint64_t max_page, uint64_t a, uint64_t granule,
                                    cube__pool_options_t* out) {
  uint32_t n = 0;
  out[n++] = (cube__pool_options_t){.kind = CUBE_POOL_EXCLUSIVE, .page_size = 0, .max_alloc_size = 0, .dealloc_period = 0};
  uint64_t top = max_page / a * a;
  uint64_t small = cube__ladder_round_up(CUBE__FIT_SMALL_PAGE, a);
  if (small > top) small = top;
  if (small > 0) {
    out[n++] = (cube__pool_options_t){.kind = CUBE_POOL_SLICED, .page_size = small, .max_alloc_size = small / 2, .dealloc_period = 0};
  }
  uint64_t g = cube__ladder_round_up(granule ? granule : a, a);
  out[n++] = (cube__pool_options_t){.kind = CUBE_POOL_EXCLUSIVE, .page_size = g, .max_alloc_size = top, .dealloc_period = 0};
  return n;
}

uint32_t cube__pool_ladder(cube_memory_config_t config, uint64_t max_page_size,
                           uint64_t alignment, uint64_t granule, cube__pool_options_t* out) {
  uint64_t a = alignment ? alignment : 1;
  if (config == CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES) return cube__ladder_exclusive(max_page_size, a, out);
  if (config == CUBE_MEMORY_CONFIG_SUBSLICES) return cube__ladder_subslices(max_page_size, a, out);
  return cube__ladder_fitted(max_page_size, a, granule, out);
}
